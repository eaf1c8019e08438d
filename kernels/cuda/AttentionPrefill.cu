// Prefill attention (FlashAttention-2 style) over a KV cache, one code path for sliding rings,
// full layers, MQA and GQA:
//   for each row r (absolute position p = positions[r]), query head h (kv head j = h / g,
//   g = qHeads / kvHeads), keys at positions P = [max(0, p+1−window (if window > 0), p+1−capacity), p]:
//   out[r][h] = Σ_{t∈P} softmax_t(scale · q[r][h]·K[t][j]) · V[t][j]      (fp32 softmax)
// K/V of position t live in slot t % capacity. Same semantics as AttentionDecode.cu, for many
// query rows per launch (the caller has written the chunk's own K/V before this launch).
//
// ---- Work decomposition ------------------------------------------------------------------------
// The M dimension of a query tile packs (query row, head-in-group) pairs, m = r·g + hh, so one K/V
// tile in shared memory serves the whole group of a kv head (MQA 16×1: 16 heads of each row; GQA
// 16×8: the 2 heads of each row). Grid (kvHeads, query tiles of BM = 16·WM pairs); query tiles are
// issued last-first, so the tiles with the longest causal bands start first (load balance).
// Block = WM × WD warps. Warp (wm, wd) owns the 16 pairs [16·wm, 16·wm+16) of the tile and the head
// dims [wd·DW, wd·DW + DW), DW = D / WD. Head dims are split across warps (WD > 1 at d 256 / 512)
// so that O (16 × DW fp32) and q (16 × DW fp16) stay in registers: 64 + 32 registers per thread.
//   S = q·Kᵀ: each warp forms the partial over its own dims for all BN keys of the tile; the WD
//             partials of a row group are summed through shared memory (named barrier per row
//             group, pairwise so every warp gets the bitwise-same sum, hence the same P).
//   softmax:  online (running max m, running sum l per row, fp32, base-2 exponent with
//             scale·log2 e folded into the scores); P rounded to fp16 in registers; l sums the
//             rounded P, so the weights applied to V are exactly the weights normalised by l.
//   O += P·V: each warp over its DW dims; P's accumulator layout is the A-operand layout of the
//             next mma (FA2 register reuse), no shared-memory round trip.
// mma.sync.m16n8k16.row.col.f32.f16.f16.f32 throughout (sm_80+: same code on sm_89, sm_90,
// sm_120); fragments come from ldmatrix (K: non-transposed, V: transposed).
//
//   head dim        32    64    128   256   512
//   WM × WD         4×1   4×1   4×1   4×2   2×4
//   threads         128   128   128   256   256
//   BM pairs        64    64    64    64    32
//   BN keys         64    64    32    32    16
//
// ---- K/V staging -------------------------------------------------------------------------------
// Tiles go global → shared with cp.async in the cache's own dtype ("raw" stages), then each thread
// converts the 16-byte chunks it copied itself to fp16 into the single K or V tile the mma reads
// (rows padded by 16 bytes: conflict-free ldmatrix). Because a thread converts only what it
// copied, cp.async.wait_group alone orders copy and conversion; no barrier is needed there.
// K and V are staged as alternating phases K0, V0, K1, V1, ... through a ring of `stages` raw
// slots; a phase is issued `stages` phases before its conversion (stages = 1: half a tile ahead;
// the launcher picks 1..4 from the device's shared memory and occupancy). Per key tile:
//   barrier A  (K(t) converted by everyone; everyone finished P·V(t−1), so the V tile is free)
//   convert V(t); issue phase +stages;  S(t), [partials + row-group barrier], softmax
//   barrier C  (V(t) converted; everyone finished reading K(t), so the K tile is free)
//   convert K(t+1); issue phase +stages;  O += P·V(t)
// Keys past the block's last live key are zero-filled by cp.async (the cache is not read).
// Bulk form (AttentionPrefillParams::bulkCopies, sm_90+; docs/PERFORMANCE.md version 31 step 4, kept in version 32):
// the same ring, filled by cp.async.bulk instead of every thread's 16-byte cp.async (4096 of them
// per 64 KB phase, whose issue took ≈ 1 µs per phase in the decode's pieces). One warp (the last)
// arms slot s's full mbarrier with the phase's live bytes and copies its live rows (one copy per
// contiguous run when there is one kv head, one per row otherwise); every thread waits on the
// full barrier before converting, each warp arrives on the slot's empty barrier after converting,
// and the issuing warp waits on that before refilling the slot, `stages` phases ahead as above.
// Keys past the last live key are not copied; their fp16 halves are written as zeros (the bits a
// zero-filled chunk converts to), so both forms give the same bits.
//
// ---- Which slots are read ----------------------------------------------------------------------
// A block loads the key range [min band start, max position] over its rows (the hull). For
// consecutive positions (the engine's prefill chunk) that is exactly the union of the rows' live
// bands, so no slot outside every live band is ever read. (For other position sets, slots inside
// the hull but outside every band would be read too: finite values there are harmless, since
// their scores are masked to −inf, but a NaN there would reach O as 0·NaN.) Key tiles outside a
// warp's own hull are skipped by that warp (sliding windows: most of a long context); tiles inside
// every row's band skip the per-element mask.
//
// ---- Key splits (the decode step's full layers) -------------------------------------------------
// One query row has one query tile per kv head: a 12b full layer (16 heads, 1 kv head) is one
// block. With AttentionPrefillParams::splits > 1 (Flash-Decoding) grid z cuts the row's band into
// pieces of whole tiles; each block runs the loop above over its piece and writes unnormalised
// partials (O, m, l) in AttentionDecode.cu's layout, whose merge kernel combines them. Used by
// launchAttentionDecode with AttentionDecodeParams::tensorCores (docs/PERFORMANCE.md version 8).
//
// ---- Fused norm + RoPE (AttentionPrefillParams::fuseNormRope; one decode row) ------------------
// The decode step's q/k/v norm + RoPE + cache write (NormRopeCache.cu) inside the pieces' launch,
// as the CUDA-core split kernel does it (AttentionDecode.cu, "Fusions"): one launch less per layer
// (docs/PERFORMANCE.md version 21 step 3: the full layers' default since, +0.8 % on the 12b at
// positions 100–227; `test_attention` checks it against the norm kernel). A separate instance
// of the kernel (template flag): the prefill's instance does none of it. After the dependency wait
// every block with keys in its piece runs headNormRope (HeadNormRope.h, the norm kernel's code: the
// same fp32 bits) over its tile's query heads, one warp per head, and stores them as fp16 into its
// K/V tile area (the same rounding as the fp32 → fp16 q fragments of the unfused kernel, so the two
// should give the same bits: test_attention checks it); the fragments are read from there once the
// block's barrier has passed, and a second barrier frees the area for the first K tile. The blocks
// whose piece holds the query's position (the last non-empty piece; one per kv head and query tile)
// also normalise and rotate that position's K, normalise its V and write both into the cache slot
// (storeKv: the norm kernel's rounding), in the same round of warps. The tile loads read the cache
// with cp.async (generic-proxy reads by the issuing thread; the bulk form's async-proxy reads
// need the writers' proxy fence, which they issue), issued only after the block barrier that
// follows the writes, so the block reads the row it wrote;
// no other piece holds that slot (it holds position p − capacity, outside every band). With several
// query tiles per kv head (groups above the tile's rows) each tile's block writes the row, the same
// bits. Nothing writes q: other blocks read it raw.
//
// ---- Numerics ----------------------------------------------------------------------------------
// q, K and V are rounded to fp16 (11-bit significand) when staged: they are RMS-normed values,
// far inside fp16's range (|x| < 65504 is a precondition; bf16 caches convert exactly unless a
// value is below fp16's normal range 6.1e-5, where it keeps fewer bits). P is rounded to fp16
// (P ∈ [0, 1]). Products accumulate in fp32, as do the running max/sum and O. A score's error is
// about 2^-11·‖q‖·‖k‖/√d (rounding of q and K over d terms), so the output error grows with the
// score range: a few 1e-4 of max|out| for scores of standard deviation ≲ 2, ~1e-3 at 5–8
// (tests/kernels/test_attention_prefill.cu states the tolerances and where they come from).
//
// Layouts: q [rows][qStride] fp32 (head h at h·headDim), out [rows][outStride] fp32; caches
// [capacity][kvHeads][headDim] (fp32 or bf16 bits), one sequence (all rows share the cache).
// Preconditions (checked): headDim ∈ {32, 64, 128, 256, 512}; qHeads % kvHeads == 0;
// ceil(rows·g / BM) <= 65535; q and out 8-byte aligned, strides even; caches 16-byte aligned;
// fuseNormRope: one row and a normRope that describes the launch (normRopeDescribes).
// Not checkable on the host: 0 <= positions[r] < 2^31 − 64 (a negative position gives an empty
// band: NaN output, as the decode kernel), and the caller's capacity guarantee.
#include "AttentionPrefill.h"

