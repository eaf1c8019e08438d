// The engine facade: opens a package, owns the backend and the tokenizer, runs generation.
#include "gemma/Engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "Backend.h"
#include "CpuBackend.h"
#if GEMMA_WITH_CUDA
#include "CudaBackend.h"
#endif
#include "ModelWeights.h"
#include "Package.h"
#include "Tokenizer.h"
#include "gemma/Sampler.h"

namespace gemma {

const char* deviceName(Device device) {
    switch (device) {
        case Device::Auto: return "auto";
        case Device::Cpu: return "cpu";
        case Device::Cuda: return "cuda";
    }
    return "?";
}

const char* bucketName(Bucket bucket) {
    switch (bucket) {
        case Bucket::Fp4Matvec: return "fp4_matvec";
        case Bucket::Attention: return "attention";
        case Bucket::NormElementwise: return "norm_elementwise";
        case Bucket::LmHead: return "lm_head";
        case Bucket::Sampling: return "sampling";
        case Bucket::Gap: return "gap";
        case Bucket::Count: break;
    }
    return "?";
}

const char* stopReasonName(StopReason reason) {
    switch (reason) {
        case StopReason::EndOfTurn: return "end of turn";
        case StopReason::MaxTokens: return "max tokens";
        case StopReason::ContextFull: return "context full";
        case StopReason::Cancelled: return "cancelled";
    }
    return "?";
}

const char* engineVersion() { return GEMMA_VERSION; }

const char* kvCacheTypeName(KvCacheType type) {
    switch (type) {
        case KvCacheType::FullF16: return "full-f16";
        case KvCacheType::F32: return "f32";
        case KvCacheType::F16: return "f16";
        case KvCacheType::Bf16: return "bf16";
    }
    return "?";
}

bool parseKvCacheType(const std::string& text, KvCacheType& type) {
    for (const KvCacheType t : {KvCacheType::FullF16, KvCacheType::F32, KvCacheType::F16, KvCacheType::Bf16}) {
        if (text == kvCacheTypeName(t)) {
            type = t;
            return true;
        }
    }
    return false;
}

namespace {

using Clock = std::chrono::steady_clock;
double msSince(Clock::time_point start) { return std::chrono::duration<double, std::milli>(Clock::now() - start).count(); }

// Wall time of a step; for an instrumented one also the gap (wall − the timed buckets).
void finishStep(StepStats& step, Clock::time_point start, bool instrumented) {
    step.wallMs = std::max(0.0, msSince(start) - step.instrumentationMs);
    step.instrumented = instrumented;
    if (!instrumented) return;
    double kernels = 0.0;
    for (int b = 0; b < kBucketCount; ++b) {
        if (b != static_cast<int>(Bucket::Gap)) kernels += step.bucketMs[b];
    }
    step.bucketMs[static_cast<int>(Bucket::Gap)] = std::max(0.0, step.wallMs - kernels);
}

std::int64_t kvBytesPerPosition(const ModelConfig& c, KvCacheType type) {
    std::int64_t bytes = 0;
    for (const auto& g : c.layers) {
        if (!g.kvShared) bytes += 2LL * g.kvHeads * g.headDim * kvCacheElementBytes(type, g.type == LayerType::Sliding);
    }
    return bytes;
}

bool isQuantized(const Package& package) { return package.metadata().linearFormat == "fp4-e2m1-g128"; }

// Picks and builds the backend: `cuda` insists on the GPU; `auto` takes it when the build has
// CUDA, a device is present and the package is quantized (the kernels stream FP4), else the CPU.
Expected<std::unique_ptr<Backend>> makeBackend(const OpenOptions& options, const Package& package, const ModelWeights& weights) {
    const Device device = options.device;
    const int allocation = options.contextAllocation;
#if GEMMA_WITH_CUDA
    const bool wantGpu = device == Device::Cuda || (device == Device::Auto && cudaDeviceAvailable() && isQuantized(package));
    if (wantGpu) {
        if (!cudaDeviceAvailable()) return Status{ErrorCode::Device, "no CUDA device is available (use --device cpu)"};
        auto gpu = makeCudaBackend(package, weights, allocation, options);
        // `auto` falls back to the CPU for a model the kernels do not implement; running out of
        // GPU memory stays an error the user sees (lower the allocation, or choose the CPU).
        if (gpu || device == Device::Cuda || gpu.status().code() != ErrorCode::Unsupported) return gpu;
    }
#else
    (void)isQuantized;
    if (device == Device::Cuda) return Status{ErrorCode::Unsupported, "this build has no CUDA backend; use --device cpu"};
#endif
    auto backend = makeCpuBackend(package, weights);
    GEMMA_RETURN_IF_ERROR(backend->resetContext(allocation));
    return backend;
}

class EngineImpl final : public Engine {
public:
    Status load(const std::filesystem::path& path, const OpenOptions& options, const ProgressCallback& progress) {
        if (progress && !progress(0.0, "opening package")) return {ErrorCode::Cancelled, "loading cancelled"};
        if (options.contextAllocation <= 0 || options.contextAllocation > (1 << 20)) {
            return {ErrorCode::InvalidArgument, "the context allocation must be between 1 and 1048576 positions"};
        }
        if (options.gemmPrefillChunk < kPrefillChunk || options.gemmPrefillChunk > kMaxGemmPrefillChunk) {
            return {ErrorCode::InvalidArgument, "the GEMM prefill chunk must be between " + std::to_string(kPrefillChunk) + " and " +
                                                    std::to_string(kMaxGemmPrefillChunk) + " positions"};
        }
        auto package = Package::open(path);
        if (!package) return package.status();
        package_ = std::make_unique<Package>(std::move(package.value()));
        if (progress && !progress(0.3, "checking tensors")) return {ErrorCode::Cancelled, "loading cancelled"};
        auto weights = ModelWeights::bind(*package_);
        if (!weights) return weights.status();
        weights_ = std::make_unique<ModelWeights>(std::move(weights.value()));
        hasTokenizer_ = !package_->tokenizerModel().empty();
        if (hasTokenizer_) {
            auto tokenizer = Tokenizer::fromModelBytes(package_->tokenizerModel());
            if (!tokenizer) return tokenizer.status();
            tokenizer_ = std::move(tokenizer.value());
        }
        if (hasTokenizer_ && tokenizer_.vocabSize() > package_->config().vocabSize) {
            return {ErrorCode::InvalidFile, "the tokenizer has " + std::to_string(tokenizer_.vocabSize()) +
                                                " pieces but the model's vocabulary is " + std::to_string(package_->config().vocabSize)};
        }
        if (progress && !progress(0.6, "allocating the KV cache")) return {ErrorCode::Cancelled, "loading cancelled"};
        auto backend = makeBackend(options, *package_, *weights_);
        if (!backend) return backend.status();
        backend_ = std::move(backend.value());

        const auto& c = package_->config();
        info_.name = package_->metadata().name;
        info_.architecture = "gemma4_text";
        info_.backend = backend_->name();
        info_.quantization = package_->metadata().linearFormat == "f32"
                                 ? "unquantized (f32)"
                                 : package_->metadata().linearFormat + " + " + package_->metadata().embeddingFormat + " embedding";
        info_.vocabSize = c.vocabSize;
        info_.hiddenSize = c.hiddenSize;
        info_.layers = c.numLayers;
        info_.contextAllocation = options.contextAllocation;
        info_.weightBytes = weights_->decoderBytesPerToken;
        info_.kvBytesPerPosition = kvBytesPerPosition(c, backend_->kvCacheType());
        info_.hasTokenizer = hasTokenizer_;
        info_.configJson = c.toJson();

        stopIds_ = c.eosTokenIds;
        if (hasTokenizer_) {
            const auto& special = tokenizer_.special();
            for (auto id : {special.eos, special.turnEnd, special.toolResponseStart}) {
                if (id >= 0) stopIds_.push_back(id);
            }
        }
        if (progress) progress(1.0, "ready");
        return Status::ok();
    }

