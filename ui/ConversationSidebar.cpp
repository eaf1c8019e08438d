#include "ConversationSidebar.h"

#include <QAbstractItemModel>
#include <QHBoxLayout>
#include <QInputDialog>
#include <QLabel>
#include <QLineEdit>
#include <QListView>
#include <QMenu>
#include <QMessageBox>
#include <QPainter>
#include <QPushButton>
#include <QStyledItemDelegate>
#include <QTimer>
#include <QVBoxLayout>

#include "Theme.h"

namespace deskui {

namespace {

// Two lines per conversation (title and when it was last used) on a rounded highlight.
class ConversationDelegate : public QStyledItemDelegate {
public:
    ConversationDelegate(int subtitleRole, QObject* parent) : QStyledItemDelegate(parent), subtitleRole_(subtitleRole) {}

    QSize sizeHint(const QStyleOptionViewItem& option, const QModelIndex&) const override {
        return {option.rect.width(), option.fontMetrics.height() * 2 + 18};
    }

    void paint(QPainter* painter, const QStyleOptionViewItem& option, const QModelIndex& index) const override {
        const ThemeColors& colors = Theme::colors();
        painter->save();
        painter->setRenderHint(QPainter::Antialiasing);
        const QRect card = option.rect.adjusted(6, 2, -6, -2);
        if (option.state & QStyle::State_Selected) {
            painter->setBrush(colors.userBubble);
            painter->setPen(Qt::NoPen);
            painter->drawRoundedRect(card, 8, 8);
        } else if (option.state & QStyle::State_MouseOver) {
            painter->setBrush(colors.border);
            painter->setPen(Qt::NoPen);
            painter->drawRoundedRect(card, 8, 8);
        }
        const QRect text = card.adjusted(10, 6, -10, -6);
        QFont titleFont = option.font;
        titleFont.setWeight(QFont::Medium);
        painter->setFont(titleFont);
        painter->setPen(colors.text);
        const QString title = QFontMetrics(titleFont).elidedText(index.data(Qt::DisplayRole).toString(),
                                                                 Qt::ElideRight, text.width());
        painter->drawText(text, Qt::AlignLeft | Qt::AlignTop, title);
        QFont small = option.font;
        small.setPointSizeF(option.font.pointSizeF() * 0.85);
        painter->setFont(small);
        painter->setPen(colors.mutedText);
        if (subtitleRole_ >= 0) painter->drawText(text, Qt::AlignLeft | Qt::AlignBottom, index.data(subtitleRole_).toString());
        painter->restore();
    }

private:
    int subtitleRole_;
};

}  // namespace

ConversationSidebar::ConversationSidebar(QWidget* parent) : QFrame(parent) {
    setObjectName(QStringLiteral("Sidebar"));
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(10, 14, 10, 10);
    layout->setSpacing(10);
    auto* titleRow = new QHBoxLayout;
    titleRow->setSpacing(8);
    logo_ = new QLabel(this);
    logo_->hide();
    auto* title = new QLabel(tr("Gemma Desk"), this);
    title->setObjectName(QStringLiteral("SidebarTitle"));
    titleRow->addWidget(logo_);
    titleRow->addWidget(title, 1);
    layout->addLayout(titleRow);
    newChat_ = new QPushButton(tr("+  New chat"), this);
    newChat_->setObjectName(QStringLiteral("PrimaryButton"));
    newChat_->setCursor(Qt::PointingHandCursor);
    newChat_->setToolTip(tr("New chat (Ctrl+N)"));
    layout->addWidget(newChat_);
    search_ = new QLineEdit(this);
    search_->setObjectName(QStringLiteral("SidebarSearch"));
    search_->setPlaceholderText(tr("Search conversations"));
    search_->setClearButtonEnabled(true);
    layout->addWidget(search_);
    list_ = new QListView(this);
    list_->setObjectName(QStringLiteral("SidebarList"));
    list_->setMouseTracking(true);
    list_->setContextMenuPolicy(Qt::CustomContextMenu);
    list_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    list_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    layout->addWidget(list_, 1);

    connect(newChat_, &QPushButton::clicked, this, &ConversationSidebar::newChatRequested);
    // Searching hits SQLite; wait for a pause in typing instead of querying on every key.
    auto* searchDelay = new QTimer(this);
    searchDelay->setSingleShot(true);
    searchDelay->setInterval(200);
    connect(search_, &QLineEdit::textChanged, searchDelay, qOverload<>(&QTimer::start));
    connect(searchDelay, &QTimer::timeout, this, [this] { emit searchTextChanged(search_->text()); });
    connect(list_, &QListView::clicked, this, [this](const QModelIndex& index) {
        const qint64 id = idAt(index);
        if (id != 0 && id != currentId_) emit conversationSelected(id);
    });
    connect(list_, &QListView::customContextMenuRequested, this, &ConversationSidebar::showContextMenu);
}

void ConversationSidebar::setLogo(const QPixmap& logo) {
    logo_->setPixmap(logo);
    logo_->setVisible(!logo.isNull());
}

void ConversationSidebar::setModel(QAbstractItemModel* model) {
    model_ = model;
    const auto names = model->roleNames();
    for (auto it = names.begin(); it != names.end(); ++it) {
        if (it.value() == "conversationId") idRole_ = it.key();
        if (it.value() == "subtitle") subtitleRole_ = it.key();
    }
    list_->setModel(model);
    list_->setItemDelegate(new ConversationDelegate(subtitleRole_, list_));
    // The list is reset whenever it is refreshed; keep the current conversation highlighted.
    connect(model, &QAbstractItemModel::modelReset, this, [this] { setCurrentConversation(currentId_); });
}

qint64 ConversationSidebar::idAt(const QModelIndex& index) const {
    return index.isValid() ? index.data(idRole_).toLongLong() : 0;
}

void ConversationSidebar::setCurrentConversation(qint64 conversationId) {
    currentId_ = conversationId;
    if (!model_) return;
    for (int row = 0; row < model_->rowCount(); ++row) {
        const QModelIndex index = model_->index(row, 0);
        if (idAt(index) == conversationId) {
            list_->setCurrentIndex(index);
            return;
        }
    }
    list_->clearSelection();
    list_->setCurrentIndex(QModelIndex());
}

void ConversationSidebar::showContextMenu(const QPoint& position) {
    const QModelIndex index = list_->indexAt(position);
    const qint64 id = idAt(index);
    if (!id) return;
    QMenu menu(this);
    QAction* rename = menu.addAction(tr("Rename\u2026"));
    QAction* remove = menu.addAction(tr("Delete"));
    QAction* chosen = menu.exec(list_->viewport()->mapToGlobal(position));
    if (chosen == rename) {
        bool ok = false;
        const QString title = QInputDialog::getText(this, tr("Rename conversation"), tr("Title:"), QLineEdit::Normal,
                                                    index.data(Qt::DisplayRole).toString(), &ok);
        if (ok && !title.trimmed().isEmpty()) emit renameRequested(id, title.trimmed());
    } else if (chosen == remove) {
        const auto answer = QMessageBox::question(
            this, tr("Delete conversation"),
            tr("Delete \u201c%1\u201d? This cannot be undone.").arg(index.data(Qt::DisplayRole).toString()));
        if (answer == QMessageBox::Yes) emit deleteRequested(id);
    }
}

}  // namespace deskui
