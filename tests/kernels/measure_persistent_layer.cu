// Measurement tool (not a test): gate B of docs/PERFORMANCE.md's lever 1 (versions 25-26). The
// 12b's decode matvecs, 48 layers × (q/k/v 8192 × 3840, o 3840 × 4096, gate/up GeGLU 2 × 15360 ×
// 3840, down 3840 × 15360) on random tiled FP4 weights, run three ways over the same weights:
//   launches     the engine's kernels (launchFp4Matvec / launchFp4GegluMatvec, integer x, tiled,
//                programmatic launch), one launch per op, 192 per step;
//   tile per block  one cooperative kernel for the whole step (version 25): one block per SM, a
//                producer warp that copies each tile's items (codes and scale words, up to 16
//                groups per stage) into a shared-memory ring with cp.async.bulk and never waits
//                for an op boundary, and 16 consumer warps that stage x as integers after each
//                op's grid barrier (one monotonic counter), run Fp4Matvec.cu's integer mma path on
//                the items and write the tile's outputs; block b takes tiles b, b + 132, ...;
//   even split   the same skeleton with each op's items cut into equal runs per block (version
//                26; see evenSplitStepKernel), in several forms: items per consumer warp per
//                stage, consumer warps (16, 24, 30), copies in flight; each timed as the step and
//                as its decode alone (no barriers, no x staging), with block 0's clock per op
//                kind (barrier, x staging, its run).
// The ops chain as in a step without its norms and attention: o reads q/k/v's first 4096 outputs,
// the GeGLU o's, down the GeGLU's, the next layer's q/k/v the down's. Checks first: every op of
// the first 4 layers of each persistent form against the engine's kernel on that form's own
// input (the summation order differs: within 1e-5 of the output norm, not bit-identical), with
// the even split's outputs poisoned with NaN before each form's run. Then the time per step of
// each, as the median of 7 runs, against the read ceiling (StreamRead) measured in the same run.
//   measure_persistent_layer     # exit 77 without an sm_90+ CUDA device; 1 when a check fails
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "../../kernels/cuda/Fp4Matvec.cu"  // standalone project: no kernel library
#include "../../kernels/cuda/StreamRead.cu"
#include "PersistentProbe.h"
#include "kernels/Fp4Tiled.h"

namespace {

using gemma::cuda::Fp4MatvecParams;
using namespace gemma::probe;
namespace fd = gemma::cuda::fp4detail;
namespace tiled = gemma::formats::fp4tiled;

constexpr int kLayers = 48;
constexpr int kOpsPerLayer = 4;
constexpr int kOps = kLayers * kOpsPerLayer;
constexpr int kConsumerWarps = 16;
constexpr int kThreads = 32 * (kConsumerWarps + 1);
constexpr int kStageGroups = kConsumerWarps;            // items per weight per stage
constexpr int kStageCodeBytes = kStageGroups * 1024;    // per weight
constexpr int kStageScaleBytes = kStageGroups * 32;     // per weight
constexpr int kStageBytes = 2 * (kStageCodeBytes + kStageScaleBytes);  // room for gate and up
constexpr int kStages = 4;
constexpr int kMaxIn = 15360;
constexpr int kMaxGroups = kMaxIn / 128;

// One op of the step: its weight (and the GeGLU's up weight) in the tiled layout, its input and
// output vectors.
struct Op {
    const std::uint8_t* codes;
    const std::uint32_t* scales;  // tiled scale words
    const std::uint8_t* upCodes;  // GeGLU only
    const std::uint32_t* upScales;
    const float* x;
    float* y;
    int out, in;
    int geglu;
};

struct PersistentArgs {
    const Op* ops;       // [kOps]
    unsigned* barrier;   // one monotonic counter, zeroed before each launch
};

constexpr std::size_t planesBytes() { return static_cast<std::size_t>(fd::integerXBytes(kMaxGroups) + 127) / 128 * 128; }
constexpr std::size_t smemBytes() { return static_cast<std::size_t>(kStages) * kStageBytes + planesBytes(); }

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
// The consumer warps' own barrier (the producer warp never joins it).
template <int CW = kConsumerWarps>
__device__ __forceinline__ void consumersSync() { asm volatile("bar.sync 1, %0;\n" ::"n"(32 * CW) : "memory"); }

// Op k's start (k > 0): every block's consumers have written op k − 1's output. One monotonic
// counter, zeroed before the launch: consumer thread c = 0 of each block adds its arrival and
// waits for k · gridDim.x of them.
template <int CW = kConsumerWarps>
__device__ __forceinline__ void opBarrier(unsigned* counter, int k, int c) {
    consumersSync<CW>();
    if (c == 0) {
        __threadfence();
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(counter) : "memory");
        while (gemma::cuda::loadAcquire(counter) < static_cast<unsigned>(k) * gridDim.x) {
        }
    }
    consumersSync<CW>();
}

// x (global, written by the previous op of this launch: read through L2) → the integer planes and
// group factors of Fp4Matvec.cu's integer path, by the consumer threads (c = their index), with
// that path's own conversion (convertXPieces) and constant columns.
__device__ void stageX(const float* x, int in, std::uint8_t* planes, float* factors, int c) {
    const int groups = in / 128;  // every input width here is a whole number of groups
    const int pieces = groups * 8;
    constexpr int kStagers = 32 * kConsumerWarps;
    fd::writeConstantColumns(planes, groups, static_cast<unsigned>(c));
    for (int base = 0; base < pieces; base += kStagers) {  // warp-uniform trip count
        const int piece = base + c;
        float4 v[1][4];
#pragma unroll
        for (int f = 0; f < 4; ++f)
            v[0][f] = piece < pieces ? __ldcg(reinterpret_cast<const float4*>(x) + piece * 4 + f) : make_float4(0.f, 0.f, 0.f, 0.f);
        fd::convertXPieces<1>(v, base, pieces, fd::planeBytes(groups), planes, factors, c, kStagers);
    }
}
#endif

