// FP4-E2M1 group-128 → BF16 dequantization: y[o][i] = bf16_rne(e2m1(code(o, i)) × scale(o, i/128)),
// or → FP16 with a power-of-two multiplier (Fp4Dequantize.h): the same table method, the table
// entries rounded to FP16 instead (exact while the products are normal FP16 numbers).
//
// Rounding: an E2M1 magnitude (0, 0.5, 1, 1.5, 2, 3, 4, 6) has a 2-bit significand and a bf16
// scale an 8-bit one, so the product needs up to 10 significant bits: it is exact in fp32 (for
// every normal scale) but NOT in bf16. The stored value is the fp32 product rounded to nearest,
// ties to even (formats::floatToBf16), exactly what reference::dequantizeFp4ToBf16 computes; the
// harness checks the two bit for bit. (Products of 1, 2, 4 and 0.5 are powers of two: exact.)
// Since RNE is symmetric in the sign, bf16(±m × s) = ±bf16(m × s): the kernel builds, per group,
// the 8 values bf16(m × s) (sign of s included, so m = 0 gives ±0 as the product does) and flips
// the sign bit for negative codes: −0 × s = −(0 × s) is also what IEEE gives.
//
// Decode without a memory table: the 8 bf16 values of a group are split into their low and high
// bytes, held in 4 registers; PRMT (byte permute, default mode) looks up the low and the high
// bytes of 4 weights at once by their 3-bit magnitudes, a PRMT in sign-replicate mode turns the
// 4 code sign bits into byte masks (as in Fp4Matvec.cu), one XOR applies them to the high bytes,
// and two PRMTs interleave low/high bytes into bf16 pairs: 15 integer ops per 8 weights.
//
// Memory: per weight 0.5 byte is read and 2 bytes written, so the kernel is a streaming copy that
// expands 4×. Codes are read with 16-byte non-caching loads (lane l of a warp reads 16-byte chunk
// base + l: 512 contiguous bytes per warp instruction). A chunk is 32 weights = 64 output bytes;
// if every lane stored its own 64 bytes, each 16-byte store instruction would half-fill 32
// sectors. Instead the two lanes of a pair (chunks 2j, 2j+1, always inside one 128-group and
// one row) swap two code words with __shfl_xor, so that at store k lane 2j writes bytes
// [32k, 32k+16) and lane 2j+1 bytes [32k+16, 32k+32) of the pair's 128 output bytes: every
// store instruction writes whole 32-byte sectors. Grid-stride over warps of 32 chunks, the next
// chunk's load issued before the current one is decoded.
//
// Tiled layout (params.tiled, kernels/include/kernels/Fp4Tiled.h): the kernel walks the same flat
// row-layout chunk indices (chunk = row × chunksPerRow + c) and only the two loads move: the codes
// come from fp4tiled::chunkOffset(row, c, groups), the scale from half scaleShift(row) of word
// scaleWord(row, c / 4, groups), and the codes are read back from their stored form
// (fromStoredCodes). So decode, pair swap and stores are shared, the output is the same bits (a
// −0 code excepted: the tiled layout stores it as +0), and the pair argument above still holds
// (it is about row-layout chunk indices). A warp's 32 chunks are then 8 runs of 64 contiguous
// bytes (the 4 chunks of one row's group sit together in an item), 1 KB apart: whole 32-byte
// sectors still, one more integer division per chunk for (row, c). TILED is a template parameter
// so that the row-layout kernel is unchanged.
//
// Preconditions (checked by the launcher): codes and y 16-byte aligned, tiled scales 4-byte
// aligned, ldOut % 8 == 0, ldOut >= in >= 1, out >= 1, out × fp4RowBytes(in) / 16 < 2^31.
// Columns [in, ldOut) of y are never written (the +0 padding codes past `in` are decoded but not
// stored); the tiled padding rows past `out` are never read.
#include "Fp4Dequantize.h"

#include <kernels/Fp4Decode.h>
#include <kernels/Fp4Tiled.h>
#include <kernels/WeightFormats.h>

#include <type_traits>

#include "CudaCommon.h"

