// Hostile and broken input: every case must come back as a clear error naming the problem,
// never a crash (the suite also runs under AddressSanitizer and UBSan, see .ci/run).
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "SafeTensors.h"
#include "TestSupport.h"
#include "gemma/Engine.h"
#include "gemma/Quantize.h"

using gemma::ErrorCode;
using gemma::test::ScratchDir;
using Json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct Outcome {
    ErrorCode code = ErrorCode::Ok;
    std::string message;
};

Outcome openPackage(const fs::path& path) {
    auto engine = gemma::Engine::open(path, gemma::OpenOptions{gemma::Device::Cpu, 64});
    return {engine.status().code(), engine.status().message()};
}

Outcome quantize(const fs::path& folder, const fs::path& out) {
    auto report = gemma::quantizeCheckpoint(folder, out, {});
    return {report.status().code(), report.status().message()};
}

#define EXPECT_ERROR(outcome, expectedCode, fragment)                                              \
    do {                                                                                           \
        const Outcome o_ = (outcome);                                                              \
        EXPECT_EQ(o_.code, expectedCode) << o_.message;                                            \
        EXPECT_NE(o_.message.find(fragment), std::string::npos) << "message: " << o_.message;      \
    } while (0)

// A valid tiny package, and a way to rewrite its manifest (the JSON at the end of the file).
class PackageFixture : public ::testing::Test {
protected:
    void SetUp() override {
        gemma::test::TinyCheckpoint::make().write(dir_ / "hf");
        auto report = gemma::quantizeCheckpoint(dir_ / "hf", package(), {});
        ASSERT_TRUE(report) << report.status().message();
        ASSERT_EQ(openPackage(package()).code, ErrorCode::Ok);
    }
    fs::path package() const { return dir_ / "model.gemma"; }

    // Calls edit on the manifest and writes the file back with a consistent fixed header.
    fs::path withManifest(const std::function<void(Json&)>& edit, const std::string& name = "edited.gemma") {
        std::string bytes = gemma::test::readFile(package());
        std::uint64_t manifestOffset = 0;
        std::memcpy(&manifestOffset, bytes.data() + 16, 8);
        Json manifest = Json::parse(bytes.substr(manifestOffset));
        edit(manifest);
        const std::string text = manifest.dump();
        bytes.resize(manifestOffset);
        bytes += text;
        const std::uint64_t manifestBytes = text.size(), fileBytes = bytes.size();
        std::memcpy(bytes.data() + 24, &manifestBytes, 8);
        std::memcpy(bytes.data() + 32, &fileBytes, 8);
        gemma::test::writeFile(dir_ / name, bytes);
        return dir_ / name;
    }

    static Json& tensorEntry(Json& manifest, const std::string& name) {
        for (auto& t : manifest["tensors"]) {
            if (t["name"] == name) return t;
        }
        throw std::runtime_error("no tensor " + name);
    }

    ScratchDir dir_{"malformed"};
};

class CheckpointFixture : public ::testing::Test {
protected:
    void SetUp() override { checkpoint_ = gemma::test::TinyCheckpoint::make(); }
    Outcome quantizeEdited() {
        checkpoint_.write(dir_ / "hf");
        return quantize(dir_ / "hf", dir_ / "out.gemma");
    }
    void replaceSafetensors(const std::string& bytes) { gemma::test::writeFile(dir_ / "hf" / "model.safetensors", bytes); }

    gemma::test::TinyCheckpoint checkpoint_;
    ScratchDir dir_{"checkpoint"};
};

}  // namespace

// ---- Packages ------------------------------------------------------------------------------------

TEST_F(PackageFixture, EmptyFile) {
    gemma::test::writeFile(dir_ / "empty.gemma", "");
    EXPECT_ERROR(openPackage(dir_ / "empty.gemma"), ErrorCode::InvalidFile, "empty");
}

TEST_F(PackageFixture, RandomBytes) {
    std::mt19937 rng(3);
    std::string noise(100000, '\0');
    for (auto& c : noise) c = static_cast<char>(rng());
    gemma::test::writeFile(dir_ / "noise.gemma", noise);
    EXPECT_ERROR(openPackage(dir_ / "noise.gemma"), ErrorCode::InvalidFile, "not a Gemma Desk package");
}

