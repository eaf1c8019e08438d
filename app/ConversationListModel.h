// The sidebar's list of conversations (newest first, optionally filtered by a search string).
// Role names ("conversationId", "title", "subtitle") are the contract with ui/ConversationSidebar.
#pragma once

#include <QAbstractListModel>
#include <QVector>

#include "ChatTypes.h"

namespace desk {

class ConversationListModel : public QAbstractListModel {
    Q_OBJECT
public:
    enum Roles { ConversationIdRole = Qt::UserRole + 1, TitleRole, SubtitleRole };
    explicit ConversationListModel(QObject* parent = nullptr);

    int rowCount(const QModelIndex& parent = QModelIndex()) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QHash<int, QByteArray> roleNames() const override;

    void setConversations(const QVector<ConversationRecord>& conversations);
    int rowOf(qint64 conversationId) const;
    const QVector<ConversationRecord>& conversations() const { return conversations_; }

private:
    QVector<ConversationRecord> conversations_;
};

}  // namespace desk
