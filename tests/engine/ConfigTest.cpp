// Config parsing: both JSON forms, the wrapped multimodal form, presets and rejections by name.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "gemma/Config.h"

using gemma::ErrorCode;
using gemma::LayerType;
using gemma::ModelConfig;
using Json = nlohmann::json;

namespace {

Json baseConfig() {
    return {{"model_type", "gemma4_text"}, {"vocab_size", 1000},          {"hidden_size", 256},
            {"intermediate_size", 512},    {"num_hidden_layers", 6},      {"num_attention_heads", 8},
            {"num_key_value_heads", 4},    {"head_dim", 32},              {"global_head_dim", 64},
            {"sliding_window", 16},        {"hidden_size_per_layer_input", 0}};
}

ErrorCode parseError(const Json& config) { return ModelConfig::fromJson(config.dump()).status().code(); }
std::string parseMessage(const Json& config) { return ModelConfig::fromJson(config.dump()).status().message(); }

}  // namespace

TEST(Config, FlatFormWithKEqV) {
    Json c = baseConfig();
    c["attention_k_eq_v"] = true;
    c["num_global_key_value_heads"] = 2;
    auto config = ModelConfig::fromJson(c.dump());
    ASSERT_TRUE(config) << config.status().message();
    // Default pattern: layer 5 (the sixth) is full, and so is the last.
    EXPECT_TRUE(config->isSliding(0));
    EXPECT_FALSE(config->isSliding(5));
    EXPECT_EQ(config->headDim(0), 32);
    EXPECT_EQ(config->headDim(5), 64);
    EXPECT_EQ(config->kvHeads(0), 4);
    EXPECT_EQ(config->kvHeads(5), 2);
    EXPECT_TRUE(config->hasValueProjection(0));
    EXPECT_FALSE(config->hasValueProjection(5));
    // Proportional RoPE: int(0.25 * 64 // 2) = 8 rotated pairs, theta 1e6; sliding: all 16 pairs.
    EXPECT_EQ(config->layers[5].ropeRotatedPairs, 8);
    EXPECT_EQ(config->layers[5].ropeTheta, 1e6);
    EXPECT_EQ(config->layers[0].ropeRotatedPairs, 16);
    EXPECT_EQ(config->layers[0].ropeTheta, 1e4);
}

TEST(Config, GlobalKvHeadsIgnoredWithoutKEqV) {
    Json c = baseConfig();
    c["num_global_key_value_heads"] = 2;
    auto config = ModelConfig::fromJson(c.dump());
    ASSERT_TRUE(config);
    EXPECT_EQ(config->kvHeads(5), 4);
    EXPECT_TRUE(config->hasValueProjection(5));
}

TEST(Config, PerLayerConfigForm) {
    Json c = baseConfig();
    c.erase("global_head_dim");
    c["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention", "sliding_attention", "sliding_attention",
                        "full_attention"};
    c["per_layer_config"] = {{"1", {{"head_dim", 128}, {"num_key_value_heads", 2}}}, {"5", {{"head_dim", 128}}}};
    auto config = ModelConfig::fromJson(c.dump());
    ASSERT_TRUE(config) << config.status().message();
    EXPECT_EQ(config->headDim(1), 128);
    EXPECT_EQ(config->kvHeads(1), 2);
    EXPECT_EQ(config->headDim(5), 128);
    EXPECT_EQ(config->kvHeads(5), 4);
    EXPECT_EQ(config->headDim(2), 32);
    // Round trip through the package's own JSON keeps every derived fact.
    auto again = ModelConfig::fromJson(config->toJson());
    ASSERT_TRUE(again) << again.status().message();
    for (int l = 0; l < 6; ++l) {
        EXPECT_EQ(again->headDim(l), config->headDim(l));
        EXPECT_EQ(again->kvHeads(l), config->kvHeads(l));
        EXPECT_EQ(again->layers[l].ropeRotatedPairs, config->layers[l].ropeRotatedPairs);
    }
}

TEST(Config, WrappedMultimodalForm) {
    Json wrapped = {{"model_type", "gemma4"}, {"text_config", baseConfig()}, {"vision_config", {{"hidden_size", 3}}}};
    auto config = ModelConfig::fromJson(wrapped.dump());
    ASSERT_TRUE(config) << config.status().message();
    EXPECT_EQ(config->hiddenSize, 256);
}

