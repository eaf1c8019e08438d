// Plain-C++ reference ops (contracts in ReferenceOps.h).
#include "ReferenceOps.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/Fp4Tiled.h"
#include "kernels/WeightFormats.h"

namespace gemma::reference {

namespace fmt = gemma::formats;

void rmsNorm(const float* x, const float* weight, float eps, std::int64_t n, float* y) {
    // Accumulate the mean of squares in double: the reference should be at least as accurate as
    // the fp32 computation it stands for, so kernels are judged against the math, not our rounding.
    double sumSquares = 0.0;
    for (std::int64_t i = 0; i < n; ++i) sumSquares += static_cast<double>(x[i]) * x[i];
    const float meanSquare = static_cast<float>(sumSquares / static_cast<double>(n));
    const float inverseRms = std::pow(meanSquare + eps, -0.5f);
    for (std::int64_t i = 0; i < n; ++i) {
        const float normed = x[i] * inverseRms;
        y[i] = weight ? normed * weight[i] : normed;
    }
}

void rmsNormRows(const float* x, const float* weight, float eps, std::int64_t rows, std::int64_t n,
                 float* y) {
    for (std::int64_t r = 0; r < rows; ++r) rmsNorm(x + r * n, weight, eps, n, y + r * n);
}

namespace {

// Dot product in fp32 with eight independent accumulators (so the compiler can vectorise without
// reassociating), summed pairwise at the end. Over the few thousand terms of a Gemma row this
// stays within ~1e-6 relative of an exact sum, far inside every tolerance built on it.
inline float dot(const float* a, const float* b, std::int64_t n) {
    float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (int l = 0; l < 8; ++l) lanes[l] += a[i + l] * b[i + l];
    }
    for (; i < n; ++i) lanes[i % 8] += a[i] * b[i];
    return ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
}

// Both E2M1 values of every code byte: low nibble first, as the format stores them.
struct Fp4ByteTable {
    float values[256][2];
    Fp4ByteTable() {
        for (unsigned byte = 0; byte < 256; ++byte) {
            values[byte][0] = fmt::e2m1ToFloat(byte & 0xFu);
            values[byte][1] = fmt::e2m1ToFloat(byte >> 4);
        }
    }
};
const Fp4ByteTable& fp4ByteTable() {
    static const Fp4ByteTable table;
    return table;
}

// Every E4M3 code's value (the CPU lm_head and embedding gathers decode through it).
struct E4M3Table {
    float values[256];
    E4M3Table() {
        for (unsigned code = 0; code < 256; ++code) values[code] = fmt::e4m3ToFloat(static_cast<std::uint8_t>(code));
    }
};
const E4M3Table& e4m3Table() {
    static const E4M3Table table;
    return table;
}

}  // namespace

void linearF32(const float* weight, std::int64_t out, std::int64_t in, const float* x,
               std::int64_t rows, float* y) {
    // Weight row outer, input vectors inner: one pass over the weights serves the whole batch.
    for (std::int64_t o = 0; o < out; ++o) {
        const float* w = weight + o * in;
        for (std::int64_t r = 0; r < rows; ++r) y[r * out + o] = dot(w, x + r * in, in);
    }
}

void dequantizeFp4Row(const std::uint8_t* codesRow, const std::uint16_t* scalesRow, std::int64_t in,
                      float* out) {
    for (std::int64_t i = 0; i < in; ++i) {
        const std::uint8_t byte = codesRow[i / 2];
        const unsigned nibble = (i % 2 == 0) ? (byte & 0xFu) : (byte >> 4);
        out[i] = fmt::e2m1ToFloat(nibble) * fmt::bf16ToFloat(scalesRow[i / fmt::kFp4GroupSize]);
    }
}

