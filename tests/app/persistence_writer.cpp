// Test helper for test_persistence: writes a conversation the way the app does, forever, and
// reports each committed write on stdout so the test knows what must survive a kill -9.
//
//   persistence_writer DB_PATH COMPLETE_MESSAGES
// Output lines: "message <id> <chars>" after each complete message, then
// "flushed <id> <chars>" after each streaming flush (every ~2 ms) until killed.
#include <QCoreApplication>
#include <QThread>
#include <cstdio>

#include "ConversationStore.h"

namespace {
// Deterministic content so the test can recompute what each message must contain.
QString completeText(int index) { return QStringLiteral("Complete message %1. ").arg(index).repeated(20); }
QString streamChunk(int index) { return QStringLiteral("token%1 ").arg(index); }
}  // namespace

int main(int argc, char** argv) {
    QCoreApplication application(argc, argv);
    if (argc < 3) {
        std::fprintf(stderr, "usage: persistence_writer DB_PATH COMPLETE_MESSAGES\n");
        return 2;
    }
    desk::ConversationStore store;
    QString error;
    if (!store.open(QString::fromLocal8Bit(argv[1]), &error)) {
        std::fprintf(stderr, "%s\n", qPrintable(error));
        return 1;
    }
    const qint64 conversation = store.createConversation(QStringLiteral("Crash test"), QString(), {});
    const int complete = std::atoi(argv[2]);
    for (int index = 0; index < complete; ++index) {
        desk::MessageRecord message;
        message.role = index % 2 ? desk::MessageRole::Model : desk::MessageRole::User;
        message.text = completeText(index);
        const qint64 id = store.appendMessage(conversation, message);
        std::printf("message %lld %lld\n", static_cast<long long>(id), static_cast<long long>(message.text.size()));
        std::fflush(stdout);
    }
    desk::MessageRecord streaming;
    streaming.role = desk::MessageRole::Model;
    streaming.streaming = true;
    streaming.id = store.appendMessage(conversation, streaming);
    QString text;
    for (int index = 0;; ++index) {
        text += streamChunk(index);
        if (!store.flushStreamingText(streaming.id, text)) {
            std::fprintf(stderr, "flush failed: %s\n", qPrintable(store.lastError()));
            return 1;
        }
        std::printf("flushed %lld %lld\n", static_cast<long long>(streaming.id), static_cast<long long>(text.size()));
        std::fflush(stdout);
        QThread::usleep(2000);
    }
}
