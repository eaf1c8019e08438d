// The engine against Hugging Face transformers (tools/make_goldens.py, docs/GOLDENS.md): for every
// golden model, the unquantized package must match transformers' float32 logits at every position
// to 1e-4·max|ref| with identical greedy tokens, and the FP4 package must match transformers run
// on the same fake-quantized weights to the same tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "TestSupport.h"
#include "gemma/Engine.h"
#include "gemma/Quantize.h"

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

struct Golden {
    std::vector<std::int32_t> prompt, greedy;
    std::vector<float> logits;  // rows × vocab
    std::int64_t rows = 0, vocab = 0;
};

Golden loadGolden(const fs::path& folder, const std::string& stem) {
    const Json meta = Json::parse(gemma::test::readFile(folder / (stem + ".json")));
    Golden g;
    g.prompt = meta.at("prompt_ids").get<std::vector<std::int32_t>>();
    g.greedy = meta.at("greedy_ids").get<std::vector<std::int32_t>>();
    g.rows = meta.at("rows").get<std::int64_t>();
    g.vocab = meta.at("vocab").get<std::int64_t>();
    g.logits = gemma::test::readFloats(folder / (stem == "golden" ? "logits.f32" : "logits_fp4.f32"));
    return g;
}

// Runs the golden prompt greedily and compares every logits row and every token.
void checkAgainstGolden(const fs::path& package, const Golden& golden, const std::string& label) {
    auto engine = gemma::Engine::open(package, gemma::OpenOptions{gemma::Device::Cpu, 256});
    ASSERT_TRUE(engine) << engine.status().message();
    ASSERT_EQ((*engine)->info().vocabSize, golden.vocab);
    gemma::GenerationRequest request;
    request.rawTokens = golden.prompt;
    request.maxNewTokens = static_cast<int>(golden.greedy.size());
    request.stopAtEndOfTurn = false;
    request.sampling.greedy = true;
    std::vector<float> logits;
    request.onLogits = [&](std::int32_t, const float* row, std::int32_t vocab) { logits.insert(logits.end(), row, row + vocab); };
    auto stats = (*engine)->generate(request, {});
    ASSERT_TRUE(stats) << stats.status().message();
    EXPECT_EQ(stats->tokens, golden.greedy) << label << ": greedy tokens differ";
    ASSERT_EQ(static_cast<std::int64_t>(logits.size()), golden.rows * golden.vocab) << label;
    ASSERT_EQ(golden.logits.size(), logits.size()) << label;

    double worstRatio = 0.0;
    std::int64_t worstRow = -1;
    for (std::int64_t r = 0; r < golden.rows; ++r) {
        const float* ref = golden.logits.data() + r * golden.vocab;
        const float* got = logits.data() + r * golden.vocab;
        double maxRef = 0.0, maxDelta = 0.0;
        for (std::int64_t v = 0; v < golden.vocab; ++v) {
            ASSERT_TRUE(std::isfinite(got[v])) << label << " row " << r;
            maxRef = std::max(maxRef, std::fabs(static_cast<double>(ref[v])));
            maxDelta = std::max(maxDelta, std::fabs(static_cast<double>(got[v]) - ref[v]));
        }
        const double ratio = maxDelta / maxRef;
        if (ratio > worstRatio) {
            worstRatio = ratio;
            worstRow = r;
        }
        EXPECT_LE(maxDelta, 1e-4 * maxRef) << label << ": position " << r << " max|Δ| " << maxDelta << " vs max|ref| " << maxRef;
    }
    std::printf("[ golden ] %-28s rows %3lld  worst max|Δ|/max|ref| = %.3g (position %lld)\n", label.c_str(),
                static_cast<long long>(golden.rows), worstRatio, static_cast<long long>(worstRow));
}

std::vector<std::string> goldenModels() {
    std::vector<std::string> names;
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(gemma::test::goldens(), error)) {
        if (fs::exists(entry.path() / "golden.json")) names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
}

class GoldenParity : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST(GoldenSet, HasTheFourRequiredModels) {
    const auto names = goldenModels();
    for (const char* required : {"e2b_like", "31b_like", "12b_like", "plc_form"}) {
        EXPECT_NE(std::find(names.begin(), names.end(), required), names.end()) << required;
    }
}

TEST_P(GoldenParity, UnquantizedPackageMatchesTransformers) {
    const fs::path folder = gemma::test::goldens() / GetParam();
    gemma::test::ScratchDir scratch("golden");
    gemma::QuantizeOptions options;
    options.unquantized = true;
    auto report = gemma::quantizeCheckpoint(folder / "hf", scratch / "model.gemma", options);
    ASSERT_TRUE(report) << report.status().message();
    checkAgainstGolden(scratch / "model.gemma", loadGolden(folder, "golden"), GetParam() + " f32");
}

TEST_P(GoldenParity, Fp4PackageMatchesFakeQuantizedTransformers) {
    const fs::path folder = gemma::test::goldens() / GetParam();
    gemma::test::ScratchDir scratch("golden-fp4");
    gemma::QuantizeOptions options;
    options.scaleRule = gemma::ScaleRule::AbsMax;  // the rule tools/make_goldens.py mirrors
    auto report = gemma::quantizeCheckpoint(folder / "hf", scratch / "model.gemma", options);
    ASSERT_TRUE(report) << report.status().message();
    checkAgainstGolden(scratch / "model.gemma", loadGolden(folder, "golden_fp4"), GetParam() + " fp4");
}

TEST_P(GoldenParity, QuantizingTwiceIsByteIdentical) {
    const fs::path folder = gemma::test::goldens() / GetParam();
    gemma::test::ScratchDir scratch("determinism");
    ASSERT_TRUE(gemma::quantizeCheckpoint(folder / "hf", scratch / "a.gemma", {}));
    ASSERT_TRUE(gemma::quantizeCheckpoint(folder / "hf", scratch / "b.gemma", {}));
    EXPECT_TRUE(gemma::test::readFile(scratch / "a.gemma") == gemma::test::readFile(scratch / "b.gemma"));
}

INSTANTIATE_TEST_SUITE_P(Goldens, GoldenParity, ::testing::ValuesIn(goldenModels()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });
