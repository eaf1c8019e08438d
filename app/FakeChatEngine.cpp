#include "FakeChatEngine.h"

#include <algorithm>
#include <cmath>
#include <thread>

namespace desk {

namespace {
constexpr std::int64_t kFakeWeightBytes = 2'600'000'000;  // about a 5B-parameter FP4 decoder
constexpr std::int64_t kFakeKvBytesPerPosition = 40 * 1024;
}  // namespace

FakeChatEngine::FakeChatEngine(FakeEngineConfig config) : config_(std::move(config)) {}

std::string FakeChatEngine::defaultReply() {
    return "Here is a small example of **streaming** output.\n\n"
           "A decode step is dominated by the FP4 matrix-vector products, so the speed follows "
           "memory bandwidth:\n\n"
           "1. Read the quantized weights once per token.\n"
           "2. Attend over the live band of the KV cache.\n"
           "3. Sample the next token.\n\n"
           "```cpp\n"
           "double tokensPerSecond(double bandwidthGBps, double gigabytesPerToken) {\n"
           "    return bandwidthGBps / gigabytesPerToken;\n"
           "}\n"
           "```\n\n"
           "With 1,000 GB/s and 2.6 GB per token that is roughly *380 tokens per second*.";
}

gemma::Status FakeChatEngine::load(const std::filesystem::path& package, const gemma::OpenOptions& options,
                                   const gemma::ProgressCallback& progress) {
    cancelled_.store(false);
    const int steps = 10;
    for (int step = 0; step <= steps; ++step) {
        if (progress && !progress(static_cast<double>(step) / steps, "Loading weights"))
            return {gemma::ErrorCode::Cancelled, "Loading was cancelled."};
        if (cancelled_.load()) return {gemma::ErrorCode::Cancelled, "Loading was cancelled."};
        std::this_thread::sleep_for(std::chrono::duration<double>(config_.loadSeconds / steps));
    }
    if (config_.loadError) return *config_.loadError;
    std::lock_guard lock(mutex_);
    info_ = {};
    info_.name = package.stem().string().empty() ? "fake-gemma" : package.stem().string();
    info_.architecture = "gemma4_text";
    info_.backend = options.device == gemma::Device::Cpu ? "cpu (fp32 reference)" : "Fake GPU";
    info_.quantization = "fp4-e2m1-g128 + fp8-e4m3 embedding";
    info_.vocabSize = 262144;
    info_.hiddenSize = 2560;
    info_.layers = 34;
    info_.contextAllocation = options.contextAllocation;
    info_.weightBytes = kFakeWeightBytes;
    info_.kvBytesPerPosition = kFakeKvBytesPerPosition;
    loaded_.store(true);
    return gemma::Status::ok();
}

void FakeChatEngine::unload() { loaded_.store(false); }
bool FakeChatEngine::isLoaded() const { return loaded_.load(); }

gemma::ModelInfo FakeChatEngine::info() const {
    std::lock_guard lock(mutex_);
    return info_;
}

gemma::Expected<gemma::MemoryEstimate> FakeChatEngine::estimateMemory(const std::filesystem::path&,
                                                                      const gemma::OpenOptions& options) {
    if (config_.loadError) return *config_.loadError;
    gemma::MemoryEstimate estimate;
    estimate.weightBytes = kFakeWeightBytes + 400'000'000;  // + FP8 embedding
    estimate.kvCacheBytes = kFakeKvBytesPerPosition * options.contextAllocation;
    estimate.workspaceBytes = 64 * 1024 * 1024;
    return estimate;
}

gemma::Expected<gemma::QuantizeReport> FakeChatEngine::convert(const std::filesystem::path& inputDir,
                                                               const std::filesystem::path&,
                                                               const gemma::ProgressCallback& progress) {
    cancelled_.store(false);
    if (!std::filesystem::exists(inputDir / "config.json"))
        return gemma::Status(gemma::ErrorCode::Io, "No config.json in " + inputDir.string());
    const int steps = 20;
    for (int step = 0; step <= steps; ++step) {
        if ((progress && !progress(static_cast<double>(step) / steps, "Quantizing tensors")) || cancelled_.load())
            return gemma::Status(gemma::ErrorCode::Cancelled, "Conversion was cancelled.");
        std::this_thread::sleep_for(std::chrono::duration<double>(config_.convertSeconds / steps));
    }
    return gemma::QuantizeReport{100, kFakeWeightBytes};
}

std::vector<std::string> FakeChatEngine::splitIntoTokens(const std::string& text) const {
    // Word pieces with their leading whitespace, like a sentencepiece stream.
    std::vector<std::string> tokens;
    std::string current;
    for (char c : text) {
        if ((c == ' ' || c == '\n') && !current.empty() && current.back() != ' ' && current.back() != '\n') {
            tokens.push_back(current);
            current.clear();
        }
        current.push_back(c);
    }
    if (!current.empty()) tokens.push_back(current);
    return tokens;
}

gemma::StepStats FakeChatEngine::stepFor(int index, int position) const {
    if (!config_.recordedSteps.empty()) {
        gemma::StepStats step = config_.recordedSteps[static_cast<std::size_t>(index) % config_.recordedSteps.size()];
        step.position = position;
        return step;
    }
    gemma::StepStats step;
    step.position = position;
    step.instrumented = true;
    step.graph = true;
    // A gentle wobble so the live charts move; attention grows with the position as it should.
    const double wobble = 0.05 * std::sin(index * 0.3);
    step.bucketMs[static_cast<int>(gemma::Bucket::Fp4Matvec)] = 2.10 + wobble;
    step.bucketMs[static_cast<int>(gemma::Bucket::Attention)] = 0.20 + 0.00005 * position;
    step.bucketMs[static_cast<int>(gemma::Bucket::NormElementwise)] = 0.15;
    step.bucketMs[static_cast<int>(gemma::Bucket::LmHead)] = 0.35;
    step.bucketMs[static_cast<int>(gemma::Bucket::Sampling)] = 0.05;
    step.bucketMs[static_cast<int>(gemma::Bucket::Gap)] = 0.10 + 0.02 * std::cos(index * 0.7);
    step.launches = {238, 68, 170, 1, 2, 0};
    step.wallMs = 0.0;
    for (double ms : step.bucketMs) step.wallMs += ms;
    return step;
}

double FakeChatEngine::sweepTokensPerSecond(int contextAllocation) const {
    // Same positions, larger allocation: only a little slower (the band read is the same).
    return config_.sweepBaseTokensPerSecond / (1.0 + 0.002 * (contextAllocation / 4096.0));
}

bool FakeChatEngine::sleepUntilOrCancelled(std::chrono::steady_clock::time_point deadline) const {
    while (std::chrono::steady_clock::now() < deadline) {
        if (cancelled_.load()) return false;
        const auto remaining = deadline - std::chrono::steady_clock::now();
        std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(remaining, std::chrono::milliseconds(2)));
    }
    return !cancelled_.load();
}

