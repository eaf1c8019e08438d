// ChatModel roles, batched appends and edits; the Markdown splitter; default-model lookup.
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include "AppPaths.h"
#include "ChatModel.h"
#include "ConversationListModel.h"
#include "MarkdownSegments.h"

using namespace desk;

class ChatModelTest : public QObject {
    Q_OBJECT
private:
    static MessageRecord message(MessageRole role, const QString& text, qint64 id = 0) {
        MessageRecord record;
        record.role = role;
        record.text = text;
        record.id = id;
        return record;
    }

private slots:
    void rolesExposeEveryField() {
        ChatModel model;
        MessageRecord reply = message(MessageRole::Model, QStringLiteral("**hi**"), 7);
        reply.streaming = true;
        reply.error = QStringLiteral("boom");
        reply.stats.valid = true;
        reply.stats.promptTokens = 42;
        reply.stats.timeToFirstTokenMs = 180;
        reply.stats.tokensPerSecond = 35.25;
        reply.stats.generatedTokens = 9;
        model.appendMessage(message(MessageRole::User, QStringLiteral("hello"), 6));
        model.appendMessage(reply);
        QCOMPARE(model.rowCount(), 2);
        const QModelIndex user = model.index(0);
        const QModelIndex model1 = model.index(1);
        QCOMPARE(user.data(ChatModel::RoleNameRole).toString(), QStringLiteral("user"));
        QCOMPARE(model1.data(ChatModel::RoleNameRole).toString(), QStringLiteral("model"));
        QCOMPARE(model1.data(ChatModel::TextRole).toString(), QStringLiteral("**hi**"));
        QCOMPARE(model1.data(Qt::DisplayRole).toString(), QStringLiteral("**hi**"));
        QCOMPARE(model1.data(ChatModel::MessageIdRole).toLongLong(), 7);
        QCOMPARE(model1.data(ChatModel::StreamingRole).toBool(), true);
        QCOMPARE(model1.data(ChatModel::ErrorRole).toString(), QStringLiteral("boom"));
        const QString stats = model1.data(ChatModel::StatsTextRole).toString();
        QVERIFY2(stats.contains(QStringLiteral("42 prompt tokens")), qPrintable(stats));
        QVERIFY2(stats.contains(QStringLiteral("180 ms to first token")), qPrintable(stats));
        QVERIFY2(stats.contains(QStringLiteral("35.2 tok/s")) || stats.contains(QStringLiteral("35.3 tok/s")), qPrintable(stats));
        QCOMPARE(user.data(ChatModel::StatsTextRole).toString(), QString());
        // The view finds roles by name: the names are part of the contract.
        const auto names = model.roleNames();
        for (const char* name : {"role", "text", "streaming", "statsText", "error", "messageId"})
            QVERIFY2(names.values().contains(QByteArray(name)), name);
        QVERIFY(!model.index(5).data(ChatModel::TextRole).isValid());
    }

    void appendTextIsOneChangePerBatch() {
        ChatModel model;
        model.appendMessage(message(MessageRole::User, QStringLiteral("q")));
        const int row = model.appendMessage(message(MessageRole::Model, QString()));
        QSignalSpy changed(&model, &QAbstractItemModel::dataChanged);
        QSignalSpy inserted(&model, &QAbstractItemModel::rowsInserted);
        model.appendText(row, QStringLiteral("Hello"));
        model.appendText(row, QStringLiteral(", world"));
        model.appendText(row, QString());  // an empty batch changes nothing
        QCOMPARE(changed.count(), 2);
        QCOMPARE(inserted.count(), 0);
        QCOMPARE(changed.at(0).at(0).toModelIndex().row(), row);
        const auto roles = changed.at(1).at(2).value<QList<int>>();
        QVERIFY(roles.contains(ChatModel::TextRole));
        QCOMPARE(model.message(row).text, QStringLiteral("Hello, world"));
        model.appendText(99, QStringLiteral("ignored"));
        QCOMPARE(changed.count(), 2);
    }

