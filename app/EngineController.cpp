#include "EngineController.h"

#include <spdlog/spdlog.h>

#include "EngineWorker.h"

namespace desk {

EngineController::EngineController(std::unique_ptr<ChatEngine> engine, QObject* parent, int coalesceMs)
    : QObject(parent), engine_(std::move(engine)), cancelledThrough_(std::make_shared<std::atomic<quint64>>(0)) {
    registerEngineMetaTypes();
    worker_ = new EngineWorker(engine_.get(), cancelledThrough_, coalesceMs);
    worker_->moveToThread(&thread_);
    thread_.setObjectName(QStringLiteral("engine-worker"));

    constexpr auto queued = Qt::QueuedConnection;
    connect(this, &EngineController::requestLoad, worker_, &EngineWorker::loadModel, queued);
    connect(this, &EngineController::requestConvert, worker_, &EngineWorker::convertAndLoad, queued);
    connect(this, &EngineController::requestEstimate, worker_, &EngineWorker::estimateMemory, queued);
    connect(this, &EngineController::requestGenerate, worker_, &EngineWorker::generate, queued);
    connect(this, &EngineController::requestSweep, worker_, &EngineWorker::runSweep, queued);

    connect(worker_, &EngineWorker::loadProgress, this, [this](quint64 taskId, double fraction, const QString& stage) {
        if (taskId == activeTask_) emit loadProgress(fraction, stage);
    }, queued);
    connect(worker_, &EngineWorker::conversionProgress, this,
            [this](quint64 taskId, double fraction, const QString& stage) {
                if (taskId == activeTask_) emit conversionProgress(fraction, stage);
            }, queued);
    connect(worker_, &EngineWorker::conversionFinished, this, [this](quint64, const QString& path) {
        emit conversionFinished(path);
    }, queued);
    connect(worker_, &EngineWorker::modelLoaded, this,
            [this](quint64 taskId, const gemma::ModelInfo& info, double bandwidthGBps) {
                modelInfo_ = info;
                bandwidthGBps_ = bandwidthGBps > 0 ? std::optional<double>(bandwidthGBps) : std::nullopt;
                if (taskId == activeTask_) setActiveTask(0);
                emit modelLoaded(info);
            }, queued);
    connect(worker_, &EngineWorker::modelLoadFailed, this, [this](quint64 taskId, const QString& message) {
        if (taskId == activeTask_) setActiveTask(0);
        emit modelLoadFailed(message);
    }, queued);
    connect(worker_, &EngineWorker::memoryEstimated, this, [this](quint64, const QString& path, const gemma::MemoryEstimate& estimate) {
        emit memoryEstimated(path, estimate);
    }, queued);
    connect(worker_, &EngineWorker::memoryEstimateFailed, this, [this](quint64, const QString& path, const QString& message) {
        emit memoryEstimateFailed(path, message);
    }, queued);
    connect(worker_, &EngineWorker::tokensReady, this,
            [this](quint64 taskId, const QString& text, const QVector<gemma::StepStats>& steps) {
                emit tokensArrived(taskId, text, steps);
            }, queued);
    connect(worker_, &EngineWorker::generationFinished, this, [this](quint64 taskId, const gemma::GenerationStats& stats) {
        if (taskId == activeGeneration_) activeGeneration_ = 0;
        emit generationFinished(taskId, stats);
    }, queued);
    connect(worker_, &EngineWorker::generationFailed, this, [this](quint64 taskId, const QString& message) {
        if (taskId == activeGeneration_) activeGeneration_ = 0;
        emit generationFailed(taskId, message);
    }, queued);
    connect(worker_, &EngineWorker::sweepProgress, this, [this](quint64 taskId, double fraction, const QString& stage) {
        if (taskId == activeTask_) emit sweepProgress(fraction, stage);
    }, queued);
    connect(worker_, &EngineWorker::sweepPointReady, this, [this](quint64, const gemma::DecodeBenchmarkResult& result) {
        emit sweepPointReady(result);
    }, queued);
    connect(worker_, &EngineWorker::sweepFinished, this, [this](quint64 taskId, bool completed, const QString& message) {
        if (taskId == activeTask_) setActiveTask(0);
        emit sweepFinished(completed, message);
    }, queued);

    thread_.start();
}

EngineController::~EngineController() { shutdown(); }

void EngineController::shutdown() {
    if (shutDown_) return;
    shutDown_ = true;
    cancelThrough(lastTaskId_);
    thread_.quit();
    // The worker returns from any engine call at its next token or progress report once
    // cancelled, so this wait is short; the worker is deleted only after its thread stopped.
    thread_.wait();
    delete worker_;
    worker_ = nullptr;
    activeGeneration_ = 0;
    activeTask_ = 0;
}

void EngineController::cancelThrough(quint64 taskId) {
    quint64 current = cancelledThrough_->load();
    while (current < taskId && !cancelledThrough_->compare_exchange_weak(current, taskId)) {
    }
    engine_->cancel();
}

void EngineController::setActiveTask(quint64 taskId) {
    const bool wasBusy = activeTask_ != 0;
    activeTask_ = taskId;
    if (wasBusy != (taskId != 0)) emit busyChanged(taskId != 0);
}

quint64 EngineController::loadModel(const QString& packagePath, const gemma::OpenOptions& options) {
    if (shutDown_) return 0;
    if (activeTask_) cancelThrough(activeTask_);
    const quint64 taskId = nextTaskId();
    setActiveTask(taskId);
    emit loadStarted(packagePath);
    emit requestLoad(taskId, packagePath, options);
    return taskId;
}

quint64 EngineController::convertAndLoad(const QString& modelFolder, const QString& packagePath,
                                         const gemma::OpenOptions& options) {
    if (shutDown_) return 0;
    if (activeTask_) cancelThrough(activeTask_);
    const quint64 taskId = nextTaskId();
    setActiveTask(taskId);
    emit loadStarted(modelFolder);
    emit requestConvert(taskId, modelFolder, packagePath, options);
    return taskId;
}

quint64 EngineController::estimateMemory(const QString& packagePath, const gemma::OpenOptions& options) {
    if (shutDown_) return 0;
    const quint64 taskId = nextTaskId();
    emit requestEstimate(taskId, packagePath, options);
    return taskId;
}

quint64 EngineController::generate(const GenerationJob& job) {
    if (shutDown_ || !modelInfo_ || activeGeneration_ != 0 || activeTask_ != 0) return 0;
    const quint64 taskId = nextTaskId();
    activeGeneration_ = taskId;
    emit generationStarted(taskId);
    emit requestGenerate(taskId, job);
    return taskId;
}

quint64 EngineController::runAllocationSweep(const QVector<int>& allocations, int promptTokens, int decodeTokens) {
    if (shutDown_ || !modelInfo_ || activeGeneration_ != 0 || activeTask_ != 0) return 0;
    const quint64 taskId = nextTaskId();
    setActiveTask(taskId);
    emit sweepStarted();
    emit requestSweep(taskId, allocations, promptTokens, decodeTokens);
    return taskId;
}

void EngineController::stopGeneration() {
    if (activeGeneration_ != 0) {
        spdlog::info("Stopping generation {}", activeGeneration_);
        cancelThrough(activeGeneration_);
    }
}

void EngineController::cancelTask() {
    if (activeTask_ != 0) {
        spdlog::info("Cancelling task {}", activeTask_);
        cancelThrough(activeTask_);
    }
}

}  // namespace desk