    const ModelInfo& info() const override { return info_; }

    std::vector<std::int32_t> tokenizeChat(const std::vector<ChatMessage>& messages) const override {
        if (!hasTokenizer_) return {};
        auto ids = renderChat(tokenizer_, messages, package_->metadata().emptyThoughtChannel);
        return ids ? ids.value() : std::vector<std::int32_t>{};
    }

    std::string detokenize(const std::vector<std::int32_t>& ids) const override {
        return hasTokenizer_ ? tokenizer_.decode(ids) : std::string{};
    }

    Expected<GenerationStats> generate(const GenerationRequest& request, const TokenCallback& onToken) override {
        clearCancel();
        if (request.messages.empty() == request.rawTokens.empty()) {
            return Status{ErrorCode::InvalidArgument, "a request needs either chat messages or raw tokens (exactly one)"};
        }
        if (request.maxNewTokens < 0) return Status{ErrorCode::InvalidArgument, "max new tokens must not be negative"};
        auto sampler = Sampler::create(request.sampling);
        if (!sampler) return sampler.status();
        std::vector<std::int32_t> prompt;
        if (!request.messages.empty()) {
            if (!hasTokenizer_) return Status{ErrorCode::Unsupported, "this package has no tokenizer (a benchmark package): feed raw tokens"};
            auto rendered = renderChat(tokenizer_, request.messages, package_->metadata().emptyThoughtChannel);
            if (!rendered) return rendered.status();
            prompt = std::move(rendered.value());
        } else {
            prompt = request.rawTokens;
        }
        const int allocation = backend_->contextAllocation();
        if (static_cast<std::int64_t>(prompt.size()) >= allocation) {
            return Status{ErrorCode::InvalidArgument, "the prompt has " + std::to_string(prompt.size()) +
                                                          " tokens but the context allocation is " + std::to_string(allocation) +
                                                          "; start a new conversation or raise the allocation"};
        }
        GEMMA_RETURN_IF_ERROR(backend_->resetContext(allocation));

        GenerationStats stats;
        stats.promptTokens = static_cast<int>(prompt.size());
        const auto vocab = static_cast<std::size_t>(package_->config().vocabSize);
        std::vector<float> logits;
        const auto begin = Clock::now();
        StepStats prefillStep;
        prefillStep.position = 0;
        prefillStep.positions = static_cast<int>(prompt.size());
        GEMMA_RETURN_IF_ERROR(backend_->forward(prompt, 0, static_cast<bool>(request.onLogits), logits, &prefillStep));
        stats.prefillMs = msSince(begin);
        if (request.onLogits) {
            for (std::size_t p = 0; p < prompt.size(); ++p) {
                request.onLogits(static_cast<std::int32_t>(p), logits.data() + p * vocab, static_cast<std::int32_t>(vocab));
            }
            logits.erase(logits.begin(), logits.end() - static_cast<std::ptrdiff_t>(vocab));
        }

        std::vector<std::int32_t> history = prompt;
        IncrementalDecoder decoder(tokenizer_);
        int position = static_cast<int>(prompt.size());  // where the last accepted id runs next
        const auto decodeStart = Clock::now();
        stats.stopReason = StopReason::MaxTokens;
        bool finished = false;
        // Takes one chosen id: records it, streams it, and says whether decoding goes on.
        auto accept = [&](std::int32_t next, const StepStats& step) {
            if (stats.generatedTokens == 0) stats.timeToFirstTokenMs = msSince(begin);
            history.push_back(next);
            stats.tokens.push_back(next);
            ++stats.generatedTokens;
            const bool stop = request.stopAtEndOfTurn && std::find(stopIds_.begin(), stopIds_.end(), next) != stopIds_.end();
            TokenEvent event;
            event.id = next;
            event.text = stop || !hasTokenizer_ ? std::string{} : decoder.push(next);
            event.step = step;
            if (onToken && !onToken(event)) {
                stats.stopReason = StopReason::Cancelled;
            } else if (stop) {
                stats.stopReason = StopReason::EndOfTurn;
            } else if (stats.generatedTokens == request.maxNewTokens) {
                stats.stopReason = StopReason::MaxTokens;
            } else if (position >= allocation) {
                stats.stopReason = StopReason::ContextFull;
            } else if (cancelRequested()) {
                stats.stopReason = StopReason::Cancelled;
            } else {
                return true;
            }
            finished = true;
            return false;
        };
        // The first id comes from the prefill's logits (that step's stats are the prefill's).
        if (request.maxNewTokens > 0 && !cancelRequested()) {
            const auto sampleStart = Clock::now();
            const std::int32_t first = sampler->sample(logits, history);
            prefillStep.bucketMs[static_cast<int>(Bucket::Sampling)] += msSince(sampleStart);
            prefillStep.launches[static_cast<int>(Bucket::Sampling)] += 1;
            finishStep(prefillStep, begin, true);
            accept(first, prefillStep);
        } else {
            stats.stopReason = request.maxNewTokens > 0 ? StopReason::Cancelled : StopReason::MaxTokens;
            finished = true;
        }
        // Greedy choices with no penalty and no logits wanted: the backend picks on the device
        // and chains steps there (Backend::decodeGreedy), between the instrumented steps.
        const bool greedyOnBackend = Sampler::isPlainArgmax(request.sampling) && !request.onLogits;
        // Top-k sampling without a penalty needs only the row's best entries (Sampler::
        // sampleFromBest, the same draws as sample()): the backend selects them (on the device
        // for CUDA) instead of handing over the whole row.
        const bool bestOnBackend = Sampler::samplesFromBest(request.sampling) && !request.onLogits;
        const int every = std::max(0, request.instrumentEvery);
        int decodeSteps = 0;  // steps run after the prefill
        while (!finished) {
            const bool instrumentThis = every > 0 && decodeSteps % every == 0;
            if (greedyOnBackend && !instrumentThis) {
                int burst = std::min(request.maxNewTokens - stats.generatedTokens, allocation - position);
                if (every > 0) burst = std::min(burst, every - decodeSteps % every);
                const int before = decodeSteps;
                GEMMA_RETURN_IF_ERROR(backend_->decodeGreedy(history.back(), position, burst, [&](std::int32_t next, const StepStats& step) {
                    ++position;
                    ++decodeSteps;
                    StepStats reported = step;
                    reported.launches[static_cast<int>(Bucket::Sampling)] = 1;  // the argmax on the device
                    return accept(next, reported);
                }));
                if (decodeSteps == before) return Status{ErrorCode::Internal, "greedy decoding made no progress"};
                continue;
            }
            StepStats step;
            step.position = position;
            const auto stepStart = Clock::now();
            std::int32_t next = 0;
            double sampleMs = 0.0;
            if (bestOnBackend) {
                auto best = backend_->decodeBest(history.back(), position, Sampler::bestCount(request.sampling), instrumentThis ? &step : nullptr);
                if (!best) return best.status();
                const auto sampleStart = Clock::now();
                next = sampler->sampleFromBest(*best);
                sampleMs = msSince(sampleStart);
            } else {
                auto row = backend_->decodeLogits(history.back(), position, instrumentThis ? &step : nullptr);
                if (!row) return row.status();
                if (request.onLogits) request.onLogits(position, row->data(), static_cast<std::int32_t>(vocab));
                const auto sampleStart = Clock::now();
                next = sampler->sample(*row, history);
                sampleMs = msSince(sampleStart);
            }
            ++position;
            ++decodeSteps;
            step.bucketMs[static_cast<int>(Bucket::Sampling)] += sampleMs;
            step.launches[static_cast<int>(Bucket::Sampling)] += 1;
            if (!instrumentThis) step.graph = backend_->graphActive();  // an instrumented step says itself
            finishStep(step, stepStart, instrumentThis);
            accept(next, step);
        }
        stats.decodeMs = msSince(decodeStart);
        if (stats.generatedTokens > 1) {
            const double decodeOnly = stats.decodeMs - (stats.timeToFirstTokenMs - stats.prefillMs);
            stats.decodeTokensPerSecond = decodeOnly > 0.0 ? (stats.generatedTokens - 1) * 1000.0 / decodeOnly : 0.0;
        }
        info_.backend = backend_->name();  // e.g. whether the decode graphs passed their self-checks
        return stats;
    }