gemma::Expected<gemma::GenerationStats> FakeChatEngine::generate(const gemma::GenerationRequest& request,
                                                                 const gemma::TokenCallback& onToken) {
    cancelled_.store(false);
    generateCalls_.fetch_add(1);
    {
        std::lock_guard lock(mutex_);
        lastRequest_ = request;
    }
    if (!loaded_.load()) return gemma::Status(gemma::ErrorCode::InvalidArgument, "No model is loaded.");
    const auto start = std::chrono::steady_clock::now();
    int promptTokens = 0;
    for (const auto& message : request.messages) promptTokens += 4 + static_cast<int>(splitIntoTokens(message.text).size());

    const std::string reply = config_.replyText.empty() ? defaultReply() : config_.replyText;
    const std::vector<std::string> pieces = splitIntoTokens(reply);
    gemma::GenerationStats stats;
    stats.promptTokens = promptTokens;
    stats.stopReason = gemma::StopReason::EndOfTurn;
    const auto interval = config_.tokensPerSecond > 0 ? std::chrono::duration<double>(1.0 / config_.tokensPerSecond)
                                                      : std::chrono::duration<double>(0);
    std::chrono::steady_clock::time_point firstToken{};
    for (int index = 0;; ++index) {
        if (index >= request.maxNewTokens) {
            stats.stopReason = gemma::StopReason::MaxTokens;
            break;
        }
        if (!config_.repeatReply && index >= static_cast<int>(pieces.size())) break;
        const auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(interval * (index + 1));
        if (!sleepUntilOrCancelled(deadline)) {
            stats.stopReason = gemma::StopReason::Cancelled;
            break;
        }
        gemma::TokenEvent event;
        event.id = 1000 + index;
        event.text = pieces[static_cast<std::size_t>(index) % pieces.size()];
        event.step = stepFor(index, promptTokens + index);
        if (index == 0) firstToken = std::chrono::steady_clock::now();
        stats.tokens.push_back(event.id);
        ++stats.generatedTokens;
        if (!onToken(event)) {
            stats.stopReason = gemma::StopReason::Cancelled;
            break;
        }
    }
    const auto end = std::chrono::steady_clock::now();
    using Ms = std::chrono::duration<double, std::milli>;
    stats.prefillMs = 5.0;
    stats.timeToFirstTokenMs = stats.generatedTokens > 0 ? Ms(firstToken - start).count() : 0.0;
    stats.decodeMs = stats.generatedTokens > 0 ? Ms(end - firstToken).count() : 0.0;
    stats.decodeTokensPerSecond =
        stats.decodeMs > 0 && stats.generatedTokens > 1 ? (stats.generatedTokens - 1) * 1000.0 / stats.decodeMs : 0.0;
    return stats;
}

gemma::Expected<gemma::DecodeBenchmarkResult> FakeChatEngine::benchmarkDecode(
    const gemma::DecodeBenchmarkRequest& request, const gemma::ProgressCallback& progress) {
    cancelled_.store(false);
    benchmarkCalls_.fetch_add(1);
    if (!loaded_.load()) return gemma::Status(gemma::ErrorCode::InvalidArgument, "No model is loaded.");
    gemma::DecodeBenchmarkResult result;
    result.contextAllocation = request.contextAllocation;
    result.tokensPerSecond = sweepTokensPerSecond(request.contextAllocation);
    result.msPerToken = 1000.0 / result.tokensPerSecond;
    for (int index = 0; index < request.decodeTokens; ++index) {
        if (cancelled_.load() || (progress && !progress(static_cast<double>(index) / request.decodeTokens, "Decoding")))
            return gemma::Status(gemma::ErrorCode::Cancelled, "The benchmark was cancelled.");
        gemma::StepStats step = stepFor(index, request.promptTokens + index);
        step.wallMs = result.msPerToken;
        result.steps.push_back(step);
        if (index % 16 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (progress) progress(1.0, "Done");
    return result;
}

void FakeChatEngine::cancel() { cancelled_.store(true); }

std::optional<double> FakeChatEngine::measuredBandwidthGBps() const { return config_.bandwidthGBps; }

gemma::GenerationRequest FakeChatEngine::lastRequest() const {
    std::lock_guard lock(mutex_);
    return lastRequest_;
}

}  // namespace desk
