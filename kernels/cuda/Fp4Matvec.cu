// FP4-E2M1 group-128 matvec: y[r][o] = Σ_i W[o][i]·x[r][i], and the fused MLP front half
// y = gelu_tanh(W_gate·x) ⊙ (W_up·x).
//
// Layouts (kernels/include/kernels/WeightFormats.h): codes [out][fp4RowBytes(in)], byte j of a row
// = inputs 2j (low nibble) and 2j+1 (high nibble); bf16 scales [out][fp4GroupsPerRow(in)]; rows
// padded to whole groups with +0 codes. x and y are fp32 (activations are fp32 everywhere in the
// CUDA backend: x is tiny next to W, so fp32 costs nothing in bandwidth and matches the
// reference's linearFp4 input exactly). Accumulation is fp32.
//
// Work split: one warp owns R consecutive output rows (2R weight streams for GeGLU); lane l reads
// the 16-byte chunks l, l+32, ... of each of its rows, U chunks per iteration (8 loads of 16 bytes
// in flight per lane at batch 1, 4 at larger batches, plus as many prefetched). A 16-byte chunk is 32 weights inside one
// 128-group, so a lane multiplies its 32-term partial sum Σ x·e2m1 by the group scale once
// ("scale folding"). The next chunk's loads are issued before the current chunk is decoded
// (one-ahead register pipeline), and x is read once per chunk for all R rows.
//
// Decode without a lookup table in memory: PRMT (byte permute) indexes an 8-entry table held in
// two registers that maps a 3-bit E2M1 magnitude to the high byte of the equal FP16 value
// (0, 0.5, 1, 1.5, 2, 3, 4, 6 all have a zero low byte in FP16); a second PRMT in sign-replicate
// mode turns the nibble sign bits into byte masks; a third places the bytes into FP16 pairs,
// converted to fp32 exactly. Every decoded value equals e2m1ToFloat() bit for bit.
//
// Preconditions (checked by the launchers): codes 16-byte aligned; x 16-byte aligned and xStride
// % 4 == 0; in >= 1, out >= 1, rows >= 1. `in` need not be a multiple of 128 or of 32: the last
// chunk's x values past `in` are never read (their weights are the +0 padding).
#include "Fp4Matvec.h"

#include <kernels/WeightFormats.h>

#include "CudaCommon.h"