    Expected<double> measureReadBandwidth() override { return backend_->measureReadBandwidth(); }

    Expected<DecodeBenchmarkResult> benchmarkDecode(const DecodeBenchmarkRequest& request, const ProgressCallback& progress) override {
        clearCancel();
        if (request.promptTokens < 1 || request.decodeTokens < 1 ||
            request.promptTokens + request.decodeTokens > request.contextAllocation) {
            return Status{ErrorCode::InvalidArgument, "the benchmark positions must fit inside the allocation"};
        }
        const bool chain = !request.instrumented && !request.hostSampling && !request.topKSampling;
        if (request.traced && !chain) {
            return Status{ErrorCode::InvalidArgument, "a traced benchmark runs the plain greedy chain (no instrumentation, no sampling)"};
        }
        const int previous = backend_->contextAllocation();
        Status status = backend_->resetContext(request.contextAllocation);
        if (!status) {
            (void)backend_->resetContext(previous);
            return status;
        }
        // Two passes of the same kind, the first untimed: the first pass at an allocation captures
        // and self-checks the step's graphs (each band form it reaches) and sets up whatever else
        // runs once, which a steady decode does not pay (PERF.md: time after warm-up). Before
        // version 20 the plain greedy run timed its graph's capture too (docs/PERFORMANCE.md).
        // resetContext to the same allocation keeps the graphs and restarts at position 0.
        const auto half = [&](double offset) -> ProgressCallback {
            if (!progress) return {};
            return [&progress, offset](double done, std::string_view what) { return progress(offset + done / 2, what); };
        };
        DecodeBenchmarkRequest warmRequest = request;
        warmRequest.traced = false;  // the warm pass's capture launches stay out of the timeline
        DecodeBenchmarkResult warm, result;
        status = decodePass(warmRequest, half(0.0), warm);
        if (status) status = backend_->resetContext(request.contextAllocation);
        if (status) status = decodePass(request, half(0.5), result);
        const Status restore = backend_->resetContext(previous);
        info_.backend = backend_->name();  // e.g. whether a CUDA graph passed its self-check
        if (!status) return status;
        if (!restore) return restore;
        return result;
    }

private:
    // One prefill of request.promptTokens, then request.decodeTokens timed decode steps from
    // position 0 of the current context (benchmarkDecode resets it); fills `result`.
    Status decodePass(const DecodeBenchmarkRequest& request, const ProgressCallback& progress, DecodeBenchmarkResult& result) {
        const bool chain = !request.instrumented && !request.hostSampling && !request.topKSampling;
        Status status = Status::ok();
        result.contextAllocation = request.contextAllocation;
        // Synthetic but valid ids: a fixed walk through the vocabulary, no sampling involved.
        const int vocab = package_->config().vocabSize;
        std::vector<std::int32_t> prompt(static_cast<std::size_t>(request.promptTokens));
        for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<std::int32_t>((i * 7919 + 11) % static_cast<std::size_t>(vocab));
        std::vector<float> logits;
        const auto prefillStart = Clock::now();
        status = backend_->forward(prompt, 0, false, logits, nullptr);
        result.prefillMs = msSince(prefillStart);
        double totalMs = 0.0;
        Sampler defaultSampler{SamplingParams{}};  // topKSampling's draws
        if (status && request.traced) status = backend_->beginKernelTrace();
        if (status && chain) {
            // What greedy generation runs: the backend's device-side argmax chain.
            bool stopped = false;
            const auto start = Clock::now();
            status = backend_->decodeGreedy(Sampler::argmax(logits), request.promptTokens, request.decodeTokens,
                                            [&](std::int32_t, const StepStats& step) {
                                                result.steps.push_back(step);
                                                const double done = static_cast<double>(result.steps.size()) / request.decodeTokens;
                                                stopped = cancelRequested() || (progress && !progress(done, "decoding"));
                                                return !stopped;
                                            });
            totalMs = msSince(start);
            if (status && (stopped || static_cast<int>(result.steps.size()) != request.decodeTokens)) {
                status = Status{ErrorCode::Cancelled, "benchmark cancelled"};
            }
            if (request.traced) {
                auto summary = backend_->endKernelTrace();  // also when the run failed: pause the tracer
                if (status && !summary) status = summary.status();
                if (status) {
                    const double n = request.decodeTokens;
                    result.traced = true;
                    for (int b = 0; b < kBucketCount; ++b) {
                        result.trace.bucketMs[static_cast<std::size_t>(b)] = summary->bucketMs[static_cast<std::size_t>(b)] / n;
                        result.trace.launches[static_cast<std::size_t>(b)] = summary->launches[static_cast<std::size_t>(b)] / n;
                    }
                    result.trace.busyMs = summary->busyMs / n;
                    result.trace.bucketMs[static_cast<std::size_t>(Bucket::Gap)] = std::max(0.0, totalMs / n - result.trace.busyMs);
                    result.trace.unknownKernels = summary->unknownKernels;
                    for (const auto& kernel : summary->kernels) {
                        result.trace.kernels.push_back({kernel.name, kernel.chargedMs / n, kernel.launches / n,
                                                        kernel.launches > 0 ? 1e3 * kernel.durationMs / kernel.launches : 0.0});
                    }
                    for (const auto& position : stepSequence(summary->timeline, request.decodeTokens)) {
                        result.trace.sequence.push_back({summary->timelineNames[static_cast<std::size_t>(position.kernel)], position.startUs,
                                                         position.endUs, position.chargedUs});
                    }
                }
            }
        }
        std::span<const float> last = logits;  // the prefill's row, then each step's
        std::int32_t sampledToken = 0;         // topKSampling: the id drawn at the previous step
        for (int i = 0; status && !chain && i < request.decodeTokens; ++i) {
            if (cancelRequested()) {
                status = Status{ErrorCode::Cancelled, "benchmark cancelled"};
                break;
            }
            StepStats step;
            step.position = request.promptTokens + i;
            const auto start = Clock::now();
            if (request.topKSampling && !request.instrumented) {
                // last holds no row on this path: the next id is the previous draw.
                const std::int32_t token = i == 0 ? Sampler::argmax(logits) : sampledToken;
                auto best = backend_->decodeBest(token, step.position, Sampler::bestCount(SamplingParams{}), nullptr);
                status = best.status();
                if (best) sampledToken = defaultSampler.sampleFromBest(*best);
            } else {
                auto row = backend_->decodeLogits(Sampler::argmax(last), step.position, request.instrumented ? &step : nullptr);
                status = row.status();
                if (row) last = *row;
            }
            if (!request.instrumented) step.graph = backend_->graphActive();  // an instrumented step says itself
            finishStep(step, start, request.instrumented);
            totalMs += step.wallMs;
            result.steps.push_back(step);
            if (progress && !progress(static_cast<double>(i + 1) / request.decodeTokens, "decoding")) {
                status = Status{ErrorCode::Cancelled, "benchmark cancelled"};
            }
        }
        if (!status) return status;
        result.msPerToken = totalMs / request.decodeTokens;
        result.tokensPerSecond = result.msPerToken > 0.0 ? 1000.0 / result.msPerToken : 0.0;
        return Status::ok();
    }

