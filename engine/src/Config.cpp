// Parsing and validation of the Gemma 4 text configuration (GEMMA4.md §1, §2.6, §2.8, §3, §6).
#include "gemma/Config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "JsonLimits.h"

namespace gemma {
namespace {

using Json = nlohmann::json;

Status configError(const std::string& message) { return {ErrorCode::InvalidConfig, message}; }

// Reads an optional integer field, rejecting wrong types and out-of-range values by name.
Status readInt(const Json& object, const char* key, int& out) {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return Status::ok();
    if (!it->is_number_integer()) return configError(std::string("'") + key + "' must be an integer");
    const auto value = it->get<std::int64_t>();
    if (value < 0 || value > (1LL << 30)) {
        return configError(std::string("'") + key + "' is out of range: " + std::to_string(value));
    }
    out = static_cast<int>(value);
    return Status::ok();
}

Status readDouble(const Json& object, const char* key, double& out) {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return Status::ok();
    if (!it->is_number()) return configError(std::string("'") + key + "' must be a number");
    out = it->get<double>();
    if (!std::isfinite(out)) return configError(std::string("'") + key + "' must be finite");
    return Status::ok();
}

Status readBool(const Json& object, const char* key, bool& out) {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return Status::ok();
    if (!it->is_boolean()) return configError(std::string("'") + key + "' must be true or false");
    out = it->get<bool>();
    return Status::ok();
}

struct RopeSettings {
    double slidingTheta = 10000.0;
    double fullTheta = 1000000.0;
    double fullPartialFactor = 0.25;
    double fullFactor = 1.0;
    bool fullProportional = true;
};

Status readRopeType(const Json& params, const char* layerType, bool& proportional, double& theta,
                    double& partial, double& factor) {
    if (!params.is_object()) return configError(std::string("rope_parameters.") + layerType + " must be an object");
    GEMMA_RETURN_IF_ERROR(readDouble(params, "rope_theta", theta));
    std::string type = "default";
    if (auto it = params.find("rope_type"); it != params.end() && it->is_string()) type = it->get<std::string>();
    if (type == "proportional") {
        proportional = true;
        GEMMA_RETURN_IF_ERROR(readDouble(params, "partial_rotary_factor", partial));
        GEMMA_RETURN_IF_ERROR(readDouble(params, "factor", factor));
    } else if (type == "default") {
        proportional = false;
        double p = 1.0;
        GEMMA_RETURN_IF_ERROR(readDouble(params, "partial_rotary_factor", p));
        if (p != 1.0) {
            return Status{ErrorCode::Unsupported, std::string("rope_parameters.") + layerType +
                                                ": partial rotation with rope_type 'default' is not supported"};
        }
    } else {
        return Status{ErrorCode::Unsupported, std::string("rope_parameters.") + layerType + ": rope_type '" + type +
                                            "' is not supported (expected 'default' or 'proportional')"};
    }
    if (!(theta > 0.0)) return configError(std::string("rope_parameters.") + layerType + ".rope_theta must be positive");
    if (!(partial > 0.0 && partial <= 1.0)) {
        return configError(std::string("rope_parameters.") + layerType + ".partial_rotary_factor must be in (0, 1]");
    }
    if (!(factor > 0.0)) return configError(std::string("rope_parameters.") + layerType + ".factor must be positive");
    return Status::ok();
}

Status readRope(const Json& config, RopeSettings& rope) {
    auto it = config.find("rope_parameters");
    if (it == config.end() || it->is_null()) return Status::ok();
    if (!it->is_object()) return configError("'rope_parameters' must be an object");
    if (auto sliding = it->find("sliding_attention"); sliding != it->end()) {
        bool proportional = false;
        double partial = 1.0, factor = 1.0;
        GEMMA_RETURN_IF_ERROR(readRopeType(*sliding, "sliding_attention", proportional, rope.slidingTheta, partial, factor));
        if (proportional) {
            return Status{ErrorCode::Unsupported, "rope_parameters.sliding_attention: proportional RoPE on sliding layers is not supported"};
        }
    }
    if (auto full = it->find("full_attention"); full != it->end()) {
        rope.fullPartialFactor = 1.0;
        GEMMA_RETURN_IF_ERROR(readRopeType(*full, "full_attention", rope.fullProportional, rope.fullTheta,
                                           rope.fullPartialFactor, rope.fullFactor));
    }
    return Status::ok();
}

}  // namespace

Expected<ModelConfig> ModelConfig::fromJson(std::string_view jsonText) {
    if (!jsonDepthWithin(jsonText)) return configError("config.json nests too deeply");
    Json root = Json::parse(jsonText.begin(), jsonText.end(), nullptr, /*allow_exceptions=*/false);
    if (root.is_discarded()) return configError("config.json is not valid JSON");
    if (!root.is_object()) return configError("config.json must hold a JSON object");

    const Json* text = &root;
    std::string modelType = root.value("model_type", std::string{});
    if (root.contains("text_config")) {
        if (!root["text_config"].is_object()) return configError("'text_config' must be an object");
        text = &root["text_config"];
        const std::string inner = text->value("model_type", std::string{"gemma4_text"});
        if (inner != "gemma4_text") return Status{ErrorCode::Unsupported, "text_config.model_type '" + inner + "' is not gemma4_text"};
    } else if (modelType != "gemma4_text") {
        return Status{ErrorCode::Unsupported, "model_type '" + modelType + "' is not a Gemma 4 text model (expected 'gemma4_text' or 'gemma4' with a text_config)"};
    }
    const Json& c = *text;

    ModelConfig config;
    config.vocabSize = 262144;
    config.hiddenSize = 2304;
    config.baseIntermediateSize = 9216;
    config.numLayers = 30;
    config.numHeads = 8;
    config.numKvHeads = 4;
    config.slidingWindow = 512;
    GEMMA_RETURN_IF_ERROR(readInt(c, "vocab_size", config.vocabSize));
    GEMMA_RETURN_IF_ERROR(readInt(c, "hidden_size", config.hiddenSize));
    GEMMA_RETURN_IF_ERROR(readInt(c, "intermediate_size", config.baseIntermediateSize));
    GEMMA_RETURN_IF_ERROR(readInt(c, "num_hidden_layers", config.numLayers));
    GEMMA_RETURN_IF_ERROR(readInt(c, "num_attention_heads", config.numHeads));
    GEMMA_RETURN_IF_ERROR(readInt(c, "num_key_value_heads", config.numKvHeads));
    GEMMA_RETURN_IF_ERROR(readInt(c, "head_dim", config.slidingHeadDim));
    GEMMA_RETURN_IF_ERROR(readInt(c, "global_head_dim", config.globalHeadDim));
    int globalKv = -1;
    GEMMA_RETURN_IF_ERROR(readInt(c, "num_global_key_value_heads", globalKv));
    if (globalKv >= 0) config.numGlobalKvHeads = globalKv;
    if (auto it = c.find("sliding_window"); it != c.end() && !it->is_null()) {
        if (!it->is_number_integer()) return configError("'sliding_window' must be an integer");
        const auto window = it->get<std::int64_t>();
        if (window <= 0 || window > (1LL << 30)) {
            return configError("'sliding_window' must be positive, got " + std::to_string(window));
        }
        config.slidingWindow = static_cast<int>(window);
    }
    double eps = config.rmsNormEps;
    GEMMA_RETURN_IF_ERROR(readDouble(c, "rms_norm_eps", eps));
    if (!(eps > 0.0 && eps < 1.0)) return configError("'rms_norm_eps' must be in (0, 1)");
    config.rmsNormEps = static_cast<float>(eps);
    double softcap = 0.0;
    GEMMA_RETURN_IF_ERROR(readDouble(c, "final_logit_softcapping", softcap));
    if (softcap < 0.0) return configError("'final_logit_softcapping' must not be negative");
    config.finalLogitSoftcap = static_cast<float>(softcap);
    GEMMA_RETURN_IF_ERROR(readBool(c, "attention_k_eq_v", config.attentionKEqV));
    GEMMA_RETURN_IF_ERROR(readInt(c, "num_kv_shared_layers", config.numKvSharedLayers));
    GEMMA_RETURN_IF_ERROR(readBool(c, "use_double_wide_mlp", config.useDoubleWideMlp));
    config.hiddenSizePerLayerInput = 256;
    GEMMA_RETURN_IF_ERROR(readInt(c, "hidden_size_per_layer_input", config.hiddenSizePerLayerInput));
    config.vocabSizePerLayerInput = config.vocabSize;
    GEMMA_RETURN_IF_ERROR(readInt(c, "vocab_size_per_layer_input", config.vocabSizePerLayerInput));
    GEMMA_RETURN_IF_ERROR(readBool(c, "tie_word_embeddings", config.tieWordEmbeddings));
    GEMMA_RETURN_IF_ERROR(readInt(c, "pad_token_id", config.padTokenId));
    GEMMA_RETURN_IF_ERROR(readInt(c, "bos_token_id", config.bosTokenId));
    if (auto it = c.find("eos_token_id"); it != c.end() && !it->is_null()) {
        config.eosTokenIds.clear();
        if (it->is_number_integer()) {
            config.eosTokenIds.push_back(it->get<int>());
        } else if (it->is_array()) {
            for (const auto& id : *it) {
                if (!id.is_number_integer()) return configError("'eos_token_id' entries must be integers");
                config.eosTokenIds.push_back(id.get<int>());
            }
        } else {
            return configError("'eos_token_id' must be an integer or a list of integers");
        }
    }

    bool moe = false;
    GEMMA_RETURN_IF_ERROR(readBool(c, "enable_moe_block", moe));
    if (moe) return Status{ErrorCode::Unsupported, "mixture-of-experts Gemma 4 models (enable_moe_block, e.g. 26B-A4B) are not supported yet"};
    if (auto it = c.find("use_bidirectional_attention"); it != c.end() && it->is_string() && it->get<std::string>() == "all") {
        return Status{ErrorCode::Unsupported, "use_bidirectional_attention 'all' (a non-causal model) is not supported"};
    }

    if (auto it = c.find("layer_types"); it != c.end() && !it->is_null()) {
        if (!it->is_array()) return configError("'layer_types' must be a list");
        for (std::size_t i = 0; i < it->size(); ++i) {
            const auto& entry = (*it)[i];
            const std::string name = entry.is_string() ? entry.get<std::string>() : std::string{};
            if (name == "sliding_attention") config.layerTypes.push_back(LayerType::Sliding);
            else if (name == "full_attention") config.layerTypes.push_back(LayerType::Full);
            else return configError("layer_types[" + std::to_string(i) + "] is '" + (entry.is_string() ? name : entry.dump()) +
                                    "' (expected 'sliding_attention' or 'full_attention')");
        }
    }

    RopeSettings rope;
    GEMMA_RETURN_IF_ERROR(readRope(c, rope));

    // per_layer_config: {"5": {"head_dim": 512, "num_key_value_heads": 4}, ...} (transformers ≥ 5.15).
    std::vector<std::optional<int>> headDimOverrides, kvHeadOverrides;
    if (auto it = c.find("per_layer_config"); it != c.end() && !it->is_null()) {
        if (!it->is_object()) return configError("'per_layer_config' must be an object keyed by layer index");
        if (config.numLayers <= 0 || config.numLayers > 4096) return configError("'num_hidden_layers' must be in 1..4096");
        headDimOverrides.resize(config.numLayers);
        kvHeadOverrides.resize(config.numLayers);
        for (const auto& [key, value] : it->items()) {
            int layer = -1;
            try {
                std::size_t used = 0;
                layer = std::stoi(key, &used);
                if (used != key.size()) layer = -1;
            } catch (...) {
                layer = -1;
            }
            if (layer < 0 || layer >= config.numLayers) {
                return configError("per_layer_config key '" + key + "' is not a layer index below num_hidden_layers");
            }
            if (!value.is_object()) return configError("per_layer_config['" + key + "'] must be an object");
            int headDim = -1, kvHeads = -1;
            GEMMA_RETURN_IF_ERROR(readInt(value, "head_dim", headDim).withContext("per_layer_config['" + key + "']"));
            GEMMA_RETURN_IF_ERROR(readInt(value, "num_key_value_heads", kvHeads).withContext("per_layer_config['" + key + "']"));
            if (headDim >= 0) headDimOverrides[layer] = headDim;
            if (kvHeads >= 0) kvHeadOverrides[layer] = kvHeads;
        }
    }

    config.layers.clear();
    // Stash RoPE settings in a first pass of geometry; finalize() fills the rest.
    GEMMA_RETURN_IF_ERROR(config.finalize(headDimOverrides, kvHeadOverrides));
    for (auto& layer : config.layers) {
        if (layer.type == LayerType::Sliding) {
            layer.ropeTheta = rope.slidingTheta;
            layer.ropeRotatedPairs = layer.headDim / 2;
            layer.ropeFactor = 1.0;
        } else {
            layer.ropeTheta = rope.fullTheta;
            layer.ropeFactor = rope.fullFactor;
            // transformers: rope_angles = int(partial_rotary_factor * head_dim // 2).
            layer.ropeRotatedPairs = rope.fullProportional
                                         ? static_cast<int>(std::floor(rope.fullPartialFactor * layer.headDim / 2.0))
                                         : layer.headDim / 2;
        }
    }
    return config;
}

Status ModelConfig::finalize(const std::vector<std::optional<int>>& headDimOverrides,
                             const std::vector<std::optional<int>>& kvHeadOverrides) {
    auto positive = [](int value, const char* name) -> Status {
        if (value <= 0) return configError(std::string("'") + name + "' must be positive, got " + std::to_string(value));
        return Status::ok();
    };
    GEMMA_RETURN_IF_ERROR(positive(vocabSize, "vocab_size"));
    GEMMA_RETURN_IF_ERROR(positive(hiddenSize, "hidden_size"));
    GEMMA_RETURN_IF_ERROR(positive(baseIntermediateSize, "intermediate_size"));
    GEMMA_RETURN_IF_ERROR(positive(numLayers, "num_hidden_layers"));
    GEMMA_RETURN_IF_ERROR(positive(numHeads, "num_attention_heads"));
    GEMMA_RETURN_IF_ERROR(positive(numKvHeads, "num_key_value_heads"));
    GEMMA_RETURN_IF_ERROR(positive(slidingHeadDim, "head_dim"));
    GEMMA_RETURN_IF_ERROR(positive(globalHeadDim, "global_head_dim"));
    GEMMA_RETURN_IF_ERROR(positive(slidingWindow, "sliding_window"));
    if (numLayers > 4096) return configError("'num_hidden_layers' is implausibly large");
    if (hiddenSize > (1 << 16) || baseIntermediateSize > (1 << 20) || numHeads > 1024 || slidingHeadDim > 4096 ||
        globalHeadDim > 4096 || vocabSize > (1 << 24)) {
        return configError("a dimension in config.json is implausibly large");
    }
    if (numKvSharedLayers < 0 || numKvSharedLayers >= numLayers) {
        return configError("'num_kv_shared_layers' must be below num_hidden_layers");
    }
    if (hiddenSizePerLayerInput < 0) return configError("'hidden_size_per_layer_input' must not be negative");
    if (hiddenSizePerLayerInput > 0 && vocabSizePerLayerInput <= 0) {
        return configError("'vocab_size_per_layer_input' must be positive when per-layer inputs are enabled");
    }
    for (int id : eosTokenIds) {
        if (id < 0 || id >= vocabSize) return configError("eos_token_id " + std::to_string(id) + " is outside the vocabulary");
    }
    if (bosTokenId < 0 || bosTokenId >= vocabSize) return configError("'bos_token_id' is outside the vocabulary");

    if (layerTypes.empty()) {
        // transformers' default pattern: every sixth layer is full attention.
        for (int i = 0; i < numLayers; ++i) layerTypes.push_back((i + 1) % 6 == 0 ? LayerType::Full : LayerType::Sliding);
    }
    if (static_cast<int>(layerTypes.size()) != numLayers) {
        return configError("'layer_types' has " + std::to_string(layerTypes.size()) + " entries but num_hidden_layers is " +
                           std::to_string(numLayers));
    }
    // transformers forces the last layer to full attention (with a warning); do the same.
    layerTypes.back() = LayerType::Full;

    const int firstShared = numLayers - numKvSharedLayers;
    std::vector<LayerGeometry> previous = layers;
    layers.assign(numLayers, LayerGeometry{});
    int lastSlidingSource = -1, lastFullSource = -1;
    for (int i = 0; i < firstShared; ++i) (layerTypes[i] == LayerType::Sliding ? lastSlidingSource : lastFullSource) = i;

    for (int i = 0; i < numLayers; ++i) {
        LayerGeometry& g = layers[i];
        g.type = layerTypes[i];
        const bool full = g.type == LayerType::Full;
        g.headDim = full ? globalHeadDim : slidingHeadDim;
        g.kvHeads = numKvHeads;
        if (full && attentionKEqV && numGlobalKvHeads) g.kvHeads = *numGlobalKvHeads;
        if (i < static_cast<int>(headDimOverrides.size()) && headDimOverrides[i]) g.headDim = *headDimOverrides[i];
        if (i < static_cast<int>(kvHeadOverrides.size()) && kvHeadOverrides[i]) g.kvHeads = *kvHeadOverrides[i];
        g.hasValueProjection = !(attentionKEqV && full);
        g.kvShared = i >= firstShared;
        if (g.kvShared) {
            const int source = full ? lastFullSource : lastSlidingSource;
            if (source < 0) {
                return configError("layer " + std::to_string(i) + " shares KV but no earlier non-shared layer has type " +
                                   (full ? "full_attention" : "sliding_attention"));
            }
            g.kvSourceLayer = source;
        } else {
            g.kvSourceLayer = i;
        }
        g.intermediateSize = (useDoubleWideMlp && numKvSharedLayers > 0 && g.kvShared) ? 2 * baseIntermediateSize : baseIntermediateSize;
        const std::string where = "layer " + std::to_string(i) + ": ";
        if (g.headDim <= 0 || g.headDim % 2 != 0) return configError(where + "head_dim must be positive and even, got " + std::to_string(g.headDim));
        if (g.kvHeads <= 0) return configError(where + "number of key/value heads must be positive");
        if (numHeads % g.kvHeads != 0) {
            return configError(where + std::to_string(g.kvHeads) + " key/value heads do not divide " + std::to_string(numHeads) +
                               " attention heads");
        }
        // Keep RoPE settings already resolved by fromJson()/preset() when re-finalizing.
        if (i < static_cast<int>(previous.size()) && previous[i].ropeRotatedPairs > 0 && previous[i].type == g.type &&
            previous[i].headDim == g.headDim) {
            g.ropeRotatedPairs = previous[i].ropeRotatedPairs;
            g.ropeTheta = previous[i].ropeTheta;
            g.ropeFactor = previous[i].ropeFactor;
        } else if (full) {
            g.ropeTheta = 1000000.0;
            g.ropeRotatedPairs = static_cast<int>(std::floor(0.25 * g.headDim / 2.0));
        } else {
            g.ropeTheta = 10000.0;
            g.ropeRotatedPairs = g.headDim / 2;
        }
    }
    // A shared layer reads its source's cache, so the geometries must agree.
    for (int i = firstShared; i < numLayers; ++i) {
        const auto& g = layers[i];
        const auto& s = layers[g.kvSourceLayer];
        if (g.headDim != s.headDim || g.kvHeads != s.kvHeads) {
            return configError("layer " + std::to_string(i) + " shares KV with layer " + std::to_string(g.kvSourceLayer) +
                               " but their head geometry differs");
        }
    }
    return Status::ok();
}

std::string ModelConfig::toJson() const {
    Json c;
    c["model_type"] = "gemma4_text";
    c["vocab_size"] = vocabSize;
    c["hidden_size"] = hiddenSize;
    c["intermediate_size"] = baseIntermediateSize;
    c["num_hidden_layers"] = numLayers;
    c["num_attention_heads"] = numHeads;
    c["num_key_value_heads"] = numKvHeads;
    c["head_dim"] = slidingHeadDim;
    c["global_head_dim"] = globalHeadDim;
    if (numGlobalKvHeads) c["num_global_key_value_heads"] = *numGlobalKvHeads;
    c["sliding_window"] = slidingWindow;
    c["rms_norm_eps"] = rmsNormEps;
    if (finalLogitSoftcap > 0.0f) c["final_logit_softcapping"] = finalLogitSoftcap;
    c["attention_k_eq_v"] = attentionKEqV;
    c["num_kv_shared_layers"] = numKvSharedLayers;
    c["use_double_wide_mlp"] = useDoubleWideMlp;
    c["hidden_size_per_layer_input"] = hiddenSizePerLayerInput;
    c["vocab_size_per_layer_input"] = vocabSizePerLayerInput;
    c["tie_word_embeddings"] = tieWordEmbeddings;
    c["pad_token_id"] = padTokenId;
    c["bos_token_id"] = bosTokenId;
    c["eos_token_id"] = eosTokenIds;
    Json types = Json::array();
    Json perLayer = Json::object();
    for (int i = 0; i < numLayers; ++i) {
        const auto& g = layers[i];
        types.push_back(g.type == LayerType::Full ? "full_attention" : "sliding_attention");
        // Record every layer's resolved geometry so the package never depends on defaults.
        perLayer[std::to_string(i)] = Json{{"head_dim", g.headDim}, {"num_key_value_heads", g.kvHeads}};
    }
    c["layer_types"] = types;
    c["per_layer_config"] = perLayer;
    // RoPE: one setting per layer type (they are uniform within a type).
    Json rope = Json::object();
    for (const auto& g : layers) {
        const bool full = g.type == LayerType::Full;
        const char* key = full ? "full_attention" : "sliding_attention";
        if (rope.contains(key)) continue;
        if (full) {
            rope[key] = Json{{"rope_type", "proportional"},
                             {"rope_theta", g.ropeTheta},
                             {"partial_rotary_factor", 2.0 * g.ropeRotatedPairs / g.headDim},
                             {"factor", g.ropeFactor}};
        } else {
            rope[key] = Json{{"rope_type", "default"}, {"rope_theta", g.ropeTheta}};
        }
    }
    c["rope_parameters"] = rope;
    return c.dump(2);
}

namespace {

ModelConfig makePreset(int hidden, int layers, int fullEvery, int heads, int slidingKv, int fullKv, bool kEqV,
                       int ffn, int window, int ple, int shared, bool doubleWide) {
    ModelConfig c;
    c.vocabSize = 262144;
    c.hiddenSize = hidden;
    c.numLayers = layers;
    c.numHeads = heads;
    c.numKvHeads = slidingKv;
    c.slidingHeadDim = 256;
    c.globalHeadDim = 512;
    c.attentionKEqV = kEqV;
    if (kEqV) c.numGlobalKvHeads = fullKv;
    c.baseIntermediateSize = ffn;
    c.slidingWindow = window;
    c.hiddenSizePerLayerInput = ple;
    c.vocabSizePerLayerInput = 262144;
    c.numKvSharedLayers = shared;
    c.useDoubleWideMlp = doubleWide;
    c.finalLogitSoftcap = 30.0f;
    c.eosTokenIds = {1, 106};
    for (int i = 0; i < layers; ++i) c.layerTypes.push_back((i + 1) % fullEvery == 0 ? LayerType::Full : LayerType::Sliding);
    return c;
}

}  // namespace

std::vector<std::string> ModelConfig::presetNames() { return {"12b", "e2b", "e4b", "31b"}; }

Expected<ModelConfig> ModelConfig::preset(std::string_view name) {
    ModelConfig c;
    if (name == "12b") c = makePreset(3840, 48, 6, 16, 8, 1, true, 15360, 1024, 0, 0, false);
    else if (name == "e2b") c = makePreset(1536, 35, 5, 8, 1, 1, false, 6144, 512, 256, 20, true);
    else if (name == "e4b") c = makePreset(2560, 42, 6, 8, 2, 2, false, 10240, 512, 256, 18, false);
    else if (name == "31b") c = makePreset(5376, 60, 6, 32, 16, 4, true, 21504, 1024, 0, 0, false);
    else return Status{ErrorCode::InvalidArgument, "unknown preset '" + std::string(name) + "' (known: 12b, e2b, e4b, 31b)"};
    GEMMA_RETURN_IF_ERROR(c.finalize());
    return c;
}

}  // namespace gemma