TEST(Config, KvSharingSourcesAndDoubleWideMlp) {
    auto e2b = ModelConfig::preset("e2b");
    ASSERT_TRUE(e2b);
    // GEMMA4.md §2.8: E2B shares from layer 13 (sliding) and 14 (full); layers 15..34 double-wide.
    EXPECT_EQ(e2b->firstKvSharedLayer(), 15);
    for (int l = 0; l < 35; ++l) {
        if (l < 15) {
            EXPECT_EQ(e2b->kvSourceLayer(l), l);
            EXPECT_EQ(e2b->intermediateSize(l), 6144);
        } else {
            EXPECT_EQ(e2b->kvSourceLayer(l), e2b->isSliding(l) ? 13 : 14) << l;
            EXPECT_EQ(e2b->intermediateSize(l), 12288);
        }
    }
    EXPECT_FALSE(e2b->isSliding(4));
    EXPECT_FALSE(e2b->isSliding(34));
    auto e4b = ModelConfig::preset("e4b");
    ASSERT_TRUE(e4b);
    EXPECT_EQ(e4b->kvSourceLayer(30), e4b->isSliding(30) ? 22 : 23);
}

TEST(Config, PresetGeometries) {
    auto p12 = ModelConfig::preset("12b");
    ASSERT_TRUE(p12);
    EXPECT_EQ(p12->numLayers, 48);
    EXPECT_EQ(p12->kvHeads(5), 1);
    EXPECT_EQ(p12->headDim(5), 512);
    EXPECT_EQ(p12->kvHeads(0), 8);
    EXPECT_FALSE(p12->hasValueProjection(47));
    auto p31 = ModelConfig::preset("31b");
    ASSERT_TRUE(p31);
    EXPECT_EQ(p31->kvHeads(59), 4);
    EXPECT_EQ(p31->layers[59].ropeRotatedPairs, 64);
    EXPECT_EQ(ModelConfig::preset("7b").status().code(), ErrorCode::InvalidArgument);
}

TEST(Config, RejectsImpossibleValuesByName) {
    Json c = baseConfig();
    c["num_key_value_heads"] = 3;  // does not divide 8
    EXPECT_EQ(parseError(c), ErrorCode::InvalidConfig);
    EXPECT_NE(parseMessage(c).find("do not divide"), std::string::npos);

    c = baseConfig();
    c["sliding_window"] = 0;
    EXPECT_NE(parseMessage(c).find("sliding_window"), std::string::npos);

    c = baseConfig();
    c["layer_types"] = {"sliding_attention", "banana", "sliding_attention", "sliding_attention", "sliding_attention",
                        "full_attention"};
    EXPECT_NE(parseMessage(c).find("layer_types[1]"), std::string::npos);

    c = baseConfig();
    c["layer_types"] = {"full_attention"};
    EXPECT_NE(parseMessage(c).find("layer_types"), std::string::npos);

    c = baseConfig();
    c["hidden_size"] = -5;
    EXPECT_NE(parseMessage(c).find("hidden_size"), std::string::npos);

    c = baseConfig();
    c["head_dim"] = 33;
    EXPECT_NE(parseMessage(c).find("head_dim"), std::string::npos);

    c = baseConfig();
    c["num_kv_shared_layers"] = 6;
    EXPECT_NE(parseMessage(c).find("num_kv_shared_layers"), std::string::npos);

    c = baseConfig();
    c["hidden_size"] = "wide";
    EXPECT_NE(parseMessage(c).find("hidden_size"), std::string::npos);

    c = baseConfig();
    c["enable_moe_block"] = true;
    EXPECT_EQ(parseError(c), ErrorCode::Unsupported);

    c = baseConfig();
    c["model_type"] = "llama";
    EXPECT_EQ(parseError(c), ErrorCode::Unsupported);

    EXPECT_EQ(ModelConfig::fromJson("{not json").status().code(), ErrorCode::InvalidConfig);
    EXPECT_EQ(ModelConfig::fromJson("[1,2]").status().code(), ErrorCode::InvalidConfig);
}

TEST(Config, LastLayerForcedFull) {
    Json c = baseConfig();
    c["layer_types"] = std::vector<std::string>(6, "sliding_attention");
    auto config = ModelConfig::fromJson(c.dump());
    ASSERT_TRUE(config);
    EXPECT_FALSE(config->isSliding(5));
}
