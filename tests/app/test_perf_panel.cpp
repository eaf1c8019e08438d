// The performance panel plots what it is fed: recorded step stats become the right stacked
// bucket series, tok/s points and GB/s figures; the sweep button drives the (fake) engine through
// the real wiring and the bars show what the engine returned.
#include <QAreaSeries>
#include <QBarCategoryAxis>
#include <QBarSet>
#include <QChart>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLineSeries>
#include <QPushButton>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include "ChatSession.h"
#include "DeskApplication.h"
#include "EngineController.h"
#include "FakeChatEngine.h"
#include "MainWindow.h"
#include "PerfPanel.h"

using namespace deskui;

namespace {

// A recorded-looking trace: 200 steps whose buckets vary deterministically.
QVector<PerfStepSample> recordedSteps(int count) {
    QVector<PerfStepSample> steps;
    for (int i = 0; i < count; ++i) {
        PerfStepSample step;
        step.position = 100 + i;
        step.bucketMs = {2.0 + 0.01 * (i % 7), 0.3 + 0.001 * i, 0.15, 0.4, 0.05, 0.1 + 0.02 * (i % 3)};
        step.wallMs = 0.0;
        for (double ms : step.bucketMs) step.wallMs += ms;
        step.launches = 300 + (i % 2);
        step.graph = i % 2 == 0;
        step.instrumented = true;
        steps.push_back(step);
    }
    return steps;
}

}  // namespace

class PerfPanelTest : public QObject {
    Q_OBJECT
private slots:
    void plotsRecordedStepStats() {
        PerfPanel panel;
        const QStringList names{"FP4 matvec", "Attention", "Norms", "LM head", "Sampling", "Gaps"};
        panel.setBucketNames(names);
        panel.setTraffic(2'000'000'000, 50'000);
        panel.setBandwidthCeiling(1000.0);
        const auto steps = recordedSteps(200);
        // Fed in uneven batches as the coalescing timer would.
        panel.appendSamples(steps.mid(0, 13));
        panel.appendSamples(steps.mid(13, 100));
        panel.appendSamples(steps.mid(113));
        QCOMPARE(panel.samples().size(), 200);
        QTRY_COMPARE(panel.speedSeries()->count(), 200);  // charts follow on their refresh timer

        const auto& areas = panel.bucketSeries();
        QCOMPARE(areas.size(), 6);
        const int window = PerfPanel::kRollingWindow;
        for (int bucket = 0; bucket < 6; ++bucket) {
            QCOMPARE(areas[bucket]->name(), names[bucket]);
            QCOMPARE(areas[bucket]->upperSeries()->count(), window);
            for (int point = 0; point < window; ++point) {
                const PerfStepSample& step = steps[200 - window + point];
                const QPointF upper = areas[bucket]->upperSeries()->at(point);
                const double lower = bucket == 0 ? 0.0 : areas[bucket]->lowerSeries()->at(point).y();
                QCOMPARE(upper.x(), double(200 - window + point));  // rolling: the last 128 steps
                QVERIFY(qAbs((upper.y() - lower) - step.bucketMs[bucket]) < 1e-9);
            }
        }
        // The top of the stack is the step's wall time (Gap closes the sum).
        QVERIFY(qAbs(areas[5]->upperSeries()->at(window - 1).y() - steps.last().wallMs) < 1e-9);

        QCOMPARE(panel.speedSeries()->count(), 200);
        for (int i : {0, 57, 199}) {
            QCOMPARE(panel.speedSeries()->at(i).x(), double(i));
            QVERIFY(qAbs(panel.speedSeries()->at(i).y() - 1000.0 / steps[i].wallMs) < 1e-9);
        }

        double wallSum = 0.0, bytesSum = 0.0;
        for (int i = 200 - window; i < 200; ++i) {
            wallSum += steps[i].wallMs;
            bytesSum += 2e9 + 50'000.0 * (steps[i].position + 1);
        }
        const double gbPerSecond = bytesSum / (wallSum / 1000.0) / 1e9;
        QCOMPARE(panel.metricText("tokPerSecond"), QString::number(1000.0 / (wallSum / window), 'f', 1));
        QCOMPARE(panel.metricText("msPerToken"), QString::number(wallSum / window, 'f', 2));
        QCOMPARE(panel.metricText("gbPerSecond"), QString::number(gbPerSecond, 'f', 1));
        QCOMPARE(panel.metricText("ceiling"), QStringLiteral("%1%").arg(gbPerSecond / 10.0, 0, 'f', 1));
        QCOMPARE(panel.metricText("kernels"), QStringLiteral("301"));
        QCOMPARE(panel.metricText("graph"), QStringLiteral("off"));

        panel.setBandwidthCeiling(std::nullopt);
        QCOMPARE(panel.metricText("ceiling"), QStringLiteral("not measured"));
        panel.clearSamples();
        QCOMPARE(panel.speedSeries()->count(), 0);
        QCOMPARE(panel.metricText("tokPerSecond"), QStringLiteral("\u2014"));
    }

    void cpuBackendWithUntimedBuckets() {
        // The CPU backend may time only some buckets; the rest stay zero and nothing breaks.
        PerfPanel panel;
        PerfStepSample step;
        step.position = 10;
        step.wallMs = 250.0;
        step.bucketMs = {200.0, 0.0, 0.0, 40.0, 0.0, 10.0};
        step.launches = 900;
        step.instrumented = true;
        panel.appendSamples({step, step});
        QTRY_COMPARE(panel.metricText("tokPerSecond"), QStringLiteral("4.0"));
        QCOMPARE(panel.metricText("graph"), QStringLiteral("off"));
        QCOMPARE(panel.metricText("gbPerSecond"), QStringLiteral("\u2014"));  // no traffic known yet
        QCOMPARE(panel.bucketSeries()[1]->upperSeries()->at(0).y(), 200.0);
    }