__global__ void __launch_bounds__(kThreads, 1) persistentStepKernel(PersistentArgs args) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) std::uint8_t smem[];
    __shared__ __align__(8) std::uint64_t full[kStages], empty[kStages];
    __shared__ float partial[2][kConsumerWarps][2][16];  // [tile parity][warp][gate, up][row]
    std::uint8_t* ring = smem;
    std::uint8_t* planes = smem + kStages * kStageBytes;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) initRing(full, empty, kStages, kConsumerWarps);
    __syncthreads();
    if (warp == 0) {  // the producer: every op's items for this block's tiles, never waiting for a boundary
        if (lane == 0) {
            unsigned use = 0;
            for (int k = 0; k < kOps; ++k) {
                const Op op = args.ops[k];
                const int groups = op.in / 128;
                const int tiles = (op.out + 15) / 16;
                for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
                    for (int g0 = 0; g0 < groups; g0 += kStageGroups, ++use) {
                        const int n = min(kStageGroups, groups - g0);
                        const int s = static_cast<int>(use % kStages);
                        if (use >= kStages) waitParity(&empty[s], (use / kStages - 1) & 1);
                        std::uint8_t* stage = ring + s * kStageBytes;
                        const std::int64_t item = static_cast<std::int64_t>(t) * groups + g0;
                        const unsigned codeBytes = static_cast<unsigned>(n) * 1024, scaleBytes = static_cast<unsigned>(n) * 32;
                        expectBytes(&full[s], (codeBytes + scaleBytes) * (op.geglu ? 2 : 1));
                        bulkCopy(stage, op.codes + item * 1024, codeBytes, &full[s]);
                        bulkCopy(stage + 2 * kStageCodeBytes, op.scales + item * 8, scaleBytes, &full[s]);
                        if (op.geglu) {
                            bulkCopy(stage + kStageCodeBytes, op.upCodes + item * 1024, codeBytes, &full[s]);
                            bulkCopy(stage + 2 * kStageCodeBytes + kStageScaleBytes, op.upScales + item * 8, scaleBytes, &full[s]);
                        }
                    }
                }
            }
        }
        return;
    }
    const int cw = warp - 1;                // consumer warp 0..15
    const int c = static_cast<int>(threadIdx.x) - 32;
    const int g = lane >> 2, q = lane & 3;
    unsigned use = 0;
    int tileCount = 0;                      // tiles finished by this block (partial's parity)
    for (int k = 0; k < kOps; ++k) {
        const Op op = args.ops[k];
        const int groups = op.in / 128;
        const int tiles = (op.out + 15) / 16;
        if (k > 0) opBarrier(args.barrier, k, c);
        float* factors = reinterpret_cast<float*>(planes + fd::kPlanes * fd::planeBytes(groups));
        stageX(op.x, op.in, planes, factors, c);
        consumersSync();
        const fd::IntegerLane il = fd::integerLane(g, q, planes, factors, groups);
        for (int t = blockIdx.x; t < tiles; t += gridDim.x, ++tileCount) {
            float acc[4] = {0.f, 0.f, 0.f, 0.f}, accUp[4] = {0.f, 0.f, 0.f, 0.f};
            for (int g0 = 0; g0 < groups; g0 += kStageGroups, ++use) {
                const int n = min(kStageGroups, groups - g0);
                const int s = static_cast<int>(use % kStages);
                waitParity(&full[s], (use / kStages) & 1);
                if (cw < n) {
                    const std::uint8_t* stage = ring + s * kStageBytes;
                    auto load = [&](int weight) {
                        const uint4* item = reinterpret_cast<const uint4*>(stage + weight * kStageCodeBytes + cw * 1024);
                        fd::GroupLoad l;
                        l.rowA = item[g * 4 + q];
                        l.rowB = item[32 + g * 4 + q];
                        l.scales = reinterpret_cast<const std::uint32_t*>(stage + 2 * kStageCodeBytes + weight * kStageScaleBytes + cw * 32)[g];
                        return l;
                    };
                    const fd::IntegerX xg = fd::loadIntegerX(il.b, g0 + cw);
                    fd::groupDotInteger<true>(load(0), xg, il.negativeFold, acc);
                    if (op.geglu) fd::groupDotInteger<true>(load(1), xg, il.negativeFold, accUp);
                }
                __syncwarp();
                if (lane == 0) arrive(&empty[s]);
            }
            // The tile's row sums: each warp's, then the 16 warps' in warp order.
            float rowA, rowB, upA = 0.f, upB = 0.f;
            fd::integerRowSums(acc, il, rowA, rowB);
            if (op.geglu) fd::integerRowSums(accUp, il, upA, upB);
            const int buffer = tileCount & 1;
            if (q == 0) {
                partial[buffer][cw][0][g] = rowA;
                partial[buffer][cw][0][g + 8] = rowB;
                partial[buffer][cw][1][g] = upA;
                partial[buffer][cw][1][g + 8] = upB;
            }
            consumersSync();
            if (cw == (tileCount & (kConsumerWarps - 1)) && lane < 16) {
                const int row = t * 16 + lane;
                if (row < op.out) {
                    float sum = 0.f, upSum = 0.f;
                    for (int w = 0; w < kConsumerWarps; ++w) {
                        sum += partial[buffer][w][0][lane];
                        upSum += partial[buffer][w][1][lane];
                    }
                    op.y[row] = op.geglu ? gemma::cuda::geluTanh(sum) * upSum : sum;
                }
            }
        }
    }
