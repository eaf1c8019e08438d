// Plain-C++ reference ops: the exact semantics every CUDA kernel must reproduce, and the ops the
// CPU backend runs. FP32 arithmetic (dot products with eight fp32 accumulators; norms and
// attention accumulate in double); no CUDA, no engine, no Qt.
//
// Layout conventions shared with the kernels:
//   - vectors are contiguous floats; a batch of `rows` vectors of width n is row-major [rows][n];
//   - linear weights are W[out][in] (y = W·x), in the formats of kernels/WeightFormats.h;
//   - a head-split vector of nHeads × headDim is [head][dim], head h at offset h·headDim;
//   - KV caches are [capacity slots][kvHeads][headDim] floats; absolute position p lives in slot
//     p % capacity (a ring for sliding layers, capacity = allocation for full layers).
#pragma once

#include <cstdint>

namespace gemma::reference {

// y = x · (mean(x²) + eps)^(-1/2) · weight, in fp32 (GEMMA4.md §2.3: weight applied directly, no +1).
// weight may be null: the unweighted norm used for v_norm. x and y may alias.
void rmsNorm(const float* x, const float* weight, float eps, std::int64_t n, float* y);

// The same over `rows` consecutive vectors of width n (q/k norms over heads, batches of tokens).
void rmsNormRows(const float* x, const float* weight, float eps, std::int64_t rows, std::int64_t n,
                 float* y);

// y[r][o] = Σ_i W[o][i] · x[r][i] for each of `rows` input vectors. W is fp32 [out][in].
void linearF32(const float* weight, std::int64_t out, std::int64_t in, const float* x,
               std::int64_t rows, float* y);

// The same with W in FP4-E2M1 group-128 (codes [out][fp4RowBytes(in)], bf16 scales
// [out][fp4GroupsPerRow(in)]). Each group's sum Σ x·e2m1 is formed first and multiplied by the
// group scale once ("scale folding"), the order the kernels use.
void linearFp4(const std::uint8_t* codes, const std::uint16_t* scales, std::int64_t out,
               std::int64_t in, const float* x, std::int64_t rows, float* y);

// The same with W in FP8-E4M3 and one fp32 scale per row (the tied lm_head):
// y[r][o] = rowScale[o] · Σ_i e4m3(W[o][i]) · x[r][i].
void linearFp8Rows(const std::uint8_t* codes, const float* rowScales, std::int64_t out,
                   std::int64_t in, const float* x, std::int64_t rows, float* y);

// The tiled device layout of an FP4 weight (kernels/include/kernels/Fp4Tiled.h), written from the
// lanes' point of view (independently of the header's index functions, which tests check against
// it): item (t, G), lane L = 4g + q: bytes [16L, 16L + 16) hold row 16t + g's row-layout chunk
// 4G + q, bytes [512 + 16L, ...) row 16t + g + 8's, each 32-bit word as its stored codes
// (fp4tiled::toStoredCodes); scale word g holds rows 16t + g and 16t + g + 8.
// Rows past `out`: zero codes, zero scales. tiledCodes: fp4tiled::codeBytes(out, in) bytes;
// tiledScales: fp4tiled::scaleWords(out, in) words.
void tileFp4(const std::uint8_t* codes, const std::uint16_t* scales, std::int64_t out, std::int64_t in,
             std::uint8_t* tiledCodes, std::uint32_t* tiledScales);

// Dequantizes one row of each format into fp32 (embedding gathers, parity oracles).
void dequantizeFp4Row(const std::uint8_t* codesRow, const std::uint16_t* scalesRow, std::int64_t in,
                      float* out);
void dequantizeFp8Row(const std::uint8_t* codesRow, float rowScale, std::int64_t n, float* out);

// gelu with the tanh approximation ("gelu_pytorch_tanh").
float geluTanh(float x);

// out[i] = gelu_tanh(gate[i]) · up[i]
void gegluRows(const float* gate, const float* up, std::int64_t n, float* out);

// ---- GEMM prefill building blocks (kernels/cuda Fp4Dequantize, ActivationConvert, GegluElementwise)

// BF16 copy of an FP4-E2M1 group-128 weight W[out][in]: y[o][i] = floatToBf16(e2m1(code) × scale)
// (the fp32 product, exact for normal scales, rounded to nearest even to bf16: the product of a
// 2-bit and an 8-bit significand needs up to 10 bits). y is BF16 bits, row-major [out][ldOut];
// columns [in, ldOut) are not written.
void dequantizeFp4ToBf16(const std::uint8_t* codes, const std::uint16_t* scales, std::int64_t out,
                         std::int64_t in, std::uint16_t* y, std::int64_t ldOut);

// FP16 copy of an FP4 weight for the GPU prefill: y[o][i] = floatToFp16(e2m1(code) × scale ×
// multiplier), multiplier a power of two (exact while the products are normal FP16 numbers).
void dequantizeFp4ToFp16(const std::uint8_t* codes, const std::uint16_t* scales, std::int64_t out,
                         std::int64_t in, std::uint16_t* y, std::int64_t ldOut, float multiplier);

// hi = floatToFp16(x·multiplier), lo = floatToFp16(x·multiplier − hi), as splitToBf16.
void splitToFp16(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t xStride, std::uint16_t* hi,
                 std::uint16_t* lo, std::int64_t outStride, float multiplier);

// hi[r][c] = floatToBf16(x[r][c]); lo[r][c] = floatToBf16(x[r][c] − bf16(hi[r][c])) when lo is not
// null (x − hi is exact in fp32, so x ≈ hi + lo to 2^-16 relative). x is [rows][xStride], hi and lo
// [rows][outStride] BF16 bits; columns [0, cols) are written.
void splitToBf16(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t xStride,
                 std::uint16_t* hi, std::uint16_t* lo, std::int64_t outStride);

// GeGLU over a fused gate|up output: y[r][j] = gelu_tanh(gateUp[r][j]) · gateUp[r][width + j]
// for j < width; gateUp is [rows][ldIn] (ldIn >= 2·width), y is [rows][ldOut].
void gegluGateUpRows(const float* gateUp, std::int64_t rows, std::int64_t width, std::int64_t ldIn,
                     float* y, std::int64_t ldOut);

// Rotates each of `heads` vectors of width headDim in place at absolute position `position`,
// half-split (NeoX) layout: dim j pairs with j + headDim/2 and uses inverseFrequency[j].
// Pairs whose inverse frequency is 0 are left untouched (the p-RoPE identity dims).
// angle = float(inverseFrequency[j] · float(position)), as transformers computes it in fp32.
void ropeHalfSplit(float* x, std::int64_t heads, std::int64_t headDim,
                   const float* inverseFrequency, std::int64_t position);

// Inverse frequencies for a head dim: the first `rotatedPairs` are theta^(-2j/headDim), the rest
// (up to headDim/2) are 0. Default RoPE: rotatedPairs = headDim/2. Proportional RoPE with
// partial factor ρ: rotatedPairs = int(ρ·headDim/2), exponent still over the full headDim.
void ropeInverseFrequencies(std::int64_t headDim, std::int64_t rotatedPairs, double theta,
                            float* inverseFrequency);

// Decode attention for one query position over a KV cache.
//   q:      [queryHeads][headDim] (already normed and rotated)
//   keys/values: [capacity][kvHeads][headDim]; position p in slot p % capacity
//   keys attended: absolute positions [firstPosition, lastPosition] inclusive
//   query head h reads kv head h / (queryHeads / kvHeads) (contiguous GQA grouping)
//   score = q·k · scale (Gemma 4: scale 1.0, no softcap); softmax in fp32 (with max subtraction)
//   out:    [queryHeads][headDim]
// Preconditions: 0 <= firstPosition <= lastPosition, lastPosition - firstPosition < capacity,
// queryHeads % kvHeads == 0. Slots outside the band are never read.
void attentionDecode(const float* q, const float* keys, const float* values, std::int64_t capacity,
                     std::int64_t queryHeads, std::int64_t kvHeads, std::int64_t headDim,
                     std::int64_t firstPosition, std::int64_t lastPosition, float scale,
                     float* out);

// x[i] = cap · tanh(x[i] / cap)
void softcap(float* x, std::int64_t n, float cap);

// y[i] += x[i]
void addInPlace(float* y, const float* x, std::int64_t n);

// x[i] *= s
void scaleInPlace(float* x, std::int64_t n, float s);

// The min(count, n) best entries of logits[0, n): larger logit first, then lower index, NaN
// counted (and reported) as -inf, -0 as +0 (the order of the engine's Sampler). Writes
// outLogits[i], outIds[i] for i < min(count, n).
void topK(const float* logits, std::int64_t n, int count, float* outLogits, std::int32_t* outIds);

}  // namespace gemma::reference
