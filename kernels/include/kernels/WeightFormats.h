// The weight formats of a Gemma Desk package, defined once for host and device.
//
// FP4-E2M1, group 128 ("Fp4G128"): a linear weight W[out][in] (y = W·x) is stored row-major as
//   codes:  out rows × fp4RowBytes(in) bytes. Byte j of a row holds input 2j in its low nibble and
//           input 2j+1 in its high nibble. A nibble is sign(bit 3) | magnitude index (bits 0..2)
//           into kE2M1Magnitudes = {0, 0.5, 1, 1.5, 2, 3, 4, 6}: the standard E2M1 bit pattern.
//           Rows are padded to a whole group; padding nibbles are 0 (+0.0).
//   scales: out rows × fp4GroupsPerRow(in) BF16 values (raw uint16 bits), one per 128 consecutive
//           inputs of a row. Weight (r, k) = E2M1(code) × scale(r, k / 128), computed exactly in fp32
//           (a 2-bit significand times an 8-bit one needs at most 10 bits).
// FP8-E4M3FN with a per-row scale ("Fp8RowScaled"), for the tied embedding / lm_head E[V][H]:
//   codes:  V rows × H bytes, E4M3FN (bias 7, no infinities, 0x7F/0xFF are NaN, max 448).
//   scales: V fp32 values. Element (r, c) = E4M3(code) × scale(r), rounded once to fp32.
// BF16 is the upper half of an IEEE fp32; conversions round to nearest, ties to even.
//
// The quantizer (engine) and every kernel decode through these functions, so the host reference
// and the device agree bit for bit on what a stored weight means.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define GEMMA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define GEMMA_HOST_DEVICE inline
#endif

namespace gemma::formats {

inline constexpr int kFp4GroupSize = 128;
inline constexpr float kE2M1Max = 6.0f;
inline constexpr float kE4M3Max = 448.0f;

GEMMA_HOST_DEVICE constexpr std::int64_t fp4GroupsPerRow(std::int64_t in) {
    return (in + kFp4GroupSize - 1) / kFp4GroupSize;
}
GEMMA_HOST_DEVICE constexpr std::int64_t fp4RowBytes(std::int64_t in) {
    return fp4GroupsPerRow(in) * (kFp4GroupSize / 2);
}

GEMMA_HOST_DEVICE float bitsToFloat(std::uint32_t bits) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(bits);
#else
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
#endif
}
GEMMA_HOST_DEVICE std::uint32_t floatToBits(float value) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(value);
#else
    std::uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    return bits;
#endif
}

// ---- BF16 -------------------------------------------------------------------------------------
GEMMA_HOST_DEVICE float bf16ToFloat(std::uint16_t bits) {
    return bitsToFloat(static_cast<std::uint32_t>(bits) << 16);
}
// Round to nearest, ties to even; NaN stays NaN (quiet), infinities stay infinite.
GEMMA_HOST_DEVICE std::uint16_t floatToBf16(float value) {
    std::uint32_t bits = floatToBits(value);
    if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0) {
        return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
    }
    const std::uint32_t roundingBias = 0x7FFFu + ((bits >> 16) & 1u);
    return static_cast<std::uint16_t>((bits + roundingBias) >> 16);
}
GEMMA_HOST_DEVICE float roundToBf16(float value) { return bf16ToFloat(floatToBf16(value)); }

