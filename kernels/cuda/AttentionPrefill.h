// Flash-attention prefill: many consecutive query rows of one sequence per launch, on tensor cores
// (mma.sync m16n8k16, FP16 operands, FP32 accumulation). See AttentionPrefill.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "KernelStatus.h"
#include "KvCache.h"
#include "NormRopeCache.h"

namespace gemma::cuda {

struct AttentionPrefillParams {
    // q: [rows][qStride] fp32 = qHeads × headDim, already normed and rotated. Every element the
    // kernel reads must satisfy |x| < 65504 (it is rounded to fp16; RMS-normed values are).
    const float* q = nullptr;
    std::int64_t qStride = 0;  // even, >= qHeads·headDim
    // Caches [capacity][kvHeads][headDim] of kvDtype; position p in slot p % capacity. They hold
    // the keys/values of every position <= the last row's position (the chunk's own K/V written
    // before this launch). Values are rounded to fp16 on the way in: |x| < 65504.
    const void* kCache = nullptr;
    const void* vCache = nullptr;
    KvDtype kvDtype = KvDtype::BF16;
    std::int64_t capacity = 0;
    int qHeads = 0;
    int kvHeads = 0;   // qHeads % kvHeads == 0; query head h reads kv head h / (qHeads/kvHeads)
    int headDim = 0;   // 32, 64, 128, 256 or 512
    // Device [rows]: row r is the query at absolute position positions[r] (0 <= p < 2^31 − 64).
    // Keys attended by row r: positions [max(0, p + 1 − window, p + 1 − capacity), p]
    // (window <= 0: no window). The engine passes consecutive positions start..start+rows−1;
    // see AttentionPrefill.cu for what the kernel reads when they are not consecutive.
    const int* positions = nullptr;
    int rows = 0;
    int window = 0;
    float scale = 1.0f;    // multiplies q·k (Gemma 4: 1.0); no softcap
    float* out = nullptr;  // [rows][outStride] fp32 = qHeads × headDim; columns past that untouched
    std::int64_t outStride = 0;  // even, >= qHeads·headDim
    // Key splits (Flash-Decoding) for one query row, the decode step's full layers
    // (AttentionDecodeParams::tensorCores): splits > 1 cuts the row's band into `splits` pieces of
    // whole key tiles, laid out from the band's start, one block per piece (grid z), and each block
    // writes its piece's unnormalised partials instead of out (out is not written):
    //   partO  [qHeads][splits][headDim]  Σ_t exp(s_t − m)·V_t over the piece,
    //   partML [qHeads][splits][2]        (m, l) = (max_t s_t, Σ_t exp(s_t − m)), natural units,
    // s_t = scale·q·k_t; a piece with no keys (they come last) writes (−inf, 0) and no O. This is
    // AttentionDecode.cu's partial layout: its merge kernel combines them. Requires rows == 1,
    // splits <= 65535, partO and partML 8-byte aligned.
    int splits = 1;
    float* partO = nullptr;
    float* partML = nullptr;
    // sm_90+: programmatic dependent launch (the kernel waits for the kernel before it before
    // reading anything). Ignored elsewhere.
    bool programmaticLaunch = false;
    // sm_90+: the K/V tiles' raw ring filled by bulk copies (cp.async.bulk on mbarriers, issued by
    // one warp) instead of every thread's 16-byte cp.async; the same bytes, so the same bits
    // (docs/PERFORMANCE.md version 31 step 4; version 32: +1.2 % at a 32K depth on the H200, as the
    // decode's pieces; version 33: 2 % slower in 2048-row prefill chunks, where the engine turns it
    // off). Ignored elsewhere.
    bool bulkCopies = true;
    // The q/k/v norm + RoPE and the cache write inside the launch, for one decode row (rows == 1;
    // AttentionDecodeParams::fuseNormRope with tensorCores, AttentionPrefill.cu "Fused norm +
    // RoPE"): q is then the raw projection (normRope.q must equal it; nothing writes q), every
    // block normalises and rotates its tile's query heads from it, and the blocks whose piece holds
    // the query's position normalise and rotate that position's K, normalise its V and write both
    // into the cache (normRope.k null: a KV-shared layer, nothing written) before they read the
    // cache. normRope's caches, dtype, capacity, heads, head dim and positions must be this
    // launch's (normRopeDescribes). A separate instance of the kernel: the prefill's is unchanged.
    bool fuseNormRope = false;
    QkvNormRopeParams normRope;
};

// Whether r describes the norm + RoPE fused into a launch of p (AttentionPrefillParams::
// fuseNormRope): the same raw q, positions, heads, head dim and, when r writes the cache, the same
// caches, dtype and capacity; one row.
bool normRopeDescribes(const QkvNormRopeParams& r, const AttentionPrefillParams& p);

// The launch shape the launcher picks for these parameters on the current device (information
// for harnesses and benchmarks; the launcher computes the same itself).
struct AttentionPrefillPlan {
    int threads = 0;         // per block
    int rowsPerBlock = 0;    // packed (query row, head-in-group) pairs per block
    int keysPerTile = 0;
    int rawStages = 0;       // staging depth, in K-or-V tiles
    bool bulkCopies = false; // the raw ring filled by bulk copies (AttentionPrefillParams::bulkCopies on sm_90+)
    std::size_t sharedBytes = 0;
    int blocksPerSm = 0;     // occupancy at that shared-memory size (registers included)
    unsigned gridX = 0;      // kv heads
    unsigned gridY = 0;      // query tiles
};
KernelStatus attentionPrefillPlan(const AttentionPrefillParams& params, AttentionPrefillPlan& plan);

// One launch; no workspace. out rows are written only for r < rows, columns [0, qHeads·headDim)
// (with splits > 1: the partials instead).
KernelStatus launchAttentionPrefill(const AttentionPrefillParams& params, cudaStream_t stream);

}  // namespace gemma::cuda
