// Typed views of a package's tensors, bound and checked against the config once at load.
// Views point into the memory-mapped package; the Package must outlive them.
#pragma once

#include <cstdint>
#include <vector>

#include "Package.h"
#include "gemma/Config.h"
#include "gemma/Status.h"

namespace gemma {

// A linear weight W[out][in] in f32 or FP4-E2M1 g128.
struct LinearWeight {
    TensorFormat format = TensorFormat::F32;
    std::int64_t out = 0, in = 0;
    const float* f32 = nullptr;
    const std::uint8_t* codes = nullptr;
    const std::uint16_t* scales = nullptr;
    std::int64_t bytes = 0;  // bytes streamed per use (data + scales)
};

// A gathered table E[rows][cols] in f32 or FP8-E4M3 row-scaled; the tied lm_head reads it too.
struct EmbeddingTable {
    TensorFormat format = TensorFormat::F32;
    std::int64_t rows = 0, cols = 0;
    const float* f32 = nullptr;
    const std::uint8_t* codes = nullptr;
    const float* rowScales = nullptr;
    std::int64_t bytes = 0;
};

struct LayerWeights {
    const float* inputNorm = nullptr;
    const float* postAttentionNorm = nullptr;
    const float* preFeedforwardNorm = nullptr;
    const float* postFeedforwardNorm = nullptr;
    const float* qNorm = nullptr;
    const float* kNorm = nullptr;  // null on KV-shared layers
    LinearWeight q, k, v, o;       // k and v empty on shared layers; v empty without v_proj
    LinearWeight gate, up, down;
    LinearWeight perLayerGate, perLayerProjection;  // PLE only
    const float* postPerLayerNorm = nullptr;        // PLE only
    float layerScalar = 1.0f;
};

struct ModelWeights {
    EmbeddingTable embedding;
    EmbeddingTable perLayerEmbedding;          // PLE only
    LinearWeight perLayerModelProjection;      // PLE only
    const float* perLayerProjectionNorm = nullptr;
    const float* finalNorm = nullptr;
    std::vector<LayerWeights> layers;
    std::int64_t decoderBytesPerToken = 0;     // what one decode step streams (PERF.md floor)

    // Binds every tensor the config implies; names the first missing, misshapen or non-finite one.
    static Expected<ModelWeights> bind(const Package& package);
};

}  // namespace gemma
