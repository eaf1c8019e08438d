#include "PerfPanel.h"

#include <QAreaSeries>
#include <QBarCategoryAxis>
#include <QBarSeries>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QGridLayout>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineSeries>
#include <QMenu>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollArea>
#include <QStyle>
#include <QTimer>
#include <QValueAxis>
#include <QVBoxLayout>
#include <algorithm>
#include <numeric>

#include "Theme.h"

namespace deskui {

QString formatBytes(qint64 bytes) {
    const double value = static_cast<double>(bytes);
    if (value >= 1e9) return QStringLiteral("%1 GB").arg(value / 1e9, 0, 'f', 2);
    if (value >= 1e6) return QStringLiteral("%1 MB").arg(value / 1e6, 0, 'f', 1);
    if (value >= 1e3) return QStringLiteral("%1 kB").arg(value / 1e3, 0, 'f', 1);
    return QStringLiteral("%1 B").arg(bytes);
}

namespace {

QChart* makeChart(const QString& title) {
    auto* chart = new QChart;
    chart->setBackgroundRoundness(10);
    chart->setTitle(title);
    chart->setMargins(QMargins(6, 6, 6, 6));
    chart->legend()->hide();
    chart->setAnimationOptions(QChart::NoAnimation);  // live data: animations would lag behind
    return chart;
}

// Colors and fonts of a chart for the current theme. QChart::setTheme resets every color, so
// this runs after it, and again whenever the app's palette changes (light/dark switch).
void styleChart(QChart* chart, QChartView* view) {
    const ThemeColors& colors = Theme::colors();
    chart->setTheme(colors.dark ? QChart::ChartThemeDark : QChart::ChartThemeLight);
    chart->setBackgroundBrush(colors.surface);
    chart->setBackgroundPen(QPen(colors.border));
    QFont titleFont = chart->titleFont();
    titleFont.setBold(true);
    chart->setTitleFont(titleFont);
    chart->setTitleBrush(colors.text);
    for (QAbstractAxis* axis : chart->axes()) {
        axis->setLabelsColor(colors.mutedText);
        axis->setTitleBrush(colors.mutedText);
        axis->setGridLineColor(colors.chartGrid);
        axis->setLinePenColor(colors.border);
        QFont font = axis->labelsFont();
        font.setPointSizeF(8.0);
        axis->setLabelsFont(font);
        axis->setTitleFont(font);
    }
    view->setBackgroundBrush(colors.window);
}

void titleAxis(QAbstractAxis* axis, const QString& title) { axis->setTitleText(title); }

QChartView* makeView(QChart* chart, int height, QWidget* parent) {
    auto* view = new QChartView(chart, parent);
    view->setRenderHint(QPainter::Antialiasing);
    view->setMinimumHeight(height);
    view->setFrameShape(QFrame::NoFrame);
    return view;
}

}  // namespace

PerfPanel::PerfPanel(QWidget* parent) : QWidget(parent) {
    auto* outer = new QVBoxLayout(this);
    outer->setContentsMargins(0, 0, 0, 0);
    auto* scroll = new QScrollArea(this);
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    outer->addWidget(scroll);
    auto* content = new QWidget(scroll);
    auto* layout = new QVBoxLayout(content);
    layout->setContentsMargins(14, 12, 14, 14);
    layout->setSpacing(10);
    scroll->setWidget(content);

    backendLabel_ = new QLabel(tr("No model loaded"), content);
    backendLabel_->setObjectName(QStringLiteral("MetricLabel"));
    backendLabel_->setWordWrap(true);
    layout->addWidget(backendLabel_);

    auto* tiles = new QGridLayout;
    tiles->setSpacing(8);
    tiles->addWidget(makeTile(QStringLiteral("tokPerSecond"), tr("tok/s")), 0, 0);
    tiles->addWidget(makeTile(QStringLiteral("msPerToken"), tr("ms / token")), 0, 1);
    tiles->addWidget(makeTile(QStringLiteral("gbPerSecond"), tr("achieved GB/s")), 0, 2);
    tiles->addWidget(makeTile(QStringLiteral("ceiling"), tr("of measured ceiling")), 1, 0);
    tiles->addWidget(makeTile(QStringLiteral("kernels"), tr("kernels / step")), 1, 1);
    tiles->addWidget(makeTile(QStringLiteral("graph"), tr("CUDA graph")), 1, 2);
    layout->addLayout(tiles);

    bucketChart_ = makeChart(tr("Where a decode step goes (ms / token)"));
    bucketX_ = new QValueAxis(bucketChart_);
    bucketY_ = new QValueAxis(bucketChart_);
    titleAxis(bucketX_, tr("decode step"));
    titleAxis(bucketY_, tr("ms"));
    bucketX_->setLabelFormat(QStringLiteral("%d"));
    bucketChart_->addAxis(bucketX_, Qt::AlignBottom);
    bucketChart_->addAxis(bucketY_, Qt::AlignLeft);
    bucketView_ = makeView(bucketChart_, 240, content);
    layout->addWidget(bucketView_);
    // Our own legend: QLegend elides six bucket names to a few letters in a narrow panel.
    legend_ = new QWidget(content);
    new QGridLayout(legend_);
    legend_->layout()->setContentsMargins(8, 0, 8, 0);
    layout->addWidget(legend_);

    speedChart_ = makeChart(tr("Decode speed (tok/s per step)"));
    speedSeries_ = new QLineSeries(speedChart_);
    speedSeries_->setName(tr("tok/s"));
    speedSeries_->setUseOpenGL(false);
    speedChart_->addSeries(speedSeries_);
    speedX_ = new QValueAxis(speedChart_);
    speedY_ = new QValueAxis(speedChart_);
    titleAxis(speedX_, tr("decode step"));
    titleAxis(speedY_, tr("tok/s"));
    speedX_->setLabelFormat(QStringLiteral("%d"));
    speedChart_->addAxis(speedX_, Qt::AlignBottom);
    speedChart_->addAxis(speedY_, Qt::AlignLeft);
    speedSeries_->attachAxis(speedX_);
    speedSeries_->attachAxis(speedY_);
    speedView_ = makeView(speedChart_, 180, content);
    layout->addWidget(speedView_);

    auto* sweepTitle = new QLabel(tr("KV allocation sweep"), content);
    sweepTitle->setObjectName(QStringLiteral("PanelSection"));
    layout->addWidget(sweepTitle);
    auto* sweepHelp = new QLabel(tr("Decodes the same positions with 4K, 16K and 32K KV slots allocated. "
                                    "Speed should not depend on the allocation, only on the live positions."),
                                 content);
    sweepHelp->setObjectName(QStringLiteral("MetricLabel"));
    sweepHelp->setWordWrap(true);
    layout->addWidget(sweepHelp);
    auto* sweepRow = new QHBoxLayout;
    sweepButton_ = new QPushButton(tr("Run allocation sweep"), content);
    sweepButton_->setObjectName(QStringLiteral("PrimaryButton"));
    sweepProgress_ = new QProgressBar(content);
    sweepProgress_->setRange(0, 1000);
    sweepProgress_->setTextVisible(false);
    sweepProgress_->hide();
    sweepRow->addWidget(sweepButton_);
    sweepRow->addWidget(sweepProgress_, 1);
    layout->addLayout(sweepRow);
    sweepStatus_ = new QLabel(content);
    sweepStatus_->setObjectName(QStringLiteral("MetricLabel"));
    sweepStatus_->setWordWrap(true);
    layout->addWidget(sweepStatus_);

    sweepChart_ = makeChart(tr("tok/s by KV allocation"));
    sweepSet_ = new QBarSet(tr("tok/s"));
    sweepSeries_ = new QBarSeries(sweepChart_);
    sweepSeries_->append(sweepSet_);
    sweepSeries_->setLabelsVisible(true);
    sweepSeries_->setLabelsFormat(QStringLiteral("@value"));
    sweepSeries_->setLabelsPrecision(4);
    sweepChart_->addSeries(sweepSeries_);
    sweepX_ = new QBarCategoryAxis(sweepChart_);
    sweepY_ = new QValueAxis(sweepChart_);
    titleAxis(sweepX_, tr("KV allocation (slots)"));
    titleAxis(sweepY_, tr("tok/s"));
    sweepChart_->addAxis(sweepX_, Qt::AlignBottom);
    sweepChart_->addAxis(sweepY_, Qt::AlignLeft);
    sweepSeries_->attachAxis(sweepX_);
    sweepSeries_->attachAxis(sweepY_);
    sweepView_ = makeView(sweepChart_, 220, content);
    sweepView_->hide();  // an empty category axis draws oddly; show the chart with its first bar
    layout->addWidget(sweepView_);
    sweepPlaceholder_ = new QLabel(tr("No sweep yet."), content);
    sweepPlaceholder_->setObjectName(QStringLiteral("MetricLabel"));
    layout->addWidget(sweepPlaceholder_);

    auto* exportButton = new QPushButton(tr("Export\u2026"), content);
    exportButton->setToolTip(tr("Save the step statistics as CSV or JSON, or the panel as PNG"));
    layout->addWidget(exportButton, 0, Qt::AlignRight);
    layout->addStretch(1);

    connect(sweepButton_, &QPushButton::clicked, this, [this] {
        if (sweepRunning_) emit sweepCancelRequested();
        else emit sweepRequested();
    });
    connect(exportButton, &QPushButton::clicked, this, &PerfPanel::chooseExport);
    refreshTimer_ = new QTimer(this);
    refreshTimer_->setSingleShot(true);
    refreshTimer_->setInterval(kRefreshMs);
    connect(refreshTimer_, &QTimer::timeout, this, &PerfPanel::refreshNow);

    applyChartColors();
    setBucketNames({tr("FP4 matvec"), tr("Attention"), tr("Norms + elementwise"), tr("LM head"), tr("Sampling"),
                    tr("Gaps")});
    refreshMetrics();
}

QWidget* PerfPanel::makeTile(const QString& key, const QString& label) {
    auto* tile = new QFrame(this);
    tile->setObjectName(QStringLiteral("MetricTile"));
    auto* layout = new QVBoxLayout(tile);
    layout->setContentsMargins(10, 8, 10, 8);
    layout->setSpacing(0);
    auto* value = new QLabel(QStringLiteral("\u2014"), tile);
    value->setObjectName(QStringLiteral("MetricValue"));
    auto* caption = new QLabel(label, tile);
    caption->setObjectName(QStringLiteral("MetricLabel"));
    layout->addWidget(value);
    layout->addWidget(caption);
    metricLabels_.insert(key, value);
    return tile;
}

QString PerfPanel::metricText(const QString& metric) const {
    const QLabel* label = metricLabels_.value(metric);
    return label ? label->text() : QString();
}

void PerfPanel::setBucketNames(const QStringList& names) {
    bucketNames_ = names;
    rebuildBucketSeries();
    refreshCharts();
}

void PerfPanel::rebuildBucketSeries() {
    for (QAreaSeries* area : bucketAreas_) {
        bucketChart_->removeSeries(area);
        delete area;
    }
    bucketAreas_.clear();
    const ThemeColors& colors = Theme::colors();
    // A stacked area chart: bucket b fills between the running sums through b-1 and through b.
    for (int bucket = 0; bucket < bucketNames_.size(); ++bucket) {
        auto* upper = new QLineSeries;
        auto* lower = bucket == 0 ? nullptr : new QLineSeries;
        auto* area = new QAreaSeries(upper, lower);
        upper->setParent(area);
        if (lower) lower->setParent(area);
        area->setName(bucketNames_[bucket]);
        QColor fill = colors.bucketColors[bucket % 8];
        area->setColor(fill);
        area->setBorderColor(fill.darker(110));
        bucketChart_->addSeries(area);
        area->attachAxis(bucketX_);
        area->attachAxis(bucketY_);
        bucketAreas_.push_back(area);
    }
    rebuildLegend();
}

void PerfPanel::rebuildLegend() {
    // Labels are created when the bucket names change and only re-colored afterwards: this also
    // runs from changeEvent while Qt re-polishes every widget, when deleting widgets is unsafe.
    auto* grid = static_cast<QGridLayout*>(legend_->layout());
    if (grid->count() != bucketNames_.size()) {
        while (QLayoutItem* item = grid->takeAt(0)) {
            delete item->widget();
            delete item;
        }
        for (int bucket = 0; bucket < bucketNames_.size(); ++bucket) {
            auto* entry = new QLabel(legend_);
            entry->setTextFormat(Qt::RichText);
            grid->addWidget(entry, bucket / 3, bucket % 3);
        }
    }
    const ThemeColors& colors = Theme::colors();
    for (int bucket = 0; bucket < bucketNames_.size(); ++bucket) {
        auto* entry = qobject_cast<QLabel*>(grid->itemAt(bucket)->widget());
        entry->setText(QStringLiteral("<span style='color:%1'>&#9632;</span>&nbsp;<span style='color:%2'>%3</span>")
                           .arg(colors.bucketColors[bucket % 8].name(), colors.mutedText.name(),
                                bucketNames_[bucket].toHtmlEscaped()));
    }
}

void PerfPanel::applyChartColors() {
    const ThemeColors& colors = Theme::colors();
    styleChart(bucketChart_, bucketView_);
    styleChart(speedChart_, speedView_);
    styleChart(sweepChart_, sweepView_);
    for (int bucket = 0; bucket < bucketAreas_.size(); ++bucket) {
        const QColor fill = colors.bucketColors[bucket % 8];
        bucketAreas_[bucket]->setColor(fill);
        bucketAreas_[bucket]->setBorderColor(fill.darker(110));
    }
    QPen speedPen(colors.accent);
    speedPen.setWidthF(2.0);
    speedSeries_->setPen(speedPen);
    sweepSet_->setColor(colors.accent);
    sweepSet_->setBorderColor(colors.accent);
    sweepSet_->setLabelColor(colors.accentText);
    if (legend_) rebuildLegend();
}

void PerfPanel::changeEvent(QEvent* event) {
    QWidget::changeEvent(event);
    // Deferred: palette changes arrive in the middle of Qt's style re-polish of all widgets.
    if (event->type() == QEvent::PaletteChange || event->type() == QEvent::ApplicationPaletteChange)
        QMetaObject::invokeMethod(this, &PerfPanel::applyChartColors, Qt::QueuedConnection);
}

void PerfPanel::setTraffic(qint64 weightBytes, qint64 kvBytesPerPosition) {
    weightBytes_ = weightBytes;
    kvBytesPerPosition_ = kvBytesPerPosition;
    refreshMetrics();
}

void PerfPanel::setBandwidthCeiling(std::optional<double> gigabytesPerSecond) {
    ceilingGBps_ = gigabytesPerSecond;
    refreshMetrics();
}

void PerfPanel::setBackendText(const QString& text) { backendLabel_->setText(text); }

void PerfPanel::appendSamples(const QVector<PerfStepSample>& samples) {
    if (samples.isEmpty()) return;
    history_ += samples;
    stepsSeen_ += samples.size();
    if (history_.size() > kHistoryLimit) history_.remove(0, history_.size() - kHistoryLimit);
    if (!refreshTimer_->isActive()) refreshTimer_->start();
}

void PerfPanel::refreshNow() {
    refreshTimer_->stop();
    refreshCharts();
    refreshMetrics();
}

void PerfPanel::clearSamples() {
    history_.clear();
    stepsSeen_ = 0;
    refreshCharts();
    refreshMetrics();
}

void PerfPanel::refreshCharts() {
    const qsizetype total = history_.size();
    const qsizetype windowStart = std::max<qsizetype>(0, total - kRollingWindow);
    const qint64 firstIndex = stepsSeen_ - total;  // global step number of history_[0]
    double maxStack = 0.0;
    QVector<QList<QPointF>> sums(bucketNames_.size());
    for (qsizetype i = windowStart; i < total; ++i) {
        const PerfStepSample& sample = history_[i];
        // Only timed steps carry buckets; the engine times one step in N (the others replay the
        // CUDA graph at full speed), so the stack is drawn from those and tok/s from every step.
        if (!sample.instrumented) continue;
        const double x = static_cast<double>(firstIndex + i);
        double running = 0.0;
        for (int bucket = 0; bucket < bucketNames_.size(); ++bucket) {
            running += bucket < sample.bucketMs.size() ? sample.bucketMs[bucket] : 0.0;
            sums[bucket].append(QPointF(x, running));
        }
        maxStack = std::max({maxStack, running, sample.wallMs});
    }
    for (int bucket = 0; bucket < bucketAreas_.size(); ++bucket) {
        bucketAreas_[bucket]->upperSeries()->replace(sums[bucket]);
        if (bucket > 0) bucketAreas_[bucket]->lowerSeries()->replace(sums[bucket - 1]);
    }
    const double windowFirst = static_cast<double>(firstIndex + windowStart);
    // Before any data, show a full window's worth of steps rather than a degenerate 0..1 axis.
    bucketX_->setRange(windowFirst, total == 0 ? double(kRollingWindow)
                                               : std::max(windowFirst + 1.0, static_cast<double>(stepsSeen_ - 1)));
    bucketY_->setRange(0.0, maxStack > 0 ? maxStack * 1.15 : 1.0);
    bucketY_->applyNiceNumbers();  // ticks at 0.5, 1, 2.5 ... instead of 0.87, 1.74

    // tok/s over the whole history, averaged into at most kSpeedPoints bins (each point is the
    // speed of its bin: steps / summed wall time) so the line stays cheap to draw.
    QList<QPointF> speed;
    double maxSpeed = 0.0;
    const qsizetype binSize = std::max<qsizetype>(1, (total + kSpeedPoints - 1) / kSpeedPoints);
    for (qsizetype start = 0; start < total; start += binSize) {
        const qsizetype end = std::min(total, start + binSize);
        double wall = 0.0;
        for (qsizetype i = start; i < end; ++i) wall += history_[i].wallMs;
        const double tokensPerSecond = wall > 0 ? 1000.0 * static_cast<double>(end - start) / wall : 0.0;
        speed.append(QPointF(static_cast<double>(firstIndex + end - 1), tokensPerSecond));
        maxSpeed = std::max(maxSpeed, tokensPerSecond);
    }
    speedSeries_->replace(speed);
    speedX_->setRange(static_cast<double>(firstIndex),
                      total == 0 ? double(kRollingWindow)
                                 : std::max(static_cast<double>(firstIndex + 1), static_cast<double>(stepsSeen_ - 1)));
    speedY_->setRange(0.0, maxSpeed > 0 ? maxSpeed * 1.15 : 1.0);
    speedY_->applyNiceNumbers();
}

void PerfPanel::refreshMetrics() {
    const qsizetype total = history_.size();
    const qsizetype windowStart = std::max<qsizetype>(0, total - kRollingWindow);
    double wallSum = 0.0;
    double bytesSum = 0.0;
    for (qsizetype i = windowStart; i < total; ++i) {
        wallSum += history_[i].wallMs;
        bytesSum += static_cast<double>(weightBytes_) +
                    static_cast<double>(kvBytesPerPosition_) * (history_[i].position + 1);
    }
    const qsizetype count = total - windowStart;
    auto set = [this](const QString& key, const QString& text) {
        QLabel* label = metricLabels_.value(key);
        if (!label || label->text() == text) return;
        label->setText(text);
        // Words ("not measured") get a smaller face than numbers so the tile keeps its size.
        const QString name = text.size() > 7 ? QStringLiteral("MetricValueSmall") : QStringLiteral("MetricValue");
        if (label->objectName() != name) {
            label->setObjectName(name);
            label->style()->unpolish(label);
            label->style()->polish(label);
        }
    };
    const QString none = QStringLiteral("\u2014");
    if (count == 0 || wallSum <= 0) {
        for (const char* key : {"tokPerSecond", "msPerToken", "gbPerSecond", "kernels", "graph"})
            set(QString::fromLatin1(key), none);
        set(QStringLiteral("ceiling"), ceilingGBps_ ? none : tr("not measured"));
        return;
    }
    const double msPerToken = wallSum / static_cast<double>(count);
    set(QStringLiteral("tokPerSecond"), QString::number(1000.0 / msPerToken, 'f', 1));
    set(QStringLiteral("msPerToken"), QString::number(msPerToken, 'f', 2));
    if (weightBytes_ > 0) {
        const double gbPerSecond = bytesSum / (wallSum / 1000.0) / 1e9;
        set(QStringLiteral("gbPerSecond"), QString::number(gbPerSecond, 'f', 1));
        set(QStringLiteral("ceiling"), ceilingGBps_ && *ceilingGBps_ > 0
                                           ? QStringLiteral("%1%").arg(100.0 * gbPerSecond / *ceilingGBps_, 0, 'f', 1)
                                           : tr("not measured"));
    } else {
        set(QStringLiteral("gbPerSecond"), none);
        set(QStringLiteral("ceiling"), ceilingGBps_ ? none : tr("not measured"));
    }
    const PerfStepSample& last = history_.last();
    // Kernels per step are counted on timed steps only: the latest one in the history.
    auto timed = std::find_if(history_.crbegin(), history_.crend(), [](const PerfStepSample& s) { return s.instrumented; });
    set(QStringLiteral("kernels"), timed != history_.crend() ? QString::number(timed->launches) : none);
    set(QStringLiteral("graph"), last.graph ? tr("on") : tr("off"));
}

void PerfPanel::setSweepRunning(bool running) {
    sweepRunning_ = running;
    sweepButton_->setText(running ? tr("Cancel sweep") : tr("Run allocation sweep"));
    sweepProgress_->setVisible(running);
    if (running) {
        sweepProgress_->setValue(0);
        sweepStatus_->setText(tr("Starting\u2026"));
    }
}

void PerfPanel::setSweepProgress(double fraction, const QString& stage) {
    sweepProgress_->setValue(static_cast<int>(std::clamp(fraction, 0.0, 1.0) * 1000));
    sweepStatus_->setText(stage);
}

void PerfPanel::addSweepPoint(const SweepPoint& point) {
    sweep_.push_back(point);
    const QString category = point.contextAllocation % 1024 == 0
                                 ? QStringLiteral("%1K").arg(point.contextAllocation / 1024)
                                 : QString::number(point.contextAllocation);
    sweepX_->append(category);
    sweepSet_->append(point.tokensPerSecond);
    sweepView_->show();
    sweepPlaceholder_->hide();
    double maximum = 0.0;
    for (const SweepPoint& p : sweep_) maximum = std::max(maximum, p.tokensPerSecond);
    sweepY_->setRange(0.0, maximum > 0 ? maximum * 1.2 : 1.0);
    sweepY_->applyNiceNumbers();
}

void PerfPanel::clearSweep() {
    sweep_.clear();
    sweepX_->clear();
    if (sweepSet_->count() > 0) sweepSet_->remove(0, sweepSet_->count());
    sweepView_->hide();
    sweepPlaceholder_->show();
    sweepY_->setRange(0.0, 1.0);
    sweepStatus_->clear();
}

void PerfPanel::setSweepMessage(const QString& message) { sweepStatus_->setText(message); }

QString PerfPanel::stepsCsv() const {
    QStringList header{QStringLiteral("position"), QStringLiteral("wall_ms")};
    for (const QString& name : bucketNames_) header << QStringLiteral("\"%1 ms\"").arg(name);
    header << QStringLiteral("launches") << QStringLiteral("graph") << QStringLiteral("instrumented");
    QString out = header.join(QLatin1Char(',')) + QLatin1Char('\n');
    for (const PerfStepSample& sample : history_) {
        QStringList row{QString::number(sample.position), QString::number(sample.wallMs, 'f', 4)};
        for (int bucket = 0; bucket < bucketNames_.size(); ++bucket)
            row << QString::number(bucket < sample.bucketMs.size() ? sample.bucketMs[bucket] : 0.0, 'f', 4);
        row << QString::number(sample.launches) << QString::number(sample.graph ? 1 : 0)
            << QString::number(sample.instrumented ? 1 : 0);
        out += row.join(QLatin1Char(',')) + QLatin1Char('\n');
    }
    return out;
}

QString PerfPanel::sweepCsv() const {
    QString out = QStringLiteral("context_allocation,tokens_per_second,ms_per_token\n");
    for (const SweepPoint& point : sweep_)
        out += QStringLiteral("%1,%2,%3\n")
                   .arg(point.contextAllocation)
                   .arg(point.tokensPerSecond, 0, 'f', 3)
                   .arg(point.msPerToken, 0, 'f', 4);
    return out;
}

QByteArray PerfPanel::toJson() const {
    QJsonArray steps;
    for (const PerfStepSample& sample : history_) {
        QJsonObject buckets;
        for (int bucket = 0; bucket < bucketNames_.size(); ++bucket)
            buckets[bucketNames_[bucket]] = bucket < sample.bucketMs.size() ? sample.bucketMs[bucket] : 0.0;
        steps.append(QJsonObject{{"position", sample.position},
                                 {"wallMs", sample.wallMs},
                                 {"bucketMs", buckets},
                                 {"launches", sample.launches},
                                 {"graph", sample.graph},
                                 {"instrumented", sample.instrumented}});
    }
    QJsonArray sweep;
    for (const SweepPoint& point : sweep_)
        sweep.append(QJsonObject{{"contextAllocation", point.contextAllocation},
                                 {"tokensPerSecond", point.tokensPerSecond},
                                 {"msPerToken", point.msPerToken}});
    QJsonObject root{{"weightBytes", static_cast<double>(weightBytes_)},
                     {"kvBytesPerPosition", static_cast<double>(kvBytesPerPosition_)},
                     {"bandwidthCeilingGBps", ceilingGBps_ ? QJsonValue(*ceilingGBps_) : QJsonValue()},
                     {"steps", steps},
                     {"sweep", sweep}};
    return QJsonDocument(root).toJson(QJsonDocument::Indented);
}

QImage PerfPanel::renderImage() { return grab().toImage(); }

bool PerfPanel::exportTo(const QString& path, QString* error) {
    const QString suffix = QFileInfo(path).suffix().toLower();
    if (suffix == QLatin1String("png")) {
        if (renderImage().save(path, "PNG")) return true;
        if (error) *error = tr("Could not write %1.").arg(path);
        return false;
    }
    QByteArray bytes;
    if (suffix == QLatin1String("json")) {
        bytes = toJson();
    } else {
        bytes = stepsCsv().toUtf8();
        if (!sweep_.isEmpty()) bytes += "\n" + sweepCsv().toUtf8();
    }
    QFile file(path);
    if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate) || file.write(bytes) != bytes.size()) {
        if (error) *error = tr("Could not write %1: %2").arg(path, file.errorString());
        return false;
    }
    return true;
}

void PerfPanel::chooseExport() {
    QString selectedFilter;
    const QString path = QFileDialog::getSaveFileName(
        this, tr("Export performance data"), QStringLiteral("gemma-desk-perf.csv"),
        tr("CSV (*.csv);;JSON (*.json);;PNG image (*.png)"), &selectedFilter);
    if (path.isEmpty()) return;
    QString error;
    if (!exportTo(path, &error)) QMessageBox::warning(this, tr("Export failed"), error);
}

}  // namespace deskui
