// FP8-E4M3 row-scaled matvec for the tied lm_head, with the final softcap fused:
//   logits[r][v] = cap·tanh( rowScale[v]·Σ_h e4m3(E[v][h])·x[r][h] / cap )   (cap <= 0: no tanh)
//
// Layouts: codes [V][H] row-major bytes (WeightFormats.h Fp8RowScaled), rowScales [V] fp32,
// x [rows][xStride] fp32, logits [rows][logitStride] fp32. fp32 accumulation.
//
// Work split: one warp owns R consecutive vocabulary rows at a time; lane l reads 16-byte chunks
// l, l+32, ... of each (16 weights each), with the next chunk's loads issued before the current
// one is converted: a one-shot grid of 4-row warps (fp8LmHeadKernel), or for one logits row on
// request a resident grid of 8-row warps (fp8LmHeadPersistentKernel: faster alone, slower inside
// the decode step, docs/PERFORMANCE.md version 10). E4M3 pairs are converted by the hardware (cvt.rn.f16x2.e4m3x2, sm_89+), which
// is exact (every E4M3FN value, NaN included, is an FP16 value), then to fp32.
//
// Or, with Fp8LmHeadParams::tensorCores, 16-row tiles on tensor cores (fp8LmHeadMmaKernel below:
// one mma per 256 weights, x as fp16 hi + lo), on either grid.
//
// Preconditions (checked): codes 16-byte aligned, H % 16 == 0, x 16-byte aligned, xStride % 4 == 0.
// Programmatic launch (sm_90+, when asked): every thread waits for the previous kernel before it
// reads x (the one-row kernel requests its first codes before that: they are never written).
#include "Fp8LmHead.h"

#include <algorithm>

#include "CudaCommon.h"

namespace gemma::cuda {
namespace fp8detail {

// ---- device helpers ------------------------------------------------------------------------------
// The two E4M3 codes in the low 16 bits of `twoCodes` as an FP16 pair (exact).
__device__ __forceinline__ std::uint32_t e4m3x2ToHalf2(std::uint32_t twoCodes) {
    std::uint32_t h2;
    asm("{\n .reg .b16 lo;\n cvt.u16.u32 lo, %1;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n}"
        : "=r"(h2)
        : "r"(twoCodes));
    return h2;
}

__device__ __forceinline__ float2 e4m3x2ToFloat2(std::uint32_t twoCodes) {
    const std::uint32_t h2 = e4m3x2ToHalf2(twoCodes);
    return __half22float2(*reinterpret_cast<const __half2*>(&h2));
}

// Dot of the 16 codes in `w` with 16 consecutive x values.
__device__ __forceinline__ float dot16(const uint4& w, const float (&xv)[16], float acc) {
    const std::uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        const float2 a = e4m3x2ToFloat2(words[q] & 0xFFFFu);
        const float2 b = e4m3x2ToFloat2(words[q] >> 16);
        acc = fmaf(a.x, xv[4 * q + 0], acc);
        acc = fmaf(a.y, xv[4 * q + 1], acc);
        acc = fmaf(b.x, xv[4 * q + 2], acc);
        acc = fmaf(b.y, xv[4 * q + 3], acc);
    }
    return acc;
}

// ---- kernel ------------------------------------------------------------------------------------------
template <int R, int NB>
__global__ void __launch_bounds__(256, 2) fp8LmHeadKernel(
    const std::uint8_t* __restrict__ codes, const float* __restrict__ rowScales, std::int64_t vocab,
    std::int64_t hidden, const float* __restrict__ x, std::int64_t xStride,
    float* __restrict__ logits, std::int64_t logitStride, float softcap) {
    gridDependencyWait();  // every thread, idle warps too: x comes from the final norm (PDL)
    allowDependentsToStart();
    const int lane = threadIdx.x & 31;
    const std::int64_t row0 =
        (static_cast<std::int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5)) * R;
    if (row0 >= vocab) return;
    const int chunks = static_cast<int>(hidden / 16);
    const std::uint8_t* rowCodes[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const std::int64_t row = row0 + r < vocab ? row0 + r : vocab - 1;
        rowCodes[r] = codes + row * hidden;
    }
    float acc[R][NB];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int b = 0; b < NB; ++b) acc[r][b] = 0.0f;

    uint4 cur[R];
    int c = lane;
    if (c < chunks) {
#pragma unroll
        for (int r = 0; r < R; ++r) cur[r] = ldgStream16(rowCodes[r] + static_cast<std::int64_t>(c) * 16);
    }
    for (; c < chunks; c += 32) {
        uint4 nxt[R];
        const int cn = c + 32;
        if (cn < chunks) {
#pragma unroll
            for (int r = 0; r < R; ++r)
                nxt[r] = ldgStream16(rowCodes[r] + static_cast<std::int64_t>(cn) * 16);
        }
#pragma unroll
        for (int b = 0; b < NB; ++b) {
            float xv[16];
            const float4* xp = reinterpret_cast<const float4*>(x + b * xStride + static_cast<std::int64_t>(c) * 16);
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const float4 v = __ldg(xp + q);
                xv[4 * q] = v.x; xv[4 * q + 1] = v.y; xv[4 * q + 2] = v.z; xv[4 * q + 3] = v.w;
            }
#pragma unroll
            for (int r = 0; r < R; ++r) acc[r][b] = dot16(cur[r], xv, acc[r][b]);
        }
        if (cn < chunks) {
#pragma unroll
            for (int r = 0; r < R; ++r) cur[r] = nxt[r];
        }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int b = 0; b < NB; ++b) acc[r][b] = warpSum(acc[r][b]);
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const std::int64_t row = row0 + r;
            if (row >= vocab) break;
            const float scale = __ldg(rowScales + row);
