// Conversations survive: a round trip through SQLite, and a writer process killed with SIGKILL in
// the middle of streaming leaves a database that passes PRAGMA integrity_check with every message
// it reported as written intact (the streaming one up to its last flush).
#include <QProcess>
#include <QSqlDatabase>
#include <QSqlQuery>
#include <QTemporaryDir>
#include <QTest>

#include "ConversationStore.h"

using namespace desk;

class PersistenceTest : public QObject {
    Q_OBJECT
private slots:
    void roundTrip() {
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("chat.sqlite"));
        SamplingSettings sampling;
        sampling.temperature = 0.7;
        sampling.topK = 40;
        sampling.seed = 1234567890123ULL;
        qint64 conversation = 0;
        qint64 replyId = 0;
        {
            ConversationStore store;
            QVERIFY(store.open(path));
            conversation = store.createConversation(QStringLiteral("Round trip"), QStringLiteral("Be terse."), sampling);
            QVERIFY(conversation > 0);
            MessageRecord user;
            user.role = MessageRole::User;
            user.text = QStringLiteral("Unicode survives: \u00e9\u4e2d\U0001F600 and 'quotes' \"too\"");
            QVERIFY2(store.appendMessage(conversation, user) > 0, qPrintable(store.lastError()));
            MessageRecord reply;
            reply.role = MessageRole::Model;
            reply.streaming = true;
            replyId = store.appendMessage(conversation, reply);
            QVERIFY(store.flushStreamingText(replyId, QStringLiteral("partial")));
            reply.id = replyId;
            reply.text = QStringLiteral("final **answer**");
            reply.streaming = false;
            reply.stats.valid = true;
            reply.stats.promptTokens = 17;
            reply.stats.generatedTokens = 3;
            reply.stats.timeToFirstTokenMs = 12.5;
            reply.stats.tokensPerSecond = 99.5;
            reply.stats.stopReason = QStringLiteral("end of turn");
            QVERIFY(store.updateMessage(reply));
        }
        ConversationStore reopened;
        QVERIFY(reopened.open(path));
        const auto record = reopened.conversation(conversation);
        QVERIFY(record.has_value());
        QCOMPARE(record->title, QStringLiteral("Round trip"));
        QCOMPARE(record->systemPrompt, QStringLiteral("Be terse."));
        QCOMPARE(record->sampling, sampling);
        const auto messages = reopened.messages(conversation);
        QCOMPARE(messages.size(), 2);
        QCOMPARE(messages[0].text, QStringLiteral("Unicode survives: \u00e9\u4e2d\U0001F600 and 'quotes' \"too\""));
        QCOMPARE(messages[0].role, MessageRole::User);
        QCOMPARE(messages[1].id, replyId);
        QCOMPARE(messages[1].text, QStringLiteral("final **answer**"));
        QVERIFY(!messages[1].streaming);
        QCOMPARE(messages[1].stats.promptTokens, 17);
        QCOMPARE(messages[1].stats.tokensPerSecond, 99.5);
        QCOMPARE(messages[1].stats.stopReason, QStringLiteral("end of turn"));
        QCOMPARE(reopened.integrityCheck(), QStringLiteral("ok"));
        QSqlDatabase raw = QSqlDatabase::addDatabase(QStringLiteral("QSQLITE"), QStringLiteral("raw"));
        raw.setDatabaseName(path);
        QVERIFY(raw.open());
        QSqlQuery mode(raw);
        QVERIFY(mode.exec(QStringLiteral("PRAGMA journal_mode")) && mode.next());
        QCOMPARE(mode.value(0).toString(), QStringLiteral("wal"));
        raw.close();
    }

    void killedWriterLeavesAnIntactDatabase_data() {
        QTest::addColumn<int>("flushesBeforeKill");
        QTest::newRow("early") << 5;
        QTest::newRow("mid") << 60;
        QTest::newRow("late") << 200;
    }

    void killedWriterLeavesAnIntactDatabase() {
        QFETCH(int, flushesBeforeKill);
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("chat.sqlite"));
        const int completeMessages = 6;
        QProcess writer;
        writer.setProcessChannelMode(QProcess::SeparateChannels);
        writer.start(QStringLiteral(PERSISTENCE_WRITER_PATH), {path, QString::number(completeMessages)});
        QVERIFY2(writer.waitForStarted(5000), qPrintable(writer.errorString()));

        QList<QPair<qint64, qint64>> complete;  // id, chars
        qint64 streamingId = 0;
        qint64 flushedChars = 0;
        int flushes = 0;
        QByteArray pending;
        while (flushes < flushesBeforeKill) {
            QVERIFY2(writer.state() == QProcess::Running, writer.readAllStandardError().constData());
            if (!writer.waitForReadyRead(5000)) QFAIL("the writer stopped reporting");
            pending += writer.readAllStandardOutput();
            while (pending.contains('\n')) {
                const qsizetype end = pending.indexOf('\n');
                const QList<QByteArray> parts = pending.left(end).split(' ');
                pending.remove(0, end + 1);
                QCOMPARE(parts.size(), 3);
                if (parts[0] == "message") {
                    complete.append({parts[1].toLongLong(), parts[2].toLongLong()});
                } else {
                    streamingId = parts[1].toLongLong();
                    flushedChars = parts[2].toLongLong();
                    ++flushes;
                }
            }
        }
        writer.kill();  // SIGKILL: no destructors, no commit of whatever was in flight
        QVERIFY(writer.waitForFinished(5000));
        QCOMPARE(writer.exitStatus(), QProcess::CrashExit);

        ConversationStore store;
        QVERIFY(store.open(path));
        QCOMPARE(store.integrityCheck(), QStringLiteral("ok"));
        const auto conversations = store.listConversations();
        QCOMPARE(conversations.size(), 1);
        const auto messages = store.messages(conversations[0].id);
        QCOMPARE(complete.size(), completeMessages);
        QCOMPARE(messages.size(), completeMessages + 1);
        for (int index = 0; index < completeMessages; ++index) {
            QCOMPARE(messages[index].id, complete[index].first);
            QCOMPARE(messages[index].text, QStringLiteral("Complete message %1. ").arg(index).repeated(20));
        }
        const MessageRecord& streamed = messages.last();
        QCOMPARE(streamed.id, streamingId);
        QVERIFY(streamed.streaming);
        // Everything reported as flushed is there; at most the one write in flight is extra.
        QVERIFY2(streamed.text.size() >= flushedChars,
                 qPrintable(QStringLiteral("%1 < %2").arg(streamed.text.size()).arg(flushedChars)));
        QString expected;
        for (int index = 0; expected.size() < streamed.text.size(); ++index)
            expected += QStringLiteral("token%1 ").arg(index);
        QCOMPARE(streamed.text, expected.left(streamed.text.size()));
        QVERIFY(streamed.text.endsWith(QLatin1Char(' ')));  // a whole flush, never half of one
    }
};

QTEST_GUILESS_MAIN(PersistenceTest)
#include "test_persistence.moc"
