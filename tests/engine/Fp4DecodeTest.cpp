// The FP4 matvec's register-level decode (kernels/Fp4Decode.h) run on the host through its PRMT
// emulation: the selector constants of both decodes, the integer path's byte planes, its column
// identity and its exponent rule, checked on every CI run. The GPU harness (tests/kernels/
// test_fp4_matvec.cu) checks the kernels themselves against FP64 references.
#include <gtest/gtest.h>

#include <kernels/Fp4Decode.h>
#include <kernels/Fp4Tiled.h>
#include <kernels/WeightFormats.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace {

namespace fd = gemma::formats::fp4decode;
using gemma::formats::e2m1ToFloat;

std::uint32_t floatBits(float v) {
    std::uint32_t b;
    std::memcpy(&b, &v, sizeof b);
    return b;
}

// FP16 bits → float for the values the decode produces (zero, normals; no subnormals or inf).
float halfToFloat(std::uint16_t h) {
    const bool negative = (h & 0x8000u) != 0;
    const int exponent = (h >> 10) & 0x1F;
    const int mantissa = h & 0x3FF;
    float v = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -24)
                            : std::ldexp(1.0f + static_cast<float>(mantissa) / 1024.0f, exponent - 15);
    return negative ? -v : v;
}

TEST(Fp4Decode, PermuteBytesEmulatesPrmt) {
    // Plain selection from both operands, and sign replication (0xFF for a set top bit, 0x00 else).
    EXPECT_EQ(fd::permuteBytes(0x44332211u, 0x88776655u, 0x7531u), 0x88664422u);
    EXPECT_EQ(fd::permuteBytes(0x00000080u, 0x0000007Fu, 0xC8C8u), 0x00FF00FFu);
    EXPECT_EQ(fd::permuteBytes(0x00000080u, 0x0000007Fu, 0xC848u), 0x00FF7FFFu);
    // Bits 16..31 of the selector are ignored.
    EXPECT_EQ(fd::permuteBytes(0x44332211u, 0x88776655u, 0xFFFF3210u), 0x44332211u);
}

TEST(Fp4Decode, Fp16PairsAreTheE2M1ValuesBitForBit) {
    std::mt19937 rng(11);
    auto check = [](std::uint32_t w) {
        std::uint32_t pairs[4];
        fd::decodeFp16Pairs(w, pairs);
        for (int k = 0; k < 8; ++k) {
            const std::uint16_t half = static_cast<std::uint16_t>(pairs[k / 2] >> (16 * (k % 2)));
            const float expected = e2m1ToFloat((w >> (4 * k)) & 0xFu);
            const float got = halfToFloat(half);
            if (floatBits(got) != floatBits(expected)) return ::testing::AssertionFailure() << "word " << w << " nibble " << k;
        }
        return ::testing::AssertionSuccess();
    };
    // Every pattern of the low 4 nibbles against random high ones, every pattern of the high
    // nibbles against random low ones, and random words (−0 included: nibble 8).
    for (std::uint32_t v = 0; v < 65536; ++v) {
        ASSERT_TRUE(check(v | (rng() << 16)));
        ASSERT_TRUE(check((v << 16) | (rng() & 0xFFFFu)));
    }
}

TEST(Fp4Decode, Int8QuadsSplitE2M1TimesTwoBySign) {
    // All 65536 patterns of four nibbles: positive − negative, per byte, is 2·E2M1 exactly, and
    // at most one of the two is non-zero. Bits 16..31 must not matter.
    for (std::uint32_t v = 0; v < 65536; ++v) {
        std::uint32_t positive = 0, negative = 0, positiveHigh = 0, negativeHigh = 0;
        fd::decodeInt8Quad(v, positive, negative);
        fd::decodeInt8Quad(v | 0xA5C30000u, positiveHigh, negativeHigh);
        ASSERT_EQ(positive, positiveHigh);
        ASSERT_EQ(negative, negativeHigh);
        for (int k = 0; k < 4; ++k) {
            const int p = static_cast<int>((positive >> (8 * k)) & 0xFFu);
            const int n = static_cast<int>((negative >> (8 * k)) & 0xFFu);
            const float expected = 2.0f * e2m1ToFloat((v >> (4 * k)) & 0xFu);
            ASSERT_EQ(static_cast<float>(p - n), expected) << "pattern " << v << " nibble " << k;
            ASSERT_TRUE(p == 0 || n == 0);
            ASSERT_LE(p, 12);
            ASSERT_LE(n, 12);
        }
    }
}

