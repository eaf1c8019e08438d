// Decode attention (Flash-Decoding) over a KV cache, one code path for sliding rings, full
// layers, MQA and GQA:
//   for each row r, query head h (kv head j = h / g, g = qHeads / kvHeads), keys at positions
//   P = [start, p], start = max(0, p + 1 − window (if window > 0), p + 1 − capacity):
//   out[r][h] = Σ_{t∈P} softmax_t(scale · q[r][h]·K[t][j]) · V[t][j]      (fp32 softmax)
// K/V of position t live in slot t % capacity; slots outside the live band are never read.
//
// Split kernel: grid (splits, kvHeads, rows). Each block takes one contiguous piece of the band
// (equal pieces, rounded to whole tiles), loads K/V tiles of T keys into shared memory with
// cp.async, double-buffered (tile i+1 in flight while tile i is used), and serves all g query
// heads of its kv head from the same tiles. It keeps the running max m and sum l per head and an
// unnormalised O = Σ exp(s − m)·V, written as partials (O, m, l). Keys past the band end inside the
// last tile are zero-filled by cp.async (the cache is not read) and get probability 0.
// Merge kernel: grid (qHeads, rows, headDim / 128): M = max m_s, out = Σ e^{m_s−M} O_s / Σ e^{m_s−M} l_s.
// Splits that received no keys write only m = −inf, l = 0 (no O) and the merge sums the O of the
// others only (they form a prefix).
//
// Tile: 8 KB of K per stage (T = 8192 / (headDim · element bytes) keys), K and V, 2 stages, rows
// padded by 16 bytes against bank conflicts; q of the group staged in shared memory (fp32).
// Scores: thread items (4 heads × 1 key) × S dim-slices reduced by shuffles; PV: each thread owns
// 8 consecutive dims of up to 8 heads.
//
// Fusions (one decode row, AttentionDecodeParams::fuseNormRope / fuseMerge), so that a layer's
// attention is one launch instead of three (q/k/v norm + RoPE, split, merge; docs/PERFORMANCE.md
// version 6): with fuseNormRope every split block normalises and rotates its group's g query heads
// from the raw projection into its shared q (one warp per head, HeadNormRope.h: the same bits as
// NormRopeCache.cu), and the block whose piece ends at the query's position first normalises and
// rotates that position's K and normalises its V (warps 0 and 1), writes both into the cache slot
// and fences before its tile loads read the slot; no other block reads that slot (for a ring it
// held a position outside every piece). With fuseMerge each block, after writing its partials,
// fences and counts itself in on a per-(row, kv head) counter; the last one merges the group's g
// heads (the merge kernel's code and thread mapping, the same bits) and resets the counter. The
// last block's merge is serial over the group's heads and reads every split of each, so the
// fusion pays for small groups only: a 16-head MQA layer with 256 splits made one block read 8 MB
// (H200: 74 µs per layer instead of 27, docs/PERFORMANCE.md version 6); the CUDA backend fuses
// layers with at most kFusedAttentionMaxGroup query heads per KV head.
//
// Tensor-core form (AttentionDecodeParams::tensorCores, one row, no fused merge): the pieces run
// on the prefill's flash-attention kernel (AttentionPrefill.cu, "Key splits": fp16 operands, fp32
// softmax), which writes the same partials; the merge kernel is unchanged. Its pieces are whole
// tiles of 16–64 keys (the CUDA-core kernel's tile is 4 keys at d 512 with an fp32 cache), so a
// full layer at depth streams its band instead of waiting on a chain of small tiles. With
// fuseNormRope the pieces normalise and rotate q and k, normalise v and write the cache row
// themselves (AttentionPrefill.cu, "Fused norm + RoPE").
//
// Layouts: q/out [rows][stride] fp32, head h at h·headDim; caches [capacity][kvHeads][headDim]
// (fp32 or bf16 bits), row r's cache at r·cacheBatchStride elements.
// Preconditions (checked): headDim ∈ {32, 64, 128, 256, 512} (32 and 64: the tiny test and demo
// models); qHeads % kvHeads == 0; group size
// g <= 8192 / headDim (16 at 512, 32 at 256, 64 at 128); the shared memory fits the device;
// q, caches and workspace 16-byte aligned, (cacheBatchStride · element bytes) % 16 == 0.
// Not checkable on the host: positions[r] >= 0 (a negative position yields NaN output).
// Programmatic launch (sm_90+, when asked): both kernels wait for the kernel before them first.
#include "AttentionDecode.h"

#include <cooperative_groups.h>

#include <cmath>

#include "AttentionPrefill.h"
#include "CudaCommon.h"
#include "HeadNormRope.h"
#include "PhaseClock.h"