#endif
}

// ---- Version 26: the even split --------------------------------------------------------------
// Version 25's run (tile per block, 0.93x the launches) left blocks unevenly loaded: o and down
// have 240 tiles for 132 blocks, gate/up 960. Here each op's items (one 128-input group of one
// 16-row tile; tile-major, so a block's items are one contiguous run of the tiled codes) are cut
// into gridDim.x equal runs. A tile cut between two blocks (at most two: every run holds at least
// a tile's items, checked on the host) has two pieces: the one holding the tile's first group
// writes its raw sums to y (and up), the other to y2 (and up2), and whoever reads the op's output
// adds them (combinedQuad), in that order: deterministic. A GeGLU tile whole in one block writes
// gelu(gate)·up to y directly. A ring stage holds up to CW·IPW items of one tile (IPW items per
// consumer warp, CW consumer warps; for a GeGLU half of them gate, then as many of up): their
// codes, then their scale words. The ring takes what shared memory is left beside x (165 KB).
// Item counts and offsets are 32-bit (the largest op has 28800 items): 64-bit divisions cost a
// device call each, and the first run of this form spent more than a millisecond in them.
template <int IPW, int CW> constexpr int kStageItems = CW * IPW;
template <int IPW, int CW> constexpr int kEvenCodeBytes = kStageItems<IPW, CW> * 1024;
template <int IPW, int CW> constexpr int kEvenStageBytes = kStageItems<IPW, CW> * (1024 + 32);
constexpr int kEvenRingBytes = 10 * (16 * (1024 + 32));
template <int IPW, int CW> constexpr int kEvenStages = kEvenRingBytes / kEvenStageBytes<IPW, CW>;

struct EvenOp {
    const std::uint8_t* codes;
    const std::uint32_t* scales;
    const std::uint8_t* upCodes;  // GeGLU only
    const std::uint32_t* upScales;
    float *y, *y2, *up, *up2;     // whole tiles and first pieces; second pieces (see above)
    int out, in, geglu;
};

// What a timing run of the even split does per op (the first three: the real step). kRawCodes
// feeds the mma the code words as they are, skipping the FP4 decode's byte permutes and sign flips
// (time only: what the consumers would do with a free decode).
constexpr int kBarriers = 1, kStaging = 2, kCompute = 4, kRawCodes = 8, kFull = kBarriers | kStaging | kCompute;

struct EvenArgs {
    const EvenOp* ops;   // [kOps]
    const float* x0;     // the first op's input
    unsigned* barrier;   // one monotonic counter, zeroed before each launch
    int mode;            // kBarriers | kStaging | kCompute; any missing: time only (the outputs are wrong)
    int inFlight;        // stages the producer keeps in flight (issued, not yet arrived) at most
    unsigned long long* trace;  // null, or [kOps][4] of block 0's clock: op start, barrier passed, x staged, op end
};

__host__ __device__ constexpr int opItems(int out, int in) { return (out + 15) / 16 * (in / 128); }
// The first item of block b's run of an op's `items`.
__host__ __device__ constexpr int runStart(int items, int blocks, int b) { return items * b / blocks; }
// Whether a block boundary falls inside tile `tile` (its items [tile·groups, tile·groups + groups)).
__device__ __forceinline__ bool tileCut(int items, int groups, int blocks, int tile) {
    const int first = tile * groups;
    const int owner = ((first + 1) * blocks - 1) / items;  // the largest b with runStart(b) <= first
    return runStart(items, blocks, owner + 1) < first + groups;
}
// Rows 4·quad .. 4·quad + 3 of an op's output as the next op reads them (within one tile, whose
// cut the caller knows).
__device__ __forceinline__ float4 combinedQuad(const EvenOp& op, bool cut, int quad) {
    float4 v = __ldcg(reinterpret_cast<const float4*>(op.y) + quad);
    if (!cut) return v;
    const float4 v2 = __ldcg(reinterpret_cast<const float4*>(op.y2) + quad);
    v = make_float4(v.x + v2.x, v.y + v2.y, v.z + v2.z, v.w + v2.w);
    if (!op.geglu) return v;
    const float4 u = __ldcg(reinterpret_cast<const float4*>(op.up) + quad), u2 = __ldcg(reinterpret_cast<const float4*>(op.up2) + quad);
    using gemma::cuda::geluTanh;
    return make_float4(geluTanh(v.x) * (u.x + u2.x), geluTanh(v.y) * (u.y + u2.y), geluTanh(v.z) * (u.z + u2.z), geluTanh(v.w) * (u.w + u2.w));
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
// groupDotInteger without the decode (kRawCodes): the same mmas and the same end of the group
// (accumulateGroup), the code words themselves as the A fragments.
__device__ __forceinline__ void rawCodesGroupDot(const fd::GroupLoad& g, const fd::IntegerX& x, int negativeFold, float (&acc)[4]) {
    const std::uint32_t a[4] = {g.rowA.x, g.rowA.y, g.rowA.z, g.rowA.w}, b[4] = {g.rowB.x, g.rowB.y, g.rowB.z, g.rowB.w};
    int pos[4] = {0, 0, 0, 0}, neg[4] = {0, 0, 0, 0};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const std::uint32_t p[4] = {a[j], b[j], a[j], b[j]}, n[4] = {b[j], a[j], b[j], a[j]};
        fd::imma16832(pos, p, x.b[2 * j], x.b[2 * j + 1]);
        fd::imma16832(neg, n, x.b[2 * j], x.b[2 * j + 1]);
    }
    fd::accumulateGroup(pos, neg, g.scales, x.factor, negativeFold, acc);
}