namespace gemma::cuda {
namespace fp4dequant {

using formats::fp4decode::permuteBytes;  // prmt.b32 (kernels/Fp4Decode.h)


// bf16(e2m1Magnitude(m) × scale) for m = 0..7 as byte planes: lo0 = low bytes of m 0..3,
// lo1 = low bytes of m 4..7, hi0/hi1 the high bytes. A PRMT over (lo0, lo1) indexed by a
// 3-bit magnitude returns that entry's low byte.
struct GroupTable {
    std::uint32_t lo0, lo1, hi0, hi1;
};

template <bool FP16>
__device__ __forceinline__ GroupTable makeTable(std::uint16_t scaleBits, float multiplier) {
    const float scale = formats::bf16ToFloat(scaleBits) * multiplier;  // exact: a power of two
    std::uint32_t t[8];
#pragma unroll
    for (int m = 0; m < 8; ++m) {
        const float v = formats::e2m1Magnitude(m) * scale;
        // The hardware conversion is the same RNE (with subnormals) as formats::floatToFp16.
        t[m] = FP16 ? __half_as_ushort(__float2half_rn(v)) : formats::floatToBf16(v);
    }
    const std::uint32_t p01 = t[0] | (t[1] << 16);
    const std::uint32_t p23 = t[2] | (t[3] << 16);
    const std::uint32_t p45 = t[4] | (t[5] << 16);
    const std::uint32_t p67 = t[6] | (t[7] << 16);
    GroupTable g;
    g.lo0 = permuteBytes(p01, p23, 0x6420u);  // bytes 0, 2 of p01 and of p23
    g.hi0 = permuteBytes(p01, p23, 0x7531u);  // bytes 1, 3
    g.lo1 = permuteBytes(p45, p67, 0x6420u);
    g.hi1 = permuteBytes(p45, p67, 0x7531u);
    return g;
}

// The 8 weights of code word `w` (nibble k = input k) as 4 bf16 pairs (input 2p in the low half).
__device__ __forceinline__ uint4 decode8(std::uint32_t w, const GroupTable& g) {
    const std::uint32_t mag = w & 0x77777777u;
    const std::uint32_t magHi = mag >> 16;
    const std::uint32_t loA = permuteBytes(g.lo0, g.lo1, mag);  // weights 0..3 (selector: low 16 bits)
    const std::uint32_t hiA = permuteBytes(g.hi0, g.hi1, mag);
    const std::uint32_t loB = permuteBytes(g.lo0, g.lo1, magHi);  // weights 4..7
    const std::uint32_t hiB = permuteBytes(g.hi0, g.hi1, magHi);
    // Sign-replicate mode over the pool {w, w << 4}: byte k = 0xFF when weight k is negative.
    const std::uint32_t w4 = w << 4;
    const std::uint32_t signA = permuteBytes(w, w4, 0x9D8Cu);
    const std::uint32_t signB = permuteBytes(w, w4, 0xBFAEu);
    const std::uint32_t hiAs = hiA ^ (signA & 0x80808080u);
    const std::uint32_t hiBs = hiB ^ (signB & 0x80808080u);
    uint4 r;
    r.x = permuteBytes(loA, hiAs, 0x5140u);  // [lo0, hi0, lo1, hi1]
    r.y = permuteBytes(loA, hiAs, 0x7362u);  // [lo2, hi2, lo3, hi3]
    r.z = permuteBytes(loB, hiBs, 0x5140u);
    r.w = permuteBytes(loB, hiBs, 0x7362u);
    return r;
}

// One 16-byte store, emitted as such (the compiler may otherwise split a uint4 store into four
// 4-byte ones when it cannot track the alignment through the index arithmetic).
__device__ __forceinline__ void store16(void* p, const uint4& v) {
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}

__device__ __forceinline__ std::uint16_t pieceElement(const uint4& v, int e) {
    const std::uint32_t word = e < 2 ? v.x : e < 4 ? v.y : e < 6 ? v.z : v.w;
    return static_cast<std::uint16_t>((e & 1) ? (word >> 16) : (word & 0xFFFFu));
}

constexpr int kThreads = 256;

// What a scale load reads: one bf16 scale (row layout) or a word of two (tiled layout).
template <bool TILED>
using ScaleWord = std::conditional_t<TILED, std::uint32_t, std::uint16_t>;

// The codes of flat row-layout chunk `chunk` (row chunk / chunksPerRow, bytes [16c, 16c + 16) of
// that row) and the bf16 scale of its group. chunksPerRow = 4 × groups (a group is 64 bytes), so
// in the row layout the scale index is chunk / 4; in the tiled layout both move (Fp4Tiled.h). The
// caller guarantees chunk < totalChunks < 2^31.
template <bool TILED>
__device__ __forceinline__ void loadChunk(const std::uint8_t* __restrict__ codes,
                                          const ScaleWord<TILED>* __restrict__ scales, std::int64_t chunk,
                                          std::uint32_t chunksPerRow, uint4& code, std::uint16_t& scale) {
    if constexpr (TILED) {
        const std::uint32_t c32 = static_cast<std::uint32_t>(chunk);
        const std::uint32_t row = c32 / chunksPerRow;
        const std::uint32_t chunkInRow = c32 - row * chunksPerRow;
        const std::uint32_t groups = chunksPerRow >> 2;
        code = ldgStream16(codes + formats::fp4tiled::chunkOffset(row, chunkInRow, groups));
        const std::uint32_t word = __ldg(scales + formats::fp4tiled::scaleWord(row, chunkInRow >> 2, groups));
        scale = static_cast<std::uint16_t>((word >> formats::fp4tiled::scaleShift(row)) & 0xFFFFu);
    } else {
        code = ldgStream16(codes + chunk * 16);
        scale = __ldg(scales + (chunk >> 2));
    }
}

template <bool FP16, bool TILED>
__global__ void __launch_bounds__(kThreads) fp4DequantizeKernel(
    const std::uint8_t* __restrict__ codes, const ScaleWord<TILED>* __restrict__ scales,
    std::int64_t in, std::uint32_t chunksPerRow, std::uint32_t totalChunks,
    std::uint16_t* __restrict__ y, std::int64_t ldOut, float multiplier) {
    const unsigned lane = threadIdx.x & 31u;
    const bool odd = (lane & 1u) != 0;
    const std::int64_t warpsTotal = static_cast<std::int64_t>(gridDim.x) * (kThreads / 32);
    const std::int64_t stride = warpsTotal * 32;  // chunks per grid-stride step
    std::int64_t base = (static_cast<std::int64_t>(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5)) * 32;

    // One-ahead pipeline: the chunk (and scale) of the next step is loaded before this one is
    // decoded and stored. Lanes past the end load nothing but still take part in the shuffles
    // (the loop condition is warp-uniform; totalChunks is even, so pairs are never split).
    uint4 cur = make_uint4(0, 0, 0, 0);
    std::uint16_t curScale = 0;
    if (base + lane < totalChunks) loadChunk<TILED>(codes, scales, base + lane, chunksPerRow, cur, curScale);
    for (; base < totalChunks; base += stride) {
        const std::int64_t chunk = base + lane;
        const std::int64_t nextChunk = chunk + stride;
        uint4 nxt = make_uint4(0, 0, 0, 0);
        std::uint16_t nxtScale = 0;
        if (nextChunk < totalChunks) loadChunk<TILED>(codes, scales, nextChunk, chunksPerRow, nxt, nxtScale);

        if constexpr (TILED) {  // the tiled layout's stored codes back to codes (Fp4Tiled.h)
            cur = make_uint4(formats::fp4tiled::fromStoredCodes(cur.x), formats::fp4tiled::fromStoredCodes(cur.y),
                             formats::fp4tiled::fromStoredCodes(cur.z), formats::fp4tiled::fromStoredCodes(cur.w));
        }
        // Pair swap: the even lane (chunk a) keeps a0, a2 and receives b0, b2; the odd lane
        // (chunk b) keeps b1, b3 and receives a1, a3. Store k then covers pair bytes [32k, 32k+32).
        const std::uint32_t send0 = odd ? cur.x : cur.y;
        const std::uint32_t send1 = odd ? cur.z : cur.w;
        const std::uint32_t recv0 = __shfl_xor_sync(0xffffffffu, send0, 1);
        const std::uint32_t recv1 = __shfl_xor_sync(0xffffffffu, send1, 1);
        if (chunk < totalChunks) {
            std::uint32_t words[4];
            words[0] = odd ? recv0 : cur.x;  // a0 | a1
            words[1] = odd ? recv1 : cur.z;  // a2 | a3
            words[2] = odd ? cur.y : recv0;  // b0 | b1
            words[3] = odd ? cur.w : recv1;  // b2 | b3
            const GroupTable table = makeTable<FP16>(curScale, multiplier);  // both chunks of a pair share a group
            const std::uint32_t c32 = static_cast<std::uint32_t>(chunk);
            const std::uint32_t row = c32 / chunksPerRow;
            const std::uint32_t pairChunk = (c32 - row * chunksPerRow) & ~1u;
            const std::int64_t col0 = static_cast<std::int64_t>(pairChunk) * 32 + (odd ? 8 : 0);
            std::uint16_t* outRow = y + static_cast<std::int64_t>(row) * ldOut;
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                const std::int64_t col = col0 + 16 * k;
                if (col >= in) break;  // the rest of this lane's pieces are padding
                const uint4 v = decode8(words[k], table);
                if (col + 8 <= in) {
                    store16(outRow + col, v);
                } else {
#pragma unroll
                    for (int e = 0; e < 8; ++e)
                        if (col + e < in) outRow[col + e] = pieceElement(v, e);
                }
            }
        }
        cur = nxt;
        curScale = nxtScale;
    }
}

}  // namespace fp4dequant

