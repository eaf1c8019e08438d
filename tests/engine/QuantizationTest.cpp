// The package's number formats and quantization rules (kernels/WeightFormats.h, WeightQuantization.h).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "WeightQuantization.h"
#include "kernels/WeightFormats.h"
#include "reference/ReferenceOps.h"

namespace fmt = gemma::formats;
using gemma::ScaleRule;

namespace {

std::vector<float> dequantizeFp4(const std::vector<float>& row, ScaleRule rule = ScaleRule::AbsMax) {
    const auto in = static_cast<std::int64_t>(row.size());
    std::vector<std::uint8_t> codes(static_cast<std::size_t>(fmt::fp4RowBytes(in)));
    std::vector<std::uint16_t> scales(static_cast<std::size_t>(fmt::fp4GroupsPerRow(in)));
    EXPECT_TRUE(gemma::quantizeFp4Row(row, rule, codes.data(), scales.data()).isOk());
    std::vector<float> out(row.size());
    gemma::reference::dequantizeFp4Row(codes.data(), scales.data(), in, out.data());
    return out;
}

}  // namespace

TEST(E2M1, DecodesTheEightMagnitudes) {
    const float expected[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (unsigned i = 0; i < 8; ++i) {
        EXPECT_EQ(fmt::e2m1ToFloat(i), expected[i]);
        EXPECT_EQ(fmt::e2m1ToFloat(i | 8u), -expected[i]);
        EXPECT_EQ(fmt::floatToE2M1(expected[i]), i);
    }
}

TEST(E2M1, RoundsToNearestWithTiesToEven) {
    // Exact midpoints go to the even index of {0, .5, 1, 1.5, 2, 3, 4, 6}.
    EXPECT_EQ(fmt::e2m1ToFloat(fmt::floatToE2M1(0.25f)), 0.0f);
    EXPECT_EQ(fmt::e2m1ToFloat(fmt::floatToE2M1(0.75f)), 1.0f);
    EXPECT_EQ(fmt::e2m1ToFloat(fmt::floatToE2M1(1.25f)), 1.0f);
    EXPECT_EQ(fmt::e2m1ToFloat(fmt::floatToE2M1(1.75f)), 2.0f);
    EXPECT_EQ(fmt::e2m1ToFloat(fmt::floatToE2M1(2.5f)), 2.0f);
    EXPECT_EQ(fmt::e2m1ToFloat(fmt::floatToE2M1(3.5f)), 4.0f);
    EXPECT_EQ(fmt::e2m1ToFloat(fmt::floatToE2M1(5.0f)), 4.0f);
    EXPECT_EQ(fmt::e2m1ToFloat(fmt::floatToE2M1(-2.5f)), -2.0f);
    // Just off the midpoints they go to the nearer value.
    EXPECT_EQ(fmt::e2m1ToFloat(fmt::floatToE2M1(0.2501f)), 0.5f);
    EXPECT_EQ(fmt::e2m1ToFloat(fmt::floatToE2M1(5.01f)), 6.0f);
    EXPECT_EQ(fmt::e2m1ToFloat(fmt::floatToE2M1(4.99f)), 4.0f);
    // Saturation, and zero is always +0.
    EXPECT_EQ(fmt::e2m1ToFloat(fmt::floatToE2M1(100.0f)), 6.0f);
    EXPECT_EQ(fmt::e2m1ToFloat(fmt::floatToE2M1(-100.0f)), -6.0f);
    EXPECT_EQ(fmt::floatToE2M1(-0.1f), 0u);
}

TEST(E4M3, EveryFiniteCodeRoundTrips) {
    for (unsigned code = 0; code < 256; ++code) {
        if ((code & 0x7Fu) == 0x7Fu) continue;  // NaN encodings
        const float value = fmt::e4m3ToFloat(static_cast<std::uint8_t>(code));
        ASSERT_TRUE(std::isfinite(value)) << code;
        const std::uint8_t back = fmt::floatToE4M3(value);
        if (value == 0.0f) EXPECT_EQ(back & 0x7Fu, 0u);
        else EXPECT_EQ(back, code) << "value " << value;
    }
    EXPECT_EQ(fmt::e4m3ToFloat(0x7E), 448.0f);
    EXPECT_EQ(fmt::e4m3ToFloat(0x01), 0.001953125f);  // smallest subnormal, 2^-9
    EXPECT_TRUE(std::isnan(fmt::e4m3ToFloat(0x7F)));
}

TEST(E4M3, RoundsToNearestEvenAndSaturates) {
    // Between 1.0 (0x38) and 1.125 (0x39): the midpoint goes to the even mantissa (1.0).
    EXPECT_EQ(fmt::e4m3ToFloat(fmt::floatToE4M3(1.0625f)), 1.0f);
    EXPECT_EQ(fmt::e4m3ToFloat(fmt::floatToE4M3(1.1875f)), 1.25f);  // 1.125/1.25 midpoint -> 1.25 (even)
    EXPECT_EQ(fmt::e4m3ToFloat(fmt::floatToE4M3(1000.0f)), 448.0f);
    EXPECT_EQ(fmt::e4m3ToFloat(fmt::floatToE4M3(-1000.0f)), -448.0f);
    // Subnormal midpoint 0.5 × 2^-9 goes to 0 (even), 1.5 × 2^-9 to 2 × 2^-9.
    EXPECT_EQ(fmt::e4m3ToFloat(fmt::floatToE4M3(0.5f * 0.001953125f)), 0.0f);
    EXPECT_EQ(fmt::e4m3ToFloat(fmt::floatToE4M3(1.5f * 0.001953125f)), 2.0f * 0.001953125f);
    // The largest subnormal rounds up into the smallest normal, 2^-6.
    EXPECT_EQ(fmt::e4m3ToFloat(fmt::floatToE4M3(7.6f * 0.001953125f)), 0.015625f);
}

TEST(Bf16, RoundsToNearestEven) {
    EXPECT_EQ(fmt::roundToBf16(1.0f), 1.0f);
    EXPECT_EQ(fmt::roundToBf16(std::sqrt(1536.0f)), 39.25f);  // GEMMA4.md §2.1: E2B's embed scale
    EXPECT_EQ(fmt::roundToBf16(std::sqrt(2560.0f)), 50.5f);
    EXPECT_EQ(fmt::roundToBf16(std::sqrt(5376.0f)), 73.5f);
    // 1 + 2^-8 is exactly between 1 and 1 + 2^-7: ties to even -> 1.
    EXPECT_EQ(fmt::roundToBf16(1.0f + 1.0f / 256.0f), 1.0f);
    EXPECT_EQ(fmt::roundToBf16(1.0f + 3.0f / 256.0f), 1.0f + 4.0f / 256.0f);
    EXPECT_TRUE(std::isnan(fmt::roundToBf16(std::numeric_limits<float>::quiet_NaN())));
}

TEST(Fp4Quantizer, AllZeroGroupGivesZeroScaleAndZeros) {
    const std::vector<float> row(128, 0.0f);
    std::vector<std::uint8_t> codes(64, 0xFF);
    std::uint16_t scale = 0xFFFF;
    ASSERT_TRUE(gemma::quantizeFp4Row(row, ScaleRule::AbsMax, codes.data(), &scale).isOk());
    EXPECT_EQ(scale, 0);
    for (auto c : codes) EXPECT_EQ(c, 0);
    for (float v : dequantizeFp4(row)) EXPECT_EQ(v, 0.0f);
}

TEST(Fp4Quantizer, SingleOutlierIsExactAndSmallValuesFlushToZero) {
    std::vector<float> row(128, 1e-3f);
    row[37] = -12.0f;  // absmax 12 -> scale 2: the outlier lands exactly on -6
    const auto out = dequantizeFp4(row);
    EXPECT_EQ(out[37], -12.0f);
    for (std::size_t i = 0; i < row.size(); ++i) {
        if (i != 37) EXPECT_EQ(out[i], 0.0f) << i;
    }
}

TEST(Fp4Quantizer, TinyAndHugeScalesStayFinite) {
    for (float magnitude : {1e-30f, 1e-38f, 1e30f, 3e38f}) {
        std::vector<float> row(256);
        std::mt19937 rng(7);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (auto& v : row) v = u(rng) * magnitude;
        const auto out = dequantizeFp4(row);
        float absMax = 0.0f;
        for (float v : row) absMax = std::max(absMax, std::fabs(v));
        for (std::size_t i = 0; i < row.size(); ++i) {
            ASSERT_TRUE(std::isfinite(out[i])) << magnitude;
            // Half the largest E2M1 step (1.0 between 4 and 6, in units of scale = absmax/6),
            // plus the bf16 rounding of the scale and the fp32 subnormal floor.
            EXPECT_LE(std::fabs(out[i] - row[i]), absMax / 6.0f * 1.0f * 1.01f + 1e-44f) << magnitude;
        }
    }
}

TEST(Fp4Quantizer, RejectsNaNAndInfinity) {
    std::vector<float> row(128, 0.5f);
    std::vector<std::uint8_t> codes(64);
    std::uint16_t scale;
    row[5] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_EQ(gemma::quantizeFp4Row(row, ScaleRule::AbsMax, codes.data(), &scale).code(), gemma::ErrorCode::InvalidFile);
    row[5] = std::numeric_limits<float>::infinity();
    EXPECT_EQ(gemma::quantizeFp4Row(row, ScaleRule::AbsMax, codes.data(), &scale).code(), gemma::ErrorCode::InvalidFile);
    std::vector<std::uint8_t> fp8(128);
    float rowScale;
    EXPECT_FALSE(gemma::quantizeFp8Row(row, fp8.data(), &rowScale).isOk());
}

TEST(Fp4Quantizer, ErrorWithinTheFormatsBound) {
    // Every weight lies within half a quantization step of its group's grid, where a step is at
    // most 2 × scale (between 4 and 6); with scale = bf16(absmax/6), |error| <= scale × (1 + 2^-8).
    std::mt19937 rng(1234);
    std::normal_distribution<float> normal(0.0f, 0.05f);
    std::vector<float> row(1000);  // 7 full groups and a partial one of 104
    for (auto& v : row) v = normal(rng);
    const auto out = dequantizeFp4(row);
    for (std::size_t g = 0; g * 128 < row.size(); ++g) {
        float absMax = 0.0f;
        const std::size_t end = std::min(row.size(), (g + 1) * 128);
        for (std::size_t i = g * 128; i < end; ++i) absMax = std::max(absMax, std::fabs(row[i]));
        const float scale = fmt::roundToBf16(absMax / 6.0f);
        for (std::size_t i = g * 128; i < end; ++i) {
            const float error = std::fabs(out[i] - row[i]);
            // Below 2·scale the step is 0.5·scale (bound 0.25·scale), above it at most 2·scale.
            const float bound = std::fabs(row[i]) < 2.0f * scale ? 0.25f * scale * 1.01f : scale * 1.01f;
            EXPECT_LE(error, bound) << "weight " << i;
        }
    }
}

TEST(Fp4Quantizer, MinimumErrorRuleNeverWorseThanAbsMax) {
    std::mt19937 rng(99);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    double absMaxError = 0.0, searchError = 0.0;
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<float> row(128);
        for (auto& v : row) v = normal(rng);
        const auto a = dequantizeFp4(row, ScaleRule::AbsMax);
        const auto b = dequantizeFp4(row, ScaleRule::MinimumError);
        double ea = 0.0, eb = 0.0;
        for (std::size_t i = 0; i < row.size(); ++i) {
            ea += (a[i] - row[i]) * (a[i] - row[i]);
            eb += (b[i] - row[i]) * (b[i] - row[i]);
        }
        EXPECT_LE(eb, ea + 1e-12);
        absMaxError += ea;
        searchError += eb;
    }
    // On Gaussian weights the search must find a real improvement, not just tie.
    EXPECT_LT(searchError, 0.97 * absMaxError);
}

