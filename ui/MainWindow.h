// The main window: conversations sidebar | chat column (header, notices, messages, composer) |
// side panel (conversation settings, performance). It owns no data: it shows what the app gives
// it and reports what the user wants through signals.
#pragma once

#include <QMainWindow>

#include "Theme.h"
#include "UiTypes.h"

class QLabel;
class QProgressBar;
class QPushButton;
class QSplitter;
class QTabWidget;

namespace deskui {

class ChatView;
class Composer;
class ConversationSidebar;
class ModelDialog;
class PerfPanel;
class SettingsPanel;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);

    ConversationSidebar* sidebar() const { return sidebar_; }
    ChatView* chatView() const { return chatView_; }
    Composer* composer() const { return composer_; }
    SettingsPanel* settingsPanel() const { return settingsPanel_; }
    PerfPanel* perfPanel() const { return perfPanel_; }
    QTabWidget* sidePanel() const { return sidePanel_; }
    // The open "Open model" dialog, if any (the app sends it memory estimates).
    ModelDialog* modelDialog() const { return modelDialog_; }

    void setModelStatus(const ModelStatusView& status);
    void setConversationTitle(const QString& title);
    void setGenerating(bool generating);
    // A progress notice above the chat (loading, converting), optionally cancellable.
    void showTask(const QString& text, double fraction, bool cancellable);
    void hideTask();
    // A dismissable error notice; the app stays usable.
    void showError(const QString& message);
    void hideError();
    void setAboutText(const QString& html);
    void setAppIcon(const QIcon& icon);
    void setSidePanelVisible(bool visible);
    bool isSidePanelVisible() const;
    // Opens the model dialog prefilled with `initial`; returns at once (non-modal).
    void openModelDialog(const ModelChoice& initial);
    QString errorText() const;

signals:
    void openModelRequested(const deskui::ModelChoice& choice);
    void estimateRequested(const deskui::ModelChoice& choice);
    void cancelTaskRequested();
    void newChatRequested();
    void stopRequested();
    void regenerateRequested();
    void exportConversationRequested(const QString& format, const QString& path);
    void themeRequested(deskui::ThemeMode mode);
    void sidePanelVisibilityChanged(bool visible);
    void modelDialogRequested();
    void closing();

protected:
    void closeEvent(QCloseEvent* event) override;

private:
    void buildMenus();
    QWidget* buildChatColumn();
    void exportConversation(const QString& format);

    ConversationSidebar* sidebar_ = nullptr;
    ChatView* chatView_ = nullptr;
    Composer* composer_ = nullptr;
    SettingsPanel* settingsPanel_ = nullptr;
    PerfPanel* perfPanel_ = nullptr;
    QTabWidget* sidePanel_ = nullptr;
    QSplitter* splitter_ = nullptr;
    ModelDialog* modelDialog_ = nullptr;
    QLabel* titleLabel_ = nullptr;
    QLabel* modelPill_ = nullptr;
    QPushButton* panelToggle_ = nullptr;
    QWidget* taskBanner_ = nullptr;
    QLabel* taskText_ = nullptr;
    QProgressBar* taskProgress_ = nullptr;
    QPushButton* taskCancel_ = nullptr;
    QWidget* errorBanner_ = nullptr;
    QLabel* errorText_ = nullptr;
    QAction* sidePanelAction_ = nullptr;
    QString aboutText_;
};

}  // namespace deskui
