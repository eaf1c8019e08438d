#include "ModelWeights.h"

#include <cmath>
#include <cstring>

#include "ModelTensors.h"
#include "kernels/WeightFormats.h"

namespace gemma {
namespace {

std::string shapeText(const std::vector<std::int64_t>& shape) {
    std::string text = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
    return text + "]";
}

class Binder {
public:
    explicit Binder(const Package& package) : package_(package) {}

    Status tensor(const TensorSpec& spec, const PackageTensor*& out) {
        out = package_.find(spec.name);
        if (!out) return {ErrorCode::InvalidFile, "package: missing tensor '" + spec.name + "'"};
        if (out->shape != spec.shape) {
            return {ErrorCode::InvalidFile, "package: tensor '" + spec.name + "' has shape " + shapeText(out->shape) +
                                                " but the config implies " + shapeText(spec.shape)};
        }
        return Status::ok();
    }

    Status vector(const TensorSpec& spec, const float*& out) {
        const PackageTensor* t = nullptr;
        GEMMA_RETURN_IF_ERROR(tensor(spec, t));
        if (t->format != TensorFormat::F32) {
            return {ErrorCode::InvalidFile, "package: tensor '" + spec.name + "' must be f32, found " + tensorFormatName(t->format)};
        }
        out = reinterpret_cast<const float*>(t->data);
        for (std::int64_t i = 0; i < t->elements(); ++i) {
            if (!std::isfinite(out[i])) {
                return {ErrorCode::InvalidFile, "package: tensor '" + spec.name + "' has a non-finite value at element " + std::to_string(i)};
            }
        }
        return Status::ok();
    }

    Status linear(const TensorSpec& spec, LinearWeight& out) {
        const PackageTensor* t = nullptr;
        GEMMA_RETURN_IF_ERROR(tensor(spec, t));
        out.format = t->format;
        out.out = t->shape[0];
        out.in = t->shape[1];
        out.bytes = static_cast<std::int64_t>(t->bytes + t->scaleBytes);
        if (t->format == TensorFormat::F32) {
            out.f32 = reinterpret_cast<const float*>(t->data);
        } else if (t->format == TensorFormat::Fp4G128) {
            out.codes = t->data;
            out.scales = reinterpret_cast<const std::uint16_t*>(t->scales);
            const std::int64_t count = static_cast<std::int64_t>(t->scaleBytes / 2);
            for (std::int64_t i = 0; i < count; ++i) {
                if (!std::isfinite(formats::bf16ToFloat(out.scales[i]))) {
                    return {ErrorCode::InvalidFile, "package: tensor '" + spec.name + "' has a non-finite group scale"};
                }
            }
        } else {
            return {ErrorCode::InvalidFile, "package: linear tensor '" + spec.name + "' cannot be " + tensorFormatName(t->format)};
        }
        return Status::ok();
    }

