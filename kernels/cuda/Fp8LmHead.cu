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
// Preconditions (checked): codes 16-byte aligned, H % 16 == 0, x 16-byte aligned, xStride % 4 == 0.
// Programmatic launch (sm_90+, when asked): every thread waits for the previous kernel before it
// reads x (the one-row kernel requests its first codes before that: they are never written).
#include "Fp8LmHead.h"

#include <algorithm>

#include "CudaCommon.h"

namespace gemma::cuda {
namespace fp8detail {

// ---- device helpers ------------------------------------------------------------------------------
__device__ __forceinline__ float2 e4m3x2ToFloat2(std::uint32_t twoCodes) {
    std::uint32_t h2;
    asm("{\n .reg .b16 lo;\n cvt.u16.u32 lo, %1;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n}"
        : "=r"(h2)
        : "r"(twoCodes));
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

}  // namespace fp8detail

KernelStatus launchFp8LmHead(const Fp8LmHeadParams& p, cudaStream_t stream) {
    if (!p.codes || !p.rowScales || !p.x || !p.logits) return KernelStatus::InvalidArgument;
    if (p.vocab < 1 || p.hidden < 16 || p.rows < 1) return KernelStatus::InvalidArgument;
    if (p.hidden % 16 != 0) return KernelStatus::Unsupported;
    if (p.xStride < p.hidden || p.xStride % 4 != 0 || p.logitStride < p.vocab)
        return KernelStatus::InvalidArgument;
    if (!aligned16(p.codes) || !aligned16(p.x)) return KernelStatus::InvalidArgument;
    for (int r0 = 0; r0 < p.rows; r0 += 2) {
        const float* x = p.x + r0 * p.xStride;
        float* logits = p.logits + r0 * p.logitStride;
        const cudaError_t err = (p.rows - r0 >= 2) ? fp8detail::launchNb<2>(p, x, logits, stream)
                                                   : fp8detail::launchNb<1>(p, x, logits, stream);
        if (err != cudaSuccess) return KernelStatus::LaunchFailed;
    }
    return KernelStatus::Ok;
}

}  // namespace gemma::cuda
