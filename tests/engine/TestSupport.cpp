#include "TestSupport.h"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>

#include "gemma/Config.h"
#include "ModelTensors.h"

namespace gemma::test {

std::filesystem::path testData() { return GEMMA_TEST_DATA; }
std::filesystem::path goldens() { return testData() / "goldens"; }

ScratchDir::ScratchDir(const std::string& tag) {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("gemma-test-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
}

ScratchDir::~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
}

std::string readFile(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

void writeFile(const std::filesystem::path& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<float> readFloats(const std::filesystem::path& path) {
    const std::string bytes = readFile(path);
    std::vector<float> values(bytes.size() / 4);
    std::memcpy(values.data(), bytes.data(), values.size() * 4);
    return values;
}

RawTensor f32Tensor(std::vector<std::int64_t> shape, const std::vector<float>& values) {
    RawTensor t;
    t.shape = std::move(shape);
    t.bytes.assign(reinterpret_cast<const char*>(values.data()), values.size() * 4);
    return t;
}

std::string makeSafetensors(const std::map<std::string, RawTensor>& tensors) {
    nlohmann::json header = nlohmann::json::object();
    std::string data;
    for (const auto& [name, t] : tensors) {
        header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
        data += t.bytes;
    }
    std::string text = header.dump();
    while (text.size() % 8 != 0) text += ' ';
    std::string out(8, '\0');
    const std::uint64_t length = text.size();
    std::memcpy(out.data(), &length, 8);
    return out + text + data;
}

TinyCheckpoint TinyCheckpoint::make(unsigned seed) {
    const nlohmann::json config = {
        {"model_type", "gemma4_text"},
        {"vocab_size", 512},
        {"hidden_size", 128},
        {"intermediate_size", 256},
        {"num_hidden_layers", 3},
        {"num_attention_heads", 4},
        {"num_key_value_heads", 2},
        {"head_dim", 32},
        {"global_head_dim", 64},
        {"sliding_window", 8},
        {"layer_types", {"sliding_attention", "sliding_attention", "full_attention"}},
        {"hidden_size_per_layer_input", 0},
        {"final_logit_softcapping", 30.0},
        {"rms_norm_eps", 1e-6},
        {"tie_word_embeddings", true}};
    TinyCheckpoint checkpoint;
    checkpoint.configJson = config.dump(2);
    auto parsed = ModelConfig::fromJson(checkpoint.configJson);
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (const auto& spec : expectedTensors(parsed.value())) {
        std::int64_t n = 1;
        for (auto d : spec.shape) n *= d;
        std::vector<float> values(static_cast<std::size_t>(n));
        const float scale = spec.role == TensorRole::Linear ? 1.0f / std::sqrt(static_cast<float>(spec.shape.back())) : 1.0f;
        for (auto& v : values) {
            v = spec.role == TensorRole::Norm || spec.role == TensorRole::Scalar ? 0.75f + 0.25f * std::tanh(normal(rng))
                                                                                 : normal(rng) * scale;
        }
        checkpoint.tensors["model." + spec.name] = f32Tensor(spec.shape, values);
    }
    return checkpoint;
}

void TinyCheckpoint::write(const std::filesystem::path& folder) const {
    std::filesystem::create_directories(folder);
    writeFile(folder / "config.json", configJson);
    writeFile(folder / "model.safetensors", makeSafetensors(tensors));
    std::filesystem::copy_file(goldens() / "tokenizer.model", folder / "tokenizer.model",
                               std::filesystem::copy_options::overwrite_existing);
}

}  // namespace gemma::test