#include <cuda_fp16.h>

#include <climits>
#include <cmath>

#include "CudaCommon.h"
#include "HeadNormRope.h"
#include "PhaseClock.h"

namespace gemma::cuda {
namespace prefilldetail {

constexpr int kMaxStages = 4;

// ---- tile shapes ---------------------------------------------------------------------------------
template <int D>
struct Tile;
template <> struct Tile<32> { static constexpr int kWarpsM = 4, kWarpsD = 1, kKeys = 64; };
template <> struct Tile<64> { static constexpr int kWarpsM = 4, kWarpsD = 1, kKeys = 64; };
template <> struct Tile<128> { static constexpr int kWarpsM = 4, kWarpsD = 1, kKeys = 32; };
template <> struct Tile<256> { static constexpr int kWarpsM = 4, kWarpsD = 2, kKeys = 32; };
// d512 (the 12b's and 31b's full layers): 32 keys per tile, which halves the barriers, the S
// partial sums and the softmax passes per key against 16 (the kernel is latency-bound there: 2
// warps per scheduler, 0.37 eligible, long-scoreboard stalls near zero). The raw ring then holds 2
// stages of 64 KB with an fp32 cache (the same 128 KB in flight) and 4 of 32 KB with bf16. H200
// (docs/PERFORMANCE.md version 17): a 32K decode's pieces 55.9 → 52.2 µs (fp32 cache), 47.6 →
// 41.1 µs (bf16); pp2048 +2 %.
template <> struct Tile<512> { static constexpr int kWarpsM = 2, kWarpsD = 4, kKeys = 32; };

template <int D>
struct Shape {
    static constexpr int kWarpsM = Tile<D>::kWarpsM;
    static constexpr int kWarpsD = Tile<D>::kWarpsD;
    static constexpr int kKeys = Tile<D>::kKeys;          // BN
    static constexpr int kWarps = kWarpsM * kWarpsD;
    static constexpr int kThreads = 32 * kWarps;
    static constexpr int kRows = 16 * kWarpsM;            // BM (packed row, head pairs)
    static constexpr int kDims = D / kWarpsD;             // DW, head dims per warp
    static constexpr int kPitch = D + 8;                  // halves per fp16 K/V row (+16 bytes)
    // Shared memory: [K tile | V tile] fp16, [S partials] (WD > 1), [hull scratch], [slot
    // barriers], [raw ring].
    static constexpr int kKvBytes = 2 * kKeys * kPitch * 2;
    static constexpr int kSredBytes = kWarpsD > 1 ? kWarps * (kKeys / 8) * 32 * 16 : 0;
    static constexpr int kHullBytes = 16 * ((kWarps * 2 * 4 + 15) / 16);
    static constexpr int kBarrierBytes = 2 * 8 * kMaxStages;  // the raw slots' full and empty mbarriers (bulk form)
    static constexpr int kRawOffset = kKvBytes + kSredBytes + kHullBytes + kBarrierBytes;
    static_assert(kWarpsD == 1 || kWarpsD == 2 || kWarpsD == 4, "S partial sum is pairwise");
    static_assert(kWarpsM <= 4, "one named barrier per row group (rowGroupBarrier: ids 1..4)");
    static_assert(kKeys % 16 == 0 && kDims % 16 == 0, "whole mma k-steps and ldmatrix.x4 pairs");
    static_assert((kKeys * D * 2 / 16) % kThreads == 0, "bf16 chunks split evenly over threads");
};

template <int D, typename KvT>
constexpr std::size_t sharedBytes(int stages) {
    return static_cast<std::size_t>(Shape<D>::kRawOffset) +
           static_cast<std::size_t>(stages) * Shape<D>::kKeys * D * sizeof(KvT);
}

// ---- device helpers ------------------------------------------------------------------------------
__device__ __forceinline__ std::uint32_t packHalf2(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);  // .x (low 16 bits) = lo
    return *reinterpret_cast<const std::uint32_t*>(&h);
}
__device__ __forceinline__ float sumHalf2(std::uint32_t v) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&v));
    return f.x + f.y;
}

