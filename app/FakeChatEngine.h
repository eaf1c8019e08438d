// A deterministic stand-in for the inference engine, for tests, screenshots and `--fake-engine`.
// It streams a scripted reply at a configurable rate, can be told to fail loads, and attaches
// synthetic but plausible StepStats to every token so the performance panel has data.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ChatEngine.h"

namespace desk {

struct FakeEngineConfig {
    double tokensPerSecond = 200.0;       // 0 = as fast as possible
    std::string replyText;                // empty: a built-in Markdown reply
    bool repeatReply = false;             // cycle the reply until maxNewTokens
    std::optional<gemma::Status> loadError;  // when set, every load fails with it
    double loadSeconds = 0.05;            // simulated load time (progress reported in steps)
    double convertSeconds = 0.05;
    std::vector<gemma::StepStats> recordedSteps;  // replayed cyclically; empty: synthesized
    std::optional<double> bandwidthGBps = 1000.0;
    double sweepBaseTokensPerSecond = 120.0;  // tok/s at 4K; larger allocations are a bit slower
};

class FakeChatEngine final : public ChatEngine {
public:
    explicit FakeChatEngine(FakeEngineConfig config = {});

    gemma::Status load(const std::filesystem::path& package, const gemma::OpenOptions& options,
                       const gemma::ProgressCallback& progress) override;
    void unload() override;
    bool isLoaded() const override;
    gemma::ModelInfo info() const override;
    gemma::Expected<gemma::MemoryEstimate> estimateMemory(const std::filesystem::path& package,
                                                          const gemma::OpenOptions& options) override;
    gemma::Expected<gemma::QuantizeReport> convert(const std::filesystem::path& inputDir,
                                                   const std::filesystem::path& outputFile,
                                                   const gemma::ProgressCallback& progress) override;
    gemma::Expected<gemma::GenerationStats> generate(const gemma::GenerationRequest& request,
                                                     const gemma::TokenCallback& onToken) override;
    gemma::Expected<gemma::DecodeBenchmarkResult> benchmarkDecode(
        const gemma::DecodeBenchmarkRequest& request, const gemma::ProgressCallback& progress) override;
    void cancel() override;
    std::optional<double> measuredBandwidthGBps() const override;

    // What the last generate() received (tests check that the chat history reached the engine).
    gemma::GenerationRequest lastRequest() const;
    int generateCalls() const { return generateCalls_.load(); }
    int benchmarkCalls() const { return benchmarkCalls_.load(); }

    // The step stats the fake reports for a given position (deterministic; tests recompute them).
    gemma::StepStats stepFor(int index, int position) const;
    // The tok/s the fake reports for a sweep point.
    double sweepTokensPerSecond(int contextAllocation) const;
    static std::string defaultReply();

private:
    bool sleepUntilOrCancelled(std::chrono::steady_clock::time_point deadline) const;
    std::vector<std::string> splitIntoTokens(const std::string& text) const;

    FakeEngineConfig config_;
    std::atomic<bool> cancelled_{false};
    std::atomic<bool> loaded_{false};
    std::atomic<int> generateCalls_{0};
    std::atomic<int> benchmarkCalls_{0};
    mutable std::mutex mutex_;
    gemma::ModelInfo info_;
    gemma::GenerationRequest lastRequest_;
};

}  // namespace desk