namespace gemma::cuda {
namespace fp4detail {

// ---- device helpers ------------------------------------------------------------------------------
__device__ __forceinline__ std::uint32_t prmt(std::uint32_t a, std::uint32_t b, std::uint32_t sel) {
    std::uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}

// FP16 high bytes of the E2M1 magnitudes 0, 0.5, 1, 1.5 | 2, 3, 4, 6.
constexpr std::uint32_t kTableLo = 0x3E3C3800u;
constexpr std::uint32_t kTableHi = 0x46444240u;

// Decodes the 8 nibbles of `w` (nibble k = input k) into 8 floats, exactly E2M1 values.
__device__ __forceinline__ void decode8(std::uint32_t w, float (&f)[8]) {
    const std::uint32_t mag = w & 0x77777777u;
    const std::uint32_t hiLo = prmt(kTableLo, kTableHi, mag);        // weights 0..3 (low 16 bits)
    const std::uint32_t hiHi = prmt(kTableLo, kTableHi, mag >> 16);  // weights 4..7
    const std::uint32_t w4 = w << 4;
    // Sign-replicate mode: byte k = 0xFF when weight k is negative.
    const std::uint32_t signLo = prmt(w, w4, 0x9D8Cu);
    const std::uint32_t signHi = prmt(w, w4, 0xBFAEu);
    const std::uint32_t bytesLo = hiLo | (signLo & 0x80808080u);
    const std::uint32_t bytesHi = hiHi | (signHi & 0x80808080u);
    // FP16 pairs [0, b_k, 0, b_k+1].
    const std::uint32_t h01 = prmt(bytesLo, 0u, 0x1404u);
    const std::uint32_t h23 = prmt(bytesLo, 0u, 0x3424u);
    const std::uint32_t h45 = prmt(bytesHi, 0u, 0x1404u);
    const std::uint32_t h67 = prmt(bytesHi, 0u, 0x3424u);
    const std::uint32_t pairs[4] = {h01, h23, h45, h67};
#pragma unroll
    for (int p = 0; p < 4; ++p) {
        __half2 h = *reinterpret_cast<const __half2*>(&pairs[p]);
        const float2 v = __half22float2(h);
        f[2 * p] = v.x;
        f[2 * p + 1] = v.y;
    }
}

__device__ __forceinline__ float geluTanh(float v) {
    const float kAlpha = 0.7978845608028654f;  // sqrt(2/pi)
    const float inner = kAlpha * (v + 0.044715f * v * v * v);
    return 0.5f * v * (1.0f + tanhf(inner));
}

// Loads the 8 x values of word `word` of chunk `chunk` for one input row; zero past `in`.
__device__ __forceinline__ void loadX8(const float* __restrict__ xRow, std::int64_t in, int chunk,
                                       int word, bool fullChunk, float (&xv)[8]) {
    const std::int64_t base = static_cast<std::int64_t>(chunk) * 32 + word * 8;
    if (fullChunk) {
        const float4 a = __ldg(reinterpret_cast<const float4*>(xRow + base));
        const float4 b = __ldg(reinterpret_cast<const float4*>(xRow + base + 4));
        xv[0] = a.x; xv[1] = a.y; xv[2] = a.z; xv[3] = a.w;
        xv[4] = b.x; xv[5] = b.y; xv[6] = b.z; xv[7] = b.w;
    } else {
#pragma unroll
        for (int k = 0; k < 8; ++k) xv[k] = (base + k < in) ? __ldg(xRow + base + k) : 0.0f;
    }
}

// Shared-memory copy of x: chunk c (32 inputs) at c·kXsPitch floats; the 4-float pad makes the
// lanes' 16-byte reads of chunks l, l+32, ... conflict-free (8 lanes cover all 32 banks). Global
// x read directly would touch 32 cache lines per warp instruction (lanes are 128 bytes apart).
constexpr int kXsPitch = 36;

__device__ __forceinline__ void loadX8Shared(const float* xsRow, int chunk, int word, float (&xv)[8]) {
    const float4 a = *reinterpret_cast<const float4*>(xsRow + chunk * kXsPitch + word * 8);
    const float4 b = *reinterpret_cast<const float4*>(xsRow + chunk * kXsPitch + word * 8 + 4);
    xv[0] = a.x; xv[1] = a.y; xv[2] = a.z; xv[3] = a.w;
    xv[4] = b.x; xv[5] = b.y; xv[6] = b.z; xv[7] = b.w;
}

// ---- kernel ------------------------------------------------------------------------------------------
// R rows per warp, NB input vectors, GEGLU: streams 0..R-1 gate rows, R..2R-1 up rows.
// XSMEM: the block first copies x (zero past `in`) into shared memory, then its warps walk the
// row sets with a grid stride (persistent grid); otherwise x is read from global memory and the
// grid covers every row set once.
template <int R, int NB, bool GEGLU, bool XSMEM>
__global__ void __launch_bounds__(256) fp4MatvecKernel(
    const std::uint8_t* __restrict__ codes, const std::uint16_t* __restrict__ scales,
    const std::uint8_t* __restrict__ upCodes, const std::uint16_t* __restrict__ upScales,
    std::int64_t out, std::int64_t in, const float* __restrict__ x, std::int64_t xStride,
    float* __restrict__ y, std::int64_t yStride) {
    constexpr int S = GEGLU ? 2 * R : R;
    const int lane = threadIdx.x & 31;
    const std::int64_t groups = formats::fp4GroupsPerRow(in);
    const std::int64_t rowBytes = groups * (formats::kFp4GroupSize / 2);
    const int chunks = static_cast<int>(rowBytes / 16);
    const int fullChunks = static_cast<int>(in / 32);  // chunks whose 32 x values all exist

    extern __shared__ float4 xsRaw[];
    float* xs = reinterpret_cast<float*>(xsRaw);
    if constexpr (XSMEM) {
        const int quads = chunks * 8;  // float4 pieces per x row
        for (int idx = threadIdx.x; idx < NB * quads; idx += blockDim.x) {
            const int b = idx / quads;
            const int q = idx % quads;
            const std::int64_t base = static_cast<std::int64_t>(q) * 4;
            const float* src = x + b * xStride + base;
            float4 v;
            if (base + 4 <= in) {
                v = __ldg(reinterpret_cast<const float4*>(src));
            } else {
                v.x = base + 0 < in ? __ldg(src + 0) : 0.0f;
                v.y = base + 1 < in ? __ldg(src + 1) : 0.0f;
                v.z = base + 2 < in ? __ldg(src + 2) : 0.0f;
                v.w = base + 3 < in ? __ldg(src + 3) : 0.0f;
            }
            *reinterpret_cast<float4*>(xs + (b * chunks + q / 8) * kXsPitch + (q % 8) * 4) = v;
        }
        __syncthreads();
    }

    const std::int64_t warpStride = static_cast<std::int64_t>(gridDim.x) * (blockDim.x >> 5);
    for (std::int64_t warpGlobal =
             static_cast<std::int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
         warpGlobal * R < out; warpGlobal += warpStride) {
        const std::int64_t row0 = warpGlobal * R;

        const std::uint8_t* rowCodes[S];
        const std::uint16_t* rowScales[S];
#pragma unroll
        for (int s = 0; s < S; ++s) {
            const int r = GEGLU ? (s % R) : s;
            std::int64_t row = row0 + r;
            if (row >= out) row = out - 1;  // duplicate a valid row; its result is not stored
            const bool up = GEGLU && s >= R;
            rowCodes[s] = (up ? upCodes : codes) + row * rowBytes;
            rowScales[s] = (up ? upScales : scales) + row * groups;
        }

        float acc[S][NB];
#pragma unroll
        for (int s = 0; s < S; ++s)
#pragma unroll
            for (int b = 0; b < NB; ++b) acc[s][b] = 0.0f;

        // U chunk slots per iteration (chunks c, c+32, ..., c+32(U-1)) so that S·U 16-byte loads are
        // in flight per lane, plus the same number prefetched for the next iteration.
        constexpr int kLoadsInFlight = NB == 1 ? 8 : 4;
        constexpr int U = S >= kLoadsInFlight ? 1 : kLoadsInFlight / S;
        uint4 cur[U][S];
        std::uint16_t curScale[U][S];
        auto loadSlots = [&](int base, uint4 (&w)[U][S], std::uint16_t (&sc)[U][S]) {
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int cc = base + 32 * u;
                if (cc < chunks) {
#pragma unroll
                    for (int s = 0; s < S; ++s) {
                        w[u][s] = ldgStream16(rowCodes[s] + static_cast<std::int64_t>(cc) * 16);
                        sc[u][s] = __ldg(rowScales[s] + (cc >> 2));
                    }
                }
            }
        };
        int c = lane;
        loadSlots(c, cur, curScale);
        for (; c < chunks; c += 32 * U) {
            // One-ahead pipeline: issue the next iteration's loads before decoding this one.
            uint4 nxt[U][S];
            std::uint16_t nxtScale[U][S];
            const int cn = c + 32 * U;
            if (cn < chunks) loadSlots(cn, nxt, nxtScale);
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int cc = c + 32 * u;
                if (cc >= chunks) break;
                const bool full = cc < fullChunks;
                float part[S][NB];
#pragma unroll
                for (int s = 0; s < S; ++s)
#pragma unroll
                    for (int b = 0; b < NB; ++b) part[s][b] = 0.0f;
#pragma unroll
                for (int word = 0; word < 4; ++word) {
                    float xv[NB][8];
#pragma unroll
                    for (int b = 0; b < NB; ++b) {
                        if constexpr (XSMEM) loadX8Shared(xs + b * chunks * kXsPitch, cc, word, xv[b]);
                        else loadX8(x + b * xStride, in, cc, word, full, xv[b]);
                    }
#pragma unroll
                    for (int s = 0; s < S; ++s) {
                        const std::uint32_t w = word == 0 ? cur[u][s].x : word == 1 ? cur[u][s].y
                                              : word == 2 ? cur[u][s].z : cur[u][s].w;
                        float f[8];
                        decode8(w, f);
#pragma unroll
                        for (int b = 0; b < NB; ++b)
#pragma unroll
                            for (int k = 0; k < 8; ++k) part[s][b] = fmaf(f[k], xv[b][k], part[s][b]);
                    }
                }
#pragma unroll
                for (int s = 0; s < S; ++s) {
                    const float scale = __uint_as_float(static_cast<std::uint32_t>(curScale[u][s]) << 16);
#pragma unroll
                    for (int b = 0; b < NB; ++b) acc[s][b] = fmaf(part[s][b], scale, acc[s][b]);
                }
            }
            if (cn < chunks) {
#pragma unroll
                for (int u = 0; u < U; ++u)
#pragma unroll
                    for (int s = 0; s < S; ++s) {
                        cur[u][s] = nxt[u][s];
                        curScale[u][s] = nxtScale[u][s];
                    }
            }
        }

#pragma unroll
        for (int s = 0; s < S; ++s)
#pragma unroll
            for (int b = 0; b < NB; ++b) acc[s][b] = warpSum(acc[s][b]);

        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const std::int64_t row = row0 + r;
                if (row >= out) break;
#pragma unroll
                for (int b = 0; b < NB; ++b) {
                    float v = acc[r][b];
                    if constexpr (GEGLU) v = geluTanh(v) * acc[R + r][b];
                    y[b * yStride + row] = v;
                }
            }
        }
    }  // row sets
}

