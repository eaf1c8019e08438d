// The tensors a Gemma 4 text model has, derived from its config (GEMMA4.md §4): one list that
// the quantizer writes from and the loader binds to, so the two cannot disagree.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gemma/Config.h"

namespace gemma {

enum class TensorRole {
    Linear,     // decoder linear: FP4 in a quantized package
    Embedding,  // gathered table (embed_tokens, PLE table): FP8 row-scaled in a quantized package
    Norm,       // RMSNorm weight: always f32
    Scalar,     // layer_scalar: always f32
};

struct TensorSpec {
    std::string name;  // canonical name, e.g. "layers.3.self_attn.q_proj.weight"
    TensorRole role;
    std::vector<std::int64_t> shape;
};

std::vector<TensorSpec> expectedTensors(const ModelConfig& config);

std::string layerTensorName(int layer, const char* suffix);

}  // namespace gemma