void linearFp4(const std::uint8_t* codes, const std::uint16_t* scales, std::int64_t out,
               std::int64_t in, const float* x, std::int64_t rows, float* y) {
    const std::int64_t rowBytes = fmt::fp4RowBytes(in);
    const std::int64_t groups = fmt::fp4GroupsPerRow(in);
    const auto& table = fp4ByteTable().values;
    std::vector<float> values(static_cast<std::size_t>(rowBytes * 2));
    for (std::int64_t o = 0; o < out; ++o) {
        const std::uint8_t* codesRow = codes + o * rowBytes;
        const std::uint16_t* scalesRow = scales + o * groups;
        // Unscaled E2M1 values; the scale is applied per group after the group's dot product.
        for (std::int64_t b = 0; b < rowBytes; ++b) {
            values[2 * b] = table[codesRow[b]][0];
            values[2 * b + 1] = table[codesRow[b]][1];
        }
        for (std::int64_t r = 0; r < rows; ++r) {
            const float* xr = x + r * in;
            double sum = 0.0;
            for (std::int64_t g = 0; g < groups; ++g) {
                const std::int64_t begin = g * fmt::kFp4GroupSize;
                const std::int64_t end = std::min(in, begin + fmt::kFp4GroupSize);
                sum += static_cast<double>(dot(&values[begin], xr + begin, end - begin)) * fmt::bf16ToFloat(scalesRow[g]);
            }
            y[r * out + o] = static_cast<float>(sum);
        }
    }
}

void dequantizeFp8Row(const std::uint8_t* codesRow, float rowScale, std::int64_t n, float* out) {
    const auto& table = e4m3Table().values;
    for (std::int64_t i = 0; i < n; ++i) out[i] = table[codesRow[i]] * rowScale;
}

void linearFp8Rows(const std::uint8_t* codes, const float* rowScales, std::int64_t out,
                   std::int64_t in, const float* x, std::int64_t rows, float* y) {
    std::vector<float> values(static_cast<std::size_t>(in));
    for (std::int64_t o = 0; o < out; ++o) {
        const std::uint8_t* codesRow = codes + o * in;
        const auto& table = e4m3Table().values;
        for (std::int64_t i = 0; i < in; ++i) values[i] = table[codesRow[i]];
        for (std::int64_t r = 0; r < rows; ++r) y[r * out + o] = dot(values.data(), x + r * in, in) * rowScales[o];
    }
}

float geluTanh(float x) {
    const double xd = x;
    const double inner = 0.7978845608028654 * (xd + 0.044715 * xd * xd * xd);  // sqrt(2/pi)
    return static_cast<float>(0.5 * xd * (1.0 + std::tanh(inner)));
}

void gegluRows(const float* gate, const float* up, std::int64_t n, float* out) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = geluTanh(gate[i]) * up[i];
}

void tileFp4(const std::uint8_t* codes, const std::uint16_t* scales, std::int64_t out, std::int64_t in,
             std::uint8_t* tiledCodes, std::uint32_t* tiledScales) {
    const std::int64_t rowBytes = fmt::fp4RowBytes(in);
    const std::int64_t groups = fmt::fp4GroupsPerRow(in);
    const std::int64_t tiles = (out + 15) / 16;
    for (std::int64_t t = 0; t < tiles; ++t) {
        for (std::int64_t G = 0; G < groups; ++G) {
            const std::int64_t item = t * groups + G;
            for (int lane = 0; lane < 32; ++lane) {
                const int g = lane / 4, q = lane % 4;
                for (int half = 0; half < 2; ++half) {
                    const std::int64_t row = t * 16 + g + 8 * half;
                    std::uint8_t* target = tiledCodes + item * 1024 + half * 512 + lane * 16;
                    if (row < out) std::memcpy(target, codes + row * rowBytes + G * 64 + q * 16, 16);
                    else std::memset(target, 0, 16);
                    for (int w = 0; w < 4; ++w) {  // the stored codes (Fp4Tiled.h)
                        std::uint32_t word;
                        std::memcpy(&word, target + 4 * w, 4);
                        word = fmt::fp4tiled::toStoredCodes(word);
                        std::memcpy(target + 4 * w, &word, 4);
                    }
                }
            }
            for (int g = 0; g < 8; ++g) {
                const std::int64_t rowA = t * 16 + g, rowB = rowA + 8;
                const std::uint32_t lo = rowA < out ? scales[rowA * groups + G] : 0u;
                const std::uint32_t hi = rowB < out ? scales[rowB * groups + G] : 0u;
                tiledScales[item * 8 + g] = lo | (hi << 16);
            }
        }
    }
}