// ---- FP16 (source checkpoints only) -----------------------------------------------------------
GEMMA_HOST_DEVICE float fp16ToFloat(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t exponent = (h >> 10) & 0x1Fu;
    const std::uint32_t mantissa = h & 0x3FFu;
    if (exponent == 0) {
        // Zero or subnormal: mantissa × 2^-24, exact in fp32.
        const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
        return sign ? -magnitude : magnitude;
    }
    if (exponent == 31) return bitsToFloat(sign | 0x7F800000u | (mantissa << 13));
    return bitsToFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// Round to nearest, ties to even, with subnormals; overflow gives ±inf, NaN stays NaN (quiet).
// Used for the FP16 operands of the GPU prefill GEMMs (their values are chosen to fit).
GEMMA_HOST_DEVICE std::uint16_t floatToFp16(float value) {
    const std::uint32_t bits = floatToBits(value);
    const std::uint32_t sign = (bits >> 16) & 0x8000u;
    const std::uint32_t magnitude = bits & 0x7FFFFFFFu;
    if (magnitude >= 0x7F800000u) return static_cast<std::uint16_t>(sign | (magnitude > 0x7F800000u ? 0x7E00u : 0x7C00u));
    if (magnitude >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // >= 65520: rounds to inf
    if (magnitude < 0x38800000u) {
        // Below 2^-14: a multiple of 2^-24. value = significand × 2^(exponent − 150), so the count
        // of 2^-24 units is significand × 2^(exponent − 126), a right shift by 126 − exponent.
        const std::uint32_t exponent = magnitude >> 23;
        if (exponent < 102) return static_cast<std::uint16_t>(sign);  // < 2^-25: rounds to ±0
        const std::uint32_t significand = (magnitude & 0x7FFFFFu) | 0x800000u;
        const std::uint32_t shift = 126u - exponent;  // 14 .. 24
        std::uint32_t units = significand >> shift;
        const std::uint32_t rest = significand & ((1u << shift) - 1u);
        const std::uint32_t half = 1u << (shift - 1u);
        if (rest > half || (rest == half && (units & 1u))) units += 1u;  // may carry into 2^-14: still right
        return static_cast<std::uint16_t>(sign | units);
    }
    // Normal: rebias the exponent (127 → 15) and round the 23-bit fraction to 10 bits; a carry out
    // of the fraction correctly bumps the exponent.
    std::uint32_t h = (magnitude >> 13) - (112u << 10);
    const std::uint32_t rest = magnitude & 0x1FFFu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h += 1u;
    return static_cast<std::uint16_t>(sign | h);
}

// The power of two the GPU prefill multiplies an FP4 weight's products by before storing them as
// FP16 (Fp4Dequantize): the largest possible magnitude, 6 × maxAbsScale, lands in [2^14, 2^15),
// so nothing overflows and every product within 2^28 of it stays a normal FP16 number, which
// holds an E2M1 × bf16 product exactly. 1 for a zero or non-finite maximum. Apply it to the scale
// first (scale × multiplier, then × the E2M1 value): for scales past FLT_MAX / 6 the product the
// other way round overflows.
inline float fp16WeightMultiplier(float maxAbsScale) {
    if (!(maxAbsScale > 0.0f) || !std::isfinite(maxAbsScale)) return 1.0f;
    int exponent = 0;
    // 6·max = m·2^exponent, m in [0.5, 1), in double: 6·max overflows a float above 5.7e37, and
    // frexp of infinity leaves the exponent unspecified (a 2^15 multiplier made 0 × inf = NaN).
    (void)std::frexp(6.0 * static_cast<double>(maxAbsScale), &exponent);
    const int shift = 15 - exponent;
    return std::ldexp(1.0f, shift < -120 ? -120 : shift > 120 ? 120 : shift);
}

// ---- FP4 E2M1 ---------------------------------------------------------------------------------
GEMMA_HOST_DEVICE float e2m1Magnitude(unsigned index) {
    // 0, 0.5, 1, 1.5, 2, 3, 4, 6 without a table, so device code needs no constant memory.
    const unsigned exponent = (index >> 1) & 3u;
    const unsigned mantissa = index & 1u;
    if (exponent == 0) return 0.5f * static_cast<float>(mantissa);
    return static_cast<float>(1u << (exponent - 1)) * (1.0f + 0.5f * static_cast<float>(mantissa));
}
GEMMA_HOST_DEVICE float e2m1ToFloat(unsigned nibble) {
    const float magnitude = e2m1Magnitude(nibble & 7u);
    return (nibble & 8u) ? -magnitude : magnitude;
}
// Nearest E2M1 code to `value` (already divided by the group scale), ties to the even code,
// saturating at ±6. NaN must be rejected by the caller (it would map to 6).
GEMMA_HOST_DEVICE unsigned floatToE2M1(float value) {
    const unsigned sign = (floatToBits(value) >> 31) ? 8u : 0u;
    const float a = value < 0.0f ? -value : value;
    unsigned index;
    // Midpoints between consecutive magnitudes; at a midpoint the even index wins.
    if (a < 0.25f) index = 0;
    else if (a == 0.25f) index = 0;
    else if (a < 0.75f) index = 1;
    else if (a == 0.75f) index = 2;
    else if (a < 1.25f) index = 2;
    else if (a == 1.25f) index = 2;
    else if (a < 1.75f) index = 3;
    else if (a == 1.75f) index = 4;
    else if (a < 2.5f) index = 4;
    else if (a == 2.5f) index = 4;
    else if (a < 3.5f) index = 5;
    else if (a == 3.5f) index = 6;
    else if (a < 5.0f) index = 6;
    else if (a == 5.0f) index = 6;
    else index = 7;  // includes everything above 6: saturate
    if (index == 0) return 0u;  // a zero is stored as +0 so padding and zeros share one code
    return sign | index;
}

// ---- FP8 E4M3FN -------------------------------------------------------------------------------
GEMMA_HOST_DEVICE float e4m3ToFloat(std::uint8_t code) {
    const unsigned exponent = (code >> 3) & 0xFu;
    const unsigned mantissa = code & 7u;
    float magnitude;
    if (exponent == 0) {
        magnitude = static_cast<float>(mantissa) * 0.001953125f;  // m × 2^-9
    } else if (exponent == 15 && mantissa == 7) {
        return bitsToFloat(0x7FC00000u);  // NaN
    } else {
        magnitude = bitsToFloat((exponent + 120u) << 23 | (mantissa << 20));
    }
    return (code & 0x80u) ? -magnitude : magnitude;
}
// Round to nearest E4M3FN, ties to even, saturating at ±448. NaN must be rejected by the caller.
GEMMA_HOST_DEVICE std::uint8_t floatToE4M3(float value) {
    const std::uint8_t sign = (floatToBits(value) >> 31) ? 0x80u : 0u;
    float a = value < 0.0f ? -value : value;
    if (!(a < kE4M3Max)) return sign | 0x7Eu;  // 448 (and saturation)
    // Normal numbers have exponent >= -6; below 2^-6 the spacing is a fixed 2^-9.
    const std::uint32_t bits = floatToBits(a);
    int exponent = static_cast<int>((bits >> 23) & 0xFFu) - 127;
    if (exponent < -6) {
        // Subnormal range: quantum 2^-9; rint() would depend on the FP environment, so round by hand.
        const float scaled = a * 512.0f;  // exact: power-of-two scaling of a value well inside range
        unsigned q = static_cast<unsigned>(scaled);
        const float remainder = scaled - static_cast<float>(q);
        if (remainder > 0.5f || (remainder == 0.5f && (q & 1u))) ++q;
        // q == 8 is the smallest normal (exponent field 1, mantissa 0): the same bit pattern.
        return sign | static_cast<std::uint8_t>(q);
    }
    // Normal: keep 3 mantissa bits of the fp32 significand, round to nearest even.
    std::uint32_t mantissa = bits & 0x7FFFFFu;
    std::uint32_t kept = mantissa >> 20;
    const std::uint32_t dropped = mantissa & 0xFFFFFu;
    if (dropped > 0x80000u || (dropped == 0x80000u && (kept & 1u))) ++kept;
    if (kept == 8) {
        kept = 0;
        ++exponent;
    }
    const unsigned field = static_cast<unsigned>(exponent + 7);
    if (field > 15 || (field == 15 && kept == 7)) return sign | 0x7Eu;
    return sign | static_cast<std::uint8_t>(field << 3 | kept);
}

}  // namespace gemma::formats
