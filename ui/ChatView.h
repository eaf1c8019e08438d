// The chat column: one MessageWidget per row of a Qt list model, found by role *names*
// ("role", "text", "streaming", "statsText", "error") so any model with those roles works.
// Streaming updates arrive as dataChanged on one row and touch only that row's last segment.
// It keeps the view pinned to the bottom while the user has not scrolled away.
#pragma once

#include <QPointer>
#include <QScrollArea>
#include <QVector>

class QAbstractItemModel;
class QLabel;
class QPushButton;
class QVBoxLayout;

namespace deskui {

class MessageWidget;

class ChatView : public QScrollArea {
    Q_OBJECT
public:
    explicit ChatView(QWidget* parent = nullptr);

    void setModel(QAbstractItemModel* model);
    // What an empty conversation shows (e.g. "Open a model" before one is loaded).
    void setPlaceholder(const QString& title, const QString& body, const QString& actionText = {});
    void setRegenerateEnabled(bool enabled);

    int messageCount() const { return static_cast<int>(messages_.size()); }
    MessageWidget* messageAt(int row) const { return messages_.value(row); }
    int updatesApplied() const { return updatesApplied_; }

signals:
    void editRequested(int row, const QString& text);
    void regenerateRequested();
    void placeholderActionTriggered();

private:
    void rebuild();
    void insertRows(int first, int last);
    void removeRows(int first, int last);
    void updateRow(int row, const QList<int>& roles);
    void refreshRegenerateButtons();
    void updatePlaceholderVisibility();

    QPointer<QAbstractItemModel> model_;
    int roleRole_ = -1, textRole_ = -1, streamingRole_ = -1, statsRole_ = -1, errorRole_ = -1;
    QWidget* column_ = nullptr;
    QVBoxLayout* messagesLayout_ = nullptr;
    QWidget* placeholder_ = nullptr;
    QLabel* placeholderTitle_ = nullptr;
    QLabel* placeholderBody_ = nullptr;
    QPushButton* placeholderAction_ = nullptr;
    QVector<MessageWidget*> messages_;
    bool stickToBottom_ = true;
    bool regenerateEnabled_ = true;
    int updatesApplied_ = 0;
};

}  // namespace deskui
