// gemma-quantize's engine half: HF folder → package (docs/PACKAGE_FORMAT.md).
#include <cmath>
#include <functional>
#include <mutex>
#include <fstream>
#include <sstream>
#include <vector>

#include "ModelTensors.h"
#include "Package.h"
#include "WeightQuantization.h"
#include "SafeTensors.h"
#include "ThreadPool.h"
#include "gemma/Quantize.h"
#include "kernels/WeightFormats.h"

namespace gemma {
namespace {

Expected<std::string> readWholeFile(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return Status{ErrorCode::Io, "cannot read '" + path.string() + "'"};
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

std::string shapeText(const std::vector<std::int64_t>& shape) {
    std::string text = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
    return text + "]";
}

// √n as transformers computes the embedding scale: in fp32, then rounded to the weight dtype.
float embeddingScale(int n, SourceDType dtype) {
    const auto scale = static_cast<float>(std::sqrt(static_cast<double>(n)));
    return dtype == SourceDType::BF16 ? formats::roundToBf16(scale) : scale;
}

Status checkFinite(const std::vector<float>& values, const std::string& name) {
    for (std::size_t i = 0; i < values.size(); ++i) {
        if (!std::isfinite(values[i])) {
            return {ErrorCode::InvalidFile, "tensor '" + name + "' has a non-finite value (" +
                                                std::string(std::isnan(values[i]) ? "NaN" : "Inf") + ") at element " + std::to_string(i)};
        }
    }
    return Status::ok();
}

// Runs quantizeRow(r, values of row r) for every row over the pool. Each row is converted to fp32
// on its own, so no tensor is ever held in fp32 whole; rows write disjoint outputs, so the result is
// byte-identical whatever the thread count. On failure the lowest failing row's error is returned.
Status forEachRow(ThreadPool& pool, const SourceTensor& source, std::int64_t rows, std::int64_t cols,
                  const std::function<Status(std::int64_t, std::span<const float>)>& quantizeRow) {
    std::mutex mutex;
    std::int64_t failedRow = rows;
    Status failure;
    pool.parallelFor(rows, [&](std::int64_t begin, std::int64_t end) {
        std::vector<float> values(static_cast<std::size_t>(cols));
        for (std::int64_t r = begin; r < end; ++r) {
            Status status = Checkpoint::toFloat32(source, r * cols, values);
            if (status) status = quantizeRow(r, values);
            if (!status) {
                std::lock_guard lock(mutex);
                if (r < failedRow) {
                    failedRow = r;
                    failure = status;
                }
                return;
            }
        }
    });
    return failure;
}

Status writeTensor(PackageWriter& writer, ThreadPool& pool, const TensorSpec& spec, const SourceTensor& source,
                   const QuantizeOptions& options) {
    const bool matrix = spec.shape.size() == 2;
    const bool quantize = !options.unquantized && matrix &&
                          (spec.role == TensorRole::Linear || spec.role == TensorRole::Embedding);
    if (!quantize) {
        std::vector<float> values(static_cast<std::size_t>(source.elements()));
        GEMMA_RETURN_IF_ERROR(Checkpoint::toFloat32(source, values));
        GEMMA_RETURN_IF_ERROR(checkFinite(values, spec.name));
        return writer.addTensor(spec.name, TensorFormat::F32, spec.shape, values.data(), values.size() * 4, nullptr, 0);
    }
    const std::int64_t rows = spec.shape[0], cols = spec.shape[1];
    const auto where = [&](std::int64_t r) { return "tensor '" + spec.name + "' row " + std::to_string(r); };
    if (spec.role == TensorRole::Linear) {
        const std::int64_t rowBytes = formats::fp4RowBytes(cols), groups = formats::fp4GroupsPerRow(cols);
        std::vector<std::uint8_t> codes(static_cast<std::size_t>(rows * rowBytes));
        std::vector<std::uint16_t> scales(static_cast<std::size_t>(rows * groups));
        GEMMA_RETURN_IF_ERROR(forEachRow(pool, source, rows, cols, [&](std::int64_t r, std::span<const float> row) {
            return quantizeFp4Row(row, options.scaleRule, codes.data() + r * rowBytes, scales.data() + r * groups).withContext(where(r));
        }));
        return writer.addTensor(spec.name, TensorFormat::Fp4G128, spec.shape, codes.data(), codes.size(), scales.data(),
                                scales.size() * 2);
    }
    std::vector<std::uint8_t> codes(static_cast<std::size_t>(rows * cols));
    std::vector<float> scales(static_cast<std::size_t>(rows));
    GEMMA_RETURN_IF_ERROR(forEachRow(pool, source, rows, cols, [&](std::int64_t r, std::span<const float> row) {
        return quantizeFp8Row(row, codes.data() + r * cols, &scales[static_cast<std::size_t>(r)]).withContext(where(r));
    }));
    return writer.addTensor(spec.name, TensorFormat::Fp8RowScaled, spec.shape, codes.data(), codes.size(), scales.data(),
                            scales.size() * 4);
}

}  // namespace

const char* scaleRuleName(ScaleRule rule) { return rule == ScaleRule::AbsMax ? "absmax" : "minimum-error"; }

Expected<QuantizeReport> quantizeCheckpoint(const std::filesystem::path& inputDir, const std::filesystem::path& outputFile,
                                            const QuantizeOptions& options, const ProgressCallback& progress) {
    auto configText = readWholeFile(inputDir / "config.json");
    if (!configText) return Status{ErrorCode::Io, "'" + inputDir.string() + "' has no readable config.json"};
    auto config = ModelConfig::fromJson(*configText);
    if (!config) return config.status().withContext("config.json");
    if (!config->tieWordEmbeddings) return Status{ErrorCode::Unsupported, "untied lm_head weights are not supported (every Gemma 4 release ties them)"};
    auto tokenizer = readWholeFile(inputDir / "tokenizer.model");
    if (!tokenizer || tokenizer->empty()) return Status{ErrorCode::Io, "'" + inputDir.string() + "' has no readable tokenizer.model"};
    auto checkpoint = Checkpoint::open(inputDir);
    if (!checkpoint) return checkpoint.status();

    const auto specs = expectedTensors(*config);
    std::uint64_t totalBytes = 0;
    for (const auto& spec : specs) {
        const SourceTensor* source = checkpoint->find(spec.name);
        if (!source) return Status{ErrorCode::InvalidFile, "the checkpoint is missing tensor '" + spec.name + "'"};
        auto shape = source->shape;
        // layer_scalar is a [1] buffer; accept a 0-d scalar too.
        if (spec.role == TensorRole::Scalar && shape.empty()) shape = {1};
        if (shape != spec.shape) {
            return Status{ErrorCode::InvalidFile, "tensor '" + spec.name + "' has shape " + shapeText(source->shape) +
                                                      " but config.json implies " + shapeText(spec.shape)};
        }
        totalBytes += source->bytes;
    }

    auto writer = PackageWriter::create(outputFile);
    if (!writer) return writer.status();
    GEMMA_RETURN_IF_ERROR(writer->addTokenizer(*tokenizer));
    ThreadPool pool;
    std::uint64_t doneBytes = 0;
    for (const auto& spec : specs) {
        const SourceTensor& source = *checkpoint->find(spec.name);
        if (progress && !progress(static_cast<double>(doneBytes) / static_cast<double>(std::max<std::uint64_t>(totalBytes, 1)),
                                  "quantizing " + spec.name)) {
            return Status{ErrorCode::Cancelled, "conversion cancelled"};
        }
        GEMMA_RETURN_IF_ERROR(writeTensor(*writer, pool, spec, source, options));
        doneBytes += source.bytes;
    }

    PackageMetadata metadata;
    metadata.name = std::filesystem::absolute(inputDir).lexically_normal().filename().string();
    if (metadata.name.empty()) metadata.name = std::filesystem::absolute(inputDir).lexically_normal().parent_path().filename().string();
    const SourceTensor& embedding = *checkpoint->find("embed_tokens.weight");
    metadata.sourceDType = sourceDTypeName(embedding.dtype);
    metadata.embedScale = embeddingScale(config->hiddenSize, embedding.dtype);
    metadata.perLayerEmbedScale = config->hasPerLayerInputs() ? embeddingScale(config->hiddenSizePerLayerInput, embedding.dtype) : 1.0f;
    metadata.linearFormat = options.unquantized ? "f32" : "fp4-e2m1-g128";
    metadata.embeddingFormat = options.unquantized ? "f32" : "fp8-e4m3-row";
    metadata.scaleRule = options.unquantized ? "" : scaleRuleName(options.scaleRule);
    // Current Gemma 4 templates end the generation prompt with an empty thought channel when
    // thinking is off; follow the checkpoint's own template when it ships one.
    metadata.emptyThoughtChannel = true;
    if (auto chatTemplate = readWholeFile(inputDir / "chat_template.jinja")) {
        metadata.emptyThoughtChannel = chatTemplate->find("<|channel>thought") != std::string::npos;
    }
    GEMMA_RETURN_IF_ERROR(writer->finish(*config, metadata));
    if (progress) progress(1.0, "done");
    QuantizeReport report;
    report.tensors = static_cast<std::int64_t>(specs.size());
    report.outputBytes = static_cast<std::int64_t>(writer->bytesWritten());
    return report;
}

}  // namespace gemma