TEST(Fp4Decode, StoredCodesDecodeAsTheCodesTheyHold) {
    // The tiled layout's stored codes (Fp4Tiled.h) through the multiply-add selectors give the same
    // bytes as the xor selectors on the codes fromStoredCodes reads, for all 65536 halves and
    // whatever bits 16..31 hold; and the codes of toStoredCodes' images are the codes stored.
    using gemma::formats::fp4tiled::fromStoredCodes;
    using gemma::formats::fp4tiled::toStoredCodes;
    for (std::uint32_t v = 0; v < 65536; ++v) {
        std::uint32_t positive = 0, negative = 0, wantPositive = 0, wantNegative = 0;
        fd::decodeInt8Quad(fromStoredCodes(v), wantPositive, wantNegative);
        for (const std::uint32_t high : {0u, 0xFFFF0000u, 0x7A3C0000u}) {
            fd::decodeInt8QuadStored(v | high, positive, negative);
            ASSERT_EQ(positive, wantPositive) << "stored " << v << " high " << high;
            ASSERT_EQ(negative, wantNegative) << "stored " << v << " high " << high;
        }
        // The half as the matvec's high half (w >> 16) reads it.
        fd::decodeInt8QuadStored((v << 16 | 0x1234u) >> 16, positive, negative);
        ASSERT_EQ(positive, wantPositive);
        ASSERT_EQ(negative, wantNegative);
        fd::decodeInt8QuadStored(toStoredCodes(v), positive, negative);
        fd::decodeInt8Quad(v, wantPositive, wantNegative);
        ASSERT_EQ(positive, wantPositive) << "codes " << v;
        ASSERT_EQ(negative, wantNegative) << "codes " << v;
    }
}

// The integer of element i (0..3) of a quad from its plane bytes: bytes 2, 1, 0 less the offset.
std::int64_t reassemble(const std::uint32_t (&plane)[fd::kIntegerPlanes], int i) {
    const auto byte = [&](int p) { return static_cast<std::int64_t>((plane[p] >> (8 * i)) & 0xFFu); };
    return byte(0) * 65536 + byte(1) * 256 + byte(2) - fd::kIntegerOffset;
}

TEST(Fp4Decode, IntegerBitsRoundLikeRint) {
    // x·2^E anywhere inside (−2^22, 2^22), the ties and the ends included: bytes 0..2 of the bits
    // are rint(x·2^E) + 2^22 (ties to even, as __float2int_rn), bit 23 only at +2^22.
    std::vector<float> scaled = {0.0f, -0.0f, 0.5f, -0.5f, 1.5f, -1.5f, 2.5f, -2.5f, 0.49999997f, 4194303.5f, -4194303.5f,
                                 4194303.0f, -4194303.75f, 1e-30f, -1e-30f};
    std::mt19937 rng(11);
    for (int i = 0; i < 20000; ++i)
        scaled.push_back(std::ldexp(std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng), static_cast<int>(rng() % 23)));
    for (const float t : scaled) {
        for (const int e : {-20, 0, 7, 60}) {
            // x = t·2^-e (exact unless it leaves the normal range, hence x·2^e below, not t).
            const float x = std::ldexp(t, -e);
            const std::uint32_t bits = fd::integerBits(x, fd::powerOfTwo(e));
            const double product = static_cast<double>(x) * std::ldexp(1.0, e);
            const double expected = std::nearbyint(product) + static_cast<double>(fd::kIntegerOffset);
            ASSERT_EQ(static_cast<double>(bits & 0xFFFFFFu), expected) << "x·2^E = " << t;
            ASSERT_EQ(bits >> 24, 0x4Bu) << "x·2^E = " << t;
        }
    }
}

TEST(Fp4Decode, IntegerPlanesHoldEveryByteOfX) {
    std::mt19937 rng(5);
    std::vector<std::int32_t> values = {0, 1, -1, 127, -128, 255, -256, 65535, -65536, 4194303, -4194303, 4194304, -4194304};
    for (int i = 0; i < 4000; ++i) values.push_back(static_cast<std::int32_t>(rng() % 8388609u) - 4194304);
    const auto bitsOf = [](std::int32_t v) { return fd::integerBits(static_cast<float>(v), 1.0f); };
    for (std::size_t i = 0; i + 4 <= values.size(); ++i) {
        std::uint32_t plane[fd::kIntegerPlanes];
        fd::integerPlanes(bitsOf(values[i]), bitsOf(values[i + 1]), bitsOf(values[i + 2]), bitsOf(values[i + 3]), plane);
        for (int k = 0; k < 4; ++k) ASSERT_EQ(reassemble(plane, k), values[i + k]) << "element " << i + k;
    }
}