// ---- host launcher ---------------------------------------------------------------------------------
constexpr int kThreads = 256;

struct LaunchPlan {
    int smCount = 0;
    int blocksPerSm = 1;
    std::size_t xsBytes = 0;  // 0: x read from global memory
};

template <int R, int NB, bool GEGLU, bool XSMEM>
cudaError_t launchShape(const Fp4MatvecParams& p, const LaunchPlan& plan, const float* x, float* y,
                        cudaStream_t stream) {
    const std::int64_t warps = (p.out + R - 1) / R;
    std::int64_t blocks = (warps + (kThreads / 32) - 1) / (kThreads / 32);
    std::size_t smem = 0;
    if constexpr (XSMEM) {
        smem = plan.xsBytes;
        const std::int64_t resident = static_cast<std::int64_t>(plan.smCount) * plan.blocksPerSm;
        if (blocks > resident) blocks = resident;
        if (smem > 48 * 1024) {
            const cudaError_t err = cudaFuncSetAttribute(fp4MatvecKernel<R, NB, GEGLU, XSMEM>,
                                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                         static_cast<int>(smem));
            if (err != cudaSuccess) return err;
        }
    }
    fp4MatvecKernel<R, NB, GEGLU, XSMEM><<<static_cast<unsigned>(blocks), kThreads, smem, stream>>>(
        p.codes, p.scales, p.upCodes, p.upScales, p.out, p.in, x, p.xStride, y, p.yStride);
    return cudaGetLastError();
}