KernelStatus launchFp4DequantizeBf16(const Fp4DequantizeParams& p, cudaStream_t stream) {
    if (!p.codes || !p.scales || !p.y) return KernelStatus::InvalidArgument;
    if (p.out < 1 || p.in < 1 || p.ldOut < p.in || p.ldOut % 8 != 0 || p.blocks < 0)
        return KernelStatus::InvalidArgument;
    if (!aligned16(p.codes) || !aligned16(p.y)) return KernelStatus::InvalidArgument;
    // The tiled scales are read as 32-bit words (two bf16 scales each).
    if (p.tiled && (reinterpret_cast<std::uintptr_t>(p.scales) & 3u) != 0) return KernelStatus::InvalidArgument;
    if (!isPowerOfTwo(p.multiplier)) return KernelStatus::InvalidArgument;
    const std::int64_t chunksPerRow = formats::fp4RowBytes(p.in) / 16;
    if (chunksPerRow > 0x7fffffff / p.out) return KernelStatus::Unsupported;  // 32-bit chunk index
    const std::int64_t totalChunks = chunksPerRow * p.out;
    DeviceFacts facts;
    if (queryDeviceFacts(facts) != KernelStatus::Ok) return KernelStatus::LaunchFailed;
    // Grid: one chunk per thread per grid-stride step, at most one resident wave (oneWaveBlocks).
    constexpr std::int64_t kChunksPerBlock = fp4dequant::kThreads;
    const std::int64_t wanted = (totalChunks + kChunksPerBlock - 1) / kChunksPerBlock;
    // scales: the kernel's own pointer type (a uint16 scale, or a uint32 word of two when tiled).
    const auto launchAs = [&](auto kernel, auto scales, OccupancyCache& cache) {
        unsigned blocks = 0;
        const KernelStatus status = oneWaveBlocks(kernel, fp4dequant::kThreads, wanted, facts, cache, blocks);
        if (status != KernelStatus::Ok) return status;
        if (p.blocks > 0) blocks = static_cast<unsigned>(p.blocks);
        kernel<<<blocks, fp4dequant::kThreads, 0, stream>>>(p.codes, scales, p.in, static_cast<std::uint32_t>(chunksPerRow),
                                                            static_cast<std::uint32_t>(totalChunks), p.y, p.ldOut, p.multiplier);
        return launchStatus();
    };
    thread_local OccupancyCache bf16Cache, fp16Cache, bf16TiledCache, fp16TiledCache;
    if (p.tiled) {
        const auto* words = reinterpret_cast<const std::uint32_t*>(p.scales);  // 4-byte aligned: checked above
        return p.fp16 ? launchAs(fp4dequant::fp4DequantizeKernel<true, true>, words, fp16TiledCache)
                      : launchAs(fp4dequant::fp4DequantizeKernel<false, true>, words, bf16TiledCache);
    }
    return p.fp16 ? launchAs(fp4dequant::fp4DequantizeKernel<true, false>, p.scales, fp16Cache)
                  : launchAs(fp4dequant::fp4DequantizeKernel<false, false>, p.scales, bf16Cache);
}

}  // namespace gemma::cuda