#pragma unroll
            for (int b = 0; b < NB; ++b) {
                float z = acc[r][b] * scale;
                if (softcap > 0.0f) z = softcap * tanhf(z / softcap);
                logits[b * logitStride + row] = z;
            }
        }
    }
}

// One logits row (Fp8LmHeadParams::persistent): the same arithmetic on a resident grid. A one-shot grid of
// 4-row warps is ≈ 31 waves of 8192 blocks whose last wave holds a handful of blocks, and each of
// its warps starts with nothing in flight. Here every warp walks row groups w, w + warps, ... as
// one flat stream of (R-row group, chunk round) items, the next item's loads issued before the
// current one is converted, across groups, so a warp never waits for a group's first bytes; R = 8
// puts 4 KB per warp in flight (113 registers, no spill, two blocks per SM). Lanes stay in step
// (chunk round i: chunk lane + 32i, masked past the row), so a group's sums meet by warpSum. The
// codes are weights no kernel writes: the first item is requested before the programmatic wait
// (only x comes from the final norm). Same per-lane FMA order and the same reduction as
// fp8LmHeadKernel: bit-identical logits.
template <int R>
__global__ void __launch_bounds__(256, 2) fp8LmHeadPersistentKernel(
    const std::uint8_t* __restrict__ codes, const float* __restrict__ rowScales, std::int64_t vocab,
    std::int64_t hidden, const float* __restrict__ x, float* __restrict__ logits, float softcap) {
    const int lane = threadIdx.x & 31;
    const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x >> 5);
    const std::int64_t groups = (vocab + R - 1) / R;
    const int chunks = static_cast<int>(hidden / 16);
    const int rounds = (chunks + 31) / 32;
    std::int64_t group = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
    auto load = [&](std::int64_t g, int round, uint4 (&dst)[R]) {
        const int c = lane + 32 * round;
        if (c >= chunks) return;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const std::int64_t row = g * R + r < vocab ? g * R + r : vocab - 1;
            dst[r] = ldgStream16(codes + row * hidden + static_cast<std::int64_t>(c) * 16);
        }
    };
    uint4 cur[R];
    if (group < groups) load(group, 0, cur);
    gridDependencyWait();  // every thread: x comes from the final norm (PDL)
    allowDependentsToStart();
    if (group >= groups) return;
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;
    int round = 0;
    for (;;) {
        // The next item: the next chunk round of this group, or the first of the next group.
        const bool lastRound = round + 1 == rounds;
        const std::int64_t nextGroup = lastRound ? group + warps : group;
        const int nextRound = lastRound ? 0 : round + 1;
        uint4 nxt[R];
        if (nextGroup < groups) load(nextGroup, nextRound, nxt);
        const int c = lane + 32 * round;
        if (c < chunks) {
            float xv[16];
            const float4* xp = reinterpret_cast<const float4*>(x + static_cast<std::int64_t>(c) * 16);
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const float4 v = __ldg(xp + q);
                xv[4 * q] = v.x; xv[4 * q + 1] = v.y; xv[4 * q + 2] = v.z; xv[4 * q + 3] = v.w;
            }
#pragma unroll
            for (int r = 0; r < R; ++r) acc[r] = dot16(cur[r], xv, acc[r]);
        }
        if (lastRound) {
#pragma unroll
            for (int r = 0; r < R; ++r) acc[r] = warpSum(acc[r]);
            if (lane == 0) {
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const std::int64_t row = group * R + r;
                    if (row >= vocab) break;
                    float z = acc[r] * __ldg(rowScales + row);
                    if (softcap > 0.0f) z = softcap * tanhf(z / softcap);
                    logits[row] = z;
                }
            }
