// FP4-E2M1 group-128 matvec: y[r][o] = Σ_i W[o][i]·x[r][i], and the fused MLP front half
// y = gelu_tanh(W_gate·x) ⊙ (W_up·x).
//
// Layouts (kernels/include/kernels/WeightFormats.h): codes [out][fp4RowBytes(in)], byte j of a row
// = inputs 2j (low nibble) and 2j+1 (high nibble); bf16 scales [out][fp4GroupsPerRow(in)]; rows
// padded to whole groups with +0 codes. Or, with Fp4MatvecParams::tiled (the CUDA backend's
// default since version 5 of docs/PERFORMANCE.md), the same bytes in the tiled layout of
// kernels/include/kernels/Fp4Tiled.h: each 16-row × 128-input item contiguous in the order the
// tensor-core lanes read it; every kernel here reads both, with bit-identical results. x and y
// are fp32 (activations are fp32 everywhere in the CUDA backend: x is tiny next to W, so fp32
// costs nothing in bandwidth and matches the reference's linearFp4 input exactly). Accumulation is fp32.
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
// Batch 1 on tensor cores (fp4MatvecMmaKernel). The CUDA-core kernel above is instruction-bound
// on an H200 (Nsight Compute: 0.64 warp instructions issued per scheduler-cycle at 36 % of DRAM
// bandwidth for the fused gate/up, i.e. the FMAs and their conversions, not memory, set the
// pace). The tensor-core kernel keeps the PRMT nibble decode (now to fp16 pairs, no fp32
// conversion) and replaces 8 FMAs + 4 conversions per 8 weights with one mma.sync.m16n8k16:
//   A (16×16, fp16) = 16 weight rows × 16 inputs, decoded straight into A fragments;
//   B (16×8, fp16)  = x: column 0 its hi half, column 1 its lo half (the other columns unused);
//   C (16×8, fp32)  = one group's partial dots (column 0 hi, column 1 lo), summed and × the group
//                     scale into fp32 accumulators.
// Lane (g = lane/4, q = lane%4) owns rows g and g+8 of the block's 16-row tile and, in each
// 128-input group, the 16 code bytes [16q, 16q+16) of both rows: four 32-bit words of 8 nibbles,
// each word one mma (nibbles 0,1 → k-slots 2q,2q+1; nibbles 2,3 → 2q+8,2q+9; 4..7 likewise in a
// second half). The k order inside a group is a permutation; B holds x in the same permutation,
// so the dot product is unchanged. x is staged once per block in shared memory as fp16 hi + lo
// (x·2^-8 = hi + lo; the 2^-8 keeps values up to 1.6e7 inside fp16, and hi + lo carries ~22
// significant bits) in the order the lanes read it, so each lane's B fragment is one conflict-
// free 16-byte load; the result is (C_hi + C_lo) × scale × 2^8, both from one mma (hi and lo
// in two columns of B, so the lo half costs no tensor-core work; measured below). E2M1 values are exact in fp16,
// fp16 products are exact in the fp32 accumulator.
// That fp16 form is kept for comparisons (Fp4MatvecParams::fp16X); the default since version 4
// of docs/PERFORMANCE.md feeds an int8 mma.sync.m16n8k32 instead: weights as int8 E2M1·2 from a
// PRMT table (7 instructions per 8 weights instead of 13), x as the bytes of an integer per
// element (each x to 2^-22 of its group's max since version 24; 2^-31 before) in B columns, exact
// int32 sums per group (see "x as integers" below): +15-25 % on the large shapes, +11 % on the
// 12b decode step (H200).
// The block's 8 warps split the groups of the row (warp w takes groups w, w+8, ...) and reduce
// through shared memory, so even a 512-row weight spreads over 32 blocks × 8 warps; q, k and v
// of a layer run as one launch (Fp4MatvecParams::extra) so their tiles share one grid.
//
// Preconditions (checked by the launchers): codes 16-byte aligned (tiled scales 4-byte aligned);
// x 16-byte aligned and xStride % 4 == 0; in >= 1, out >= 1, rows >= 1. `in` need not be a
// multiple of 128 or of 32: the last chunk's x values past `in` are never read (their weights are
// the +0 padding).
#include "Fp4Matvec.h"

#include <kernels/Fp4Decode.h>
#include <kernels/Fp4Tiled.h>
#include <kernels/WeightFormats.h>

#include "CudaCommon.h"
#include "PhaseClock.h"