TEST(Fp8Quantizer, RowScaleAndRelativeErrorBound) {
    std::mt19937 rng(5);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> row(3000);
    for (auto& v : row) v = normal(rng);
    std::vector<std::uint8_t> codes(row.size());
    float scale = 0.0f;
    ASSERT_TRUE(gemma::quantizeFp8Row(row, codes.data(), &scale).isOk());
    float absMax = 0.0f;
    for (float v : row) absMax = std::max(absMax, std::fabs(v));
    EXPECT_EQ(scale, absMax / 448.0f);
    std::vector<float> out(row.size());
    gemma::reference::dequantizeFp8Row(codes.data(), scale, static_cast<std::int64_t>(row.size()), out.data());
    for (std::size_t i = 0; i < row.size(); ++i) {
        // 3 mantissa bits: relative error <= 2^-4 for normals; subnormals have absolute step 2^-9·scale.
        EXPECT_LE(std::fabs(out[i] - row[i]), std::max(std::fabs(row[i]) / 16.0f, 0.5f * 0.001953125f * scale) * 1.001f);
    }
}

TEST(Fp16, DecodesNormalsSubnormalsAndSpecials) {
    EXPECT_EQ(fmt::fp16ToFloat(0x3C00), 1.0f);
    EXPECT_EQ(fmt::fp16ToFloat(0xC000), -2.0f);
    EXPECT_EQ(fmt::fp16ToFloat(0x7BFF), 65504.0f);            // largest normal
    EXPECT_EQ(fmt::fp16ToFloat(0x0400), 6.103515625e-05f);    // smallest normal, 2^-14
    EXPECT_EQ(fmt::fp16ToFloat(0x0001), 5.9604644775390625e-08f);  // smallest subnormal, 2^-24
    EXPECT_EQ(fmt::fp16ToFloat(0x3555), 0.333251953125f);
    EXPECT_TRUE(std::isinf(fmt::fp16ToFloat(0x7C00)));
    EXPECT_TRUE(std::isnan(fmt::fp16ToFloat(0x7E00)));
    EXPECT_TRUE(std::signbit(fmt::fp16ToFloat(0x8000)));
}