template <int R, int NB, bool GEGLU>
cudaError_t launchX(const Fp4MatvecParams& p, const LaunchPlan& plan, const float* x, float* y,
                    cudaStream_t stream) {
    return plan.xsBytes ? launchShape<R, NB, GEGLU, true>(p, plan, x, y, stream)
                        : launchShape<R, NB, GEGLU, false>(p, plan, x, y, stream);
}

template <bool GEGLU>
cudaError_t launchRows(const Fp4MatvecParams& p, const LaunchPlan& plan, int nb, int rowsPerWarp,
                       const float* x, float* y, cudaStream_t stream) {
    switch (nb) {
        case 1:
            if constexpr (!GEGLU) {
                if (rowsPerWarp >= 4) return launchX<4, 1, GEGLU>(p, plan, x, y, stream);
            }
            if (rowsPerWarp >= 2) return launchX<2, 1, GEGLU>(p, plan, x, y, stream);
            return launchX<1, 1, GEGLU>(p, plan, x, y, stream);
        case 2:
            if (rowsPerWarp >= 2) return launchX<2, 2, GEGLU>(p, plan, x, y, stream);
            return launchX<1, 2, GEGLU>(p, plan, x, y, stream);
        case 3:
            if (rowsPerWarp >= 2) return launchX<2, 3, GEGLU>(p, plan, x, y, stream);
            return launchX<1, 3, GEGLU>(p, plan, x, y, stream);
        default:
            if (rowsPerWarp >= 2) return launchX<2, 4, GEGLU>(p, plan, x, y, stream);
            return launchX<1, 4, GEGLU>(p, plan, x, y, stream);
    }
}