// Four 8×8 b16 matrices; lane l supplies the row address of matrix l/8, row l%8.
__device__ __forceinline__ void ldmatrixX4(std::uint32_t (&r)[4], const __half* p) {
    const unsigned a = sharedAddress(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
}
__device__ __forceinline__ void ldmatrixX4Trans(std::uint32_t (&r)[4], const __half* p) {
    const unsigned a = sharedAddress(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
}

// c (16×8 fp32) += a (16×16 fp16, row) · b (16×8 fp16, col). Fragment layouts (PTX ISA), with
// g = lane/4, t = lane%4: a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..];
// b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]; c0,c1 = C[g][2t..2t+1], c2,c3 = C[g+8][2t..2t+1].
__device__ __forceinline__ void mma16816(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                         std::uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Barrier among the kThreads threads (whole warps) of row group `group` (warp-uniform), on named
// barrier 1 + group (0 is __syncthreads'). Immediate ids, so ptxas reserves only the ones used.
template <int kThreads>
__device__ __forceinline__ void rowGroupBarrier(int group) {
    switch (group) {
        case 0: asm volatile("bar.sync 1, %0;\n" ::"n"(kThreads) : "memory"); break;
        case 1: asm volatile("bar.sync 2, %0;\n" ::"n"(kThreads) : "memory"); break;
        case 2: asm volatile("bar.sync 3, %0;\n" ::"n"(kThreads) : "memory"); break;
        default: asm volatile("bar.sync 4, %0;\n" ::"n"(kThreads) : "memory"); break;
    }
}

// Wait until at most stages − 1 of this thread's cp.async groups are pending.
__device__ __forceinline__ void cpAsyncWaitStages(int stages) {
    switch (stages) {
        case 1: cpAsyncWait<0>(); break;
        case 2: cpAsyncWait<1>(); break;
        case 3: cpAsyncWait<2>(); break;
        default: cpAsyncWait<3>(); break;
    }
}

// One 16-byte raw chunk (8 bf16 / fp16 or 4 fp32 values) → fp16 at dst (16 or 8 bytes, aligned);
// an fp16 cache's chunk is copied as it is (the same bits an fp32 value rounds to).
template <typename KvT>
__device__ __forceinline__ void convertChunk(const unsigned char* src, __half* dst) {
    if constexpr (std::is_same_v<KvT, __half>) {
        *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
    } else if constexpr (sizeof(KvT) == 2) {
        const uint4 u = *reinterpret_cast<const uint4*>(src);
        uint4 h;
        h.x = packHalf2(bf16LoToFloat(u.x), bf16HiToFloat(u.x));
        h.y = packHalf2(bf16LoToFloat(u.y), bf16HiToFloat(u.y));
        h.z = packHalf2(bf16LoToFloat(u.z), bf16HiToFloat(u.z));
        h.w = packHalf2(bf16LoToFloat(u.w), bf16HiToFloat(u.w));
        *reinterpret_cast<uint4*>(dst) = h;
    } else {
        const float4 f = *reinterpret_cast<const float4*>(src);
        *reinterpret_cast<uint2*>(dst) = make_uint2(packHalf2(f.x, f.y), packHalf2(f.z, f.w));
    }
}

// The fp16 halves of one zero 16-byte raw chunk at dst (16 or 8 bytes, aligned).
template <typename KvT>
__device__ __forceinline__ void zeroChunk(__half* dst) {
    if constexpr (sizeof(KvT) == 2) *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
    else *reinterpret_cast<uint2*>(dst) = make_uint2(0u, 0u);
}

// The band [lo, hi] of the query at `pos` (empty: lo > hi); with p.splits > 1 (one row) only
// piece `piece` of it: the band cut into p.splits pieces of whole BN-key tiles from its start
// (empty past the band's end).
template <int BN>
__device__ __forceinline__ void bandPiece(const AttentionPrefillParams& p, int pos, unsigned piece, int& lo, int& hi) {
    const long long len = static_cast<long long>(pos) + 1;
    long long first = 0;
    if (p.window > 0 && len - p.window > first) first = len - p.window;
    if (len - p.capacity > first) first = len - p.capacity;
    lo = static_cast<int>(first);
    hi = pos;  // pos < 0: empty band, NaN output
    if (p.splits > 1) {
        const long long n = static_cast<long long>(hi) - lo + 1;
        const long long length = n > 0 ? ((n + p.splits - 1) / p.splits + BN - 1) / BN * BN : 0;
        const long long pieceLo = lo + length * piece;
        const long long pieceHi = pieceLo + length - 1 < hi ? pieceLo + length - 1 : hi;
        lo = pieceLo <= pieceHi ? static_cast<int>(pieceLo) : 1;
        hi = pieceLo <= pieceHi ? static_cast<int>(pieceHi) : 0;
    }
}

// ---- kernel ----------------------------------------------------------------------------------------
// cap32 = min(capacity, INT_MAX) (positions are int, so the slot arithmetic fits 32 bits);
// stages = raw ring depth (1..kMaxStages), shared memory = sharedBytes<D, KvT>(stages).
// kFusedNormRope: p.fuseNormRope (validated: one row), "Fused norm + RoPE" above.
// kBulk: the raw ring filled by bulk copies (sm_90+, "K/V staging" above); the launcher picks it
// only on such devices (compiled for an older target, the instance is the cp.async form).
template <int D, typename KvT, bool kFusedNormRope, bool kBulk>
__global__ void __launch_bounds__(Shape<D>::kThreads, 1)
    attentionPrefillKernel(const AttentionPrefillParams p, const int cap32, const int stages) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    constexpr bool kBulkCopies = false;  // no bulk copies before sm_90 (nor is the bulk form launched there)
#else
    constexpr bool kBulkCopies = kBulk;
#endif
    using Sh = Shape<D>;
    constexpr int BN = Sh::kKeys;
    constexpr int WD = Sh::kWarpsD;
    constexpr int DW = Sh::kDims;
    constexpr int NT = Sh::kThreads;
    constexpr int kPitch = Sh::kPitch;
    constexpr int kRowBytes = D * static_cast<int>(sizeof(KvT));  // one key's row in the cache
    constexpr int kChunksPerKey = kRowBytes / 16;
    constexpr int kChunksPerThread = BN * kChunksPerKey / NT;
    constexpr int kHalvesPerChunk = 16 / static_cast<int>(sizeof(KvT));
    constexpr int kPhaseBytes = BN * kRowBytes;
    constexpr int kKeyTiles8 = BN / 8;   // n-tiles of S
    constexpr int kKeySteps = BN / 16;   // k-steps of P·V
    constexpr int kDimSteps = DW / 16;   // k-steps of q·Kᵀ
    constexpr int kDimTiles8 = DW / 8;   // n-tiles of O
    // Chunk i of a thread is byte chunk c of key keyBase + i·kKeyStride: the same column c for
    // every i, so all per-chunk shared addresses are one base plus compile-time offsets.
    constexpr int kKeyStride = NT / kChunksPerKey;
    static_assert(NT % kChunksPerKey == 0 && BN % kKeyStride == 0, "chunks split evenly over threads");

    extern __shared__ float4 smemRaw[];
    unsigned char* smem = reinterpret_cast<unsigned char*>(smemRaw);
    __half* kTile = reinterpret_cast<__half*>(smem);
    __half* vTile = kTile + BN * kPitch;
    float4* sred = reinterpret_cast<float4*>(smem + Sh::kKvBytes);
    int* hullScratch = reinterpret_cast<int*>(smem + Sh::kKvBytes + Sh::kSredBytes);
    std::uint64_t* const slotBars = reinterpret_cast<std::uint64_t*>(smem + Sh::kKvBytes + Sh::kSredBytes + Sh::kHullBytes);
    unsigned char* raw = smem + Sh::kRawOffset;

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int wm = warp / WD;
    const int wd = warp - wm * WD;
    const int grp = lane >> 2;  // fragment row (and row + 8)
    const int tig = lane & 3;   // fragment column pair
    const int kvh = blockIdx.x;
    const int mTile = static_cast<int>(gridDim.y - 1 - blockIdx.y);
    const int G = p.qHeads / p.kvHeads;
    const int mTotal = p.rows * G;
    const int dBase = wd * DW;
    GEMMA_PHASE_START();  // measurement builds only (PhaseClock.h): the phases below, marks 1-7
    if constexpr (kBulkCopies) {
        // Slot s: full (slotBars[s]) completes once per fill (one arrival, the issuer's, with its
        // bytes), empty (slotBars[kMaxStages + s]) once per conversion (one arrival per warp).
        // Visible to every thread and to the copy engine by the block barrier before the first issue.
        if (tid == 0) {
            for (int st = 0; st < stages; ++st) {
                initBarrier(slotBars + st, 1);
                initBarrier(slotBars + kMaxStages + st, Sh::kWarps);
            }
            fenceBarrierInit();
        }
    }
    gridDependencyWait();  // q, positions and the caches come from the kernels before (PDL)
    // No early trigger: the next kernel (a split launch's merge) launches as the blocks exit. The
    // merge's blocks, launched early, sat on SMs through the whole band walk, and every folded
    // GeGLU later in the step ran ~3.5 µs slower at depth 32768 (12b +3.5 % without it; tg
    // unchanged: docs/PERFORMANCE.md version 39).
    GEMMA_PHASE_MARK(1);  // the dependency wait

    // ---- this lane's two rows (fragment rows grp and grp + 8 of the warp's 16) -------------------
    // Band [lo, hi]; padded pairs past rows·g get the empty band [1, 0] and are never written.
    int lo[2], hi[2];
    bool rowOk[2];
    const float* qRow[2];
    float* oRow[2];
    int hullLo = INT_MAX, hullHi = INT_MIN;  // the warp's union of non-empty bands (consecutive rows)
    int fullLo = INT_MIN, fullHi = INT_MAX;  // intersection of the warp's real rows' bands
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int m = mTile * Sh::kRows + wm * 16 + grp + 8 * i;
        rowOk[i] = m < mTotal;
        lo[i] = 1;
        hi[i] = 0;
        qRow[i] = p.q;  // never read for a padded pair; a valid address all the same
        oRow[i] = nullptr;
        if (rowOk[i]) {
            const int r = m / G;
            const int h = kvh * G + (m - r * G);
            // With splits > 1 (one row, validated) this block attends to piece blockIdx.z only.
            bandPiece<BN>(p, p.positions[r], blockIdx.z, lo[i], hi[i]);
            qRow[i] = p.q + r * p.qStride + static_cast<long long>(h) * D;
            oRow[i] = p.out + r * p.outStride + static_cast<long long>(h) * D;
            if (lo[i] <= hi[i]) {
                hullLo = min(hullLo, lo[i]);
                hullHi = max(hullHi, hi[i]);
            }
            fullLo = max(fullLo, lo[i]);
            fullHi = min(fullHi, hi[i]);
        }
    }
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
        hullLo = min(hullLo, __shfl_xor_sync(0xffffffffu, hullLo, off));
        hullHi = max(hullHi, __shfl_xor_sync(0xffffffffu, hullHi, off));
        fullLo = max(fullLo, __shfl_xor_sync(0xffffffffu, fullLo, off));
        fullHi = min(fullHi, __shfl_xor_sync(0xffffffffu, fullHi, off));
    }
    if (lane == 0) {
        hullScratch[2 * warp] = hullLo;
        hullScratch[2 * warp + 1] = hullHi;
    }

    // ---- fused norm + RoPE (one decode row): this tile's query heads, fp16, into the K/V tile
    // area (row m − mTile·kRows at kPitch halves: the fragment reads below are conflict-free), and
    // in the blocks whose piece holds the query's position its K and V into the cache.
    [[maybe_unused]] __half* const qStaged = kTile;  // the K/V tiles are first written after the fragments are read
    if constexpr (kFusedNormRope) {
        static_assert(Sh::kRows * kPitch * 2 <= Sh::kKvBytes, "the staged q fits the K/V tile area");
        constexpr int kPairs = D / 64 > 0 ? D / 64 : 1;
        const QkvNormRopeParams& r = p.normRope;
        const int pos = p.positions[0];
        int pieceLo, pieceHi;
        bandPiece<BN>(p, pos, blockIdx.z, pieceLo, pieceHi);
        if (pieceLo <= pieceHi) {  // block-uniform; a piece without keys needs no q
            // Tasks, one warp each: K and V of the query's position (when this piece holds it, the
            // last of its band), then the tile's query heads.
            const int cacheTasks = r.k && pieceHi == pos ? 2 : 0;
            const int tileHeads = min(Sh::kRows, mTotal - mTile * Sh::kRows);
            for (int task = warp; task < cacheTasks + tileHeads; task += Sh::kWarps) {
                const bool query = task >= cacheTasks;
                const bool key = !query && task == 0;
                const int head = task - cacheTasks;  // query tasks: the head's row in the tile
                const float* src = query ? p.q + static_cast<long long>(kvh * G + mTile * Sh::kRows + head) * D
                                         : (key ? r.k : r.v) + static_cast<long long>(kvh) * D;
                float a[kPairs], b[kPairs];
                headNormRope(src, query ? r.qNormWeight : key ? r.kNormWeight : nullptr, r.invFreq, r.rotatedPairs, query || key, pos, D,
                             r.eps, a, b);
                if (query) {
                    // The unfused kernel's packHalf2 of the same fp32 values: the same bits.
                    __half* row = qStaged + head * kPitch;
                    storeHead(D, a, b, [&](int j, float v) { row[j] = __float2half_rn(v); });
                } else {
                    void* cache = key ? r.kCache : r.vCache;
                    const long long at = (static_cast<long long>(pos) % r.capacity * r.kvHeads + kvh) * D;
                    storeHead(D, a, b, [&](int j, float v) { storeKv(cache, r.kvDtype, at + j, v); });
                    // The block's tile loads read this row after the barrier below (cp.async: generic-
                    // proxy reads by the issuing threads, ordered after the barrier at block scope;
                    // bulk copies read through the async proxy, hence its fence).
                    __threadfence_block();
                    if constexpr (kBulkCopies) fenceProxyAsyncGlobal();
                }
            }
        }
    }

    // ---- q fragments (fp16, registers): rows grp / grp+8, this warp's dims -------------------------
    // (Fused: read from the staged heads once the barrier below has passed.)
    std::uint32_t qf[kDimSteps][4];
    if constexpr (!kFusedNormRope) {
#pragma unroll
        for (int ks = 0; ks < kDimSteps; ++ks) {
            const int d = dBase + ks * 16 + 2 * tig;
            const float2 zero = make_float2(0.0f, 0.0f);
            const float2 a0 = rowOk[0] ? __ldg(reinterpret_cast<const float2*>(qRow[0] + d)) : zero;
            const float2 a1 = rowOk[1] ? __ldg(reinterpret_cast<const float2*>(qRow[1] + d)) : zero;
            const float2 a2 = rowOk[0] ? __ldg(reinterpret_cast<const float2*>(qRow[0] + d + 8)) : zero;
            const float2 a3 = rowOk[1] ? __ldg(reinterpret_cast<const float2*>(qRow[1] + d + 8)) : zero;
            qf[ks][0] = packHalf2(a0.x, a0.y);
            qf[ks][1] = packHalf2(a1.x, a1.y);
            qf[ks][2] = packHalf2(a2.x, a2.y);
            qf[ks][3] = packHalf2(a3.x, a3.y);
        }
    }

    float o[kDimTiles8][4];
#pragma unroll
    for (int j = 0; j < kDimTiles8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float mRun[2] = {-INFINITY, -INFINITY};  // running max of scale·log2(e)·q·k
    float lRun[2] = {0.0f, 0.0f};            // this lane's share of the running sum (quad-summed at the end)
    const float scaleLog2 = p.scale * 1.4426950408889634f;

    __syncthreads();  // hull scratch complete (fused: also the staged q and the cache row written)
    GEMMA_PHASE_MARK(2);  // the prologue: q fragments, the hull (fused: the norm + RoPE)
    int kLo = INT_MAX, kHi = INT_MIN;
#pragma unroll
    for (int w = 0; w < Sh::kWarps; ++w) {
        kLo = min(kLo, hullScratch[2 * w]);
        kHi = max(kHi, hullScratch[2 * w + 1]);
    }
    const int nTiles = kHi >= kLo ? (kHi - kLo) / BN + 1 : 0;

    // ---- staging: phase 2t = K tile t, phase 2t + 1 = V tile t -------------------------------------
    const unsigned char* kSrc = static_cast<const unsigned char*>(p.kCache) + static_cast<long long>(kvh) * kRowBytes;
    const unsigned char* vSrc = static_cast<const unsigned char*>(p.vCache) + static_cast<long long>(kvh) * kRowBytes;
    const long long slotBytes = static_cast<long long>(p.kvHeads) * kRowBytes;
    const int keyBase = tid / kChunksPerKey;  // this thread's first key of a tile
    const int chunk = tid % kChunksPerKey;    // and its 16-byte column within the key's row

    // Copies `phase` into raw slot `slot`. cp.async form: this thread's chunks; always commits one
    // group (empty past the last phase) so that the wait count stays `stages − 1`. Bulk form, the
    // issuing warp only (kIssuer), once every warp has converted the slot's previous fill: arms the
    // slot's full barrier with the live rows' bytes and copies them (one kv head: one copy per
    // contiguous run of the ring; else one per row); nothing past the last phase.
    constexpr int kIssuer = Sh::kWarps - 1;  // at a decode row its rows are padding: no mma to delay
    auto issue = [&](int phase, int slot) {
        if constexpr (kBulkCopies) {
            if (phase < 2 * nTiles && warp == kIssuer) {
                const unsigned char* src = (phase & 1) ? vSrc : kSrc;
                unsigned char* dst = raw + slot * kPhaseBytes;
                const int first = kLo + (phase >> 1) * BN;
                const int rows = min(BN, kHi - first + 1);
                std::uint64_t* bar = slotBars + slot;
                fenceProxyAsyncShared();  // the block's reads of this slot (before the last barrier) first
                if (lane == 0) expectBytes(bar, static_cast<unsigned>(rows * kRowBytes));
                __syncwarp();
                if (slotBytes == kRowBytes) {
                    if (lane == 0) {
                        int done = 0, ring = first % cap32;
                        while (done < rows) {
                            const int n = min(rows - done, cap32 - ring);
                            bulkCopy(dst + done * kRowBytes, src + static_cast<long long>(ring) * kRowBytes,
                                     static_cast<unsigned>(n * kRowBytes), bar);
                            done += n;
                            ring = 0;
                        }
                    }
                } else {
                    for (int row = lane; row < rows; row += 32)
                        bulkCopy(dst + row * kRowBytes, src + static_cast<long long>((first + row) % cap32) * slotBytes,
                                 static_cast<unsigned>(kRowBytes), bar);
                }
            }
            return;
        }
        if (phase < 2 * nTiles) {
            const unsigned char* src = (phase & 1) ? vSrc : kSrc;
            unsigned char* dst = raw + slot * kPhaseBytes;
            const int first = kLo + (phase >> 1) * BN + keyBase;
            int ring = first % cap32;
#pragma unroll
            for (int i = 0; i < kChunksPerThread; ++i) {
                const bool live = first + i * kKeyStride <= kHi;
                const unsigned char* g = live ? src + ring * slotBytes + chunk * 16 : src;
                cpAsync16(dst + (tid + i * NT) * 16, g, live);  // !live: 16 zero bytes, nothing read
                ring += kKeyStride;
                while (ring >= cap32) ring -= cap32;  // at most once unless capacity < kKeyStride
            }
        }
        cpAsyncCommit();
    };
    // Converts this thread's chunks of `phase` (raw slot `slot`; the ones it copied, cp.async form)
    // into the fp16 tile. Bulk form: keys past the last live one were not copied; their halves are
    // written as zeros, the bits the cp.async form's zero-filled chunks convert to.
    auto convert = [&](int phase, int slot) {
        if (phase >= 2 * nTiles) return;
        const unsigned char* src = raw + slot * kPhaseBytes + tid * 16;
        __half* dst = ((phase & 1) ? vTile : kTile) + keyBase * kPitch + chunk * kHalvesPerChunk;
        [[maybe_unused]] const int firstKey = kLo + (phase >> 1) * BN + keyBase;
#pragma unroll
        for (int i = 0; i < kChunksPerThread; ++i) {
            if (kBulkCopies && firstKey + i * kKeyStride > kHi) zeroChunk<KvT>(dst + i * kKeyStride * kPitch);
            else convertChunk<KvT>(src + i * NT * 16, dst + i * kKeyStride * kPitch);
        }
    };
    int slot = 0;  // raw slot of the next phase to convert (= phase % stages)
    auto step = [&](int phase) {
        if constexpr (kBulkCopies) {
            // Fill number phase / stages of this slot: its full and empty barriers' parity.
            const unsigned parity = static_cast<unsigned>((phase / stages) & 1);
            if (phase < 2 * nTiles) {
                waitParity(slotBars + slot, parity);
                convert(phase, slot);
                __syncwarp();  // the warp's reads of the slot before its arrival (release)
                if (lane == 0) arrive(slotBars + kMaxStages + slot);
                // The refill as early as the cp.async form's: once every warp has converted this
                // fill (acquire), `stages` phases ahead.
                if (warp == kIssuer && phase + stages < 2 * nTiles) {
                    waitParity(slotBars + kMaxStages + slot, parity);
                    issue(phase + stages, slot);
                }
            }
        } else {
            cpAsyncWaitStages(stages);
            convert(phase, slot);
            issue(phase + stages, slot);  // refill the slot this thread just drained
        }
        slot = slot + 1 == stages ? 0 : slot + 1;
    };

    // ldmatrix row addresses. K (B of S, non-transposed): matrices (keys 0-7 | dims 0-7),
    // (keys 0-7 | dims 8-15), (keys 8-15 | dims 0-7), (keys 8-15 | dims 8-15) → b0, b1 of key
    // n-tile 0, then of n-tile 1. V (B of P·V, transposed): (keys 0-7 | dims 0-7), (keys 8-15 |
    // dims 0-7), (keys 0-7 | dims 8-15), (keys 8-15 | dims 8-15) → b0, b1 of dim n-tile 0, then 1.
    const __half* kFrag = kTile + ((lane & 7) + ((lane >> 4) & 1) * 8) * kPitch + dBase + ((lane >> 3) & 1) * 8;
    const __half* vFrag = vTile + ((lane & 7) + ((lane >> 3) & 1) * 8) * kPitch + dBase + ((lane >> 4) & 1) * 8;

    if (nTiles > 0) {
        for (int s = 0; s < stages; ++s) issue(s, s);
        if constexpr (kFusedNormRope) {
            // The staged heads as this warp's fragments (padded rows: zero, as unfused).
            const std::uint32_t* row0 = reinterpret_cast<const std::uint32_t*>(qStaged + (wm * 16 + grp) * kPitch + dBase + 2 * tig);
            const std::uint32_t* row1 = row0 + 8 * kPitch / 2;
#pragma unroll
            for (int ks = 0; ks < kDimSteps; ++ks) {
                qf[ks][0] = rowOk[0] ? row0[ks * 8] : 0u;
                qf[ks][1] = rowOk[1] ? row1[ks * 8] : 0u;
                qf[ks][2] = rowOk[0] ? row0[ks * 8 + 4] : 0u;
                qf[ks][3] = rowOk[1] ? row1[ks * 8 + 4] : 0u;
            }
            __syncthreads();  // every warp holds its q: the first K tile may overwrite the staged heads
        }
        GEMMA_PHASE_MARK(3);  // the first phases issued
        step(0);  // K tile 0
        for (int t = 0; t < nTiles; ++t) {
            __syncthreads();  // (A) K(t) visible; P·V(t−1) done everywhere → V tile free
            GEMMA_PHASE_MARK(4);  // K tile t arrived (and P·V of t − 1 finished everywhere)
            step(2 * t + 1);  // V(t)
            const int first = kLo + t * BN;
            // Warp-uniform (and uniform over the WD warps of a row group: same rows).
            const bool live = first <= hullHi && first + BN - 1 >= hullLo;
            std::uint32_t pf[kKeySteps][4];  // P as A fragments of the P·V mma
            if (live) {
                // S partial over this warp's dims.
                float s[kKeyTiles8][4];
#pragma unroll
                for (int j = 0; j < kKeyTiles8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
                for (int ks = 0; ks < kDimSteps; ++ks) {
#pragma unroll
                    for (int np = 0; np < kKeyTiles8 / 2; ++np) {
                        std::uint32_t b[4];
                        ldmatrixX4(b, kFrag + np * 16 * kPitch + ks * 16);
                        mma16816(s[2 * np], qf[ks], b[0], b[1]);
                        mma16816(s[2 * np + 1], qf[ks], b[2], b[3]);
                    }
                }
                if constexpr (WD > 1) {
                    // Sum the row group's WD partials. Pairwise and commutative: warps w and w^1
                    // form the same pair sum, and (pair + other pair) is the same in every warp,
                    // so all WD warps hold bitwise-identical scores.
                    float4* mine = sred + warp * kKeyTiles8 * 32 + lane;
#pragma unroll
                    for (int j = 0; j < kKeyTiles8; ++j) mine[j * 32] = make_float4(s[j][0], s[j][1], s[j][2], s[j][3]);
                    rowGroupBarrier<WD * 32>(wm);
                    const float4* group = sred + wm * WD * kKeyTiles8 * 32 + lane;
#pragma unroll
                    for (int j = 0; j < kKeyTiles8; ++j) {
                        const float4 x = group[((wd ^ 1) * kKeyTiles8 + j) * 32];
                        s[j][0] += x.x;
                        s[j][1] += x.y;
                        s[j][2] += x.z;
                        s[j][3] += x.w;
                        if constexpr (WD == 4) {
                            const float4 y = group[((wd ^ 2) * kKeyTiles8 + j) * 32];
                            const float4 z = group[((wd ^ 3) * kKeyTiles8 + j) * 32];
                            s[j][0] += y.x + z.x;
                            s[j][1] += y.y + z.y;
                            s[j][2] += y.z + z.z;
                            s[j][3] += y.w + z.w;
                        }
                    }
                }
                // Scale (base 2) and mask keys outside each row's band (and the zero-filled tail).
                const bool inside = first >= fullLo && first + BN - 1 <= fullHi;
#pragma unroll
                for (int j = 0; j < kKeyTiles8; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        float v = s[j][e] * scaleLog2;
                        if (!inside) {
                            const int key = first + j * 8 + 2 * tig + (e & 1);
                            if (key < lo[e >> 1] || key > hi[e >> 1]) v = -INFINITY;
                        }
                        s[j][e] = v;
                    }
                // Online softmax: a row lives in the 4 lanes of a quad.
                float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
                for (int j = 0; j < kKeyTiles8; ++j) {
                    mx[0] = fmaxf(mx[0], fmaxf(s[j][0], s[j][1]));
                    mx[1] = fmaxf(mx[1], fmaxf(s[j][2], s[j][3]));
                }
                float base[2], alpha[2];
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
                    mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
                    const float mNew = fmaxf(mRun[i], mx[i]);
                    // A row with no live key yet keeps m = −inf; subtract 0 then (exp2(−inf) = 0).
                    base[i] = mNew == -INFINITY ? 0.0f : mNew;
                    alpha[i] = exp2f(mRun[i] - base[i]);
                    mRun[i] = mNew;
                }
                float rowSum[2] = {0.0f, 0.0f};
#pragma unroll
                for (int kk = 0; kk < kKeySteps; ++kk)
#pragma unroll
                    for (int hh = 0; hh < 2; ++hh) {
                        const int j = 2 * kk + hh;
                        // Accumulator (row g / g+8, keys 2t..2t+1 of n-tile j) = A fragment regs
                        // a0/a1 (hh = 0: keys 0-7 of the k-step) or a2/a3 (hh = 1: keys 8-15).
                        const std::uint32_t top = packHalf2(exp2f(s[j][0] - base[0]), exp2f(s[j][1] - base[0]));
                        const std::uint32_t bottom = packHalf2(exp2f(s[j][2] - base[1]), exp2f(s[j][3] - base[1]));
                        pf[kk][2 * hh] = top;
                        pf[kk][2 * hh + 1] = bottom;
                        rowSum[0] += sumHalf2(top);
                        rowSum[1] += sumHalf2(bottom);
                    }
#pragma unroll
                for (int i = 0; i < 2; ++i) lRun[i] = lRun[i] * alpha[i] + rowSum[i];
                // Rescale O only when a row's max moved (alpha = exp2(0) = 1 exactly otherwise):
                // after the first tiles it rarely does, and at d 512 the rescale is 64 FMULs per
                // 32 mma of the warp.
                if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
                    for (int j = 0; j < kDimTiles8; ++j) {
                        o[j][0] *= alpha[0];
                        o[j][1] *= alpha[0];
                        o[j][2] *= alpha[1];
                        o[j][3] *= alpha[1];
                    }
                }
            } else if constexpr (WD > 1) {
                // A row group with no live key in this tile still takes its named barrier, so all
                // warps pass the same number of barriers per tile. Not needed for correctness
                // (every shared-memory hand-over is ordered by the __syncthreads() A and C), but
                // compute-sanitizer's racecheck counts barriers per warp and, with uneven counts,
                // reported the V/K tile refills after (A)/(C) as WAR hazards (2026-11-29; a host
                // emulation with exact happens-before tracking found no race either way).
                rowGroupBarrier<WD * 32>(wm);
            }
            __syncthreads();      // (C) V(t) visible; S(t) done everywhere → K tile free
            GEMMA_PHASE_MARK(5);  // scores and softmax of tile t, V tile t arrived
            step(2 * t + 2);      // K(t+1)
            if (live) {
#pragma unroll
                for (int kk = 0; kk < kKeySteps; ++kk)
#pragma unroll
                    for (int np = 0; np < kDimTiles8 / 2; ++np) {
                        std::uint32_t b[4];
                        ldmatrixX4Trans(b, vFrag + kk * 16 * kPitch + np * 16);
                        mma16816(o[2 * np], pf[kk], b[0], b[1]);
                        mma16816(o[2 * np + 1], pf[kk], b[2], b[3]);
                    }
            }
        }
        cpAsyncWait<0>();  // only empty groups remain; leave none behind
    }
    GEMMA_PHASE_MARK(6);  // the last P·V issued (thread 0's)

    // The rows' sums over the 4 lanes of a quad (every lane holds its share).
    float l[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        l[i] = lRun[i];
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    }

    // ---- split launch: this piece's partials (AttentionPrefillParams::splits) ----------------------
    if (p.splits > 1) {
        const bool anyKeys = nTiles > 0;  // one row: every key of a non-empty piece is in its band
        constexpr float kLn2 = 0.6931471805599453f;  // mRun is in units of log2(e)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            if (!rowOk[i]) continue;
            const int headInGroup = mTile * Sh::kRows + wm * 16 + grp + 8 * i;  // row 0: m = head in group
            const long long idx = (static_cast<long long>(kvh) * G + headInGroup) * p.splits + blockIdx.z;
            if (anyKeys) {
#pragma unroll
                for (int j = 0; j < kDimTiles8; ++j)
                    *reinterpret_cast<float2*>(p.partO + idx * D + dBase + j * 8 + 2 * tig) = make_float2(o[j][2 * i], o[j][2 * i + 1]);
            }
            if (wd == 0 && tig == 0) {
                p.partML[idx * 2] = anyKeys ? mRun[i] * kLn2 : -INFINITY;
                p.partML[idx * 2 + 1] = anyKeys ? l[i] : 0.0f;
            }
        }
        GEMMA_PHASE_END(7);  // the partials stored (thread 0's)
        return;
    }

    // ---- normalise and store (this warp's dims) ----------------------------------------------------
    // Empty band: l = 0, O = 0 → NaN, as the decode kernel.
    const float inv[2] = {1.0f / l[0], 1.0f / l[1]};
