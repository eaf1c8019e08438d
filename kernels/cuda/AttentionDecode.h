// Flash-Decoding attention for one new query row per sequence position. See AttentionDecode.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "AttentionPrefill.h"
#include "KernelStatus.h"
#include "KvCache.h"
#include "NormRopeCache.h"

namespace gemma::cuda {

struct AttentionDecodeParams {
    // q: [rows][qStride] fp32 = qHeads × headDim, already normed and rotated.
    const float* q = nullptr;
    std::int64_t qStride = 0;
    // Caches [capacity][kvHeads][headDim] of kvDtype; position p in slot p % capacity.
    const void* kCache = nullptr;
    const void* vCache = nullptr;
    KvDtype kvDtype = KvDtype::BF16;
    std::int64_t capacity = 0;
    std::int64_t cacheBatchStride = 0;  // elements between row caches; 0 = all rows share one
    int qHeads = 0;
    int kvHeads = 0;   // qHeads % kvHeads == 0; query head h reads kv head h / (qHeads/kvHeads)
    int headDim = 0;   // 128, 256 or 512
    // Device [rows]: the query's absolute position p. Keys attended: positions
    // [max(0, p + 1 − window, p + 1 − capacity), p] (window <= 0: no window).
    const int* positions = nullptr;
    int window = 0;
    // The longest live band any launch of this shape will see (e.g. min(window, capacity)); sizes
    // the split count and the workspace only: any band length is computed correctly.
    std::int64_t maxBand = 0;
    float scale = 1.0f;  // Gemma 4: 1.0, no softcap
    float* out = nullptr;  // [rows][outStride] fp32 = qHeads × headDim
    std::int64_t outStride = 0;
    int rows = 1;
    // Scratch: attentionDecodeWorkspaceBytes() bytes, 16-byte aligned: 1 KB of merge counters
    // (fuseMerge; zero before the first launch, every launch leaves them zero), then the (O, m, l)
    // partials. Initialised memory (any values, e.g. zeroed once): the merge reads the first
    // splits' O before it knows which of them the band reached, and uses only those it reached.
    void* workspace = nullptr;
    std::size_t workspaceBytes = 0;
    int splits = 0;  // key-sequence splits per (row, kv head); 0 = choose from the device
    // sm_90+: programmatic dependent launch of both kernels (each may start during the kernel
    // before it and waits for it before its first global access). Ignored elsewhere.
    bool programmaticLaunch = false;

    // Fusions for one decode row (rows == 1), each optional (AttentionDecode.cu, "Fusions"):
    // fuseNormRope: launchQkvNormRope's work runs inside the split kernel (the CUDA-core one, the
    // cluster form's, or with tensorCores the pieces: AttentionPrefill.cu). q is then the raw
    // projection (normRope.q must equal it; normRope.qOut is not written); every block normalises
    // and rotates its group's query heads into shared memory, and the block whose piece holds the
    // query's position writes that position's K and V (normRope.k null: a KV-shared layer,
    // nothing written) before it reads the cache. normRope's caches, dtype, capacity, heads, head
    // dim and positions must be this launch's.
    bool fuseNormRope = false;
    QkvNormRopeParams normRope;
    // fuseMerge: the last split block of each kv head to finish merges its group's partials into
    // out: one launch instead of two (at most 256 kv heads). Serial over the group's heads: worth
    // it for small groups only (kFusedAttentionMaxGroup).
    bool fuseMerge = false;

    // Tensor cores for one decode row (rows == 1, not with fuseMerge; the CUDA backend sets it for
    // its full layers, OpenOptions::tensorCoreAttention): the split kernel is the prefill's
    // flash-attention kernel over pieces of the band (AttentionPrefillParams::splits: mma.sync with
    // q, K, V and P rounded to fp16, fp32 softmax and accumulation; AttentionPrefill.cu states the
    // error, ~1e-3 of max|out|), then the same merge. The CUDA-core split kernel is issue-bound
    // on large groups at depth (a 12b full layer, 16 heads on one kv head, d 512: 160 µs at 32K
    // keys on an H200, docs/PERFORMANCE.md version 7); the tensor-core pieces read the band at
    // the memory's pace. Requires |q|, |K|, |V| < 65504. With fuseNormRope the pieces do the norm
    // + RoPE and the cache write themselves (AttentionPrefillParams::fuseNormRope; q, K and V
    // rounded to fp16 as without it: meant to give the same bits as launchQkvNormRope before the
    // pieces, which test_attention checks).
    bool tensorCores = false;
    // With tensorCores: AttentionPrefillParams::bulkCopies (the pieces' K/V tiles by bulk copies on
    // sm_90+; the same bits either way).
    bool bulkCopies = true;

