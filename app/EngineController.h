// The GUI thread's handle on the engine. It owns a QThread with an EngineWorker moved onto it and
// forwards requests to it as queued signals; results come back as queued signals and are
// re-emitted here. Nothing here ever waits on the worker except shutdown(), which first cancels.
#pragma once

#include <QObject>
#include <QPointer>
#include <QThread>
#include <atomic>
#include <memory>
#include <optional>

#include "ChatEngine.h"
#include "EngineTypes.h"

namespace desk {

class EngineWorker;

class EngineController : public QObject {
    Q_OBJECT
public:
    static constexpr int kDefaultCoalesceMs = 33;

    explicit EngineController(std::unique_ptr<ChatEngine> engine, QObject* parent = nullptr,
                              int coalesceMs = kDefaultCoalesceMs);
    ~EngineController() override;

    // Cancels whatever runs, stops the thread and waits for it. Safe to call more than once.
    void shutdown();

    bool isModelLoaded() const { return modelInfo_.has_value(); }
    std::optional<gemma::ModelInfo> modelInfo() const { return modelInfo_; }
    std::optional<double> bandwidthCeilingGBps() const { return bandwidthGBps_; }
    bool isGenerating() const { return activeGeneration_ != 0; }
    bool isBusy() const { return activeTask_ != 0; }  // loading, converting or sweeping

    quint64 loadModel(const QString& packagePath, const gemma::OpenOptions& options);
    quint64 convertAndLoad(const QString& modelFolder, const QString& packagePath, const gemma::OpenOptions& options);
    quint64 estimateMemory(const QString& packagePath, const gemma::OpenOptions& options);
    // Returns 0 (and emits nothing) when no model is loaded or a generation already runs.
    quint64 generate(const GenerationJob& job);
    quint64 runAllocationSweep(const QVector<int>& allocations = {4096, 16384, 32768}, int promptTokens = 100,
                               int decodeTokens = 128);

    void stopGeneration();
    void cancelTask();  // a load, conversion or sweep

signals:
    // GUI-side signals (all emitted on the GUI thread).
    void loadStarted(const QString& what);
    void loadProgress(double fraction, const QString& stage);
    void conversionProgress(double fraction, const QString& stage);
    void conversionFinished(const QString& packagePath);
    void modelLoaded(const gemma::ModelInfo& info);
    void modelLoadFailed(const QString& message);
    void memoryEstimated(const QString& packagePath, const gemma::MemoryEstimate& estimate);
    void memoryEstimateFailed(const QString& packagePath, const QString& message);
    void generationStarted(quint64 generationId);
    void tokensArrived(quint64 generationId, const QString& text, const QVector<gemma::StepStats>& steps);
    void generationFinished(quint64 generationId, const gemma::GenerationStats& stats);
    void generationFailed(quint64 generationId, const QString& message);
    void sweepStarted();
    void sweepProgress(double fraction, const QString& stage);
    void sweepPointReady(const gemma::DecodeBenchmarkResult& result);
    void sweepFinished(bool completed, const QString& message);
    void busyChanged(bool busy);

    // Requests to the worker: connected with Qt::QueuedConnection only.
    void requestLoad(quint64 taskId, const QString& packagePath, const gemma::OpenOptions& options);
    void requestConvert(quint64 taskId, const QString& folder, const QString& packagePath,
                        const gemma::OpenOptions& options);
    void requestEstimate(quint64 taskId, const QString& packagePath, const gemma::OpenOptions& options);
    void requestGenerate(quint64 taskId, const desk::GenerationJob& job);
    void requestSweep(quint64 taskId, const QVector<int>& allocations, int promptTokens, int decodeTokens);

private:
    quint64 nextTaskId() { return ++lastTaskId_; }
    void cancelThrough(quint64 taskId);
    void setActiveTask(quint64 taskId);

    std::unique_ptr<ChatEngine> engine_;  // used on the worker thread; cancel() from here
    QThread thread_;
    EngineWorker* worker_ = nullptr;
    std::shared_ptr<std::atomic<quint64>> cancelledThrough_;
    quint64 lastTaskId_ = 0;
    quint64 activeTask_ = 0;
    quint64 activeGeneration_ = 0;
    std::optional<gemma::ModelInfo> modelInfo_;
    std::optional<double> bandwidthGBps_;
    bool shutDown_ = false;
};

}  // namespace desk