#pragma unroll
    for (int j = 0; j < kDimTiles8; ++j) {
        const int d = dBase + j * 8 + 2 * tig;
        if (rowOk[0]) *reinterpret_cast<float2*>(oRow[0] + d) = make_float2(o[j][0] * inv[0], o[j][1] * inv[0]);
        if (rowOk[1]) *reinterpret_cast<float2*>(oRow[1] + d) = make_float2(o[j][2] * inv[1], o[j][3] * inv[1]);
    }
    GEMMA_PHASE_END(7);  // the output stored (thread 0's)
}

// ---- host side ---------------------------------------------------------------------------------------
struct Plan {
    int device = -1;
    int stages = 0;
    std::size_t smem = 0;
    int blocksPerSm = 0;
};

inline bool aligned8(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 7u) == 0; }

// Staging depth for one instantiation on one device, cached per host thread: the depth that
// maximises blocks/SM × stages (cp.async tiles in flight per SM), ties to more blocks. Occupancy
// comes from the runtime, so registers and the device's shared memory both count.
template <int D, typename KvT, bool kFusedNormRope, bool kBulk>
KernelStatus planFor(const DeviceFacts& facts, Plan& out) {
    thread_local Plan cached;
    if (cached.device == facts.device) {
        out = cached;
        return KernelStatus::Ok;
    }
    const auto kernel = attentionPrefillKernel<D, KvT, kFusedNormRope, kBulk>;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             facts.maxSharedPerBlockOptin) != cudaSuccess)
        return KernelStatus::LaunchFailed;
    // A hint (the largest shared-memory carveout, for the occupancy below); a device that refuses
    // it still runs the kernel, so clear the error rather than fail the launch.
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                             cudaSharedmemCarveoutMaxShared) != cudaSuccess)
        (void)cudaGetLastError();
    Plan best;
    int bestScore = 0;
    for (int stages = 1; stages <= kMaxStages; ++stages) {
        const std::size_t smem = sharedBytes<D, KvT>(stages);
        if (smem > static_cast<std::size_t>(facts.maxSharedPerBlockOptin)) break;
        int blocks = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, Shape<D>::kThreads, smem) !=
            cudaSuccess)
            return KernelStatus::LaunchFailed;
        if (blocks < 1) break;
        const int score = blocks * stages;
        if (score > bestScore || (score == bestScore && blocks > best.blocksPerSm)) {
            best = Plan{facts.device, stages, smem, blocks};
            bestScore = score;
        }
    }
    if (best.stages == 0) return KernelStatus::Unsupported;  // not even one stage fits
    cached = best;
    out = best;
    return KernelStatus::Ok;
}