TEST(Fp4Decode, ColumnSumsGiveTheExactGroupDot) {
    // A group of 128: weights E2M1·2 from random nibbles, X anywhere in [−2^22, 2^22] (the ends
    // included), the four column sums as the mma forms them (u8 planes, a ones column), and the
    // identity.
    std::mt19937 rng(9);
    for (int trial = 0; trial < 2000; ++trial) {
        std::int64_t direct = 0, c[4] = {0, 0, 0, 0};
        for (int quad = 0; quad < 32; ++quad) {
            std::int32_t x[4];
            for (auto& v : x) {
                const std::uint32_t r = rng();
                v = trial % 3 == 0 ? ((r & 1) ? 4194304 : -4194304) : static_cast<std::int32_t>(r % 8388609u) - 4194304;
            }
            std::uint32_t plane[fd::kIntegerPlanes];
            fd::integerPlanes(fd::integerBits(static_cast<float>(x[0]), 1.0f), fd::integerBits(static_cast<float>(x[1]), 1.0f),
                              fd::integerBits(static_cast<float>(x[2]), 1.0f), fd::integerBits(static_cast<float>(x[3]), 1.0f), plane);
            std::uint32_t positive = 0, negative = 0;
            fd::decodeInt8Quad(rng(), positive, negative);
            for (int k = 0; k < 4; ++k) {
                const std::int64_t w = static_cast<std::int64_t>((positive >> (8 * k)) & 0xFFu) -
                                       static_cast<std::int64_t>((negative >> (8 * k)) & 0xFFu);
                direct += w * x[k];
                c[0] += w * ((plane[0] >> (8 * k)) & 0xFFu);
                c[1] += w;
                for (int p = 1; p < fd::kIntegerPlanes; ++p) c[p + 1] += w * ((plane[p] >> (8 * k)) & 0xFFu);
            }
        }
        // The kernel's int32 column sums, folded or not, stay below 2^19 (128 · 12 · 255 < 2^19):
        // exact in the fp32 the kernel converts them to.
        for (const auto v : c) ASSERT_LT(std::llabs(v), std::int64_t{1} << 19);
        ASSERT_LT(std::llabs(c[0] - fd::kOnesColumnFold * c[1]), std::int64_t{1} << 19);
        ASSERT_EQ(fd::combineColumns(c[0], c[1], c[2], c[3]), direct);
        // The weights the kernel's lanes apply after folding the ones column into column 0.
        const double weighted = static_cast<double>(c[0] - fd::kOnesColumnFold * c[1]) * fd::columnWeight(0) +
                                static_cast<double>(c[1]) * fd::columnWeight(1) + static_cast<double>(c[2]) * fd::columnWeight(2) +
                                static_cast<double>(c[3]) * fd::columnWeight(3);
        ASSERT_EQ(weighted, static_cast<double>(direct));
        for (int column = 4; column < 8; ++column) ASSERT_EQ(fd::columnWeight(column), 0.0f);
    }
}

TEST(Fp4Decode, GroupExponentKeepsXWithinTwentyThreeBits) {
    // For maxima across the float range (binade edges), max·2^E lies in [2^21, 2^22): inside
    // integerBits' range, with bit 21 used; the factor undoes 2^E and the weights' ×2 exactly.
    for (int k = -104; k <= 127; ++k) {
        for (const float mantissa : {1.0f, 1.5f, 1.9999999f}) {
            const float maximum = std::ldexp(mantissa, k);
            if (!std::isfinite(maximum)) continue;
            const std::uint32_t bits = floatBits(maximum);
            const int e = fd::integerExponent(bits);
            const double scaled = static_cast<double>(maximum) * std::ldexp(1.0, e);
            ASSERT_EQ(static_cast<double>(maximum * fd::powerOfTwo(e)), scaled) << "max 2^" << k << " (2^E exact)";
            ASSERT_GE(scaled, 2097152.0) << "max 2^" << k;
            ASSERT_LT(scaled, 4194304.0) << "max 2^" << k;
            ASSERT_EQ(fd::integerFactor(bits, e) * fd::powerOfTwo(e), 0.5f);
        }
    }
    // Tiny, zero and subnormal maxima: E stops at 125, still in range.
    for (const float maximum : {0.0f, std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(), 1e-35f}) {
        const std::uint32_t bits = floatBits(maximum);
        const int e = fd::integerExponent(bits);
        EXPECT_LE(e, 125);
        EXPECT_LT(std::fabs(static_cast<double>(maximum) * std::ldexp(1.0, e)), 4194304.0);
        EXPECT_TRUE(std::isfinite(fd::integerFactor(bits, e)));
    }
    // A NaN or an infinity in the group makes the factor NaN (y is NaN, never a finite number).
    for (const float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
        const std::uint32_t bits = floatBits(bad) & 0x7FFFFFFFu;
        EXPECT_TRUE(std::isnan(fd::integerFactor(bits, fd::integerExponent(bits))));
    }
}

}  // namespace
