// Small value types the views take and emit. ui/ never includes engine/ or app/ headers: the
// composition root (app/DeskApplication) converts engine data into these.
#pragma once

#include <QString>
#include <QVector>
#include <QtGlobal>

namespace deskui {

// What the user chose in the "Open model" dialog.
struct ModelChoice {
    enum class Kind { PackageFile, HuggingFaceFolder };
    enum class Device { Auto, Gpu, Cpu };
    Kind kind = Kind::PackageFile;
    QString path;
    Device device = Device::Auto;
    int contextAllocation = 4096;
};

struct MemoryEstimateView {
    qint64 weightBytes = 0;
    qint64 kvCacheBytes = 0;
    qint64 workspaceBytes = 0;
    qint64 total() const { return weightBytes + kvCacheBytes + workspaceBytes; }
};

struct SamplingValues {
    double temperature = 1.0;
    int topK = 64;
    double topP = 0.95;
    double minP = 0.0;
    double repeatPenalty = 1.0;
    int maxTokens = 1024;
    quint64 seed = 0;  // 0: random
};

// One decode step as the performance panel plots it.
struct PerfStepSample {
    int position = 0;
    double wallMs = 0.0;
    QVector<double> bucketMs;  // in the order of PerfPanel::setBucketNames
    int launches = 0;          // kernels (GPU) or op calls (CPU) in the step
    bool graph = false;
    bool instrumented = false;
};

struct SweepPoint {
    int contextAllocation = 0;
    double tokensPerSecond = 0.0;
    double msPerToken = 0.0;
};

// What the header shows about the loaded model.
struct ModelStatusView {
    enum class State { NoModel, Loading, Ready, Failed };
    State state = State::NoModel;
    QString name;
    QString detail;  // backend, quantization, KV allocation
};

QString formatBytes(qint64 bytes);

}  // namespace deskui
