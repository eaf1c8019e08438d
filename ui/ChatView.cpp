#include "ChatView.h"

#include <QAbstractItemModel>
#include <QLabel>
#include <QPushButton>
#include <QScrollBar>
#include <QVBoxLayout>

#include "MessageWidget.h"

namespace deskui {

namespace {
constexpr int kColumnMaxWidth = 820;  // a readable line length, centered in wide windows
}

ChatView::ChatView(QWidget* parent) : QScrollArea(parent) {
    setObjectName(QStringLiteral("ChatScroll"));
    setWidgetResizable(true);
    setFrameShape(QFrame::NoFrame);
    setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);

    auto* canvas = new QWidget(this);
    auto* canvasLayout = new QHBoxLayout(canvas);
    canvasLayout->setContentsMargins(24, 16, 24, 16);
    column_ = new QWidget(canvas);
    column_->setMaximumWidth(kColumnMaxWidth);
    auto* columnLayout = new QVBoxLayout(column_);
    columnLayout->setContentsMargins(0, 0, 0, 0);
    columnLayout->setSpacing(0);

    placeholder_ = new QWidget(column_);
    auto* placeholderLayout = new QVBoxLayout(placeholder_);
    placeholderLayout->setContentsMargins(0, 80, 0, 0);
    placeholderLayout->setSpacing(10);
    placeholderTitle_ = new QLabel(placeholder_);
    placeholderTitle_->setObjectName(QStringLiteral("EmptyTitle"));
    placeholderTitle_->setAlignment(Qt::AlignCenter);
    placeholderBody_ = new QLabel(placeholder_);
    placeholderBody_->setObjectName(QStringLiteral("EmptyBody"));
    placeholderBody_->setAlignment(Qt::AlignCenter);
    placeholderBody_->setWordWrap(true);
    placeholderAction_ = new QPushButton(placeholder_);
    placeholderAction_->setObjectName(QStringLiteral("PrimaryButton"));
    placeholderAction_->setCursor(Qt::PointingHandCursor);
    placeholderAction_->hide();
    connect(placeholderAction_, &QPushButton::clicked, this, &ChatView::placeholderActionTriggered);
    placeholderLayout->addWidget(placeholderTitle_);
    placeholderLayout->addWidget(placeholderBody_);
    placeholderLayout->addWidget(placeholderAction_, 0, Qt::AlignHCenter);
    columnLayout->addWidget(placeholder_);

    messagesLayout_ = new QVBoxLayout;
    messagesLayout_->setSpacing(10);
    columnLayout->addLayout(messagesLayout_);
    columnLayout->addStretch(1);
    canvasLayout->addWidget(column_, 1);
    setWidget(canvas);

    // Follow the stream only while the user is at the bottom; scrolling up to read stops it.
    connect(verticalScrollBar(), &QScrollBar::valueChanged, this, [this](int value) {
        stickToBottom_ = value >= verticalScrollBar()->maximum() - 24;
    });
    connect(verticalScrollBar(), &QScrollBar::rangeChanged, this, [this](int, int maximum) {
        if (stickToBottom_) verticalScrollBar()->setValue(maximum);
    });
    setPlaceholder(tr("Gemma Desk"), tr("Private, local chat with Gemma."));
}

void ChatView::setPlaceholder(const QString& title, const QString& body, const QString& actionText) {
    placeholderTitle_->setText(title);
    placeholderBody_->setText(body);
    placeholderAction_->setText(actionText);
    placeholderAction_->setVisible(!actionText.isEmpty());
}

