// The Gemma 4 text-decoder configuration (GEMMA4.md §1) and the per-layer geometry derived from it.
// Parsed from Hugging Face config.json (model_type "gemma4_text", or "gemma4" with a text_config;
// both the flat global_head_dim form and the per_layer_config form), or built from a named preset.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gemma/Status.h"

namespace gemma {

enum class LayerType { Sliding, Full };

// Everything one decoder layer's shapes and wiring depend on, resolved once at parse time so no
// per-architecture switch is scattered through the code.
struct LayerGeometry {
    LayerType type = LayerType::Sliding;
    int headDim = 0;
    int kvHeads = 0;
    bool hasValueProjection = true;  // false on full layers with attention_k_eq_v (V = raw K)
    bool kvShared = false;           // reads another layer's KV cache, computes only Q
    int kvSourceLayer = 0;           // the layer whose cache this layer reads (itself if not shared)
    int intermediateSize = 0;        // MLP width (doubled on shared layers with double-wide MLP)
    int ropeRotatedPairs = 0;        // pairs (j, j + headDim/2) that rotate; the rest are identity
    double ropeTheta = 10000.0;
    double ropeFactor = 1.0;         // every inverse frequency is divided by it
};

struct ModelConfig {
    int vocabSize = 262144;
    int hiddenSize = 0;
    int baseIntermediateSize = 0;  // intermediate_size (before double-wide)
    int numLayers = 0;
    int numHeads = 0;
    int numKvHeads = 0;
    int slidingHeadDim = 256;  // head_dim: sliding layers (and full ones without an override)
    int globalHeadDim = 512;
    std::optional<int> numGlobalKvHeads;
    int slidingWindow = 512;
    float rmsNormEps = 1e-6f;
    float finalLogitSoftcap = 0.0f;  // 0: none
    bool attentionKEqV = false;
    int numKvSharedLayers = 0;
    bool useDoubleWideMlp = false;
    int hiddenSizePerLayerInput = 0;  // PLE width P; 0 disables PLE
    int vocabSizePerLayerInput = 0;
    bool tieWordEmbeddings = true;
    int padTokenId = 0;
    int bosTokenId = 2;
    std::vector<int> eosTokenIds{1};
    std::vector<LayerType> layerTypes;
    std::vector<LayerGeometry> layers;  // derived; one per layer

    // Accessors named after the model's vocabulary (DESIGN.md).
    int headDim(int layer) const { return layers[layer].headDim; }
    int kvHeads(int layer) const { return layers[layer].kvHeads; }
    bool isSliding(int layer) const { return layers[layer].type == LayerType::Sliding; }
    int kvSourceLayer(int layer) const { return layers[layer].kvSourceLayer; }
    bool hasValueProjection(int layer) const { return layers[layer].hasValueProjection; }
    int intermediateSize(int layer) const { return layers[layer].intermediateSize; }
    bool hasPerLayerInputs() const { return hiddenSizePerLayerInput > 0; }
    int firstKvSharedLayer() const { return numLayers - numKvSharedLayers; }

    // Parses config.json text. Rejects impossible values by name (InvalidConfig) and models the
    // engine does not run (Unsupported: MoE, bidirectional attention).
    static Expected<ModelConfig> fromJson(std::string_view jsonText);
    // A named benchmark geometry: "12b", "e2b", "e4b", "31b" (PERF.md, GEMMA4.md §6).
    static Expected<ModelConfig> preset(std::string_view name);
    static std::vector<std::string> presetNames();

    // Re-derives `layers` from the fields above and checks every invariant. fromJson and preset
    // call it; call it again after editing fields by hand.
    Status finalize(const std::vector<std::optional<int>>& headDimOverrides = {},
                    const std::vector<std::optional<int>>& kvHeadOverrides = {});

    // The flat HF JSON this config round-trips through (stored in packages).
    std::string toJson() const;
};

}  // namespace gemma