    std::unique_ptr<Package> package_;
    std::unique_ptr<ModelWeights> weights_;
    Tokenizer tokenizer_;
    std::unique_ptr<Backend> backend_;
    ModelInfo info_;
    std::vector<std::int32_t> stopIds_;
    bool hasTokenizer_ = false;
};

}  // namespace

Expected<std::unique_ptr<Engine>> Engine::open(const std::filesystem::path& package, const OpenOptions& options,
                                               const ProgressCallback& progress) {
    auto engine = std::make_unique<EngineImpl>();
    GEMMA_RETURN_IF_ERROR(engine->load(package, options, progress));
    return std::unique_ptr<Engine>(std::move(engine));
}

Expected<MemoryEstimate> Engine::estimateMemory(const std::filesystem::path& path, const OpenOptions& options) {
    auto package = Package::open(path);
    if (!package) return package.status();
    MemoryEstimate estimate;
    for (const auto& [name, tensor] : package->tensors()) estimate.weightBytes += static_cast<std::int64_t>(tensor.bytes + tensor.scaleBytes);
    const auto& c = package->config();
    // The CPU backend keeps its cache in fp32 whatever kvCache asks; the CUDA backend honours it.
    // A GPU may prefill in GEMM chunks, whose sliding rings are longer (Backend.h).
    const bool gpu = options.device != Device::Cpu;
    estimate.kvCacheBytes = kvCacheBytes(c, options.contextAllocation,
                                         gpu && options.prefillGemmMinRows > 0 ? options.gemmPrefillChunk : kPrefillChunk,
                                         gpu ? options.kvCache : KvCacheType::F32);
    // Activations of one prefill chunk and one logits row per position of the chunk; on a GPU also
    // the GEMM prefill's chunk of activations (fp32 + FP16 copies) and one dequantized gate|up pair.
    const std::int64_t ffn = c.baseIntermediateSize * (c.useDoubleWideMlp ? 2 : 1);
    estimate.workspaceBytes = kPrefillChunk * (c.vocabSize + 8LL * c.hiddenSize + 4LL * ffn) * 4;
    if (options.device != Device::Cpu && options.prefillGemmMinRows > 0) {
        const std::int64_t chunk = options.gemmPrefillChunk;
        const std::int64_t weightBuffers = options.prefillDequantizeAhead ? 2 : 1;
        estimate.workspaceBytes += chunk * (8LL * c.hiddenSize + 4LL * ffn) * 4 + chunk * ffn * 2 * 2 +
                                   weightBuffers * 2LL * ffn * c.hiddenSize * 2;
    }
    return estimate;
}

}  // namespace gemma