namespace gemma::cuda {
namespace attndetail {

constexpr int kThreads = 128;
constexpr int kTileKBytes = 8192;
constexpr int kMaxHeadsPerThread = 8;
constexpr int kMaxSplits = 512;
constexpr int kMaxBlocksPerSm = 4;    // head dims >= 128: the split kernel's launch bounds allow 4 per SM
constexpr int kMergeDims = kThreads;  // dims per block of the merge kernel (one per thread)
constexpr std::size_t kCounterBytes = 1024;  // merge counters at the workspace's start
constexpr int kMaxCounters = static_cast<int>(kCounterBytes / sizeof(int));

template <int D, typename KvT>
struct Shape {
    static constexpr int kElemBytes = static_cast<int>(sizeof(KvT));
    static constexpr int kRowBytes = D * kElemBytes;
    static constexpr int kPitch = kRowBytes + 16;
    static constexpr int kTile = kTileKBytes / kRowBytes;  // keys per tile
    static constexpr int kChunks16 = kRowBytes / 16;       // 16-byte pieces per key row
    static constexpr int kChunks8 = D / 8;                 // 8-element pieces per key row
    static constexpr int kHeadSets = kThreads / kChunks8;  // PV: threads per dim piece
    static constexpr int kMaxGroup = kHeadSets * kMaxHeadsPerThread;
    static constexpr int kStageBytes = 2 * kTile * kPitch;  // K and V
    static_assert(kTile >= 1 && kHeadSets >= 1, "tile shape");
};

__host__ __device__ inline std::size_t attentionSmemBytes(int d, int elemBytes, int group) {
    const int rowBytes = d * elemBytes;
    const int tile = kTileKBytes / rowBytes;
    const std::size_t tiles = 2u * 2u * static_cast<std::size_t>(tile) * (rowBytes + 16);
    return tiles + sizeof(float) * (static_cast<std::size_t>(group) * d +
                                    static_cast<std::size_t>(group) * tile + 3u * group);
}

// ---- device helpers ------------------------------------------------------------------------------
// 8 elements as floats from the 16-byte columns at `first` and, for fp32 only, `second`.
template <typename KvT>
__device__ __forceinline__ void load8At(const unsigned char* first, const unsigned char* second, float (&v)[8]) {
    if constexpr (sizeof(KvT) == 4) {
        const float4 a = *reinterpret_cast<const float4*>(first);
        const float4 b = *reinterpret_cast<const float4*>(second);
        v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
        v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    } else {
        const uint4 u = *reinterpret_cast<const uint4*>(first);
        const std::uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            const float2 f = kvPairToFloat2<KvT>(words[w]);
            v[2 * w] = f.x;
            v[2 * w + 1] = f.y;
        }
    }
}
// Piece `piece` (elements [8·piece, 8·piece + 8)) of a plain row.
template <typename KvT>
__device__ __forceinline__ void load8(const unsigned char* row, int piece, float (&v)[8]) {
    const unsigned char* first = row + piece * 8 * static_cast<int>(sizeof(KvT));
    load8At<KvT>(first, first + 16, v);
}

// Merges dims [dimBegin, dimEnd) of query head h of `row` from its splits' partials into out.
// Every thread of the block (kThreads of them) calls it (block-wide barriers). Partials are read
// through L2 (__ldcg): in the fused form other blocks of the same launch wrote them. Each output
// element's arithmetic depends on its dim and the splits only (not on the thread or the dim
// range), so the fused merge (all dims in one block) and the merge kernel (dims spread over
// blocks) give the same bits.
// `weights` (kMaxSplits floats) and `scratch` (32 floats) are shared memory.
// Every O partial below split kMergePrefetch is read (live or not), so the partials of a split the
// band does not reach must be readable memory (the engine's workspace is zeroed once; the values
// of an empty split are never used).
constexpr int kMergePrefetch = 4;
constexpr int kMergeSplitsPerThread = kMaxSplits / kThreads;
static_assert(kMaxSplits % kThreads == 0, "a thread holds the (m, l) of at most kMergeSplitsPerThread splits");
__device__ __forceinline__ void mergeHead(const float* __restrict__ partO, const float* __restrict__ partML, int splits,
                                          int qHeads, int headDim, int h, int row, float* __restrict__ out,
                                          std::int64_t outStride, float* weights, float* scratch, int dimBegin,
                                          int dimEnd) {
    // Latency-bound (a decode step merges a few dozen splits per head): every split's (m, l) is
    // read by its own thread, the maximum is a block reduction, and the O sum keeps four
    // independent accumulators so four partial loads are in flight per thread. (The first
    // version walked the splits serially in every thread: ~8 µs per launch on an H200.)
    // One L2 round trip before the reductions: each thread's (m, l) pairs and, for its first dim,
    // the O of the first kMergePrefetch splits (a short band's live splits: 2-4 of a 12b full
    // layer's 64 at positions 100-227). Until version 50 the pairs were read twice and O after
    // both reductions: three round trips in a row.
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const std::int64_t base = (static_cast<std::int64_t>(row) * qHeads + h) * splits;
    const float* o = partO + base * headDim;
    const int firstDim = dimBegin + static_cast<int>(threadIdx.x);
    float ahead[kMergePrefetch];
#pragma unroll
    for (int k = 0; k < kMergePrefetch; ++k)
        ahead[k] = firstDim < dimEnd && k < splits ? __ldcg(o + static_cast<std::int64_t>(k) * headDim + firstDim) : 0.0f;
    float m[kMergeSplitsPerThread], lSplit[kMergeSplitsPerThread];
#pragma unroll
    for (int i = 0; i < kMergeSplitsPerThread; ++i) {
        const int s = static_cast<int>(threadIdx.x) + i * kThreads;
        m[i] = s < splits ? __ldcg(partML + (base + s) * 2) : -INFINITY;
        lSplit[i] = s < splits ? __ldcg(partML + (base + s) * 2 + 1) : 0.0f;
    }
    // Splits that received keys have m > -inf and form a prefix (pieces are laid out from the band's
    // start); only their O is used. The split count is sized for the longest band, so at a short
    // one most splits are empty: a 12b full layer at position ~160 has 21 of 256 (Nsight Compute:
    // this kernel took 89 µs per full layer when it read all 256, docs/PERFORMANCE.md version 6).
    float mLocal = -INFINITY;
    float live = 0.0f;
#pragma unroll
    for (int i = 0; i < kMergeSplitsPerThread; ++i) {
        mLocal = fmaxf(mLocal, m[i]);
        live += m[i] > -INFINITY ? 1.0f : 0.0f;
    }
    mLocal = warpMax(mLocal);
    live = warpSum(live);
    if (lane == 0) {
        scratch[warp] = mLocal;
        scratch[16 + warp] = live;
    }
    __syncthreads();
    float mMax = -INFINITY;
    float liveSplits = 0.0f;
    for (int w = 0; w < (kThreads >> 5); ++w) {
        mMax = fmaxf(mMax, scratch[w]);
        liveSplits += scratch[16 + w];
    }
    const int active = static_cast<int>(liveSplits);
    float lPart = 0.0f;
#pragma unroll
    for (int i = 0; i < kMergeSplitsPerThread; ++i) {
        const int s = static_cast<int>(threadIdx.x) + i * kThreads;
        if (s >= splits) break;
        // An empty split has m = -inf: exp(-inf) = 0. All splits empty cannot happen (position p
        // itself is always in the band).
        const float w = expf(m[i] - mMax);
        weights[s] = w;
        lPart += w * lSplit[i];
    }
    const float l = blockSum(lPart, scratch);  // its barriers also publish `weights`
    const float invL = 1.0f / l;
    for (int d = firstDim; d < dimEnd; d += kThreads) {
        // Split k < kMergePrefetch of the first dim is already in `ahead`.
        const bool first = d == firstDim;
        const auto at = [&](int s) { return __ldcg(o + static_cast<std::int64_t>(s) * headDim + d); };
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        int s = 0;
        // 16 loads in flight (at depth every split is live: a 12b full layer at 32K merged 256
        // splits at 4 loads a round trip in 89 µs, Nsight Compute, version 7), the same fma order
        // per accumulator as the 4-split steps below.
        for (; s + 16 <= active; s += 16) {
            float v[16];
#pragma unroll
            for (int k = 0; k < 16; ++k) v[k] = k < kMergePrefetch && first && s == 0 ? ahead[k] : at(s + k);
#pragma unroll
            for (int k = 0; k < 16; ++k) acc[k & 3] = fmaf(weights[s + k], v[k], acc[k & 3]);
        }
        for (; s + 4 <= active; s += 4) {
#pragma unroll
            for (int u = 0; u < 4; ++u) acc[u] = fmaf(weights[s + u], first && s == 0 ? ahead[u] : at(s + u), acc[u]);
        }
        // At most three left.
#pragma unroll
        for (int k = 0; k < 3; ++k) {
            if (s + k >= active) break;
            acc[0] = fmaf(weights[s + k], first && s == 0 ? ahead[k] : at(s + k), acc[0]);
        }
        out[row * outStride + static_cast<std::int64_t>(h) * headDim + d] =
            ((acc[0] + acc[1]) + (acc[2] + acc[3])) * invL;
    }
    __syncthreads();  // weights and scratch are reused by the next head
}

// ---- kernels -----------------------------------------------------------------------------------------
// Registers bounded for kMaxBlocksPerSm resident blocks at head dims >= 128 (chooseSplits sizes
// the grid for that many; unbounded, the fused merge's loads took the kernel to 145 registers,
// 3 blocks per SM).
template <int D, typename KvT>
__global__ void __launch_bounds__(kThreads, D >= 128 ? kMaxBlocksPerSm : 1) attentionSplitKernel(AttentionDecodeParams p,
                                                                  float* __restrict__ partO,
                                                                  float* __restrict__ partML,
                                                                  int* __restrict__ counters) {
    using Sh = Shape<D, KvT>;
    constexpr int T = Sh::kTile;
    extern __shared__ float4 smemRaw[];
    unsigned char* smem = reinterpret_cast<unsigned char*>(smemRaw);
    const int g = p.qHeads / p.kvHeads;
    float* qs = reinterpret_cast<float*>(smem + 2 * Sh::kStageBytes);
    float* sc = qs + g * D;
    float* mRow = sc + g * T;
    float* lRow = mRow + g;
    float* alphaRow = lRow + g;

    const int tid = threadIdx.x;
    const int split = blockIdx.x;
    const int splits = gridDim.x;
    const int kvh = blockIdx.y;
    const int row = blockIdx.z;
    gridDependencyWait();      // q and this step's K/V come from the kernel before (PDL)
    allowDependentsToStart();  // the merge kernel may be scheduled now

    // Live band and this block's piece of it.
    const std::int64_t len = static_cast<std::int64_t>(p.positions[row]) + 1;
    std::int64_t start = 0;
    if (p.window > 0 && len - p.window > start) start = len - p.window;
    if (len - p.capacity > start) start = len - p.capacity;
    const std::int64_t n = len - start;
    std::int64_t pieceLen = n > 0 ? (n + splits - 1) / splits : 0;
    pieceLen = (pieceLen + T - 1) / T * T;
    const std::int64_t bs = start + split * pieceLen;
    const std::int64_t be = (bs + pieceLen < len) ? bs + pieceLen : len;
    const int nTiles = be > bs ? static_cast<int>((be - bs + T - 1) / T) : 0;

    const unsigned char* kBase = static_cast<const unsigned char*>(p.kCache) +
                                 (row * p.cacheBatchStride + static_cast<std::int64_t>(kvh) * D) * Sh::kElemBytes;
    const unsigned char* vBase = static_cast<const unsigned char*>(p.vCache) +
                                 (row * p.cacheBatchStride + static_cast<std::int64_t>(kvh) * D) * Sh::kElemBytes;
    const std::int64_t slotBytes = static_cast<std::int64_t>(p.kvHeads) * Sh::kRowBytes;
    constexpr int kPairs = D / 64 > 0 ? D / 64 : 1;
    const int warp = tid >> 5;

    // Fused norm + RoPE, this step's K and V: written by the block whose piece holds the query's
    // position, before any of its loads can read that slot (block-uniform branch).
    if (p.fuseNormRope && p.normRope.k && len - 1 >= bs && len - 1 < be) {
        const QkvNormRopeParams& r = p.normRope;
        if (warp < 2) {
            const bool key = warp == 0;
            const float* src = (key ? r.k : r.v) + static_cast<std::int64_t>(kvh) * D;
            float a[kPairs], b[kPairs];
            headNormRope(src, key ? r.kNormWeight : nullptr, r.invFreq, r.rotatedPairs, key, static_cast<int>(len - 1), D,
                         r.eps, a, b);
            void* cache = key ? r.kCache : r.vCache;
            const std::int64_t at = ((len - 1) % p.capacity * p.kvHeads + kvh) * D;
            storeHead(D, a, b, [&](int j, float v) { storeKv(cache, p.kvDtype, at + j, v); });
            __threadfence();  // the stores reach L2, where the cp.async tile loads read
        }
        __syncthreads();
    }

    auto issueTile = [&](int tile, int stage) {
        unsigned char* kDst = smem + stage * Sh::kStageBytes;
        unsigned char* vDst = kDst + T * Sh::kPitch;
        const std::int64_t first = bs + static_cast<std::int64_t>(tile) * T;
        for (int idx = tid; idx < T * Sh::kChunks16; idx += kThreads) {
            const int r = idx / Sh::kChunks16;
            const int c = idx % Sh::kChunks16;
            const std::int64_t pos = first + r;
            const bool valid = pos < be;
            const std::int64_t off = (valid ? (pos % p.capacity) * slotBytes : 0) + c * 16;
            cpAsync16(kDst + r * Sh::kPitch + c * 16, kBase + off, valid);
            cpAsync16(vDst + r * Sh::kPitch + c * 16, vBase + off, valid);
        }
        cpAsyncCommit();
    };

    if (nTiles > 0) issueTile(0, 0);

    // Stage q of this kv head's group (fused: normalised and rotated here, one warp per head);
    // init running stats.
    const float* qGroup = p.q + row * p.qStride + static_cast<std::int64_t>(kvh) * g * D;
    if (p.fuseNormRope) {
        const QkvNormRopeParams& r = p.normRope;
        for (int h = warp; nTiles > 0 && h < g; h += kThreads / 32) {  // an empty piece needs no q
            float a[kPairs], b[kPairs];
            headNormRope(qGroup + h * D, r.qNormWeight, r.invFreq, r.rotatedPairs, true, static_cast<int>(len - 1), D, r.eps, a, b);
            storeHead(D, a, b, [&](int j, float v) { qs[h * D + j] = v; });
        }
    } else {
        for (int i = tid; i < g * D / 4; i += kThreads)
            reinterpret_cast<float4*>(qs)[i] = reinterpret_cast<const float4*>(qGroup)[i];
    }
    for (int h = tid; h < g; h += kThreads) {
        mRow[h] = -INFINITY;
        lRow[h] = 0.0f;
    }

    // Score mapping: items (4 heads, 1 key) × S slices.
    const int headBlocks = (g + 3) / 4;
    const int items = headBlocks * T;
    int slices = 1;
    while (slices < 32 && slices * 2 <= Sh::kChunks8 && items * slices * 2 <= kThreads) slices *= 2;
    const int slice = tid % slices;
    const int item = tid / slices;
    const bool itemValid = item < items;
    const int hb = itemValid ? item / T : 0;
    const int kt = itemValid ? item % T : 0;

    // PV mapping: 8 dims × up to kMaxHeadsPerThread heads.
    const int piece = tid % Sh::kChunks8;
    const int headSet = tid / Sh::kChunks8;
    float o[kMaxHeadsPerThread][8];
#pragma unroll
    for (int i = 0; i < kMaxHeadsPerThread; ++i)
#pragma unroll
        for (int k = 0; k < 8; ++k) o[i][k] = 0.0f;

    for (int tile = 0; tile < nTiles; ++tile) {
        const int stage = tile & 1;
        if (tile + 1 < nTiles) {
            issueTile(tile + 1, stage ^ 1);
            cpAsyncWait<1>();
        } else {
            cpAsyncWait<0>();
        }
        __syncthreads();
        const unsigned char* kTile = smem + stage * Sh::kStageBytes;
        const unsigned char* vTile = kTile + T * Sh::kPitch;
        const std::int64_t first = bs + static_cast<std::int64_t>(tile) * T;

        // Scores.
        {
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            const unsigned char* kRow = kTile + kt * Sh::kPitch;
            for (int pc = slice; pc < Sh::kChunks8; pc += slices) {
                float kv[8];
                load8<KvT>(kRow, pc, kv);
#pragma unroll
                for (int hh = 0; hh < 4; ++hh) {
                    const int h = hb * 4 + hh;
                    if (h < g) {
                        const float4 qa = *reinterpret_cast<const float4*>(qs + h * D + pc * 8);
                        const float4 qb = *reinterpret_cast<const float4*>(qs + h * D + pc * 8 + 4);
                        float a = acc[hh];
                        a = fmaf(qa.x, kv[0], a); a = fmaf(qa.y, kv[1], a);
                        a = fmaf(qa.z, kv[2], a); a = fmaf(qa.w, kv[3], a);
                        a = fmaf(qb.x, kv[4], a); a = fmaf(qb.y, kv[5], a);
                        a = fmaf(qb.z, kv[6], a); a = fmaf(qb.w, kv[7], a);
                        acc[hh] = a;
                    }
                }
            }
#pragma unroll
            for (int hh = 0; hh < 4; ++hh)
                for (int off = slices >> 1; off > 0; off >>= 1)
                    acc[hh] += __shfl_xor_sync(0xffffffffu, acc[hh], off);
            if (itemValid && slice == 0) {
                const bool keyValid = first + kt < be;
#pragma unroll
                for (int hh = 0; hh < 4; ++hh) {
                    const int h = hb * 4 + hh;
                    if (h < g) sc[h * T + kt] = keyValid ? acc[hh] * p.scale : -INFINITY;
                }
            }
        }
        __syncthreads();

        // Online softmax per head.
        for (int h = tid; h < g; h += kThreads) {
            const float mOld = mRow[h];
            float tmax = -INFINITY;
#pragma unroll
            for (int t = 0; t < T; ++t) tmax = fmaxf(tmax, sc[h * T + t]);
            const float mNew = fmaxf(mOld, tmax);
            const float alpha = expf(mOld - mNew);
            float sum = 0.0f;
#pragma unroll
            for (int t = 0; t < T; ++t) {
                const float e = expf(sc[h * T + t] - mNew);
                sc[h * T + t] = e;
                sum += e;
            }
            lRow[h] = lRow[h] * alpha + sum;
            mRow[h] = mNew;
            alphaRow[h] = alpha;
        }
        __syncthreads();

        // O = alpha·O + Σ_t p_t V_t.
#pragma unroll
        for (int i = 0; i < kMaxHeadsPerThread; ++i) {
            const int h = headSet + Sh::kHeadSets * i;
            if (h < g) {
                const float a = alphaRow[h];
#pragma unroll
                for (int k = 0; k < 8; ++k) o[i][k] *= a;
            }
        }
#pragma unroll 2
        for (int t = 0; t < T; ++t) {
            float v[8];
            load8<KvT>(vTile + t * Sh::kPitch, piece, v);
#pragma unroll
            for (int i = 0; i < kMaxHeadsPerThread; ++i) {
                const int h = headSet + Sh::kHeadSets * i;
                if (h < g) {
                    const float pr = sc[h * T + t];
#pragma unroll
                    for (int k = 0; k < 8; ++k) o[i][k] = fmaf(pr, v[k], o[i][k]);
                }
            }
        }
        __syncthreads();  // the stage is refilled by the next iteration's issue
    }
    __syncthreads();  // mRow/lRow init visible when the block had no tiles

    // Partials: [row][qHead][split] × (O[D] | m, l). An empty piece writes only (m, l) = (-inf, 0):
    // the merge reads the O of the splits that received keys only.
#pragma unroll
    for (int i = 0; i < kMaxHeadsPerThread; ++i) {
        const int h = headSet + Sh::kHeadSets * i;
        if (h < g) {
            const std::int64_t idx =
                (static_cast<std::int64_t>(row) * p.qHeads + kvh * g + h) * splits + split;
            if (nTiles > 0) {
                float4* dst = reinterpret_cast<float4*>(partO + idx * D + piece * 8);
                dst[0] = make_float4(o[i][0], o[i][1], o[i][2], o[i][3]);
                dst[1] = make_float4(o[i][4], o[i][5], o[i][6], o[i][7]);
            }
            if (piece == 0) {
                partML[idx * 2] = mRow[h];
                partML[idx * 2 + 1] = lRow[h];
            }
        }
    }
    if (!p.fuseMerge) return;

    // Fused merge: the last block of this (row, kv head) to arrive merges the group's heads.
    __shared__ bool isLast;
    __threadfence();  // this block's partials reach L2 before it is counted
    __syncthreads();
    int* counter = counters + row * p.kvHeads + kvh;
    if (tid == 0) isLast = atomicAdd(counter, 1) == splits - 1;
    __syncthreads();
    if (!isLast) return;
    __threadfence();
    // The tiles' shared memory is free now (every thread passed the barriers above): it holds
    // the merge's weights and scratch.
    float* weights = reinterpret_cast<float*>(smem);
    float* scratch = weights + kMaxSplits;
    for (int h = 0; h < g; ++h)
        mergeHead(partO, partML, splits, p.qHeads, D, kvh * g + h, row, p.out, p.outStride, weights, scratch, 0, D);
    if (tid == 0) *counter = 0;
}

__global__ void __launch_bounds__(kThreads) attentionMergeKernel(
    const float* __restrict__ partO, const float* __restrict__ partML, int splits, int qHeads,
    int headDim, float* __restrict__ out, std::int64_t outStride) {
    __shared__ float weights[kMaxSplits];
    __shared__ float scratch[32];
    gridDependencyWait();      // the partials come from the split kernel (PDL)
    allowDependentsToStart();  // the o_proj matvec may prefetch its weights now
    const int dimBegin = static_cast<int>(blockIdx.z) * kMergeDims;
    const int dimEnd = dimBegin + kMergeDims < headDim ? dimBegin + kMergeDims : headDim;
    mergeHead(partO, partML, splits, qHeads, headDim, blockIdx.x, blockIdx.y, out, outStride, weights, scratch, dimBegin, dimEnd);
}

// ---- cluster form (AttentionDecodeParams::cluster) ------------------------------------------------
// One launch per layer, for one decode row: grid (C, kvHeads), clusters of C blocks along x, one
// cluster per kv head. Block r of a cluster takes piece r of the band (equal pieces of whole keys),
// normalises and rotates its group's query heads (fuseNormRope) and, when its piece holds the
// query's position, that position's K and V (written to the cache, and into its own shared rows
// straight from registers: nothing reads the slot back this launch). It loads its piece's K and V
// rows in chunks of up to kClusterChunkBytes (cp.async, all rows of a chunk in flight at once), and
// per chunk: scores (warp per key, or keys over lanes for longer chunks where compiled in; see
// "Scores" below), softmax per head (warp per head, all heads at once), O += P·V (thread per dim).
// The blocks then merge through distributed shared memory instead of global partials, a fence and
// a counter: each block leaves (O, m, l) in its
// shared memory, the cluster barrier publishes them, block r combines dims [r·D/C, (r+1)·D/C) of
// every head from all C blocks (the merge kernel's formula, peers in rank order), writes them to
// `out`, and a second barrier keeps every block's shared memory alive until its peers have read
// it. Compared with the split kernel: no partials in global memory, no counter, no serial merge
// in one block, every warp busy in the softmax, and the K/V write off the loads' critical path.
constexpr int kClusterThreads = 256;
// K + V rows of one chunk. GEMMA_CLUSTER_CHUNK_BYTES overrides it for measurements (a harness
// built with -DGEMMA_CLUSTER_CHUNK_BYTES=...; docs/PERFORMANCE.md version 11).
#ifndef GEMMA_CLUSTER_CHUNK_BYTES
#define GEMMA_CLUSTER_CHUNK_BYTES (64 * 1024)
#endif
constexpr int kClusterChunkBytes = GEMMA_CLUSTER_CHUNK_BYTES;
constexpr int kClusterMaxKeys = 256;           // keys per chunk at most (small head dims)
constexpr int kClusterMaxGroup = kClusterAttentionMaxGroup;  // query heads per kv head (AttentionDecode.h)
constexpr int kClusterMaxSize = 16;

__host__ __device__ constexpr int clusterChunkKeys(int d, int elemBytes) {
    return kClusterChunkBytes / (2 * d * elemBytes) < kClusterMaxKeys ? kClusterChunkBytes / (2 * d * elemBytes) : kClusterMaxKeys;
}
// Scores: keys over lanes, dims over warps (docs/PERFORMANCE.md version 47). A warp takes 8
// pieces of 8 dims (fewer at head dim 32) of 32 keys, one key per lane, so no lane waits on a
// shuffle per key: the head dim falls into clusterScoreDimGroups slices (4 at head dim 256; the
// code takes any head dim, 1 to 8 slices, and version 47's first form ran every instance through
// test_attention), the warps into that many slices times the key groups, and each slice's partial
// dot products meet in shared memory, summed in slice order by the softmax (the same bits in every
// block and launch).
// Where it is compiled in and from how many keys per chunk: clusterKeysOverLanes and
// kClusterKeysOverLanesFrom (AttentionDecode.h).
__host__ __device__ constexpr int clusterScorePiecesPerWarp(int d) { return d / 8 < 8 ? d / 8 : 8; }
constexpr int clusterScoreDimGroups(int d, bool headSplit) {
    return clusterKeysOverLanes(d, headSplit) ? d / 8 / clusterScorePiecesPerWarp(d) : 1;
}
// The two for a kernel instance, as constants device code may read (the header's functions are
// host-only).
template <int D, bool HEADSPLIT>
struct ClusterScoreForm {
    static constexpr bool keysOverLanes = clusterKeysOverLanes(D, HEADSPLIT);
    static constexpr int dimGroups = clusterScoreDimGroups(D, HEADSPLIT);
};
// Shared memory: K and V rows of a chunk, the current position's K and V rows, q, the chunk's
// scores (one slice per dim group), then O, m, l, alpha (fp32).
constexpr std::size_t clusterSmemBytes(int d, int elemBytes, int group, bool headSplit) {
    const std::size_t rowBytes = static_cast<std::size_t>(d) * elemBytes;
    const std::size_t keys = static_cast<std::size_t>(clusterChunkKeys(d, elemBytes));
    const std::size_t scores = static_cast<std::size_t>(clusterScoreDimGroups(d, headSplit)) * group * keys;
    return 2 * keys * rowBytes + 2 * rowBytes + sizeof(float) * (2 * static_cast<std::size_t>(group) * d + scores + 3 * kClusterMaxGroup);
}

template <typename KvT>
__device__ __forceinline__ float kvElement(const unsigned char* row, int index) {
    if constexpr (sizeof(KvT) == 4) return reinterpret_cast<const float*>(row)[index];
    else return kvToFloat<KvT>(reinterpret_cast<const KvT*>(row)[index]);
}
// With keys over lanes (kSwizzled), the chunk's K rows are stored swizzled: the 16-byte column c
// of row r sits at column c ^ (r & mask), mask = min(8, columns) − 1. Those scores read the same
// column of 32 consecutive rows in one instruction; unswizzled, those rows' columns share banks
// (rows are 128-byte multiples apart). V rows stay plain (P·V reads along a row). Without
// kSwizzled the column is c.
template <int kRowBytes, bool kSwizzled>
__device__ __forceinline__ int swizzledColumn(int row, int column) {
    constexpr int kColumns = kRowBytes / 16;
    constexpr int kMask = (kColumns < 8 ? kColumns : 8) - 1;
    return kSwizzled ? column ^ (row & kMask) : column;
}
// Piece `piece` (8 elements) of K row `row` as floats.
template <typename KvT, int kRowBytes, bool kSwizzled>
__device__ __forceinline__ void loadSwizzled8(const unsigned char* rows, int row, int piece, float (&v)[8]) {
    const unsigned char* base = rows + row * kRowBytes;
    constexpr int kColumnsPerPiece = static_cast<int>(sizeof(KvT)) / 2;  // 1, or 2 for fp32
    load8At<KvT>(base + swizzledColumn<kRowBytes, kSwizzled>(row, kColumnsPerPiece * piece) * 16,
                 base + swizzledColumn<kRowBytes, kSwizzled>(row, kColumnsPerPiece * piece + 1) * 16, v);
}
// A lane's N = D/32 consecutive dims [lane·N, lane·N + N) of K row `row`.
template <typename KvT, int N, int kRowBytes, bool kSwizzled>
__device__ __forceinline__ void loadLaneDims(const unsigned char* rows, int row, int lane, float (&v)[N]) {
    if constexpr (N % 8 == 0) {
#pragma unroll
        for (int i = 0; i < N / 8; ++i) {
            float t[8];
            loadSwizzled8<KvT, kRowBytes, kSwizzled>(rows, row, lane * (N / 8) + i, t);
#pragma unroll
            for (int k = 0; k < 8; ++k) v[i * 8 + k] = t[k];
        }
    } else {
        const unsigned char* base = rows + row * kRowBytes;
        constexpr int kElem = static_cast<int>(sizeof(KvT));
#pragma unroll
        for (int i = 0; i < N; ++i) {
            const int byte = (lane * N + i) * kElem;
            v[i] = kvElement<KvT>(base + swizzledColumn<kRowBytes, kSwizzled>(row, byte / 16) * 16, (byte % 16) / kElem);
        }
    }
}

// G: the group size the loops are unrolled for (4 or 8; the launch's group is at most G).
// HEADSPLIT (AttentionDecodeParams::clusterHeadSplit 2; head dim 256, G 4): two clusters per kv
// head (grid y = 2·kvHeads), cluster `part` taking query heads [part·g, (part+1)·g) of the group
// (g = half the group) over the whole band; both owners normalise and rotate the current K and V
// into their own shared rows, and only part 0 writes them to the cache.
template <int D, typename KvT, int G, bool HEADSPLIT = false>
__global__ void __launch_bounds__(kClusterThreads, 2) attentionClusterKernel(AttentionDecodeParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    constexpr int kElem = static_cast<int>(sizeof(KvT));
    constexpr int kRowBytes = D * kElem;
    constexpr int KC = clusterChunkKeys(D, kElem);
    constexpr int N = D / 32;                                     // dims per lane, warp-per-key scores
    constexpr int DT = D >= kClusterThreads ? D / kClusterThreads : 1;  // dims per thread in P·V
    constexpr int kPairs = D / 64 > 0 ? D / 64 : 1;
    constexpr int kClusterWarps = kClusterThreads / 32;
    constexpr int kPiecesPerWarp = clusterScorePiecesPerWarp(D);
    constexpr bool kLanes = ClusterScoreForm<D, HEADSPLIT>::keysOverLanes;  // keys over lanes compiled in
    constexpr int kDimGroups = ClusterScoreForm<D, HEADSPLIT>::dimGroups;
    static_assert(kDimGroups <= kClusterWarps && kClusterWarps % kDimGroups == 0, "the scores' warps split evenly");
    constexpr int kKeyGroups = kClusterWarps / kDimGroups;
    constexpr int kStepPieces = kPiecesPerWarp < 2 ? kPiecesPerWarp : 2;  // pieces loaded together
    cg::cluster_group cluster = cg::this_cluster();
    const int C = static_cast<int>(cluster.num_blocks());
    const int rank = static_cast<int>(cluster.block_rank());
    constexpr int kSplit = HEADSPLIT ? 2 : 1;
    const int g = p.qHeads / p.kvHeads / kSplit;  // this cluster's query heads
    const int kvh = HEADSPLIT ? static_cast<int>(blockIdx.y >> 1) : static_cast<int>(blockIdx.y);
    const int part = HEADSPLIT ? static_cast<int>(blockIdx.y & 1) : 0;
    // This cluster's first query head: kvh·g without the split (part is 0, kSplit 1).
    const int headBase = (kvh * kSplit + part) * g;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    extern __shared__ float4 smemRaw[];
    unsigned char* kRows = reinterpret_cast<unsigned char*>(smemRaw);
    unsigned char* vRows = kRows + KC * kRowBytes;
    unsigned char* curK = vRows + KC * kRowBytes;
    unsigned char* curV = curK + kRowBytes;
    float* qs = reinterpret_cast<float*>(curV + kRowBytes);
    float* sc = qs + g * D;
    float* os = sc + kDimGroups * g * KC;  // sc: one slice of g × KC partial scores per dim group
    float* mRow = os + g * D;
    float* lRow = mRow + kClusterMaxGroup;
    float* alphaRow = lRow + kClusterMaxGroup;
    GEMMA_PHASE_START();  // measurement builds only (PhaseClock.h): the phases below, marks 1-9

    // prefetchBand: the band's earlier positions were written by earlier decode steps (a graph
    // launch or a host copy apart from this one, so complete), and so was positions[0]: both are
    // read before the wait for the kernel before (PDL), which only q, k, v and the current
    // position's cache rows (a KV-shared layer's, or the separate norm kernel's) depend on.
    if (!p.prefetchBand) {
        gridDependencyWait();      // q, k, v come from the kernel before (PDL)
        allowDependentsToStart();  // the o_proj matvec may prefetch its weights now
    }

    const std::int64_t len = static_cast<std::int64_t>(p.positions[0]) + 1;
    std::int64_t start = 0;
    if (p.window > 0 && len - p.window > start) start = len - p.window;
    if (len - p.capacity > start) start = len - p.capacity;
    const std::int64_t n = len - start;
    const std::int64_t pieceLen = n > 0 ? (n + C - 1) / C : 0;
    const std::int64_t bs = start + rank * pieceLen;
    const std::int64_t be = bs + pieceLen < len ? bs + pieceLen : len;
    const bool hasKeys = be > bs;
    const std::int64_t current = len - 1;
    const bool writesCurrent = p.fuseNormRope && p.normRope.k && current >= bs && current < be;

    const unsigned char* kBase = static_cast<const unsigned char*>(p.kCache) + static_cast<std::int64_t>(kvh) * kRowBytes;
    const unsigned char* vBase = static_cast<const unsigned char*>(p.vCache) + static_cast<std::int64_t>(kvh) * kRowBytes;
    const std::int64_t slotBytes = static_cast<std::int64_t>(p.kvHeads) * kRowBytes;
    constexpr int kChunks16 = kRowBytes / 16;
    // Loads keys [first, first + count) of the piece into rows 0..count-1; the current
    // position's rows come from curK/curV after the wait instead (writesCurrent), or, when
    // `skipCurrent`, are left for a load after the wait.
    auto issueChunk = [&](std::int64_t first, int count, bool skipCurrent) {
        // Slots of consecutive positions: one 64-bit remainder per chunk; count <= the band <=
        // capacity, so a slot past the end wraps with one subtraction.
        const std::int64_t firstSlot = first % p.capacity;
        for (int idx = tid; idx < count * kChunks16; idx += kClusterThreads) {
            const int r = idx / kChunks16;
            const int c = idx % kChunks16;
            if ((writesCurrent || skipCurrent) && first + r == current) continue;
            std::int64_t slot = firstSlot + r;
            if (slot >= p.capacity) slot -= p.capacity;
            const std::int64_t off = slot * slotBytes + c * 16;
            cpAsync16(kRows + r * kRowBytes + swizzledColumn<kRowBytes, kLanes>(r, c) * 16, kBase + off, true);
            cpAsync16(vRows + r * kRowBytes + c * 16, vBase + off, true);
        }
        cpAsyncCommit();
    };
    // Before the loop: the first chunk (before the wait with prefetchBand); row r holds key bs + r.
    const int firstCount = hasKeys ? static_cast<int>(be - bs < KC ? be - bs : KC) : 0;
    if (hasKeys) issueChunk(bs, firstCount, p.prefetchBand);
    // With prefetchBand, a KV-shared layer's current rows load after the wait, in a group of their
    // own committed after the first chunk's.
    if (p.prefetchBand) {
        gridDependencyWait();
        allowDependentsToStart();
        // The current position's rows, when the cache holds them and they are in the first chunk.
        if (!writesCurrent && current >= bs && current < bs + firstCount) {
            const std::int64_t off = (current % p.capacity) * slotBytes;
            const int row = static_cast<int>(current - bs);
            for (int c = tid; c < kChunks16; c += kClusterThreads) {
                cpAsync16(kRows + row * kRowBytes + swizzledColumn<kRowBytes, kLanes>(row, c) * 16, kBase + off + c * 16, true);
                cpAsync16(vRows + row * kRowBytes + c * 16, vBase + off + c * 16, true);
            }
            cpAsyncCommit();
        }
    }
    GEMMA_PHASE_MARK(1);  // the first chunk issued, the dependency wait passed

    // Prologue, in parallel warps: this position's K (warp 0) and V (warp 1) when this block holds
    // it; the group's query heads (warps 2..) when the block has keys.
    const QkvNormRopeParams& r = p.normRope;
    if (writesCurrent && warp < 2) {
        const bool key = warp == 0;
        const float* src = (key ? r.k : r.v) + static_cast<std::int64_t>(kvh) * D;
        float a[kPairs], b[kPairs];
        headNormRope(src, key ? r.kNormWeight : nullptr, r.invFreq, r.rotatedPairs, key, static_cast<int>(current), D, r.eps, a, b);
        void* cache = key ? r.kCache : r.vCache;
        unsigned char* row = key ? curK : curV;
        const std::int64_t at = ((current % p.capacity) * p.kvHeads + kvh) * D;
        storeHead(D, a, b, [&](int j, float v) {
            if (part == 0) storeKv(cache, p.kvDtype, at + j, v);  // HEADSPLIT: part 1 keeps its copy only
            if constexpr (sizeof(KvT) == 4) reinterpret_cast<float*>(row)[j] = v;
            else reinterpret_cast<KvT*>(row)[j] = floatToKv<KvT>(v);
        });
    }
    const float* qGroup = p.q + static_cast<std::int64_t>(headBase) * D;
    if (hasKeys) {
        if (p.fuseNormRope) {
            for (int h = warp - 2; h >= 0 && h < g; h += kClusterWarps - 2) {
                float a[kPairs], b[kPairs];
                headNormRope(qGroup + h * D, r.qNormWeight, r.invFreq, r.rotatedPairs, true, static_cast<int>(current), D, r.eps, a, b);
                storeHead(D, a, b, [&](int j, float v) { qs[h * D + j] = v; });
            }
        } else {
            for (int i = tid; i < g * D / 4; i += kClusterThreads)
                reinterpret_cast<float4*>(qs)[i] = reinterpret_cast<const float4*>(qGroup)[i];
        }
    }
    if (tid < kClusterMaxGroup) {
        mRow[tid] = -INFINITY;
        lRow[tid] = 0.0f;
    }
    __syncthreads();  // q, the current rows and the stats are in place
    GEMMA_PHASE_MARK(2);  // the prologue: q (and the current K, V) normed and rotated

    // The warp-per-key scores: where keys over lanes is not compiled in, at G <= 4 each lane keeps
    // its dims of q in registers (at 8 they would take 64 registers at d 256). With keys over lanes
    // q stays in shared memory for both forms: registers live across the loop spilled.
    constexpr bool kQInRegisters = G <= 4 && !kLanes;
    float qv[kQInRegisters ? G : 1][N];
    if constexpr (kQInRegisters) {
#pragma unroll
        for (int h = 0; h < G; ++h)
            if (h < g) {
#pragma unroll
                for (int i = 0; i < N; ++i) qv[h][i] = qs[h * D + lane * N + i];
            }
    }
    float o[G][DT];
#pragma unroll
    for (int h = 0; h < G; ++h)
#pragma unroll
        for (int j = 0; j < DT; ++j) o[h][j] = 0.0f;

    // Each loaded chunk: keys [first, first + count) in rows 0.. (the current rows copied in
    // from curK/curV first when this block wrote them), folded into o, m, l. Ends on a barrier.
    for (std::int64_t first = bs; first < be; first += KC) {
        const int count = static_cast<int>(be - first < KC ? be - first : KC);
        if (first != bs) issueChunk(first, count, false);  // after the wait: the current rows load as any
        cpAsyncWait<0>();
        if (writesCurrent && current >= first && current < first + count) {
            const int row = static_cast<int>(current - first);
            for (int c = tid; c < kChunks16; c += kClusterThreads) {
                reinterpret_cast<uint4*>(kRows + row * kRowBytes)[swizzledColumn<kRowBytes, kLanes>(row, c)] = reinterpret_cast<const uint4*>(curK)[c];
                reinterpret_cast<uint4*>(vRows + row * kRowBytes)[c] = reinterpret_cast<const uint4*>(curV)[c];
            }
        }
        __syncthreads();
        GEMMA_PHASE_MARK(3);  // the chunk arrived

        // Scores into sc's slices. Two forms, by the chunk's key count (docs/PERFORMANCE.md
        // version 47), where keys over lanes is compiled in (kLanes; elsewhere the first only):
        // - short chunks (< kClusterKeysOverLanesFrom keys): warp per key, lanes over the dims, a
        //   shuffle sum per head into slice 0 (scaled here without kLanes, by the softmax with);
        //   a warp runs a key or two, and each is one short chain.
        // - longer chunks: lane per key, warp = (key group, dim group). Each lane sums its key's
        //   dims of the warp's pieces against q (broadcast from shared memory) in two chains (even
        //   and odd pieces) and leaves the unscaled partial in its dim group's slice: no shuffle
        //   per key, so a warp's time no longer grows with its keys (at a full 12b window, 64 keys
        //   per block: 2.2 µs of scores warp per key, 0.9 µs this way).
        const bool keysOverLanes = kLanes && count >= kClusterKeysOverLanesFrom;
        if (keysOverLanes) {
            const int dimGroup = warp % kDimGroups;
            const int keyGroup = warp / kDimGroups;
            for (int first = keyGroup * 32; first < count; first += 32 * kKeyGroups) {
                const int t = first + lane;
                // A lane past the chunk reads row 0 (loaded: count >= 32) and stores nothing, so
                // the loads need no branch.
                const int row = t < count ? t : 0;
                float acc[2][G];
#pragma unroll
                for (int h = 0; h < G; ++h) acc[0][h] = acc[1][h] = 0.0f;
#pragma unroll
                for (int step = 0; step < kPiecesPerWarp / kStepPieces; ++step) {
                    float kv[kStepPieces][8];
#pragma unroll
                    for (int i = 0; i < kStepPieces; ++i)
                        loadSwizzled8<KvT, kRowBytes, kLanes>(kRows, row, dimGroup * kPiecesPerWarp + step * kStepPieces + i, kv[i]);
#pragma unroll
                    for (int h = 0; h < G; ++h) {
                        if (h < g) {
#pragma unroll
                            for (int i = 0; i < kStepPieces; ++i) {
                                const float* qPiece = qs + h * D + (dimGroup * kPiecesPerWarp + step * kStepPieces + i) * 8;
                                const float4 qa = *reinterpret_cast<const float4*>(qPiece);
                                const float4 qb = *reinterpret_cast<const float4*>(qPiece + 4);
                                const float q8[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
#pragma unroll
                                for (int e = 0; e < 8; ++e) acc[i & 1][h] = fmaf(q8[e], kv[i][e], acc[i & 1][h]);
                            }
                        }
                    }
                }
                if (t < count) {
#pragma unroll
                    for (int h = 0; h < G; ++h)
                        if (h < g) sc[(dimGroup * g + h) * KC + t] = acc[0][h] + acc[1][h];
                }
            }
        } else {
            for (int t = warp; t < count; t += kClusterWarps) {
                float kv[N];
                loadLaneDims<KvT, N, kRowBytes, kLanes>(kRows, t, lane, kv);
#pragma unroll
                for (int h = 0; h < G; ++h) {
                    if (h < g) {
                        float s = 0.0f;
#pragma unroll
                        for (int i = 0; i < N; ++i) s = fmaf(kQInRegisters ? qv[kQInRegisters ? h : 0][i] : qs[h * D + lane * N + i], kv[i], s);
                        s = warpSum(s);
                        if (lane == 0) sc[h * KC + t] = kLanes ? s : s * p.scale;  // kLanes: scaled by the softmax
                    }
                }
            }
        }
        __syncthreads();
        GEMMA_PHASE_MARK(4);  // scores

        // Online softmax: warp h for head h. Where keys over lanes is compiled in, the score is
        // slice 0 (plus, in that form, the other dim groups' slices in slice order) times the
        // scale, left in slice 0; elsewhere the warp-per-key form stored it scaled.
        if (warp < g) {
            const int h = warp;
            float tmax = -INFINITY;
            for (int t = lane; t < count; t += 32) {
                float s = sc[h * KC + t];
                if constexpr (kLanes) {
                    if (keysOverLanes)
#pragma unroll
                        for (int d = 1; d < kDimGroups; ++d) s += sc[(d * g + h) * KC + t];
                    s *= p.scale;
                    sc[h * KC + t] = s;
                }
                tmax = fmaxf(tmax, s);
            }
            tmax = warpMax(tmax);
            const float mOld = mRow[h];
            const float mNew = fmaxf(mOld, tmax);
            float sum = 0.0f;
            for (int t = lane; t < count; t += 32) {
                const float e = expf(sc[h * KC + t] - mNew);
                sc[h * KC + t] = e;
                sum += e;
            }
            sum = warpSum(sum);
            __syncwarp();
            if (lane == 0) {
                const float alpha = expf(mOld - mNew);
                lRow[h] = lRow[h] * alpha + sum;
                mRow[h] = mNew;
                alphaRow[h] = alpha;
            }
        }
        __syncthreads();
        GEMMA_PHASE_MARK(5);  // softmax

        // O = alpha·O + Σ_t p_t V_t: thread per dim.
        if (tid < D) {
#pragma unroll
            for (int h = 0; h < G; ++h)
                if (h < g) {
                    const float a = alphaRow[h];
#pragma unroll
                    for (int j = 0; j < DT; ++j) o[h][j] *= a;
                }
            // Key t folded into O with its heads' probabilities p(h).
            const auto addKey = [&](int t, auto p) {
                const unsigned char* vRow = vRows + t * kRowBytes;
#pragma unroll
                for (int j = 0; j < DT; ++j) {
                    const float v = kvElement<KvT>(vRow, tid + j * kClusterThreads);
#pragma unroll
                    for (int h = 0; h < G; ++h)
                        if (h < g) o[h][j] = fmaf(p(h), v, o[h][j]);
                }
            };
            // Four keys' probabilities per head in one 16-byte broadcast load (sc's rows start at
            // multiples of KC, itself a multiple of 4), then the keys one by one as before: the
            // same multiply-adds in the same order, a quarter of the shared loads of p.
            // At head dim 512 (two dims per thread) only the key-at-a-time loop runs: the four keys'
            // p beside its q registers spilled.
            int t = 0;
            if constexpr (DT == 1) {
                for (; t + 4 <= count; t += 4) {
                    float4 pr[G];
#pragma unroll
                    for (int h = 0; h < G; ++h)
                        if (h < g) pr[h] = *reinterpret_cast<const float4*>(sc + h * KC + t);
                    addKey(t, [&](int h) { return pr[h].x; });
                    addKey(t + 1, [&](int h) { return pr[h].y; });
                    addKey(t + 2, [&](int h) { return pr[h].z; });
                    addKey(t + 3, [&](int h) { return pr[h].w; });
                }
            }
#pragma unroll 4
            for (; t < count; ++t) addKey(t, [&](int h) { return sc[h * KC + t]; });
        }
        __syncthreads();  // the rows and scores are refilled by the next chunk
        GEMMA_PHASE_MARK(6);  // P·V
    }

    // This block's (O, m, l) for its peers; an empty piece leaves O = 0, m = -inf, l = 0.
    if (tid < D) {
#pragma unroll
        for (int h = 0; h < G; ++h)
            if (h < g)
#pragma unroll
                for (int j = 0; j < DT; ++j) os[h * D + tid + j * kClusterThreads] = o[h][j];
    }
    cluster.sync();
    GEMMA_PHASE_MARK(7);  // the partials in shared memory, the cluster barrier passed

    // Merge dims [rank·D/C, (rank+1)·D/C) of every head of the group from the C blocks.
    const int per = D / C;
    for (int idx = tid; idx < g * per; idx += kClusterThreads) {
        const int h = idx / per;
        const int dim = rank * per + idx % per;
        float M = -INFINITY;
        for (int c = 0; c < C; ++c) M = fmaxf(M, *cluster.map_shared_rank(mRow + h, c));
        float num = 0.0f, den = 0.0f;
        for (int c = 0; c < C; ++c) {
            const float m = *cluster.map_shared_rank(mRow + h, c);
            const float w = expf(m - M);  // an empty piece: m = -inf, weight 0
            num = fmaf(w, *cluster.map_shared_rank(os + h * D + dim, c), num);
            den = fmaf(w, *cluster.map_shared_rank(lRow + h, c), den);
        }
        p.out[static_cast<std::int64_t>(headBase + h) * D + dim] = num / den;
    }
    GEMMA_PHASE_MARK(8);  // the merge
    cluster.sync();  // no block leaves while a peer may still read its shared memory
    GEMMA_PHASE_END(9);  // the second cluster barrier
#endif
}

// ---- host launcher ---------------------------------------------------------------------------------
inline int tileKeys(int headDim, KvDtype dtype) {
    return kTileKBytes / (headDim * static_cast<int>(kvElementBytes(dtype)));
}

// The tensor-core form (AttentionDecodeParams::tensorCores): the prefill kernel over `splits`
// pieces of the band, writing the merge's partials (splits == 1: out itself, normalised).
inline AttentionPrefillParams prefillForm(const AttentionDecodeParams& p, int splits, float* partO, float* partML) {
    AttentionPrefillParams f = attentionPrefillForm(p);
    f.splits = splits;
    f.partO = splits > 1 ? partO : nullptr;
    f.partML = splits > 1 ? partML : nullptr;
    f.programmaticLaunch = p.programmaticLaunch;
    return f;
}

// The split count both split kernels use: pieces of at least 2 tiles of `keysPerTile` keys over
// the band, and no more splits than fill the device's `resident` blocks at `blocksPerSplit`
// blocks each; within [1, kMaxSplits].
inline int splitCount(const AttentionDecodeParams& p, std::int64_t keysPerTile, std::int64_t resident, std::int64_t blocksPerSplit) {
    const std::int64_t band = p.maxBand > 0 ? p.maxBand : p.capacity;
    const std::int64_t byLength = (band + 2 * keysPerTile - 1) / (2 * keysPerTile);
    const std::int64_t bySm = (resident + blocksPerSplit - 1) / blocksPerSplit;
    std::int64_t s = byLength < bySm ? byLength : bySm;
    if (s < 1) s = 1;
    if (s > kMaxSplits) s = kMaxSplits;
    return static_cast<int>(s);
}

// Tensor-core pieces: at least 2 tiles each, and as many blocks as the device holds at once (the
// prefill kernel's occupancy); 0 when the prefill kernel does not take these parameters.
inline int tensorCoreSplits(const AttentionDecodeParams& p, const DeviceFacts& facts) {
    AttentionPrefillPlan plan;
    if (attentionPrefillPlan(attentionPrefillForm(p), plan) != KernelStatus::Ok) return 0;
    return splitCount(p, plan.keysPerTile, static_cast<std::int64_t>(plan.blocksPerSm) * facts.smCount,
                      static_cast<std::int64_t>(plan.gridX) * plan.gridY);
}

// Splits per (row, kv head): pieces of at least 2 tiles, and as many blocks as the device holds
// at once (the split kernel is latency-bound: at depth, more resident blocks mean more tiles in
// flight). Version 7 of docs/PERFORMANCE.md raised the resident count from 2 per SM to what the
// registers and shared memory allow (a 12b full layer: 3 per SM, 396 splits instead of 256).
int clusterSize(const AttentionDecodeParams& p, const DeviceFacts& facts);
inline int chooseSplits(const AttentionDecodeParams& p, const DeviceFacts& facts) {
    if (p.cluster) return clusterSize(p, facts);
    if (p.splits > 0) return p.splits < kMaxSplits ? p.splits : kMaxSplits;
    if (p.tensorCores) return tensorCoreSplits(p, facts);
    constexpr std::size_t kReservedPerBlock = 1024;  // the runtime's shared memory per block
    const std::size_t smem = attentionSmemBytes(p.headDim, static_cast<int>(kvElementBytes(p.kvDtype)), p.qHeads / p.kvHeads) +
                             kReservedPerBlock;
    std::int64_t perSm = static_cast<std::int64_t>(static_cast<std::size_t>(facts.maxSharedPerSm) / smem);
    // The launch bounds' residency (head dims below 128, the small test models, leave the
    // registers unbounded: 2 per SM as before).
    const int maxPerSm = p.headDim >= 128 ? kMaxBlocksPerSm : 2;
    if (perSm > maxPerSm) perSm = maxPerSm;
    if (perSm < 2) perSm = 2;
    return splitCount(p, tileKeys(p.headDim, p.kvDtype), perSm * facts.smCount, static_cast<std::int64_t>(p.kvHeads) * p.rows);
}

// The workspace of `splits` splits: the merge counters, then the partials (0: no valid split count).
inline std::size_t workspaceBytesFor(const AttentionDecodeParams& p, int splits) {
    if (splits <= 0 || p.rows < 1 || p.qHeads < 1 || p.headDim < 1) return 0;
    if (p.cluster) return 16;  // the cluster form merges in shared memory: no workspace is read
    return kCounterBytes + sizeof(float) * static_cast<std::size_t>(p.rows) * p.qHeads * splits * (static_cast<std::size_t>(p.headDim) + 2);
}

// The partials' places in the workspace (after the merge counters).
inline float* partialO(const AttentionDecodeParams& p) {
    return reinterpret_cast<float*>(static_cast<unsigned char*>(p.workspace) + kCounterBytes);
}
inline float* partialML(const AttentionDecodeParams& p, int splits) {
    return partialO(p) + static_cast<std::size_t>(p.rows) * p.qHeads * splits * p.headDim;
}

cudaError_t launchMerge(const AttentionDecodeParams& p, const float* partO, const float* partML, int splits, cudaStream_t stream) {
    const dim3 mergeGrid(static_cast<unsigned>(p.qHeads), static_cast<unsigned>(p.rows),
                         static_cast<unsigned>((p.headDim + kMergeDims - 1) / kMergeDims));
    return launchKernel(attentionMergeKernel, mergeGrid, dim3(kThreads), 0, stream, p.programmaticLaunch, partO, partML, splits,
                        p.qHeads, p.headDim, p.out, p.outStride);
}

template <int D, typename KvT>
cudaError_t launchTyped(const AttentionDecodeParams& p, int splits, int device, cudaStream_t stream) {
    const int g = p.qHeads / p.kvHeads;
    const std::size_t smem = attentionSmemBytes(D, sizeof(KvT), g);
    // Raise the dynamic shared-memory limit once per (kernel, device, size) and host thread.
    thread_local int raisedDevice = -1;
    thread_local std::size_t raisedBytes = 0;
    if (smem > 48 * 1024 && (raisedDevice != device || raisedBytes < smem)) {
        const cudaError_t attr = cudaFuncSetAttribute(attentionSplitKernel<D, KvT>,
                                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                      static_cast<int>(smem));
        if (attr != cudaSuccess) return attr;
        raisedDevice = device;
        raisedBytes = smem;
    }
    int* counters = static_cast<int*>(p.workspace);
    float* partO = partialO(p);
    float* partML = partialML(p, splits);
    const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(p.kvHeads),
                    static_cast<unsigned>(p.rows));
    const cudaError_t err = launchKernel(attentionSplitKernel<D, KvT>, grid, dim3(kThreads), smem, stream,
                                         p.programmaticLaunch, p, partO, partML, counters);
    if (err != cudaSuccess || p.fuseMerge) return err;
    return launchMerge(p, partO, partML, splits, stream);
}

// ---- cluster form: host side ------------------------------------------------------------------------
// Raises the kernel's limits once per device and host thread: the largest shared memory a group
// of up to G needs, and cluster sizes above the portable 8.
template <int D, typename KvT, int G, bool HEADSPLIT = false>
cudaError_t prepareClusterKernel(int device) {
    thread_local int prepared = -1;
    if (prepared == device) return cudaSuccess;
    constexpr auto kernel = attentionClusterKernel<D, KvT, G, HEADSPLIT>;
    const int smem = static_cast<int>(clusterSmemBytes(D, sizeof(KvT), G, HEADSPLIT));
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err == cudaSuccess) err = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (err == cudaSuccess) prepared = device;
    return err;
}

