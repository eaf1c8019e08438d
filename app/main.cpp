// gemma-desk: the desktop app's entry point. Parses the command line, sets up logging and the
// data folder, and hands over to DeskApplication (the composition root).
//
//   gemma-desk [--model PATH] [--data-dir DIR] [--fake-engine]
//   gemma-desk --self-test     open the window, load the default model, generate, exit 0/1
//   gemma-desk --help | --version
#include <QApplication>
#include <QCommandLineParser>
#include <QElapsedTimer>
#include <QTemporaryDir>
#include <QTimer>
#include <cstdio>
#include <cstring>
#include <spdlog/spdlog.h>

#include "ChatSession.h"
#include "DeskApplication.h"
#include "EngineController.h"
#include "FakeChatEngine.h"
#include "Logging.h"
#include "MainWindow.h"
#include "gemma/Engine.h"

namespace {

void describeOptions(QCommandLineParser& parser) {
    parser.setApplicationDescription(QStringLiteral("Gemma Desk: local chat with Gemma 4 on an FP4 decode engine."));
    parser.addHelpOption();
    parser.addVersionOption();
    parser.addOption({QStringLiteral("model"), QStringLiteral("Load this package file or Hugging Face folder."),
                      QStringLiteral("path")});
    parser.addOption({QStringLiteral("data-dir"),
                      QStringLiteral("Keep conversations, converted models and logs here (default: the platform's "
                                     "app data folder; also GEMMA_DESK_DATA_DIR)."),
                      QStringLiteral("dir")});
    parser.addOption({QStringLiteral("self-test"),
                      QStringLiteral("Open the main window, load the default model (or --model), generate a few "
                                     "tokens and exit: 0 on success, 1 with a message on failure. Works with "
                                     "QT_QPA_PLATFORM=offscreen.")});
    parser.addOption({QStringLiteral("self-test-timeout"),
                      QStringLiteral("Seconds the self-test may take (default 600)."), QStringLiteral("seconds"),
                      QStringLiteral("600")});
    parser.addOption({QStringLiteral("fake-engine"),
                      QStringLiteral("Use the built-in fake engine instead of the real one (demos, UI work).")});
}

bool wantsHelpOrVersion(int argc, char** argv) {
    for (int index = 1; index < argc; ++index) {
        const char* argument = argv[index];
        if (!std::strcmp(argument, "--help") || !std::strcmp(argument, "-h") || !std::strcmp(argument, "--version") ||
            !std::strcmp(argument, "-v") || !std::strcmp(argument, "--help-all"))
            return true;
    }
    return false;
}

// Exits with 0 once a reply with at least one token has been generated, 1 on any failure.
int runSelfTest(QApplication& application, desk::DeskApplication& desk, const std::optional<QString>& model,
                int timeoutSeconds) {
    int exitCode = 1;
    auto fail = [&](const QString& why) {
        std::fprintf(stderr, "gemma-desk self-test FAILED: %s\n", qPrintable(why));
        spdlog::error("Self-test failed: {}", why.toStdString());
        exitCode = 1;
        application.exit(1);
    };
    QObject::connect(&desk, &desk::DeskApplication::modelFailed, &application,
                     [&](const QString& message) { fail(QStringLiteral("the model did not load: ") + message); });
    QObject::connect(&desk, &desk::DeskApplication::modelReady, &application, [&] {
        std::printf("self-test: model loaded\n");
        desk::SamplingSettings sampling;
        sampling.temperature = 0.0;  // greedy: the same answer every run
        sampling.maxTokens = 8;
        desk.session()->setSampling(sampling);
        if (!desk.session()->send(QStringLiteral("Say hello in five words.")))
            fail(QStringLiteral("the chat session refused to send"));
    });
    QObject::connect(desk.session(), &desk::ChatSession::replyFinished, &application,
                     [&](const desk::MessageStats& stats) {
                         if (stats.generatedTokens <= 0) {
                             fail(QStringLiteral("the model generated no tokens"));
                             return;
                         }
                         const auto& messages = desk.session()->chatModel()->messages();
                         std::printf("self-test: %d tokens at %.1f tok/s: %s\n", stats.generatedTokens,
                                     stats.tokensPerSecond, qPrintable(messages.last().text.simplified()));
                         std::printf("self-test: OK\n");
                         exitCode = 0;
                         application.exit(0);
                     });
    QObject::connect(desk.session(), &desk::ChatSession::errorOccurred, &application,
                     [&](const QString& message) { fail(message); });
    QTimer::singleShot(timeoutSeconds * 1000, &application,
                       [&] { fail(QStringLiteral("timed out after %1 s").arg(timeoutSeconds)); });
    const std::optional<QString> found = model ? model : desk::findDefaultModel(desk::defaultModelSources());
    if (!found) {
        std::fprintf(stderr,
                     "gemma-desk self-test FAILED: no default model found (set GEMMA_DESK_DEFAULT_MODEL, or install "
                     "share/gemma-desk/models/default.gemma)\n");
        return 1;
    }
    std::printf("self-test: loading %s\n", qPrintable(*found));
    desk.start(found, true);
    application.exec();
    desk.shutdown();
    return exitCode;
}

}  // namespace

