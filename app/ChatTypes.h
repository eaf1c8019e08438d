// Plain records of the chat domain shared by the store, the models and the session.
#pragma once

#include <QDateTime>
#include <QString>
#include <cstdint>

namespace desk {

enum class MessageRole { System, User, Model };
QString roleToString(MessageRole role);
MessageRole roleFromString(const QString& text);

struct MessageStats {
    bool valid = false;
    int promptTokens = 0;
    int generatedTokens = 0;
    double timeToFirstTokenMs = 0.0;
    double tokensPerSecond = 0.0;
    QString stopReason;
};

struct MessageRecord {
    qint64 id = 0;  // database id; 0 until stored
    MessageRole role = MessageRole::User;
    QString text;
    bool streaming = false;  // the model is still writing it (or was, when the app died)
    QString error;           // why generation failed, shown under the message
    MessageStats stats;
    QDateTime createdAt;
};

struct SamplingSettings {
    double temperature = 1.0;  // Gemma 4's recommended defaults
    int topK = 64;
    double topP = 0.95;
    double minP = 0.0;
    double repeatPenalty = 1.0;
    int maxTokens = 1024;
    quint64 seed = 0;  // 0: a fresh random seed per generation
    bool operator==(const SamplingSettings&) const = default;
};

struct ConversationRecord {
    qint64 id = 0;
    QString title;
    QString systemPrompt;
    SamplingSettings sampling;
    QDateTime createdAt;
    QDateTime updatedAt;
};

// "42 prompt tokens · 180 ms to first token · 35.2 tok/s"
QString formatStats(const MessageStats& stats);

}  // namespace desk
