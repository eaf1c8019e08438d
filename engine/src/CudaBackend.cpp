// The CUDA backend (CudaBackend.h). Activations are fp32 [rows][width]; one decode step is
// rows = 1, a prefill chunk rows <= kChunk. The step, per layer (GEMMA4.md §2.4):
//   q/k/v FP4 matvecs → q/k norm + RoPE, v norm, cache write → split-K attention + merge →
//   o_proj → [post-attn norm + residual add + pre-FFN norm] → gate/up GeGLU matvec → down →
//   [post-FFN norm + add (+ PLE block) + layer_scalar + next layer's input norm]
// and at the end the FP8 lm_head with the softcap fused.
#include "CudaBackend.h"

#include <cuda_runtime.h>
#include <kernels/Fp4Tiled.h>
#include <kernels/WeightFormats.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>

#include "ActivationConvert.h"
#include "Argmax.h"
#include "AttentionDecode.h"
#include "AttentionPrefill.h"
#include "CublasLt.h"
#include "Embedding.h"
#include "Fp4Dequantize.h"
#include "Fp4Matvec.h"
#include "Fp4Tile.h"
#include "Fp8LmHead.h"
#include "GegluElementwise.h"
#include "KernelBuckets.h"
#include "KernelTrace.h"
#include "PerLayerInputs.h"
#include "NormRopeCache.h"
#include "RmsNorm.h"
#include "StepAttribution.h"
#include "StreamRead.h"
#include "TopK.h"
#include "reference/ReferenceOps.h"

namespace gemma {

bool cudaDeviceAvailable() {
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

namespace {

namespace kc = gemma::cuda;

constexpr int kChunk = kPrefillChunk;

Status cudaError(cudaError_t error, const char* what) {
    if (error == cudaSuccess) return Status::ok();
    const ErrorCode code = error == cudaErrorMemoryAllocation ? ErrorCode::OutOfMemory : ErrorCode::Device;
    return {code, std::string(what) + ": " + cudaGetErrorString(error)};
}

Status kernelError(kc::KernelStatus status, const char* kernel) {
    if (status == kc::KernelStatus::Ok) return Status::ok();
    const cudaError_t last = cudaGetLastError();
    return {status == kc::KernelStatus::LaunchFailed ? ErrorCode::Device : ErrorCode::Internal,
            std::string(kernel) + " failed: " + kc::kernelStatusName(status) +
                (last != cudaSuccess ? std::string(" (") + cudaGetErrorString(last) + ")" : std::string{})};
}

// Owns one cudaMalloc'd block.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    DeviceBuffer(DeviceBuffer&& other) noexcept : pointer_(other.pointer_), bytes_(other.bytes_) {
        other.pointer_ = nullptr;
        other.bytes_ = 0;
    }
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
        if (this != &other) {
            release();
            pointer_ = std::exchange(other.pointer_, nullptr);
            bytes_ = std::exchange(other.bytes_, 0);
        }
        return *this;
    }
    ~DeviceBuffer() { release(); }
    Status allocate(std::size_t bytes, const char* what) {
        release();
        if (bytes == 0) bytes = 16;
        GEMMA_RETURN_IF_ERROR(cudaError(cudaMalloc(&pointer_, bytes), what));
        bytes_ = bytes;
        return Status::ok();
    }
    // For the activation workspaces: they start defined, because compute-sanitizer's initcheck does
    // not see the stores of cuBLASLt's Hopper kernels and would otherwise report every later read
    // of a GEMM output as uninitialized. (Weights, KV caches and the probe are written before they
    // are read and need no fill.)
    Status allocateZeroed(std::size_t bytes, const char* what) {
        GEMMA_RETURN_IF_ERROR(allocate(bytes, what));
        return cudaError(cudaMemset(pointer_, 0, bytes_), what);
    }
    void release() {
        if (pointer_) cudaFree(pointer_);
        pointer_ = nullptr;
        bytes_ = 0;
    }
    template <typename T>
    T* as() const { return static_cast<T*>(pointer_); }
    std::size_t bytes() const { return bytes_; }

private:
    void* pointer_ = nullptr;
    std::size_t bytes_ = 0;
};

// Page-locked host memory the GPU writes directly (cudaHostAllocMapped): the greedy chain's
// history of chosen ids and the logits row of decodeLogits(), read by the host after the writing
// launch or copy has completed (an event or a stream synchronisation).
class MappedHostBuffer {
public:
    MappedHostBuffer() = default;
    MappedHostBuffer(const MappedHostBuffer&) = delete;
    MappedHostBuffer& operator=(const MappedHostBuffer&) = delete;
    ~MappedHostBuffer() {
        if (host_) cudaFreeHost(host_);
    }
    Status allocate(std::size_t bytes, const char* what) {
        if (host_) cudaFreeHost(host_);
        host_ = nullptr;
        device_ = nullptr;
        GEMMA_RETURN_IF_ERROR(cudaError(cudaHostAlloc(&host_, bytes, cudaHostAllocMapped), what));
        std::memset(host_, 0, bytes);
        return cudaError(cudaHostGetDevicePointer(&device_, host_, 0), what);
    }
    // Read only after the writing launch or copy is known complete (an event or a stream sync).
    template <typename T>
    T* host() const { return static_cast<T*>(host_); }
    template <typename T>
    T* device() const { return static_cast<T*>(device_); }

private:
    void* host_ = nullptr;
    void* device_ = nullptr;
};

struct DeviceLinear {
    const std::uint8_t* codes = nullptr;
    const std::uint16_t* scales = nullptr;
    std::int64_t out = 0, in = 0;
    // The codes and scales are in the tiled layout (rearranged at load, tileWeights), not the
    // package's row layout.
    bool tiled = false;
    // GEMM prefill: the power of two the FP16 copy of this weight is scaled by
    // (formats::fp16WeightMultiplier of its largest group scale).
    float fp16Multiplier = 1.0f;
    // GEMM prefill: x enters as FP16 hi + lo (two GEMMs) instead of one FP16 (OpenOptions::prefillInput).
    bool splitInput = true;
};

// x·2^-8 in FP16 hi + lo for the prefill GEMMs: |x| up to 1.6e7 stays finite (the Fp4Matvec
// tensor-core path makes the same choice).
constexpr float kGemmInputMultiplier = 1.0f / 256.0f;

struct DeviceLayer {
    DeviceLinear q, k, v, o, gate, up, down, perLayerGate, perLayerProjection;
    const float *inputNorm, *postAttentionNorm, *preFeedforwardNorm, *postFeedforwardNorm, *qNorm, *kNorm, *postPerLayerNorm;
    float layerScalar = 1.0f;
    const float* inverseFrequency = nullptr;
};

struct DeviceCache {
    DeviceBuffer keys, values;
    std::int64_t capacity = 0;
};

class CudaBackend final : public Backend {
public:
    CudaBackend(const Package& package, const ModelWeights& weights, const OpenOptions& options)
        : package_(package), config_(package.config()), weights_(weights),
          kvCacheType_(options.kvCache), graphWanted_(options.cudaGraph),
          gemmMinRows_(options.prefillGemmMinRows), programmaticLaunch_(options.programmaticLaunch),
          integerMatvec_(options.integerMatvec), tiledWeights_(options.tiledWeights), fusedAttention_(options.fusedAttention),
          fusedNorms_(options.fusedNorms), tensorCoreAttention_(options.tensorCoreAttention),
          persistentLmHead_(options.persistentLmHead), clusterAttention_(options.clusterAttention),
          fuseFullAttention_(options.fuseFullAttention), tensorCoreSlidingAttention_(options.tensorCoreSlidingAttention),
          fusedPiecesNormRope_(options.fusedPiecesNormRope),
          clusterAttentionHeadSplit_(options.clusterAttentionHeadSplit), bulkCopies_(options.bulkCopies),
          clusterFullKeysOption_(options.clusterFullAttentionKeys),
          fullBandKeysOption_(options.fullAttentionBandKeys),
          attentionPrefetch_(options.attentionPrefetch), gemmPrefillChunk_(options.gemmPrefillChunk),
          prefillInput_(options.prefillInput), prefillDequantizeAhead_(options.prefillDequantizeAhead),
          timelineWanted_(options.kernelTimeline) {}

    ~CudaBackend() override {
        dropGraph();
        for (auto& e : events_) cudaEventDestroy(e);
        for (auto& e : greedyEvents_)
            if (e) cudaEventDestroy(e);
        for (auto& slot : weightSlots_)
            for (cudaEvent_t e : {slot.ready, slot.free})
                if (e) cudaEventDestroy(e);
        if (dequantStream_) cudaStreamDestroy(dequantStream_);
        if (stream_) cudaStreamDestroy(stream_);
    }

