#include "ChatModel.h"

namespace desk {

QString roleToString(MessageRole role) {
    switch (role) {
    case MessageRole::System: return QStringLiteral("system");
    case MessageRole::User: return QStringLiteral("user");
    case MessageRole::Model: return QStringLiteral("model");
    }
    return QStringLiteral("user");
}

MessageRole roleFromString(const QString& text) {
    if (text == QLatin1String("system")) return MessageRole::System;
    if (text == QLatin1String("model")) return MessageRole::Model;
    return MessageRole::User;
}

QString formatStats(const MessageStats& stats) {
    if (!stats.valid) return {};
    QStringList parts;
    parts << QStringLiteral("%1 prompt tokens").arg(stats.promptTokens);
    parts << QStringLiteral("%1 ms to first token").arg(stats.timeToFirstTokenMs, 0, 'f', 0);
    parts << QStringLiteral("%1 tok/s").arg(stats.tokensPerSecond, 0, 'f', 1);
    parts << QStringLiteral("%1 tokens").arg(stats.generatedTokens);
    if (!stats.stopReason.isEmpty()) parts << stats.stopReason;
    return parts.join(QStringLiteral("  ·  "));
}

ChatModel::ChatModel(QObject* parent) : QAbstractListModel(parent) {}

int ChatModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : static_cast<int>(messages_.size());
}

QVariant ChatModel::data(const QModelIndex& index, int role) const {
    if (!index.isValid() || index.row() < 0 || index.row() >= messages_.size()) return {};
    const MessageRecord& message = messages_.at(index.row());
    switch (role) {
    case Qt::DisplayRole:
    case TextRole: return message.text;
    case MessageIdRole: return message.id;
    case RoleNameRole: return roleToString(message.role);
    case StreamingRole: return message.streaming;
    case StatsTextRole: return formatStats(message.stats);
    case ErrorRole: return message.error;
    default: return {};
    }
}

QHash<int, QByteArray> ChatModel::roleNames() const {
    return {{Qt::DisplayRole, "display"}, {MessageIdRole, "messageId"}, {RoleNameRole, "role"},
            {TextRole, "text"},           {StreamingRole, "streaming"}, {StatsTextRole, "statsText"},
            {ErrorRole, "error"}};
}

void ChatModel::setMessages(const QVector<MessageRecord>& messages) {
    beginResetModel();
    messages_ = messages;
    endResetModel();
}

int ChatModel::appendMessage(const MessageRecord& message) {
    const int row = static_cast<int>(messages_.size());
    beginInsertRows(QModelIndex(), row, row);
    messages_.push_back(message);
    endInsertRows();
    return row;
}

void ChatModel::changed(int row, const QList<int>& roles) {
    const QModelIndex at = index(row);
    emit dataChanged(at, at, roles);
}

void ChatModel::appendText(int row, const QString& chunk) {
    if (row < 0 || row >= messages_.size() || chunk.isEmpty()) return;
    messages_[row].text += chunk;
    changed(row, {TextRole, Qt::DisplayRole});
}

void ChatModel::setText(int row, const QString& text) {
    if (row < 0 || row >= messages_.size() || messages_[row].text == text) return;
    messages_[row].text = text;
    changed(row, {TextRole, Qt::DisplayRole});
}

void ChatModel::setStreaming(int row, bool streaming) {
    if (row < 0 || row >= messages_.size() || messages_[row].streaming == streaming) return;
    messages_[row].streaming = streaming;
    changed(row, {StreamingRole});
}

void ChatModel::setStats(int row, const MessageStats& stats) {
    if (row < 0 || row >= messages_.size()) return;
    messages_[row].stats = stats;
    changed(row, {StatsTextRole});
}

void ChatModel::setError(int row, const QString& error) {
    if (row < 0 || row >= messages_.size()) return;
    messages_[row].error = error;
    changed(row, {ErrorRole});
}

void ChatModel::setMessageId(int row, qint64 id) {
    if (row < 0 || row >= messages_.size()) return;
    messages_[row].id = id;
    changed(row, {MessageIdRole});
}

void ChatModel::removeFrom(int row) {
    if (row < 0 || row >= messages_.size()) return;
    beginRemoveRows(QModelIndex(), row, static_cast<int>(messages_.size()) - 1);
    messages_.resize(row);
    endRemoveRows();
}

void ChatModel::clear() { setMessages({}); }

}  // namespace desk