KernelStatus validate(const AttentionPrefillParams& p) {
    if (!p.q || !p.kCache || !p.vCache || !p.positions || !p.out) return KernelStatus::InvalidArgument;
    if (p.qHeads < 1 || p.kvHeads < 1 || p.qHeads % p.kvHeads != 0 || p.rows < 1 || p.capacity < 1)
        return KernelStatus::InvalidArgument;
    if (p.headDim != 32 && p.headDim != 64 && p.headDim != 128 && p.headDim != 256 && p.headDim != 512)
        return KernelStatus::Unsupported;
    const std::int64_t width = static_cast<std::int64_t>(p.qHeads) * p.headDim;
    if (p.qStride < width || p.qStride % 2 != 0 || p.outStride < width || p.outStride % 2 != 0)
        return KernelStatus::InvalidArgument;
    if (!aligned8(p.q) || !aligned8(p.out) || !aligned16(p.kCache) || !aligned16(p.vCache))
        return KernelStatus::InvalidArgument;
    if (static_cast<std::int64_t>(p.rows) * p.qHeads > INT_MAX) return KernelStatus::Unsupported;
    if (p.splits < 1 || p.splits > 65535) return KernelStatus::InvalidArgument;
    if (p.splits > 1 && (p.rows != 1 || !p.partO || !p.partML || !aligned8(p.partO) || !aligned8(p.partML)))
        return KernelStatus::InvalidArgument;
    if (p.fuseNormRope && (p.rows != 1 || !normRopeDescribes(p.normRope, p))) return KernelStatus::InvalidArgument;
    return KernelStatus::Ok;
}