    void untimedStepsCountForSpeedButNotForTheStack() {
        // The engine times one decode step in N; the others report wall time only. The stack is
        // drawn from the timed steps, tok/s from all of them, and the kernel count from the
        // latest timed step.
        PerfPanel panel;
        panel.setBucketNames({"FP4 matvec", "Attention", "Norms", "LM head", "Sampling", "Gaps"});
        QVector<PerfStepSample> steps = recordedSteps(40);
        for (int i = 0; i < steps.size(); ++i) {
            if (i % 8 == 0) continue;
            steps[i].instrumented = false;
            steps[i].bucketMs.fill(0.0);
            steps[i].launches = 0;
            steps[i].wallMs = 2.0;
        }
        panel.appendSamples(steps);
        QTRY_COMPARE(panel.speedSeries()->count(), 40);
        const auto& areas = panel.bucketSeries();
        QCOMPARE(areas[0]->upperSeries()->count(), 5);  // steps 0, 8, 16, 24, 32
        for (int k = 0; k < 5; ++k) {
            QCOMPARE(areas[0]->upperSeries()->at(k).x(), double(8 * k));
            QVERIFY(qAbs(areas[5]->upperSeries()->at(k).y() - steps[8 * k].wallMs) < 1e-9);
        }
        QVERIFY(qAbs(panel.speedSeries()->at(1).y() - 500.0) < 1e-9);  // an untimed 2 ms step
        QCOMPARE(panel.metricText("kernels"), QString::number(steps[32].launches));
    }

    void exportsCsvJsonAndPng() {
        QTemporaryDir dir;
        PerfPanel panel;
        panel.resize(420, 900);
        panel.appendSamples(recordedSteps(20));
        panel.addSweepPoint({4096, 120.5, 8.3});
        const QStringList lines = panel.stepsCsv().trimmed().split('\n');
        QCOMPARE(lines.size(), 21);
        QVERIFY(lines[0].startsWith(QStringLiteral("position,wall_ms,\"FP4 matvec ms\"")));
        QVERIFY(lines[1].startsWith(QStringLiteral("100,")));
        QVERIFY(panel.exportTo(dir.filePath("perf.json")));
        QFile json(dir.filePath("perf.json"));
        QVERIFY(json.open(QIODevice::ReadOnly));
        const QJsonObject root = QJsonDocument::fromJson(json.readAll()).object();
        QCOMPARE(root["steps"].toArray().size(), 20);
        QCOMPARE(root["steps"][0]["bucketMs"]["Attention"].toDouble(), 0.3);
        QCOMPARE(root["sweep"][0]["tokensPerSecond"].toDouble(), 120.5);
        QVERIFY(root["bandwidthCeilingGBps"].isNull());
        QVERIFY(panel.exportTo(dir.filePath("perf.csv")));
        QVERIFY(panel.exportTo(dir.filePath("perf.png")));
        QImage image(dir.filePath("perf.png"));
        QVERIFY(!image.isNull());
        QCOMPARE(image.width(), 420);
    }

    void sweepButtonDrivesTheEngineAndPlotsItsAnswer() {
        QTemporaryDir dir;
        desk::AppPaths paths;
        paths.dataDir = dir.path();
        auto engine = std::make_unique<desk::FakeChatEngine>();
        desk::FakeChatEngine* fake = engine.get();
        desk::DeskApplication app(std::move(engine), paths);
        QString error;
        QVERIFY2(app.initialize(&error), qPrintable(error));
        QSignalSpy ready(&app, &desk::DeskApplication::modelReady);
        app.start(dir.filePath("model.gemma"), false);
        QVERIFY(ready.wait(5000));
        PerfPanel* panel = app.window()->perfPanel();
        QPushButton* sweep = nullptr;
        for (QPushButton* button : panel->findChildren<QPushButton*>())
            if (button->text() == QStringLiteral("Run allocation sweep")) sweep = button;
        QVERIFY(sweep);
        QSignalSpy finished(app.controller(), &desk::EngineController::sweepFinished);
        QTest::mouseClick(sweep, Qt::LeftButton);
        QCOMPARE(sweep->text(), QStringLiteral("Cancel sweep"));
        QVERIFY(finished.wait(10000));
        QCOMPARE(fake->benchmarkCalls(), 3);
        QCOMPARE(panel->sweepPoints().size(), 3);
        QBarSet* bars = panel->sweepBarSet();
        QCOMPARE(bars->count(), 3);
        const int allocations[] = {4096, 16384, 32768};
        for (int i = 0; i < 3; ++i) {
            QCOMPARE(panel->sweepPoints()[i].contextAllocation, allocations[i]);
            QCOMPARE(bars->at(i), fake->sweepTokensPerSecond(allocations[i]));
        }
        auto* categories = qobject_cast<QBarCategoryAxis*>(panel->sweepChart()->axes(Qt::Horizontal).first());
        QVERIFY(categories);
        QCOMPARE(categories->categories(), QStringList({"4K", "16K", "32K"}));
        QCOMPARE(sweep->text(), QStringLiteral("Run allocation sweep"));
        // A second sweep replaces the first rather than appending to it.
        QTest::mouseClick(sweep, Qt::LeftButton);
        finished.clear();
        QVERIFY(finished.wait(10000));
        QCOMPARE(bars->count(), 3);
        QCOMPARE(fake->benchmarkCalls(), 6);
        app.shutdown();
    }
};

QTEST_MAIN(PerfPanelTest)
#include "test_perf_panel.moc"