    // Thread-block clusters for one decode row (rows == 1, sm_90+, at most
    // kClusterAttentionMaxGroup query heads per kv head, one cache (cacheBatchStride 0); not with
    // fuseMerge or tensorCores):
    // one launch, one cluster of up to 16 blocks per kv head, each block a piece of the band, the
    // pieces merged through distributed shared memory (AttentionDecode.cu, "cluster form"); with
    // fuseNormRope the norm + RoPE and the cache write as in the fused split kernel. Fp32
    // throughout (another summation order than the split kernel: not bit-identical, within fp32
    // rounding). The cluster size is `splits` when given (a power of two <= 16 dividing headDim),
    // else the largest whose clusters are all resident at once; no workspace is read. Unsupported
    // below sm_90. Made for bands of at most a window: every block reads band / C keys in order.
    bool cluster = false;
    // Cluster form only: read positions[0] and load the first chunk of the band's earlier
    // positions before waiting for the kernel before (programmatic launch), so the loads overlap
    // its tail. Correct only where the band's earlier positions and `positions` were written
    // before the previous kernel's own predecessors could still run: by an earlier decode step
    // separated by a graph launch or a host copy (the CUDA backend's decode steps). The current
    // position's rows are loaded after the wait.
    bool prefetchBand = false;
    // Cluster form: 2 runs each kv head's query group as two clusters of half the group (query
    // heads split, the whole band read by both; head dim 256 and groups of 2, 4 or 8 only, else
    // refused), so a group of 8 (e2b) runs the kernel unrolled for 4 with q in registers and its
    // norm + RoPE in one round of warps; only the first cluster writes the current K and V to the
    // cache. The same arithmetic per head (within fp32 rounding of the split kernel, as the
    // default). 0 or 1: one cluster per kv head. The CUDA backend splits where it pays
    // (clusterHeadSplitPays; docs/PERFORMANCE.md version 19).
    int clusterHeadSplit = 1;
};

// Whether the cluster form can split a group of `group` query heads per kv head over two clusters
// (AttentionDecodeParams::clusterHeadSplit 2): head dim 256 and an even group of at most 8, where
// the kernel is instantiated (half the group unrolled for 4).
inline constexpr bool clusterHeadSplitFits(int headDim, int group) { return headDim == 256 && group % 2 == 0 && group <= 8; }
// Where the split is faster on the H200 (docs/PERFORMANCE.md version 19): groups of 4 and 8 (e4b,
// e2b; decode +1 % and +3 %). A group of 2 (12b, 31b) loses: its one cluster per kv head already
// holds q in registers, and the split only reads the band twice (harness: 14.2 → 17.2 µs).
inline constexpr bool clusterHeadSplitPays(int headDim, int group) { return clusterHeadSplitFits(headDim, group) && group >= 4; }
// The cluster form's scores (AttentionDecode.cu, "Scores"; docs/PERFORMANCE.md version 47): keys
// over lanes for a chunk of at least kClusterKeysOverLanesFrom keys where compiled in, warp per key
// otherwise. Version 47's phases (H100, 12b sliding layer, fp16 cache): at ≈ 10 keys per block
// warp per key took 0.56 µs of scores against keys over lanes' 0.74-1.19, at 64 keys 2.16 µs
// against 0.87 (≈ 0.25 µs per key per warp against a nearly flat cost).
inline constexpr int kClusterKeysOverLanesFrom = 32;
// Where keys over lanes is compiled in: one cluster per kv head at head dim 256, the 12b's and the
// 31b's sliding layers, where version 47 measured it (depth 32768: 12b +0.86 %, 31b +1.6 %; short
// contexts tied). Elsewhere it loses: in the head split's instance alone (the e4b's and e2b's
// sliding layers) the e4b lost 0.8-0.9 % at the short context, where its chunks are too short for
// the form to run (version 48 step 3), so those instances, and head dim 512's (not measured alone),
// keep the warp-per-key form, with q in registers.
// The two forms sum a score's products in different orders, so the head split gives one cluster
// per kv head's bits only where every block's piece of the band is shorter than
// kClusterKeysOverLanesFrom (a chunk holds at least that many keys at head dim 256).
inline constexpr bool clusterKeysOverLanes(int headDim, bool headSplit) { return headDim == 256 && !headSplit; }
// The band (keys) up to which a full layer's decode attention pieces are split as for a cache of
// this many keys rather than the cache's capacity (OpenOptions::fullAttentionBandKeys's default).
// A 4096-key cache's split count (64 pieces) is what the 12b's full layers run best at short
// bands; at 32K a capacity-sized grid launches 132 pieces, most of them empty, and decodes
// 1.7-2.0 % slower at positions 100-227 (H200, docs/PERFORMANCE.md version 21 step 1).
inline constexpr int kFullAttentionBandKeys = 4096;

// The largest query-heads-per-KV-head group the decode step fuses (AttentionDecode.cu, "Fusions").
inline constexpr int kFusedAttentionMaxGroup = 4;
// The largest group the cluster form takes (AttentionDecodeParams::cluster): its merge is
// parallel over the group's heads, so it is not bound by kFusedAttentionMaxGroup.
inline constexpr int kClusterAttentionMaxGroup = 8;

// Splits the launcher will use for these parameters (depends on the device's SM count; with
// `cluster`, the cluster size, 0 if none launches).
int attentionDecodeSplits(const AttentionDecodeParams& params);
std::size_t attentionDecodeWorkspaceBytes(const AttentionDecodeParams& params);
// The same attention as the prefill kernel's parameters (its fields copied; one launch, splits 1):
// the CUDA backend's prefill chunks, and the tensor-core form's pieces.
AttentionPrefillParams attentionPrefillForm(const AttentionDecodeParams& params);
// Two launches: the split kernel (unnormalised partials), then the merge kernel; one with fuseMerge.
KernelStatus launchAttentionDecode(const AttentionDecodeParams& params, cudaStream_t stream);

}  // namespace gemma::cuda