// The cluster size: p.splits when given (a power of two up to kClusterMaxSize dividing the head
// dim, else 0), otherwise the largest such size whose clusters for every kv head (two per kv head
// with HEADSPLIT) are resident at once (the occupancy calculator, cached per device and shape); 0
// when none launches.
template <int D, typename KvT, int G, bool HEADSPLIT = false>
int clusterSizeTyped(const AttentionDecodeParams& p, const DeviceFacts& facts) {
    constexpr int kSplit = HEADSPLIT ? 2 : 1;
    const auto valid = [](int c) { return c >= 1 && c <= kClusterMaxSize && (c & (c - 1)) == 0 && D % c == 0; };
    if (facts.computeMajor < 9) return 0;  // clusters need sm_90
    if (p.splits > 0) return valid(p.splits) ? p.splits : 0;
    struct Cached {
        int device = -1, group = 0, kvHeads = 0, size = 0;
    };
    thread_local Cached cached;
    const int g = p.qHeads / p.kvHeads / kSplit;
    if (cached.device == facts.device && cached.group == g && cached.kvHeads == p.kvHeads) return cached.size;
    if (prepareClusterKernel<D, KvT, G, HEADSPLIT>(facts.device) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    int chosen = 0;
    for (int c = kClusterMaxSize; c >= 1 && chosen == 0; c /= 2) {
        if (!valid(c)) continue;
        cudaLaunchAttribute attribute{};
        attribute.id = cudaLaunchAttributeClusterDimension;
        attribute.val.clusterDim.x = static_cast<unsigned>(c);
        attribute.val.clusterDim.y = 1;
        attribute.val.clusterDim.z = 1;
        cudaLaunchConfig_t config{};
        config.gridDim = dim3(static_cast<unsigned>(c), static_cast<unsigned>(p.kvHeads * kSplit), 1);
        config.blockDim = dim3(kClusterThreads);
        config.dynamicSmemBytes = clusterSmemBytes(D, sizeof(KvT), g, HEADSPLIT);
        config.attrs = &attribute;
        config.numAttrs = 1;
        int active = 0;
        if (cudaOccupancyMaxActiveClusters(&active, attentionClusterKernel<D, KvT, G, HEADSPLIT>, &config) != cudaSuccess) {
            cudaGetLastError();
            continue;
        }
        if (active >= p.kvHeads * kSplit) chosen = c;
    }
    cached = {facts.device, g, p.kvHeads, chosen};
    return chosen;
}

template <int D, typename KvT, int G, bool HEADSPLIT = false>
cudaError_t launchClusterTyped(const AttentionDecodeParams& p, int size, int device, cudaStream_t stream) {
    // The head split (clusterHeadSplit) is instantiated at head dim 256 with G 4 (validated by the
    // launcher).
    if constexpr (D == 256 && G == 4 && !HEADSPLIT)
        if (p.clusterHeadSplit == 2) return launchClusterTyped<D, KvT, G, true>(p, size, device, stream);
    if (const cudaError_t err = prepareClusterKernel<D, KvT, G, HEADSPLIT>(device); err != cudaSuccess) return err;
    constexpr int kSplit = HEADSPLIT ? 2 : 1;
    const std::size_t smem = clusterSmemBytes(D, sizeof(KvT), p.qHeads / p.kvHeads / kSplit, HEADSPLIT);
    const dim3 grid(static_cast<unsigned>(size), static_cast<unsigned>(p.kvHeads * kSplit), 1);
    return launchKernelWith(attentionClusterKernel<D, KvT, G, HEADSPLIT>, grid, dim3(kClusterThreads), smem, stream,
                            p.programmaticLaunch, static_cast<unsigned>(size), p);
}

// Calls f.template operator()<D, KvT>() for p's head dim and cache type: the instance of a
// kernel templated on them (both attention kernels) that takes p.
template <typename F>
auto withInstance(const AttentionDecodeParams& p, F&& f) {
    const auto forDim = [&]<int D>() {
        return withKvStorage(p.kvDtype, [&]<typename KvT>() { return f.template operator()<D, KvT>(); });
    };
    switch (p.headDim) {
        case 32: return forDim.template operator()<32>();
        case 64: return forDim.template operator()<64>();
        case 128: return forDim.template operator()<128>();
        case 256: return forDim.template operator()<256>();
        default: return forDim.template operator()<512>();
    }
}

// The same for the cluster kernel, which is also templated on the group it is unrolled for
// (4, or 8 for larger groups): f.template operator()<D, KvT, G>().
template <typename F>
auto withClusterInstance(const AttentionDecodeParams& p, F&& f) {
    const bool wide = p.qHeads / p.kvHeads / (p.clusterHeadSplit == 2 ? 2 : 1) > 4;
    return withInstance(p, [&]<int D, typename KvT>() {
        return wide ? f.template operator()<D, KvT, 8>() : f.template operator()<D, KvT, 4>();
    });
}

int clusterSize(const AttentionDecodeParams& p, const DeviceFacts& facts) {
    return withClusterInstance(p, [&]<int D, typename KvT, int G>() {
        if (p.clusterHeadSplit == 2) {
            if constexpr (D == 256 && G == 4) return clusterSizeTyped<D, KvT, G, true>(p, facts);
            else return 0;  // not instantiated (the launcher refuses it)
        }
        return clusterSizeTyped<D, KvT, G>(p, facts);
    });
}

inline cudaError_t launchCluster(const AttentionDecodeParams& p, int size, int device, cudaStream_t stream) {
    return withClusterInstance(p, [&]<int D, typename KvT, int G>() { return launchClusterTyped<D, KvT, G>(p, size, device, stream); });
}

// Whether p.normRope describes the launch it is fused into (AttentionDecodeParams::fuseNormRope):
// the prefill form's conditions, and the same cache batch stride.
inline bool normRopeDescribes(const AttentionDecodeParams& p) {
    const QkvNormRopeParams& r = p.normRope;
    return cuda::normRopeDescribes(r, attentionPrefillForm(p)) && (!r.k || r.cacheBatchStride == p.cacheBatchStride);
}

}  // namespace attndetail