TEST_F(PackageFixture, MissingFile) { EXPECT_ERROR(openPackage(dir_ / "nowhere.gemma"), ErrorCode::Io, "cannot open"); }

TEST_F(PackageFixture, Truncated) {
    const std::string bytes = gemma::test::readFile(package());
    gemma::test::writeFile(dir_ / "cut.gemma", bytes.substr(0, bytes.size() / 2));
    EXPECT_ERROR(openPackage(dir_ / "cut.gemma"), ErrorCode::InvalidFile, "truncated");
}

TEST_F(PackageFixture, FutureVersion) {
    std::string bytes = gemma::test::readFile(package());
    const std::uint32_t version = 99;
    std::memcpy(bytes.data() + 8, &version, 4);
    gemma::test::writeFile(dir_ / "v99.gemma", bytes);
    EXPECT_ERROR(openPackage(dir_ / "v99.gemma"), ErrorCode::Unsupported, "version 99");
}

TEST_F(PackageFixture, ManifestNotJson) {
    std::string bytes = gemma::test::readFile(package());
    std::uint64_t manifestOffset = 0;
    std::memcpy(&manifestOffset, bytes.data() + 16, 8);
    bytes[manifestOffset] = '#';
    gemma::test::writeFile(dir_ / "json.gemma", bytes);
    EXPECT_ERROR(openPackage(dir_ / "json.gemma"), ErrorCode::InvalidFile, "not valid JSON");
}

TEST_F(PackageFixture, UnknownQuantizationScheme) {
    auto path = withManifest([](Json& m) { tensorEntry(m, "layers.0.mlp.up_proj.weight")["format"] = "fp3-magic"; });
    EXPECT_ERROR(openPackage(path), ErrorCode::Unsupported, "unknown quantization scheme 'fp3-magic'");
}

TEST_F(PackageFixture, OffsetOutOfRange) {
    auto path = withManifest([](Json& m) { tensorEntry(m, "norm.weight")["offset"] = 1ULL << 40; });
    EXPECT_ERROR(openPackage(path), ErrorCode::InvalidFile, "outside the data section");
}

TEST_F(PackageFixture, MisalignedOffset) {
    auto path = withManifest([](Json& m) {
        auto& t = tensorEntry(m, "norm.weight");
        t["offset"] = t["offset"].get<std::uint64_t>() + 4;
    });
    EXPECT_ERROR(openPackage(path), ErrorCode::InvalidFile, "aligned");
}

TEST_F(PackageFixture, OverlappingTensors) {
    auto path = withManifest([](Json& m) {
        tensorEntry(m, "layers.1.input_layernorm.weight")["offset"] = tensorEntry(m, "layers.0.input_layernorm.weight")["offset"];
    });
    EXPECT_ERROR(openPackage(path), ErrorCode::InvalidFile, "overlap");
}

TEST_F(PackageFixture, SizeContradictsShape) {
    auto path = withManifest([](Json& m) { tensorEntry(m, "norm.weight")["shape"] = {64}; });
    EXPECT_ERROR(openPackage(path), ErrorCode::InvalidFile, "its shape needs");
}

TEST_F(PackageFixture, ShapeContradictsConfig) {
    // Consistent on its own (64 f32 = 256 bytes fits the 512-byte blob's start) but not what
    // the config implies for the final norm.
    auto path = withManifest([](Json& m) {
        auto& t = tensorEntry(m, "norm.weight");
        t["shape"] = {64};
        t["bytes"] = 256;
    });
    EXPECT_ERROR(openPackage(path), ErrorCode::InvalidFile, "but the config implies [128]");
}

TEST_F(PackageFixture, MissingTensor) {
    auto path = withManifest([](Json& m) {
        auto& list = m["tensors"];
        for (std::size_t i = 0; i < list.size(); ++i) {
            if (list[i]["name"] == "layers.2.self_attn.k_proj.weight") list.erase(i);
        }
    });
    EXPECT_ERROR(openPackage(path), ErrorCode::InvalidFile, "missing tensor 'layers.2.self_attn.k_proj.weight'");
}

