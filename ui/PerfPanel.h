// The performance panel: where each decode step's time goes (stacked per-bucket ms/token over a
// rolling window), tok/s per step, achieved GB/s against the measured bandwidth ceiling, kernels
// per step and whether the step ran as a CUDA graph; plus the KV-allocation sweep chart and
// CSV/JSON/PNG export. It is fed plain samples (PerfStepSample, SweepPoint), never engine types.
#pragma once

#include <QVector>
#include <QWidget>
#include <optional>

#include "UiTypes.h"

class QLabel;
class QProgressBar;
class QPushButton;
class QTimer;

QT_BEGIN_NAMESPACE
class QAreaSeries;
class QBarCategoryAxis;
class QBarSeries;
class QBarSet;
class QChart;
class QChartView;
class QLineSeries;
class QValueAxis;
QT_END_NAMESPACE

namespace deskui {

class PerfPanel : public QWidget {
    Q_OBJECT
public:
    static constexpr int kRollingWindow = 128;  // steps in the stacked chart
    static constexpr int kHistoryLimit = 4096;  // steps kept for export and the tok/s chart
    static constexpr int kSpeedPoints = 256;    // the tok/s chart averages history into this many
    static constexpr int kRefreshMs = 100;      // charts redraw at most this often

    explicit PerfPanel(QWidget* parent = nullptr);

    void setBucketNames(const QStringList& names);
    // Bytes one token streams: weights plus the KV cache of every position before it.
    void setTraffic(qint64 weightBytes, qint64 kvBytesPerPosition);
    // The device's measured bandwidth in GB/s; nullopt shows "not measured".
    void setBandwidthCeiling(std::optional<double> gigabytesPerSecond);
    void setBackendText(const QString& text);

    // Samples are stored at once; charts follow within kRefreshMs (a redraw per token batch
    // would cost the GUI thread more than the stream itself).
    void appendSamples(const QVector<PerfStepSample>& samples);
    void clearSamples();
    void refreshNow();

    void setSweepRunning(bool running);
    void setSweepProgress(double fraction, const QString& stage);
    void addSweepPoint(const SweepPoint& point);
    void clearSweep();
    void setSweepMessage(const QString& message);

    // Data and rendering for export (also what the tests inspect).
    QString stepsCsv() const;
    QString sweepCsv() const;
    QByteArray toJson() const;
    QImage renderImage();
    bool exportTo(const QString& path, QString* error = nullptr);

    QChart* bucketChart() const { return bucketChart_; }
    QChart* speedChart() const { return speedChart_; }
    QChart* sweepChart() const { return sweepChart_; }
    QLineSeries* speedSeries() const { return speedSeries_; }
    QBarSet* sweepBarSet() const { return sweepSet_; }
    const QVector<QAreaSeries*>& bucketSeries() const { return bucketAreas_; }
    const QVector<PerfStepSample>& samples() const { return history_; }
    const QVector<SweepPoint>& sweepPoints() const { return sweep_; }
    QString metricText(const QString& metric) const;  // "tokPerSecond", "gbPerSecond", "ceiling", ...

signals:
    void sweepRequested();
    void sweepCancelRequested();

protected:
    void changeEvent(QEvent* event) override;

private:
    void applyChartColors();
    void rebuildLegend();
    QWidget* makeTile(const QString& key, const QString& label);
    void rebuildBucketSeries();
    void refreshCharts();
    void refreshMetrics();
    void chooseExport();

    QStringList bucketNames_;
    qint64 weightBytes_ = 0;
    qint64 kvBytesPerPosition_ = 0;
    std::optional<double> ceilingGBps_;
    QVector<PerfStepSample> history_;
    qint64 stepsSeen_ = 0;  // total steps since clear (x axis), survives trimming of history_
    QVector<SweepPoint> sweep_;

    QChart* bucketChart_ = nullptr;
    QChartView* bucketView_ = nullptr;
    QValueAxis* bucketX_ = nullptr;
    QValueAxis* bucketY_ = nullptr;
    QVector<QAreaSeries*> bucketAreas_;
    QChart* speedChart_ = nullptr;
    QChartView* speedView_ = nullptr;
    QLineSeries* speedSeries_ = nullptr;
    QValueAxis* speedX_ = nullptr;
    QValueAxis* speedY_ = nullptr;
    QChart* sweepChart_ = nullptr;
    QChartView* sweepView_ = nullptr;
    QBarSeries* sweepSeries_ = nullptr;
    QBarSet* sweepSet_ = nullptr;
    QBarCategoryAxis* sweepX_ = nullptr;
    QValueAxis* sweepY_ = nullptr;

    QHash<QString, QLabel*> metricLabels_;
    QWidget* legend_ = nullptr;
    QLabel* sweepPlaceholder_ = nullptr;
    QLabel* backendLabel_ = nullptr;
    QPushButton* sweepButton_ = nullptr;
    QProgressBar* sweepProgress_ = nullptr;
    QLabel* sweepStatus_ = nullptr;
    bool sweepRunning_ = false;
    QTimer* refreshTimer_ = nullptr;
};

}  // namespace deskui
