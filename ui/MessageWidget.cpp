#include "MessageWidget.h"

#include <QAbstractTextDocumentLayout>
#include <QClipboard>
#include <QFontDatabase>
#include <QGuiApplication>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QScrollBar>
#include <QTimer>
#include <QToolButton>
#include <QVBoxLayout>
#include <cmath>

namespace deskui {

FittedTextBrowser::FittedTextBrowser(QWidget* parent) : QTextBrowser(parent) {
    setFrameShape(QFrame::NoFrame);
    setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
    setOpenExternalLinks(true);
    setTextInteractionFlags(Qt::TextBrowserInteraction);
    document()->setDocumentMargin(0);
    viewport()->setAutoFillBackground(false);
    setAutoFillBackground(false);
    // Transparent through the palette (a per-widget style sheet would cost a style object each).
    QPalette transparent = palette();
    transparent.setColor(QPalette::Base, Qt::transparent);
    setPalette(transparent);
    connect(document()->documentLayout(), &QAbstractTextDocumentLayout::documentSizeChanged, this,
            &FittedTextBrowser::fitHeight);
}

void FittedTextBrowser::fitHeight() {
    int height = static_cast<int>(std::ceil(document()->size().height()));
    if (horizontalScrollBarPolicy() != Qt::ScrollBarAlwaysOff && horizontalScrollBar()->maximum() > 0)
        height += horizontalScrollBar()->sizeHint().height();
    height += contentsMargins().top() + contentsMargins().bottom();
    if (height != this->height()) {
        setFixedHeight(std::max(height, fontMetrics().height()));
        updateGeometry();
    }
}

void FittedTextBrowser::resizeEvent(QResizeEvent* event) {
    QTextBrowser::resizeEvent(event);
    fitHeight();
}

QSize FittedTextBrowser::sizeHint() const { return {200, height()}; }
QSize FittedTextBrowser::minimumSizeHint() const { return {50, height()}; }

CodeBlockWidget::CodeBlockWidget(QWidget* parent) : QFrame(parent) {
    setObjectName(QStringLiteral("CodeBlock"));
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(12, 6, 8, 10);
    layout->setSpacing(4);
    auto* header = new QHBoxLayout;
    languageLabel_ = new QLabel(this);
    languageLabel_->setObjectName(QStringLiteral("CodeHeader"));
    copyButton_ = new QPushButton(tr("Copy"), this);
    copyButton_->setObjectName(QStringLiteral("LinkButton"));
    copyButton_->setCursor(Qt::PointingHandCursor);
    copyButton_->setToolTip(tr("Copy this code block"));
    header->addWidget(languageLabel_);
    header->addStretch(1);
    header->addWidget(copyButton_);
    layout->addLayout(header);
    text_ = new FittedTextBrowser(this);
    text_->setObjectName(QStringLiteral("CodeText"));
    text_->setLineWrapMode(QTextEdit::NoWrap);
    text_->setHorizontalScrollBarPolicy(Qt::ScrollBarAsNeeded);
    QFont mono = QFontDatabase::systemFont(QFontDatabase::FixedFont);
    mono.setPointSizeF(std::max(8.0, font().pointSizeF() - 0.5));
    text_->setFont(mono);
    layout->addWidget(text_);
    connect(copyButton_, &QPushButton::clicked, this, [this] {
        QGuiApplication::clipboard()->setText(code_);
        copyButton_->setText(tr("Copied"));
        QTimer::singleShot(1500, copyButton_, [button = copyButton_] { button->setText(tr("Copy")); });
    });
}

void CodeBlockWidget::setCode(const QString& language, const QString& code) {
    languageLabel_->setText(language.isEmpty() ? tr("code") : language);
    if (code == code_) return;
    code_ = code;
    text_->setPlainText(code);
}

MessageWidget::MessageWidget(bool fromUser, QWidget* parent) : QFrame(parent), fromUser_(fromUser) {
    auto* outer = new QHBoxLayout(this);
    outer->setContentsMargins(0, 6, 0, 6);
    outer->setSpacing(12);
    auto makeAction = [this](const QString& text, const QString& tip) {
        auto* button = new QToolButton(this);
        button->setObjectName(QStringLiteral("MessageAction"));
        button->setText(text);
        button->setToolTip(tip);
        button->setCursor(Qt::PointingHandCursor);
        return button;
    };
    copyAction_ = makeAction(tr("Copy"), tr("Copy the message as Markdown"));
    connect(copyAction_, &QToolButton::clicked, this, [this] { QGuiApplication::clipboard()->setText(text_); });

    if (fromUser_) {
        // User messages: a bubble on the right, with Edit and Copy under it.
        auto* column = new QVBoxLayout;
        column->setSpacing(2);
        auto* bubble = new QFrame(this);
        bubble->setObjectName(QStringLiteral("UserBubble"));
        auto* bubbleLayout = new QVBoxLayout(bubble);
        bubbleLayout->setContentsMargins(14, 10, 14, 10);
        userLabel_ = new QLabel(bubble);
        userLabel_->setWordWrap(true);
        userLabel_->setTextFormat(Qt::PlainText);
        userLabel_->setTextInteractionFlags(Qt::TextSelectableByMouse);
        bubbleLayout->addWidget(userLabel_);
        column->addWidget(bubble, 0, Qt::AlignRight);
        userBubble_ = bubble;
        auto* actions = new QHBoxLayout;
        actions->addStretch(1);
        editAction_ = makeAction(tr("Edit"), tr("Edit this message and send it again"));
        connect(editAction_, &QToolButton::clicked, this, [this] { emit editRequested(row_, text_); });
        actions->addWidget(editAction_);
        actions->addWidget(copyAction_);
        column->addLayout(actions);
        outer->addLayout(column, 1);
        return;
    }

    // Model messages: avatar, author line, the rendered content, stats and actions.
    auto* avatar = new QLabel(QStringLiteral("G"), this);
    avatar->setObjectName(QStringLiteral("Avatar"));
    avatar->setFixedSize(28, 28);
    avatar->setAlignment(Qt::AlignCenter);
    outer->addWidget(avatar, 0, Qt::AlignTop);
    auto* column = new QVBoxLayout;
    column->setSpacing(4);
    auto* author = new QHBoxLayout;
    auto* name = new QLabel(tr("Gemma"), this);
    name->setObjectName(QStringLiteral("AuthorLabel"));
    typingLabel_ = new QLabel(tr("writing\u2026"), this);
    typingLabel_->setObjectName(QStringLiteral("StatsLabel"));
    typingLabel_->hide();
    author->addWidget(name);
    author->addWidget(typingLabel_);
    author->addStretch(1);
    column->addLayout(author);
    contentLayout_ = new QVBoxLayout;
    contentLayout_->setSpacing(8);
    column->addLayout(contentLayout_);
    errorLabel_ = new QLabel(this);
    errorLabel_->setObjectName(QStringLiteral("ErrorLabel"));
    errorLabel_->setWordWrap(true);
    errorLabel_->hide();
    column->addWidget(errorLabel_);
    auto* footer = new QHBoxLayout;
    statsLabel_ = new QLabel(this);
    statsLabel_->setObjectName(QStringLiteral("StatsLabel"));
    statsLabel_->setWordWrap(true);
    footer->addWidget(statsLabel_, 1);
    regenerateAction_ = makeAction(tr("Regenerate"), tr("Write this reply again"));
    regenerateAction_->hide();
    connect(regenerateAction_, &QToolButton::clicked, this, &MessageWidget::regenerateRequested);
    footer->addWidget(regenerateAction_);
    footer->addWidget(copyAction_);
    column->addLayout(footer);
    outer->addLayout(column, 1);
}

void MessageWidget::resizeEvent(QResizeEvent* event) {
    QFrame::resizeEvent(event);
    if (fromUser_) fitUserBubble();
}

void MessageWidget::fitUserBubble() {
    // A QLabel that word-wraps does not know how wide to be; size the bubble to its longest line,
    // at most three quarters of the column, and let the label wrap inside that.
    const int maximum = std::max(120, width() * 3 / 4);
    int longest = 0;
    const QFontMetrics metrics(userLabel_->font());
    for (const QString& line : text_.split(QLatin1Char('\n'))) longest = std::max(longest, metrics.horizontalAdvance(line));
    userLabel_->setFixedWidth(std::min(longest + 4, maximum - 28));
}

QWidget* MessageWidget::makeSegmentWidget(const MarkdownSegment& segment) {
    if (segment.code) {
        auto* block = new CodeBlockWidget(this);
        block->setCode(segment.language, segment.text);
        return block;
    }
    auto* browser = new FittedTextBrowser(this);
    browser->setMarkdown(segment.text);
    return browser;
}

void MessageWidget::updateSegment(int index, const MarkdownSegment& segment) {
    QWidget* existing = segmentWidgets_[index];
    if (segments_[index].code != segment.code) {
        QWidget* replacement = makeSegmentWidget(segment);
        contentLayout_->replaceWidget(existing, replacement);
        existing->deleteLater();
        segmentWidgets_[index] = replacement;
    } else if (segment.code) {
        static_cast<CodeBlockWidget*>(existing)->setCode(segment.language, segment.text);
    } else if (segments_[index].text != segment.text) {
        static_cast<FittedTextBrowser*>(existing)->setMarkdown(segment.text);
    }
    segments_[index] = segment;
}

void MessageWidget::setText(const QString& markdown) {
    if (markdown == text_ && !segmentWidgets_.isEmpty()) return;
    text_ = markdown;
    if (fromUser_) {
        userLabel_->setText(markdown);
        fitUserBubble();
        return;
    }
    const QVector<MarkdownSegment> segments = splitMarkdown(markdown);
    const int keep = static_cast<int>(std::min(segments.size(), segments_.size()));
    for (int index = 0; index < keep; ++index)
        if (!(segments[index] == segments_[index])) updateSegment(index, segments[index]);
    while (segmentWidgets_.size() > segments.size()) {
        segmentWidgets_.takeLast()->deleteLater();
        segments_.removeLast();
    }
    for (int index = static_cast<int>(segments_.size()); index < segments.size(); ++index) {
        QWidget* widget = makeSegmentWidget(segments[index]);
        contentLayout_->addWidget(widget);
        segmentWidgets_.push_back(widget);
        segments_.push_back(segments[index]);
    }
}

void MessageWidget::setStreaming(bool streaming) {
    streaming_ = streaming;
    if (typingLabel_) typingLabel_->setVisible(streaming);
    copyAction_->setEnabled(!streaming);
}

void MessageWidget::setStatsText(const QString& stats) {
    if (statsLabel_) statsLabel_->setText(stats);
}

void MessageWidget::setErrorText(const QString& error) {
    if (!errorLabel_) return;
    errorLabel_->setText(error);
    errorLabel_->setVisible(!error.isEmpty());
}

void MessageWidget::setCanRegenerate(bool canRegenerate) {
    if (regenerateAction_) regenerateAction_->setVisible(canRegenerate);
}

QString MessageWidget::renderedPlainText() const {
    if (fromUser_) return userLabel_->text();
    QStringList parts;
    for (QWidget* widget : segmentWidgets_) {
        if (auto* code = qobject_cast<CodeBlockWidget*>(widget)) parts << code->code();
        else if (auto* browser = qobject_cast<FittedTextBrowser*>(widget)) parts << browser->toPlainText();
    }
    return parts.join(QLatin1Char('\n'));
}

}  // namespace deskui
