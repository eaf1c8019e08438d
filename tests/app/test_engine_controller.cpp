// EngineController + EngineWorker with the fake engine across real threads: streaming, stop,
// regenerate, edit-and-resend, load errors, conversion, the sweep and quitting mid-generation.
#include <QElapsedTimer>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <QThread>

#include "ChatSession.h"
#include "ConversationStore.h"
#include "EngineController.h"
#include "FakeChatEngine.h"

using namespace desk;

namespace {

struct Rig {
    FakeChatEngine* fake = nullptr;
    std::unique_ptr<EngineController> controller;
};

Rig makeRig(FakeEngineConfig config = {}) {
    Rig rig;
    auto engine = std::make_unique<FakeChatEngine>(std::move(config));
    rig.fake = engine.get();
    rig.controller = std::make_unique<EngineController>(std::move(engine));
    return rig;
}

bool loadModel(EngineController& controller) {
    QSignalSpy loaded(&controller, &EngineController::modelLoaded);
    controller.loadModel(QStringLiteral("/models/fake.gemma"), gemma::OpenOptions{});
    return loaded.wait(5000) || loaded.count() == 1;
}

GenerationJob jobFor(const QString& text, int maxTokens = 1024) {
    GenerationJob job;
    job.messages.push_back({gemma::Role::User, text.toStdString()});
    job.maxNewTokens = maxTokens;
    return job;
}

}  // namespace

