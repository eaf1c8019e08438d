#include "WeightQuantization.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/WeightFormats.h"

namespace gemma {
namespace fmt = gemma::formats;

namespace {

Status checkFinite(std::span<const float> row) {
    for (std::size_t i = 0; i < row.size(); ++i) {
        if (!std::isfinite(row[i])) {
            return {ErrorCode::InvalidFile, "weight " + std::to_string(i) + " of a row is " +
                                                (std::isnan(row[i]) ? std::string("NaN") : std::string("infinite"))};
        }
    }
    return Status::ok();
}

std::uint8_t encode(float value, float scale) {
    if (scale == 0.0f) return 0;
    return static_cast<std::uint8_t>(fmt::floatToE2M1(value / scale));
}

}  // namespace

double fp4GroupSquaredError(std::span<const float> group, float scale) {
    double error = 0.0;
    for (float w : group) {
        const float decoded = scale == 0.0f ? 0.0f : fmt::e2m1ToFloat(encode(w, scale)) * scale;
        const double d = static_cast<double>(w) - decoded;
        error += d * d;
    }
    return error;
}

Status quantizeFp4Row(std::span<const float> row, ScaleRule rule, std::uint8_t* codes, std::uint16_t* scales) {
    GEMMA_RETURN_IF_ERROR(checkFinite(row));
    const auto in = static_cast<std::int64_t>(row.size());
    std::memset(codes, 0, static_cast<std::size_t>(fmt::fp4RowBytes(in)));
    for (std::int64_t g = 0; g < fmt::fp4GroupsPerRow(in); ++g) {
        const std::int64_t begin = g * fmt::kFp4GroupSize;
        const std::int64_t end = std::min(in, begin + fmt::kFp4GroupSize);
        const auto group = row.subspan(static_cast<std::size_t>(begin), static_cast<std::size_t>(end - begin));
        float absMax = 0.0f;
        for (float w : group) absMax = std::max(absMax, std::fabs(w));
        std::uint16_t scaleBits = fmt::floatToBf16(absMax / fmt::kE2M1Max);
        if (rule == ScaleRule::MinimumError && absMax > 0.0f) {
            double bestError = fp4GroupSquaredError(group, fmt::bf16ToFloat(scaleBits));
            for (int k = 1; k <= 12; ++k) {
                const float shrink = 1.0f - static_cast<float>(k) / 32.0f;
                const std::uint16_t candidate = fmt::floatToBf16(absMax / fmt::kE2M1Max * shrink);
                const double error = fp4GroupSquaredError(group, fmt::bf16ToFloat(candidate));
                if (error < bestError) {
                    bestError = error;
                    scaleBits = candidate;
                }
            }
        }
        scales[g] = scaleBits;
        const float scale = fmt::bf16ToFloat(scaleBits);
        for (std::int64_t i = begin; i < end; ++i) {
            const std::uint8_t nibble = encode(row[static_cast<std::size_t>(i)], scale);
            codes[i / 2] = static_cast<std::uint8_t>(codes[i / 2] | (i % 2 == 0 ? nibble : nibble << 4));
        }
    }
    return Status::ok();
}

Status quantizeFp8Row(std::span<const float> row, std::uint8_t* codes, float* scale) {
    GEMMA_RETURN_IF_ERROR(checkFinite(row));
    float absMax = 0.0f;
    for (float w : row) absMax = std::max(absMax, std::fabs(w));
    *scale = absMax / fmt::kE4M3Max;
    for (std::size_t i = 0; i < row.size(); ++i) {
        codes[i] = *scale == 0.0f ? 0 : fmt::floatToE4M3(row[i] / *scale);
    }
    return Status::ok();
}

}  // namespace gemma
