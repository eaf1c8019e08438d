// writeRandomPackage (Quantize.h): benchmark packages of any preset geometry, no checkpoint needed.
#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "ModelTensors.h"
#include "Package.h"
#include "gemma/Config.h"
#include "gemma/Quantize.h"
#include "kernels/WeightFormats.h"

namespace gemma {
namespace {

// splitmix64: a fast, seedable stream; each tensor gets its own seed so threads can fill slices.
std::uint64_t mix(std::uint64_t& state) {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void fillRandomBytes(std::vector<std::uint8_t>& bytes, std::uint64_t seed) {
    const unsigned threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
    const std::size_t words = bytes.size() / 8;
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
            std::uint64_t state = seed * 1000003u + t;
            for (std::size_t w = words * t / threads; w < words * (t + 1) / threads; ++w) {
                const std::uint64_t value = mix(state);
                std::memcpy(bytes.data() + w * 8, &value, 8);
            }
        });
    }
    for (auto& thread : pool) thread.join();
    std::uint64_t state = seed;
    for (std::size_t i = words * 8; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(mix(state));
}

}  // namespace

Expected<QuantizeReport> writeRandomPackage(const ModelConfig& config, const std::filesystem::path& outputFile, std::uint64_t seed,
                                            const ProgressCallback& progress) {
    auto writer = PackageWriter::create(outputFile);
    if (!writer) return writer.status();
    const auto specs = expectedTensors(config);
    std::uint64_t tensorSeed = seed;
    for (std::size_t index = 0; index < specs.size(); ++index) {
        const auto& spec = specs[index];
        if (progress && !progress(static_cast<double>(index) / static_cast<double>(specs.size()), "generating " + spec.name)) {
            return Status{ErrorCode::Cancelled, "cancelled"};
        }
        ++tensorSeed;
        if (spec.role == TensorRole::Norm || spec.role == TensorRole::Scalar) {
            const std::vector<float> ones(static_cast<std::size_t>(spec.shape[0]), 1.0f);
            GEMMA_RETURN_IF_ERROR(writer->addTensor(spec.name, TensorFormat::F32, spec.shape, ones.data(), ones.size() * 4, nullptr, 0));
            continue;
        }
        std::uint64_t dataBytes = 0, scaleBytes = 0;
        const TensorFormat format = spec.role == TensorRole::Linear ? TensorFormat::Fp4G128 : TensorFormat::Fp8RowScaled;
        expectedTensorBytes(format, spec.shape, dataBytes, scaleBytes);
        std::vector<std::uint8_t> data(dataBytes);
        fillRandomBytes(data, tensorSeed);
        std::vector<std::uint8_t> scales(scaleBytes);
        if (format == TensorFormat::Fp4G128) {
            // Weights of magnitude ~1/sqrt(in): scale = bf16(1 / (6·sqrt(in))), all groups alike.
            const std::uint16_t scale = formats::floatToBf16(1.0f / (6.0f * std::sqrt(static_cast<float>(spec.shape[1]))));
            for (std::size_t i = 0; i + 1 < scales.size(); i += 2) std::memcpy(&scales[i], &scale, 2);
        } else {
            for (auto& code : data) {
                if ((code & 0x7Fu) == 0x7Fu) code = static_cast<std::uint8_t>(code & 0xFEu);  // no NaN codes
            }
            const float rowScale = 1.0f / 448.0f;
            for (std::size_t i = 0; i + 3 < scales.size(); i += 4) std::memcpy(&scales[i], &rowScale, 4);
        }
        GEMMA_RETURN_IF_ERROR(writer->addTensor(spec.name, format, spec.shape, data.data(), dataBytes, scales.data(), scaleBytes));
    }
    PackageMetadata metadata;
    metadata.name = "random";
    metadata.embedScale = formats::roundToBf16(static_cast<float>(std::sqrt(static_cast<double>(config.hiddenSize))));
    metadata.perLayerEmbedScale =
        config.hasPerLayerInputs() ? formats::roundToBf16(static_cast<float>(std::sqrt(static_cast<double>(config.hiddenSizePerLayerInput)))) : 1.0f;
    metadata.linearFormat = "fp4-e2m1-g128";
    metadata.embeddingFormat = "fp8-e4m3-row";
    metadata.scaleRule = "random";
    metadata.sourceDType = "random";
    GEMMA_RETURN_IF_ERROR(writer->finish(config, metadata));
    QuantizeReport report;
    report.tensors = static_cast<std::int64_t>(specs.size());
    report.outputBytes = static_cast<std::int64_t>(writer->bytesWritten());
    return report;
}

}  // namespace gemma