void dequantizeFp4ToBf16(const std::uint8_t* codes, const std::uint16_t* scales, std::int64_t out,
                         std::int64_t in, std::uint16_t* y, std::int64_t ldOut) {
    const std::int64_t rowBytes = fmt::fp4RowBytes(in);
    const std::int64_t groups = fmt::fp4GroupsPerRow(in);
    for (std::int64_t o = 0; o < out; ++o) {
        const std::uint8_t* codesRow = codes + o * rowBytes;
        const std::uint16_t* scalesRow = scales + o * groups;
        std::uint16_t* yRow = y + o * ldOut;
        for (std::int64_t i = 0; i < in; ++i) {
            const std::uint8_t byte = codesRow[i / 2];
            const unsigned nibble = (i % 2 == 0) ? (byte & 0xFu) : (byte >> 4);
            const float product = fmt::e2m1ToFloat(nibble) * fmt::bf16ToFloat(scalesRow[i / fmt::kFp4GroupSize]);
            yRow[i] = fmt::floatToBf16(product);
        }
    }
}

void splitToBf16(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t xStride,
                 std::uint16_t* hi, std::uint16_t* lo, std::int64_t outStride) {
    for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t c = 0; c < cols; ++c) {
            const float v = x[r * xStride + c];
            const std::uint16_t h = fmt::floatToBf16(v);
            hi[r * outStride + c] = h;
            if (lo) lo[r * outStride + c] = fmt::floatToBf16(v - fmt::bf16ToFloat(h));
        }
    }
}

void dequantizeFp4ToFp16(const std::uint8_t* codes, const std::uint16_t* scales, std::int64_t out,
                         std::int64_t in, std::uint16_t* y, std::int64_t ldOut, float multiplier) {
    const std::int64_t rowBytes = fmt::fp4RowBytes(in);
    const std::int64_t groups = fmt::fp4GroupsPerRow(in);
    for (std::int64_t o = 0; o < out; ++o) {
        for (std::int64_t i = 0; i < in; ++i) {
            const std::uint8_t byte = codes[o * rowBytes + i / 2];
            const unsigned nibble = (i % 2 == 0) ? (byte & 0xFu) : (byte >> 4);
            const float scale = fmt::bf16ToFloat(scales[o * groups + i / fmt::kFp4GroupSize]) * multiplier;
            y[o * ldOut + i] = fmt::floatToFp16(fmt::e2m1ToFloat(nibble) * scale);
        }
    }
}

void splitToFp16(const float* x, std::int64_t rows, std::int64_t cols, std::int64_t xStride, std::uint16_t* hi,
                 std::uint16_t* lo, std::int64_t outStride, float multiplier) {
    for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t c = 0; c < cols; ++c) {
            const float v = x[r * xStride + c] * multiplier;
            const std::uint16_t h = fmt::floatToFp16(v);
            hi[r * outStride + c] = h;
            if (lo) lo[r * outStride + c] = fmt::floatToFp16(v - fmt::fp16ToFloat(h));
        }
    }
}

void gegluGateUpRows(const float* gateUp, std::int64_t rows, std::int64_t width, std::int64_t ldIn,
                     float* y, std::int64_t ldOut) {
    for (std::int64_t r = 0; r < rows; ++r) {
        const float* row = gateUp + r * ldIn;
        gegluRows(row, row + width, width, y + r * ldOut);
    }
}

void ropeInverseFrequencies(std::int64_t headDim, std::int64_t rotatedPairs, double theta,
                            float* inverseFrequency) {
    // transformers: inv_freq = 1 / theta^(arange(0, 2·rotatedPairs, 2) / headDim), in fp32.
    for (std::int64_t j = 0; j < headDim / 2; ++j) {
        if (j < rotatedPairs) {
            const float exponent = static_cast<float>(2 * j) / static_cast<float>(headDim);
            inverseFrequency[j] = 1.0f / std::pow(static_cast<float>(theta), exponent);
        } else {
            inverseFrequency[j] = 0.0f;
        }
    }
}