// Op k's input (the previous op's output, combined; x0 for op 0) → the integer planes.
template <int CW>
__device__ void stageEvenX(const EvenArgs& a, int k, int in, std::uint8_t* planes, float* factors, int c) {
    const int groups = in / 128;
    const int pieces = groups * 8;  // 16 inputs each: one tile of the previous op
    constexpr int kStagers = 32 * CW;
    fd::writeConstantColumns(planes, groups, static_cast<unsigned>(c));
    const EvenOp* prev = k > 0 ? &a.ops[k - 1] : nullptr;
    // Every load of a thread's pieces before any conversion: one L2 round trip, not one per pass
    // (up to two pieces per thread: in <= 2 · 512 · 16, checked on the host).
    auto load = [&](int piece, float4 (&v)[4]) {
        const bool cut = prev && piece < pieces && tileCut(opItems(prev->out, prev->in), prev->in / 128, gridDim.x, piece);
#pragma unroll
        for (int f = 0; f < 4; ++f) {
            v[f] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (piece < pieces)
                v[f] = prev ? combinedQuad(*prev, cut, piece * 4 + f) : __ldcg(reinterpret_cast<const float4*>(a.x0) + piece * 4 + f);
        }
    };
    if (pieces > kStagers) {
        float4 v[2][4];
        load(c, v[0]);
        load(c + kStagers, v[1]);
        fd::convertXPieces<2>(v, 0, pieces, fd::planeBytes(groups), planes, factors, c, kStagers);
    } else {
        float4 v[1][4];
        load(c, v[0]);
        fd::convertXPieces<1>(v, 0, pieces, fd::planeBytes(groups), planes, factors, c, kStagers);
    }
}
#endif

template <int IPW, int CW>
__global__ void __launch_bounds__(32 * (CW + 1), 1) evenSplitStepKernel(EvenArgs args) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr int kStages = kEvenStages<IPW, CW>, kStageBytes = kEvenStageBytes<IPW, CW>, kCodes = kEvenCodeBytes<IPW, CW>;
    constexpr int kItems = kStageItems<IPW, CW>;
    extern __shared__ __align__(128) std::uint8_t smem[];
    __shared__ __align__(8) std::uint64_t full[kStages], empty[kStages];
    __shared__ float partial[2][CW][16];  // [piece parity][warp][row]
    std::uint8_t* ring = smem;
    std::uint8_t* planes = smem + kEvenRingBytes;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int blocks = static_cast<int>(gridDim.x), b = static_cast<int>(blockIdx.x);
    if (threadIdx.x == 0) initRing(full, empty, kStages, CW);
    __syncthreads();
    if (warp == 0) {  // the producer: this block's run of every op, never waiting for a boundary
        if (lane == 0) {
            unsigned use = 0;
            for (int k = 0; k < kOps; ++k) {
                const EvenOp op = args.ops[k];
                const int groups = op.in / 128, per = op.geglu ? kItems / 2 : kItems;
                const int items = opItems(op.out, op.in), end = runStart(items, blocks, b + 1);
                int i = runStart(items, blocks, b);
                for (int tileEnd = (i / groups + 1) * groups; i < end; ++use) {
                    if (i == tileEnd) tileEnd += groups;
                    const int n = min(per, min(end, tileEnd) - i);
                    const int s = static_cast<int>(use % kStages);
                    // At most inFlight stages outstanding: a deeper queue of copies delays every
                    // other memory access of the step (x, the barrier) without adding bandwidth.
                    if (use >= static_cast<unsigned>(args.inFlight)) {
                        const unsigned back = use - static_cast<unsigned>(args.inFlight);
                        waitParity(&full[back % kStages], (back / kStages) & 1);
                    }
                    if (use >= kStages) waitParity(&empty[s], (use / kStages - 1) & 1);
                    std::uint8_t* stage = ring + s * kStageBytes;
                    const unsigned codeBytes = static_cast<unsigned>(n) * 1024, scaleBytes = static_cast<unsigned>(n) * 32;
                    expectBytes(&full[s], (codeBytes + scaleBytes) * (op.geglu ? 2 : 1));
                    const std::int64_t at = i;
                    bulkCopy(stage, op.codes + at * 1024, codeBytes, &full[s]);
                    bulkCopy(stage + kCodes, op.scales + at * 8, scaleBytes, &full[s]);
                    if (op.geglu) {
                        bulkCopy(stage + kCodes / 2, op.upCodes + at * 1024, codeBytes, &full[s]);
                        bulkCopy(stage + kCodes + kItems * 16, op.upScales + at * 8, scaleBytes, &full[s]);
                    }
                    i += n;
                }
            }
        }
        return;
    }
    const int cw = warp - 1;
    const int c = static_cast<int>(threadIdx.x) - 32;
    const int g = lane >> 2, q = lane & 3;
    unsigned use = 0;
    int pieceCount = 0;
    for (int k = 0; k < kOps; ++k) {
        const EvenOp op = args.ops[k];
        const int groups = op.in / 128, per = op.geglu ? kItems / 2 : kItems;
        const int items = opItems(op.out, op.in), end = runStart(items, blocks, b + 1);
        const bool tracing = args.trace && b == 0 && c == 0;
        if (tracing) args.trace[k * 4] = globalTime();
        if (k > 0 && (args.mode & kBarriers)) opBarrier<CW>(args.barrier, k, c);
        float* factors = reinterpret_cast<float*>(planes + fd::kPlanes * fd::planeBytes(groups));
        if (tracing) args.trace[k * 4 + 1] = globalTime();
        if (k == 0 || (args.mode & kStaging)) stageEvenX<CW>(args, k, op.in, planes, factors, c);
        consumersSync<CW>();
        if (tracing) args.trace[k * 4 + 2] = globalTime();
        const fd::IntegerLane il = fd::integerLane(g, q, planes, factors, groups);
        // Warp cw takes items j, j + CW (.., IPW of them) of a stage; in a GeGLU's, items j, j + CW/2, ..
        // of weight cw % 2 (j = cw / 2).
        const int weight = op.geglu ? (cw & 1) : 0, j = op.geglu ? (cw >> 1) : cw, jStep = op.geglu ? CW / 2 : CW;
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        int i = runStart(items, blocks, b);
        for (int t = i / groups; i < end; ++pieceCount, ++t) {
            const int tileStart = t * groups, pieceStart = i;
            const int pieceEnd = min(end, tileStart + groups);
            for (; i < pieceEnd; ++use) {
                const int n = min(per, pieceEnd - i);
                const int s = static_cast<int>(use % kStages);
                waitParity(&full[s], (use / kStages) & 1);
                if (args.mode & kCompute) {
                    // The warp's IPW items loaded together (independent chains), an item past the
                    // stage's n read in bounds (its group clamped) and weighed 0 by a zero scale word.
                    const std::uint8_t* stage = ring + s * kStageBytes;
                    fd::GroupLoad l[IPW];
                    fd::IntegerX xg[IPW];
#pragma unroll
                    for (int u = 0; u < IPW; ++u) {
                        const int jj = j + u * jStep;
                        const uint4* item = reinterpret_cast<const uint4*>(stage + weight * (kCodes / 2) + jj * 1024);
                        l[u].rowA = item[g * 4 + q];
                        l[u].rowB = item[32 + g * 4 + q];
                        l[u].scales = jj < n ? reinterpret_cast<const std::uint32_t*>(stage + kCodes + weight * (kItems * 16) + jj * 32)[g] : 0u;
                        xg[u] = fd::loadIntegerX(il.b, min(i - tileStart + jj, groups - 1));
                    }
#pragma unroll
                    for (int u = 0; u < IPW; ++u) {
                        if (args.mode & kRawCodes) rawCodesGroupDot(l[u], xg[u], il.negativeFold, acc);
                        else fd::groupDotInteger<true>(l[u], xg[u], il.negativeFold, acc);
                    }
                }
                __syncwarp();
                if (lane == 0) arrive(&empty[s]);
                i += n;
            }
            // The piece's row sums: each warp's, then the 16 warps' in warp order (a GeGLU's gate
            // from the even warps, up from the odd ones).
            float rowA, rowB;
            fd::integerRowSums(acc, il, rowA, rowB);
            const int buffer = pieceCount & 1;
            if (q == 0) {
                partial[buffer][cw][g] = rowA;
                partial[buffer][cw][g + 8] = rowB;
            }
            consumersSync<CW>();
            if (cw == pieceCount % CW && lane < 16) {
                const int row = t * 16 + lane;
                const bool first = pieceStart == tileStart, whole = first && pieceEnd == tileStart + groups;
                if (row < op.out) {
                    if (!op.geglu) {
                        float sum = 0.f;
                        for (int w = 0; w < CW; ++w) sum += partial[buffer][w][lane];
                        (first ? op.y : op.y2)[row] = sum;
                    } else {
                        float gate = 0.f, up = 0.f;
                        for (int w = 0; w < CW; w += 2) {
                            gate += partial[buffer][w][lane];
                            up += partial[buffer][w + 1][lane];
                        }
                        if (whole) op.y[row] = gemma::cuda::geluTanh(gate) * up;
                        else {
                            (first ? op.y : op.y2)[row] = gate;
                            (first ? op.up : op.up2)[row] = up;
                        }
                    }
                }
            }
        }
        if (tracing) args.trace[k * 4 + 3] = globalTime();
    }