int main(int argc, char** argv) {
    QCoreApplication::setOrganizationName(QStringLiteral("GemmaDesk"));
    QCoreApplication::setApplicationName(QStringLiteral("gemma-desk"));
    QCoreApplication::setApplicationVersion(
        QStringLiteral("%1 (engine %2)").arg(desk::deskVersion(), QString::fromLatin1(gemma::engineVersion())));

    if (wantsHelpOrVersion(argc, argv)) {
        // Answer without a display connection: a QCoreApplication is enough for the parser.
        QCoreApplication core(argc, argv);
        QCommandLineParser parser;
        describeOptions(parser);
        parser.process(core);  // prints and exits
        return 0;
    }
    bool selfTest = false;
    for (int index = 1; index < argc; ++index) selfTest |= !std::strcmp(argv[index], "--self-test");
    // A headless self-test (CI, a container) needs no display server.
    if (selfTest && qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM") && qEnvironmentVariableIsEmpty("DISPLAY") &&
        qEnvironmentVariableIsEmpty("WAYLAND_DISPLAY"))
        qputenv("QT_QPA_PLATFORM", "offscreen");

    QApplication application(argc, argv);
    application.setApplicationDisplayName(QStringLiteral("Gemma Desk"));
    // Matches the installed .desktop entry, so Wayland compositors pair windows with the menu item.
    QGuiApplication::setDesktopFileName(QStringLiteral("io.github.gemmadesk.GemmaDesk"));
    QCommandLineParser parser;
    describeOptions(parser);
    parser.process(application);

    desk::AppPaths paths = desk::AppPaths::standard();
    QTemporaryDir selfTestDir;  // a self-test never touches the user's conversations
    if (parser.isSet(QStringLiteral("data-dir"))) paths.dataDir = parser.value(QStringLiteral("data-dir"));
    else if (selfTest && qEnvironmentVariableIsEmpty("GEMMA_DESK_DATA_DIR")) paths.dataDir = selfTestDir.path();
    desk::initLogging(paths.logDir(), selfTest);
    spdlog::info("Gemma Desk {} starting (data folder {})", desk::deskVersion().toStdString(),
                 paths.dataDir.toStdString());

    std::unique_ptr<desk::ChatEngine> engine;
    if (parser.isSet(QStringLiteral("fake-engine"))) engine = std::make_unique<desk::FakeChatEngine>();
    else engine = desk::makeGemmaEngine();

    desk::DeskApplication desk(std::move(engine), paths);
    QString error;
    if (!desk.initialize(&error)) {
        std::fprintf(stderr, "gemma-desk: %s\n", qPrintable(error));
        spdlog::error("Start-up failed: {}", error.toStdString());
        return 1;
    }
    std::optional<QString> model;
    if (parser.isSet(QStringLiteral("model"))) model = parser.value(QStringLiteral("model"));
    if (selfTest) return runSelfTest(application, desk, model, parser.value(QStringLiteral("self-test-timeout")).toInt());

    desk.start(model, true);
    const int code = application.exec();
    desk.shutdown();
    return code;
}