// Calls f.template operator()<D, KvT, kFusedNormRope, kBulk>() for the parameters' head dim, cache
// dtype, fuseNormRope and the staging form (`bulk`: the launcher's choice).
template <typename F>
KernelStatus dispatch(const AttentionPrefillParams& p, bool bulk, F&& f) {
    const auto forFusion = [&]<int D, typename KvT>() {
        if (p.fuseNormRope)
            return bulk ? f.template operator()<D, KvT, true, true>() : f.template operator()<D, KvT, true, false>();
        return bulk ? f.template operator()<D, KvT, false, true>() : f.template operator()<D, KvT, false, false>();
    };
    const auto forDim = [&]<int D>() {
        return withKvStorage(p.kvDtype, [&]<typename KvT>() { return forFusion.template operator()<D, KvT>(); });
    };
    switch (p.headDim) {
        case 32: return forDim.template operator()<32>();
        case 64: return forDim.template operator()<64>();
        case 128: return forDim.template operator()<128>();
        case 256: return forDim.template operator()<256>();
        case 512: return forDim.template operator()<512>();
        default: return KernelStatus::Unsupported;
    }
}

// Grid for an instantiation: (kvHeads, query tiles, splits). False when the tile count exceeds grid.y.
template <int D>
bool gridFor(const AttentionPrefillParams& p, dim3& grid) {
    const std::int64_t pairs = static_cast<std::int64_t>(p.rows) * (p.qHeads / p.kvHeads);
    const std::int64_t tiles = (pairs + Shape<D>::kRows - 1) / Shape<D>::kRows;
    if (tiles > 65535) return false;
    grid = dim3(static_cast<unsigned>(p.kvHeads), static_cast<unsigned>(tiles), static_cast<unsigned>(p.splits));
    return true;
}

}  // namespace prefilldetail

