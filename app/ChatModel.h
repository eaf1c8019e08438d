// The messages of the open conversation as a Qt list model. The chat view (ui/) binds to it by
// role *names* (roleNames()), so ui/ needs no header from app/. Streaming text arrives in batches
// through appendText(), each batch one dataChanged for one row.
#pragma once

#include <QAbstractListModel>
#include <QVector>

#include "ChatTypes.h"

namespace desk {

class ChatModel : public QAbstractListModel {
    Q_OBJECT
public:
    enum Roles {
        MessageIdRole = Qt::UserRole + 1,
        RoleNameRole,   // "user", "model", "system"
        TextRole,       // raw Markdown
        StreamingRole,  // bool
        StatsTextRole,  // formatted per-message stats, empty when none
        ErrorRole,      // error text, empty when none
    };

    explicit ChatModel(QObject* parent = nullptr);

    int rowCount(const QModelIndex& parent = QModelIndex()) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QHash<int, QByteArray> roleNames() const override;

    void setMessages(const QVector<MessageRecord>& messages);
    int appendMessage(const MessageRecord& message);
    void appendText(int row, const QString& chunk);
    void setText(int row, const QString& text);
    void setStreaming(int row, bool streaming);
    void setStats(int row, const MessageStats& stats);
    void setError(int row, const QString& error);
    void setMessageId(int row, qint64 id);
    void removeFrom(int row);  // drops row and everything after it
    void clear();

    const MessageRecord& message(int row) const { return messages_.at(row); }
    const QVector<MessageRecord>& messages() const { return messages_; }
    int count() const { return static_cast<int>(messages_.size()); }

private:
    void changed(int row, const QList<int>& roles);
    QVector<MessageRecord> messages_;
};

}  // namespace desk