#endif
}

// Op k's output as the next op reads it, into `dst` (the check's reference input and output).
__global__ void combineKernel(const EvenOp* ops, int k, int blocks, float* dst) {
    const int quad = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
    const EvenOp& op = ops[k];
    if (quad * 4 < op.out)
        reinterpret_cast<float4*>(dst)[quad] = combinedQuad(op, tileCut(opItems(op.out, op.in), op.in / 128, blocks, quad / 4), quad);
}

// Random tiled weights: code bytes from a hash; scale words two bf16 of magnitude 2^-9 .. 2^-8,
// random signs (the outputs stay near the inputs' size over the chain).
__global__ void fillWeights(std::uint32_t* codes, std::int64_t codeWords, std::uint32_t* scales, std::int64_t scaleWords, std::uint32_t seed) {
    const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < codeWords; i += stride) {
        std::uint32_t h = (static_cast<std::uint32_t>(i) ^ seed) * 2654435761u;
        codes[i] = h ^ (h >> 13) ^ (h << 7);
    }
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < scaleWords; i += stride) {
        std::uint32_t h = (static_cast<std::uint32_t>(i) ^ (seed * 7u)) * 2246822519u;
        h ^= h >> 15;
        auto bf16 = [](std::uint32_t r) { return static_cast<std::uint32_t>(((r & 1u) << 15) | ((127u - 9u) << 7) | ((r >> 1) & 0x7Fu)); };
        scales[i] = bf16(h) | (bf16(h >> 8) << 16);
    }
}

}  // namespace

