#include "ConversationListModel.h"

#include <QLocale>

namespace desk {

ConversationListModel::ConversationListModel(QObject* parent) : QAbstractListModel(parent) {}

int ConversationListModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : static_cast<int>(conversations_.size());
}

namespace {
QString relativeTime(const QDateTime& when) {
    const QDateTime now = QDateTime::currentDateTime();
    const qint64 seconds = when.secsTo(now);
    if (seconds < 60) return QStringLiteral("just now");
    if (seconds < 3600) return QStringLiteral("%1 min ago").arg(seconds / 60);
    if (when.date() == now.date()) return when.toString(QStringLiteral("HH:mm"));
    if (when.date().daysTo(now.date()) == 1) return QStringLiteral("yesterday");
    return QLocale().toString(when.date(), QLocale::ShortFormat);
}
}  // namespace

QVariant ConversationListModel::data(const QModelIndex& index, int role) const {
    if (!index.isValid() || index.row() >= conversations_.size()) return {};
    const ConversationRecord& conversation = conversations_.at(index.row());
    switch (role) {
    case Qt::DisplayRole:
    case TitleRole: return conversation.title;
    case ConversationIdRole: return conversation.id;
    case SubtitleRole: return relativeTime(conversation.updatedAt);
    case Qt::ToolTipRole: return conversation.title;
    default: return {};
    }
}

QHash<int, QByteArray> ConversationListModel::roleNames() const {
    return {{Qt::DisplayRole, "display"}, {ConversationIdRole, "conversationId"}, {TitleRole, "title"},
            {SubtitleRole, "subtitle"}};
}

void ConversationListModel::setConversations(const QVector<ConversationRecord>& conversations) {
    beginResetModel();
    conversations_ = conversations;
    endResetModel();
}

int ConversationListModel::rowOf(qint64 conversationId) const {
    for (int row = 0; row < conversations_.size(); ++row)
        if (conversations_[row].id == conversationId) return row;
    return -1;
}

}  // namespace desk