#pragma unroll
            for (int r = 0; r < R; ++r) acc[r] = 0.0f;
        }
        if (nextGroup >= groups) break;
        group = nextGroup;
        round = nextRound;
#pragma unroll
        for (int r = 0; r < R; ++r) cur[r] = nxt[r];
    }
}

// ---- tensor-core form (Fp8LmHeadParams::tensorCores) -----------------------------------------------
// The CUDA-core kernels spend ≈ 100 warp instructions per KB of codes (a conversion to fp32 and
// an FMA per weight), which keeps too few bytes in flight per SM for the read ceiling
// (docs/PERFORMANCE.md version 14 step 4b). Here one mma.sync.m16n8k16 covers 256 weights:
//   A (16×16, fp16) = 16 vocabulary rows × 16 inputs, each register one cvt.rn.f16x2.e4m3x2 of
//                     two codes (exact: every E4M3FN value is an FP16 value);
//   B (16×8, fp16)  = x: column 2i its hi half and column 2i+1 its lo half for x row i < NB
//                     (x·2^-4 = hi + lo: |x| up to 1e6 stays finite; the pair carries ≈ 20–22
//                     significant bits); the other columns repeat the last plane, unread;
//   C (16×8, fp32)  = the partial dots; products of an E4M3 value (4 significant bits) and an
//                     FP16 value (11) are exact in fp32.
// A warp owns a 16-row tile and walks its 64-input chunks: lane (g = lane/4, q = lane%4) reads the
// 16 code bytes [16q, 16q+16) of the chunk from rows g and g+8; its word j (inputs 16q+4j ..
// 16q+4j+3) is the A fragment of one mma (codes 0,1 → k-slots 2q, 2q+1; codes 2,3 → 2q+8, 2q+9),
// and its B fragment is x at the same inputs, which in natural order are the lane's 16 halves of
// the chunk: two 16-byte shared-memory loads per chunk. The k order inside an mma is a
// permutation of the inputs shared by A and B, so the dot product is unchanged. Lanes q < NB end
// the tile with rows g and g+8 of x row q in C (columns 2q, 2q+1): no warp reduction.
// Tiles w, w + warps, ... of warp w form one flat stream of (tile, chunk) items with D items in
// flight in registers, refilled as each is used, across tile boundaries. The grid either covers
// every tile once (one-shot) or is the resident block count (Fp8LmHeadParams::persistent).
// Codes are weights no kernel writes: the first D items are requested before the programmatic
// wait; x is read after it. Not bit-identical to the CUDA-core kernels (another summation
// order, x in two fp16 halves); the harness holds both to the same FP64 reference.
constexpr float kMmaXPrescale = 1.0f / 16.0f;
constexpr float kMmaXPostscale = 16.0f;
constexpr int kMmaMaxChunkInputs = 256;  // L = 4