AttentionPrefillParams attentionPrefillForm(const AttentionDecodeParams& p) {
    AttentionPrefillParams f;
    f.q = p.q;
    f.qStride = p.qStride;
    f.kCache = p.kCache;
    f.vCache = p.vCache;
    f.kvDtype = p.kvDtype;
    f.capacity = p.capacity;
    f.qHeads = p.qHeads;
    f.kvHeads = p.kvHeads;
    f.headDim = p.headDim;
    f.positions = p.positions;
    f.rows = p.rows;
    f.window = p.window;
    f.scale = p.scale;
    f.out = p.out;
    f.outStride = p.outStride;
    f.fuseNormRope = p.fuseNormRope;
    f.normRope = p.normRope;
    f.bulkCopies = p.bulkCopies;
    return f;
}

int attentionDecodeSplits(const AttentionDecodeParams& p) {
    DeviceFacts facts;
    if (queryDeviceFacts(facts) != KernelStatus::Ok) return 0;
    return attndetail::chooseSplits(p, facts);
}

std::size_t attentionDecodeWorkspaceBytes(const AttentionDecodeParams& p) {
    return attndetail::workspaceBytesFor(p, attentionDecodeSplits(p));
}

KernelStatus launchAttentionDecode(const AttentionDecodeParams& p, cudaStream_t stream) {
    using namespace attndetail;
    if (!p.q || !p.kCache || !p.vCache || !p.positions || !p.out || (!p.workspace && !p.cluster))
        return KernelStatus::InvalidArgument;
    if (p.qHeads < 1 || p.kvHeads < 1 || p.qHeads % p.kvHeads != 0 || p.rows < 1 || p.capacity < 1)
        return KernelStatus::InvalidArgument;
    if (p.headDim != 32 && p.headDim != 64 && p.headDim != 128 && p.headDim != 256 && p.headDim != 512)
        return KernelStatus::Unsupported;
    const int g = p.qHeads / p.kvHeads;
    const int maxGroup = (kThreads / (p.headDim / 8)) * kMaxHeadsPerThread;
    if (g > maxGroup) return KernelStatus::Unsupported;
    const std::size_t eb = kvElementBytes(p.kvDtype);
    if (p.qStride < static_cast<std::int64_t>(p.qHeads) * p.headDim || p.qStride % 4 != 0 ||
        p.outStride < static_cast<std::int64_t>(p.qHeads) * p.headDim)
        return KernelStatus::InvalidArgument;
    if (!aligned16(p.q) || !aligned16(p.kCache) || !aligned16(p.vCache) || (!p.cluster && !aligned16(p.workspace)) ||
        (p.cacheBatchStride * static_cast<std::int64_t>(eb)) % 16 != 0 || p.cacheBatchStride < 0)
        return KernelStatus::InvalidArgument;
    DeviceFacts facts;
    if (queryDeviceFacts(facts) != KernelStatus::Ok) return KernelStatus::LaunchFailed;
    if (p.cluster) {
        if (p.rows != 1 || p.tensorCores || p.fuseMerge || g > kClusterMaxGroup || p.cacheBatchStride != 0)
            return KernelStatus::InvalidArgument;
        // The head split: two clusters of half the group per kv head, where it is instantiated.
        if (p.clusterHeadSplit > 1 && (p.clusterHeadSplit != 2 || !clusterHeadSplitFits(p.headDim, g))) return KernelStatus::InvalidArgument;
        if (p.fuseNormRope && !normRopeDescribes(p)) return KernelStatus::InvalidArgument;
        if (facts.computeMajor < 9) return KernelStatus::Unsupported;
        if (clusterSmemBytes(p.headDim, static_cast<int>(eb), g, p.clusterHeadSplit == 2) > static_cast<std::size_t>(facts.maxSharedPerBlockOptin))
            return KernelStatus::Unsupported;
        const int size = clusterSize(p, facts);
        if (size < 1) return p.splits > 0 ? KernelStatus::InvalidArgument : KernelStatus::Unsupported;
        return launchStatus(launchCluster(p, size, facts.device, stream));
    }
    if (p.tensorCores) {
        if (p.rows != 1 || p.fuseMerge || (p.fuseNormRope && !normRopeDescribes(p))) return KernelStatus::InvalidArgument;
        const int splits = chooseSplits(p, facts);
        if (splits < 1) return KernelStatus::Unsupported;
        if (p.workspaceBytes < workspaceBytesFor(p, splits)) return KernelStatus::InvalidArgument;
        const KernelStatus status = launchAttentionPrefill(prefillForm(p, splits, partialO(p), partialML(p, splits)), stream);
        if (status != KernelStatus::Ok || splits == 1) return status;
        return launchMerge(p, partialO(p), partialML(p, splits), splits, stream) == cudaSuccess ? KernelStatus::Ok
                                                                                                 : KernelStatus::LaunchFailed;
    }
    if (attentionSmemBytes(p.headDim, static_cast<int>(eb), g) >
        static_cast<std::size_t>(facts.maxSharedPerBlockOptin))
        return KernelStatus::Unsupported;
    const int splits = chooseSplits(p, facts);
    if (p.workspaceBytes < workspaceBytesFor(p, splits)) return KernelStatus::InvalidArgument;
    if ((p.fuseNormRope || p.fuseMerge) && (p.rows != 1 || p.kvHeads > kMaxCounters)) return KernelStatus::InvalidArgument;
    if (p.fuseNormRope && !normRopeDescribes(p)) return KernelStatus::InvalidArgument;
    const cudaError_t err =
        withInstance(p, [&]<int D, typename KvT>() { return launchTyped<D, KvT>(p, splits, facts.device, stream); });
    return err == cudaSuccess ? KernelStatus::Ok : KernelStatus::LaunchFailed;
}

}  // namespace gemma::cuda