int main() {
    cudaDeviceProp prop{};
    if (const int skip = requireBulkCopyDevice(prop, "measure_persistent_layer")) return skip;
    // The layer's weights (out, in); the GeGLU's two weights share a shape.
    const int shapes[kOpsPerLayer][2] = {{8192, 3840}, {3840, 4096}, {15360, 3840}, {3840, 15360}};
    std::vector<std::uint8_t*> codeBuffers;
    std::vector<std::uint32_t*> scaleBuffers;
    std::int64_t stepBytes = 0;
    auto weight = [&](int out, int in, std::uint32_t seed, const std::uint8_t*& codes, const std::uint32_t*& scales) -> cudaError_t {
        const std::int64_t cb = tiled::codeBytes(out, in), sw = tiled::tiles(out) * (in / 128) * 8;
        std::uint8_t* c = nullptr;
        std::uint32_t* s = nullptr;
        if (cudaError_t e = cudaMalloc(&c, static_cast<std::size_t>(cb)); e != cudaSuccess) return e;
        if (cudaError_t e = cudaMalloc(&s, static_cast<std::size_t>(sw) * 4); e != cudaSuccess) return e;
        fillWeights<<<prop.multiProcessorCount * 4, 256>>>(reinterpret_cast<std::uint32_t*>(c), cb / 4, s, sw, seed);
        codeBuffers.push_back(c);
        scaleBuffers.push_back(s);
        stepBytes += cb + sw * 4;
        codes = c;
        scales = s;
        return cudaGetLastError();
    };
    // Vectors: the step's input, then one output per op (so every op's input and output survive
    // for the checks).
    float* vectors = nullptr;
    const std::size_t vectorFloats = kMaxIn;
    PROBE_CHECK(cudaMalloc(&vectors, (kOps + 1) * vectorFloats * sizeof(float)));
    std::vector<float> x0(vectorFloats);
    for (std::size_t i = 0; i < x0.size(); ++i) x0[i] = std::sin(0.37f * static_cast<float>(i)) * 0.8f;
    PROBE_CHECK(cudaMemcpy(vectors, x0.data(), x0.size() * sizeof(float), cudaMemcpyHostToDevice));
    std::vector<Op> ops(kOps);
    for (int k = 0; k < kOps; ++k) {
        const int kind = k % kOpsPerLayer;
        Op& op = ops[k];
        op.out = shapes[kind][0];
        op.in = shapes[kind][1];
        op.geglu = kind == 2;
        PROBE_CHECK(weight(op.out, op.in, 1000u + k, op.codes, op.scales));
        if (op.geglu) PROBE_CHECK(weight(op.out, op.in, 5000u + k, op.upCodes, op.upScales));
        op.x = vectors + k * vectorFloats;  // o reads q/k/v's first 4096 outputs
        op.y = vectors + (k + 1) * vectorFloats;
    }
    Op* deviceOps = nullptr;
    unsigned* barrier = nullptr;
    PROBE_CHECK(cudaMalloc(&deviceOps, ops.size() * sizeof(Op)));
    PROBE_CHECK(cudaMemcpy(deviceOps, ops.data(), ops.size() * sizeof(Op), cudaMemcpyHostToDevice));
    PROBE_CHECK(cudaMalloc(&barrier, sizeof(unsigned)));
    PROBE_CHECK(cudaDeviceSynchronize());

    const std::size_t smem = smemBytes();
    PROBE_CHECK(cudaFuncSetAttribute(persistentStepKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    const int blocks = prop.multiProcessorCount;
    auto persistent = [&]() {
        cudaMemsetAsync(barrier, 0, sizeof(unsigned));
        PersistentArgs args{deviceOps, barrier};
        void* params[] = {&args};
        return cudaLaunchCooperativeKernel(reinterpret_cast<void*>(persistentStepKernel), dim3(blocks), dim3(kThreads), params, smem, nullptr);
    };
    // The engine's launch for op k, reading `x` and writing `y`.
    auto launchOp = [&](int k, const float* x, float* y) {
        const Op& op = ops[k];
        Fp4MatvecParams p;
        p.codes = op.codes;
        p.scales = reinterpret_cast<const std::uint16_t*>(op.scales);
        p.out = op.out;
        p.in = op.in;
        p.x = x;
        p.xStride = op.in;
        p.y = y;
        p.yStride = op.out;
        p.tiled = true;
        p.programmaticLaunch = true;
        if (op.geglu) {
            p.upCodes = op.upCodes;
            p.upScales = reinterpret_cast<const std::uint16_t*>(op.upScales);
            return gemma::cuda::launchFp4GegluMatvec(p, nullptr);
        }
        return gemma::cuda::launchFp4Matvec(p, nullptr);
    };

    // Checks: the persistent run's ops of the first 4 layers against the engine's kernel on the
    // same input (the persistent run's own previous output).
    PROBE_CHECK(persistent());
    PROBE_CHECK(cudaDeviceSynchronize());
    float* check = nullptr;
    PROBE_CHECK(cudaMalloc(&check, vectorFloats * sizeof(float)));
    bool ok = true;
    double worst = 0.0;
    // want (device, the engine's) against got (device): finite and within 1e-5 of want's norm.
    auto compare = [&](const float* wantDevice, const float* gotDevice, int n) -> cudaError_t {
        std::vector<float> want(static_cast<std::size_t>(n)), got(static_cast<std::size_t>(n));
        if (cudaError_t e = cudaMemcpy(want.data(), wantDevice, want.size() * sizeof(float), cudaMemcpyDeviceToHost); e != cudaSuccess) return e;
        if (cudaError_t e = cudaMemcpy(got.data(), gotDevice, got.size() * sizeof(float), cudaMemcpyDeviceToHost); e != cudaSuccess) return e;
        double diff = 0.0, norm = 0.0;
        bool finite = true;
        for (std::size_t i = 0; i < want.size(); ++i) {
            finite &= std::isfinite(got[i]) && std::isfinite(want[i]);
            diff += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
            norm += static_cast<double>(want[i]) * want[i];
        }
        const double rel = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
        worst = std::max(worst, rel);
        ok &= finite && rel <= 1e-5;
        return cudaSuccess;
    };
    // The engine's op k on `x` into `check` (poisoned first: every output must be written).
    auto engineOp = [&](int k, const float* x) -> cudaError_t {
        if (cudaError_t e = cudaMemset(check, 0xFF, vectorFloats * sizeof(float)); e != cudaSuccess) return e;
        if (launchOp(k, x, check) != gemma::cuda::KernelStatus::Ok) return cudaErrorLaunchFailure;
        return cudaDeviceSynchronize();
    };
    for (int k = 0; k < 4 * kOpsPerLayer; ++k) {
        PROBE_CHECK(engineOp(k, ops[k].x));
        PROBE_CHECK(compare(check, ops[k].y, ops[k].out));
    }
    const double worstTiles = worst;
    const bool okTiles = ok;

    // Version 26's even split over the same weights. Its outputs start as NaN: a row read that no
    // piece wrote shows in the check.
    for (const Op& op : ops)
        if (opItems(op.out, op.in) / blocks < op.in / 128) {
            std::printf("op %d x %d: a run shorter than a tile (the even split assumes two pieces at most)\n", op.out, op.in);
            return 1;
        }
    float* evenVectors = nullptr;
    PROBE_CHECK(cudaMalloc(&evenVectors, static_cast<std::size_t>(kOps) * 4 * vectorFloats * sizeof(float)));
    PROBE_CHECK(cudaMemset(evenVectors, 0xFF, static_cast<std::size_t>(kOps) * 4 * vectorFloats * sizeof(float)));
    std::vector<EvenOp> evenOps(kOps);
    for (int k = 0; k < kOps; ++k) {
        const Op& op = ops[k];
        float* base = evenVectors + static_cast<std::size_t>(k) * 4 * vectorFloats;
        evenOps[k] = EvenOp{op.codes, op.scales, op.upCodes, op.upScales, base, base + vectorFloats, base + 2 * vectorFloats, base + 3 * vectorFloats,
                            op.out, op.in, op.geglu};
    }
    EvenOp* deviceEvenOps = nullptr;
    PROBE_CHECK(cudaMalloc(&deviceEvenOps, evenOps.size() * sizeof(EvenOp)));
    PROBE_CHECK(cudaMemcpy(deviceEvenOps, evenOps.data(), evenOps.size() * sizeof(EvenOp), cudaMemcpyHostToDevice));
    const std::size_t evenSmem = static_cast<std::size_t>(kEvenRingBytes) + planesBytes();
    // The forms: (items per warp, consumer warps).
    struct EvenForm {
        int itemsPerWarp, consumerWarps;
        const void* kernel;
    };
    const EvenForm evenForms[] = {{1, 16, reinterpret_cast<const void*>(evenSplitStepKernel<1, 16>)},
                                  {2, 16, reinterpret_cast<const void*>(evenSplitStepKernel<2, 16>)},
                                  {1, 24, reinterpret_cast<const void*>(evenSplitStepKernel<1, 24>)},
                                  {1, 30, reinterpret_cast<const void*>(evenSplitStepKernel<1, 30>)}};
    for (const EvenForm& f : evenForms) PROBE_CHECK(cudaFuncSetAttribute(f.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(evenSmem)));
    unsigned long long* trace = nullptr;
    PROBE_CHECK(cudaMalloc(&trace, static_cast<std::size_t>(kOps) * 4 * sizeof(unsigned long long)));
    const EvenForm* form = &evenForms[0];
    int inFlight = 2;
    auto even = [&](int mode, unsigned long long* traceTo = nullptr) {
        cudaMemsetAsync(barrier, 0, sizeof(unsigned));
        const int stages = kEvenRingBytes / (form->itemsPerWarp * form->consumerWarps * 1056);
        EvenArgs args{deviceEvenOps, vectors, barrier, mode, std::min(inFlight, stages), traceTo};
        void* params[] = {&args};
        return cudaLaunchCooperativeKernel(form->kernel, dim3(blocks), dim3(32 * (form->consumerWarps + 1)), params, evenSmem, nullptr);
    };
    float *combined[2] = {nullptr, nullptr};
    PROBE_CHECK(cudaMalloc(&combined[0], vectorFloats * sizeof(float)));
    PROBE_CHECK(cudaMalloc(&combined[1], vectorFloats * sizeof(float)));
    double worstEven = 0.0;
    bool okEven = true;
    for (const EvenForm& f : evenForms) {  // every form, each on outputs poisoned anew
        form = &f;
        PROBE_CHECK(cudaMemset(evenVectors, 0xFF, static_cast<std::size_t>(kOps) * 4 * vectorFloats * sizeof(float)));
        PROBE_CHECK(even(kFull));
        PROBE_CHECK(cudaDeviceSynchronize());
        worst = 0.0;
        ok = true;
        for (int k = 0; k < 4 * kOpsPerLayer; ++k) {
            float* mine = combined[k & 1];
            combineKernel<<<(ops[k].out / 4 + 255) / 256, 256>>>(deviceEvenOps, k, blocks, mine);
            PROBE_CHECK(cudaGetLastError());
            PROBE_CHECK(engineOp(k, k == 0 ? vectors : combined[(k + 1) & 1]));
            PROBE_CHECK(compare(check, mine, ops[k].out));
        }
        worstEven = std::max(worstEven, worst);
        okEven &= ok;
    }
    ok = okTiles && okEven;
    std::printf("measure_persistent_layer on %s (%d SMs): the 12b's decode matvecs, %d ops, %.2f GB\n", prop.name, blocks, kOps,
                static_cast<double>(stepBytes) * 1e-9);
    std::printf("check (layers 0-3, each op against the engine's kernel on the same input): tile per block %s (worst relative norm error %.2e), even split, every form %s (%.2e)\n",
                okTiles ? "ok" : "FAILED", worstTiles, okEven ? "ok" : "FAILED", worstEven);

    cudaEvent_t start, stop;
    PROBE_CHECK(cudaEventCreate(&start));
    PROBE_CHECK(cudaEventCreate(&stop));
    auto timeMs = [&](auto&& one) { return medianMs(one, 7, start, stop); };
    const double launchesMs = timeMs([&]() {
        for (int k = 0; k < kOps; ++k)
            if (launchOp(k, ops[k].x, ops[k].y) != gemma::cuda::KernelStatus::Ok) return cudaErrorUnknown;
        return cudaSuccess;
    });
    const double persistentMs = timeMs(persistent);
    // The read ceiling in the same run: StreamRead over a buffer of the step's size.
    void* ceilingBuffer = nullptr;
    std::uint32_t* sink = nullptr;
    PROBE_CHECK(cudaMalloc(&ceilingBuffer, static_cast<std::size_t>(stepBytes)));
    PROBE_CHECK(cudaMalloc(&sink, 4096 * sizeof(std::uint32_t)));
    PROBE_CHECK(cudaMemset(ceilingBuffer, 0, static_cast<std::size_t>(stepBytes)));
    gemma::cuda::StreamReadParams read;
    read.data = ceilingBuffer;
    read.bytes = stepBytes / 16 * 16;
    read.sink = sink;
    const double ceilingMs = timeMs([&] { return gemma::cuda::launchStreamRead(read, nullptr) == gemma::cuda::KernelStatus::Ok ? cudaSuccess : cudaErrorUnknown; });
    const double ceiling = static_cast<double>(stepBytes) / (ceilingMs * 1e6);  // GB/s
    PROBE_CHECK(cudaFree(ceilingBuffer));
    std::printf("read ceiling (StreamRead, the step's bytes) %.3f ms, %.0f GB/s\n", ceilingMs, ceiling);
    auto line = [&](const char* name, double ms, const char* note) {
        const double gbs = static_cast<double>(stepBytes) / (ms * 1e6);
        std::printf("%-60s %7.3f ms per step %7.0f GB/s %6.1f %% of the ceiling  %.2fx the launches%s\n", name, ms, gbs, 100.0 * gbs / ceiling,
                    launchesMs / ms, note);
    };
    line("launches (192, programmatic)", launchesMs, "");
    line("persistent, tile per block", persistentMs, "");
    // The even split by items per warp and copies in flight: the step, and its consumers' decode
    // alone (no barriers, no x staging: time only), then block 0's trace of the step per op kind.
    std::vector<unsigned long long> marks(static_cast<std::size_t>(kOps) * 4);
    const char* kinds[kOpsPerLayer] = {"q/k/v", "o", "gate/up", "down"};
    for (const EvenForm& f : evenForms)
        for (const int depth : {2, 4}) {
            form = &f;
            inFlight = depth;
            const int stageItems = f.itemsPerWarp * f.consumerWarps;
            char name[128];
            std::snprintf(name, sizeof name, "even split, %d warps × %d item%s, %d stages (%d KB) in flight", f.consumerWarps, f.itemsPerWarp,
                          f.itemsPerWarp > 1 ? "s" : "", depth, depth * stageItems * 1056 / 1024);
            line(name, timeMs([&]() { return even(kFull); }), "");
            line("  its decode alone", timeMs([&]() { return even(kCompute); }), " (time only)");
            line("  its decode alone, the mma on raw code words", timeMs([&]() { return even(kCompute | kRawCodes); }), " (time only)");
            PROBE_CHECK(even(kFull, trace));
            PROBE_CHECK(cudaDeviceSynchronize());
            PROBE_CHECK(cudaMemcpy(marks.data(), trace, marks.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
            std::printf("  block 0, mean µs per op: barrier / x staged / its run (its bytes at the ceiling):");
            for (int kind = 0; kind < kOpsPerLayer; ++kind) {
                double phase[3] = {0, 0, 0};
                for (int k = kind; k < kOps; k += kOpsPerLayer)
                    for (int p = 0; p < 3; ++p) phase[p] += static_cast<double>(marks[k * 4 + p + 1] - marks[k * 4 + p]) * 1e-3 / kLayers;
                const Op& op = ops[kind];
                const double runBytes = static_cast<double>(runStart(opItems(op.out, op.in), blocks, 1)) * (1024 + 32) * (op.geglu ? 2 : 1);
                std::printf(" %s %.2f/%.2f/%.2f (%.2f)", kinds[kind], phase[0], phase[1], phase[2], runBytes / (ceiling / blocks * 1e3));
            }
            std::printf("\n");
        }
    // The other parts alone at 16 warps × 1 item, 2 stages in flight (time only).
    form = &evenForms[0];
    inFlight = 2;
    line("  1 item/warp, 2 in flight: no barriers", timeMs([&]() { return even(kStaging | kCompute); }), " (time only)");
    line("  1 item/warp, 2 in flight: no x staging", timeMs([&]() { return even(kBarriers | kCompute); }), " (time only)");
    line("  1 item/warp, 2 in flight: no compute", timeMs([&]() { return even(kBarriers | kStaging); }), " (time only)");
    line("  1 item/warp, 2 in flight: stream + epilogues", timeMs([&]() { return even(0); }), " (time only)");
    for (auto* c : codeBuffers) cudaFree(c);
    for (auto* s : scaleBuffers) cudaFree(s);
    return ok ? 0 : 1;
}