TEST_F(PackageFixture, ImpossibleConfig) {
    auto path = withManifest([](Json& m) {
        m["config"]["num_key_value_heads"] = 3;
        m["config"].erase("per_layer_config");
    });
    EXPECT_ERROR(openPackage(path), ErrorCode::InvalidConfig, "do not divide");
}

TEST_F(PackageFixture, MissingManifestField) {
    auto path = withManifest([](Json& m) { m["metadata"].erase("embed_scale"); });
    EXPECT_ERROR(openPackage(path), ErrorCode::InvalidFile, "malformed");
}

TEST_F(PackageFixture, NaNInNormWeight) {
    std::string bytes = gemma::test::readFile(package());
    std::uint64_t manifestOffset = 0;
    std::memcpy(&manifestOffset, bytes.data() + 16, 8);
    Json manifest = Json::parse(bytes.substr(manifestOffset));
    const auto offset = tensorEntry(manifest, "layers.1.post_attention_layernorm.weight")["offset"].get<std::uint64_t>();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(bytes.data() + offset + 4 * 17, &nan, 4);
    gemma::test::writeFile(dir_ / "nan.gemma", bytes);
    EXPECT_ERROR(openPackage(dir_ / "nan.gemma"), ErrorCode::InvalidFile,
                 "'layers.1.post_attention_layernorm.weight' has a non-finite value at element 17");
}

TEST_F(PackageFixture, ImpossibleRequestsLeaveTheEngineUsable) {
    auto engine = gemma::Engine::open(package(), gemma::OpenOptions{gemma::Device::Cpu, 16});
    ASSERT_TRUE(engine) << engine.status().message();
    gemma::GenerationRequest request;
    request.rawTokens = {2, 5000};  // outside the 512-token vocabulary
    request.maxNewTokens = 2;
    EXPECT_EQ((*engine)->generate(request, {}).status().code(), ErrorCode::InvalidArgument);
    request.rawTokens.assign(40, 7);  // longer than the allocation
    EXPECT_EQ((*engine)->generate(request, {}).status().code(), ErrorCode::InvalidArgument);
    request.sampling.topP = 2.0f;
    request.rawTokens = {2, 7};
    EXPECT_EQ((*engine)->generate(request, {}).status().code(), ErrorCode::InvalidArgument);
    request.sampling = {};
    request.sampling.greedy = true;
    request.maxNewTokens = 30;  // runs into the allocation of 16
    auto stats = (*engine)->generate(request, {});
    ASSERT_TRUE(stats) << stats.status().message();
    EXPECT_EQ(stats->stopReason, gemma::StopReason::ContextFull);
    request.stopAtEndOfTurn = false;
    request.maxNewTokens = 3;
    stats = (*engine)->generate(request, {});
    ASSERT_TRUE(stats) << stats.status().message();
    EXPECT_EQ(stats->generatedTokens, 3);
    EXPECT_EQ(gemma::Engine::open(package(), gemma::OpenOptions{gemma::Device::Cpu, 0}).status().code(),
              ErrorCode::InvalidArgument);
    // A GEMM prefill chunk outside 32 .. 8192 positions is refused by name, whatever the device.
    for (int chunk : {0, 31, 8193}) {
        gemma::OpenOptions options{gemma::Device::Cpu, 16};
        options.gemmPrefillChunk = chunk;
        auto engine = gemma::Engine::open(package(), options);
        EXPECT_ERROR((Outcome{engine.status().code(), engine.status().message()}), ErrorCode::InvalidArgument, "GEMM prefill chunk");
    }
}

// ---- Hugging Face checkpoints ------------------------------------------------------------------

TEST_F(CheckpointFixture, SafetensorsEmptyFile) {
    checkpoint_.write(dir_ / "hf");
    replaceSafetensors("");
    EXPECT_ERROR(quantize(dir_ / "hf", dir_ / "out.gemma"), ErrorCode::InvalidFile, "too small");
}