__device__ __forceinline__ void mma16816(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Halves per x plane in shared memory: whole chunks of any width plus a 16-byte skew, so that
// the hi and lo reads of one quarter-warp phase fall on different banks.
__host__ __device__ constexpr std::int64_t mmaPlanePitch(std::int64_t hidden) {
    return (hidden + kMmaMaxChunkInputs - 1) / kMmaMaxChunkInputs * kMmaMaxChunkInputs + 8;
}

// Shared memory of the tensor-core kernel for `rows` x rows: a hi and a lo plane each.
__host__ __device__ constexpr std::size_t mmaSharedBytes(int rows, std::int64_t hidden) {
    return static_cast<std::size_t>(2 * rows * mmaPlanePitch(hidden)) * sizeof(__half);
}

// NB x rows; D items in flight per warp; an item is one chunk of 64·L inputs of the warp's 16
// rows (lane q: codes [16Lq, 16Lq + 16L) of rows g and g+8, L loads of 16 bytes each).
template <int NB, int D, int L>
__global__ void __launch_bounds__(256, 2) fp8LmHeadMmaKernel(
    const std::uint8_t* __restrict__ codes, const float* __restrict__ rowScales, std::int64_t vocab,
    std::int64_t hidden, const float* __restrict__ x, std::int64_t xStride, float* __restrict__ logits,
    std::int64_t logitStride, float softcap) {
    constexpr int kChunk = 64 * L;
    extern __shared__ uint4 xsRaw[];
    __half* const xs = reinterpret_cast<__half*>(xsRaw);
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2;
    const int q = lane & 3;
    const int chunks = static_cast<int>((hidden + kChunk - 1) / kChunk);
    const std::int64_t pitch = mmaPlanePitch(hidden);
    const std::int64_t tiles = (vocab + 15) / 16;
    const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x >> 5);
    const std::int64_t firstTile = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const std::int64_t myTiles = firstTile < tiles ? (tiles - 1 - firstTile) / warps + 1 : 0;
    const std::int64_t items = myTiles * chunks;

    // Load iterator: the tile and chunk of the next item to request, and its two rows' bytes.
    auto rowBytes = [&](std::int64_t tile, int r) {
        const std::int64_t row = tile * 16 + r < vocab ? tile * 16 + r : vocab - 1;
        return codes + row * hidden + q * 16 * L;
    };
    std::int64_t loadTile = firstTile;
    int loadChunk = 0;
    const std::uint8_t* loadA = rowBytes(firstTile, g);
    const std::uint8_t* loadB = rowBytes(firstTile, g + 8);
    uint4 slotA[D][L], slotB[D][L];
    auto fetch = [&](uint4 (&a)[L], uint4 (&b)[L]) {
        const std::int64_t offset = static_cast<std::int64_t>(loadChunk) * kChunk;
#pragma unroll
        for (int p = 0; p < L; ++p) {
            if (offset + q * 16 * L + 16 * p < hidden) {  // the last chunk may be partial
                a[p] = ldgStream16(loadA + offset + 16 * p);
                b[p] = ldgStream16(loadB + offset + 16 * p);
            } else {
                a[p] = b[p] = make_uint4(0u, 0u, 0u, 0u);
            }
        }
        if (++loadChunk == chunks) {
            loadChunk = 0;
            loadTile += warps;
            if (loadTile < tiles) {
                loadA = rowBytes(loadTile, g);
                loadB = rowBytes(loadTile, g + 8);
            }
        }
    };
#pragma unroll
    for (int u = 0; u < D; ++u)
        if (u < items) fetch(slotA[u], slotB[u]);
    gridDependencyWait();  // every thread: x comes from the final norm (PDL)
    allowDependentsToStart();

    // x rows → fp16 hi/lo planes (plane 2r hi, 2r + 1 lo), zero past H up to whole chunks.
    const std::int64_t pairsPerRow = (pitch - 8) / 2;
    for (std::int64_t i = threadIdx.x; i < NB * pairsPerRow; i += blockDim.x) {
        const int r = static_cast<int>(i / pairsPerRow);
        const std::int64_t k = 2 * (i % pairsPerRow);
        float2 v = make_float2(0.0f, 0.0f);
        if (k < hidden) v = __ldg(reinterpret_cast<const float2*>(x + r * xStride + k));  // H even
        const float a = v.x * kMmaXPrescale, b = v.y * kMmaXPrescale;
        const __half2 hi = __floats2half2_rn(a, b);
        const float2 hf = __half22float2(hi);
        *reinterpret_cast<__half2*>(xs + (2 * r) * pitch + k) = hi;
        *reinterpret_cast<__half2*>(xs + (2 * r + 1) * pitch + k) = __floats2half2_rn(a - hf.x, b - hf.y);
    }
    __syncthreads();
    if (items == 0) return;
    // The B column this lane supplies is g: plane g, the last plane for columns past 2·NB.
    const __half* const xsLane = xs + (g < 2 * NB ? g : 2 * NB - 1) * pitch + q * 16 * L;

    float c[2][4] = {};
    float scaleA = 0.0f, scaleB = 0.0f;
    std::int64_t computeTile = firstTile;
    int computeChunk = 0;
    for (std::int64_t k0 = 0; k0 < items; k0 += D) {
#pragma unroll
        for (int u = 0; u < D; ++u) {
            if (k0 + u >= items) break;
            if (computeChunk == 0 && q < NB) {  // used at the tile's end: the latency hides
                const std::int64_t rowA = computeTile * 16 + g, rowB = rowA + 8;
                scaleA = __ldg(rowScales + (rowA < vocab ? rowA : vocab - 1));
                scaleB = __ldg(rowScales + (rowB < vocab ? rowB : vocab - 1));
            }
            const uint4* xp = reinterpret_cast<const uint4*>(xsLane + static_cast<std::int64_t>(computeChunk) * kChunk);
#pragma unroll
            for (int p = 0; p < L; ++p) {
                const uint4 x0 = xp[2 * p], x1 = xp[2 * p + 1];
                const std::uint32_t xw[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
                const std::uint32_t wa[4] = {slotA[u][p].x, slotA[u][p].y, slotA[u][p].z, slotA[u][p].w};
                const std::uint32_t wb[4] = {slotB[u][p].x, slotB[u][p].y, slotB[u][p].z, slotB[u][p].w};
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const std::uint32_t a[4] = {e4m3x2ToHalf2(wa[j]), e4m3x2ToHalf2(wb[j]), e4m3x2ToHalf2(wa[j] >> 16),
                                                e4m3x2ToHalf2(wb[j] >> 16)};
                    mma16816(c[j & 1], a, xw[2 * j], xw[2 * j + 1]);
                }
            }
            if (k0 + u + D < items) fetch(slotA[u], slotB[u]);
            if (++computeChunk == chunks) {
                computeChunk = 0;
                if (q < NB) {
                    const float sums[2] = {(c[0][0] + c[1][0]) + (c[0][1] + c[1][1]),
                                           (c[0][2] + c[1][2]) + (c[0][3] + c[1][3])};
                    const float scales[2] = {scaleA, scaleB};
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const std::int64_t row = computeTile * 16 + g + 8 * h;
                        if (row >= vocab) continue;
                        float z = sums[h] * kMmaXPostscale * scales[h];
                        if (softcap > 0.0f) z = softcap * tanhf(z / softcap);
                        logits[q * logitStride + row] = z;
                    }
                }
#pragma unroll
                for (int s = 0; s < 2; ++s)
#pragma unroll
                    for (int e = 0; e < 4; ++e) c[s][e] = 0.0f;
                computeTile += warps;
            }
        }
    }
}

