// Engine behaviour beyond parity: cancellation, the benchmark API, tokenizer-less packages, the
// bandwidth probe.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <thread>

#include "TestSupport.h"
#include "gemma/Config.h"
#include "gemma/Engine.h"
#include "gemma/Quantize.h"

using gemma::test::ScratchDir;

namespace {

class EngineFixture : public ::testing::Test {
protected:
    void SetUp() override {
        gemma::test::TinyCheckpoint::make(3).write(dir_ / "hf");
        ASSERT_TRUE(gemma::quantizeCheckpoint(dir_ / "hf", dir_ / "model.gemma", {}));
        auto engine = gemma::Engine::open(dir_ / "model.gemma", gemma::OpenOptions{gemma::Device::Cpu, 256});
        ASSERT_TRUE(engine) << engine.status().message();
        engine_ = std::move(engine.value());
    }
    ScratchDir dir_{"engine"};
    std::unique_ptr<gemma::Engine> engine_;
};

gemma::GenerationRequest rawRequest(int count) {
    gemma::GenerationRequest request;
    request.rawTokens = {2, 40, 41, 42};
    request.maxNewTokens = count;
    request.stopAtEndOfTurn = false;
    request.sampling.greedy = true;
    return request;
}

}  // namespace

TEST_F(EngineFixture, CallbackCanStopGeneration) {
    int seen = 0;
    auto stats = engine_->generate(rawRequest(50), [&](const gemma::TokenEvent&) { return ++seen < 5; });
    ASSERT_TRUE(stats) << stats.status().message();
    EXPECT_EQ(stats->stopReason, gemma::StopReason::Cancelled);
    EXPECT_EQ(stats->generatedTokens, 5);
}

TEST_F(EngineFixture, CancelFromAnotherThread) {
    std::atomic<int> seen{0};
    std::thread canceller([&] {
        while (seen.load() < 3) std::this_thread::yield();
        engine_->cancel();
    });
    auto stats = engine_->generate(rawRequest(200), [&](const gemma::TokenEvent&) {
        ++seen;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        return true;
    });
    canceller.join();
    ASSERT_TRUE(stats) << stats.status().message();
    EXPECT_EQ(stats->stopReason, gemma::StopReason::Cancelled);
    EXPECT_LT(stats->generatedTokens, 200);
    // The next request starts fresh: cancellation does not stick.
    auto again = engine_->generate(rawRequest(3), {});
    ASSERT_TRUE(again);
    EXPECT_EQ(again->generatedTokens, 3);
}

TEST_F(EngineFixture, GreedyIsDeterministicAndSeededSamplingRepeats) {
    auto a = engine_->generate(rawRequest(12), {});
    auto b = engine_->generate(rawRequest(12), {});
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->tokens, b->tokens);
    auto sampled = rawRequest(12);
    sampled.sampling = gemma::SamplingParams{};
    sampled.sampling.seed = 77;
    auto c = engine_->generate(sampled, {});
    auto d = engine_->generate(sampled, {});
    ASSERT_TRUE(c && d);
    EXPECT_EQ(c->tokens, d->tokens);
}

TEST_F(EngineFixture, BenchmarkDecodeRestoresTheAllocation) {
    gemma::DecodeBenchmarkRequest request;
    request.contextAllocation = 128;
    request.promptTokens = 10;
    request.decodeTokens = 5;
    auto result = engine_->benchmarkDecode(request, {});
    ASSERT_TRUE(result) << result.status().message();
    EXPECT_EQ(result->steps.size(), 5u);
    EXPECT_GT(result->tokensPerSecond, 0.0);
    for (const auto& step : result->steps) EXPECT_GT(step.bucketMs[static_cast<int>(gemma::Bucket::Fp4Matvec)], 0.0);
    request.contextAllocation = 8;  // positions do not fit
    EXPECT_EQ(engine_->benchmarkDecode(request, {}).status().code(), gemma::ErrorCode::InvalidArgument);
    // The engine's own allocation (256) is back: a 200-token prompt still fits.
    auto request2 = rawRequest(1);
    request2.rawTokens.assign(200, 7);
    EXPECT_TRUE(engine_->generate(request2, {}));
}

TEST_F(EngineFixture, InfoCarriesTheResolvedConfig) {
    auto config = gemma::ModelConfig::fromJson(engine_->info().configJson);
    ASSERT_TRUE(config) << config.status().message();
    EXPECT_EQ(config->numLayers, 3);
    EXPECT_EQ(config->headDim(2), 64);
    EXPECT_FALSE(config->isSliding(2));
}

TEST_F(EngineFixture, ReadBandwidthProbeGivesAPlausibleNumber) {
    auto gbs = engine_->measureReadBandwidth();
    ASSERT_TRUE(gbs) << gbs.status().message();
    EXPECT_TRUE(std::isfinite(*gbs));
    EXPECT_GT(*gbs, 0.1);     // any machine that runs the tests reads faster than 100 MB/s
    EXPECT_LT(*gbs, 20000.0);  // and slower than 20 TB/s from host memory
}

TEST(RandomPackage, PresetGeometryOpensAndRunsRawTokensOnly) {
    ScratchDir dir("random");
    auto config = gemma::ModelConfig::fromJson(gemma::test::TinyCheckpoint::make().configJson);
    ASSERT_TRUE(config);
    ASSERT_TRUE(gemma::writeRandomPackage(*config, dir / "random.gemma", 5));
    auto engine = gemma::Engine::open(dir / "random.gemma", gemma::OpenOptions{gemma::Device::Cpu, 64});
    ASSERT_TRUE(engine) << engine.status().message();
    EXPECT_FALSE((*engine)->info().hasTokenizer);
    auto stats = (*engine)->generate(rawRequest(4), {});
    ASSERT_TRUE(stats) << stats.status().message();
    EXPECT_EQ(stats->generatedTokens, 4);
    gemma::GenerationRequest chat;
    chat.messages = {{gemma::Role::User, "hello"}};
    EXPECT_EQ((*engine)->generate(chat, {}).status().code(), gemma::ErrorCode::Unsupported);
}