void ChatView::setModel(QAbstractItemModel* model) {
    if (model_) model_->disconnect(this);
    model_ = model;
    roleRole_ = textRole_ = streamingRole_ = statsRole_ = errorRole_ = -1;
    if (model_) {
        const auto names = model_->roleNames();
        for (auto it = names.begin(); it != names.end(); ++it) {
            if (it.value() == "role") roleRole_ = it.key();
            else if (it.value() == "text") textRole_ = it.key();
            else if (it.value() == "streaming") streamingRole_ = it.key();
            else if (it.value() == "statsText") statsRole_ = it.key();
            else if (it.value() == "error") errorRole_ = it.key();
        }
        if (textRole_ < 0) textRole_ = Qt::DisplayRole;
        connect(model_, &QAbstractItemModel::modelReset, this, &ChatView::rebuild);
        connect(model_, &QAbstractItemModel::rowsInserted, this,
                [this](const QModelIndex&, int first, int last) { insertRows(first, last); });
        connect(model_, &QAbstractItemModel::rowsRemoved, this,
                [this](const QModelIndex&, int first, int last) { removeRows(first, last); });
        connect(model_, &QAbstractItemModel::dataChanged, this,
                [this](const QModelIndex& topLeft, const QModelIndex& bottomRight, const QList<int>& roles) {
                    for (int row = topLeft.row(); row <= bottomRight.row(); ++row) updateRow(row, roles);
                });
    }
    rebuild();
}

void ChatView::rebuild() {
    for (MessageWidget* widget : messages_) widget->deleteLater();
    messages_.clear();
    stickToBottom_ = true;
    if (model_ && model_->rowCount() > 0) insertRows(0, model_->rowCount() - 1);
    updatePlaceholderVisibility();
}

void ChatView::insertRows(int first, int last) {
    for (int row = first; row <= last; ++row) {
        const QModelIndex index = model_->index(row, 0);
        const bool fromUser = roleRole_ >= 0 && index.data(roleRole_).toString() == QLatin1String("user");
        auto* widget = new MessageWidget(fromUser, column_);
        connect(widget, &MessageWidget::editRequested, this, &ChatView::editRequested);
        connect(widget, &MessageWidget::regenerateRequested, this, &ChatView::regenerateRequested);
        messagesLayout_->insertWidget(row, widget);
        messages_.insert(row, widget);
        updateRow(row, {});
    }
    for (int row = 0; row < messages_.size(); ++row) messages_[row]->setRow(row);
    refreshRegenerateButtons();
    updatePlaceholderVisibility();
}

void ChatView::removeRows(int first, int last) {
    for (int row = last; row >= first && row < messages_.size(); --row) {
        messages_[row]->deleteLater();
        messages_.removeAt(row);
    }
    for (int row = 0; row < messages_.size(); ++row) messages_[row]->setRow(row);
    refreshRegenerateButtons();
    updatePlaceholderVisibility();
}

void ChatView::updateRow(int row, const QList<int>& roles) {
    if (!model_ || row < 0 || row >= messages_.size()) return;
    const QModelIndex index = model_->index(row, 0);
    MessageWidget* widget = messages_[row];
    auto wants = [&roles](int role) { return role >= 0 && (roles.isEmpty() || roles.contains(role)); };
    if (wants(textRole_)) widget->setText(index.data(textRole_).toString());
    if (wants(streamingRole_)) {
        widget->setStreaming(index.data(streamingRole_).toBool());
        refreshRegenerateButtons();
    }
    if (wants(statsRole_)) widget->setStatsText(index.data(statsRole_).toString());
    if (wants(errorRole_)) widget->setErrorText(index.data(errorRole_).toString());
    ++updatesApplied_;
}

void ChatView::setRegenerateEnabled(bool enabled) {
    regenerateEnabled_ = enabled;
    refreshRegenerateButtons();
}

void ChatView::refreshRegenerateButtons() {
    // Only the last reply can be regenerated, and not while it is being written.
    for (int row = 0; row < messages_.size(); ++row) {
        const bool last = row == messages_.size() - 1;
        const bool streaming = model_ && streamingRole_ >= 0 && model_->index(row, 0).data(streamingRole_).toBool();
        messages_[row]->setCanRegenerate(regenerateEnabled_ && last && !messages_[row]->fromUser() && !streaming);
    }
}

void ChatView::updatePlaceholderVisibility() { placeholder_->setVisible(messages_.isEmpty()); }

}  // namespace deskui
