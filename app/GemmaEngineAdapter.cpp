// The real ChatEngine: a thin adapter over gemma::Engine. Anything the desktop needs that the
// engine API lacks (unload, cancelling a load) is handled here.
#include "ChatEngine.h"

#include <atomic>
#include <mutex>
#include <optional>

namespace desk {
namespace {

class GemmaEngineAdapter final : public ChatEngine {
public:
    gemma::Status load(const std::filesystem::path& package, const gemma::OpenOptions& options,
                       const gemma::ProgressCallback& progress) override {
        cancelRequested_.store(false);
        // gemma::Engine::open has no cancel(); the progress callback is its only way out.
        auto wrappedProgress = [&](double fraction, std::string_view stage) {
            if (cancelRequested_.load()) return false;
            return progress ? progress(fraction, stage) : true;
        };
        auto opened = gemma::Engine::open(package, options, wrappedProgress);
        if (!opened) return opened.status();
        // Replace the old engine only after the new one opened, so a failed load keeps the app
        // usable with the model it had.
        // The ceiling the panel judges GB/s against, measured on this device in this process; a
        // failed probe only leaves the panel saying "not measured".
        auto bandwidth = opened.value()->measureReadBandwidth();
        std::lock_guard lock(engineMutex_);
        engine_ = std::move(opened.value());
        bandwidthGBps_ = bandwidth ? std::optional<double>(bandwidth.value()) : std::nullopt;
        return gemma::Status::ok();
    }

    void unload() override {
        std::lock_guard lock(engineMutex_);
        engine_.reset();
    }
    bool isLoaded() const override { return engine_ != nullptr; }
    gemma::ModelInfo info() const override { return engine_ ? engine_->info() : gemma::ModelInfo{}; }

    gemma::Expected<gemma::MemoryEstimate> estimateMemory(const std::filesystem::path& package,
                                                          const gemma::OpenOptions& options) override {
        return gemma::Engine::estimateMemory(package, options);
    }

    gemma::Expected<gemma::QuantizeReport> convert(const std::filesystem::path& inputDir,
                                                   const std::filesystem::path& outputFile,
                                                   const gemma::ProgressCallback& progress) override {
        cancelRequested_.store(false);
        auto wrappedProgress = [&](double fraction, std::string_view stage) {
            if (cancelRequested_.load()) return false;
            return progress ? progress(fraction, stage) : true;
        };
        return gemma::quantizeCheckpoint(inputDir, outputFile, gemma::QuantizeOptions{}, wrappedProgress);
    }

    gemma::Expected<gemma::GenerationStats> generate(const gemma::GenerationRequest& request,
                                                     const gemma::TokenCallback& onToken) override {
        if (!engine_) return gemma::Status(gemma::ErrorCode::InvalidArgument, "No model is loaded.");
        cancelRequested_.store(false);
        return engine_->generate(request, onToken);
    }

    gemma::Expected<gemma::DecodeBenchmarkResult> benchmarkDecode(
        const gemma::DecodeBenchmarkRequest& request, const gemma::ProgressCallback& progress) override {
        if (!engine_) return gemma::Status(gemma::ErrorCode::InvalidArgument, "No model is loaded.");
        cancelRequested_.store(false);
        return engine_->benchmarkDecode(request, progress);
    }

    void cancel() override {
        cancelRequested_.store(true);
        // Engine::cancel() is thread-safe by contract; the mutex only guards the pointer, which the
        // worker thread replaces on load/unload while this runs on the GUI thread.
        std::lock_guard lock(engineMutex_);
        if (engine_) engine_->cancel();
    }

    std::optional<double> measuredBandwidthGBps() const override { return bandwidthGBps_; }

private:
    std::unique_ptr<gemma::Engine> engine_;
    std::mutex engineMutex_;
    std::optional<double> bandwidthGBps_;
    std::atomic<bool> cancelRequested_{false};
};

}  // namespace

std::unique_ptr<ChatEngine> makeGemmaEngine() { return std::make_unique<GemmaEngineAdapter>(); }

const char* bucketLabel(gemma::Bucket bucket) {
    switch (bucket) {
    case gemma::Bucket::Fp4Matvec: return "FP4 matvec";
    case gemma::Bucket::Attention: return "Attention";
    case gemma::Bucket::NormElementwise: return "Norms + elementwise";
    case gemma::Bucket::LmHead: return "LM head";
    case gemma::Bucket::Sampling: return "Sampling";
    case gemma::Bucket::Gap: return "Gaps";
    case gemma::Bucket::Count: break;
    }
    return "?";
}

const char* deviceLabel(gemma::Device device) {
    switch (device) {
    case gemma::Device::Auto: return "Auto";
    case gemma::Device::Cpu: return "CPU";
    case gemma::Device::Cuda: return "GPU";
    }
    return "?";
}

const char* stopReasonLabel(gemma::StopReason reason) {
    switch (reason) {
    case gemma::StopReason::EndOfTurn: return "end of turn";
    case gemma::StopReason::MaxTokens: return "max tokens";
    case gemma::StopReason::ContextFull: return "context full";
    case gemma::StopReason::Cancelled: return "stopped";
    }
    return "?";
}

std::string describeLoadError(const gemma::Status& status) {
    std::string headline;
    switch (status.code()) {
    case gemma::ErrorCode::Io: headline = "The model file could not be read."; break;
    case gemma::ErrorCode::InvalidFile:
        headline = "This file is not a valid Gemma Desk model package (it may be damaged or incomplete).";
        break;
    case gemma::ErrorCode::InvalidConfig:
    case gemma::ErrorCode::Unsupported:
        headline = "This model is not supported by Gemma Desk.";
        break;
    case gemma::ErrorCode::OutOfMemory:
        headline = "Not enough memory to load this model. Try a smaller KV allocation or the CPU device.";
        break;
    case gemma::ErrorCode::Device: headline = "The GPU reported an error. Try the CPU device."; break;
    case gemma::ErrorCode::Cancelled: headline = "Cancelled."; break;
    case gemma::ErrorCode::InvalidArgument: headline = "The request was not valid."; break;
    case gemma::ErrorCode::Internal: headline = "The engine hit an internal error."; break;
    case gemma::ErrorCode::Ok: return {};
    }
    if (status.message().empty() || status.code() == gemma::ErrorCode::Cancelled) return headline;
    return headline + "\n\nDetails: " + status.message();
}

}  // namespace desk
