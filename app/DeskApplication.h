// The composition root as a class: creates the engine controller, store, session and main
// window and connects the views' signals to the app's use cases. main.cpp and the UI tests both
// build the app through it, so what the tests drive is what the user runs.
#pragma once

#include <QObject>
#include <QPointer>
#include <memory>
#include <optional>

#include "AppPaths.h"
#include "ChatEngine.h"

namespace deskui {
class MainWindow;
struct ModelChoice;
}

namespace desk {

class AppSettings;
class ChatSession;
class ConversationStore;
class EngineController;

QString deskVersion();

class DeskApplication : public QObject {
    Q_OBJECT
public:
    DeskApplication(std::unique_ptr<ChatEngine> engine, AppPaths paths, QObject* parent = nullptr);
    ~DeskApplication() override;

    // Opens the database and settings and builds the window. On failure `error` says why.
    bool initialize(QString* error);
    // Shows the window and loads the model to start with: `modelPath` when given, else the last
    // model used, else the bundled default model; with none, the window invites to open one.
    // `lookForModels` false skips the last/default model (tests of the empty state).
    void start(const std::optional<QString>& modelPath = std::nullopt, bool showWindow = true,
               bool lookForModels = true);
    // Cancels work, stops the engine thread and saves window state. Idempotent.
    void shutdown();

    deskui::MainWindow* window() const { return window_.get(); }
    ChatSession* session() const { return session_.get(); }
    EngineController* controller() const { return controller_.get(); }
    ConversationStore* store() const { return store_.get(); }
    const AppPaths& paths() const { return paths_; }

    void openModel(const deskui::ModelChoice& choice);

signals:
    void modelReady();
    void modelFailed(const QString& message);

private:
    void connectViews();
    void connectEngine();
    QString aboutHtml() const;

    std::unique_ptr<ChatEngine> pendingEngine_;
    AppPaths paths_;
    std::unique_ptr<AppSettings> settings_;
    std::unique_ptr<ConversationStore> store_;
    std::unique_ptr<EngineController> controller_;
    std::unique_ptr<ChatSession> session_;
    std::unique_ptr<deskui::MainWindow> window_;
    QString loadingName_;
    bool shutDown_ = false;
};

}  // namespace desk
