#include "EngineWorker.h"

#include <QElapsedTimer>
#include <spdlog/spdlog.h>

namespace desk {

void registerEngineMetaTypes() {
    qRegisterMetaType<gemma::OpenOptions>();
    qRegisterMetaType<gemma::ModelInfo>();
    qRegisterMetaType<gemma::MemoryEstimate>();
    qRegisterMetaType<gemma::StepStats>();
    qRegisterMetaType<QVector<gemma::StepStats>>();
    qRegisterMetaType<gemma::GenerationStats>();
    qRegisterMetaType<gemma::DecodeBenchmarkResult>();
    qRegisterMetaType<desk::GenerationJob>();
    qRegisterMetaType<QVector<int>>();
}

namespace {

// Engines may report progress per tensor (thousands of times); the GUI needs a few dozen updates
// a second at most, so progress signals are rate-limited here.
class ProgressThrottle {
public:
    explicit ProgressThrottle(int intervalMs) : intervalMs_(intervalMs) { timer_.start(); }
    bool shouldEmit(double fraction) {
        if (fraction >= 1.0 || timer_.elapsed() >= intervalMs_) {
            timer_.restart();
            return true;
        }
        return false;
    }

private:
    int intervalMs_;
    QElapsedTimer timer_;
};

QString toQString(std::string_view text) {
    return QString::fromUtf8(text.data(), static_cast<qsizetype>(text.size()));
}

}  // namespace

EngineWorker::EngineWorker(ChatEngine* engine, std::shared_ptr<std::atomic<quint64>> cancelledThrough,
                           int coalesceMs)
    : engine_(engine), cancelledThrough_(std::move(cancelledThrough)), coalesceMs_(coalesceMs) {}

void EngineWorker::doLoad(quint64 taskId, const QString& packagePath, const gemma::OpenOptions& options) {
    spdlog::info("Loading model {} (device {}, KV allocation {})", packagePath.toStdString(),
                 deviceLabel(options.device), options.contextAllocation);
    ProgressThrottle throttle(30);
    auto progress = [&](double fraction, std::string_view stage) {
        if (throttle.shouldEmit(fraction)) emit loadProgress(taskId, fraction, toQString(stage));
        return !isCancelled(taskId);
    };
    QElapsedTimer timer;
    timer.start();
    const gemma::Status status = engine_->load(packagePath.toStdString(), options, progress);
    if (!status.isOk()) {
        spdlog::warn("Model load failed: {}", status.message());
        emit modelLoadFailed(taskId, QString::fromStdString(describeLoadError(status)));
        return;
    }
    spdlog::info("Model loaded in {} ms", timer.elapsed());
    emit modelLoaded(taskId, engine_->info(), engine_->measuredBandwidthGBps().value_or(0.0));
}

void EngineWorker::loadModel(quint64 taskId, const QString& packagePath, const gemma::OpenOptions& options) {
    if (isCancelled(taskId)) {
        emit modelLoadFailed(taskId, QStringLiteral("Cancelled."));
        return;
    }
    doLoad(taskId, packagePath, options);
}

void EngineWorker::convertAndLoad(quint64 taskId, const QString& modelFolder, const QString& packagePath,
                                  const gemma::OpenOptions& options) {
    spdlog::info("Converting {} to {}", modelFolder.toStdString(), packagePath.toStdString());
    ProgressThrottle throttle(30);
    auto progress = [&](double fraction, std::string_view stage) {
        if (throttle.shouldEmit(fraction)) emit conversionProgress(taskId, fraction, toQString(stage));
        return !isCancelled(taskId);
    };
    if (isCancelled(taskId)) {
        emit modelLoadFailed(taskId, QStringLiteral("Cancelled."));
        return;
    }
    auto report = engine_->convert(modelFolder.toStdString(), packagePath.toStdString(), progress);
    if (!report) {
        spdlog::warn("Conversion failed: {}", report.status().message());
        const gemma::Status& status = report.status();
        const QString message = status.code() == gemma::ErrorCode::Cancelled
                                    ? QStringLiteral("Conversion cancelled.")
                                    : QStringLiteral("Could not convert the model folder.\n\n%1")
                                          .arg(QString::fromStdString(describeLoadError(status)));
        emit modelLoadFailed(taskId, message);
        return;
    }
    emit conversionFinished(taskId, packagePath);
    doLoad(taskId, packagePath, options);
}

void EngineWorker::estimateMemory(quint64 taskId, const QString& packagePath, const gemma::OpenOptions& options) {
    auto estimate = engine_->estimateMemory(packagePath.toStdString(), options);
    if (!estimate) {
        emit memoryEstimateFailed(taskId, packagePath, QString::fromStdString(describeLoadError(estimate.status())));
        return;
    }
    emit memoryEstimated(taskId, packagePath, estimate.value());
}

void EngineWorker::generate(quint64 taskId, const GenerationJob& job) {
    if (isCancelled(taskId)) {
        gemma::GenerationStats stats;
        stats.stopReason = gemma::StopReason::Cancelled;
        emit generationFinished(taskId, stats);
        return;
    }
    gemma::GenerationRequest request;
    request.messages = job.messages;
    request.sampling = job.sampling;
    request.maxNewTokens = job.maxNewTokens;

    // Tokens are coalesced here: one queued signal per `coalesceMs_` carries every token decoded
    // since the last one, so the GUI thread sees ~30 small batches a second instead of one event
    // per token (thousands a second on a fast GPU).
    std::string pendingText;
    QVector<gemma::StepStats> pendingSteps;
    QElapsedTimer sinceFlush;
    sinceFlush.start();
    auto flush = [&] {
        if (pendingText.empty() && pendingSteps.isEmpty()) return;
        emit tokensReady(taskId, QString::fromStdString(pendingText), pendingSteps);
        pendingText.clear();
        pendingSteps.clear();
        sinceFlush.restart();
    };
    auto onToken = [&](const gemma::TokenEvent& event) {
        pendingText += event.text;
        pendingSteps.push_back(event.step);
        if (sinceFlush.elapsed() >= coalesceMs_) flush();
        return !isCancelled(taskId);
    };
    auto result = engine_->generate(request, onToken);
    flush();
    if (!result) {
        spdlog::warn("Generation failed: {}", result.status().message());
        emit generationFailed(taskId, QString::fromStdString(result.status().message()));
        return;
    }
    spdlog::info("Generated {} tokens ({:.1f} tok/s, stop: {})", result->generatedTokens,
                 result->decodeTokensPerSecond, stopReasonLabel(result->stopReason));
    emit generationFinished(taskId, result.value());
}

void EngineWorker::runSweep(quint64 taskId, const QVector<int>& allocations, int promptTokens, int decodeTokens) {
    const int points = static_cast<int>(allocations.size());
    for (int index = 0; index < points; ++index) {
        if (isCancelled(taskId)) {
            emit sweepFinished(taskId, false, QStringLiteral("Sweep cancelled."));
            return;
        }
        gemma::DecodeBenchmarkRequest request;
        request.contextAllocation = allocations[index];
        request.promptTokens = promptTokens;
        request.decodeTokens = decodeTokens;
        ProgressThrottle throttle(50);
        const QString stage = QStringLiteral("KV allocation %1K").arg(allocations[index] / 1024);
        auto progress = [&](double fraction, std::string_view) {
            const double overall = (index + fraction) / points;
            if (throttle.shouldEmit(fraction)) emit sweepProgress(taskId, overall, stage);
            return !isCancelled(taskId);
        };
        auto result = engine_->benchmarkDecode(request, progress);
        if (!result) {
            const bool cancelled = result.status().code() == gemma::ErrorCode::Cancelled;
            emit sweepFinished(taskId, false,
                               cancelled ? QStringLiteral("Sweep cancelled.")
                                         : QString::fromStdString(result.status().message()));
            return;
        }
        spdlog::info("Sweep point {}: {:.1f} tok/s", allocations[index], result->tokensPerSecond);
        emit sweepPointReady(taskId, result.value());
    }
    emit sweepProgress(taskId, 1.0, QStringLiteral("Done"));
    emit sweepFinished(taskId, true, QString());
}

}  // namespace desk