TEST_F(CheckpointFixture, SafetensorsTruncatedHeader) {
    checkpoint_.write(dir_ / "hf");
    const std::string bytes = gemma::test::readFile(dir_ / "hf" / "model.safetensors");
    replaceSafetensors(bytes.substr(0, 100));
    EXPECT_ERROR(quantize(dir_ / "hf", dir_ / "out.gemma"), ErrorCode::InvalidFile, "runs past the end");
}

TEST_F(CheckpointFixture, SafetensorsHeaderLengthPastEnd) {
    checkpoint_.write(dir_ / "hf");
    std::string bytes = gemma::test::readFile(dir_ / "hf" / "model.safetensors");
    const std::uint64_t huge = 50u << 20;
    std::memcpy(bytes.data(), &huge, 8);
    replaceSafetensors(bytes);
    EXPECT_ERROR(quantize(dir_ / "hf", dir_ / "out.gemma"), ErrorCode::InvalidFile, "runs past the end");
}

TEST_F(CheckpointFixture, SafetensorsRandomBytes) {
    checkpoint_.write(dir_ / "hf");
    std::mt19937 rng(11);
    std::string noise(4096, '\0');
    for (auto& c : noise) c = static_cast<char>(rng());
    replaceSafetensors(noise);
    const Outcome o = quantize(dir_ / "hf", dir_ / "out.gemma");
    EXPECT_EQ(o.code, ErrorCode::InvalidFile) << o.message;
}

TEST_F(CheckpointFixture, SafetensorsOffsetsOutOfRange) {
    checkpoint_.write(dir_ / "hf");
    std::string bytes = gemma::test::readFile(dir_ / "hf" / "model.safetensors");
    // Make the data section 1 KB shorter than the header promises.
    replaceSafetensors(bytes.substr(0, bytes.size() - 1024));
    EXPECT_ERROR(quantize(dir_ / "hf", dir_ / "out.gemma"), ErrorCode::InvalidFile, "lie outside");
}

TEST_F(CheckpointFixture, SafetensorsOverlappingTensors) {
    std::map<std::string, gemma::test::RawTensor> tensors = {
        {"model.a", gemma::test::f32Tensor({4}, {1, 2, 3, 4})}, {"model.b", gemma::test::f32Tensor({4}, {1, 2, 3, 4})}};
    std::string bytes = gemma::test::makeSafetensors(tensors);
    // Rewrite b's offsets [16, 32) to [8, 24): same size, overlapping a.
    const auto pos = bytes.find("[16,32]");
    ASSERT_NE(pos, std::string::npos);
    bytes.replace(pos, 7, "[8,24] ");
    gemma::test::writeFile(dir_ / "x.safetensors", bytes);
    auto file = gemma::MappedFile::open(dir_ / "x.safetensors");
    ASSERT_TRUE(file);
    std::vector<gemma::SourceTensor> out;
    const auto status = gemma::Checkpoint::parseFile(*file, out);
    EXPECT_EQ(status.code(), ErrorCode::InvalidFile);
    EXPECT_NE(status.message().find("overlap"), std::string::npos) << status.message();
}

TEST_F(CheckpointFixture, DTypeContradictsSize) {
    checkpoint_.tensors["model.norm.weight"].dtype = "BF16";  // 128 f32 values are 512 bytes, not 256
    EXPECT_ERROR(quantizeEdited(), ErrorCode::InvalidFile, "shape and dtype need");
}

TEST_F(CheckpointFixture, UnsupportedDType) {
    auto& t = checkpoint_.tensors["model.norm.weight"];
    t.dtype = "I32";
    EXPECT_ERROR(quantizeEdited(), ErrorCode::Unsupported, "dtype I32");
}

TEST_F(CheckpointFixture, MissingTensor) {
    checkpoint_.tensors.erase("model.layers.1.mlp.down_proj.weight");
    EXPECT_ERROR(quantizeEdited(), ErrorCode::InvalidFile, "missing tensor 'layers.1.mlp.down_proj.weight'");
}

