// gemma-cli's command-line contract (README "gemma-cli"), exercised on the real binary: --tokens,
// --print-ids, --dump-logits, --ignore-eos, error exits. The golden's transformers logits are the
// reference, so this also checks the CLI plumbing end to end.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <sys/wait.h>

#include "TestSupport.h"
#include "gemma/Quantize.h"

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

struct Result {
    int exitCode = -1;
    std::string output;  // stdout and stderr together
};

Result run(const std::string& arguments) {
    const std::string command = std::string(GEMMA_CLI_PATH) + " " + arguments + " 2>&1";
    Result result;
    FILE* pipe = popen(command.c_str(), "r");
    if (!pipe) return result;
    char buffer[4096];
    std::size_t n;
    while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) result.output.append(buffer, n);
    const int status = pclose(pipe);
    result.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return result;
}

std::string joinIds(const std::vector<std::int32_t>& ids) {
    std::string text;
    for (std::size_t i = 0; i < ids.size(); ++i) text += (i ? "," : "") + std::to_string(ids[i]);
    return text;
}

}  // namespace

TEST(GemmaCli, RawTokensPrintIdsAndDumpLogitsMatchTheGolden) {
    const fs::path folder = gemma::test::goldens() / "31b_like";
    gemma::test::ScratchDir scratch("cli");
    gemma::QuantizeOptions options;
    options.unquantized = true;
    ASSERT_TRUE(gemma::quantizeCheckpoint(folder / "hf", scratch / "model.gemma", options));
    const Json meta = Json::parse(gemma::test::readFile(folder / "golden.json"));
    const auto prompt = meta.at("prompt_ids").get<std::vector<std::int32_t>>();
    const auto greedy = meta.at("greedy_ids").get<std::vector<std::int32_t>>();
    const std::int64_t vocab = meta.at("vocab").get<std::int64_t>();

    const Result r = run("--model " + (scratch / "model.gemma").string() + " --tokens " + joinIds(prompt) + " --max-new-tokens " +
                         std::to_string(greedy.size()) + " --greedy --ignore-eos --print-ids --device cpu --quiet --dump-logits " +
                         (scratch / "logits.f32").string());
    ASSERT_EQ(r.exitCode, 0) << r.output;
    // The ids line is the last non-empty line of stdout.
    std::istringstream lines(r.output);
    std::string line, last;
    while (std::getline(lines, line)) {
        if (!line.empty()) last = line;
    }
    EXPECT_EQ(last, joinIds(greedy));
    const auto dumped = gemma::test::readFloats(scratch / "logits.f32");
    const auto reference = gemma::test::readFloats(folder / "logits.f32");
    ASSERT_EQ(dumped.size(), reference.size());  // one row per prompt position and generated token but the last
    for (std::size_t row = 0; row < dumped.size() / static_cast<std::size_t>(vocab); ++row) {
        double maxRef = 0.0, maxDelta = 0.0;
        for (std::int64_t v = 0; v < vocab; ++v) {
            const std::size_t i = row * static_cast<std::size_t>(vocab) + static_cast<std::size_t>(v);
            maxRef = std::max(maxRef, std::fabs(static_cast<double>(reference[i])));
            maxDelta = std::max(maxDelta, std::fabs(static_cast<double>(dumped[i]) - reference[i]));
        }
        EXPECT_LE(maxDelta, 1e-4 * maxRef) << "row " << row;
    }
}

TEST(GemmaCli, BadInputExitsNonZeroWithAMessage) {
    Result r = run("--model /nonexistent.gemma --prompt hi");
    EXPECT_NE(r.exitCode, 0);
    EXPECT_NE(r.output.find("cannot open"), std::string::npos) << r.output;
    r = run("--prompt hi --tokens 1,2");
    EXPECT_NE(r.exitCode, 0);
    EXPECT_NE(r.output.find("exactly one of --prompt and --tokens"), std::string::npos) << r.output;
    r = run("--tokens 1,x,3");
    EXPECT_NE(r.exitCode, 0);
    EXPECT_NE(r.output.find("--tokens"), std::string::npos) << r.output;
    r = run("--temperature hot --prompt hi");
    EXPECT_NE(r.exitCode, 0);
    EXPECT_NE(r.output.find("--temperature"), std::string::npos) << r.output;
    r = run("--frobnicate");
    EXPECT_NE(r.exitCode, 0);
    EXPECT_NE(r.output.find("unknown option"), std::string::npos) << r.output;
    // An unknown cache type is refused before any model is opened, naming the accepted ones.
    r = run("--kv-cache fp16 --prompt hi");
    EXPECT_NE(r.exitCode, 0);
    EXPECT_NE(r.output.find("--kv-cache must be full-f16, f32, f16 or bf16, got 'fp16'"), std::string::npos) << r.output;
    r = run("--help");
    EXPECT_EQ(r.exitCode, 0);
    EXPECT_NE(r.output.find("--dump-logits"), std::string::npos);
    EXPECT_NE(r.output.find("f16 (default: every layer in fp16)"), std::string::npos) << r.output;
}
