// The assembled window with the fake engine: keyboard shortcuts, the empty and error states,
// Markdown rendering with copyable code blocks, and edit-and-resend through the views.
#include <QApplication>
#include <QClipboard>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <QToolButton>

#include "ChatSession.h"
#include "ChatView.h"
#include "Composer.h"
#include "DeskApplication.h"
#include "EngineController.h"
#include "FakeChatEngine.h"
#include "MainWindow.h"
#include "MessageWidget.h"

using namespace desk;

namespace {

struct Desk {
    QTemporaryDir dir;
    FakeChatEngine* fake = nullptr;
    std::unique_ptr<DeskApplication> app;
};

std::unique_ptr<Desk> makeDesk(FakeEngineConfig config, bool loadModel) {
    auto desk = std::make_unique<Desk>();
    AppPaths paths;
    paths.dataDir = desk->dir.path();
    auto engine = std::make_unique<FakeChatEngine>(std::move(config));
    desk->fake = engine.get();
    desk->app = std::make_unique<DeskApplication>(std::move(engine), paths);
    QString error;
    if (!desk->app->initialize(&error)) qFatal("initialize: %s", qPrintable(error));
    QSignalSpy ready(desk->app.get(), &DeskApplication::modelReady);
    QSignalSpy failed(desk->app.get(), &DeskApplication::modelFailed);
    if (loadModel) desk->app->start(desk->dir.filePath("fake.gemma"), true);
    else desk->app->start(std::nullopt, true, false);
    if (loadModel && !ready.wait(5000) && failed.isEmpty()) qWarning("model did not load");
    QApplication::setActiveWindow(desk->app->window());
    if (!QTest::qWaitForWindowActive(desk->app->window())) qWarning("window not active");
    return desk;
}

}  // namespace

class DeskWindowTest : public QObject {
    Q_OBJECT
private slots:
    void emptyStateInvitesToOpenAModel() {
        auto desk = makeDesk({}, false);
        deskui::MainWindow* window = desk->app->window();
        QVERIFY(!desk->app->controller()->isModelLoaded());
        bool foundInvite = false;
        for (QPushButton* button : window->chatView()->findChildren<QPushButton*>())
            foundInvite |= button->text().startsWith(QStringLiteral("Open a model")) && button->isVisible();
        QVERIFY(foundInvite);
        QVERIFY(!window->composer()->sendButton()->isEnabled());
        QVERIFY(window->composer()->editor()->placeholderText().contains(QStringLiteral("Load a model")));
    }

    void loadFailureShowsAMessageAndTheAppStaysUsable() {
        FakeEngineConfig config;
        config.loadError = gemma::Status(gemma::ErrorCode::InvalidFile, "bad magic in header");
        auto desk = makeDesk(config, true);
        deskui::MainWindow* window = desk->app->window();
        QTRY_VERIFY_WITH_TIMEOUT(!window->errorText().isEmpty(), 5000);
        QVERIFY(window->errorText().contains(QStringLiteral("not a valid Gemma Desk model package")));
        QVERIFY(window->errorText().contains(QStringLiteral("bad magic in header")));
        // Still responsive: a new chat works and typing is refused politely, not crashed on.
        QTest::keyClick(window, Qt::Key_N, Qt::ControlModifier);
        QVERIFY(!desk->app->session()->send(QStringLiteral("hello")));
    }

