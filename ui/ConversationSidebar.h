// The left column: New chat, search, and the list of conversations (a Qt model with the roles
// "conversationId", "title", "subtitle"). Rename and delete live in the item's context menu.
#pragma once

#include <QFrame>

class QAbstractItemModel;
class QLabel;
class QLineEdit;
class QListView;
class QPushButton;

namespace deskui {

class ConversationSidebar : public QFrame {
    Q_OBJECT
public:
    explicit ConversationSidebar(QWidget* parent = nullptr);

    void setModel(QAbstractItemModel* model);
    void setCurrentConversation(qint64 conversationId);
    void setLogo(const QPixmap& logo);
    QListView* listView() const { return list_; }
    QLineEdit* searchField() const { return search_; }

signals:
    void newChatRequested();
    void conversationSelected(qint64 conversationId);
    void renameRequested(qint64 conversationId, const QString& newTitle);
    void deleteRequested(qint64 conversationId);
    void searchTextChanged(const QString& text);

private:
    qint64 idAt(const QModelIndex& index) const;
    void showContextMenu(const QPoint& position);

    QAbstractItemModel* model_ = nullptr;
    int idRole_ = Qt::UserRole + 1;
    int subtitleRole_ = -1;
    qint64 currentId_ = 0;
    QListView* list_;
    QLineEdit* search_;
    QPushButton* newChat_;
    QLabel* logo_;
};

}  // namespace deskui
