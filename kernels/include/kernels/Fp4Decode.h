// The FP4 matvec's register-level decode steps, as host/device functions: the kernels
// (kernels/cuda/Fp4Matvec.cu) compile them to PRMT/LOP3, and the CPU tests
// (tests/engine/Fp4DecodeTest.cpp) run the same code through a host emulation of PRMT, so the
// selector constants and the integer identity are checked on every CI run, without a GPU.
#pragma once

#include <cmath>
#include <cstdint>

#include "WeightFormats.h"

namespace gemma::formats::fp4decode {

// prmt.b32 in its default mode: byte i of the result is byte (n & 7) of the pair {a = bytes 0..3,
// b = bytes 4..7}, n = nibble i of `selector`; with n & 8 it is that byte's sign bit replicated
// (0x00 or 0xFF). Selector bits 16..31 are ignored.
GEMMA_HOST_DEVICE std::uint32_t permuteBytes(std::uint32_t a, std::uint32_t b, std::uint32_t selector) {
#if defined(__CUDA_ARCH__)
    std::uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
    return d;
#else
    const std::uint64_t pool = static_cast<std::uint64_t>(a) | (static_cast<std::uint64_t>(b) << 32);
    std::uint32_t d = 0;
    for (int i = 0; i < 4; ++i) {
        const std::uint32_t n = (selector >> (4 * i)) & 0xFu;
        std::uint32_t byte = static_cast<std::uint32_t>(pool >> (8 * (n & 7u))) & 0xFFu;
        if (n & 8u) byte = (byte & 0x80u) ? 0xFFu : 0x00u;
        d |= byte << (8 * i);
    }
    return d;
#endif
}

// ---- x as fp16 (the fp16 mma path) -----------------------------------------------------------------
// FP16 high bytes of the E2M1 magnitudes 0, 0.5, 1, 1.5 | 2, 3, 4, 6 (their low bytes are zero).
inline constexpr std::uint32_t kFp16HighTableLo = 0x3E3C3800u;
inline constexpr std::uint32_t kFp16HighTableHi = 0x46444240u;

// The 8 nibbles of `w` (nibble k = input k) as 4 FP16 pairs: pair p = (nibble 2p in the low half,
// nibble 2p+1 in the high half), exactly the E2M1 values (−0 included). 13 integer instructions.
GEMMA_HOST_DEVICE void decodeFp16Pairs(std::uint32_t w, std::uint32_t (&pairs)[4]) {
    const std::uint32_t magnitude = w & 0x77777777u;
    const std::uint32_t highLo = permuteBytes(kFp16HighTableLo, kFp16HighTableHi, magnitude);        // weights 0..3
    const std::uint32_t highHi = permuteBytes(kFp16HighTableLo, kFp16HighTableHi, magnitude >> 16);  // weights 4..7
    const std::uint32_t w4 = w << 4;
    // Sign-replicate mode over {w, w << 4}: byte k = 0xFF when weight k is negative.
    const std::uint32_t signLo = permuteBytes(w, w4, 0x9D8Cu);
    const std::uint32_t signHi = permuteBytes(w, w4, 0xBFAEu);
    const std::uint32_t bytesLo = highLo | (signLo & 0x80808080u);
    const std::uint32_t bytesHi = highHi | (signHi & 0x80808080u);
    pairs[0] = permuteBytes(bytesLo, 0u, 0x1404u);
    pairs[1] = permuteBytes(bytesLo, 0u, 0x3424u);
    pairs[2] = permuteBytes(bytesHi, 0u, 0x1404u);
    pairs[3] = permuteBytes(bytesHi, 0u, 0x3424u);
}

// ---- x as integers (the int8 mma path, the default) ------------------------------------------------
// E2M1·2 of the magnitudes 0..3 | 4..7: 0, 1, 2, 3 | 4, 6, 8, 12, every byte positive.
inline constexpr std::uint32_t kInt8TableLo = 0x03020100u;
inline constexpr std::uint32_t kInt8TableHi = 0x0C080604u;

// Nibbles 0..3 of `w` (its low 16 bits) as 4 int8 E2M1·2 values split by sign: `positive` holds
// the non-negative weights and 0 in place of the negative ones, `negative` the magnitudes of the
// negative ones and 0 elsewhere (a nibble with its sign bit set is a selector in sign-replicate
// mode, which yields 0x00 over a table of positive bytes). weight = positive − negative, per byte.
GEMMA_HOST_DEVICE void decodeInt8Quad(std::uint32_t w, std::uint32_t& positive, std::uint32_t& negative) {
    positive = permuteBytes(kInt8TableLo, kInt8TableHi, w);
    negative = permuteBytes(kInt8TableLo, kInt8TableHi, w ^ 0x8888u);
}

// The same for the stored codes of the tiled layout (Fp4Tiled.h, toStoredCodes): the negative
// selectors are w + 0x8888 (the stored nibbles make up for the add's carries), formed by one
// multiply-add on the FMA pipe instead of an xor on the integer pipe, which the decode keeps busy
// (docs/PERFORMANCE.md version 27). The multiplier is 1 modulo 2^16, so the low 16 bits (all the
// byte permute reads) are those of w + 0x8888; a multiplier of 1 would be folded into an integer
// add, which runs on the integer pipe again.
inline constexpr std::uint32_t kStoredSelectorMultiplier = 0x9E370001u;
GEMMA_HOST_DEVICE void decodeInt8QuadStored(std::uint32_t w, std::uint32_t& positive, std::uint32_t& negative) {
    positive = permuteBytes(kInt8TableLo, kInt8TableHi, w);
    negative = permuteBytes(kInt8TableLo, kInt8TableHi, w * kStoredSelectorMultiplier + 0x8888u);
}

// x as integers: per 128-input group, X = rint(x·2^E) with E from the group's max|x| (IEEE bits
// `maxBits`, the sign cleared): max in [2^k, 2^(k+1)) gives E = 21 − k, so |x·2^E| < 2^22 and
// |X| <= 2^22: every entry rounded to within 2^-22 of the group's largest (the largest keeps 22
// of its 24 significant bits). E <= 125 keeps 2^E and 2^(−E−1) normal floats (groups whose max is below 2^-104 keep fewer
// digits). Since version 24 of docs/PERFORMANCE.md: |X| < 2^31 before, whose rint needed the
// quarter-rate float-to-int conversion per element, 1 µs of every down projection's staging.
GEMMA_HOST_DEVICE int integerExponent(std::uint32_t maxBits) {
    const int k = static_cast<int>(maxBits >> 23) - 127;
    const int e = 21 - k;
    return e < 125 ? e : 125;
}
// 2^e as a float, e in [−126, 127].
GEMMA_HOST_DEVICE float powerOfTwo(int e) { return bitsToFloat(static_cast<std::uint32_t>(e + 127) << 23); }
// The factor that turns the group's integer sums into the dot: 2^(−E) / 2 (the weights are
// E2M1·2), or NaN when the group holds a NaN or an infinity.
GEMMA_HOST_DEVICE float integerFactor(std::uint32_t maxBits, int e) {
    return maxBits >= 0x7F800000u ? bitsToFloat(0x7FC00000u) : bitsToFloat(static_cast<std::uint32_t>(127 - e - 1) << 23);
}

// X without a float-to-int conversion: x·2^E is exact (a power of two), and adding 1.5·2^23 rounds
// it to an integer (round to nearest even, as rint) because the sum lies in [2^23, 2^24], where
// the float spacing is 1. The sum's bits are 0x4B000000 + (X + 2^22), so bytes 0..2 hold the
// offset value X + 2^22 in [0, 2^23] (2^23 itself sets bit 23, the low bit of byte 2). One FMA.
inline constexpr float kIntegerRoundingBias = 12582912.0f;  // 1.5 · 2^23
inline constexpr std::int64_t kIntegerOffset = 4194304;     // 2^22
GEMMA_HOST_DEVICE std::uint32_t integerBits(float x, float up) {
#if defined(__CUDA_ARCH__)
    return floatToBits(__fmaf_rn(x, up, kIntegerRoundingBias));
#else
    return floatToBits(std::fmaf(x, up, kIntegerRoundingBias));
#endif
}

// Four integerBits → the three byte planes of B: plane p holds byte 2 − p of each of the four in
// order (plane 0 the top byte, 0..128; planes 1 and 2 bytes 1 and 0). 7 PRMTs.
inline constexpr int kIntegerPlanes = 3;
GEMMA_HOST_DEVICE void integerPlanes(std::uint32_t x0, std::uint32_t x1, std::uint32_t x2, std::uint32_t x3,
                                     std::uint32_t (&plane)[kIntegerPlanes]) {
    const std::uint32_t lo01 = permuteBytes(x0, x1, 0x5140u), lo23 = permuteBytes(x2, x3, 0x5140u);
    const std::uint32_t top01 = permuteBytes(x0, x1, 0x7362u), top23 = permuteBytes(x2, x3, 0x7362u);
    plane[0] = permuteBytes(top01, top23, 0x5410u);
    plane[1] = permuteBytes(lo01, lo23, 0x7632u);
    plane[2] = permuteBytes(lo01, lo23, 0x5410u);
}

// The B columns of the int8 mma: 0 = plane 0 (the top byte), 1 = all ones, 2 and 3 = planes 1
// and 2 (bytes 1 and 0), 4..7 = zero. With C_c = Σ w·column_c over a group (exact int32),
//   Σ w·X = 2^16·(C0 − 64·C1) + 2^8·C2 + C3     (64·C1 = 2^22·Σ w / 2^16 removes the offset),
// the sum the kernel assembles across the lanes that hold the columns.
// Column c's weight in that sum once the ones column is folded into column 0 (C1's weight is 0).
GEMMA_HOST_DEVICE constexpr float columnWeight(int c) { return c == 0 ? 65536.0f : c == 2 ? 256.0f : c == 3 ? 1.0f : 0.0f; }
inline constexpr int kOnesColumnFold = 64;  // C0 − 64·C1 removes the offset 2^22 of every X
GEMMA_HOST_DEVICE std::int64_t combineColumns(std::int64_t c0, std::int64_t c1, std::int64_t c2, std::int64_t c3) {
    return (c0 - kOnesColumnFold * c1) * 65536 + c2 * 256 + c3;
}

}  // namespace gemma::formats::fp4decode
