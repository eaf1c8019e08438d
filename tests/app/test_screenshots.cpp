// Screenshots for docs/screenshots: the main window mid-generation (light and dark) and the
// performance panel after an allocation sweep. Images go to $GEMMA_DESK_SCREENSHOT_DIR (set it to
// the repo's docs/screenshots to refresh them) or a temporary folder. The test also checks the
// images really show a rendered UI.
#include <QApplication>
#include <QDir>
#include <QSet>
#include <QSignalSpy>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTest>

#include "ChatSession.h"
#include "ConversationStore.h"
#include "DeskApplication.h"
#include "EngineController.h"
#include "FakeChatEngine.h"
#include "MainWindow.h"
#include "PerfPanel.h"
#include "Theme.h"

using namespace desk;

namespace {

int distinctColors(const QImage& image) {
    QSet<QRgb> colors;
    for (int y = 0; y < image.height(); y += 3)
        for (int x = 0; x < image.width(); x += 3) colors.insert(image.pixel(x, y));
    return static_cast<int>(colors.size());
}

void seedConversations(const QString& databasePath) {
    ConversationStore store;
    store.open(databasePath);
    const char* titles[] = {"Rust vs C++ for a tokenizer", "Trip plan: Lisbon in 3 days", "Explain KV-cache sharing",
                            "Regex for ISO dates", "Summarize the FP4 paper"};
    for (const char* title : titles) {
        const qint64 id = store.createConversation(QString::fromUtf8(title), QString(), {});
        MessageRecord message;
        message.text = QString::fromUtf8(title);
        store.appendMessage(id, message);
    }
}

}  // namespace

class ScreenshotTest : public QObject {
    Q_OBJECT
private:
    QString outputDir_;
    QTemporaryDir fallback_;

    void save(const QImage& image, const QString& name) {
        const QString path = QDir(outputDir_).filePath(name);
        QVERIFY2(image.save(path, "PNG"), qPrintable(path));
        qInfo("wrote %s", qPrintable(path));
    }

    void mainWindowMidGeneration(deskui::ThemeMode mode, const QString& fileName) {
        QTemporaryDir dir;
        AppPaths paths;
        paths.dataDir = dir.path();
        paths.ensureDirectories();
        seedConversations(paths.databasePath());
        FakeEngineConfig config;
        config.tokensPerSecond = 120;
        // The reply cycles until the token limit, so the reply is still streaming when the window
        // is grabbed however late a loaded machine (the sanitizer build in CI) gets there: the
        // built-in reply alone ends ~0.2 s after "double", and the check below once lost that race.
        config.repeatReply = true;
        auto engine = std::make_unique<FakeChatEngine>(config);
        DeskApplication app(std::move(engine), paths);
        QString error;
        QVERIFY2(app.initialize(&error), qPrintable(error));
        deskui::Theme::apply(*qApp, mode);
        app.window()->resize(1440, 900);
        QSignalSpy ready(&app, &DeskApplication::modelReady);
        app.start(dir.filePath(QStringLiteral("gemma-4-e4b-it.gemma")), true);
        QVERIFY(ready.wait(5000));
        QVERIFY(QTest::qWaitForWindowExposed(app.window()));
        app.window()->sidePanel()->setCurrentIndex(0);
        app.session()->setSystemPrompt(QStringLiteral("You are a concise performance engineer."));
        QVERIFY(app.session()->send(QStringLiteral("Why is decoding one token at a time limited by memory bandwidth?")));
        // Mid-generation: part of the reply, including the start of the code block, is on screen.
        QTRY_VERIFY_WITH_TIMEOUT(app.session()->chatModel()->message(1).text.contains(QStringLiteral("double")), 10000);
        QTest::qWait(120);
        QVERIFY(app.session()->isGenerating());
        const QImage image = app.window()->grab().toImage();
        QCOMPARE(image.width(), 1440);
        QVERIFY2(distinctColors(image) > 40, "the window should show rendered content");
        save(image, fileName);
        app.shutdown();
    }

private slots:
    void initTestCase() {
        outputDir_ = qEnvironmentVariable("GEMMA_DESK_SCREENSHOT_DIR");
        if (outputDir_.isEmpty()) outputDir_ = fallback_.path();
        QDir().mkpath(outputDir_);
    }

    void mainWindowLight() { mainWindowMidGeneration(deskui::ThemeMode::Light, QStringLiteral("main-window.png")); }
    void mainWindowDark() { mainWindowMidGeneration(deskui::ThemeMode::Dark, QStringLiteral("main-window-dark.png")); }

    void welcomeWithoutAModel() {
        QTemporaryDir dir;
        AppPaths paths;
        paths.dataDir = dir.path();
        DeskApplication app(std::make_unique<FakeChatEngine>(), paths);
        QString error;
        QVERIFY2(app.initialize(&error), qPrintable(error));
        deskui::Theme::apply(*qApp, deskui::ThemeMode::Light);
        app.window()->resize(1440, 900);
        app.start(std::nullopt, true, false);
        QVERIFY(QTest::qWaitForWindowExposed(app.window()));
        QTest::qWait(50);
        const QImage image = app.window()->grab().toImage();
        QVERIFY2(distinctColors(image) > 20, "the window should show rendered content");
        save(image, QStringLiteral("welcome.png"));
        app.shutdown();
    }

    void perfPanelAfterSweep() {
        QTemporaryDir dir;
        AppPaths paths;
        paths.dataDir = dir.path();
        FakeEngineConfig config;
        config.tokensPerSecond = 0;
        config.repeatReply = true;
        auto engine = std::make_unique<FakeChatEngine>(config);
        DeskApplication app(std::move(engine), paths);
        QString error;
        QVERIFY2(app.initialize(&error), qPrintable(error));
        deskui::Theme::apply(*qApp, deskui::ThemeMode::Light);
        QSignalSpy ready(&app, &DeskApplication::modelReady);
        app.start(dir.filePath(QStringLiteral("gemma-4-e4b-it.gemma")), true);
        QVERIFY(ready.wait(5000));
        SamplingSettings sampling;
        sampling.maxTokens = 300;
        app.session()->setSampling(sampling);
        QSignalSpy done(app.session(), &ChatSession::replyFinished);
        QVERIFY(app.session()->send(QStringLiteral("Fill the charts")));
        QVERIFY(done.wait(10000));
        QSignalSpy swept(app.controller(), &EngineController::sweepFinished);
        emit app.window()->perfPanel()->sweepRequested();
        QVERIFY(swept.wait(10000));
        QCOMPARE(app.window()->perfPanel()->sweepPoints().size(), 3);
        QCOMPARE(app.window()->perfPanel()->samples().size(), 300);
        QTRY_VERIFY(app.window()->perfPanel()->metricText("tokPerSecond") != QStringLiteral("\u2014"));
        deskui::PerfPanel* panel = app.window()->perfPanel();
        panel->resize(460, 1120);
        QTest::qWait(50);
        const QImage image = panel->renderImage();
        QVERIFY2(distinctColors(image) > 40, "the panel should show rendered charts");
        save(image, QStringLiteral("perf-panel-sweep.png"));
        app.shutdown();
    }
};

QTEST_MAIN(ScreenshotTest)
#include "test_screenshots.moc"