void ropeHalfSplit(float* x, std::int64_t heads, std::int64_t headDim,
                   const float* inverseFrequency, std::int64_t position) {
    const std::int64_t half = headDim / 2;
    for (std::int64_t j = 0; j < half; ++j) {
        if (inverseFrequency[j] == 0.0f) continue;  // cos 0 = 1, sin 0 = 0: identity
        const float angle = inverseFrequency[j] * static_cast<float>(position);
        const float c = std::cos(angle);
        const float s = std::sin(angle);
        for (std::int64_t h = 0; h < heads; ++h) {
            float* head = x + h * headDim;
            const float a = head[j];
            const float b = head[j + half];
            head[j] = a * c - b * s;
            head[j + half] = b * c + a * s;
        }
    }
}

void attentionDecode(const float* q, const float* keys, const float* values, std::int64_t capacity,
                     std::int64_t queryHeads, std::int64_t kvHeads, std::int64_t headDim,
                     std::int64_t firstPosition, std::int64_t lastPosition, float scale,
                     float* out) {
    const std::int64_t groupSize = queryHeads / kvHeads;
    const std::int64_t count = lastPosition - firstPosition + 1;
    std::vector<double> scores(static_cast<std::size_t>(count));
    for (std::int64_t h = 0; h < queryHeads; ++h) {
        const float* qh = q + h * headDim;
        const std::int64_t kvHead = h / groupSize;
        double maxScore = -std::numeric_limits<double>::infinity();
        for (std::int64_t p = firstPosition; p <= lastPosition; ++p) {
            const float* k = keys + ((p % capacity) * kvHeads + kvHead) * headDim;
            double dot = 0.0;
            for (std::int64_t d = 0; d < headDim; ++d) dot += static_cast<double>(qh[d]) * k[d];
            const double s = dot * scale;
            scores[p - firstPosition] = s;
            maxScore = std::max(maxScore, s);
        }
        double denominator = 0.0;
        for (auto& s : scores) {
            s = std::exp(s - maxScore);
            denominator += s;
        }
        float* oh = out + h * headDim;
        for (std::int64_t d = 0; d < headDim; ++d) {
            double acc = 0.0;
            for (std::int64_t p = firstPosition; p <= lastPosition; ++p) {
                const float* v = values + ((p % capacity) * kvHeads + kvHead) * headDim;
                acc += scores[p - firstPosition] * v[d];
            }
            oh[d] = static_cast<float>(acc / denominator);
        }
    }
}

void softcap(float* x, std::int64_t n, float cap) {
    for (std::int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void addInPlace(float* y, const float* x, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void scaleInPlace(float* x, std::int64_t n, float s) {
    for (std::int64_t i = 0; i < n; ++i) x[i] *= s;
}

void topK(const float* logits, std::int64_t n, int count, float* outLogits, std::int32_t* outIds) {
    struct Entry {
        float logit;
        std::int32_t id;
    };
    std::vector<Entry> all(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
        float v = logits[i] > -std::numeric_limits<float>::infinity() ? logits[i] : -std::numeric_limits<float>::infinity();
        if (v == 0.0f) v = 0.0f;
        all[static_cast<std::size_t>(i)] = {v, static_cast<std::int32_t>(i)};
    }
    const auto k = static_cast<std::ptrdiff_t>(std::min<std::int64_t>(count, n));
    std::partial_sort(all.begin(), all.begin() + k, all.end(),
                      [](const Entry& a, const Entry& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); });
    for (std::ptrdiff_t i = 0; i < k; ++i) {
        outLogits[i] = all[static_cast<std::size_t>(i)].logit;
        outIds[i] = all[static_cast<std::size_t>(i)].id;
    }
}

}  // namespace gemma::reference