namespace gemma::cuda {
namespace fp4detail {

// ---- device helpers ------------------------------------------------------------------------------

// The register-level decode steps live in kernels/Fp4Decode.h (host-tested through a PRMT
// emulation by tests/engine/Fp4DecodeTest.cpp).
using formats::fp4decode::decodeFp16Pairs;

// Decodes the 8 nibbles of `w` (nibble k = input k) into 8 floats, exactly E2M1 values.
__device__ __forceinline__ void decode8(std::uint32_t w, float (&f)[8]) {
    std::uint32_t pairs[4];
    decodeFp16Pairs(w, pairs);
#pragma unroll
    for (int p = 0; p < 4; ++p) {
        __half2 h = *reinterpret_cast<const __half2*>(&pairs[p]);
        const float2 v = __half22float2(h);
        f[2 * p] = v.x;
        f[2 * p + 1] = v.y;
    }
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
    float* __restrict__ y, std::int64_t yStride, bool tiled) {
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
            if (tiled) {  // a row's chunk c at its base + (c / 4)·1024 + (c % 4)·16 (Fp4Tiled.h)
                const std::int64_t r16 = row % 16;
                rowCodes[s] = (up ? upCodes : codes) + (row / 16) * groups * 1024 + (r16 / 8) * 512 + (r16 % 8) * 64;
                rowScales[s] = (up ? upScales : scales) + 2 * ((row / 16) * groups * 8 + row % 8) + (r16 >= 8 ? 1 : 0);
            } else {
                rowCodes[s] = (up ? upCodes : codes) + row * rowBytes;
                rowScales[s] = (up ? upScales : scales) + row * groups;
            }
        }
        // Per group of 4 chunks: the code and scale strides of the layout.
        const int codeGroupStride = tiled ? 1024 : 64;
        const int scaleGroupStride = tiled ? 16 : 1;

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
                        w[u][s] = ldgStream16(rowCodes[s] + static_cast<std::int64_t>(cc >> 2) * codeGroupStride + (cc & 3) * 16);
                        sc[u][s] = __ldg(rowScales[s] + static_cast<std::int64_t>(cc >> 2) * scaleGroupStride);
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
                        decode8(tiled ? formats::fp4tiled::fromStoredCodes(w) : w, f);
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

// ---- batch-1 tensor-core kernel ----------------------------------------------------------------
constexpr int kMmaWarps = 8;                 // warps per block, splitting a row's groups
constexpr int kMmaThreads = 32 * kMmaWarps;
constexpr int kMmaTileRows = 16;             // weight rows per block
constexpr float kXPrescale = 1.0f / 256.0f;  // x·2^-8 in fp16: |x| up to 1.6e7 stays finite
constexpr float kXPostscale = 256.0f;

// How x enters the mma: one fp16, fp16 hi + lo (two B columns), or int32 bytes (int8 mma).
enum class XForm { Fp16Single, Fp16Split, Integer };

// One weight (or, with GeGLU, the gate/up pair) and where its tiles start in the grid.
struct MmaSegment {
    const std::uint8_t* codes;
    const std::uint16_t* scales;
    const std::uint8_t* upCodes;
    const std::uint16_t* upScales;
    float* y;
    std::int64_t out;
    int tileBegin;  // with the tiled layout (TILED kernels), codes and scales point at it
};
struct MmaArgs {
    MmaSegment segment[3];
    int segments;
    std::int64_t in;
    const float* x;
    Fp4MatvecParams::InputNorm norm;  // residualIn null: x is read as given
    const float* geluGate;            // Fp4MatvecParams::geluGate (segment 0 only, not with GeGLU)
};

// D = A·B + C for one m16n8k16 tile (fp16 inputs, fp32 accumulators). Not volatile: it has no
// side effects, so the compiler may interleave independent chains (a volatile asm keeps program
// order, and each mma then waits out its predecessor's latency).
__device__ __forceinline__ void mma16816(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                         std::uint32_t b1) {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The 16 code bytes of rows g and g+8 a lane reads in one group, and the two group scales.
struct GroupLoad {
    uint4 rowA, rowB;
    std::uint32_t scales;  // row g's bf16 scale in the low half, row g+8's in the high half
};

// Row g's bf16 scale of `group` in the low half, row g+8's in the high half.
__device__ __forceinline__ std::uint32_t loadGroupScales(const std::uint16_t* scalesA, const std::uint16_t* scalesB, int group) {
    return static_cast<std::uint32_t>(__ldg(scalesA + group)) | (static_cast<std::uint32_t>(__ldg(scalesB + group)) << 16);
}

// codesA/codesB already include the lane's offset inside a group's 64-byte slice.
__device__ __forceinline__ void loadGroupRows(const std::uint8_t* codesA, const std::uint8_t* codesB,
                                          const std::uint16_t* scalesA, const std::uint16_t* scalesB,
                                          int group, GroupLoad& g) {
    const std::int64_t byte = static_cast<std::int64_t>(group) * 64;
    g.rowA = ldgStream16(codesA + byte);
    g.rowB = ldgStream16(codesB + byte);
    g.scales = loadGroupScales(scalesA, scalesB, group);
}

// Σ over one group for rows g (accA) and g+8 (accB): 4 words per row, 2 mmas per word.
// x rides in the columns of B: with SPLIT, column 0 holds the hi half of x and column 1 the lo
// half (lanes g = 0 read xsHi, every other lane xsLo; columns 2..7 then hold copies of lo whose
// products land in C columns nobody reads), so one mma yields both partial dots and the lo half
// costs no extra mma. C element 0 of a lane with q = 0 is (row g, column 0), element 1 (row g,
// column 1), elements 2 and 3 the same for row g+8; lanes with q != 0 hold unused columns.
// Without SPLIT every lane reads xsHi and column 0 alone is used.
// Two accumulator chains (word parity): a dependent mma.sync waits for its predecessor.
// STORED: the words are the tiled layout's stored codes (Fp4Tiled.h), turned back into codes first.
template <bool SPLIT, bool STORED>
__device__ __forceinline__ void groupDot(const GroupLoad& g, const uint4* xs, int q, float& accA, float& accB) {
    float c[2][4] = {};
    const auto code = [](std::uint32_t w) { return STORED ? formats::fp4tiled::fromStoredCodes(w) : w; };
    const std::uint32_t wordsA[4] = {code(g.rowA.x), code(g.rowA.y), code(g.rowA.z), code(g.rowA.w)};
    const std::uint32_t wordsB[4] = {code(g.rowB.x), code(g.rowB.y), code(g.rowB.z), code(g.rowB.w)};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        std::uint32_t ha[4], hb[4];
        decodeFp16Pairs(wordsA[j], ha);
        decodeFp16Pairs(wordsB[j], hb);
        // Piece j*4 + q of the group holds the 8 x values of word j of lane-quarter q.
        const uint4 xv = xs[j * 4 + q];
        const std::uint32_t first[4] = {ha[0], hb[0], ha[1], hb[1]};
        const std::uint32_t second[4] = {ha[2], hb[2], ha[3], hb[3]};
        mma16816(c[j & 1], first, xv.x, xv.y);
        mma16816(c[j & 1], second, xv.z, xv.w);
    }
    float sumA = c[0][0] + c[1][0];
    float sumB = c[0][2] + c[1][2];
    if constexpr (SPLIT) {
        sumA += c[0][1] + c[1][1];
        sumB += c[0][3] + c[1][3];
    }
    accA = fmaf(sumA, __uint_as_float(g.scales << 16), accA);
    accB = fmaf(sumB, __uint_as_float(g.scales & 0xFFFF0000u), accB);
}

// x[base .. base+3], zero past `in`.
__device__ __forceinline__ float4 loadX4(const float* __restrict__ x, std::int64_t in, std::int64_t base) {
    if (base + 4 <= in) return __ldg(reinterpret_cast<const float4*>(x + base));
    float t[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) t[e] = base + e < in ? __ldg(x + base + e) : 0.0f;
    return make_float4(t[0], t[1], t[2], t[3]);
}

// x → fp16 hi/lo pieces in shared memory (see the kernel); piece c = inputs 8c .. 8c+7, zero past
// `in`. Each thread converts up to kStagePieces pieces per pass with all their loads issued
// first: x comes from L2, and a loop of dependent round trips here delays every warp.
constexpr int kStagePieces = 8;
template <bool SPLIT>
__device__ __forceinline__ void stageX(const float* __restrict__ x, std::int64_t in, int groups, uint4* xsHi,
                                       uint4* xsLo) {
    const int pieces = groups * 16;
    for (int first = threadIdx.x; first < pieces; first += kMmaThreads * kStagePieces) {
        float4 v[kStagePieces][2];
#pragma unroll
        for (int k = 0; k < kStagePieces; ++k) {
            const int c = first + k * kMmaThreads;
            const std::int64_t base = static_cast<std::int64_t>(c) * 8;
            v[k][0] = c < pieces ? loadX4(x, in, base) : make_float4(0.f, 0.f, 0.f, 0.f);
            v[k][1] = c < pieces ? loadX4(x, in, base + 4) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int k = 0; k < kStagePieces; ++k) {
            const int c = first + k * kMmaThreads;
            if (c >= pieces) break;
            const float f[8] = {v[k][0].x, v[k][0].y, v[k][0].z, v[k][0].w, v[k][1].x, v[k][1].y, v[k][1].z, v[k][1].w};
            std::uint32_t hi[4], lo[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float a = f[2 * e] * kXPrescale, b = f[2 * e + 1] * kXPrescale;
                const __half2 h = __floats2half2_rn(a, b);
                const float2 hf = __half22float2(h);
                const __half2 l = __floats2half2_rn(a - hf.x, b - hf.y);
                hi[e] = *reinterpret_cast<const std::uint32_t*>(&h);
                lo[e] = *reinterpret_cast<const std::uint32_t*>(&l);
            }
            // Group G = c/16, quarter q = (c%16)/4, word j = c%4 → slot G·16 + j·4 + q.
            const int slot = (c / 16) * 16 + (c % 4) * 4 + (c % 16) / 4;
            xsHi[slot] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
            if constexpr (SPLIT) xsLo[slot] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
        }
    }
}

// ---- x as integers: the int8 tensor-core path (XForm::Integer) -------------------------------------
// Each 128-input group G of x is scaled by 2^E_G (E_G from the group's max|x|, so that
// |x·2^E_G| < 2^22) and rounded to the integer X = rint(x·2^E_G): every entry to within 2^-22 of
// the group's largest (block floating point; the fp16 hi + lo split carries ~22 bits per element,
// each relative to itself). One FMA forms X + 2^22 in the low three bytes of a float (Fp4Decode.h, integerBits);
// those bytes enter the mma as columns of B (u8): column 0 the top byte, column 1 all ones,
// columns 2, 3 bytes 1, 0, columns 4..7 zero. The weights enter as int8 E2M1·2 (0, 1, 2, 3, 4, 6,
// 8, 12): one PRMT per 4 nibbles looks them up in a table held in two registers; a nibble with its
// sign bit set is a selector in sign-replicate mode, which yields 0x00 (every table byte is
// positive), so prmt(table, w) gives the positive weights and zeros, and prmt(table, w ^ 0x8888)
// the magnitudes of the negative ones. With the tiled layout's stored codes (Fp4Tiled.h) the
// negative selectors are w + 0x8888 instead, one multiply-add on the FMA pipe where the xor took
// the integer pipe that the decode saturates (+1.9 % on the 12b decode, docs/PERFORMANCE.md
// version 27). Two mma chains (positive and negative) give exact int32 sums; per group, per row,
//   Σ w·X = 2^16·(C0 − 64·C1) + 2^8·C2 + C3     (C1 = Σ w removes the offset 2^22)
// in exact integers until the group scale × 2^-E_G / 2 multiplies it in fp32. 7 instructions
// decode 8 weights (the fp16 path: 13; stored codes: 5 of them on the integer pipe, 2 on the FMA
// pipe) and one mma covers 512 weights (fp16: 256).
// The exponent per group (not per vector) keeps staging to one pass with no block-wide reduction.
// Until version 24 of docs/PERFORMANCE.md X had 31 bits in four planes; its rint was a
// quarter-rate float-to-int conversion per element in every block's staging.
constexpr int kPlanes = formats::fp4decode::kIntegerPlanes;  // B columns 0, 2, 3 (bytes 2, 1, 0)
constexpr int kPlanePad = 16;                                // bytes after each plane: conflict-free B loads

// Bytes of one x plane (inputs padded to whole groups, then the pad).
__host__ __device__ constexpr std::int64_t planeBytes(std::int64_t groups) { return groups * 128 + kPlanePad; }
// The constant B columns (ones, zeros) as shared-memory bytes too, so every lane loads its B
// fragment the same way (a plane with a group stride of 128 bytes, a constant with stride 0)
// instead of half the lanes selecting register constants around a predicated load. 80 bytes at a
// 128-byte boundary past the factors: zeros at +0 and ones at +48, offsets whose 16-byte slots
// miss the plane slots read in the same quarter-warp phase (plane 3 with the zeros, plane 0 with
// the ones), so the loads stay conflict-free.
constexpr int kZerosOffset = 0;
constexpr int kOnesOffset = 48;
constexpr int kConstantBytes = 80;
__host__ __device__ constexpr std::int64_t constantsOffset(std::int64_t groups) {
    return (kPlanes * planeBytes(groups) + groups * 4 + 127) / 128 * 128;
}
// Shared memory of the integer x: the planes, one float per group (2^-E_G / 2), the constants.
__host__ __device__ constexpr std::int64_t integerXBytes(std::int64_t groups) { return constantsOffset(groups) + kConstantBytes; }
// Writes the constant columns' bytes (the threads `thread` 0 .. kConstantBytes/4 - 1 of those
// staging x; before the staging barrier).
__device__ __forceinline__ void writeConstantColumns(std::uint8_t* planes, int groups, unsigned thread) {
    if (thread < kConstantBytes / 4) {
        const int byte = static_cast<int>(thread) * 4;
        reinterpret_cast<std::uint32_t*>(planes + constantsOffset(groups))[thread] = byte >= kOnesOffset ? 0x01010101u : 0u;
    }
}

__device__ __forceinline__ void imma16832(int (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The B operand a lane supplies: its column n = g (the mma's B fragment column is the lane's
// group id): a plane of x, all ones, or zeros; and the per-group factors of x.
struct IntegerB {
    const uint4* plane;   // this lane's plane at group 0, offset by q·32 bytes, or its constant's bytes
    int stride;           // uint4 per group: 8 for a plane, 0 for a constant
    const float* factor;  // [groups]: 2^-E_G / 2
};

// What a lane (g, q) of the integer path holds for the whole launch: its B column g (plane, ones
// or zeros), the ones-column fold of q = 0 lanes (negated, so that the group's end adds it with one
// multiply-add: docs/PERFORMANCE.md version 34), and the weights of its two C columns (2q, 2q+1)
// in Σ w·X (see groupDotInteger).
struct IntegerLane {
    IntegerB b;
    int negativeFold;  // −kOnesColumnFold on q = 0 lanes, else 0
    float weight0, weight1;
};
__device__ __forceinline__ IntegerLane integerLane(int g, int q, const std::uint8_t* planes, const float* factors, int groups) {
    IntegerLane l{{nullptr, 0, factors}, 0, 0.0f, 0.0f};
    const int plane = g == 0 ? 0 : g - 1;  // columns 0, 2, 3 → planes 0, 1, 2
    if (g == 0 || g == 2 || g == 3) {
        l.b.plane = reinterpret_cast<const uint4*>(planes + plane * planeBytes(groups) + q * 32);
        l.b.stride = 8;
    } else {
        l.b.plane = reinterpret_cast<const uint4*>(planes + constantsOffset(groups) + (g == 1 ? kOnesOffset : kZerosOffset));
    }
    l.negativeFold = q == 0 ? -formats::fp4decode::kOnesColumnFold : 0;
    l.weight0 = formats::fp4decode::columnWeight(2 * q);
    l.weight1 = formats::fp4decode::columnWeight(2 * q + 1);
    return l;
}

// The end of a tile for the integer path: the lane's columns weighted, summed over the 4 lanes
// of a row (q = 0 .. 3, two shuffles), into rowA (row g) and rowB (row g+8); acc is cleared. All 32
// lanes must call it.
__device__ __forceinline__ void integerRowSums(float (&acc)[4], const IntegerLane& l, float& rowA, float& rowB) {
    rowA = fmaf(acc[0], l.weight0, acc[1] * l.weight1);
    rowB = fmaf(acc[2], l.weight0, acc[3] * l.weight1);
    rowA += __shfl_xor_sync(0xffffffffu, rowA, 1);
    rowB += __shfl_xor_sync(0xffffffffu, rowB, 1);
    rowA += __shfl_xor_sync(0xffffffffu, rowA, 2);
    rowB += __shfl_xor_sync(0xffffffffu, rowB, 2);
    acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
}

// The lane's B fragments of one group (the 4 mmas' pairs) and the group's factor of x: loaded
// once per group and shared by the gate and up weights of a GeGLU. The lane's 16 code bytes per
// row are 4 words; word j holds inputs 32q + 8j + (0..7): nibbles 0..3 → k-slots 4q..4q+3,
// nibbles 4..7 → 16+4q..16+4q+3 of mma j (the A fragment of m16n8k32), so the B fragment of mma j
// is 8 consecutive x bytes of the lane's column at inputs 32q + 8j: the 32 bytes of a lane are two
// 16-byte loads.
struct IntegerX {
    std::uint32_t b[8];
    float factor;
};
// The lane's 32 bytes at `lane` and the group's factor at `factor`.
__device__ __forceinline__ IntegerX loadIntegerXAt(const uint4* lane, const float* factor) {
    const uint4 x0 = lane[0], x1 = lane[1];
    return {{x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w}, *factor};
}
__device__ __forceinline__ IntegerX loadIntegerX(const IntegerB& b, int group) {
    return loadIntegerXAt(b.plane + group * b.stride, b.factor + group);
}

// The end of one group of the integer path: the signed sums (positive − negative chains) times
// the group's weight scales (two bf16, rows g and g+8) and x's factor, into acc (see groupDotInteger).
__device__ __forceinline__ void accumulateGroup(const int (&pos)[4], const int (&neg)[4], std::uint32_t scales, float factor, int negativeFold,
                                                float (&acc)[4]) {
    const int c0 = pos[0] - neg[0], c1 = pos[1] - neg[1], c2 = pos[2] - neg[2], c3 = pos[3] - neg[3];
    const float scaleA = __uint_as_float(scales << 16) * factor;
    const float scaleB = __uint_as_float(scales & 0xFFFF0000u) * factor;
    acc[0] = fmaf(static_cast<float>(c0 + negativeFold * c1), scaleA, acc[0]);
    acc[1] = fmaf(static_cast<float>(c1), scaleA, acc[1]);
    acc[2] = fmaf(static_cast<float>(c2 + negativeFold * c3), scaleB, acc[2]);
    acc[3] = fmaf(static_cast<float>(c3), scaleB, acc[3]);
}

// Σ over one group for rows g and g+8 (x from loadIntegerX).
// acc[0], acc[2]: rows g, g+8 of the lane's first column (column 0 folded with the ones column
// on q = 0 lanes); acc[1], acc[3]: its second column. STORED: the words are the tiled layout's
// stored codes (Fp4Tiled.h), whose negative selectors cost a multiply-add instead of an xor.
template <bool STORED>
__device__ __forceinline__ void groupDotInteger(const GroupLoad& g, const IntegerX& x, int negativeFold, float (&acc)[4]) {
    const std::uint32_t wordsA[4] = {g.rowA.x, g.rowA.y, g.rowA.z, g.rowA.w};
    const std::uint32_t wordsB[4] = {g.rowB.x, g.rowB.y, g.rowB.z, g.rowB.w};
    // One chain per sign (four chains per group, by word parity, measured no faster).
    int pos[4] = {0, 0, 0, 0}, neg[4] = {0, 0, 0, 0};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        // A fragment: rows g and g+8, k-slots 4q.. (nibbles 0..3) and 16+4q.. (nibbles 4..7).
        std::uint32_t p[4], n[4];
        const auto quad = [](std::uint32_t w, std::uint32_t& positive, std::uint32_t& negative) {
            if constexpr (STORED) formats::fp4decode::decodeInt8QuadStored(w, positive, negative);
            else formats::fp4decode::decodeInt8Quad(w, positive, negative);
        };
        quad(wordsA[j], p[0], n[0]);
        quad(wordsB[j], p[1], n[1]);
        quad(wordsA[j] >> 16, p[2], n[2]);
        quad(wordsB[j] >> 16, p[3], n[3]);
        imma16832(pos, p, x.b[2 * j], x.b[2 * j + 1]);
        imma16832(neg, n, x.b[2 * j], x.b[2 * j + 1]);
    }
    accumulateGroup(pos, neg, g.scales, x.factor, negativeFold, acc);
}

__device__ __forceinline__ std::uint32_t absBits(float v) { return __float_as_uint(v) & 0x7FFFFFFFu; }

// x → the byte planes and the group factors (see above), one pass: a thread converts a piece
// of 16 inputs; the 8 pieces of a group sit in 8 consecutive lanes, which agree on the group's
// exponent by three shuffles. A group holding a NaN or an infinity gets a NaN factor (y is NaN,
// as on the fp16 paths).
constexpr int kIntStagePieces = 2;  // 16-input pieces per thread per pass, loads issued first

// Converts the S pieces a thread holds in one pass (piece c = base + s·threads + thread, where
// `thread` numbers the `threads` threads staging x, consecutive lanes consecutive; v[s][f] = its
// inputs 4f .. 4f+3, zero past `in`). Warp-uniform: every lane takes part in the shuffles.
template <int S>
__device__ __forceinline__ void convertXPieces(const float4 (&v)[S][4], int base, int pieces, std::int64_t stride,
                                               std::uint8_t* planes, float* factors, int thread, int threads) {
#pragma unroll
    for (int s = 0; s < S; ++s) {
        const int c = base + s * threads + thread;
        std::uint32_t maxBits = 0;
#pragma unroll
        for (int f = 0; f < 4; ++f)
            maxBits = max(max(max(maxBits, absBits(v[s][f].x)), max(absBits(v[s][f].y), absBits(v[s][f].z))), absBits(v[s][f].w));
        // An unsigned max of IEEE magnitude bits orders magnitudes, with inf and NaN above all.
#pragma unroll
        for (int m = 1; m < 8; m <<= 1) maxBits = max(maxBits, __shfl_xor_sync(0xffffffffu, maxBits, m));
        if (c >= pieces) continue;
        const int e = formats::fp4decode::integerExponent(maxBits);
        const float up = formats::fp4decode::powerOfTwo(e);
        if ((c & 7) == 0) factors[c >> 3] = formats::fp4decode::integerFactor(maxBits, e);
        std::uint32_t word[kPlanes][4];
#pragma unroll
        for (int f = 0; f < 4; ++f) {
            using formats::fp4decode::integerBits;
            std::uint32_t plane[kPlanes];
            formats::fp4decode::integerPlanes(integerBits(v[s][f].x, up), integerBits(v[s][f].y, up), integerBits(v[s][f].z, up),
                                              integerBits(v[s][f].w, up), plane);
#pragma unroll
            for (int p = 0; p < kPlanes; ++p) word[p][f] = plane[p];
        }
#pragma unroll
        for (int p = 0; p < kPlanes; ++p)
            *reinterpret_cast<uint4*>(planes + p * stride + static_cast<std::int64_t>(c) * 16) =
                make_uint4(word[p][0], word[p][1], word[p][2], word[p][3]);
    }
}

// `mark(i)`: the phase clock's marks 7 (a pass's x loads issued), 8 (thread 0's loads have
// arrived; measurement builds only) and 9 (converted, planes stored); nothing in the engine.
template <typename Mark>
__device__ __forceinline__ void stageXInteger(const float* __restrict__ x, std::int64_t in, int groups, std::uint8_t* planes,
                                              float* factors, Mark&& mark) {
    const int pieces = groups * 8;
    // Warp-uniform trip count: every lane takes part in the shuffles.
    for (int base = 0; base < pieces; base += kMmaThreads * kIntStagePieces) {
        float4 v[kIntStagePieces][4];
#pragma unroll
        for (int s = 0; s < kIntStagePieces; ++s) {
            const int c = base + s * kMmaThreads + static_cast<int>(threadIdx.x);
#pragma unroll
            for (int f = 0; f < 4; ++f)
                v[s][f] = c < pieces ? loadX4(x, in, static_cast<std::int64_t>(c) * 16 + f * 4) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
        mark(7);
#ifdef GEMMA_PHASE_CLOCK
        phaseclock::waitFor(v[0][0].x);
        phaseclock::waitFor(v[kIntStagePieces - 1][3].w);
        mark(8);
#endif
        convertXPieces<kIntStagePieces>(v, base, pieces, planeBytes(groups), planes, factors, static_cast<int>(threadIdx.x), kMmaThreads);
        mark(9);
    }
}

// The input norm folded into staging (Fp4MatvecParams::InputNorm): every block computes x from
// the residual stream itself, as launchRmsNormResidual does (RmsNorm.h: the same fp32 operations
// per element; the sums of squares are reduced in another order, so x may differ from the norm
// kernel's in the last bits), and block 0 writes the new residual. One piece per thread
// (kMmaThreads·16 >= in, the launcher's bound: two pieces per thread spill the GeGLU kernels'
// prefetched weights), the loads of residual and branch all issued before the first reduction.
// Two block reductions, one barrier each (scratch: 32 floats of shared memory, a fresh half for each:
// staging runs once per launch, so no earlier reader of them needs a barrier first).
__device__ __forceinline__ float4 scale4(float4 a, float s) { return make_float4(a.x * s, a.y * s, a.z * s, a.w * s); }
__device__ __forceinline__ float4 mul4(float4 a, float4 b) { return make_float4(a.x * b.x, a.y * b.y, a.z * b.z, a.w * b.w); }
__device__ __forceinline__ float4 add4(float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }
__device__ __forceinline__ float squares4(float4 a) { return a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w; }

__device__ __forceinline__ void stageXIntegerNormed(const Fp4MatvecParams::InputNorm& nm, std::int64_t in, int groups,
                                                    std::uint8_t* planes, float* factors, float* scratch) {
    const int pieces = groups * 8;
    const bool live = static_cast<int>(threadIdx.x) < pieces;
    const std::int64_t first = static_cast<std::int64_t>(threadIdx.x) * 16;  // this thread's piece
    const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
    // A norm weight's 4 values at f (1 when the weight is null), zero past `in`.
    auto weight4 = [&](const float* w, int f) { return w && live ? loadX4(w, in, first + f * 4) : make_float4(1.f, 1.f, 1.f, 1.f); };
    // The norm weights are loaded with the activations, not after the reductions that use them:
    // the compiler keeps a global load below the block barrier it follows in the source, so
    // loading them at their use made two more L2 round trips in a row on every normed launch
    // (+1.1 % on the 12b's decode, docs/PERFORMANCE.md version 37; copying them into shared
    // memory before the dependency wait instead, which holds no registers, lost 8 %).
    float4 v[1][4], b[4], branchWeight[4], outWeight[4];
#pragma unroll
    for (int f = 0; f < 4; ++f) {
        v[0][f] = live ? loadX4(nm.residualIn, in, first + f * 4) : zero;
        b[f] = live && nm.branch ? loadX4(nm.branch, in, first + f * 4) : zero;
        branchWeight[f] = weight4(nm.branch ? nm.branchWeight : nullptr, f);  // no branch: unused, not loaded
        outWeight[f] = weight4(nm.normalizeOutput ? nm.outWeight : nullptr, f);
    }
    const float n = static_cast<float>(in);
    if (nm.branch) {  // uniform across the block
        const float ss = squares4(b[0]) + squares4(b[1]) + squares4(b[2]) + squares4(b[3]);
        const float inv = rsqrtf(blockSumFresh(ss, scratch) / n + nm.eps);
#pragma unroll
        for (int f = 0; f < 4; ++f) v[0][f] = add4(v[0][f], mul4(scale4(b[f], inv), branchWeight[f]));
    }
    float ss = 0.0f;
#pragma unroll
    for (int f = 0; f < 4; ++f) {
        v[0][f] = scale4(v[0][f], nm.layerScalar);
        // in % 4 == 0 (the launcher): a float4 lies wholly inside or wholly past `in`.
        if (nm.residualOut && blockIdx.x == 0 && live && first + f * 4 < in) *reinterpret_cast<float4*>(nm.residualOut + first + f * 4) = v[0][f];
        ss += squares4(v[0][f]);
    }
    if (nm.normalizeOutput) {  // uniform across the block
        const float inv = rsqrtf(blockSumFresh(ss, scratch + kMmaWarps) / n + nm.eps);
#pragma unroll
        for (int f = 0; f < 4; ++f) v[0][f] = mul4(scale4(v[0][f], inv), outWeight[f]);
    }
    convertXPieces<1>(v, 0, pieces, planeBytes(groups), planes, factors, static_cast<int>(threadIdx.x), kMmaThreads);
}

// The rows of one 16-row tile a lane streams: rows g and g+8 of its segment (rows past `out`
// re-read the last row, a valid address, and are not stored).
// GeGLU's up rows sit at a fixed distance from the gate rows (one segment), taken from the
// kernel parameters at each use instead of four more pointers in registers.
struct TileRows {
    const std::uint8_t *codesA, *codesB;
    const std::uint16_t *scalesA, *scalesB;
    // Tiled layout: the segment's codes + the lane's 16 bytes, its scale words + g, and the warp's
    // next item. An item's addresses are base + item·size, one wide multiply-add each (a 32-bit
    // index: the compiler cannot turn it into 64-bit pointer steps), so that the GeGLU's up
    // weight costs one per address instead of a 64-bit add of its distance.
    const uint4* tiled;
    const std::uint32_t* tiledScales;
    std::uint32_t item;
};

__device__ __forceinline__ int segmentOf(const MmaArgs& args, int tile) {
    int seg = 0;
#pragma unroll
    for (int s = 1; s < 3; ++s)
        if (s < args.segments && tile >= args.segment[s].tileBegin) seg = s;
    return seg;
}

// The code pointers include the lane's offset inside a group's 64-byte slice (q·16); the tiled
// pointers hold the segment's base plus the lane's offset, and `item` starts at the warp's first
// item of the tile (group `warp`); the fetch advances it by kMmaWarps items.
__device__ __forceinline__ TileRows tileRows(const MmaArgs& args, int tile, int warp, int g, int q, int groups) {
    const MmaSegment& S = args.segment[segmentOf(args, tile)];
    const std::int64_t row0 = static_cast<std::int64_t>(tile - S.tileBegin) * kMmaTileRows;
    const std::int64_t rowA = min(row0 + g, S.out - 1);
    const std::int64_t rowB = min(row0 + g + 8, S.out - 1);
    const std::int64_t rowBytes = static_cast<std::int64_t>(groups) * 64;
    TileRows t;
    t.codesA = S.codes + rowA * rowBytes + q * 16;
    t.codesB = S.codes + rowB * rowBytes + q * 16;
    t.scalesA = S.scales + rowA * groups;
    t.scalesB = S.scales + rowB * groups;
    const std::int64_t item0 = static_cast<std::int64_t>(tile - S.tileBegin) * groups + warp;
    t.tiled = reinterpret_cast<const uint4*>(S.codes) + g * 4 + q;
    t.tiledScales = reinterpret_cast<const std::uint32_t*>(S.scales) + g;
    t.item = static_cast<std::uint32_t>(item0);
    return t;
}

// A warp's row sums of a tile (rows g and g+8, gate and up) into its slot of the partials.
template <bool GEGLU>
__device__ __forceinline__ void writeRowSums(float (*slot)[kMmaTileRows], int g, float rowA, float rowB, float upRowA, float upRowB) {
    slot[0][g] = rowA;
    slot[0][g + 8] = rowB;
    if constexpr (GEGLU) {
        slot[1][g] = upRowA;
        slot[1][g + 8] = upRowB;
    }
}

// Output row `lane` (< 16) of `tile`: the 8 warps' partial sums (partial[warp][weight][row]) in a
// fixed order, × postscale, GeGLU applied; rows past the segment's `out` are not stored.
template <bool GEGLU>
__device__ __forceinline__ void storeTileRow(const MmaArgs& args, int tile, int lane, const float (*partial)[GEGLU ? 2 : 1][kMmaTileRows],
                                             float postscale) {
    const MmaSegment& S = args.segment[segmentOf(args, tile)];
    const std::int64_t row = static_cast<std::int64_t>(tile - S.tileBegin) * kMmaTileRows + lane;
    if (row >= S.out) return;
    float sum = 0.0f, upSum = 0.0f;
#pragma unroll
    for (int w = 0; w < kMmaWarps; ++w) {
        sum += partial[w][0][lane];
        if constexpr (GEGLU) upSum += partial[w][1][lane];
    }
    float v = sum * postscale;
    if constexpr (GEGLU) v = geluTanh(v) * (upSum * postscale);
    else if (args.geluGate) v = geluTanh(v) * args.geluGate[row];  // segment 0 only (the launcher)
    S.y[row] = v;
}

// Persistent grid (at most the resident block count); block b takes tiles b, b + gridDim, ...
// and its 8 warps split each tile's groups (warp w: groups w, w+8, ...). A warp walks its (tile,
// group) items as one flat stream with D items in flight: the slot an item is computed from is
// refilled at once with the item D ahead, across tile boundaries, so the memory pipe never drains
// between tiles. At the end of each tile the warps' partial sums meet in shared memory (double
// buffered: one barrier per tile) and one warp writes the 16 outputs.
// TILED (GPI 1): the weights come in the tiled layout (kernels/Fp4Tiled.h): a warp's item is two
// contiguous 512-byte loads and one scale word. Same arithmetic as the row layout: bit-identical.
template <bool GEGLU, XForm X, int D, int GPI, bool TILED = false>
__global__ void __launch_bounds__(kMmaThreads, 2) fp4MatvecMmaKernel(MmaArgs args, int tiles) {
    constexpr bool SPLIT = X == XForm::Fp16Split;
    constexpr bool INTEGER = X == XForm::Integer;
    extern __shared__ float4 xsRaw[];  // same declaration as the CUDA-core kernel's
    __shared__ float partial[2][kMmaWarps][GEGLU ? 2 : 1][kMmaTileRows];
    __shared__ float normScratch[INTEGER ? 32 : 1];  // blockSum's, for the input norm
    const int warp = threadIdx.x >> 5;
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2;
    const int q = lane & 3;
    const std::int64_t in = args.in;
    const int groups = static_cast<int>(formats::fp4GroupsPerRow(in));
    const int myTiles = static_cast<int>(blockIdx.x) < tiles ? (tiles - 1 - static_cast<int>(blockIdx.x)) / gridDim.x + 1 : 0;
    const int myGroups = groups > warp ? (groups - warp + kMmaWarps - 1) / kMmaWarps : 0;
    // An item is GPI of this warp's groups of one tile (the last one of a tile may be partial).
    const int myItems = (myGroups + GPI - 1) / GPI;
    const int items = myTiles * myItems;

    // Load iterator: the next item to fetch (tile index among mine, item index in the tile).
    int loadTile = 0, loadItem = 0;
    TileRows loadRows{};
    if (items > 0) loadRows = tileRows(args, blockIdx.x, warp, g, q, groups);
    // GeGLU's up weight (segment 0's, tiled like the gate): its bases with the lane's offset, once;
    // an item's up addresses take the gate's item index (TileRows::item).
    const uint4* const tiledUp = GEGLU ? reinterpret_cast<const uint4*>(args.segment[0].upCodes) + g * 4 + q : nullptr;
    const std::uint32_t* const tiledUpScales =
        GEGLU ? reinterpret_cast<const std::uint32_t*>(args.segment[0].upScales) + g : nullptr;
    static_assert(!TILED || GPI == 1, "the tiled layout: one group per item");
    GroupLoad slot[D][GPI];
    GroupLoad slotUp[GEGLU ? D : 1][GPI];
    auto fetch = [&](int u) {
        GroupLoad (&dst)[GPI] = slot[u];
        GroupLoad (&dstUp)[GPI] = slotUp[GEGLU ? u : 0];
#pragma unroll
        for (int s = 0; s < GPI; ++s) {
            const int local = loadItem * GPI + s;
            if (GPI > 1 && local >= myGroups) break;  // a partial last item: its slot is not read
            if constexpr (TILED) {  // GPI 1: the warp's next item, then the one kMmaWarps groups on
                const std::uint64_t codeUnits = static_cast<std::uint64_t>(loadRows.item) * 64;
                const std::uint64_t scaleUnits = static_cast<std::uint64_t>(loadRows.item) * 8;
                const uint4* item = loadRows.tiled + codeUnits;
                dst[s].rowA = ldgStream16(item);
                dst[s].rowB = ldgStream16(item + 32);
                dst[s].scales = __ldg(loadRows.tiledScales + scaleUnits);
                if constexpr (GEGLU) {
                    const uint4* upItem = tiledUp + codeUnits;
                    dstUp[s].rowA = ldgStream16(upItem);
                    dstUp[s].rowB = ldgStream16(upItem + 32);
                    dstUp[s].scales = __ldg(tiledUpScales + scaleUnits);
                }
                loadRows.item += kMmaWarps;
                continue;
            }
            const int G = warp + local * kMmaWarps;
            const std::ptrdiff_t codeDelta = GEGLU ? args.segment[0].upCodes - args.segment[0].codes : 0;
            const std::ptrdiff_t scaleDelta = GEGLU ? args.segment[0].upScales - args.segment[0].scales : 0;
            loadGroupRows(loadRows.codesA, loadRows.codesB, loadRows.scalesA, loadRows.scalesB, G, dst[s]);
            if constexpr (GEGLU)
                loadGroupRows(loadRows.codesA + codeDelta, loadRows.codesB + codeDelta, loadRows.scalesA + scaleDelta,
                              loadRows.scalesB + scaleDelta, G, dstUp[s]);
        }
        if (++loadItem == myItems) {
            loadItem = 0;
            if (++loadTile < myTiles)
                loadRows = tileRows(args, blockIdx.x + loadTile * gridDim.x, warp, g, q, groups);
        }
    };
    // Weight loads of the first items go out before x is staged, so the two latencies overlap;
    // with a programmatic launch they even overlap the previous kernel's tail, and only x waits
    // for it (gridDependencyWait: a no-op without a programmatic dependency).
    GEMMA_PHASE_START();  // measurement builds only (PhaseClock.h): the phases below, marks 1-9
#pragma unroll
    for (int u = 0; u < D; ++u) {
        if (u < items) fetch(u);
    }
    GEMMA_PHASE_MARK(1);  // the first items' weight loads issued
    gridDependencyWait();
    // The next kernel may launch only once this one's blocks have all passed their wait, so a
    // chain of matvecs does not fill the SMs with blocks that wait on a grid still waiting itself.
    // Against the trigger before the first weight loads (H100, docs/PERFORMANCE.md version 42):
    // 12b +0.3 % at a short context and at depth 32768, 31b +0.2 / +0.1 %, e4b +1.3 / +1.8 %.
    allowDependentsToStart();
    GEMMA_PHASE_MARK(2);  // the dependency wait

    uint4* xsHi = reinterpret_cast<uint4*>(xsRaw);
    uint4* xsLo = xsHi + groups * 16;
    // Integer x carries its factors per group (applied in groupDotInteger); fp16 x is x·2^-8.
    const float postscale = INTEGER ? 1.0f : kXPostscale;
    std::uint8_t* const intPlanes = reinterpret_cast<std::uint8_t*>(xsRaw);
    float* const intFactors = reinterpret_cast<float*>(intPlanes + kPlanes * planeBytes(groups));
    if constexpr (INTEGER) {
        writeConstantColumns(intPlanes, groups, threadIdx.x);
        if (!args.norm.residualIn)
            stageXInteger(args.x, in, groups, intPlanes, intFactors, [&]([[maybe_unused]] int i) { GEMMA_PHASE_MARK(i); });
        else stageXIntegerNormed(args.norm, in, groups, intPlanes, intFactors, normScratch);
    } else {
        stageX<SPLIT>(args.x, in, groups, xsHi, xsLo);
    }
    __syncthreads();
    GEMMA_PHASE_MARK(3);  // x staged (the norm folded in, where there is one); with marks 7-9: the barrier
    // The B column this lane supplies (see groupDot): hi for column 0, lo for the others.
    const uint4* xsLane = SPLIT && g != 0 ? xsLo : xsHi;
    IntegerLane intLane{};
    if constexpr (INTEGER) intLane = integerLane(g, q, intPlanes, intFactors, groups);

    float accA = 0.0f, accB = 0.0f, upAccA = 0.0f, upAccB = 0.0f;
    float intAcc[4] = {0.f, 0.f, 0.f, 0.f}, intUpAcc[4] = {0.f, 0.f, 0.f, 0.f};
    int computeTile = 0, computeItem = 0;
    // Ends tile `computeTile` for this warp: partials to shared memory, one barrier, warp
    // (tile % 8) sums the 8 warps' partials and stores the 16 outputs.
    auto flush = [&](int mine) {
        const int buffer = mine & 1;
        if constexpr (INTEGER) {
            integerRowSums(intAcc, intLane, accA, accB);
            if constexpr (GEGLU) integerRowSums(intUpAcc, intLane, upAccA, upAccB);
        }
        if (q == 0) writeRowSums<GEGLU>(partial[buffer][warp], g, accA, accB, upAccA, upAccB);
        accA = accB = upAccA = upAccB = 0.0f;
        __syncthreads();
        if (mine == 0) GEMMA_PHASE_MARK(4);  // the first tile: its items (the first weights' arrival) and barrier
        else GEMMA_PHASE_MARK(5);            // every later tile: its items and barrier
        if (warp == (mine & (kMmaWarps - 1)) && lane < kMmaTileRows)
            storeTileRow<GEGLU>(args, blockIdx.x + mine * gridDim.x, lane, partial[buffer], postscale);
    };

    // The integer path with one group per item walks x's lane bytes and factors by pointer: the
    // item after group G is G + kMmaWarps, and a tile's first is `warp` again (GPI 1 only).
    constexpr bool WALK_X = INTEGER && GPI == 1;
    const uint4* xWalk = nullptr;
    const float* factorWalk = nullptr;
    const auto rewindX = [&] {
        if constexpr (WALK_X) {
            xWalk = intLane.b.plane + warp * intLane.b.stride;
            factorWalk = intLane.b.factor + warp;
        }
    };
    rewindX();
    // Item u of the current round: its groups' products into the accumulators (the same
    // arithmetic in the same order whichever loop below runs it).
    const auto compute = [&](int u) {
#pragma unroll
        for (int s = 0; s < GPI; ++s) {
            const int local = computeItem * GPI + s;
            if (GPI > 1 && local >= myGroups) break;
            [[maybe_unused]] const int G = warp + local * kMmaWarps;
            if constexpr (INTEGER) {
                IntegerX xg;
                if constexpr (WALK_X) {
                    xg = loadIntegerXAt(xWalk, factorWalk);
                    xWalk += kMmaWarps * intLane.b.stride;
                    factorWalk += kMmaWarps;
                } else {
                    xg = loadIntegerX(intLane.b, G);
                }
                groupDotInteger<TILED>(slot[u][s], xg, intLane.negativeFold, intAcc);
                if constexpr (GEGLU) groupDotInteger<TILED>(slotUp[u][s], xg, intLane.negativeFold, intUpAcc);
            } else {
                groupDot<SPLIT, TILED>(slot[u][s], xsLane + G * 16, q, accA, accB);
                if constexpr (GEGLU) groupDot<SPLIT, TILED>(slotUp[u][s], xsLane + G * 16, q, upAccA, upAccB);
            }
        }
    };
    const auto advance = [&] {
        if (++computeItem == myItems) {
            computeItem = 0;
            rewindX();
            flush(computeTile++);
        }
    };
    // Rounds of D items. While a whole round and every refill D items on exist (all but the last
    // one or two rounds), no item tests its bounds (docs/PERFORMANCE.md version 34, lever 2).
    int k0 = 0;
    for (; k0 + 2 * D <= items; k0 += D) {
#pragma unroll
        for (int u = 0; u < D; ++u) {
            compute(u);
            fetch(u);
            advance();
        }
    }
    for (; k0 < items; k0 += D) {
#pragma unroll
        for (int u = 0; u < D; ++u) {
            if (k0 + u >= items) break;
            compute(u);
            if (k0 + u + D < items) fetch(u);
            advance();
        }
    }
    // A warp with no groups (in < 8 groups) still takes part in every tile's barrier.
    if (myGroups == 0)
        for (int t = 0; t < myTiles; ++t) flush(t);
    GEMMA_PHASE_END(6);  // the last tile's row stores (warp 0's share)
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
        p.codes, p.scales, p.upCodes, p.upScales, p.out, p.in, x, p.xStride, y, p.yStride, p.tiled);
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

// The fp32 CUDA-core kernel (any batch), one weight.
template <bool GEGLU>
KernelStatus launchCudaCores(const Fp4MatvecParams& p, const DeviceFacts& facts, cudaStream_t stream) {
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

// Launches a persistent batch-1 kernel. Raises its dynamic shared-memory limit to the largest size
// seen (per instance), from the first launch on: the kernel's static arrays count against the
// default 48 KB too, so x of exactly 48 KB (12288 inputs, hi + lo) already needs it (e2b's wide
// down_proj failed to launch when no larger shape had raised the limit before it). Grid: the
// resident block count (2 per SM by the launch bounds, fewer when the shared memory does not fit
// twice), then as few blocks as still give every block the same number of tiles.
template <bool GEGLU, XForm X, int D, int GPI, bool TILED = false>
cudaError_t launchMmaTyped(const MmaArgs& args, int tiles, std::size_t smem, const DeviceFacts& facts,
                           bool programmatic, cudaStream_t stream) {
    static thread_local std::size_t raised = 0;
    const auto kernel = fp4MatvecMmaKernel<GEGLU, X, D, GPI, TILED>;
    if (smem > raised) {
        const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
        if (err != cudaSuccess) return err;
        raised = smem;
    }
    constexpr std::size_t kStaticReserve = 4096;  // the kernel's static shared memory, rounded up
    int perSm = 2;
    while (perSm > 1 && static_cast<std::size_t>(perSm) * (smem + kStaticReserve) > static_cast<std::size_t>(facts.maxSharedPerSm)) --perSm;
    const int resident = perSm * facts.smCount;
    const int rounds = (tiles + resident - 1) / resident;
    const int blocks = (tiles + rounds - 1) / rounds;
    return launchKernel(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kMmaThreads), smem, stream, programmatic, args, tiles);
}

// x as fp16 hi + lo (split) or one fp16: the two fp16 instances of a variant.
template <bool GEGLU, int D, int GPI, bool TILED = false>
cudaError_t launchFp16Variant(XForm form, const MmaArgs& args, int tiles, std::size_t smem, const DeviceFacts& facts,
                              bool programmatic, cudaStream_t stream) {
    return form == XForm::Fp16Split
               ? launchMmaTyped<GEGLU, XForm::Fp16Split, D, GPI, TILED>(args, tiles, smem, facts, programmatic, stream)
               : launchMmaTyped<GEGLU, XForm::Fp16Single, D, GPI, TILED>(args, tiles, smem, facts, programmatic, stream);
}

// Batch 1 on tensor cores: every segment's tiles in one grid.
template <bool GEGLU>
KernelStatus launchMma(const Fp4MatvecParams& p, const DeviceFacts& facts, cudaStream_t stream) {
    MmaArgs args{};
    args.in = p.in;
    args.x = p.x;
    args.norm = p.inputNorm;
    args.geluGate = p.geluGate;
    args.segments = 1 + p.extraCount;
    int tiles = 0;
    for (int s = 0; s < args.segments; ++s) {
        MmaSegment& seg = args.segment[s];
        if (s == 0) {
            seg = {p.codes, p.scales, p.upCodes, p.upScales, p.y, p.out, 0};
        } else {
            const auto& e = p.extra[s - 1];
            seg = {e.codes, e.scales, nullptr, nullptr, e.y, e.out, 0};
        }
        seg.tileBegin = tiles;
        tiles += static_cast<int>((seg.out + kMmaTileRows - 1) / kMmaTileRows);
    }
    const std::int64_t groups = formats::fp4GroupsPerRow(p.in);
    const XForm form = p.singleHalfX ? XForm::Fp16Single : p.fp16X ? XForm::Fp16Split : XForm::Integer;
    const std::size_t smem = form == XForm::Integer ? static_cast<std::size_t>(integerXBytes(groups))
                                                    : static_cast<std::size_t>(groups) * 16 * 16 * (form == XForm::Fp16Split ? 2 : 1);
    if (smem > static_cast<std::size_t>(facts.maxSharedPerBlockOptin)) return KernelStatus::Unsupported;
    const bool pdl = p.programmaticLaunch;
    // D items in flight × GPI groups per item: the loads one warp holds in registers (within the
    // 128 that two blocks per SM allow). Plain matvec 4 × 1 (or the two-group-item experiment
    // 2 × 2), GeGLU (two weights per group) 2 × 1. Deeper pipelines for integer x (6 × 1, GeGLU
    // 3 × 1) fit in the registers but measured no faster (docs/PERFORMANCE.md, version 4).
    cudaError_t err;
    if (p.tiled && form == XForm::Integer) {
        err = launchMmaTyped<GEGLU, XForm::Integer, GEGLU ? 2 : 4, 1, true>(args, tiles, smem, facts, pdl, stream);
    } else if (p.tiled) {
        err = launchFp16Variant<GEGLU, GEGLU ? 2 : 4, 1, true>(form, args, tiles, smem, facts, pdl, stream);
    } else if (form == XForm::Integer) {
        if constexpr (GEGLU) err = launchMmaTyped<true, XForm::Integer, 2, 1>(args, tiles, smem, facts, pdl, stream);
        else if (p.twoGroupItems) err = launchMmaTyped<false, XForm::Integer, 2, 2>(args, tiles, smem, facts, pdl, stream);
        else err = launchMmaTyped<false, XForm::Integer, 4, 1>(args, tiles, smem, facts, pdl, stream);
    } else if constexpr (GEGLU) {
        err = launchFp16Variant<true, 2, 1>(form, args, tiles, smem, facts, pdl, stream);
    } else {
        err = p.twoGroupItems ? launchFp16Variant<false, 2, 2>(form, args, tiles, smem, facts, pdl, stream)
                              : launchFp16Variant<false, 4, 1>(form, args, tiles, smem, facts, pdl, stream);
    }
    return err == cudaSuccess ? KernelStatus::Ok : KernelStatus::LaunchFailed;
}

template <bool GEGLU>
KernelStatus launchImpl(const Fp4MatvecParams& p, cudaStream_t stream) {
    const auto& nm = p.inputNorm;
    const bool normed = nm.residualIn != nullptr;
    if (!p.codes || !p.scales || (!p.x && !normed) || !p.y) return KernelStatus::InvalidArgument;
    if (normed) {
        // The fused input norm exists on the batch-1 integer tensor-core path only, for one piece
        // of staging per thread (in <= kMmaThreads · 16).
        static_assert(Fp4MatvecParams::kInputNormMaxIn == kMmaThreads * 16);
        const auto vectorOk = [](const void* q) { return q == nullptr || aligned16(q); };
        if (p.rows != 1 || p.forceCudaCores || p.fp16X || p.singleHalfX || p.in % 4 != 0 ||
            p.in > Fp4MatvecParams::kInputNormMaxIn || !vectorOk(nm.residualIn) || !vectorOk(nm.branch) ||
            !vectorOk(nm.branchWeight) || !vectorOk(nm.outWeight) || !vectorOk(nm.residualOut) ||
            (nm.residualOut && (nm.residualOut == nm.residualIn || nm.residualOut == nm.branch)))
            return KernelStatus::InvalidArgument;
    }
    if (GEGLU && (!p.upCodes || !p.upScales)) return KernelStatus::InvalidArgument;
    // The gelu gate lives in the tensor-core kernel's store of one weight's rows.
    if (p.geluGate && (GEGLU || p.extraCount != 0 || p.rows != 1 || p.forceCudaCores)) return KernelStatus::InvalidArgument;
    if (p.out < 1 || p.in < 1 || p.rows < 1) return KernelStatus::InvalidArgument;
    if ((!normed && (p.xStride < p.in || p.xStride % 4 != 0)) || p.yStride < p.out)
        return KernelStatus::InvalidArgument;
    if (!aligned16(p.codes) || (!normed && !aligned16(p.x)) || (GEGLU && !aligned16(p.upCodes)))
        return KernelStatus::InvalidArgument;
    if (p.rowsPerWarp != 0 && p.rowsPerWarp != 1 && p.rowsPerWarp != 2 && p.rowsPerWarp != 4)
        return KernelStatus::InvalidArgument;
    if (p.extraCount < 0 || p.extraCount > 2 || (GEGLU && p.extraCount > 0)) return KernelStatus::InvalidArgument;
    // The tiled layout: scale words 4-byte aligned; one group per item (no two-group items).
    if (p.tiled) {
        auto misaligned4 = [](const void* q) { return (reinterpret_cast<std::uintptr_t>(q) & 3u) != 0; };
        if (p.twoGroupItems || misaligned4(p.scales) || (GEGLU && misaligned4(p.upScales))) return KernelStatus::InvalidArgument;
        for (int e = 0; e < p.extraCount; ++e)
            if (misaligned4(p.extra[e].scales)) return KernelStatus::InvalidArgument;
        // The fetch indexes a weight's items with 32 bits (TileRows::item), so its items (and the
        // kMmaWarps a warp steps past its last) must fit: 4 TiB of codes per weight.
        auto tooManyItems = [&](std::int64_t out) {
            return formats::fp4tiled::codeBytes(out, p.in) / formats::fp4tiled::kItemBytes + kMmaWarps > 0xffffffffLL;
        };
        if (tooManyItems(p.out)) return KernelStatus::Unsupported;
        for (int e = 0; e < p.extraCount; ++e)
            if (tooManyItems(p.extra[e].out)) return KernelStatus::Unsupported;
    }
    for (int e = 0; e < p.extraCount; ++e) {
        const auto& x = p.extra[e];
        const std::int64_t stride = x.yStride ? x.yStride : p.yStride;
        if (!x.codes || !x.scales || !x.y || x.out < 1 || stride < x.out || !aligned16(x.codes))
            return KernelStatus::InvalidArgument;
    }
    if (formats::fp4RowBytes(p.in) / 16 > 0x7fffffff / 64) return KernelStatus::Unsupported;
    DeviceFacts facts;
    if (queryDeviceFacts(facts) != KernelStatus::Ok) return KernelStatus::LaunchFailed;
    if (p.rows == 1 && !p.forceCudaCores) {
        const KernelStatus status = launchMma<GEGLU>(p, facts, stream);
        if (status != KernelStatus::Unsupported || normed || p.geluGate) return status;
        // x does not fit in shared memory: the CUDA-core kernel reads it from global memory.
    }
    // The CUDA-core kernel, one launch per segment.
    for (int s = 0; s <= p.extraCount; ++s) {
        Fp4MatvecParams one = p;
        one.extraCount = 0;
        if (s > 0) {
            one.codes = p.extra[s - 1].codes;
            one.scales = p.extra[s - 1].scales;
            one.out = p.extra[s - 1].out;
            one.y = p.extra[s - 1].y;
            if (p.extra[s - 1].yStride) one.yStride = p.extra[s - 1].yStride;
        }
        const KernelStatus status = launchCudaCores<GEGLU>(one, facts, stream);
        if (status != KernelStatus::Ok) return status;
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
