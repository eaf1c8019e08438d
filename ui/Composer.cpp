#include "Composer.h"

#include <QHBoxLayout>
#include <QKeyEvent>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QTextBlock>
#include <QVBoxLayout>

namespace deskui {

Composer::Composer(QWidget* parent) : QFrame(parent) {
    auto* outer = new QVBoxLayout(this);
    outer->setContentsMargins(24, 4, 24, 12);
    outer->setSpacing(4);
    editBanner_ = new QLabel(this);
    editBanner_->setObjectName(QStringLiteral("EditBanner"));
    editBanner_->hide();
    outer->addWidget(editBanner_, 0, Qt::AlignHCenter);

    auto* frame = new QFrame(this);
    frame->setObjectName(QStringLiteral("ComposerFrame"));
    frame->setMaximumWidth(820);
    auto* row = new QHBoxLayout(frame);
    row->setContentsMargins(14, 8, 8, 8);
    row->setSpacing(8);
    editor_ = new QPlainTextEdit(frame);
    editor_->setObjectName(QStringLiteral("ComposerEdit"));
    editor_->setPlaceholderText(tr("Message Gemma"));
    editor_->setTabChangesFocus(true);
    editor_->setVerticalScrollBarPolicy(Qt::ScrollBarAsNeeded);
    editor_->installEventFilter(this);
    sendButton_ = new QPushButton(tr("Send"), frame);
    sendButton_->setObjectName(QStringLiteral("SendButton"));
    sendButton_->setCursor(Qt::PointingHandCursor);
    sendButton_->setToolTip(tr("Send (Enter)"));
    stopButton_ = new QPushButton(tr("Stop"), frame);
    stopButton_->setObjectName(QStringLiteral("StopButton"));
    stopButton_->setCursor(Qt::PointingHandCursor);
    stopButton_->setToolTip(tr("Stop generating (Esc)"));
    stopButton_->hide();
    row->addWidget(editor_, 1);
    row->addWidget(sendButton_, 0, Qt::AlignBottom);
    row->addWidget(stopButton_, 0, Qt::AlignBottom);
    // Centered, as wide as the chat column (up to its 820 px) with the stretches sharing the rest.
    auto* centered = new QHBoxLayout;
    centered->addStretch(1);
    centered->addWidget(frame, 100);
    centered->addStretch(1);
    outer->addLayout(centered);

    hint_ = new QLabel(tr("Enter to send  \u00b7  Shift+Enter for a new line  \u00b7  Esc to stop"), this);
    hint_->setObjectName(QStringLiteral("ComposerHint"));
    outer->addWidget(hint_, 0, Qt::AlignHCenter);

    connect(sendButton_, &QPushButton::clicked, this, &Composer::submit);
    connect(stopButton_, &QPushButton::clicked, this, &Composer::stopRequested);
    connect(editor_, &QPlainTextEdit::textChanged, this, [this] {
        adjustHeight();
        updateButtons();
    });
    adjustHeight();
    updateButtons();
}

void Composer::adjustHeight() {
    // Grow with the text up to eight lines, then scroll.
    const int lines = std::clamp(editor_->document()->blockCount(), 1, 8);
    const int lineHeight = editor_->fontMetrics().lineSpacing();
    editor_->setFixedHeight(lines * lineHeight + 14);
}

void Composer::updateButtons() {
    sendButton_->setVisible(!generating_);
    stopButton_->setVisible(generating_);
    sendButton_->setEnabled(inputEnabled_ && !editor_->toPlainText().trimmed().isEmpty());
}

void Composer::setGenerating(bool generating) {
    generating_ = generating;
    updateButtons();
}

void Composer::setInputEnabled(bool enabled, const QString& placeholder) {
    inputEnabled_ = enabled;
    editor_->setPlaceholderText(placeholder);
    // QPlainTextEdit paints the placeholder in its viewport, which setPlaceholderText does not
    // repaint: without this the old text lingers until the next focus or keystroke.
    editor_->viewport()->update();
    updateButtons();
}

void Composer::beginEdit(int row, const QString& text) {
    editRow_ = row;
    editor_->setPlainText(text);
    editBanner_->setText(tr("Editing a message: Enter resends it and replaces the replies after it; Esc cancels."));
    editBanner_->show();
    editor_->setFocus();
    editor_->moveCursor(QTextCursor::End);
}

void Composer::cancelEdit() {
    if (editRow_ < 0) return;
    editRow_ = -1;
    editBanner_->hide();
    editor_->clear();
}

void Composer::submit() {
    const QString text = editor_->toPlainText().trimmed();
    if (text.isEmpty() || generating_ || !inputEnabled_) return;
    if (editRow_ >= 0) {
        const int row = editRow_;
        editRow_ = -1;
        editBanner_->hide();
        editor_->clear();
        emit editSubmitted(row, text);
        return;
    }
    editor_->clear();
    emit sendRequested(text);
}

bool Composer::eventFilter(QObject* watched, QEvent* event) {
    // The window's Esc shortcut (Stop) would otherwise swallow Esc before the editor sees it;
    // claim it here so Esc stops a reply or cancels an edit from the keyboard focus.
    if (watched == editor_ && event->type() == QEvent::ShortcutOverride &&
        static_cast<QKeyEvent*>(event)->key() == Qt::Key_Escape && (generating_ || editRow_ >= 0)) {
        event->accept();
        return true;
    }
    if (watched == editor_ && event->type() == QEvent::KeyPress) {
        auto* key = static_cast<QKeyEvent*>(event);
        if (key->key() == Qt::Key_Return || key->key() == Qt::Key_Enter) {
            if (key->modifiers() & Qt::ShiftModifier) return false;  // newline
            submit();
            return true;
        }
        if (key->key() == Qt::Key_Escape) {
            if (generating_) emit stopRequested();
            else cancelEdit();
            return true;
        }
    }
    return QFrame::eventFilter(watched, event);
}

}  // namespace deskui