    void enterSendsShiftEnterBreaksEscStopsCtrlNStartsOver() {
        FakeEngineConfig config;
        config.tokensPerSecond = 100;
        config.repeatReply = true;
        auto desk = makeDesk(config, true);
        deskui::MainWindow* window = desk->app->window();
        ChatSession* session = desk->app->session();
        QPlainTextEdit* editor = window->composer()->editor();
        editor->setFocus();
        QTest::keyClicks(editor, QStringLiteral("first line"));
        QTest::keyClick(editor, Qt::Key_Return, Qt::ShiftModifier);
        QTest::keyClicks(editor, QStringLiteral("second line"));
        QCOMPARE(editor->toPlainText(), QStringLiteral("first line\nsecond line"));
        QCOMPARE(session->chatModel()->count(), 0);
        QSignalSpy generating(session, &ChatSession::generatingChanged);
        QTest::keyClick(editor, Qt::Key_Return);
        QCOMPARE(session->chatModel()->count(), 2);
        QCOMPARE(session->chatModel()->message(0).text, QStringLiteral("first line\nsecond line"));
        QVERIFY(editor->toPlainText().isEmpty());
        QVERIFY(window->composer()->stopButton()->isVisible());
        QTRY_VERIFY_WITH_TIMEOUT(session->chatModel()->message(1).text.size() > 20, 5000);
        QTest::keyClick(editor, Qt::Key_Escape);
        QTRY_VERIFY_WITH_TIMEOUT(!session->isGenerating(), 3000);
        QCOMPARE(session->chatModel()->message(1).stats.stopReason, QStringLiteral("stopped"));
        QVERIFY(window->composer()->sendButton()->isVisible());

        QTest::keyClick(window, Qt::Key_N, Qt::ControlModifier);
        QCOMPARE(session->chatModel()->count(), 0);
        QCOMPARE(session->currentConversationId(), qint64(0));
        QCOMPARE(session->conversationList()->rowCount(), 1);  // the first chat is kept
    }

    void rendersMarkdownWithCopyableCode() {
        FakeEngineConfig config;
        config.tokensPerSecond = 0;
        auto desk = makeDesk(config, true);
        ChatSession* session = desk->app->session();
        QSignalSpy done(session, &ChatSession::replyFinished);
        QVERIFY(session->send(QStringLiteral("Show me code")));
        QVERIFY(done.wait(5000));
        deskui::ChatView* view = desk->app->window()->chatView();
        QTRY_COMPARE(view->messageCount(), 2);
        deskui::MessageWidget* reply = view->messageAt(1);
        const QString shown = reply->renderedPlainText();
        QVERIFY2(shown.contains(QStringLiteral("streaming output")), qPrintable(shown));
        QVERIFY2(!shown.contains(QStringLiteral("**streaming**")), "Markdown is rendered, not shown raw");
        const auto blocks = reply->findChildren<deskui::CodeBlockWidget*>();
        QCOMPARE(blocks.size(), 1);
        QVERIFY(blocks[0]->code().startsWith(QStringLiteral("double tokensPerSecond(")));
        QTest::mouseClick(blocks[0]->copyButton(), Qt::LeftButton);
        QCOMPARE(QGuiApplication::clipboard()->text(), blocks[0]->code());
        bool statsShown = false;
        for (QLabel* label : reply->findChildren<QLabel*>())
            statsShown |= label->text().contains(QStringLiteral("tok/s")) && label->text().contains(QStringLiteral("prompt tokens"));
        QVERIFY(statsShown);
    }

    void editAndResendFromTheView() {
        FakeEngineConfig config;
        config.tokensPerSecond = 0;
        config.replyText = "Sure.";
        auto desk = makeDesk(config, true);
        ChatSession* session = desk->app->session();
        QSignalSpy done(session, &ChatSession::replyFinished);
        QVERIFY(session->send(QStringLiteral("Original question")));
        QVERIFY(done.wait(5000));
        deskui::MainWindow* window = desk->app->window();
        QTRY_COMPARE(window->chatView()->messageCount(), 2);
        QToolButton* edit = nullptr;
        for (QToolButton* button : window->chatView()->messageAt(0)->findChildren<QToolButton*>())
            if (button->text() == QStringLiteral("Edit")) edit = button;
        QVERIFY(edit);
        QTest::mouseClick(edit, Qt::LeftButton);
        QVERIFY(window->composer()->isEditing());
        QCOMPARE(window->composer()->editor()->toPlainText(), QStringLiteral("Original question"));
        QTest::keyClick(window->composer()->editor(), Qt::Key_Escape);  // Esc leaves edit mode
        QVERIFY(!window->composer()->isEditing());
        QVERIFY(window->composer()->editor()->toPlainText().isEmpty());
        QTest::mouseClick(edit, Qt::LeftButton);
        QVERIFY(window->composer()->isEditing());
        window->composer()->editor()->setPlainText(QStringLiteral("Better question"));
        window->composer()->submit();
        QVERIFY(done.wait(5000));
        QCOMPARE(session->chatModel()->count(), 2);
        QCOMPARE(session->chatModel()->message(0).text, QStringLiteral("Better question"));
        QCOMPARE(desk->fake->generateCalls(), 2);
    }
};

QTEST_MAIN(DeskWindowTest)
#include "test_desk_window.moc"