template <bool GEGLU>
KernelStatus launchImpl(const Fp4MatvecParams& p, cudaStream_t stream) {
    if (!p.codes || !p.scales || !p.x || !p.y) return KernelStatus::InvalidArgument;
    if (GEGLU && (!p.upCodes || !p.upScales)) return KernelStatus::InvalidArgument;
    if (p.out < 1 || p.in < 1 || p.rows < 1) return KernelStatus::InvalidArgument;
    if (p.xStride < p.in || p.xStride % 4 != 0 || p.yStride < p.out)
        return KernelStatus::InvalidArgument;
    if (!aligned16(p.codes) || !aligned16(p.x) || (GEGLU && !aligned16(p.upCodes)))
        return KernelStatus::InvalidArgument;
    if (p.rowsPerWarp != 0 && p.rowsPerWarp != 1 && p.rowsPerWarp != 2 && p.rowsPerWarp != 4)
        return KernelStatus::InvalidArgument;
    if (formats::fp4RowBytes(p.in) / 16 > 0x7fffffff / 64) return KernelStatus::Unsupported;
    DeviceFacts facts;
    if (queryDeviceFacts(facts) != KernelStatus::Ok) return KernelStatus::LaunchFailed;
    // Rows per warp: as many as still give >= 16 warps per SM (the resident count at 128
    // registers); more rows per warp means x is re-read less.
    const std::int64_t wantWarps = static_cast<std::int64_t>(facts.smCount) * 16;
    int rowsPerWarp = 1;
    if (p.out / 4 >= wantWarps) rowsPerWarp = 4;
    else if (p.out / 2 >= wantWarps) rowsPerWarp = 2;
    if (p.rowsPerWarp != 0) rowsPerWarp = p.rowsPerWarp;
    if (GEGLU && rowsPerWarp > 2) rowsPerWarp = 2;  // 2R streams per warp
    const std::int64_t chunks = formats::fp4RowBytes(p.in) / 16;
    for (int r0 = 0; r0 < p.rows; r0 += 4) {
        const int nb = p.rows - r0 < 4 ? p.rows - r0 : 4;
        LaunchPlan plan;
        plan.smCount = facts.smCount;
        // x in shared memory when it fits in a block (2 blocks per SM where two fit, else 1);
        // otherwise x comes from global memory.
        const std::size_t xsBytes = static_cast<std::size_t>(nb) * chunks * kXsPitch * sizeof(float);
        if (!p.forceGlobalX && xsBytes <= static_cast<std::size_t>(facts.maxSharedPerBlockOptin)) {
            plan.xsBytes = xsBytes;
            const std::size_t perSm = static_cast<std::size_t>(facts.maxSharedPerSm);
            const std::size_t fit = perSm / (xsBytes + 1024);
            plan.blocksPerSm = fit >= 2 ? 2 : 1;
        }
        const cudaError_t err = launchRows<GEGLU>(p, plan, nb, rowsPerWarp, p.x + r0 * p.xStride,
                                                  p.y + r0 * p.yStride, stream);
        if (err != cudaSuccess) return KernelStatus::LaunchFailed;
    }
    return KernelStatus::Ok;
}

}  // namespace fp4detail

KernelStatus launchFp4Matvec(const Fp4MatvecParams& params, cudaStream_t stream) {
    return fp4detail::launchImpl<false>(params, stream);
}
KernelStatus launchFp4GegluMatvec(const Fp4MatvecParams& params, cudaStream_t stream) {
    return fp4detail::launchImpl<true>(params, stream);
}

}  // namespace gemma::cuda
