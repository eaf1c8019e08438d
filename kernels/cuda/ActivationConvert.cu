// fp32 → BF16 conversion of the activations that feed a BF16 GEMM, with an optional low part:
//   hi = bf16_rne(x),  lo = bf16_rne(x − hi).
// x − hi is exact in fp32 (hi is x rounded to 8 significant bits, within a factor of 2 of x:
// Sterbenz), and |x − hi| <= 2^-8·|x| (bf16's unit roundoff); rounding that to 8 bits leaves
// |x − (hi + lo)| <= 2^-8·|x − hi| <= 2^-16·|x| (normal range), so hi·W + lo·W, each accumulated
// in fp32, multiplies W by a near-fp32 operand. Non-finite x: hi = bf16(x) (NaN stays
// NaN, ±inf stays ±inf) and lo = NaN; |x| so large that hi rounds up to infinity gives lo = −inf.
// Rounding is formats::floatToBf16 (as the reference), so the output is the reference's bits.
// One thread converts 8 consecutive columns of a row per grid-stride step (two 16-byte loads,
// one 16-byte store per output when the layout allows).
#include "ActivationConvert.h"

#include <type_traits>

#include <kernels/WeightFormats.h>

#include "CudaCommon.h"

namespace gemma::cuda {
namespace actconv {

constexpr int kThreads = 256;

// FP16: the same split of v·multiplier with FP16 steps (formats::floatToFp16, the RNE the
// hardware conversion also implements); v·multiplier − hi is exact in fp32 as well.
template <bool FP16>
__device__ __forceinline__ void split1(float v, float multiplier, std::uint16_t& h, std::uint16_t& l) {
    if constexpr (FP16) {
        const float scaled = v * multiplier;
        h = formats::floatToFp16(scaled);
        l = formats::floatToFp16(scaled - formats::fp16ToFloat(h));
    } else {
        h = formats::floatToBf16(v);
        l = formats::floatToBf16(v - formats::bf16ToFloat(h));
    }
}

template <bool VEC, bool FP16>
__global__ void __launch_bounds__(kThreads) activationToBf16Kernel(
    const float* __restrict__ x, std::int64_t xStride, std::uint32_t rows, std::int64_t cols,
    std::uint32_t piecesPerRow, std::uint16_t* __restrict__ hi, std::uint16_t* __restrict__ lo,
    std::int64_t outStride, float multiplier) {
    const std::int64_t total = static_cast<std::int64_t>(rows) * piecesPerRow;
    const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * kThreads;
    for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total;
         i += stride) {
        const std::uint32_t row = static_cast<std::uint32_t>(i / piecesPerRow);
        const std::int64_t col = (i - static_cast<std::int64_t>(row) * piecesPerRow) * 8;
        const float* xr = x + row * xStride + col;
        std::uint16_t* hr = hi + row * outStride + col;
        std::uint16_t* lr = lo ? lo + row * outStride + col : nullptr;
        if (VEC && col + 8 <= cols) {
            const float4 a = __ldg(reinterpret_cast<const float4*>(xr));
            const float4 b = __ldg(reinterpret_cast<const float4*>(xr + 4));
            const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
            std::uint16_t h[8], l[8];
#pragma unroll
            for (int k = 0; k < 8; ++k) split1<FP16>(v[k], multiplier, h[k], l[k]);
            uint4 ho, lo4;
            ho.x = h[0] | (static_cast<std::uint32_t>(h[1]) << 16);
            ho.y = h[2] | (static_cast<std::uint32_t>(h[3]) << 16);
            ho.z = h[4] | (static_cast<std::uint32_t>(h[5]) << 16);
            ho.w = h[6] | (static_cast<std::uint32_t>(h[7]) << 16);
            *reinterpret_cast<uint4*>(hr) = ho;
            if (lr) {
                lo4.x = l[0] | (static_cast<std::uint32_t>(l[1]) << 16);
                lo4.y = l[2] | (static_cast<std::uint32_t>(l[3]) << 16);
                lo4.z = l[4] | (static_cast<std::uint32_t>(l[5]) << 16);
                lo4.w = l[6] | (static_cast<std::uint32_t>(l[7]) << 16);
                *reinterpret_cast<uint4*>(lr) = lo4;
            }
        } else {
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                if (col + k >= cols) break;
                std::uint16_t h, l;
                split1<FP16>(__ldg(xr + k), multiplier, h, l);
                hr[k] = h;
                if (lr) lr[k] = l;
            }
        }
    }
}

// Grid-stride launch over `total` pieces, at most one resident wave (oneWaveBlocks).
template <bool VEC, bool FP16, typename... Args>
KernelStatus launch(const DeviceFacts& facts, std::int64_t total, cudaStream_t stream, Args... args) {
    thread_local OccupancyCache cache;
    unsigned blocks = 0;
    const KernelStatus status =
        oneWaveBlocks(activationToBf16Kernel<VEC, FP16>, kThreads, (total + kThreads - 1) / kThreads, facts, cache, blocks);
    if (status != KernelStatus::Ok) return status;
    activationToBf16Kernel<VEC, FP16><<<blocks, kThreads, 0, stream>>>(args...);
    return launchStatus();
}

}  // namespace actconv

KernelStatus launchActivationToBf16(const ActivationConvertParams& p, cudaStream_t stream) {
    if (!p.x || !p.hi) return KernelStatus::InvalidArgument;
    if (p.rows < 1 || p.cols < 1 || p.xStride < p.cols || p.outStride < p.cols)
        return KernelStatus::InvalidArgument;
    const std::int64_t piecesPerRow = (p.cols + 7) / 8;
    if (p.rows > 0x7fffffff || piecesPerRow > 0x7fffffff) return KernelStatus::Unsupported;
    const bool vec = aligned16(p.x) && aligned16(p.hi) && (!p.lo || aligned16(p.lo)) &&
                     p.xStride % 4 == 0 && p.outStride % 8 == 0;
    DeviceFacts facts;
    if (queryDeviceFacts(facts) != KernelStatus::Ok) return KernelStatus::LaunchFailed;
    const std::int64_t total = p.rows * piecesPerRow;
    const auto rows = static_cast<std::uint32_t>(p.rows);
    const auto pieces = static_cast<std::uint32_t>(piecesPerRow);
    if (!isPowerOfTwo(p.multiplier)) return KernelStatus::InvalidArgument;
    const auto go = [&](auto vecTag, auto fp16Tag) {
        return actconv::launch<decltype(vecTag)::value, decltype(fp16Tag)::value>(
            facts, total, stream, p.x, p.xStride, rows, p.cols, pieces, p.hi, p.lo, p.outStride, p.multiplier);
    };
    using Yes = std::true_type;
    using No = std::false_type;
    if (vec) return p.fp16 ? go(Yes{}, Yes{}) : go(Yes{}, No{});
    return p.fp16 ? go(No{}, Yes{}) : go(No{}, No{});
}

}  // namespace gemma::cuda