// floatToFp16 (the GPU prefill's FP16 operands): every FP16 value round-trips, and the rounding of
// fp32 values is nearest-even with subnormals and overflow to inf, checked at the boundaries.
TEST(Fp16, EncodesWithRoundToNearestEven) {
    for (unsigned h = 0; h < 0x10000u; ++h) {
        const float v = fmt::fp16ToFloat(static_cast<std::uint16_t>(h));
        if (std::isnan(v)) {
            EXPECT_TRUE(std::isnan(fmt::fp16ToFloat(fmt::floatToFp16(v))));
            continue;
        }
        ASSERT_EQ(fmt::floatToFp16(v), h) << "fp16 0x" << std::hex << h;
    }
    EXPECT_EQ(fmt::floatToFp16(1.0f + 0x1p-11f), 0x3C00);         // tie: to even (down)
    EXPECT_EQ(fmt::floatToFp16(1.0f + 3 * 0x1p-11f), 0x3C02);     // tie: to even (up)
    EXPECT_EQ(fmt::floatToFp16(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01);  // past the tie
    EXPECT_EQ(fmt::floatToFp16(65519.0f), 0x7BFF);                // below the overflow tie
    EXPECT_EQ(fmt::floatToFp16(65520.0f), 0x7C00);                // the tie rounds to inf
    EXPECT_EQ(fmt::floatToFp16(-1e30f), 0xFC00);
    EXPECT_EQ(fmt::floatToFp16(0x1p-25f), 0x0000);                // tie between 0 and 2^-24: even
    EXPECT_EQ(fmt::floatToFp16(0x1.8p-25f), 0x0001);
    EXPECT_EQ(fmt::floatToFp16(3 * 0x1p-25f), 0x0002);            // tie 1.5 units: to even
    EXPECT_EQ(fmt::floatToFp16(0x1.ffcp-15f), 0x0400);            // rounds up into the normals
    EXPECT_EQ(fmt::floatToFp16(-0.0f), 0x8000);
    EXPECT_EQ(fmt::floatToFp16(1e-30f), 0x0000);
}

// The prefill's FP16 weight multiplier puts 6·max|scale| in [2^14, 2^15), so every E2M1 × scale
// product of that weight (down to 2^-28 of the largest) is an exact normal FP16 number.
TEST(Fp16, WeightMultiplierKeepsProductsExact) {
    // Up to the largest finite bf16 (3.39e38): 6·max overflows a float past 5.7e37.
    for (float maxScale : {1e-4f, 3.7e-3f, 0.02f, 1.0f, 250.0f, 1e38f, fmt::bf16ToFloat(0x7F7Fu)}) {
        const float m = fmt::fp16WeightMultiplier(maxScale);
        int exponent = 0;
        EXPECT_EQ(std::frexp(m, &exponent), 0.5f) << "a power of two";
        const float largest = 6.0f * (maxScale * m);
        EXPECT_GE(largest, 16384.0f);
        EXPECT_LT(largest, 32768.0f);
        const float scale = fmt::roundToBf16(maxScale * 0.37f);
        for (unsigned code = 0; code < 16; ++code) {
            const float product = fmt::e2m1ToFloat(code) * (scale * m);  // the kernels' order
            EXPECT_EQ(fmt::fp16ToFloat(fmt::floatToFp16(product)), product) << maxScale << " code " << code;
        }
    }
    EXPECT_EQ(fmt::fp16WeightMultiplier(0.0f), 1.0f);
    EXPECT_EQ(fmt::fp16WeightMultiplier(std::numeric_limits<float>::infinity()), 1.0f);
}