// ---- host launcher ---------------------------------------------------------------------------------
// One logits row with `persistent`: the resident grid of 8-row warps; otherwise, and for two
// rows, the one-shot grid of 4-row warps (8 would spill with two rows).
template <int NB>
cudaError_t launchNb(const Fp8LmHeadParams& p, const float* x, float* logits, cudaStream_t stream) {
    constexpr int kThreads = 256;
    if (NB == 1 && p.persistent) {
        constexpr int kR = 8;
        DeviceFacts facts;
        if (queryDeviceFacts(facts) != KernelStatus::Ok) return cudaErrorInvalidDevice;
        const std::int64_t groups = (p.vocab + kR - 1) / kR;
        const std::int64_t needed = (groups + kThreads / 32 - 1) / (kThreads / 32);
        const std::int64_t resident = 2 * static_cast<std::int64_t>(facts.smCount);  // __launch_bounds__(256, 2)
        return launchKernel(fp8LmHeadPersistentKernel<kR>, dim3(static_cast<unsigned>(std::min(needed, resident))), dim3(kThreads),
                            0, stream, p.programmaticLaunch, p.codes, p.rowScales, p.vocab, p.hidden, x, logits, p.softcap);
    } else {
        constexpr int kR = 4;
        const std::int64_t warps = (p.vocab + kR - 1) / kR;
        const std::int64_t blocks = (warps + kThreads / 32 - 1) / (kThreads / 32);
        return launchKernel(fp8LmHeadKernel<kR, NB>, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream,
                            p.programmaticLaunch, p.codes, p.rowScales, p.vocab, p.hidden, x, p.xStride, logits,
                            p.logitStride, p.softcap);
    }
}

