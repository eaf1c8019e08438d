// The desktop app over the real engine (CPU backend) with the tiny random-weight checkpoint the
// engine's golden tests use: convert a Hugging Face folder, load, stream a reply with step stats
// into the perf panel, run the allocation sweep, and report a damaged package clearly. This is
// what the fake engine stands in for everywhere else, so the adapter is checked here.
#include <QDir>
#include <QFile>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include "ChatSession.h"
#include "DeskApplication.h"
#include "EngineController.h"
#include "MainWindow.h"
#include "PerfPanel.h"
#include "UiTypes.h"

using namespace desk;

class RealEngineTest : public QObject {
    Q_OBJECT
private:
    QTemporaryDir dir_;
    QString modelFolder_;

private slots:
    void initTestCase() {
        const QDir goldens(QStringLiteral(GEMMA_TEST_DATA_DIR "/goldens"));
        const QString source = goldens.filePath(QStringLiteral("e2b_like/hf"));
        if (!QFileInfo::exists(source + QStringLiteral("/config.json")))
            QSKIP("the engine's golden checkpoint (tests/data/goldens/e2b_like/hf) is not present");
        // A Hugging Face folder as a user has it: config, weights and tokenizer side by side.
        modelFolder_ = dir_.filePath(QStringLiteral("tiny-gemma4"));
        QVERIFY(QDir().mkpath(modelFolder_));
        for (const QString& name : QDir(source).entryList(QDir::Files))
            QVERIFY(QFile::copy(QDir(source).filePath(name), QDir(modelFolder_).filePath(name)));
        const QString tokenizer = QDir(modelFolder_).filePath(QStringLiteral("tokenizer.model"));
        if (!QFileInfo::exists(tokenizer))
            QVERIFY(QFile::copy(goldens.filePath(QStringLiteral("tokenizer.model")), tokenizer));
    }

    void convertsLoadsGeneratesAndSweepsOnTheCpu() {
        AppPaths paths;
        paths.dataDir = dir_.filePath(QStringLiteral("data"));
        DeskApplication app(makeGemmaEngine(), paths);
        QString error;
        QVERIFY2(app.initialize(&error), qPrintable(error));
        app.start(std::nullopt, false, false);
        QSignalSpy converted(app.controller(), &EngineController::conversionFinished);
        QSignalSpy ready(&app, &DeskApplication::modelReady);
        QSignalSpy failed(&app, &DeskApplication::modelFailed);
        deskui::ModelChoice choice;
        choice.kind = deskui::ModelChoice::Kind::HuggingFaceFolder;
        choice.path = modelFolder_;
        choice.device = deskui::ModelChoice::Device::Cpu;
        app.openModel(choice);
        QVERIFY(ready.wait(120000) || !failed.isEmpty());
        QVERIFY2(failed.isEmpty(), qPrintable(failed.value(0).value(0).toString()));
        QCOMPARE(converted.count(), 1);
        QVERIFY(QFileInfo::exists(converted.at(0).at(0).toString()));
        const gemma::ModelInfo info = *app.controller()->modelInfo();
        QVERIFY(info.weightBytes > 0);
        QVERIFY(QString::fromStdString(info.backend).startsWith(QStringLiteral("cpu")));

        SamplingSettings sampling;
        sampling.temperature = 0.0;
        sampling.maxTokens = 6;
        app.session()->setSampling(sampling);
        QSignalSpy done(app.session(), &ChatSession::replyFinished);
        QVERIFY(app.session()->send(QStringLiteral("Hello there")));
        QVERIFY(done.wait(120000));
        const MessageStats stats = done.at(0).at(0).value<MessageStats>();
        QVERIFY(stats.generatedTokens > 0 && stats.generatedTokens <= 6);
        QVERIFY(stats.promptTokens > 2);
        deskui::PerfPanel* panel = app.window()->perfPanel();
        QVERIFY(!panel->samples().isEmpty());
        QVERIFY(panel->samples().size() <= stats.generatedTokens);
        for (const deskui::PerfStepSample& sample : panel->samples()) {
            QVERIFY(sample.wallMs > 0.0);
            QCOMPARE(sample.bucketMs.size(), qsizetype(gemma::kBucketCount));
        }

        QSignalSpy swept(app.controller(), &EngineController::sweepFinished);
        emit panel->sweepRequested();
        QVERIFY(swept.wait(300000));
        QVERIFY2(swept.at(0).at(0).toBool(), qPrintable(swept.at(0).at(1).toString()));
        QCOMPARE(panel->sweepPoints().size(), 3);
        QCOMPARE(panel->sweepPoints()[2].contextAllocation, 32768);
        for (const deskui::SweepPoint& point : panel->sweepPoints()) QVERIFY(point.tokensPerSecond > 0.0);
        app.shutdown();
    }

    void aDamagedPackageIsReportedAndNothingBreaks() {
        AppPaths paths;
        paths.dataDir = dir_.filePath(QStringLiteral("data2"));
        DeskApplication app(makeGemmaEngine(), paths);
        QString error;
        QVERIFY2(app.initialize(&error), qPrintable(error));
        const QString damaged = dir_.filePath(QStringLiteral("damaged.gemma"));
        QFile file(damaged);
        QVERIFY(file.open(QIODevice::WriteOnly));
        file.write(QByteArray(4096, 'x'));
        file.close();
        QSignalSpy failed(&app, &DeskApplication::modelFailed);
        app.start(damaged, false);
        QVERIFY(failed.wait(30000));
        QVERIFY2(failed.at(0).at(0).toString().contains(QStringLiteral("not a valid Gemma Desk model package")),
                 qPrintable(failed.at(0).at(0).toString()));
        QVERIFY(!app.controller()->isModelLoaded());
        QVERIFY(!app.controller()->isBusy());
        app.shutdown();
    }
};

QTEST_MAIN(RealEngineTest)
#include "test_real_engine.moc"
