// What the engine asks of a compute backend (CPU reference, CUDA). A backend owns the KV cache
// and runs the forward pass of GEMMA4.md §2.10 over a run of consecutive positions.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "gemma/Config.h"
#include "gemma/Engine.h"
#include "gemma/Sampler.h"
#include "gemma/Status.h"
#include "StepAttribution.h"

namespace gemma {

// Prefill rows per pass of the CPU backend and of the CUDA backend's matvec path. Sliding-window
// rings hold window + chunk − 1 slots so a chunk's keys never overwrite keys its own earlier queries
// still need (ARCHITECTURE.md).
inline constexpr int kPrefillChunk = 32;
// Prefill rows per pass of the CUDA backend's GEMM path (cuBLASLt): long enough that the per-layer
// FP4 → FP16 dequantization (~12 ms for all of `12b` on an H200) is amortized over many rows; the
// sliding rings grow by as many slots (Backend.h kvCacheSlots).
inline constexpr int kGemmPrefillChunk = 2048;     // OpenOptions::gemmPrefillChunk's default
inline constexpr int kMaxGemmPrefillChunk = 8192;
inline constexpr int kMinGemmPrefillChunk = 256;  // the shortest a chunk is cut to when memory is short

// The GEMM prefill chunk a GPU uses: `asked`, halved while the memory it needs (`needed(chunk)`:
// weights, KV cache with the chunk's sliding rings, workspaces) plus `headroom` exceeds
// `freeBytes`, but not below kMinGemmPrefillChunk and never above `asked`. The caller still
// refuses, with a message, when even the returned chunk does not fit.
template <typename Needed>
int fitGemmPrefillChunk(int asked, std::size_t freeBytes, std::size_t headroom, Needed needed) {
    int chunk = asked;
    while (chunk > kMinGemmPrefillChunk && needed(chunk) + headroom > freeBytes) chunk = std::max(kMinGemmPrefillChunk, chunk / 2);
    return chunk;
}

// KV slots a layer's cache holds for an allocation, with prefill chunks of `chunk` rows.
inline std::int64_t kvCacheSlots(bool sliding, int slidingWindow, int allocation, int chunk = kPrefillChunk) {
    return sliding ? std::min<std::int64_t>(allocation, slidingWindow + chunk - 1) : allocation;
}

// Bytes of a model's KV cache (keys and values of every layer that owns a cache) at `type`'s
// element sizes (kvCacheElementBytes; the CPU backend's f32 is KvCacheType::F32): what a backend
// allocates and what Engine::estimateMemory reports.
inline std::int64_t kvCacheBytes(const ModelConfig& c, int allocation, int chunk, KvCacheType type) {
    std::int64_t bytes = 0;
    for (const auto& g : c.layers) {
        if (g.kvShared) continue;
        const bool sliding = g.type == LayerType::Sliding;
        bytes += 2 * kvCacheSlots(sliding, c.slidingWindow, allocation, chunk) * g.kvHeads * g.headDim * kvCacheElementBytes(type, sliding);
    }
    return bytes;
}

// What a kernel trace saw (Backend::endKernelTrace): per-bucket GPU time (Gap left 0: the caller
// knows the wall time), kernels per bucket, the union of the kernels' intervals, and the kernels
// whose name no bucket claims (KernelBuckets.h; counted in NormElementwise).
// `kernels` splits the same time by kernel (kernelDisplayName: template instances apart), largest
// charged time first: chargedMs by the buckets' rule (Σ chargedMs == busyMs), durationMs the sum
// of the kernels' own start-to-end times (overlapping neighbours counted in both).
struct KernelShare {
    std::string name;
    double chargedMs = 0.0;
    double durationMs = 0.0;
    int launches = 0;
};
struct KernelTraceSummary {
    std::array<double, kBucketCount> bucketMs{};
    std::array<int, kBucketCount> launches{};
    double busyMs = 0.0;
    int unknownKernels = 0;
    std::vector<KernelShare> kernels;
    // Every kernel run, in the order recorded, its bucket field naming timelineNames[bucket] (the
    // display name): for stepSequence (StepAttribution.h), which needs the step count only the
    // caller knows.
    std::vector<TimedKernel> timeline;
    std::vector<std::string> timelineNames;
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual std::string name() const = 0;
    // (Re)allocates the KV cache for `allocation` positions and forgets all context.
    virtual Status resetContext(int allocation) = 0;
    virtual int contextAllocation() const = 0;
    virtual KvCacheType kvCacheType() const = 0;  // its element types (the CPU backend: F32)
    // Streaming-read bandwidth of the memory this backend's weights live in, GB/s (Engine.h).
    virtual Expected<double> measureReadBandwidth() = 0;
    // Whether an uninstrumented single-token forward() replays a captured graph (CUDA).
    virtual bool graphActive() const { return false; }
    // Runs tokens at positions [startPosition, startPosition + tokens.size()). Positions must
    // continue the context (startPosition == the number of positions already run). Writes the
    // logits of every position when `allPositions`, else only of the last, row-major into `logits`.
    // Adds the time of each bucket to `stats` (which may be null).
    virtual Status forward(std::span<const std::int32_t> tokens, int startPosition, bool allPositions,
                           std::vector<float>& logits, StepStats* stats) = 0;