// The tensor-core form for NB (1 or 2) x rows: a one-shot grid of one tile per warp, or with
// `persistent` the resident block count.
template <int NB, int D = 4, int L = 1>
cudaError_t launchMma(const Fp8LmHeadParams& p, const float* x, float* logits, cudaStream_t stream) {
    constexpr int kThreads = 256;
    const auto kernel = fp8LmHeadMmaKernel<NB, D, L>;
    const std::size_t smem = mmaSharedBytes(NB, p.hidden);
    const std::int64_t tiles = (p.vocab + 15) / 16;
    std::int64_t blocks = (tiles + kThreads / 32 - 1) / (kThreads / 32);
    if (p.persistent) {
        DeviceFacts facts;
        if (queryDeviceFacts(facts) != KernelStatus::Ok) return cudaErrorInvalidDevice;
        int perSm = 0;
        const cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kernel, kThreads, smem);
        if (err != cudaSuccess) return err;
        blocks = std::min(blocks, static_cast<std::int64_t>(std::max(perSm, 1)) * facts.smCount);
    }
    return launchKernel(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), smem, stream, p.programmaticLaunch,
                        p.codes, p.rowScales, p.vocab, p.hidden, x, p.xStride, logits, p.logitStride, p.softcap);
}

}  // namespace fp8detail

KernelStatus launchFp8LmHead(const Fp8LmHeadParams& p, cudaStream_t stream) {
    if (!p.codes || !p.rowScales || !p.x || !p.logits) return KernelStatus::InvalidArgument;
    if (p.vocab < 1 || p.hidden < 16 || p.rows < 1) return KernelStatus::InvalidArgument;
    if (p.hidden % 16 != 0) return KernelStatus::Unsupported;
    if (p.xStride < p.hidden || p.xStride % 4 != 0 || p.logitStride < p.vocab)
        return KernelStatus::InvalidArgument;
    if (!aligned16(p.codes) || !aligned16(p.x)) return KernelStatus::InvalidArgument;
    // The tensor-core form keeps two x rows' planes in the default 48 KB of shared memory
    // (H up to 5888); wider tables take the CUDA-core kernels.
    const bool tensorCores = p.tensorCores && fp8detail::mmaSharedBytes(2, p.hidden) <= 48 * 1024;
    for (int r0 = 0; r0 < p.rows; r0 += 2) {
        const float* x = p.x + r0 * p.xStride;
        float* logits = p.logits + r0 * p.logitStride;
        const bool two = p.rows - r0 >= 2;
        const cudaError_t err = tensorCores ? (two ? fp8detail::launchMma<2>(p, x, logits, stream)
                                                   : fp8detail::launchMma<1>(p, x, logits, stream))
                                            : (two ? fp8detail::launchNb<2>(p, x, logits, stream)
                                                   : fp8detail::launchNb<1>(p, x, logits, stream));
        if (err != cudaSuccess) return KernelStatus::LaunchFailed;
    }
    return KernelStatus::Ok;
}

}  // namespace gemma::cuda