    Status embedding(const TensorSpec& spec, EmbeddingTable& out) {
        const PackageTensor* t = nullptr;
        GEMMA_RETURN_IF_ERROR(tensor(spec, t));
        out.format = t->format;
        out.rows = t->shape[0];
        out.cols = t->shape[1];
        out.bytes = static_cast<std::int64_t>(t->bytes + t->scaleBytes);
        if (t->format == TensorFormat::F32) {
            out.f32 = reinterpret_cast<const float*>(t->data);
        } else if (t->format == TensorFormat::Fp8RowScaled) {
            out.codes = t->data;
            out.rowScales = reinterpret_cast<const float*>(t->scales);
            for (std::int64_t r = 0; r < out.rows; ++r) {
                if (!std::isfinite(out.rowScales[r]) || out.rowScales[r] < 0.0f) {
                    return {ErrorCode::InvalidFile, "package: tensor '" + spec.name + "' has a bad row scale at row " + std::to_string(r)};
                }
            }
        } else {
            return {ErrorCode::InvalidFile, "package: embedding tensor '" + spec.name + "' cannot be " + tensorFormatName(t->format)};
        }
        return Status::ok();
    }

private:
    const Package& package_;
};

}  // namespace

Expected<ModelWeights> ModelWeights::bind(const Package& package) {
    const ModelConfig& config = package.config();
    ModelWeights w;
    w.layers.resize(config.numLayers);
    Binder binder(package);
    // Walk the one list of expected tensors and route each to its slot by name.
    for (const auto& spec : expectedTensors(config)) {
        const std::string& n = spec.name;
        if (n == "embed_tokens.weight") { GEMMA_RETURN_IF_ERROR(binder.embedding(spec, w.embedding)); continue; }
        if (n == "embed_tokens_per_layer.weight") { GEMMA_RETURN_IF_ERROR(binder.embedding(spec, w.perLayerEmbedding)); continue; }
        if (n == "per_layer_model_projection.weight") { GEMMA_RETURN_IF_ERROR(binder.linear(spec, w.perLayerModelProjection)); continue; }
        if (n == "per_layer_projection_norm.weight") { GEMMA_RETURN_IF_ERROR(binder.vector(spec, w.perLayerProjectionNorm)); continue; }
        if (n == "norm.weight") { GEMMA_RETURN_IF_ERROR(binder.vector(spec, w.finalNorm)); continue; }
        // "layers.<i>.<suffix>"
        const auto dot = n.find('.', 7);
        const int layer = std::stoi(n.substr(7, dot - 7));
        const std::string suffix = n.substr(dot + 1);
        LayerWeights& l = w.layers[layer];
        if (suffix == "input_layernorm.weight") GEMMA_RETURN_IF_ERROR(binder.vector(spec, l.inputNorm));
        else if (suffix == "post_attention_layernorm.weight") GEMMA_RETURN_IF_ERROR(binder.vector(spec, l.postAttentionNorm));
        else if (suffix == "pre_feedforward_layernorm.weight") GEMMA_RETURN_IF_ERROR(binder.vector(spec, l.preFeedforwardNorm));
        else if (suffix == "post_feedforward_layernorm.weight") GEMMA_RETURN_IF_ERROR(binder.vector(spec, l.postFeedforwardNorm));
        else if (suffix == "self_attn.q_norm.weight") GEMMA_RETURN_IF_ERROR(binder.vector(spec, l.qNorm));
        else if (suffix == "self_attn.k_norm.weight") GEMMA_RETURN_IF_ERROR(binder.vector(spec, l.kNorm));
        else if (suffix == "self_attn.q_proj.weight") GEMMA_RETURN_IF_ERROR(binder.linear(spec, l.q));
        else if (suffix == "self_attn.k_proj.weight") GEMMA_RETURN_IF_ERROR(binder.linear(spec, l.k));
        else if (suffix == "self_attn.v_proj.weight") GEMMA_RETURN_IF_ERROR(binder.linear(spec, l.v));
        else if (suffix == "self_attn.o_proj.weight") GEMMA_RETURN_IF_ERROR(binder.linear(spec, l.o));
        else if (suffix == "mlp.gate_proj.weight") GEMMA_RETURN_IF_ERROR(binder.linear(spec, l.gate));
        else if (suffix == "mlp.up_proj.weight") GEMMA_RETURN_IF_ERROR(binder.linear(spec, l.up));
        else if (suffix == "mlp.down_proj.weight") GEMMA_RETURN_IF_ERROR(binder.linear(spec, l.down));
        else if (suffix == "per_layer_input_gate.weight") GEMMA_RETURN_IF_ERROR(binder.linear(spec, l.perLayerGate));
        else if (suffix == "per_layer_projection.weight") GEMMA_RETURN_IF_ERROR(binder.linear(spec, l.perLayerProjection));
        else if (suffix == "post_per_layer_input_norm.weight") GEMMA_RETURN_IF_ERROR(binder.vector(spec, l.postPerLayerNorm));
        else if (suffix == "layer_scalar") {
            const float* scalar = nullptr;
            GEMMA_RETURN_IF_ERROR(binder.vector(spec, scalar));
            l.layerScalar = *scalar;
        } else {
            return Status{ErrorCode::Internal, "no slot for tensor '" + n + "'"};
        }
    }
    // The decode floor counts every decoder weight once plus the lm_head (PERF.md).
    std::int64_t bytes = w.embedding.bytes;  // lm_head pass over the tied table
    bytes += w.perLayerModelProjection.bytes;
    for (const auto& l : w.layers) {
        for (const LinearWeight* lw : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down, &l.perLayerGate, &l.perLayerProjection}) {
            bytes += lw->bytes;
        }
    }
    w.decoderBytesPerToken = bytes;
    return w;
}

}  // namespace gemma