namespace prefilldetail {
// The launch shape for p on the current device, shared by the plan and the launcher so both pick
// the same: validates p, then calls f.template operator()<D, KvT, kFusedNormRope, kBulk>(plan, grid).
template <typename F>
KernelStatus withLaunchShape(const AttentionPrefillParams& p, F&& f) {
    const KernelStatus valid = validate(p);
    if (valid != KernelStatus::Ok) return valid;
    DeviceFacts facts;
    if (queryDeviceFacts(facts) != KernelStatus::Ok) return KernelStatus::LaunchFailed;
    const bool bulk = p.bulkCopies && facts.computeMajor >= 9;
    return dispatch(p, bulk, [&]<int D, typename KvT, bool kFusedNormRope, bool kBulk>() {
        Plan pl;
        const KernelStatus st = planFor<D, KvT, kFusedNormRope, kBulk>(facts, pl);
        if (st != KernelStatus::Ok) return st;
        dim3 grid;
        if (!gridFor<D>(p, grid)) return KernelStatus::Unsupported;
        return f.template operator()<D, KvT, kFusedNormRope, kBulk>(pl, grid);
    });
}
}  // namespace prefilldetail

bool normRopeDescribes(const QkvNormRopeParams& r, const AttentionPrefillParams& p) {
    if (r.q != p.q || !r.qNormWeight || r.positions != p.positions || r.qHeads != p.qHeads || r.headDim != p.headDim ||
        r.rows != 1 || r.qStride != p.qStride || r.rotatedPairs < 0 || r.rotatedPairs > p.headDim / 2 ||
        (r.rotatedPairs > 0 && !r.invFreq))
        return false;
    return !r.k || (r.v && r.kNormWeight && r.kCache == p.kCache && r.vCache == p.vCache && r.kvDtype == p.kvDtype &&
                    r.capacity == p.capacity && r.kvHeads == p.kvHeads);
}

