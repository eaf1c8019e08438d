// Conversations and messages in SQLite (QtSql), WAL mode. Every write is its own transaction, so
// a process killed mid-stream leaves a consistent database holding everything flushed so far.
// Used from the GUI thread only (writes are small; the streaming message is flushed ~4x/second).
#pragma once

#include <QString>
#include <QVector>
#include <optional>

#include "ChatTypes.h"

namespace desk {

class ConversationStore {
public:
    ConversationStore();
    ~ConversationStore();
    ConversationStore(const ConversationStore&) = delete;
    ConversationStore& operator=(const ConversationStore&) = delete;

    // Opens (creating if needed) the database file and its schema. On failure `error` says why.
    bool open(const QString& databasePath, QString* error = nullptr);
    bool isOpen() const;
    QString path() const { return path_; }

    qint64 createConversation(const QString& title, const QString& systemPrompt, const SamplingSettings& sampling);
    bool renameConversation(qint64 id, const QString& title);
    bool deleteConversation(qint64 id);
    bool setSystemPrompt(qint64 id, const QString& systemPrompt);
    bool setSampling(qint64 id, const SamplingSettings& sampling);
    std::optional<ConversationRecord> conversation(qint64 id) const;
    // Newest first. A non-empty filter matches titles and message text (case-insensitive).
    QVector<ConversationRecord> listConversations(const QString& filter = {}) const;

    QVector<MessageRecord> messages(qint64 conversationId) const;
    qint64 appendMessage(qint64 conversationId, const MessageRecord& message);
    // Rewrites text, streaming flag, error and stats of a stored message.
    bool updateMessage(const MessageRecord& message);
    // The periodic flush of a message being streamed: text only, one transaction.
    bool flushStreamingText(qint64 messageId, const QString& text);
    // Deletes the message and every later one of its conversation (edit-and-resend, regenerate).
    bool deleteMessagesFrom(qint64 conversationId, qint64 messageId);

    QString integrityCheck() const;  // "ok" when the database is sound
    QString lastError() const { return lastError_; }

private:
    bool exec(const QString& sql);
    bool touch(qint64 conversationId);
    QString connectionName_;
    QString path_;
    mutable QString lastError_;
};

QString samplingToJson(const SamplingSettings& sampling);
SamplingSettings samplingFromJson(const QString& json);

}  // namespace desk