    Status initialize(int allocation) {
        if (package_.metadata().linearFormat != "fp4-e2m1-g128" || package_.metadata().embeddingFormat != "fp8-e4m3-row") {
            return {ErrorCode::Unsupported, "the CUDA backend runs FP4 packages; this package is unquantized (use --device cpu)"};
        }
        // Shapes the kernels implement (kernels/cuda headers): refuse others up front, so a model
        // never fails half-way through its first step.
        for (const auto& g : config_.layers) {
            const int d = g.headDim;
            if (d != 32 && d != 64 && d != 128 && d != 256 && d != 512) {
                return {ErrorCode::Unsupported, "the CUDA kernels do not implement head dim " + std::to_string(d)};
            }
            if (config_.numHeads / g.kvHeads > (128 / (d / 8)) * 8) {
                return {ErrorCode::Unsupported, "the CUDA attention kernel does not implement " + std::to_string(config_.numHeads / g.kvHeads) +
                                                    " query heads per KV head at head dim " + std::to_string(d)};
            }
        }
        if (config_.hiddenSize % 16 != 0) return {ErrorCode::Unsupported, "the CUDA lm_head needs a hidden size divisible by 16"};
        int device = 0;
        GEMMA_RETURN_IF_ERROR(cudaError(cudaGetDevice(&device), "cudaGetDevice"));
        cudaDeviceProp properties{};
        GEMMA_RETURN_IF_ERROR(cudaError(cudaGetDeviceProperties(&properties, device), "cudaGetDeviceProperties"));
        deviceName_ = properties.name;
        programmaticLaunch_ = programmaticLaunch_ && properties.major >= 9;  // PDL exists on sm_90+ only (name() says what runs)
        GEMMA_RETURN_IF_ERROR(cudaError(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
        // The GEMM prefill path needs cuBLASLt; without it (not installed, or turned off) prefill
        // runs the matvec kernels in chunks of kPrefillChunk rows.
        if (gemmMinRows_ > 0) {
            auto blas = CublasLt::create();
            if (blas) {
                blas_ = std::move(*blas);
                prefillStatus_ = "GEMM prefill";
            } else {
                prefillStatus_ = "matvec prefill: " + blas.status().message();
            }
        } else {
            prefillStatus_ = "matvec prefill";
        }
        chunkRows_ = blas_ ? gemmPrefillChunk_ : kChunk;

        // Memory check before any large allocation: a clear message instead of a failed malloc.
        std::size_t freeBytes = 0, totalBytes = 0;
        GEMMA_RETURN_IF_ERROR(cudaError(cudaMemGetInfo(&freeBytes, &totalBytes), "cudaMemGetInfo"));
        const auto data = package_.dataSection();
        constexpr std::size_t kHeadroom = 256u << 20;
        // The GEMM prefill's sliding rings and workspaces grow with its chunk: where the asked chunk
        // does not fit, shorter ones (halved down to kMinGemmPrefillChunk) before giving up.
        auto needed = [&] { return data.size() + kvBytes(allocation) + workspaceEstimate(); };
        if (blas_) {
            chunkRows_ = fitGemmPrefillChunk(chunkRows_, freeBytes, kHeadroom, [&](int chunk) {
                chunkRows_ = chunk;  // kvBytes and workspaceEstimate size for chunkRows_
                return needed();
            });
            prefillStatus_ += ", chunks of " + std::to_string(chunkRows_) +
                              (prefillInput_ == PrefillInput::Split       ? std::string{}
                               : prefillInput_ == PrefillInput::SplitDown ? ", x as one FP16 except in down"
                                                                          : ", x as one FP16");
        }
        const std::size_t need = needed();
        if (need + kHeadroom > freeBytes) {
            return {ErrorCode::OutOfMemory, "the model needs " + std::to_string(need >> 20) + " MiB of GPU memory (weights " +
                                                std::to_string(data.size() >> 20) + " MiB, KV cache " +
                                                std::to_string(kvBytes(allocation) >> 20) + " MiB) but " + deviceName_ +
                                                " has " + std::to_string(freeBytes >> 20) +
                                                " MiB free; lower the context allocation or use the CPU"};
        }
        GEMMA_RETURN_IF_ERROR(weightsOnDevice_.allocate(data.size(), "allocating GPU memory for the weights"));
        GEMMA_RETURN_IF_ERROR(cudaError(cudaMemcpy(weightsOnDevice_.as<void>(), data.data(), data.size(), cudaMemcpyHostToDevice),
                                        "uploading the weights"));
        bindLayers();
        if (tiledWeights_) GEMMA_RETURN_IF_ERROR(tileWeights());
        GEMMA_RETURN_IF_ERROR(allocateWorkspaces());
        events_.resize(2048);
        for (auto& e : events_) GEMMA_RETURN_IF_ERROR(cudaError(cudaEventCreate(&e), "cudaEventCreate"));
        for (auto& e : greedyEvents_)
            GEMMA_RETURN_IF_ERROR(cudaError(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"));
        (void)timelineReady();  // CUPTI's start-up at load time, not in the first timed step
        return resetContext(allocation);
    }

    std::string name() const override {
        return deviceName_ + " (CUDA, " + prefillStatus_ + (programmaticLaunch_ ? ", programmatic launch" : "") +
               (integerMatvec_ ? "" : ", fp16-x matvec") + (tiledWeights_ ? "" : ", row-layout weights") +
               (fusedAttention_ ? "" : ", separate attention kernels") + (fusedNorms_ ? "" : ", separate norm kernels") +
               (tensorCoreAttention_ ? "" : ", CUDA-core attention") + (bulkCopies_ ? "" : ", attention K/V by cp.async") +
               (persistentLmHead_ ? "" : ", one-shot lm_head") +
               (fuseFullAttention_ ? ", small-group full layers fused" : "") +
               (tensorCoreSlidingAttention_ ? ", tensor-core sliding attention" : "") +
               (fusedPiecesNormRope_ && tensorCoreAttention_ ? ", norm + RoPE inside the tensor-core pieces" : "") +
               (clusterLayers_ > 0 ? ", cluster attention on " + std::to_string(clusterLayers_) + " layers" +
                                         (attentionPrefetch_ ? " (band prefetched)" : "") +
                                         (headSplitLayers_ > 0 ? " (heads split over two clusters on " + std::to_string(headSplitLayers_) + ")" : std::string{}) +
                                         (clusterShortLayers_ > 0 ? ", and on " + std::to_string(clusterShortLayers_) + " full layers up to " +
                                                                        std::to_string(clusterFullKeys_) + " keys"
                                                                  : std::string{})
                                   : std::string{}) +
               (fullBandLimit() > 0 ? ", full-layer pieces split for " + std::to_string(fullBandLimit()) + " keys up to that band (at larger allocations)"
                                    : std::string{}) +
               (tiledWeights_ && untiledWeights_ > 0 ? ", " + std::to_string(untiledWeights_) + " weights in rows" : std::string{}) +
               (graphWanted_ ? ", graph " + graphStatus_ : std::string{}) +
               (greedyStatus_.empty() ? std::string{} : ", greedy chain " + greedyStatus_) +
               (!timelineWanted_ ? ""                                          // timed steps: event pairs, unsaid
                : trace_         ? ", step timing: kernel timeline"
                                 : ", step timing: event pairs") + ")";
    }
    bool graphActive() const override {
        return std::any_of(graphExec_.begin(), graphExec_.end(), [](cudaGraphExec_t graph) { return graph != nullptr; });
    }
    int contextAllocation() const override { return allocation_; }
    KvCacheType kvCacheType() const override { return kvCacheType_; }
    // The element type of layer l's cache (a shared layer's: its source's); its size is
    // kvCacheElementBytes(kvCacheType_, sliding), which the memory estimate counts.
    kc::KvDtype kvDtypeOf(int l) const {
        switch (kvCacheType_) {
            case KvCacheType::F32: return kc::KvDtype::F32;
            case KvCacheType::Bf16: return kc::KvDtype::BF16;
            case KvCacheType::FullF16:
                return config_.layers[config_.layers[l].kvSourceLayer].type == LayerType::Sliding ? kc::KvDtype::F32 : kc::KvDtype::F16;
            case KvCacheType::F16: break;
        }
        return kc::KvDtype::F16;
    }

    Expected<double> measureReadBandwidth() override {
        std::size_t freeBytes = 0, totalBytes = 0;
        GEMMA_RETURN_IF_ERROR(cudaError(cudaMemGetInfo(&freeBytes, &totalBytes), "cudaMemGetInfo"));
        const std::size_t bytes = std::min<std::size_t>(std::size_t{1} << 30, freeBytes / 8) & ~std::size_t{255};
        if (bytes < (std::size_t{64} << 20)) return Status{ErrorCode::OutOfMemory, "too little free GPU memory for the bandwidth probe"};
        DeviceBuffer probe, sink;
        GEMMA_RETURN_IF_ERROR(probe.allocate(bytes, "bandwidth probe"));
        GEMMA_RETURN_IF_ERROR(sink.allocate(1 << 20, "bandwidth probe"));
        GEMMA_RETURN_IF_ERROR(cudaError(cudaMemsetAsync(probe.as<void>(), 0x5A, bytes, stream_), "bandwidth probe"));
        kc::StreamReadParams p;
        p.data = probe.as<void>();
        p.bytes = static_cast<std::int64_t>(bytes);
        p.sink = sink.as<std::uint32_t>();
        std::vector<float> samples;
        for (int pass = 0; pass < 6; ++pass) {
            GEMMA_RETURN_IF_ERROR(cudaError(cudaEventRecord(events_[0], stream_), "bandwidth probe"));
            GEMMA_RETURN_IF_ERROR(kernelError(kc::launchStreamRead(p, stream_), "stream read"));
            GEMMA_RETURN_IF_ERROR(cudaError(cudaEventRecord(events_[1], stream_), "bandwidth probe"));
            GEMMA_RETURN_IF_ERROR(cudaError(cudaEventSynchronize(events_[1]), "bandwidth probe"));
            float ms = 0.0f;
            GEMMA_RETURN_IF_ERROR(cudaError(cudaEventElapsedTime(&ms, events_[0], events_[1]), "bandwidth probe"));
            if (pass > 0) samples.push_back(ms);  // the first pass is warm-up
        }
        std::sort(samples.begin(), samples.end());
        return static_cast<double>(bytes) / (samples[samples.size() / 2] * 1e-3) / 1e9;
    }

    Status resetContext(int allocation) override {
        if (allocation <= 0) return {ErrorCode::InvalidArgument, "the context allocation must be positive"};
        if (allocation != allocation_) {
            dropGraph();  // the graph holds the old caches' addresses
            caches_.clear();
            caches_.resize(static_cast<std::size_t>(config_.numLayers));
            for (int l = 0; l < config_.numLayers; ++l) {
                const auto& g = config_.layers[l];
                if (g.kvShared) continue;
                auto& cache = caches_[l];
                cache.capacity = capacityOf(g, allocation);
                const std::size_t bytes = static_cast<std::size_t>(cache.capacity) * g.kvHeads * g.headDim * kc::kvElementBytes(kvDtypeOf(l));
                Status status = cache.keys.allocate(bytes, "allocating the KV cache");
                if (status) status = cache.values.allocate(bytes, "allocating the KV cache");
                if (!status) {
                    caches_.clear();
                    allocation_ = 0;
                    return status;
                }
            }
            bandBound_ = 0;  // the workspace is sized for the capacity's split counts
            GEMMA_RETURN_IF_ERROR(allocateAttentionWorkspace());
            chooseClusterAttention();
            chooseBandForms(allocation);
            allocation_ = allocation;
        }
        position_ = 0;
        return Status::ok();
    }

    Status forward(std::span<const std::int32_t> tokens, int startPosition, bool allPositions, std::vector<float>& logits,
                   StepStats* stats) override {
        GEMMA_RETURN_IF_ERROR(checkForwardRequest(tokens, startPosition, position_, allocation_, config_.vocabSize));
        const auto vocab = static_cast<std::size_t>(config_.vocabSize);
        logits.resize((allPositions ? tokens.size() : 1) * vocab);  // every entry is copied below
        if (tokens.size() == 1 && !allPositions && !stats && graphWanted_) return decodeInto(tokens[0], startPosition, logits.data());
        // Chunks of chunkRows_ positions (GEMM prefill), or kChunk when every position's logits are
        // wanted (the logits buffer holds kChunk rows).
        const std::size_t chunk = allPositions ? kChunk : static_cast<std::size_t>(chunkRows_);
        for (std::size_t begin = 0; begin < tokens.size(); begin += chunk) {
            const int rows = static_cast<int>(std::min<std::size_t>(chunk, tokens.size() - begin));
            const bool last = begin + static_cast<std::size_t>(rows) == tokens.size();
            eventCursor_ = 0;
            GEMMA_RETURN_IF_ERROR(runChunk(tokens.subspan(begin, static_cast<std::size_t>(rows)), startPosition + static_cast<int>(begin),
                                           allPositions || last, allPositions, stats));
            if (allPositions || last) {
                const int logitRows = allPositions ? rows : 1;
                const float* source = logits_.as<float>();  // launchChunk writes from row 0
                float* target = logits.data() + (allPositions ? begin * vocab : 0);
                GEMMA_RETURN_IF_ERROR(cudaError(cudaMemcpyAsync(target, source, logitRows * vocab * 4, cudaMemcpyDeviceToHost, stream_),
                                                "copying logits"));
            }
            GEMMA_RETURN_IF_ERROR(cudaError(cudaStreamSynchronize(stream_), "running the forward pass"));
            if (stats) collectTimings(*stats);
            position_ += rows;
        }
        return Status::ok();
    }

    Expected<std::span<const float>> decodeLogits(std::int32_t token, int startPosition, StepStats* stats) override {
        if ((stats && !timelineReady()) || !graphWanted_) return Backend::decodeLogits(token, startPosition, stats);
        const std::int32_t input[1] = {token};
        GEMMA_RETURN_IF_ERROR(checkForwardRequest(input, startPosition, position_, allocation_, config_.vocabSize));
        if (stats) GEMMA_RETURN_IF_ERROR(prepareDecodeGraph(token, startPosition));
        GEMMA_RETURN_IF_ERROR(timedStep(stats, [&] { return decodeInto(token, startPosition, hostLogits_.host<float>()); }));
        return std::span<const float>(hostLogits_.host<float>(), static_cast<std::size_t>(config_.vocabSize));
    }

    // The device selects the best entries (TopK.cu) into page-locked memory it writes directly:
    // count × 8 bytes cross the bus instead of the 1 MB row.
    Expected<std::span<const RankedLogit>> decodeBest(std::int32_t token, int startPosition, int count, StepStats* stats) override {
        if ((stats && !timelineReady()) || !graphWanted_ || count < 1 || count > kc::kTopKMaxCount)
            return Backend::decodeBest(token, startPosition, count, stats);
        const std::int32_t input[1] = {token};
        GEMMA_RETURN_IF_ERROR(checkForwardRequest(input, startPosition, position_, allocation_, config_.vocabSize));
        kc::TopKParams t;
        t.logits = logits_.as<float>();
        t.vocab = config_.vocabSize;
        t.count = count;
        t.out = hostBest_.device<kc::TopKEntry>();
        t.workspace = topKWorkspace_.as<void>();
        t.workspaceBytes = topKWorkspace_.bytes();
        t.programmaticLaunch = programmaticLaunch_;
        if (stats) GEMMA_RETURN_IF_ERROR(prepareDecodeGraph(token, startPosition));
        GEMMA_RETURN_IF_ERROR(
            timedStep(stats, [&] { return decodeThen(token, startPosition, [&] { return kernelError(kc::launchTopK(t, stream_), "top-k"); }); }));
        return std::span<const RankedLogit>(hostBest_.host<RankedLogit>(), static_cast<std::size_t>(std::min<std::int64_t>(count, config_.vocabSize)));
    }

    // The kernel timeline (KernelTrace, process-global, shared by the backends of a process) lives
    // from the backend's first use of it to its end, paused in between: while recording, CUPTI
    // times every kernel (a fraction of a µs each), and each switch costs ≈ 15 µs of host time.
    Status beginKernelTrace() override {
        GEMMA_RETURN_IF_ERROR(cudaError(cudaStreamSynchronize(stream_), "finishing queued work"));
        if (!trace_) {
            auto shared = sharedKernelTrace();
            if (!shared) return shared.status();
            trace_ = std::move(*shared);
        }
        GEMMA_RETURN_IF_ERROR(trace_->setRecording(true));
        traceRecords_.clear();
        return trace_->collect(traceRecords_);  // anything recorded before: dropped
    }

    Expected<KernelTraceSummary> endKernelTrace() override {
        if (!trace_) return Status{ErrorCode::Internal, "endKernelTrace() without beginKernelTrace()"};
        return summarizeTimeline();
    }

private:
    // The one KernelTrace of the process, shared by every backend that asks (CUPTI's activity API
    // is process-global: a second backend, e.g. while the app loads another model, reuses it).
    static Expected<std::shared_ptr<KernelTrace>> sharedKernelTrace() {
        static std::mutex mutex;
        static std::weak_ptr<KernelTrace> current;
        const std::lock_guard lock(mutex);
        if (auto live = current.lock()) return live;
        auto created = KernelTrace::create();
        if (!created) return created.status();
        std::shared_ptr<KernelTrace> trace(std::move(*created));
        current = trace;
        return trace;
    }

    // Whether instrumented steps can take their buckets from the kernel timeline: asked for
    // (OpenOptions::kernelTimeline), the graph is on, and the trace could be made (tried once; the
    // reason it could not is kept in timelineStatus_ and the steps use event pairs).
    bool timelineReady() {
        if (!timelineWanted_ || !graphWanted_ || graphFailed_) return false;
        if (!trace_ && timelineStatus_.empty()) {
            auto shared = sharedKernelTrace();
            if (shared) {
                trace_ = std::move(*shared);
                if (const Status paused = trace_->setRecording(false); !paused) {
                    timelineStatus_ = paused.message();
                    trace_.reset();
                }
            } else {
                timelineStatus_ = shared.status().message();
            }
        }
        return trace_ != nullptr;
    }

    // Captures and self-checks the decode graph, if that is still to do, before a timed step, so
    // the timeline holds only the step's own kernels: runs the step at (token, position) once
    // untimed. A step is idempotent (the same inputs write the same KV slot), as the self-check
    // already relies on; the timed step then replays it.
    Status prepareDecodeGraph(std::int32_t token, int position) {
        if (!graphWanted_ || graphFailed_ || graphExec_[bandSlot(bandBoundAt(position))]) return Status::ok();
        bool usedGraph = false;
        GEMMA_RETURN_IF_ERROR(decodeStep(token, position, usedGraph));
        return cudaError(cudaStreamSynchronize(stream_), "running the forward pass");
    }

    // Waits for the queued work, collects the timeline recorded since the last collect, pauses the
    // recorder and sums the kernels into buckets (StepAttribution).
    Expected<KernelTraceSummary> summarizeTimeline() {
        GEMMA_RETURN_IF_ERROR(cudaError(cudaStreamSynchronize(stream_), "finishing the traced work"));
        traceRecords_.clear();
        const Status collected = trace_->collect(traceRecords_);
        const Status paused = trace_->setRecording(false);
        GEMMA_RETURN_IF_ERROR(collected);
        GEMMA_RETURN_IF_ERROR(paused);
        KernelTraceSummary summary;
        std::vector<TimedKernel> timed, byKernel;
        timed.reserve(traceRecords_.size());
        byKernel.reserve(traceRecords_.size());
        // Per mangled name, worked out once: its bucket (-1: none claims it) and its row of
        // summary.kernels (rows are per display name; names that demangle alike share one).
        struct NameFacts {
            int bucket;
            int row;
        };
        std::unordered_map<std::string, NameFacts> names;
        std::unordered_map<std::string, int> displayIndex;
        for (const auto& record : traceRecords_) {
            auto at = names.find(record.name);
            if (at == names.end()) {
                std::string display = kernelDisplayName(record.name);
                const auto [row, added] = displayIndex.try_emplace(display, static_cast<int>(summary.kernels.size()));
                if (added) summary.kernels.push_back({std::move(display)});
                at = names.emplace(record.name, NameFacts{kernelBucket(kernelBaseName(record.name)), row->second}).first;
            }
            int bucket = at->second.bucket;
            if (bucket < 0) {
                ++summary.unknownKernels;
                bucket = static_cast<int>(Bucket::NormElementwise);
            }
            timed.push_back({bucket, record.startNs, record.endNs});
            const int row = at->second.row;
            byKernel.push_back({row, record.startNs, record.endNs});
            if (record.endNs > record.startNs) summary.kernels[static_cast<std::size_t>(row)].durationMs += 1e-6 * static_cast<double>(record.endNs - record.startNs);
        }
        const StepAttribution attribution = attributeKernels(timed, kBucketCount);
        for (int b = 0; b < kBucketCount; ++b) {
            summary.bucketMs[static_cast<std::size_t>(b)] = attribution.bucketMs[static_cast<std::size_t>(b)];
            summary.launches[static_cast<std::size_t>(b)] = attribution.launches[static_cast<std::size_t>(b)];
        }
        summary.busyMs = attribution.busyMs;
        const StepAttribution perKernel = attributeKernels(byKernel, static_cast<int>(summary.kernels.size()));
        for (std::size_t k = 0; k < summary.kernels.size(); ++k) {
            summary.kernels[k].chargedMs = perKernel.bucketMs[k];
            summary.kernels[k].launches = perKernel.launches[k];
        }
        for (const auto& kernel : summary.kernels) summary.timelineNames.push_back(kernel.name);  // row order, before the sort
        summary.timeline = std::move(byKernel);
        std::stable_sort(summary.kernels.begin(), summary.kernels.end(),
                         [](const KernelShare& a, const KernelShare& b) { return a.chargedMs > b.chargedMs; });
        return summary;
    }

    // Runs one decode step; with `stats`, recorded on the kernel timeline (timelineReady() was
    // checked by the caller) and summarised into stats. The recorder's switches and the reading of
    // the timeline go to stats->instrumentationMs (the engine leaves them out of the step's wall).
    // Timing never fails a step: when the recorder does, the step runs (or has run) all the same,
    // its buckets stay empty, and later timed steps use event pairs (the reason in the name).
    template <typename Step>
    Status timedStep(StepStats* stats, Step&& step) {
        if (!stats) return step();
        using HostClock = std::chrono::steady_clock;
        const auto switchOn = HostClock::now();
        if (const Status began = beginKernelTrace(); !began) {
            dropTimeline(began);
            return step();
        }
        const auto on = HostClock::now();
        const Status ran = step();
        const auto done = HostClock::now();
        auto summary = summarizeTimeline();  // also after a failed step: pauses the recorder
        GEMMA_RETURN_IF_ERROR(ran);
        if (!summary) {
            dropTimeline(summary.status());
            return Status::ok();
        }
        for (int b = 0; b < kBucketCount; ++b) {
            if (b == static_cast<int>(Bucket::Gap)) continue;
            stats->bucketMs[static_cast<std::size_t>(b)] += summary->bucketMs[static_cast<std::size_t>(b)];
            stats->launches[static_cast<std::size_t>(b)] += summary->launches[static_cast<std::size_t>(b)];
        }
        stats->instrumented = true;
        stats->kernelTimeline = true;
        stats->graph = graphExec_[bandSlot(bandBound_)] != nullptr;
        stats->instrumentationMs += std::chrono::duration<double, std::milli>(on - switchOn).count() +
                                    std::chrono::duration<double, std::milli>(HostClock::now() - done).count();
        return Status::ok();
    }

    // Gives up the kernel timeline for this backend's timed steps (event pairs from now on).
    void dropTimeline(const Status& why) {
        if (trace_) (void)trace_->setRecording(false);
        trace_.reset();
        timelineStatus_ = why.message().empty() ? "the kernel timeline failed" : why.message();
    }

    // One single-token decode step (the graph when it passed its self-check), then `collect`
    // (work queued on the stream that takes what the host needs from logits_), then the wait; the
    // request was checked by the caller.
    template <typename Collect>
    Status decodeThen(std::int32_t token, int position, Collect&& collect) {
        bool usedGraph = false;
        GEMMA_RETURN_IF_ERROR(decodeStep(token, position, usedGraph));
        GEMMA_RETURN_IF_ERROR(collect());
        GEMMA_RETURN_IF_ERROR(cudaError(cudaStreamSynchronize(stream_), "running the forward pass"));
        position_ += 1;
        return Status::ok();
    }
    // decodeThen with the logits copied to `hostOut` (vocab floats).
    Status decodeInto(std::int32_t token, int position, float* hostOut) {
        return decodeThen(token, position, [&] {
            return cudaError(cudaMemcpyAsync(hostOut, logits_.as<float>(), static_cast<std::size_t>(config_.vocabSize) * 4,
                                             cudaMemcpyDeviceToHost, stream_),
                             "copying logits");
        });
    }

    // ---- setup ------------------------------------------------------------------------------------
    // Whether a chunk of `rows` positions runs its linears as cuBLASLt GEMMs (gemmLinear).
    bool gemmRows(int rows) const { return blas_ && rows >= gemmMinRows_; }

    std::int64_t capacityOf(const LayerGeometry& g, int allocation) const {
        return kvCacheSlots(g.type == LayerType::Sliding, config_.slidingWindow, allocation, chunkRows_);
    }

    std::size_t kvBytes(int allocation) const {
        return static_cast<std::size_t>(kvCacheBytes(config_, allocation, chunkRows_, kvCacheType_));
    }

    // The widest linear a GEMM prefill dequantizes at once (gate and up together) and its input.
    std::int64_t gemmWeightElements() const {
        std::int64_t most = 0;
        auto consider = [&](const LinearWeight& w, int copies) { most = std::max<std::int64_t>(most, copies * w.out * paddedIn(w.in)); };
        for (const auto& w : weights_.layers) {
            for (const LinearWeight* l : {&w.q, &w.k, &w.v, &w.o, &w.down, &w.perLayerGate, &w.perLayerProjection}) consider(*l, 1);
            consider(w.gate, 2);
        }
        consider(weights_.perLayerModelProjection, 1);
        return most;
    }
    static std::int64_t paddedIn(std::int64_t in) { return (in + 7) / 8 * 8; }

    std::size_t workspaceEstimate() const {
        const std::size_t rows = static_cast<std::size_t>(chunkRows_);
        std::size_t bytes = static_cast<std::size_t>(kChunk) * static_cast<std::size_t>(config_.vocabSize) * 4 +
                            rows * 64u * static_cast<std::size_t>(config_.hiddenSize) * 4 + (64u << 20);
        if (blas_)
            bytes += static_cast<std::size_t>(gemmWeightElements()) * 2 * static_cast<std::size_t>(weightSlotCount()) +
                     rows * 3u * static_cast<std::size_t>(ffnWidthOf()) * 8;
        return bytes;
    }
    std::int64_t ffnWidthOf() const {
        std::int64_t f = 0;
        for (const auto& g : config_.layers) f = std::max<std::int64_t>(f, g.intermediateSize);
        return std::max<std::int64_t>(f, static_cast<std::int64_t>(config_.numLayers) * config_.hiddenSizePerLayerInput);
    }

    template <typename T>
    const T* device(const T* host) const {
        if (!host) return nullptr;
        const auto offset = reinterpret_cast<const std::uint8_t*>(host) - package_.dataSection().data();
        return reinterpret_cast<const T*>(weightsOnDevice_.as<std::uint8_t>() + offset);
    }

    DeviceLinear device(const LinearWeight& w) const {
        DeviceLinear d{device(w.codes), device(w.scales), w.out, w.in};
        if (blas_ && w.scales) {
            // The largest finite |scale| (bf16 bits without the sign compare as the values do).
            std::uint16_t largest = 0;
            const std::int64_t count = w.out * formats::fp4GroupsPerRow(w.in);
            for (std::int64_t i = 0; i < count; ++i) {
                const std::uint16_t magnitude = w.scales[i] & 0x7FFFu;
                if (magnitude < 0x7F80u && magnitude > largest) largest = magnitude;
            }
            d.fp16Multiplier = formats::fp16WeightMultiplier(formats::bf16ToFloat(largest));
        }
        return d;
    }

    // Rearranges every FP4 linear on the device into the tiled layout (kernels/Fp4Tiled.h), in
    // place: through a scratch buffer the size of the largest weight, one Fp4Tile launch and two
    // copies back per weight. A weight whose tiled copy would not fit its place (out not a
    // multiple of 16: the tiled layout pads the last tile) or whose scales are not 4-byte aligned
    // in the package stays in rows (DeviceLinear::tiled false; every kernel reads both).
    Status tileWeights() {
        std::vector<DeviceLinear*> linears;
        for (auto& d : layers_)
            for (DeviceLinear* l : {&d.q, &d.k, &d.v, &d.o, &d.gate, &d.up, &d.down, &d.perLayerGate, &d.perLayerProjection})
                linears.push_back(l);
        linears.push_back(&perLayerModelProjection_);
        auto tileable = [](const DeviceLinear& l) {
            return l.codes && l.scales && l.out % formats::fp4tiled::kTileRows == 0 && reinterpret_cast<std::uintptr_t>(l.scales) % 4 == 0;
        };
        std::size_t codeBytes = 0, scaleBytes = 0;
        untiledWeights_ = 0;
        for (const DeviceLinear* l : linears) {
            if (!tileable(*l)) {
                if (l->codes) ++untiledWeights_;
                continue;
            }
            codeBytes = std::max<std::size_t>(codeBytes, static_cast<std::size_t>(formats::fp4tiled::codeBytes(l->out, l->in)));
            scaleBytes = std::max<std::size_t>(scaleBytes, static_cast<std::size_t>(formats::fp4tiled::scaleWords(l->out, l->in)) * 4);
        }
        if (codeBytes == 0) return Status::ok();
        DeviceBuffer scratch;
        GEMMA_RETURN_IF_ERROR(scratch.allocate(codeBytes + scaleBytes, "allocating scratch memory to rearrange the weights"));
        std::set<const std::uint8_t*> done;  // a weight shared by two places is rearranged once
        for (DeviceLinear* l : linears) {
            if (!tileable(*l)) continue;
            if (!done.insert(l->codes).second) {
                l->tiled = true;
                continue;
            }
            kc::Fp4TileParams t;
            t.codes = l->codes;
            t.scales = l->scales;
            t.out = l->out;
            t.in = l->in;
            t.tiledCodes = scratch.as<std::uint8_t>();
            t.tiledScales = reinterpret_cast<std::uint32_t*>(scratch.as<std::uint8_t>() + codeBytes);
            GEMMA_RETURN_IF_ERROR(kernelError(kc::launchFp4Tile(t, stream_), "rearranging the weights"));
            const std::size_t lineCodes = static_cast<std::size_t>(formats::fp4tiled::codeBytes(l->out, l->in));
            const std::size_t lineScales = static_cast<std::size_t>(formats::fp4tiled::scaleWords(l->out, l->in)) * 4;
            // The weights buffer is ours (const only to the kernels): the tiled copy goes back in place.
            GEMMA_RETURN_IF_ERROR(cudaError(cudaMemcpyAsync(const_cast<std::uint8_t*>(l->codes), t.tiledCodes, lineCodes,
                                                            cudaMemcpyDeviceToDevice, stream_), "rearranging the weights"));
            GEMMA_RETURN_IF_ERROR(cudaError(cudaMemcpyAsync(const_cast<std::uint16_t*>(l->scales), t.tiledScales, lineScales,
                                                            cudaMemcpyDeviceToDevice, stream_), "rearranging the weights"));
            l->tiled = true;
        }
        return cudaError(cudaStreamSynchronize(stream_), "rearranging the weights");
    }

    void bindLayers() {
        const auto& c = config_;
        std::vector<float> frequencies;
        std::vector<std::size_t> offsets;
        for (const auto& g : c.layers) {
            offsets.push_back(frequencies.size());
            std::vector<float> inverse(static_cast<std::size_t>(g.headDim / 2));
            reference::ropeInverseFrequencies(g.headDim, g.ropeRotatedPairs, g.ropeTheta, inverse.data());
            for (auto& f : inverse) f = static_cast<float>(f / g.ropeFactor);
            frequencies.insert(frequencies.end(), inverse.begin(), inverse.end());
        }
        (void)frequencyTable_.allocate(frequencies.size() * 4, "RoPE table");
        cudaMemcpy(frequencyTable_.as<float>(), frequencies.data(), frequencies.size() * 4, cudaMemcpyHostToDevice);
        layers_.resize(static_cast<std::size_t>(c.numLayers));
        for (int l = 0; l < c.numLayers; ++l) {
            const auto& w = weights_.layers[l];
            auto& d = layers_[l];
            d.q = device(w.q);
            d.k = device(w.k);
            d.v = device(w.v);
            d.o = device(w.o);
            d.gate = device(w.gate);
            d.up = device(w.up);
            d.down = device(w.down);
            d.perLayerGate = device(w.perLayerGate);
            d.perLayerProjection = device(w.perLayerProjection);
            // GEMM prefill: which linears take x as FP16 hi + lo (OpenOptions::prefillInput).
            for (DeviceLinear* linear : {&d.q, &d.k, &d.v, &d.o, &d.gate, &d.up, &d.perLayerGate, &d.perLayerProjection})
                linear->splitInput = splitsInput(false);
            d.down.splitInput = splitsInput(true);
            d.inputNorm = device(w.inputNorm);
            d.postAttentionNorm = device(w.postAttentionNorm);
            d.preFeedforwardNorm = device(w.preFeedforwardNorm);
            d.postFeedforwardNorm = device(w.postFeedforwardNorm);
            d.qNorm = device(w.qNorm);
            d.kNorm = device(w.kNorm);
            d.postPerLayerNorm = device(w.postPerLayerNorm);
            d.layerScalar = w.layerScalar;
            d.inverseFrequency = frequencyTable_.as<float>() + offsets[l];
        }
        perLayerModelProjection_ = device(weights_.perLayerModelProjection);
        perLayerModelProjection_.splitInput = splitsInput(false);
        perLayerProjectionNorm_ = device(weights_.perLayerProjectionNorm);
        finalNorm_ = device(weights_.finalNorm);
    }

    Status allocateWorkspaces() {
        const auto& c = config_;
        std::int64_t qWidth = 0, kvWidth = 0, ffn = 0;
        for (const auto& g : c.layers) {
            qWidth = std::max<std::int64_t>(qWidth, static_cast<std::int64_t>(c.numHeads) * g.headDim);
            kvWidth = std::max<std::int64_t>(kvWidth, static_cast<std::int64_t>(g.kvHeads) * g.headDim);
            ffn = std::max<std::int64_t>(ffn, g.intermediateSize);
        }
        qWidth_ = qWidth;
        kvWidth_ = kvWidth;
        ffnWidth_ = ffn;
        const std::size_t R = static_cast<std::size_t>(chunkRows_);
        const std::size_t H = static_cast<std::size_t>(c.hiddenSize);
        const std::size_t ple = static_cast<std::size_t>(c.numLayers) * static_cast<std::size_t>(c.hiddenSizePerLayerInput);
        GEMMA_RETURN_IF_ERROR(residual_.allocateZeroed(R * H * 4, "workspace"));
        GEMMA_RETURN_IF_ERROR(residualAlternate_.allocateZeroed(H * 4, "workspace"));  // decode rows only (deferred norms)
        GEMMA_RETURN_IF_ERROR(normed_.allocateZeroed(R * H * 4, "workspace"));
        GEMMA_RETURN_IF_ERROR(branch_.allocateZeroed(R * H * 4, "workspace"));
        GEMMA_RETURN_IF_ERROR(query_.allocateZeroed(R * static_cast<std::size_t>(qWidth) * 4, "workspace"));
        GEMMA_RETURN_IF_ERROR(key_.allocateZeroed(R * static_cast<std::size_t>(kvWidth) * 4, "workspace"));
        GEMMA_RETURN_IF_ERROR(value_.allocateZeroed(R * static_cast<std::size_t>(kvWidth) * 4, "workspace"));
        GEMMA_RETURN_IF_ERROR(attended_.allocateZeroed(R * static_cast<std::size_t>(qWidth) * 4, "workspace"));
        GEMMA_RETURN_IF_ERROR(ffn_.allocateZeroed(R * static_cast<std::size_t>(ffn) * 4, "workspace"));
        GEMMA_RETURN_IF_ERROR(logits_.allocateZeroed(static_cast<std::size_t>(kChunk) * static_cast<std::size_t>(c.vocabSize) * 4, "logits"));
        if (blas_) {
            // GEMM prefill: the FP16 weight slots (gate|up together; two with dequantization ahead),
            // the fp16 hi/lo input and the fp32 gate|up product.
            std::int64_t maxIn = 0;
            for (const auto& w : weights_.layers) maxIn = std::max({maxIn, w.q.in, w.o.in, w.down.in, w.perLayerProjection.in});
            maxIn = paddedIn(std::max<std::int64_t>(maxIn, weights_.perLayerModelProjection.in));
            for (int s = 0; s < weightSlotCount(); ++s) {
                WeightSlot& slot = weightSlots_[s];
                GEMMA_RETURN_IF_ERROR(slot.fp16.allocateZeroed(static_cast<std::size_t>(gemmWeightElements()) * 2, "GEMM prefill weights"));
                GEMMA_RETURN_IF_ERROR(cudaError(cudaEventCreateWithFlags(&slot.ready, cudaEventDisableTiming), "cudaEventCreate"));
                GEMMA_RETURN_IF_ERROR(cudaError(cudaEventCreateWithFlags(&slot.free, cudaEventDisableTiming), "cudaEventCreate"));
            }
            if (prefillDequantizeAhead_) {
                GEMMA_RETURN_IF_ERROR(cudaError(cudaStreamCreateWithFlags(&dequantStream_, cudaStreamNonBlocking), "cudaStreamCreate"));
                buildPrefillOrder();
            }
            GEMMA_RETURN_IF_ERROR(gemmInputHi_.allocateZeroed(R * static_cast<std::size_t>(maxIn) * 2, "GEMM prefill workspace"));
            if (prefillInput_ != PrefillInput::Single) GEMMA_RETURN_IF_ERROR(gemmInputLo_.allocateZeroed(R * static_cast<std::size_t>(maxIn) * 2, "GEMM prefill workspace"));
            GEMMA_RETURN_IF_ERROR(gateUp_.allocateZeroed(R * 2u * static_cast<std::size_t>(ffn) * 4, "GEMM prefill workspace"));
        }
        GEMMA_RETURN_IF_ERROR(tokens_.allocateZeroed(R * 4, "workspace"));
        GEMMA_RETURN_IF_ERROR(positions_.allocateZeroed(R * 4, "workspace"));
        GEMMA_RETURN_IF_ERROR(argmaxWorkspace_.allocateZeroed(kc::argmaxWorkspaceBytes(greedyArgmaxParams()), "workspace"));
        GEMMA_RETURN_IF_ERROR(greedyHistory_.allocate(kGreedyHistory * sizeof(std::int32_t), "greedy decoding history"));
        GEMMA_RETURN_IF_ERROR(hostLogits_.allocate(static_cast<std::size_t>(c.vocabSize) * 4, "page-locked logits"));
        GEMMA_RETURN_IF_ERROR(hostBest_.allocate(sizeof(kc::TopKEntry) * kc::kTopKMaxCount, "page-locked best logits"));
        GEMMA_RETURN_IF_ERROR(topKWorkspace_.allocateZeroed(kc::topKWorkspaceBytes(c.vocabSize, kc::kTopKMaxCount), "workspace"));
        if (ple > 0) {
            GEMMA_RETURN_IF_ERROR(perLayerInputs_.allocateZeroed(R * ple * 4, "workspace"));
            GEMMA_RETURN_IF_ERROR(perLayerIdentity_.allocateZeroed(R * ple * 4, "workspace"));
            GEMMA_RETURN_IF_ERROR(perLayerGate_.allocateZeroed(R * static_cast<std::size_t>(c.hiddenSizePerLayerInput) * 4, "workspace"));
        }
        return Status::ok();
    }

    kc::AttentionDecodeParams attentionParams(int layer, int rows) const {
        const auto& g = config_.layers[layer];
        const auto& cache = caches_[g.kvSourceLayer];
        kc::AttentionDecodeParams p;
        p.q = query_.as<float>();
        p.qStride = qWidth_;
        p.kCache = cache.keys.as<void>();
        p.vCache = cache.values.as<void>();
        p.kvDtype = kvDtypeOf(layer);
        p.capacity = cache.capacity;
        p.qHeads = config_.numHeads;
        p.kvHeads = g.kvHeads;
        p.headDim = g.headDim;
        p.positions = positions_.as<int>();
        p.window = g.type == LayerType::Sliding ? config_.slidingWindow : 0;
        p.maxBand = g.type == LayerType::Sliding ? std::min<std::int64_t>(config_.slidingWindow, cache.capacity) : cache.capacity;
        // A decode step in a short band form: the full layers' pieces split for that band only.
        if (rows == 1 && g.type != LayerType::Sliding && bandBound_ > 0) p.maxBand = std::min<std::int64_t>(p.maxBand, bandBound_);
        p.scale = 1.0f;
        p.out = attended_.as<float>();
        p.outStride = qWidth_;
        p.rows = rows;
        p.workspace = attentionWorkspace_.as<void>();
        p.workspaceBytes = attentionWorkspace_.bytes();
        p.programmaticLaunch = programmaticLaunch_;
        // Decode rows of unfused full layers: the split pieces on tensor cores (OpenOptions). Not the
        // sliding layers: their bands stay within the window, where the CUDA-core kernel is as fast
        // or faster (H200: e2b's 8-head sliding layers 2 % slower on tensor cores; docs/PERFORMANCE.md
        // version 8).
        p.tensorCores = tensorCoreAttention_ && rows == 1 && !fusedAttentionFor(layer, rows) &&
                        (g.type != LayerType::Sliding || tensorCoreSlidingAttention_);
        // The tensor-core attention's K/V staging (OpenOptions::bulkCopies): the decode's pieces
        // only. Prefill chunks stage by every thread's cp.async: there the bulk copies made pp512 and
        // pp2048 ≈ 2 % slower on the H200's 12b (docs/PERFORMANCE.md version 33). Rows above 1 that
        // are not a prefill chunk run no tensor-core attention, so nothing else reads it.
        p.bulkCopies = bulkCopies_ && rows == 1;
        return p;
    }

    Status allocateAttentionWorkspace() {
        std::size_t bytes = 16;
        for (int l = 0; l < config_.numLayers; ++l) {
            for (int rows : {1, kChunk, chunkRows_}) bytes = std::max(bytes, kc::attentionDecodeWorkspaceBytes(attentionParams(l, rows)));
            // The pieces with the norm + RoPE inside are another kernel instance, whose occupancy
            // (and so split count) could differ from the plain pieces'.
            if (fusedPiecesNormRope_ && attentionParams(l, 1).tensorCores)
                bytes = std::max(bytes, kc::attentionDecodeWorkspaceBytes(piecesNormRopeParams(l)));
        }
        // Zeroed: its first 1 KB are the fused merge's counters (AttentionDecodeParams::workspace).
        if (bytes > attentionWorkspace_.bytes()) GEMMA_RETURN_IF_ERROR(attentionWorkspace_.allocateZeroed(bytes, "attention workspace"));
        return Status::ok();
    }

    // ---- timing -----------------------------------------------------------------------------------
    // Records an event pair around each launch group when stats are wanted; summed per bucket
    // after the chunk's final synchronisation.
    struct Span {
        Bucket bucket;
        int startEvent, endEvent;
    };
    class Timed {
    public:
        Timed(CudaBackend& backend, StepStats* stats, Bucket bucket) : backend_(backend), stats_(stats), bucket_(bucket) {
            if (stats_ && backend_.eventCursor_ + 2 <= static_cast<int>(backend_.events_.size())) {
                start_ = backend_.eventCursor_++;
                cudaEventRecord(backend_.events_[start_], backend_.stream_);
            }
            if (stats_) stats_->launches[static_cast<int>(bucket_)] += 1;
        }
        ~Timed() {
            if (start_ < 0) return;
            const int end = backend_.eventCursor_++;
            cudaEventRecord(backend_.events_[end], backend_.stream_);
            backend_.spans_.push_back({bucket_, start_, end});
        }

    private:
        CudaBackend& backend_;
        StepStats* stats_;
        Bucket bucket_;
        int start_ = -1;
    };

    void collectTimings(StepStats& stats) {
        for (const auto& span : spans_) {
            float ms = 0.0f;
            if (cudaEventElapsedTime(&ms, events_[span.startEvent], events_[span.endEvent]) == cudaSuccess) {
                stats.bucketMs[static_cast<int>(span.bucket)] += ms;
            }
        }
        spans_.clear();
        stats.instrumented = true;
    }

    // ---- the forward pass ----------------------------------------------------------------------
    // Another weight computed on the same x in the same launch (a layer's k and v beside q).
    struct ExtraOutput {
        const DeviceLinear* w;
        float* y;
        std::int64_t yStride;
    };

    // y = W·x, or with `up` the fused GeGLU y = gelu_tanh(W·x) ⊙ (Up·x); `extras` (no GeGLU) run
    // in the same launch and write their own outputs. A prefill chunk of at least gemmMinRows_
    // rows goes through cuBLASLt instead (gemmLinear).
    // geluGate (batch 1 off the GEMM path only, one weight): y = gelu_tanh(W·x) ⊙ geluGate in the
    // matvec's store (Fp4MatvecParams::geluGate).
    Status matvec(const DeviceLinear& w, const float* x, std::int64_t xStride, float* y, std::int64_t yStride, int rows, StepStats* stats,
                  const DeviceLinear* up = nullptr, std::span<const ExtraOutput> extras = {}, const float* geluGate = nullptr) {
        // A deferred norm whose output this matvec reads (the normed copy, or for a residual
        // update alone the residual stream) rides in its staging (one launch), when the matvec is
        // a single batch-1 integer launch; anything else runs the norm first.
        bool mixedLayouts = false;
        for (const auto& e : extras) mixedLayouts |= e.w->tiled != w.tiled;
        const float* pendingOutput = pendingNorm_.normalizeOutput ? normed_.as<float>() : residualNow_;
        if (geluGate && (rows != 1 || up || !extras.empty() || gemmRows(rows)))
            return Status{ErrorCode::Internal, "the gelu gate needs a one-weight batch-1 matvec"};
        const bool foldNorm = pendingNorm_.active && x == pendingOutput && rows == 1 && integerMatvec_ && !mixedLayouts &&
                              w.in <= kc::Fp4MatvecParams::kInputNormMaxIn && !gemmRows(rows);
        if (!foldNorm) GEMMA_RETURN_IF_ERROR(flushPendingNorm(stats));
        if (gemmRows(rows)) {
            Timed timed(*this, stats, Bucket::Fp4Matvec);
            GEMMA_RETURN_IF_ERROR(gemmLinear(w, x, xStride, y, yStride, rows, up));
            for (const auto& e : extras) GEMMA_RETURN_IF_ERROR(gemmLinear(*e.w, x, xStride, e.y, e.yStride, rows, nullptr, false));
            return Status::ok();
        }
        // One launch reads one layout: with an extra in the other layout (a shape tileWeights
        // left in rows), each weight runs as its own launch.
        for (const auto& e : extras) {
            if (e.w->tiled != w.tiled) {
                GEMMA_RETURN_IF_ERROR(matvec(w, x, xStride, y, yStride, rows, stats, up));
                for (const auto& each : extras) GEMMA_RETURN_IF_ERROR(matvec(*each.w, x, xStride, each.y, each.yStride, rows, stats));
                return Status::ok();
            }
        }
        Timed timed(*this, stats, Bucket::Fp4Matvec);
        kc::Fp4MatvecParams p;
        p.codes = w.codes;
        p.scales = w.scales;
        if (up) {
            p.upCodes = up->codes;
            p.upScales = up->scales;
        }
        p.out = w.out;
        p.in = w.in;
        p.x = x;
        p.xStride = xStride;
        p.y = y;
        p.yStride = yStride;
        p.rows = rows;
        p.programmaticLaunch = programmaticLaunch_;
        p.fp16X = !integerMatvec_;
        p.tiled = w.tiled;
        p.extraCount = static_cast<int>(extras.size());
        for (std::size_t e = 0; e < extras.size() && e < 2; ++e) {
            p.extra[e] = {extras[e].w->codes, extras[e].w->scales, extras[e].w->out, extras[e].y, extras[e].yStride};
        }
        if (foldNorm) p.inputNorm = takePendingNorm();
        p.geluGate = geluGate;
        return up ? kernelError(kc::launchFp4GegluMatvec(p, stream_), "gate/up GeGLU matvec")
                  : kernelError(kc::launchFp4Matvec(p, stream_), "fp4 matvec");
    }


    // ---- the GEMM prefill's FP16 weights ----------------------------------------------------------
    // Two slots, each the FP16 copy of one linear (gate|up together). The prefill's linears come in
    // a fixed order (prefillNext_, built by buildPrefillOrder to match runLayer), so while one
    // linear's GEMMs run on stream_, the next one is dequantized into the other slot on
    // dequantStream_ (OpenOptions::prefillDequantizeAhead; one slot without it). Events order the
    // two streams: a slot's `ready` after its dequantization ahead, its `free` after the GEMMs
    // that read it. The same kernels compute the same bits either way.
    struct WeightSlot {
        DeviceBuffer fp16;
        const DeviceLinear* linear = nullptr;  // what the slot holds (or is being filled with)
        cudaEvent_t ready = nullptr, free = nullptr;
    };

    static float pairMultiplier(const DeviceLinear& w, const DeviceLinear* up) {
        return up ? std::min(w.fp16Multiplier, up->fp16Multiplier) : w.fp16Multiplier;
    }

    Status dequantizeInto(const DeviceLinear& w, const DeviceLinear* up, int slot, cudaStream_t stream) {
        const std::int64_t ld = paddedIn(w.in);
        auto* target = weightSlots_[slot].fp16.as<std::uint16_t>();
        for (const DeviceLinear* l : {&w, up}) {
            if (!l) break;
            kc::Fp4DequantizeParams d;
            d.codes = l->codes;
            d.scales = l->scales;
            d.out = l->out;
            d.in = l->in;
            d.y = target + (l == up ? w.out * ld : 0);
            d.ldOut = ld;
            d.fp16 = true;
            d.multiplier = pairMultiplier(w, up);
            d.tiled = l->tiled;
            GEMMA_RETURN_IF_ERROR(kernelError(kc::launchFp4DequantizeBf16(d, stream), "fp4 dequantize"));
        }
        return Status::ok();
    }

    // A slot holding (w, up) for stream_'s next work: the one a dequantization ahead filled (stream_
    // waits for it), or the slot the previous GEMMs did not read, dequantized on stream_.
    Status acquireWeight(const DeviceLinear& w, const DeviceLinear* up, int& slot) {
        const int slots = weightSlotCount();
        for (slot = 0; slot < slots; ++slot)
            if (weightSlots_[slot].linear == &w) break;
        if (slot == slots) {
            slot = slots == 2 ? lastWeightSlot_ ^ 1 : 0;
            weightSlots_[slot].linear = nullptr;
            // A dequantization ahead (a wrong guess) may still be writing it.
            GEMMA_RETURN_IF_ERROR(cudaError(cudaStreamWaitEvent(stream_, weightSlots_[slot].ready, 0), "cudaStreamWaitEvent"));
            GEMMA_RETURN_IF_ERROR(dequantizeInto(w, up, slot, stream_));
            weightSlots_[slot].linear = &w;
        } else {
            GEMMA_RETURN_IF_ERROR(cudaError(cudaStreamWaitEvent(stream_, weightSlots_[slot].ready, 0), "cudaStreamWaitEvent"));
        }
        lastWeightSlot_ = slot;
        return Status::ok();
    }

    // Starts the FP16 copy of the linear after `w` into the other slot on dequantStream_, once the
    // GEMMs that last read that slot are done.
    Status dequantizeAhead(const DeviceLinear& w, int slot) {
        if (weightSlotCount() < 2) return Status::ok();
        const auto next = prefillNext_.find(&w);
        if (next == prefillNext_.end()) return Status::ok();
        const auto [linear, up] = next->second;
        WeightSlot& other = weightSlots_[slot ^ 1];
        if (other.linear == linear) return Status::ok();
        other.linear = nullptr;
        GEMMA_RETURN_IF_ERROR(cudaError(cudaStreamWaitEvent(dequantStream_, other.free, 0), "cudaStreamWaitEvent"));
        GEMMA_RETURN_IF_ERROR(dequantizeInto(*linear, up, slot ^ 1, dequantStream_));
        GEMMA_RETURN_IF_ERROR(cudaError(cudaEventRecord(other.ready, dequantStream_), "cudaEventRecord"));
        other.linear = linear;
        return Status::ok();
    }

    // One slot, or two with dequantization ahead: what allocateWorkspaces makes and
    // workspaceEstimate counts. Every slot has its buffer and both events.
    int weightSlotCount() const { return prefillDequantizeAhead_ ? 2 : 1; }
    // Whether a linear's GEMM prefill takes x as FP16 hi + lo (OpenOptions::prefillInput).
    bool splitsInput(bool downProjection) const {
        return prefillInput_ == PrefillInput::Split || (downProjection && prefillInput_ == PrefillInput::SplitDown);
    }

    // The order in which a prefill chunk's GEMMs meet the linears (perLayerInputs, then runLayer's
    // q, k, v, o, gate|up, down and the PLE pair per layer), each mapped to its successor; the last
    // maps to the first (the next chunk's).
    void buildPrefillOrder() {
        std::vector<std::pair<const DeviceLinear*, const DeviceLinear*>> order;
        const auto& c = config_;
        if (c.hasPerLayerInputs()) order.push_back({&perLayerModelProjection_, nullptr});
        for (int l = 0; l < c.numLayers; ++l) {
            const auto& g = c.layers[l];
            const DeviceLayer& d = layers_[l];
            order.push_back({&d.q, nullptr});
            if (!g.kvShared) {
                order.push_back({&d.k, nullptr});
                if (g.hasValueProjection) order.push_back({&d.v, nullptr});
            }
            order.push_back({&d.o, nullptr});
            order.push_back({&d.gate, &d.up});
            order.push_back({&d.down, nullptr});
            if (c.hasPerLayerInputs()) {
                order.push_back({&d.perLayerGate, nullptr});
                order.push_back({&d.perLayerProjection, nullptr});
            }
        }
        prefillNext_.clear();
        for (std::size_t i = 0; i < order.size(); ++i) prefillNext_[order[i].first] = order[(i + 1) % order.size()];
    }

    // The GEMM prefill of one linear: x (fp32) → FP16 hi + lo of x·2^-8, W (FP4) → FP16 rows of
    // W·m (m = the weight's power-of-two multiplier), then y = (hi·Wᵀ + lo·Wᵀ)·2^8/m in fp32 (two
    // cuBLASLt calls, the second accumulating). FP16 holds every E2M1 × bf16-scale product exactly
    // (BF16 would round it: 2–10 % logit error on the golden models, measured); hi + lo carries x
    // to ~2^-22. With x as one FP16 (DeviceLinear::splitInput false, OpenOptions::prefillInput:
    // one GEMM; everywhere, pp2048 9.2k → 15.3k tok/s on the H200) the worst golden model moved
    // from 1.3 % to 2.03 % of max|logit|, past issue 3's 2 %, so the split is the default
    // (docs/KERNELS.md, docs/PERFORMANCE.md version 14). With `up`: gate and up are dequantized into one [2F][in] weight with a
    // shared multiplier, one GEMM gives [rows][2F], and the GeGLU is applied elementwise into y.
    // convertInput = false reuses the converted x of the previous call (k and v after q).
    Status gemmLinear(const DeviceLinear& w, const float* x, std::int64_t xStride, float* y, std::int64_t yStride, int rows,
                      const DeviceLinear* up, bool convertInput = true) {
        const std::int64_t ld = paddedIn(w.in);
        auto* hi = gemmInputHi_.as<std::uint16_t>();
        auto* lo = gemmInputLo_.as<std::uint16_t>();
        if (convertInput) {
            kc::ActivationConvertParams convert;
            convert.x = x;
            convert.xStride = xStride;
            convert.rows = rows;
            convert.cols = w.in;
            convert.hi = hi;
            convert.lo = w.splitInput ? lo : nullptr;
            convert.outStride = ld;
            convert.fp16 = true;
            convert.multiplier = kGemmInputMultiplier;
            GEMMA_RETURN_IF_ERROR(kernelError(kc::launchActivationToBf16(convert, stream_), "activation to fp16"));
        }
        const float alpha = 1.0f / (pairMultiplier(w, up) * kGemmInputMultiplier);  // a power of two: exact
        int slot = 0;
        GEMMA_RETURN_IF_ERROR(acquireWeight(w, up, slot));
        GEMMA_RETURN_IF_ERROR(dequantizeAhead(w, slot));
        const auto* weight = weightSlots_[slot].fp16.as<std::uint16_t>();
        // After this call's GEMMs the slot may be overwritten (dequantizeAhead waits for this).
        auto release = [&] { return cudaError(cudaEventRecord(weightSlots_[slot].free, stream_), "cudaEventRecord"); };
        using Operands = CublasLt::Operands;
        if (!up) {
            GEMMA_RETURN_IF_ERROR(blas_->gemm(Operands::Fp16, rows, w.out, w.in, hi, ld, weight, ld, y, yStride, alpha, false, stream_));
            if (w.splitInput)
                GEMMA_RETURN_IF_ERROR(blas_->gemm(Operands::Fp16, rows, w.out, w.in, lo, ld, weight, ld, y, yStride, alpha, true, stream_));
            return release();
        }
        float* gateUp = gateUp_.as<float>();
        const std::int64_t width = 2 * w.out;
        GEMMA_RETURN_IF_ERROR(blas_->gemm(Operands::Fp16, rows, width, w.in, hi, ld, weight, ld, gateUp, width, alpha, false, stream_));
        if (w.splitInput)
            GEMMA_RETURN_IF_ERROR(blas_->gemm(Operands::Fp16, rows, width, w.in, lo, ld, weight, ld, gateUp, width, alpha, true, stream_));
        GEMMA_RETURN_IF_ERROR(release());
        kc::GegluElementwiseParams g;
        g.gateUp = gateUp;
        g.ldIn = width;
        g.rows = rows;
        g.width = w.out;
        g.y = y;
        g.ldOut = yStride;
        return kernelError(kc::launchGegluElementwise(g, stream_), "GeGLU");
    }

    // Rows of an FP8 table × scale into out[rows][outStride], one row per token id on the device.
    Status gather(const EmbeddingTable& table, float scale, float* out, std::int64_t outStride, int rows, const char* what) {
        kc::EmbeddingParams p;
        p.codes = device(table.codes);
        p.rowScales = device(table.rowScales);
        p.vocab = table.rows;
        p.hidden = table.cols;
        p.tokenIds = tokens_.as<int>();
        p.embedScale = scale;
        p.out = out;
        p.outStride = outStride;
        p.rows = rows;
        p.programmaticLaunch = programmaticLaunch_;
        return kernelError(kc::launchEmbeddingGather(p, stream_), what);
    }

    // The residual-stream norm (RmsNorm.h). A decode step's norm of the residual stream into
    // normed_ is deferred (fusedNorms_): the next matvec reading normed_ computes it in its own
    // staging (Fp4MatvecParams::inputNorm) and writes the new residual to the other buffer of
    // the pair; any other consumer runs it here first (flushPendingNorm).
    Status norm(const float* branch, const float* branchWeight, float layerScalar, const float* outWeight, float* out,
                std::int64_t n, int rows, StepStats* stats, float* residual = nullptr) {
        GEMMA_RETURN_IF_ERROR(flushPendingNorm(stats));
        // Deferred (to ride in the consuming matvec): a norm into the normed copy, or a residual
        // update alone (out null; the per-layer-input block's, whose gate reads the residual).
        if (fusedNorms_ && rows == 1 && !residual && (out == normed_.as<float>() || !out) && n == config_.hiddenSize && n % 4 == 0) {
            pendingNorm_ = {true, branch, branchWeight, layerScalar, outWeight, out != nullptr};
            return Status::ok();
        }
        return runNorm(branch, branchWeight, layerScalar, outWeight, out, n, rows, stats, residual);
    }
    Status runNorm(const float* branch, const float* branchWeight, float layerScalar, const float* outWeight, float* out,
                   std::int64_t n, int rows, StepStats* stats, float* residual) {
        Timed timed(*this, stats, Bucket::NormElementwise);
        kc::RmsNormParams p;
        p.branch = branch;
        p.branchWeight = branchWeight;
        p.residual = residual ? residual : residualNow_;
        p.layerScalar = layerScalar;
        p.outWeight = outWeight;
        p.out = out;
        p.n = n;
        p.stride = n;
        p.rows = rows;
        p.eps = config_.rmsNormEps;
        p.programmaticLaunch = programmaticLaunch_;
        return kernelError(kc::launchRmsNormResidual(p, stream_), "rms norm");
    }
    // The deferred norm as its own kernel, in place on the residual stream.
    Status flushPendingNorm(StepStats* stats) {
        if (!pendingNorm_.active) return Status::ok();
        const PendingNorm n = pendingNorm_;
        pendingNorm_ = {};
        return runNorm(n.branch, n.branchWeight, n.layerScalar, n.outWeight, n.normalizeOutput ? normed_.as<float>() : nullptr,
                       config_.hiddenSize, 1, stats, nullptr);
    }
    // The deferred norm as a matvec's input norm: the new residual goes to the other buffer of the
    // pair (every block of the matvec reads the current one), which becomes the current one.
    kc::Fp4MatvecParams::InputNorm takePendingNorm() {
        kc::Fp4MatvecParams::InputNorm in;
        in.residualIn = residualNow_;
        in.branch = pendingNorm_.branch;
        in.branchWeight = pendingNorm_.branchWeight;
        in.layerScalar = pendingNorm_.layerScalar;
        in.outWeight = pendingNorm_.outWeight;
        in.eps = config_.rmsNormEps;
        in.normalizeOutput = pendingNorm_.normalizeOutput;
        if (pendingNorm_.branch || pendingNorm_.layerScalar != 1.0f) {  // otherwise the residual is unchanged
            float* other = residualNow_ == residual_.as<float>() ? residualAlternate_.as<float>() : residual_.as<float>();
            in.residualOut = other;
            residualNow_ = other;
        }
        pendingNorm_ = {};
        return in;
    }

    // Token ids and positions go to device memory first: every kernel reads them from there, so a
    // captured graph of the launches below serves every decode step and every live length.
    Status uploadInputs(std::span<const std::int32_t> tokens, int start) {
        const int rows = static_cast<int>(tokens.size());
        bandBound_ = rows == 1 ? bandBoundAt(start) : 0;  // the launches that follow take this step's band form
        std::vector<int> hostPositions(static_cast<std::size_t>(rows));
        for (int r = 0; r < rows; ++r) hostPositions[static_cast<std::size_t>(r)] = start + r;
        GEMMA_RETURN_IF_ERROR(cudaError(cudaMemcpyAsync(tokens_.as<int>(), tokens.data(), rows * 4u, cudaMemcpyHostToDevice, stream_), "tokens"));
        return cudaError(cudaMemcpyAsync(positions_.as<int>(), hostPositions.data(), rows * 4u, cudaMemcpyHostToDevice, stream_),
                         "positions");
    }

    Status runChunk(std::span<const std::int32_t> tokens, int start, bool wantLogits, bool allPositions, StepStats* stats) {
        GEMMA_RETURN_IF_ERROR(uploadInputs(tokens, start));
        return launchChunk(static_cast<int>(tokens.size()), wantLogits, allPositions, stats);
    }

    // ---- the decode step as one CUDA graph (opt-in: OpenOptions::cudaGraph) -----------------------
    // Captured on first use for the current allocation, then checked once: the same step run by
    // direct launches and by a replay must give bit-identical logits (the KV write at that position
    // is idempotent). Any capture error or mismatch turns the graph off for this backend and
    // records why (graphStatus()); decoding carries on with direct launches.
    Status decodeStep(std::int32_t token, int position, bool& usedGraph) {
        usedGraph = false;
        const std::int32_t input[1] = {token};
        GEMMA_RETURN_IF_ERROR(uploadInputs(input, position));  // also the band form (bandBound_)
        if (!graphWanted_ || graphFailed_) return launchChunk(1, true, false, nullptr);
        cudaGraphExec_t& graphExec = graphExec_[bandSlot(bandBound_)];
        if (!graphExec) {
            graphExec = capture([&] { return launchChunk(1, true, false, nullptr); }, graphStatus_);
            if (!graphExec) {
                graphFailed_ = true;
                return launchChunk(1, true, false, nullptr);
            }
            auto same = replayMatchesDirect(graphExec, [&] { return launchChunk(1, true, false, nullptr); }, token, position, false);
            if (!same) return same.status();
            if (!*same) {
                graphFailed_ = true;
                graphStatus_ = "self-check failed: graph replay and direct launch gave different logits";
                cudaGraphExecDestroy(graphExec);
                graphExec = nullptr;
                return launchChunk(1, true, false, nullptr);  // logits_ from direct launches, not the replay
            }
            graphStatus_ = "on (self-check passed: replay bit-identical to direct launch)";
            usedGraph = true;
            return Status::ok();
        }
        usedGraph = true;
        return cudaError(cudaGraphLaunch(graphExec, stream_), "graph launch");
    }

    // Captures what `launches` enqueues on the stream into an executable graph; null on failure,
    // with the reason in `why` (the stream is left out of capture either way).
    template <typename Launches>
    cudaGraphExec_t capture(Launches&& launches, std::string& why) {
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        cudaError_t error = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal);
        const Status launched = error == cudaSuccess ? launches() : cudaError(error, "begin capture");
        const cudaError_t endError = error == cudaSuccess ? cudaStreamEndCapture(stream_, &graph) : cudaSuccess;
        if (launched && endError == cudaSuccess && graph) error = cudaGraphInstantiate(&exec, graph, 0);
        if (graph) cudaGraphDestroy(graph);
        if (!launched || endError != cudaSuccess || error != cudaSuccess || !exec) {
            (void)cudaGetLastError();
            if (exec) cudaGraphExecDestroy(exec);
            why = "capture failed: " +
                  (launched ? std::string(cudaGetErrorString(endError != cudaSuccess ? endError : error)) : launched.message());
            return nullptr;
        }
        return exec;
    }

    // The self-check of a captured decode graph: the step at (token, position) run by `direct`
    // launches, then by a replay of `graph`, each from freshly uploaded inputs, must leave
    // bit-identical logits (the KV write at that position is idempotent) and, with `checkId`, record
    // the same id in the greedy history. logits_ holds the replay's result afterwards.
    template <typename Launches>
    Expected<bool> replayMatchesDirect(cudaGraphExec_t graph, Launches&& direct, std::int32_t token, int position, bool checkId) {
        const std::int32_t input[1] = {token};
        const std::size_t vocab = static_cast<std::size_t>(config_.vocabSize);
        std::vector<float> logits[2] = {std::vector<float>(vocab), std::vector<float>(vocab)};
        std::int32_t ids[2] = {0, 0};
        std::int32_t* history = greedyHistory_.host<std::int32_t>() + position % kGreedyHistory;
        for (int run = 0; run < 2; ++run) {
            GEMMA_RETURN_IF_ERROR(uploadInputs(input, position));
            if (checkId) *history = -1;
            GEMMA_RETURN_IF_ERROR(run == 0 ? direct() : cudaError(cudaGraphLaunch(graph, stream_), "graph launch"));
            GEMMA_RETURN_IF_ERROR(cudaError(cudaMemcpyAsync(logits[run].data(), logits_.as<float>(), vocab * 4, cudaMemcpyDeviceToHost, stream_),
                                            "self-check"));
            GEMMA_RETURN_IF_ERROR(cudaError(cudaStreamSynchronize(stream_), "self-check"));
            if (checkId) ids[run] = *history;
        }
        return std::memcmp(logits[0].data(), logits[1].data(), vocab * 4) == 0 && ids[0] == ids[1] && ids[0] >= 0;
    }

    // ---- greedy decoding chained on the device ----------------------------------------------------
    // One graph = one decode step + the device argmax, which writes the chosen id into the step's
    // token input, records it in the host-mapped history and advances the device-side position
    // (ArgmaxParams feedback). Replays of it decode greedily with nothing uploaded in between, so
    // the host keeps the next step queued behind the running one and the GPU never waits for the
    // host's share of a token (copying 1 MB of logits, choosing, launching).
    kc::ArgmaxParams greedyArgmaxParams() const {
        kc::ArgmaxParams a;
        a.logits = logits_.as<float>();
        a.n = config_.vocabSize;
        a.stride = config_.vocabSize;
        a.rows = 1;
        a.outIndex = tokens_.as<int>();
        a.workspace = argmaxWorkspace_.as<void>();
        a.workspaceBytes = argmaxWorkspace_.bytes();
        a.position = positions_.as<int>();
        a.history = greedyHistory_.device<int>();
        a.historySize = kGreedyHistory;
        return a;
    }

    Status launchGreedyStep() {
        GEMMA_RETURN_IF_ERROR(launchChunk(1, true, false, nullptr));
        return kernelError(kc::launchArgmax(greedyArgmaxParams(), stream_), "argmax");
    }

    // Captures the greedy graph, then checks it once at (token, position), the step decodeGreedy
    // runs first anyway (its KV write is idempotent): a direct launch and a replay must give
    // bit-identical logits and the same id. A failure turns the device chain off (name() says
    // why); decodeGreedy then takes the host path.
    Status prepareGreedyGraph(std::int32_t token, int position) {
        cudaGraphExec_t& greedyGraph = greedyGraph_[bandSlot(bandBound_)];
        greedyGraph = capture([&] { return launchGreedyStep(); }, greedyStatus_);
        if (!greedyGraph) {
            greedyFailed_ = true;
            greedyStatus_ = "off (" + greedyStatus_ + ")";
            return Status::ok();
        }
        auto same = replayMatchesDirect(greedyGraph, [&] { return launchGreedyStep(); }, token, position, true);
        if (!same) return same.status();
        if (!*same) {
            greedyFailed_ = true;
            greedyStatus_ = "off (self-check failed: graph replay and direct launch disagreed)";
            cudaGraphExecDestroy(greedyGraph);
            greedyGraph = nullptr;
            return Status::ok();
        }
        greedyStatus_ = "on (self-check passed: replay bit-identical to direct launch, same id)";
        return Status::ok();
    }

public:
    Status decodeGreedy(std::int32_t token, int startPosition, int maxSteps, const GreedyCallback& onToken) override {
        if (maxSteps < 1) return {ErrorCode::InvalidArgument, "greedy decoding needs at least one step"};
        const std::int32_t input[1] = {token};
        GEMMA_RETURN_IF_ERROR(checkForwardRequest(input, startPosition, position_, allocation_, config_.vocabSize));
        if (static_cast<std::int64_t>(startPosition) + maxSteps > allocation_) {
            return {ErrorCode::InvalidArgument, "the context allocation of " + std::to_string(allocation_) + " positions is full"};
        }
        // The chain runs in segments of one band form each (one graph each, bandSlot): a chain
        // that crosses a band limit ends its segment there and the next starts from the last id
        // the previous chose. Without band limits (or far past them), one segment.
        int done = 0;
        while (done < maxSteps) {
            const int position = startPosition + done;
            const int bound = bandBoundAt(position);
            const int steps = bound > 0 ? std::min(maxSteps - done, bound - position) : maxSteps - done;
            int accepted = 0;
            bool stopped = false;
            GEMMA_RETURN_IF_ERROR(greedySegment(token, position, steps, onToken, accepted, stopped, token));
            done += accepted;
            if (stopped || accepted < steps) break;
        }
        return Status::ok();
    }

private:
    // One segment of decodeGreedy: up to maxSteps steps from (token, startPosition), all in one
    // band form. `accepted`: the steps onToken took; `stopped`: onToken asked to stop; `last`: the
    // last accepted id (unchanged when none). Without the segment's graph, the host path.
    Status greedySegment(std::int32_t token, int startPosition, int maxSteps, const GreedyCallback& onToken, int& accepted,
                         bool& stopped, std::int32_t& last) {
        const std::int32_t input[1] = {token};
        bandBound_ = bandBoundAt(startPosition);
        cudaGraphExec_t& greedyGraph = greedyGraph_[bandSlot(bandBound_)];
        if (graphWanted_ && !greedyFailed_ && !greedyGraph) GEMMA_RETURN_IF_ERROR(prepareGreedyGraph(token, startPosition));
        if (!greedyGraph) {
            // The host path to the end of this segment, counting what it accepts.
            accepted = 0;
            stopped = false;
            const GreedyCallback counting = [&](std::int32_t id, const StepStats& step) {
                ++accepted;
                last = id;
                stopped = !onToken(id, step);
                return !stopped;
            };
            return Backend::decodeGreedy(token, startPosition, maxSteps, counting);
        }

        GEMMA_RETURN_IF_ERROR(uploadInputs(input, startPosition));
        int launched = 0;
        accepted = 0;
        stopped = false;
        auto launchNext = [&]() {
            GEMMA_RETURN_IF_ERROR(cudaError(cudaGraphLaunch(greedyGraph, stream_), "graph launch"));
            GEMMA_RETURN_IF_ERROR(cudaError(cudaEventRecord(greedyEvents_[launched % 2], stream_), "cudaEventRecord"));
            ++launched;
            return Status::ok();
        };
        Status status = launchNext();
        auto previous = std::chrono::steady_clock::now();
        // Invariant: launched == accepted + 1 at the top (step `accepted` is running or done); the
        // next step goes in behind it before the host waits, so the GPU always has work queued.
        while (status && accepted < launched) {
            if (launched < maxSteps) {
                status = launchNext();
                if (!status) break;
            }
            status = cudaError(cudaEventSynchronize(greedyEvents_[accepted % 2]), "running the forward pass");
            if (!status) break;
            const int position = startPosition + accepted;
            const std::int32_t id = greedyHistory_.host<std::int32_t>()[position % kGreedyHistory];
            const auto now = std::chrono::steady_clock::now();
            StepStats step;
            step.position = position;
            step.graph = true;
            step.wallMs = std::chrono::duration<double, std::milli>(now - previous).count();
            previous = now;
            ++accepted;
            last = id;
            position_ = startPosition + accepted;
            if (!onToken(id, step)) {
                stopped = true;
                break;
            }
        }
        // The step queued ahead (if any) finishes before anything else uses the cache; the
        // context ends after the last accepted step.
        const Status drained = cudaError(cudaStreamSynchronize(stream_), "running the forward pass");
        position_ = startPosition + accepted;
        GEMMA_RETURN_IF_ERROR(status);
        return drained;
    }

    void dropGraph() {
        for (auto* slots : {&graphExec_, &greedyGraph_})
            for (cudaGraphExec_t& graph : *slots) {
                if (graph) cudaGraphExecDestroy(graph);
                graph = nullptr;
            }
    }

    Status launchChunk(int rows, bool wantLogits, bool allPositions, StepStats* stats) {
        const auto& c = config_;
        const std::int64_t H = c.hiddenSize;

        // 1. Scaled embedding gather (into residual_, the stream's first buffer on every step).
        residualNow_ = residual_.as<float>();
        pendingNorm_ = {};
        {
            Timed timed(*this, stats, Bucket::NormElementwise);
            GEMMA_RETURN_IF_ERROR(gather(weights_.embedding, package_.metadata().embedScale, residual_.as<float>(), H, rows, "embedding gather"));
        }
        // 2. Per-layer inputs.
        if (c.hasPerLayerInputs()) GEMMA_RETURN_IF_ERROR(perLayerInputs(rows, stats));
        // 3. The first layer's input norm; later ones are fused into the previous layer's end.
        GEMMA_RETURN_IF_ERROR(norm(nullptr, nullptr, 1.0f, layers_[0].inputNorm, normed_.as<float>(), H, rows, stats));
        for (int l = 0; l < c.numLayers; ++l) GEMMA_RETURN_IF_ERROR(runLayer(l, rows, stats));
        // 4. lm_head with the softcap (the final norm was fused into the last layer).
        GEMMA_RETURN_IF_ERROR(flushPendingNorm(stats));
        if (!wantLogits) return Status::ok();
        Timed timed(*this, stats, Bucket::LmHead);
        kc::Fp8LmHeadParams p;
        p.codes = device(weights_.embedding.codes);
        p.rowScales = device(weights_.embedding.rowScales);
        p.vocab = weights_.embedding.rows;
        p.hidden = weights_.embedding.cols;
        const int first = allPositions ? 0 : rows - 1;
        p.x = normed_.as<float>() + first * H;
        p.xStride = H;
        p.logits = logits_.as<float>();  // row 0 on: the buffer holds kChunk rows
        p.logitStride = c.vocabSize;
        p.rows = rows - first;
        p.softcap = c.finalLogitSoftcap;
        // The resident grid (one row) as an ordinary kernel: launched programmatically, its blocks
        // became resident while the last layer's kernels still ran and the 12b step lost 0.07 ms
        // (docs/PERFORMANCE.md version 15 step 2).
        p.persistent = persistentLmHead_;
        p.programmaticLaunch = programmaticLaunch_ && !(persistentLmHead_ && p.rows == 1);
        return kernelError(kc::launchFp8LmHead(p, stream_), "lm_head");
    }

    Status perLayerInputs(int rows, StepStats* stats) {
        const auto& c = config_;
        const std::int64_t H = c.hiddenSize, P = c.hiddenSizePerLayerInput, LP = c.numLayers * P;
        float* projected = perLayerInputs_.as<float>();
        GEMMA_RETURN_IF_ERROR(matvec(perLayerModelProjection_, residual_.as<float>(), H, projected, LP, rows, stats));
        // rmsNorm(projection · H^-0.5) over each layer's P channels: the scale rides on the fused
        // kernel's residual scalar, which is applied before the norm as transformers does.
        const auto projectionScale = static_cast<float>(std::pow(static_cast<double>(H), -0.5));
        GEMMA_RETURN_IF_ERROR(norm(nullptr, nullptr, projectionScale, perLayerProjectionNorm_, perLayerIdentity_.as<float>(), P,
                                   rows * c.numLayers, stats, projected));
        Timed timed(*this, stats, Bucket::NormElementwise);
        // The raw projection is no longer needed: its buffer takes the table rows.
        GEMMA_RETURN_IF_ERROR(gather(weights_.perLayerEmbedding, package_.metadata().perLayerEmbedScale, projected, LP, rows, "PLE gather"));
        kc::PleCombineParams combine;
        combine.projected = perLayerIdentity_.as<float>();
        combine.identity = projected;
        combine.out = projected;
        combine.n = LP;
        combine.rows = rows;
        combine.scale = static_cast<float>(std::pow(2.0, -0.5));
        combine.programmaticLaunch = programmaticLaunch_;
        return kernelError(kc::launchPleCombine(combine, stream_), "PLE combine");
    }

    // Whether layer l's attention runs as one fused launch: decode rows only, and small query
    // groups (the fused merge is serial over the group's heads; kFusedAttentionMaxGroup).
    bool fusedAttentionFor(int l, int rows) const {
        const bool sliding = config_.layers[l].type == LayerType::Sliding;
        if (sliding ? tensorCoreSlidingAttention_ : !fuseFullAttention_) return false;  // OpenOptions::fuseFullAttention, tensorCoreSlidingAttention
        return rows == 1 && fusedAttention_ && config_.numHeads / config_.layers[l].kvHeads <= kc::kFusedAttentionMaxGroup;
    }

    // Which layers run the cluster form (AttentionDecodeParams::cluster; OpenOptions::
    // clusterAttention, under fusedAttention): the sliding ones, whose band never exceeds the
    // window, with at most kClusterAttentionMaxGroup query heads per KV head (so also groups the
    // fused split kernel leaves to three launches, e2b's 8), where the device launches it (sm_90+
    // and a cluster size whose clusters are all resident at once). Decided when the caches are
    // (re)allocated, so a graph captures one choice.
    //
    // Also the full layers with at most kClusterAttentionMaxGroup query heads per KV head (e2b,
    // e4b, 31b), but only in steps whose band is at most clusterFullKeys_ keys (bandBound_,
    // chooseBandForms), the OpenOptions::clusterFullAttentionKeys limit (0 by default: never).
    // Their other steps keep the tensor-core pieces.
    void chooseClusterAttention() {
        clusterLayer_.assign(static_cast<std::size_t>(config_.numLayers), false);
        clusterShortLayer_.assign(static_cast<std::size_t>(config_.numLayers), false);
        clusterLayers_ = 0;
        clusterShortLayers_ = 0;
        headSplitLayers_ = 0;
        clusterFullKeys_ = 0;
        if (!clusterAttention_ || !fusedAttention_) return;
        for (int l = 0; l < config_.numLayers; ++l) {
            const bool sliding = config_.layers[l].type == LayerType::Sliding;
            const int group = config_.numHeads / config_.layers[l].kvHeads;
            if ((sliding && tensorCoreSlidingAttention_) || group > kc::kClusterAttentionMaxGroup) continue;
            kc::AttentionDecodeParams d = attentionParams(l, 1);
            const int bandLimit = sliding ? 0 : std::max(clusterFullKeysOption_, 0);
            if (!sliding && bandLimit == 0) continue;
            clusterForm(d);
            if (kc::attentionDecodeSplits(d) < 1) continue;
            if (sliding) {
                clusterLayer_[static_cast<std::size_t>(l)] = true;
                ++clusterLayers_;
                if (d.clusterHeadSplit == 2) ++headSplitLayers_;
            } else {
                clusterShortLayer_[static_cast<std::size_t>(l)] = true;
                ++clusterShortLayers_;
                clusterFullKeys_ = clusterFullKeys_ == 0 ? bandLimit : std::min(clusterFullKeys_, bandLimit);
            }
        }
    }
    // Makes a decode attention launch the cluster form: no tensor cores (a full layer at a short
    // band has them otherwise), and the heads split over two clusters where the layer's shape gains
    // from it (OpenOptions::clusterAttentionHeadSplit, kc::clusterHeadSplitPays).
    void clusterForm(kc::AttentionDecodeParams& d) const {
        d.cluster = true;
        d.tensorCores = false;
        d.clusterHeadSplit = clusterAttentionHeadSplit_ && kc::clusterHeadSplitPays(d.headDim, d.qHeads / d.kvHeads) ? 2 : 1;
    }
    bool clusterAttentionFor(int l, int rows) const {
        const auto i = static_cast<std::size_t>(l);
        return rows == 1 && i < clusterLayer_.size() &&
               (clusterLayer_[i] || (bandBound_ > 0 && bandBound_ <= clusterFullKeys_ && clusterShortLayer_[i]));
    }
    // The band forms of a decode step (one row), by the band's length: bandLimits_ holds, in
    // ascending order, the limits where a form changes: clusterFullKeys_ (where some full layer
    // takes the cluster form below it) and the pieces' limit fullBandLimit() (the pieces split for
    // that band below it). A step at `position` has a band of position + 1 keys; its form's bound
    // is the least limit above position (the band is at most that many keys), 0 past every limit
    // (the default form). The bound decides the cluster form (bound <= clusterFullKeys_) and the
    // pieces' split count (attentionParams).
    // A full layer's cache holds the whole allocation (kvCacheSlots), so the pieces' limit counts
    // only below it. (A ladder of the limit's doublings, for a chat deep inside a large
    // allocation, measured nothing: docs/PERFORMANCE.md version 22 step 2.)
    void chooseBandForms(int allocation) {
        bandLimits_.clear();
        if (clusterShortLayers_ > 0 && clusterFullKeys_ > 0) bandLimits_.push_back(clusterFullKeys_);
        if (const int limit = fullBandLimit(); limit > 0 && limit < allocation) bandLimits_.push_back(limit);
        std::sort(bandLimits_.begin(), bandLimits_.end());
        bandLimits_.erase(std::unique(bandLimits_.begin(), bandLimits_.end()), bandLimits_.end());
    }
    // The pieces' band limit of OpenOptions::fullAttentionBandKeys (0 where the model has no full
    // layer, or the option says never); in force at allocations above it (chooseBandForms). The
    // backend's description states it whatever the allocation, as one description covers a
    // benchmark's sweep.
    int fullBandLimit() const {
        const bool fullLayers = std::any_of(config_.layers.begin(), config_.layers.end(),
                                            [](const LayerGeometry& g) { return g.type != LayerType::Sliding; });
        if (!fullLayers) return 0;
        return fullBandKeysOption_ < 0 ? kc::kFullAttentionBandKeys : fullBandKeysOption_;
    }
    int bandBoundAt(int position) const {
        for (const int limit : bandLimits_)
            if (position < limit) return limit;
        return 0;
    }
    // The decode graphs' slot of a band form (graphExec_, greedyGraph_): 0 the default, then one
    // per limit in ascending order.
    int bandSlot(int bound) const {
        for (std::size_t i = 0; i < bandLimits_.size(); ++i)
            if (bandLimits_[i] == bound) return static_cast<int>(i) + 1;
        return 0;
    }
    // Whether layer l's decode attention is one launch (fused split kernel or cluster form).
    bool oneLaunchAttentionFor(int l, int rows) const { return fusedAttentionFor(l, rows) || clusterAttentionFor(l, rows); }

    // q/k/v norm + RoPE + cache write of layer l (q in place).
    kc::QkvNormRopeParams normRopeParams(int l, int rows) const {
        const auto& c = config_;
        const auto& g = c.layers[l];
        const auto& w = layers_[l];
        kc::QkvNormRopeParams p;
        p.q = query_.as<float>();
        p.qOut = query_.as<float>();
        p.qStride = qWidth_;
        if (!g.kvShared) {
            p.k = key_.as<float>();
            p.v = g.hasValueProjection ? value_.as<float>() : key_.as<float>();
            p.kNormWeight = w.kNorm;
            p.kCache = caches_[l].keys.as<void>();
            p.vCache = caches_[l].values.as<void>();
            p.capacity = caches_[l].capacity;
        }
        p.kvStride = kvWidth_;
        p.qNormWeight = w.qNorm;
        p.invFreq = w.inverseFrequency;
        p.rotatedPairs = g.ropeRotatedPairs;
        p.positions = positions_.as<int>();
        p.kvDtype = kvDtypeOf(l);
        p.qHeads = c.numHeads;
        p.kvHeads = g.kvHeads;
        p.headDim = g.headDim;
        p.rows = rows;
        p.eps = c.rmsNormEps;
        p.programmaticLaunch = programmaticLaunch_;
        return p;
    }

    // Whether layer l's attention on `rows` runs on the tensor-core pieces with the q/k/v norm +
    // RoPE and the cache write inside (OpenOptions::fusedPiecesNormRope): a decode row whose
    // attention is the pieces (not one launch: the fused split kernel or the cluster form).
    bool fusedPiecesFor(int l, int rows) const {
        return fusedPiecesNormRope_ && rows == 1 && !oneLaunchAttentionFor(l, rows) && attentionParams(l, rows).tensorCores;
    }
    // That launch: the pieces over the raw q, k and v, then the merge kernel.
    kc::AttentionDecodeParams piecesNormRopeParams(int l) const {
        kc::AttentionDecodeParams d = attentionParams(l, 1);
        d.fuseNormRope = true;
        d.normRope = normRopeParams(l, 1);
        return d;
    }

    // Attention of layer l over normed, rotated q and the cache.
    Status attention(int l, int rows) {
        if (rows > 1 && gemmMinRows_ > 0 && rows >= gemmMinRows_) {
            // Prefill chunk: flash attention on tensor cores (fp16 operands, fp32 softmax and
            // accumulation), all rows of the chunk in one launch.
            return kernelError(kc::launchAttentionPrefill(kc::attentionPrefillForm(attentionParams(l, rows)), stream_),
                               "prefill attention");
        }
        return kernelError(kc::launchAttentionDecode(attentionParams(l, rows), stream_), "attention");
    }

    Status runLayer(int l, int rows, StepStats* stats) {
        const auto& c = config_;
        const auto& g = c.layers[l];
        const auto& w = layers_[l];
        const std::int64_t H = c.hiddenSize;
        float* normed = normed_.as<float>();

        // Attention block: q, k and v projections in one launch (one weight stream).
        ExtraOutput kv[2];
        std::size_t kvCount = 0;
        if (!g.kvShared) {
            kv[kvCount++] = {&w.k, key_.as<float>(), kvWidth_};
            if (g.hasValueProjection) kv[kvCount++] = {&w.v, value_.as<float>(), kvWidth_};
        }
        GEMMA_RETURN_IF_ERROR(matvec(w.q, normed, H, query_.as<float>(), qWidth_, rows, stats, nullptr, std::span(kv, kvCount)));
        const bool piecesNormRope = fusedPiecesFor(l, rows);
        {
            Timed timed(*this, stats, Bucket::Attention);
            if (piecesNormRope) {
                // Two launches: the tensor-core pieces with the norm + RoPE and the cache write
                // inside (AttentionPrefill.cu, "Fused norm + RoPE"), then the merge.
                GEMMA_RETURN_IF_ERROR(kernelError(kc::launchAttentionDecode(piecesNormRopeParams(l), stream_), "attention"));
            } else if (oneLaunchAttentionFor(l, rows)) {
                // One launch: norm + RoPE + cache write, split and merge (AttentionDecode.cu, "Fusions").
                kc::AttentionDecodeParams d = attentionParams(l, rows);
                d.fuseNormRope = true;
                d.normRope = normRopeParams(l, rows);
                // The merge: through the cluster's shared memory, or by the last split block.
                if (clusterAttentionFor(l, rows)) clusterForm(d);
                d.prefetchBand = d.cluster && attentionPrefetch_;
                d.fuseMerge = !d.cluster;
                GEMMA_RETURN_IF_ERROR(kernelError(kc::launchAttentionDecode(d, stream_), "attention"));
            } else {
                GEMMA_RETURN_IF_ERROR(kernelError(kc::launchQkvNormRope(normRopeParams(l, rows), stream_), "q/k/v norm + RoPE"));
            }
        }
        if (!oneLaunchAttentionFor(l, rows) && !piecesNormRope) {
            Timed timed(*this, stats, Bucket::Attention);
            GEMMA_RETURN_IF_ERROR(attention(l, rows));
        }
        GEMMA_RETURN_IF_ERROR(matvec(w.o, attended_.as<float>(), qWidth_, branch_.as<float>(), H, rows, stats));
        GEMMA_RETURN_IF_ERROR(norm(branch_.as<float>(), w.postAttentionNorm, 1.0f, w.preFeedforwardNorm, normed, H, rows, stats));

        // Feed-forward block: GeGLU fused into the gate/up matvec.
        GEMMA_RETURN_IF_ERROR(matvec(w.gate, normed, H, ffn_.as<float>(), ffnWidth_, rows, stats, &w.up));
        GEMMA_RETURN_IF_ERROR(matvec(w.down, ffn_.as<float>(), ffnWidth_, branch_.as<float>(), H, rows, stats));

        const bool lastLayer = l + 1 == c.numLayers;
        const float* nextNorm = lastLayer ? finalNorm_ : layers_[l + 1].inputNorm;
        if (!c.hasPerLayerInputs()) {
            return norm(branch_.as<float>(), w.postFeedforwardNorm, w.layerScalar, nextNorm, normed, H, rows, stats);
        }
        // PLE block, then layer_scalar and the next norm. A decode step runs the post-FFN norm's
        // residual update in the gate matvec's staging and gelu(gate) ⊙ per-layer input in its
        // store: one launch instead of three (docs/PERFORMANCE.md version 16).
        const std::int64_t P = c.hiddenSizePerLayerInput;
        const float* layerInput = perLayerInputs_.as<float>() + static_cast<std::int64_t>(l) * P;
        const bool gateInStore = rows == 1 && !gemmRows(rows);
        GEMMA_RETURN_IF_ERROR(norm(branch_.as<float>(), w.postFeedforwardNorm, 1.0f, nullptr, nullptr, H, rows, stats));
        GEMMA_RETURN_IF_ERROR(
            matvec(w.perLayerGate, residualNow_, H, perLayerGate_.as<float>(), P, rows, stats, nullptr, {}, gateInStore ? layerInput : nullptr));
        if (!gateInStore) {
            Timed timed(*this, stats, Bucket::NormElementwise);
            kc::PleGateParams p;
            p.gate = perLayerGate_.as<float>();
            p.gateStride = P;
            p.perLayerInput = layerInput;
            p.inputStride = c.numLayers * P;
            p.n = P;
            p.rows = rows;
            p.programmaticLaunch = programmaticLaunch_;
            GEMMA_RETURN_IF_ERROR(kernelError(kc::launchPleGate(p, stream_), "PLE gate"));
        }
        GEMMA_RETURN_IF_ERROR(matvec(w.perLayerProjection, perLayerGate_.as<float>(), P, branch_.as<float>(), H, rows, stats));
        return norm(branch_.as<float>(), w.postPerLayerNorm, w.layerScalar, nextNorm, normed, H, rows, stats);
    }

    const Package& package_;
    const ModelConfig& config_;
    const ModelWeights& weights_;
    KvCacheType kvCacheType_ = KvCacheType::F16;
    std::string deviceName_;
    cudaStream_t stream_ = nullptr;
    DeviceBuffer weightsOnDevice_, frequencyTable_;
    std::vector<DeviceLayer> layers_;
    DeviceLinear perLayerModelProjection_;
    const float* perLayerProjectionNorm_ = nullptr;
    const float* finalNorm_ = nullptr;
    std::vector<DeviceCache> caches_;
    DeviceBuffer residual_, normed_, branch_, query_, key_, value_, attended_, ffn_, logits_, tokens_, positions_;
    DeviceBuffer perLayerInputs_, perLayerIdentity_, perLayerGate_, attentionWorkspace_;
    std::int64_t qWidth_ = 0, kvWidth_ = 0, ffnWidth_ = 0;
    bool graphWanted_ = false;
    int gemmMinRows_ = 0;
    bool programmaticLaunch_ = false;
    bool integerMatvec_ = true;
    bool tiledWeights_ = true;
    bool fusedAttention_ = true;
    bool fusedNorms_ = true;
    bool tensorCoreAttention_ = true;
    bool persistentLmHead_ = true;
    bool clusterAttention_ = true;
    bool fuseFullAttention_ = false;
    bool tensorCoreSlidingAttention_ = false;
    bool fusedPiecesNormRope_ = true;   // OpenOptions::fusedPiecesNormRope (fusedPiecesFor)
    bool clusterAttentionHeadSplit_ = true;
    bool bulkCopies_ = true;  // OpenOptions::bulkCopies
    int clusterFullKeysOption_ = 0;   // OpenOptions::clusterFullAttentionKeys
    int clusterFullKeys_ = 0;         // the band limit in force (chooseClusterAttention)
    int fullBandKeysOption_ = -1;     // OpenOptions::fullAttentionBandKeys
    std::vector<int> bandLimits_;     // ascending (chooseBandForms)
    // This step's band form: its bound (bandBoundAt; 0 the default form), set with the step's inputs.
    int bandBound_ = 0;
    bool attentionPrefetch_ = true;
    int gemmPrefillChunk_ = kGemmPrefillChunk;
    PrefillInput prefillInput_ = PrefillInput::SplitDown;
    bool prefillDequantizeAhead_ = true;
    std::vector<bool> clusterLayer_;  // per layer: the cluster form (chooseClusterAttention)
    std::vector<bool> clusterShortLayer_;  // per full layer: the cluster form at a short band
    int clusterShortLayers_ = 0;
    int clusterLayers_ = 0;
    int headSplitLayers_ = 0;  // of those, the ones whose heads split over two clusters
    // Deferred norms (norm()): the arguments of the residual norm the next matvec folds in, and
    // which buffer of the pair (residual_, residualAlternate_) holds the residual stream now.
    struct PendingNorm {
        bool active = false;
        const float* branch = nullptr;
        const float* branchWeight = nullptr;
        float layerScalar = 1.0f;
        const float* outWeight = nullptr;
        bool normalizeOutput = true;  // false: a residual update only (the consumer reads residualNow_)
    };
    PendingNorm pendingNorm_;
    DeviceBuffer residualAlternate_;
    float* residualNow_ = nullptr;
    int untiledWeights_ = 0;  // FP4 weights tileWeights left in rows (name() says so)
    int chunkRows_ = kChunk;
    std::unique_ptr<CublasLt> blas_;
    std::string prefillStatus_;
    DeviceBuffer gemmInputHi_, gemmInputLo_, gateUp_;
    WeightSlot weightSlots_[2];
    int lastWeightSlot_ = 0;
    cudaStream_t dequantStream_ = nullptr;
    std::unordered_map<const DeviceLinear*, std::pair<const DeviceLinear*, const DeviceLinear*>> prefillNext_;
    bool graphFailed_ = false;
    // The decode step's graphs, by band form (bandSlot): [0] the default, then one per band limit
    // (chooseBandForms: the cluster limit and the pieces' limit).
    static constexpr std::size_t kBandForms = 3;
    std::array<cudaGraphExec_t, kBandForms> graphExec_{};
    std::string graphStatus_ = "off";
    // The greedy chain (decodeGreedy): its graph, the ids it chose (entry p % kGreedyHistory for
    // the step at position p; at most two steps are in flight) and one event per step in flight.
    static constexpr int kGreedyHistory = 8;
    DeviceBuffer argmaxWorkspace_;
    MappedHostBuffer greedyHistory_;
    MappedHostBuffer hostLogits_;  // decodeLogits(): one row, page-locked (the GPU copies into it)
    MappedHostBuffer hostBest_;    // decodeBest(): kTopKMaxCount entries the top-k kernel writes
    DeviceBuffer topKWorkspace_;
    static_assert(sizeof(kc::TopKEntry) == sizeof(RankedLogit) && offsetof(kc::TopKEntry, id) == offsetof(RankedLogit, id),
                  "the top-k kernel writes RankedLogit entries");
    std::array<cudaGraphExec_t, kBandForms> greedyGraph_{};  // by band form, as graphExec_
    cudaEvent_t greedyEvents_[2] = {nullptr, nullptr};
    bool greedyFailed_ = false;
    std::string greedyStatus_;
    std::vector<cudaEvent_t> events_;
    std::shared_ptr<KernelTrace> trace_;  // the process's one trace (sharedKernelTrace), paused between uses
    bool timelineWanted_ = false;          // OpenOptions::kernelTimeline
    std::string timelineStatus_;           // why instrumented steps use event pairs (empty: not tried or fine)
    std::vector<KernelRecord> traceRecords_;
    std::vector<Span> spans_;
    int eventCursor_ = 0;
    int allocation_ = 0;
    int position_ = 0;
};

}  // namespace

Expected<std::unique_ptr<Backend>> makeCudaBackend(const Package& package, const ModelWeights& weights, int allocation,
                                                  const OpenOptions& options) {
    auto backend = std::make_unique<CudaBackend>(package, weights, options);
    GEMMA_RETURN_IF_ERROR(backend->initialize(allocation));
    return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace gemma
