// The message box under the chat: Enter sends, Shift+Enter inserts a newline, Esc stops a running
// reply (or leaves edit mode). While a reply streams the Send button becomes Stop.
#pragma once

#include <QFrame>

class QLabel;
class QPlainTextEdit;
class QPushButton;

namespace deskui {

class Composer : public QFrame {
    Q_OBJECT
public:
    explicit Composer(QWidget* parent = nullptr);

    void setGenerating(bool generating);
    void setInputEnabled(bool enabled, const QString& placeholder);
    // Edit-and-resend: the composer holds the old text until the user sends or presses Esc.
    void beginEdit(int row, const QString& text);
    void cancelEdit();
    bool isEditing() const { return editRow_ >= 0; }

    QPlainTextEdit* editor() const { return editor_; }
    QPushButton* sendButton() const { return sendButton_; }
    QPushButton* stopButton() const { return stopButton_; }
    // Sends what is typed, as Enter does (also used by tests).
    void submit();

signals:
    void sendRequested(const QString& text);
    void editSubmitted(int row, const QString& text);
    void stopRequested();

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    void adjustHeight();
    void updateButtons();

    QPlainTextEdit* editor_;
    QPushButton* sendButton_;
    QPushButton* stopButton_;
    QLabel* editBanner_;
    QLabel* hint_;
    bool generating_ = false;
    bool inputEnabled_ = true;
    int editRow_ = -1;
};

}  // namespace deskui
