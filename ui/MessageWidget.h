// One chat message: a user bubble, or the model's reply rendered as Markdown segments (prose via
// QTextDocument::setMarkdown, code blocks with a Copy button), with stats and error lines.
#pragma once

#include <QFrame>
#include <QTextBrowser>
#include <QVector>

#include "MarkdownSegments.h"

class QLabel;
class QPushButton;
class QToolButton;
class QVBoxLayout;

namespace deskui {

// A QTextBrowser that is exactly as tall as its document: the chat column scrolls, not each block.
class FittedTextBrowser : public QTextBrowser {
    Q_OBJECT
public:
    explicit FittedTextBrowser(QWidget* parent = nullptr);
    QSize sizeHint() const override;
    QSize minimumSizeHint() const override;

protected:
    void resizeEvent(QResizeEvent* event) override;

private:
    void fitHeight();
};

class CodeBlockWidget : public QFrame {
    Q_OBJECT
public:
    explicit CodeBlockWidget(QWidget* parent = nullptr);
    void setCode(const QString& language, const QString& code);
    QString code() const { return code_; }
    QPushButton* copyButton() const { return copyButton_; }

private:
    QLabel* languageLabel_;
    QPushButton* copyButton_;
    FittedTextBrowser* text_;
    QString code_;
};

class MessageWidget : public QFrame {
    Q_OBJECT
public:
    MessageWidget(bool fromUser, QWidget* parent = nullptr);

    void setText(const QString& markdown);
    void setStreaming(bool streaming);
    void setStatsText(const QString& stats);
    void setErrorText(const QString& error);
    void setRow(int row) { row_ = row; }
    void setCanRegenerate(bool canRegenerate);
    int row() const { return row_; }
    bool fromUser() const { return fromUser_; }
    QString text() const { return text_; }
    int segmentWidgetCount() const { return static_cast<int>(segmentWidgets_.size()); }
    // Plain text of what is shown (tests check the rendering, not just the model).
    QString renderedPlainText() const;

signals:
    void editRequested(int row, const QString& text);
    void regenerateRequested();

protected:
    void resizeEvent(QResizeEvent* event) override;

private:
    void fitUserBubble();
    void updateSegment(int index, const MarkdownSegment& segment);
    QWidget* makeSegmentWidget(const MarkdownSegment& segment);

    bool fromUser_;
    int row_ = -1;
    QString text_;
    bool streaming_ = false;
    QVector<MarkdownSegment> segments_;
    QVector<QWidget*> segmentWidgets_;
    QVBoxLayout* contentLayout_ = nullptr;
    QLabel* userLabel_ = nullptr;
    QFrame* userBubble_ = nullptr;
    QLabel* statsLabel_ = nullptr;
    QLabel* errorLabel_ = nullptr;
    QLabel* typingLabel_ = nullptr;
    QToolButton* copyAction_ = nullptr;
    QToolButton* editAction_ = nullptr;
    QToolButton* regenerateAction_ = nullptr;
};

}  // namespace deskui