    // One decode step's logits (the token at startPosition; forward() with allPositions false) in
    // memory the backend owns, valid until the next call on this backend. The CUDA backend copies
    // them into page-locked memory: a faster copy than into pageable memory and none on the host
    // afterwards. This default runs forward() into a buffer of its own.
    virtual Expected<std::span<const float>> decodeLogits(std::int32_t token, int startPosition, StepStats* stats) {
        GEMMA_RETURN_IF_ERROR(forward(std::span<const std::int32_t>(&token, 1), startPosition, false, decodeLogits_, stats));
        return std::span<const float>(decodeLogits_);
    }

    // One decode step's `count` best logits in Sampler::sampleFromBest's order (Sampler::bestOf:
    // larger logit first, then lower id; NaN as -inf, -0 as +0), min(count, vocab) of them, in
    // memory the backend owns, valid until the next call on this backend. Sampling with top-k
    // (Sampler::samplesFromBest) needs no more than these. This default selects on the host from
    // decodeLogits(); the CUDA backend selects on the device (kernels/cuda/TopK.cu) and copies
    // count × 8 bytes instead of the row.
    virtual Expected<std::span<const RankedLogit>> decodeBest(std::int32_t token, int startPosition, int count, StepStats* stats) {
        auto row = decodeLogits(token, startPosition, stats);
        if (!row) return row.status();
        Sampler::bestOf(*row, count, decodeBest_);
        return std::span<const RankedLogit>(decodeBest_);
    }

    // Greedy decoding without logits on the host: step i runs, at startPosition + i, `token` (step
    // 0) or the id step i − 1 chose, and hands its choice (Sampler::argmax of the step's logits:
    // the lowest id wins ties, NaN never wins) to onToken with the step's uninstrumented stats
    // (wall time since the previous id arrived). onToken returns false to stop; at most maxSteps
    // steps are accepted. A backend may have run one step past the last accepted one (CUDA keeps
    // the next step queued so the GPU never waits on the host): that step's KV write lies past
    // the context, which ends after the last accepted step, and is rewritten before it is read.
    // This default runs forward() and a host argmax per step; the CUDA backend chooses on the
    // device and chains the steps there (CudaBackend.cpp).
    using GreedyCallback = std::function<bool(std::int32_t id, const StepStats& step)>;
    virtual Status decodeGreedy(std::int32_t token, int startPosition, int maxSteps, const GreedyCallback& onToken) {
        if (maxSteps < 1) return {ErrorCode::InvalidArgument, "greedy decoding needs at least one step"};
        std::vector<float> logits;
        std::int32_t next = token;
        auto last = std::chrono::steady_clock::now();
        for (int i = 0; i < maxSteps; ++i) {
            GEMMA_RETURN_IF_ERROR(forward(std::span<const std::int32_t>(&next, 1), startPosition + i, false, logits, nullptr));
            next = Sampler::argmax(logits);
            const auto now = std::chrono::steady_clock::now();
            StepStats step;
            step.position = startPosition + i;
            step.wallMs = std::chrono::duration<double, std::milli>(now - last).count();
            last = now;
            if (!onToken(next, step)) break;
        }
        return Status::ok();
    }

    // Kernel timelines of plain (graph-replayed, programmatically overlapped) steps, from the
    // GPU's own timestamps (CUDA: CUPTI, KernelTrace.h). beginKernelTrace() starts recording after
    // the queued work is done; endKernelTrace() waits for the queued work, stops recording and
    // sums every kernel the backend ran in between (StepAttribution.h: each instant charged once,
    // to the earliest-started kernel running). Unsupported where the backend cannot trace (the
    // CPU backend; CUDA without libcupti), with the reason.
    virtual Status beginKernelTrace() { return {ErrorCode::Unsupported, "this backend has no kernel timeline"}; }
    virtual Expected<KernelTraceSummary> endKernelTrace() { return Status{ErrorCode::Unsupported, "this backend has no kernel timeline"}; }

private:
    std::vector<float> decodeLogits_;
    std::vector<RankedLogit> decodeBest_;
};

// The preconditions every backend's forward() checks first (one place, one set of messages).
inline Status checkForwardRequest(std::span<const std::int32_t> tokens, int startPosition, int position, int allocation,
                                  int vocabSize) {
    if (allocation == 0) return {ErrorCode::Internal, "forward() before resetContext()"};
    if (startPosition != position) return {ErrorCode::Internal, "positions must continue the context"};
    if (tokens.empty()) return {ErrorCode::InvalidArgument, "no tokens to run"};
    if (static_cast<std::int64_t>(startPosition) + static_cast<std::int64_t>(tokens.size()) > allocation) {
        return {ErrorCode::InvalidArgument, "the context allocation of " + std::to_string(allocation) + " positions is full"};
    }
    for (auto id : tokens) {
        if (id < 0 || id >= vocabSize) {
            return {ErrorCode::InvalidArgument,
                    "token id " + std::to_string(id) + " is outside the vocabulary (0.." + std::to_string(vocabSize - 1) + ")"};
        }
    }
    return Status::ok();
}

}  // namespace gemma