class EngineControllerTest : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() { registerEngineMetaTypes(); }

    void streamsEveryTokenInBatchesOnTheGuiThread() {
        FakeEngineConfig config;
        config.tokensPerSecond = 400;
        Rig rig = makeRig(config);
        QVERIFY(loadModel(*rig.controller));
        QCOMPARE(rig.controller->modelInfo()->name, std::string("fake"));

        QString text;
        int batches = 0;
        int steps = 0;
        bool allOnGuiThread = true;
        connect(rig.controller.get(), &EngineController::tokensArrived, this,
                [&](quint64, const QString& chunk, const QVector<gemma::StepStats>& stepStats) {
                    text += chunk;
                    ++batches;
                    steps += static_cast<int>(stepStats.size());
                    allOnGuiThread &= QThread::currentThread() == thread();
                });
        QSignalSpy finished(rig.controller.get(), &EngineController::generationFinished);
        const quint64 id = rig.controller->generate(jobFor(QStringLiteral("hello")));
        QVERIFY(id != 0);
        QVERIFY(rig.controller->isGenerating());
        QVERIFY(rig.controller->generate(jobFor(QStringLiteral("again"))) == 0);  // one at a time
        QVERIFY(finished.wait(10000));
        const auto stats = finished.at(0).at(1).value<gemma::GenerationStats>();
        QCOMPARE(finished.at(0).at(0).toULongLong(), id);
        QCOMPARE(text, QString::fromStdString(FakeChatEngine::defaultReply()));
        QCOMPARE(steps, stats.generatedTokens);
        QVERIFY(stats.generatedTokens > 50);
        // Coalesced: about one batch per 33 ms, far fewer than one per token.
        QVERIFY2(batches < stats.generatedTokens / 3, qPrintable(QStringLiteral("%1 batches").arg(batches)));
        QVERIFY(allOnGuiThread);
        QCOMPARE(stats.stopReason, gemma::StopReason::EndOfTurn);
        QVERIFY(!rig.controller->isGenerating());
    }

    void stopEndsTheStreamEarly() {
        FakeEngineConfig config;
        config.tokensPerSecond = 200;
        config.repeatReply = true;
        Rig rig = makeRig(config);
        QVERIFY(loadModel(*rig.controller));
        QSignalSpy tokens(rig.controller.get(), &EngineController::tokensArrived);
        QSignalSpy finished(rig.controller.get(), &EngineController::generationFinished);
        QVERIFY(rig.controller->generate(jobFor(QStringLiteral("talk forever"), 100000)) != 0);
        QVERIFY(tokens.wait(5000));
        QElapsedTimer sinceStop;
        sinceStop.start();
        rig.controller->stopGeneration();
        QVERIFY(finished.wait(5000));
        QVERIFY2(sinceStop.elapsed() < 1000, "stop must take effect within a token or two");
        const auto stats = finished.at(0).at(1).value<gemma::GenerationStats>();
        QCOMPARE(stats.stopReason, gemma::StopReason::Cancelled);
        QVERIFY(stats.generatedTokens > 0 && stats.generatedTokens < 1000);
        // The engine is usable again right away.
        finished.clear();
        QVERIFY(rig.controller->generate(jobFor(QStringLiteral("short"), 3)) != 0);
        QVERIFY(finished.wait(5000));
        QCOMPARE(finished.at(0).at(1).value<gemma::GenerationStats>().generatedTokens, 3);
    }

    void stopBeforeTheWorkerStartsStillCancels() {
        FakeEngineConfig config;
        config.tokensPerSecond = 100;
        config.repeatReply = true;
        Rig rig = makeRig(config);
        QVERIFY(loadModel(*rig.controller));
        QSignalSpy finished(rig.controller.get(), &EngineController::generationFinished);
        rig.controller->generate(jobFor(QStringLiteral("x"), 100000));
        rig.controller->stopGeneration();  // queued request not yet picked up by the worker
        QVERIFY(finished.wait(5000));
        QVERIFY(finished.at(0).at(1).value<gemma::GenerationStats>().generatedTokens <= 1);
    }

    void loadErrorIsReportedAndTheAppStaysUsable() {
        FakeEngineConfig config;
        config.loadError = gemma::Status(gemma::ErrorCode::OutOfMemory, "cudaMalloc of 9.1 GB failed");
        Rig rig = makeRig(config);
        QSignalSpy failed(rig.controller.get(), &EngineController::modelLoadFailed);
        QSignalSpy busy(rig.controller.get(), &EngineController::busyChanged);
        rig.controller->loadModel(QStringLiteral("/models/big.gemma"), gemma::OpenOptions{});
        QVERIFY(rig.controller->isBusy());
        QVERIFY(failed.wait(5000));
        const QString message = failed.at(0).at(0).toString();
        QVERIFY2(message.contains(QStringLiteral("Not enough memory")), qPrintable(message));
        QVERIFY2(message.contains(QStringLiteral("cudaMalloc of 9.1 GB failed")), qPrintable(message));
        QVERIFY(!rig.controller->isModelLoaded());
        QVERIFY(!rig.controller->isBusy());
        QCOMPARE(busy.count(), 2);  // busy, then idle again
        QCOMPARE(rig.controller->generate(jobFor(QStringLiteral("hi"))), quint64(0));

        // Every error class gets a message a person can act on.
        QVERIFY(QString::fromStdString(describeLoadError({gemma::ErrorCode::Io, "x"})).contains("could not be read"));
        QVERIFY(QString::fromStdString(describeLoadError({gemma::ErrorCode::InvalidFile, "x"})).contains("not a valid"));
        QVERIFY(QString::fromStdString(describeLoadError({gemma::ErrorCode::Unsupported, "x"})).contains("not supported"));
    }

    void loadCanBeCancelled() {
        FakeEngineConfig config;
        config.loadSeconds = 10;
        Rig rig = makeRig(config);
        QSignalSpy failed(rig.controller.get(), &EngineController::modelLoadFailed);
        QSignalSpy progress(rig.controller.get(), &EngineController::loadProgress);
        rig.controller->loadModel(QStringLiteral("/models/slow.gemma"), gemma::OpenOptions{});
        QVERIFY(progress.wait(5000));
        QElapsedTimer timer;
        timer.start();
        rig.controller->cancelTask();
        QVERIFY(failed.wait(5000));
        QVERIFY(timer.elapsed() < 3000);
        QVERIFY(failed.at(0).at(0).toString().contains(QStringLiteral("ancel")));
        QVERIFY(!rig.controller->isModelLoaded());
    }

    void convertsAFolderThenLoads() {
        QTemporaryDir folder;
        QFile config(folder.filePath(QStringLiteral("config.json")));
        QVERIFY(config.open(QIODevice::WriteOnly));
        config.write("{}");
        config.close();
        Rig rig = makeRig();
        QSignalSpy converting(rig.controller.get(), &EngineController::conversionProgress);
        QSignalSpy converted(rig.controller.get(), &EngineController::conversionFinished);
        QSignalSpy loaded(rig.controller.get(), &EngineController::modelLoaded);
        rig.controller->convertAndLoad(folder.path(), folder.filePath(QStringLiteral("out.gemma")), {});
        QVERIFY(loaded.wait(5000));
        QVERIFY(converting.count() > 0);
        QCOMPARE(converted.count(), 1);
        QCOMPARE(loaded.at(0).at(0).value<gemma::ModelInfo>().name, std::string("out"));

        QSignalSpy failed(rig.controller.get(), &EngineController::modelLoadFailed);
        rig.controller->convertAndLoad(folder.filePath(QStringLiteral("missing")), folder.filePath("x.gemma"), {});
        QVERIFY(failed.wait(5000));
        QVERIFY(failed.at(0).at(0).toString().contains(QStringLiteral("Could not convert")));
        QVERIFY(rig.controller->isModelLoaded());  // the earlier model is still there
    }

    void sweepRunsEachAllocation() {
        Rig rig = makeRig();
        QVERIFY(loadModel(*rig.controller));
        QSignalSpy points(rig.controller.get(), &EngineController::sweepPointReady);
        QSignalSpy finished(rig.controller.get(), &EngineController::sweepFinished);
        QVERIFY(rig.controller->runAllocationSweep() != 0);
        QVERIFY(finished.wait(10000));
        QCOMPARE(finished.at(0).at(0).toBool(), true);
        QCOMPARE(points.count(), 3);
        const int expected[] = {4096, 16384, 32768};
        for (int i = 0; i < 3; ++i) {
            const auto result = points.at(i).at(0).value<gemma::DecodeBenchmarkResult>();
            QCOMPARE(result.contextAllocation, expected[i]);
            QCOMPARE(result.tokensPerSecond, rig.fake->sweepTokensPerSecond(expected[i]));
            QCOMPARE(static_cast<int>(result.steps.size()), 128);
        }
        QCOMPARE(rig.fake->benchmarkCalls(), 3);
    }

    void regenerateAndEditResend() {
        QTemporaryDir dir;
        ConversationStore store;
        QVERIFY(store.open(dir.filePath(QStringLiteral("chat.sqlite"))));
        FakeEngineConfig config;
        config.tokensPerSecond = 0;
        config.replyText = "Fine, thanks.";
        Rig rig = makeRig(config);
        QVERIFY(loadModel(*rig.controller));
        ChatSession session(rig.controller.get(), &store);
        QSignalSpy done(&session, &ChatSession::replyFinished);

        session.setSystemPrompt(QStringLiteral("Be brief."));
        QVERIFY(session.send(QStringLiteral("How are you?")));
        QVERIFY(done.wait(5000));
        QCOMPARE(session.chatModel()->count(), 2);
        QCOMPARE(session.chatModel()->message(1).text, QStringLiteral("Fine, thanks."));
        QVERIFY(session.chatModel()->message(1).stats.valid);

        QVERIFY(session.regenerate());
        QVERIFY(done.wait(5000));
        QCOMPARE(session.chatModel()->count(), 2);  // the old reply was replaced, not appended
        QCOMPARE(rig.fake->generateCalls(), 2);
        auto request = rig.fake->lastRequest();
        QCOMPARE(request.messages.size(), std::size_t(2));  // system + user, without the old reply
        QCOMPARE(request.messages[0].role, gemma::Role::System);
        QCOMPARE(request.messages[0].text, std::string("Be brief."));

        QVERIFY(session.send(QStringLiteral("Second question")));
        QVERIFY(done.wait(5000));
        QCOMPARE(session.chatModel()->count(), 4);
        QVERIFY(session.editAndResend(0, QStringLiteral("How are you, really?")));
        QVERIFY(done.wait(5000));
        QCOMPARE(session.chatModel()->count(), 2);
        QCOMPARE(session.chatModel()->message(0).text, QStringLiteral("How are you, really?"));
        request = rig.fake->lastRequest();
        QCOMPARE(request.messages.size(), std::size_t(2));
        QCOMPARE(request.messages[1].text, std::string("How are you, really?"));
        // The store agrees with the model.
        const auto stored = store.messages(session.currentConversationId());
        QCOMPARE(stored.size(), 2);
        QCOMPARE(stored[0].text, QStringLiteral("How are you, really?"));
        QCOMPARE(stored[1].text, QStringLiteral("Fine, thanks."));
        QVERIFY(!stored[1].streaming);
        QCOMPARE(stored[1].stats.generatedTokens, 2);  // "Fine," and " thanks."
    }

    void sessionManagesConversations() {
        QTemporaryDir dir;
        ConversationStore store;
        QVERIFY(store.open(dir.filePath(QStringLiteral("chat.sqlite"))));
        FakeEngineConfig config;
        config.tokensPerSecond = 0;
        config.replyText = "ok";
        Rig rig = makeRig(config);
        QVERIFY(loadModel(*rig.controller));
        ChatSession session(rig.controller.get(), &store);
        QSignalSpy done(&session, &ChatSession::replyFinished);
        QVERIFY(session.send(QStringLiteral("Tell me about FP4 quantization")));
        QVERIFY(done.wait(5000));
        const qint64 first = session.currentConversationId();
        QCOMPARE(session.currentTitle(), QStringLiteral("Tell me about FP4 quantization"));
        session.newConversation();
        QCOMPARE(session.chatModel()->count(), 0);
        QVERIFY(session.send(QStringLiteral("Recipe for bread")));
        QVERIFY(done.wait(5000));
        QCOMPARE(session.conversationList()->rowCount(), 2);
        session.setSearchFilter(QStringLiteral("fp4"));
        QCOMPARE(session.conversationList()->rowCount(), 1);
        QCOMPARE(session.conversationList()->conversations()[0].id, first);
        session.setSearchFilter(QStringLiteral("100%"));  // LIKE wildcards match literally
        QCOMPARE(session.conversationList()->rowCount(), 0);
        session.setSearchFilter(QString());
        QVERIFY(session.renameConversation(first, QStringLiteral("Quantization notes")));
        QCOMPARE(store.conversation(first)->title, QStringLiteral("Quantization notes"));
        QVERIFY(session.openConversation(first));
        QCOMPARE(session.chatModel()->count(), 2);
        const QString markdown = session.exportMarkdown();
        QVERIFY(markdown.startsWith(QStringLiteral("# Quantization notes")));
        QVERIFY(markdown.contains(QStringLiteral("## You\n\nTell me about FP4 quantization")));
        const QJsonDocument json = QJsonDocument::fromJson(session.exportJson());
        QCOMPARE(json["messages"].toArray().size(), 2);
        QCOMPARE(json["messages"][1]["role"].toString(), QStringLiteral("model"));
        QCOMPARE(json["sampling"]["topK"].toInt(), 64);
        QVERIFY(session.deleteConversation(first));
        QCOMPARE(session.conversationList()->rowCount(), 1);
        QCOMPARE(session.currentConversationId(), qint64(0));
        QVERIFY(!store.conversation(first).has_value());
        QVERIFY(store.messages(first).isEmpty());  // cascade
    }

    void quitMidGenerationIsClean() {
        QTemporaryDir dir;
        ConversationStore store;
        QVERIFY(store.open(dir.filePath(QStringLiteral("chat.sqlite"))));
        FakeEngineConfig config;
        config.tokensPerSecond = 100;
        config.repeatReply = true;
        Rig rig = makeRig(config);
        QVERIFY(loadModel(*rig.controller));
        auto session = std::make_unique<ChatSession>(rig.controller.get(), &store, nullptr, 50);
        SamplingSettings sampling;
        sampling.maxTokens = 100000;
        session->setSampling(sampling);
        QSignalSpy tokens(rig.controller.get(), &EngineController::tokensArrived);
        QVERIFY(session->send(QStringLiteral("go on")));
        QVERIFY(tokens.wait(5000));
        QTest::qWait(150);  // let a flush happen
        const qint64 conversation = session->currentConversationId();
        QElapsedTimer timer;
        timer.start();
        session->finishNow();
        rig.controller->shutdown();  // what quitting does: cancel, quit the thread, wait
        QVERIFY2(timer.elapsed() < 2000, qPrintable(QString::number(timer.elapsed())));
        QVERIFY(!rig.controller->isGenerating());
        rig.controller.reset();
        session.reset();
        const auto stored = store.messages(conversation);
        QCOMPARE(stored.size(), 2);
        QVERIFY2(!stored[1].text.isEmpty(), "the reply received so far survives");
        QVERIFY(!stored[1].streaming);
    }
};

QTEST_MAIN(EngineControllerTest)
#include "test_engine_controller.moc"