    void editsAndTruncation() {
        ChatModel model;
        for (int i = 0; i < 4; ++i)
            model.appendMessage(message(i % 2 ? MessageRole::Model : MessageRole::User, QStringLiteral("m%1").arg(i)));
        QSignalSpy changed(&model, &QAbstractItemModel::dataChanged);
        model.setText(2, QStringLiteral("edited"));
        model.setText(2, QStringLiteral("edited"));  // same text: no signal
        QCOMPARE(changed.count(), 1);
        QCOMPARE(model.message(2).text, QStringLiteral("edited"));
        model.setStreaming(3, true);
        QCOMPARE(model.index(3).data(ChatModel::StreamingRole).toBool(), true);
        QSignalSpy removed(&model, &QAbstractItemModel::rowsRemoved);
        model.removeFrom(2);
        QCOMPARE(model.rowCount(), 2);
        QCOMPARE(removed.count(), 1);
        QCOMPARE(removed.at(0).at(1).toInt(), 2);
        QCOMPARE(removed.at(0).at(2).toInt(), 3);
        QSignalSpy reset(&model, &QAbstractItemModel::modelReset);
        model.clear();
        QCOMPARE(reset.count(), 1);
        QCOMPARE(model.rowCount(), 0);
    }

    void conversationListRoles() {
        ConversationListModel list;
        ConversationRecord a;
        a.id = 3;
        a.title = QStringLiteral("Kernels");
        a.updatedAt = QDateTime::currentDateTime();
        list.setConversations({a});
        QCOMPARE(list.rowCount(), 1);
        QCOMPARE(list.index(0).data(ConversationListModel::ConversationIdRole).toLongLong(), 3);
        QCOMPARE(list.index(0).data(Qt::DisplayRole).toString(), QStringLiteral("Kernels"));
        QCOMPARE(list.index(0).data(ConversationListModel::SubtitleRole).toString(), QStringLiteral("just now"));
        QCOMPARE(list.rowOf(3), 0);
        QCOMPARE(list.rowOf(4), -1);
    }

    void markdownSplitsCodeBlocks() {
        const QString text = QStringLiteral("Intro **bold**\n\n```cpp\nint x = 1;\nint y = 2;\n```\nAfter\n\n~~~\nraw\n");
        const auto segments = deskui::splitMarkdown(text);
        QCOMPARE(segments.size(), 4);
        QVERIFY(!segments[0].code);
        QCOMPARE(segments[0].text.trimmed(), QStringLiteral("Intro **bold**"));
        QVERIFY(segments[1].code);
        QCOMPARE(segments[1].language, QStringLiteral("cpp"));
        QCOMPARE(segments[1].text, QStringLiteral("int x = 1;\nint y = 2;"));
        QCOMPARE(segments[2].text.trimmed(), QStringLiteral("After"));
        QVERIFY(segments[3].code);  // unterminated fence (still streaming) renders as code
        QCOMPARE(segments[3].text, QStringLiteral("raw\n"));
    }

    void markdownCutsLongProseAtParagraphs() {
        QString text;
        for (int i = 0; i < 10; ++i) text += QString(300, QLatin1Char(static_cast<char>('a' + i))) + QStringLiteral("\n\n");
        const auto segments = deskui::splitMarkdown(text, 1000);
        QVERIFY2(segments.size() >= 3, qPrintable(QString::number(segments.size())));
        QString joined;
        for (const auto& segment : segments) {
            QVERIFY(!segment.code);
            QVERIFY(segment.text.size() < 1400);
            joined += segment.text;
        }
        QCOMPARE(joined.count(QLatin1Char('j')), 300);
    }

    void defaultModelSearchOrder() {
        QTemporaryDir dir;
        const QString env = dir.filePath(QStringLiteral("env.gemma"));
        const QString compiled = dir.filePath(QStringLiteral("compiled.gemma"));
        QDir(dir.path()).mkpath(QStringLiteral("bin"));
        QDir(dir.path()).mkpath(QStringLiteral("share/gemma-desk/models"));
        const QString installed = dir.filePath(QStringLiteral("share/gemma-desk/models/default.gemma"));
        DefaultModelSources sources{env, compiled, dir.filePath(QStringLiteral("bin"))};
        QVERIFY(!findDefaultModel(sources).has_value());
        for (const QString& path : {compiled, installed, env}) {  // each new file outranks the earlier ones
            QFile file(path);
            QVERIFY(file.open(QIODevice::WriteOnly));
            file.write("x");
            file.close();
            const auto found = findDefaultModel(sources);
            QVERIFY(found.has_value());
            QCOMPARE(QFileInfo(*found).canonicalFilePath(), QFileInfo(path).canonicalFilePath());
        }
    }
};

QTEST_GUILESS_MAIN(ChatModelTest)
#include "test_chat_model.moc"
