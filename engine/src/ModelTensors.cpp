#include "ModelTensors.h"

namespace gemma {

std::string layerTensorName(int layer, const char* suffix) {
    return "layers." + std::to_string(layer) + "." + suffix;
}

std::vector<TensorSpec> expectedTensors(const ModelConfig& c) {
    const std::int64_t H = c.hiddenSize;
    const std::int64_t P = c.hiddenSizePerLayerInput;
    const std::int64_t L = c.numLayers;
    std::vector<TensorSpec> specs;
    specs.push_back({"embed_tokens.weight", TensorRole::Embedding, {c.vocabSize, H}});
    if (c.hasPerLayerInputs()) {
        specs.push_back({"embed_tokens_per_layer.weight", TensorRole::Embedding, {c.vocabSizePerLayerInput, L * P}});
        specs.push_back({"per_layer_model_projection.weight", TensorRole::Linear, {L * P, H}});
        specs.push_back({"per_layer_projection_norm.weight", TensorRole::Norm, {P}});
    }
    for (int i = 0; i < c.numLayers; ++i) {
        const auto& g = c.layers[i];
        const std::int64_t qWidth = static_cast<std::int64_t>(c.numHeads) * g.headDim;
        const std::int64_t kvWidth = static_cast<std::int64_t>(g.kvHeads) * g.headDim;
        auto add = [&](const char* suffix, TensorRole role, std::vector<std::int64_t> shape) {
            specs.push_back({layerTensorName(i, suffix), role, std::move(shape)});
        };
        add("input_layernorm.weight", TensorRole::Norm, {H});
        add("self_attn.q_proj.weight", TensorRole::Linear, {qWidth, H});
        add("self_attn.q_norm.weight", TensorRole::Norm, {g.headDim});
        if (!g.kvShared) {
            add("self_attn.k_proj.weight", TensorRole::Linear, {kvWidth, H});
            add("self_attn.k_norm.weight", TensorRole::Norm, {g.headDim});
            if (g.hasValueProjection) add("self_attn.v_proj.weight", TensorRole::Linear, {kvWidth, H});
        }
        add("self_attn.o_proj.weight", TensorRole::Linear, {H, qWidth});
        add("post_attention_layernorm.weight", TensorRole::Norm, {H});
        add("pre_feedforward_layernorm.weight", TensorRole::Norm, {H});
        add("mlp.gate_proj.weight", TensorRole::Linear, {g.intermediateSize, H});
        add("mlp.up_proj.weight", TensorRole::Linear, {g.intermediateSize, H});
        add("mlp.down_proj.weight", TensorRole::Linear, {H, g.intermediateSize});
        add("post_feedforward_layernorm.weight", TensorRole::Norm, {H});
        if (c.hasPerLayerInputs()) {
            add("per_layer_input_gate.weight", TensorRole::Linear, {P, H});
            add("per_layer_projection.weight", TensorRole::Linear, {H, P});
            add("post_per_layer_input_norm.weight", TensorRole::Norm, {H});
        }
        add("layer_scalar", TensorRole::Scalar, {1});
    }
    specs.push_back({"norm.weight", TensorRole::Norm, {H}});
    return specs;
}

}  // namespace gemma
