// Converting a Hugging Face Gemma 4 folder into a Gemma Desk package (docs/PACKAGE_FORMAT.md).
// The same code serves gemma-quantize and the desktop app's "Open model folder" action.
#pragma once

#include <cstdint>
#include <filesystem>

#include "gemma/Engine.h"
#include "gemma/Status.h"

namespace gemma {

// How the FP4 group scale is chosen (docs/QUALITY.md compares them).
enum class ScaleRule {
    AbsMax,       // scale = bf16(absmax / 6): the group's largest weight lands exactly on ±6
    MinimumError  // search scales below absmax/6 for the one with the least squared error
};
const char* scaleRuleName(ScaleRule rule);

struct QuantizeOptions {
    bool unquantized = false;  // keep every tensor in FP32 (parity work)
    // docs/QUALITY.md: on the trained demo model minimum-error gives +0.47 % perplexity against
    // +1.06 % for absmax (KL 0.0217 vs 0.0245), so it is the default.
    ScaleRule scaleRule = ScaleRule::MinimumError;
};

struct QuantizeReport {
    std::int64_t tensors = 0;
    std::int64_t outputBytes = 0;
};

// Reads `inputDir` (config.json, *.safetensors, tokenizer.model, optional chat_template.jinja)
// and writes one package file to `outputFile` atomically (a temporary file renamed at the end),
// so a failure or cancellation never leaves a half-written package behind. The same input and
// options always give a byte-identical file. Progress may return false to cancel.
Expected<QuantizeReport> quantizeCheckpoint(const std::filesystem::path& inputDir,
                                            const std::filesystem::path& outputFile,
                                            const QuantizeOptions& options,
                                            const ProgressCallback& progress = {});

class ModelConfig;

// Writes a package of the given geometry with random weights: FP4 linears with plausible group
// scales, an FP8 embedding, unit norms. For benchmarks (decode speed depends on shapes, not
// values); it has no tokenizer, so it runs raw tokens only. Deterministic for a seed.
Expected<QuantizeReport> writeRandomPackage(const ModelConfig& config, const std::filesystem::path& outputFile,
                                            std::uint64_t seed, const ProgressCallback& progress = {});

}  // namespace gemma