KernelStatus attentionPrefillPlan(const AttentionPrefillParams& p, AttentionPrefillPlan& plan) {
    using namespace prefilldetail;
    return withLaunchShape(p, [&]<int D, typename KvT, bool, bool kBulk>(const Plan& pl, dim3 grid) {
        plan.bulkCopies = kBulk;
        plan.threads = Shape<D>::kThreads;
        plan.rowsPerBlock = Shape<D>::kRows;
        plan.keysPerTile = Shape<D>::kKeys;
        plan.rawStages = pl.stages;
        plan.sharedBytes = pl.smem;
        plan.blocksPerSm = pl.blocksPerSm;
        plan.gridX = grid.x;
        plan.gridY = grid.y;
        return KernelStatus::Ok;
    });
}

KernelStatus launchAttentionPrefill(const AttentionPrefillParams& p, cudaStream_t stream) {
    using namespace prefilldetail;
    const int cap32 = p.capacity > INT_MAX ? INT_MAX : static_cast<int>(p.capacity);
    return withLaunchShape(p, [&]<int D, typename KvT, bool kFusedNormRope, bool kBulk>(const Plan& pl, dim3 grid) {
        const cudaError_t err = launchKernel(attentionPrefillKernel<D, KvT, kFusedNormRope, kBulk>, grid, dim3(Shape<D>::kThreads), pl.smem, stream,
                                             p.programmaticLaunch, p, cap32, pl.stages);
        return err == cudaSuccess ? KernelStatus::Ok : KernelStatus::LaunchFailed;
    });
}

}  // namespace gemma::cuda
