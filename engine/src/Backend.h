// What the engine asks of a compute backend (CPU reference, CUDA). A backend owns the KV cache
// and runs the forward pass of GEMMA4.md §2.10 over a run of consecutive positions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gemma/Engine.h"
#include "gemma/Status.h"

namespace gemma {

// Prefill rows per pass of the CPU backend and of the CUDA backend's matvec path. Sliding-window
// rings hold window + chunk − 1 slots so a chunk's keys never overwrite keys its own earlier queries
// still need (ARCHITECTURE.md).
inline constexpr int kPrefillChunk = 32;
// Prefill rows per pass of the CUDA backend's GEMM path (cuBLASLt): long enough that the per-layer
// FP4 → FP16 dequantization (~12 ms for all of `12b` on an H200) is amortized over many rows; the
// sliding rings grow by as many slots (Backend.h kvCacheSlots).
inline constexpr int kGemmPrefillChunk = 1024;

// KV slots a layer's cache holds for an allocation, with prefill chunks of `chunk` rows.
inline std::int64_t kvCacheSlots(bool sliding, int slidingWindow, int allocation, int chunk = kPrefillChunk) {
    return sliding ? std::min<std::int64_t>(allocation, slidingWindow + chunk - 1) : allocation;
}

class Backend {
public:
    virtual ~Backend() = default;
    virtual std::string name() const = 0;
    // (Re)allocates the KV cache for `allocation` positions and forgets all context.
    virtual Status resetContext(int allocation) = 0;
    virtual int contextAllocation() const = 0;
    virtual int kvBytesPerElement() const = 0;  // 4 (f32) or 2 (bf16, CUDA only)
    // Streaming-read bandwidth of the memory this backend's weights live in, GB/s (Engine.h).
    virtual Expected<double> measureReadBandwidth() = 0;
    // Runs tokens at positions [startPosition, startPosition + tokens.size()). Positions must
    // continue the context (startPosition == the number of positions already run). Writes the
    // logits of every position when `allPositions`, else only of the last, row-major into `logits`.
    // Adds the time of each bucket to `stats` (which may be null).
    virtual Status forward(std::span<const std::int32_t> tokens, int startPosition, bool allPositions,
                           std::vector<float>& logits, StepStats* stats) = 0;
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