TEST_F(CheckpointFixture, ShapeContradictsConfig) {
    auto& t = checkpoint_.tensors["model.layers.0.self_attn.q_proj.weight"];
    t.shape = {64, 256};  // same byte count as [128, 128], the wrong shape
    EXPECT_ERROR(quantizeEdited(), ErrorCode::InvalidFile, "config.json implies [128, 128]");
}

TEST_F(CheckpointFixture, ImpossibleConfig) {
    auto config = Json::parse(checkpoint_.configJson);
    config["num_attention_heads"] = 5;
    checkpoint_.configJson = config.dump();
    EXPECT_ERROR(quantizeEdited(), ErrorCode::InvalidConfig, "do not divide");
}

TEST_F(CheckpointFixture, NaNInNormWeight) {
    auto& t = checkpoint_.tensors["model.layers.2.pre_feedforward_layernorm.weight"];
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(t.bytes.data() + 4 * 9, &nan, 4);
    EXPECT_ERROR(quantizeEdited(), ErrorCode::InvalidFile, "'layers.2.pre_feedforward_layernorm.weight' has a non-finite value (NaN) at element 9");
}

TEST_F(CheckpointFixture, InfinityInLinearWeight) {
    auto& t = checkpoint_.tensors["model.layers.0.mlp.gate_proj.weight"];
    const float inf = std::numeric_limits<float>::infinity();
    std::memcpy(t.bytes.data() + 4 * 300, &inf, 4);  // [128 out][128 in]: row 2, input 44
    EXPECT_ERROR(quantizeEdited(), ErrorCode::InvalidFile, "'layers.0.mlp.gate_proj.weight' row 2: weight 44 of a row is infinite");
}

TEST_F(CheckpointFixture, IndexPointingOutsideTheFolder) {
    checkpoint_.write(dir_ / "hf");
    gemma::test::writeFile(dir_ / "hf" / "model.safetensors.index.json", R"({"weight_map": {"model.norm.weight": "../../etc/passwd"}})");
    EXPECT_ERROR(quantize(dir_ / "hf", dir_ / "out.gemma"), ErrorCode::InvalidFile, "unsafe file");
}

TEST_F(CheckpointFixture, NoConfigOrTokenizer) {
    checkpoint_.write(dir_ / "hf");
    fs::remove(dir_ / "hf" / "tokenizer.model");
    EXPECT_ERROR(quantize(dir_ / "hf", dir_ / "out.gemma"), ErrorCode::Io, "tokenizer.model");
    fs::remove(dir_ / "hf" / "config.json");
    EXPECT_ERROR(quantize(dir_ / "hf", dir_ / "out.gemma"), ErrorCode::Io, "config.json");
    EXPECT_ERROR(quantize(dir_ / "missing-folder", dir_ / "out.gemma"), ErrorCode::Io, "config.json");
}

TEST_F(CheckpointFixture, FailedConversionLeavesNoFileBehind) {
    // The final norm is written last, so the writer has already streamed every other tensor.
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(checkpoint_.tensors["model.norm.weight"].bytes.data(), &nan, 4);
    checkpoint_.write(dir_ / "hf");
    EXPECT_NE(quantize(dir_ / "hf", dir_ / "out.gemma").code, ErrorCode::Ok);
    EXPECT_FALSE(fs::exists(dir_ / "out.gemma"));
    EXPECT_FALSE(fs::exists(dir_ / "out.gemma.partial"));
}

TEST_F(CheckpointFixture, DeeplyNestedHeaderIsRejectedNotACrash) {
    checkpoint_.write(dir_ / "hf");
    // A million nested arrays would overflow a recursive parser's stack.
    std::string header(1000000, '[');
    std::string bytes(8, '\0');
    const std::uint64_t length = header.size();
    std::memcpy(bytes.data(), &length, 8);
    replaceSafetensors(bytes + header);
    EXPECT_ERROR(quantize(dir_ / "hf", dir_ / "out.gemma"), ErrorCode::InvalidFile, "nests too deeply");
    gemma::test::writeFile(dir_ / "hf" / "config.json", std::string(200000, '{'));
    EXPECT_ERROR(quantize(dir_ / "hf", dir_ / "out.gemma"), ErrorCode::InvalidConfig, "nests too deeply");
}
