// Runs engine calls on the worker thread. It lives on the QThread that EngineController owns and
// only ever talks to the controller through queued signals, so a long call here never blocks the
// GUI. Every task carries an id; the controller cancels by raising `cancelledThrough`, which the
// worker polls from the engine's token/progress callbacks (a stop pressed before a task even
// started still cancels it, which a single boolean reset per task could not guarantee).
#pragma once

#include <QObject>
#include <QString>
#include <QVector>
#include <atomic>
#include <memory>

#include "ChatEngine.h"
#include "EngineTypes.h"

namespace desk {

class EngineWorker : public QObject {
    Q_OBJECT
public:
    EngineWorker(ChatEngine* engine, std::shared_ptr<std::atomic<quint64>> cancelledThrough,
                 int coalesceMs);

public slots:
    void loadModel(quint64 taskId, const QString& packagePath, const gemma::OpenOptions& options);
    void convertAndLoad(quint64 taskId, const QString& modelFolder, const QString& packagePath,
                        const gemma::OpenOptions& options);
    void estimateMemory(quint64 taskId, const QString& packagePath, const gemma::OpenOptions& options);
    void generate(quint64 taskId, const desk::GenerationJob& job);
    void runSweep(quint64 taskId, const QVector<int>& allocations, int promptTokens, int decodeTokens);

signals:
    void loadProgress(quint64 taskId, double fraction, const QString& stage);
    void modelLoaded(quint64 taskId, const gemma::ModelInfo& info, double bandwidthGBps);
    void modelLoadFailed(quint64 taskId, const QString& message);
    void conversionProgress(quint64 taskId, double fraction, const QString& stage);
    void conversionFinished(quint64 taskId, const QString& packagePath);
    void memoryEstimated(quint64 taskId, const QString& packagePath, const gemma::MemoryEstimate& estimate);
    void memoryEstimateFailed(quint64 taskId, const QString& packagePath, const QString& message);
    void tokensReady(quint64 taskId, const QString& text, const QVector<gemma::StepStats>& steps);
    void generationFinished(quint64 taskId, const gemma::GenerationStats& stats);
    void generationFailed(quint64 taskId, const QString& message);
    void sweepProgress(quint64 taskId, double fraction, const QString& stage);
    void sweepPointReady(quint64 taskId, const gemma::DecodeBenchmarkResult& result);
    void sweepFinished(quint64 taskId, bool completed, const QString& message);

private:
    bool isCancelled(quint64 taskId) const { return taskId <= cancelledThrough_->load(); }
    void doLoad(quint64 taskId, const QString& packagePath, const gemma::OpenOptions& options);

    ChatEngine* engine_;
    std::shared_ptr<std::atomic<quint64>> cancelledThrough_;
    int coalesceMs_;
};

}  // namespace desk
