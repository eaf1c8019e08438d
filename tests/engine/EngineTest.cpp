// Engine behaviour beyond parity: cancellation, the benchmark API, tokenizer-less packages, the
// bandwidth probe, the memory estimate.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <thread>

#include "Backend.h"
#include "Package.h"
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

// Greedy choices without logits wanted go through Backend::decodeGreedy between the timed steps;
// the ids, the stop reasons and which steps are timed must not depend on how the steps are split.
TEST_F(EngineFixture, GreedyChainMatchesTheHostPathAndTimesEveryNthStep) {
    std::vector<std::vector<std::int32_t>> runs;
    for (int every : {1, 0, 5}) {
        auto request = rawRequest(12);
        request.instrumentEvery = every;
        std::vector<bool> timed;
        auto stats = engine_->generate(request, [&](const gemma::TokenEvent& event) {
            timed.push_back(event.step.instrumented);
            EXPECT_GE(event.step.wallMs, 0.0);
            return true;
        });
        ASSERT_TRUE(stats) << stats.status().message();
        EXPECT_EQ(stats->generatedTokens, 12);
        EXPECT_EQ(stats->stopReason, gemma::StopReason::MaxTokens);
        ASSERT_EQ(timed.size(), 12u);
        for (std::size_t i = 0; i < timed.size(); ++i) {
            // Event 0 is the prefill's (always timed); event i > 0 is decode step i − 1.
            const bool want = i == 0 || (every > 0 && (i - 1) % static_cast<std::size_t>(every) == 0);
            EXPECT_EQ(timed[i], want) << "every " << every << ", event " << i;
        }
        runs.push_back(stats->tokens);
    }
    EXPECT_EQ(runs[0], runs[1]);
    EXPECT_EQ(runs[0], runs[2]);

    // A full context stops both paths after the same token: a 250-token prompt in 256 slots runs
    // decode steps at positions 250..255, so 7 ids come back.
    for (int every : {1, 0, 4}) {
        auto request = rawRequest(50);
        request.rawTokens.assign(250, 7);
        request.instrumentEvery = every;
        auto stats = engine_->generate(request, {});
        ASSERT_TRUE(stats) << stats.status().message();
        EXPECT_EQ(stats->stopReason, gemma::StopReason::ContextFull) << "every " << every;
        EXPECT_EQ(stats->generatedTokens, 7) << "every " << every;
    }
}

// Top-k sampling without logits wanted draws from the backend's best entries
// (Backend::decodeBest); with an onLogits callback it draws from whole rows. Same seed, same ids.
TEST_F(EngineFixture, TopKSamplingFromBestEntriesMatchesWholeRows) {
    for (const int topK : {1, 5, 64}) {
        auto request = rawRequest(16);
        request.sampling = gemma::SamplingParams{};
        request.sampling.topK = topK;
        request.sampling.temperature = 1.5f;  // a flatter distribution: more draws matter
        request.sampling.seed = 1234 + static_cast<std::uint64_t>(topK);
        auto fromBest = engine_->generate(request, {});
        int rows = 0;
        request.onLogits = [&](std::int32_t, const float*, std::int32_t) { ++rows; };
        auto fromRows = engine_->generate(request, {});
        ASSERT_TRUE(fromBest && fromRows);
        EXPECT_GT(rows, 16);  // the prompt's rows and every decode step's
        EXPECT_EQ(fromBest->tokens, fromRows->tokens) << "top-k " << topK;
        EXPECT_EQ(fromBest->generatedTokens, 16);
    }
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
    // Plain runs: the greedy chain, and the host-sampling path.
    for (bool host : {false, true}) {
        request.instrumented = false;
        request.hostSampling = host;
        auto plain = engine_->benchmarkDecode(request, {});
        ASSERT_TRUE(plain) << plain.status().message();
        EXPECT_EQ(plain->steps.size(), 5u);
        EXPECT_GT(plain->tokensPerSecond, 0.0);
        for (const auto& step : plain->steps) EXPECT_FALSE(step.instrumented);
    }
    request.contextAllocation = 8;  // positions do not fit
    EXPECT_EQ(engine_->benchmarkDecode(request, {}).status().code(), gemma::ErrorCode::InvalidArgument);
    // The engine's own allocation (256) is back: a 200-token prompt still fits.
    auto request2 = rawRequest(1);
    request2.rawTokens.assign(200, 7);
    EXPECT_TRUE(engine_->generate(request2, {}));
}

// benchmarkDecode runs an untimed warm pass before the timed one (one-time costs such as a CUDA
// graph's capture stay out of tok/s): progress reports every step of both passes, the warm one in
// the first half, and the result holds the timed pass's steps only.
TEST_F(EngineFixture, BenchmarkRunsAWarmPassBeforeTheTimedOne) {
    gemma::DecodeBenchmarkRequest request;
    request.contextAllocation = 128;
    request.promptTokens = 10;
    request.decodeTokens = 5;
    for (bool instrumented : {false, true}) {
        request.instrumented = instrumented;
        std::vector<double> fractions;
        auto result = engine_->benchmarkDecode(request, [&](double done, std::string_view) {
            fractions.push_back(done);
            return true;
        });
        ASSERT_TRUE(result) << result.status().message();
        EXPECT_EQ(result->steps.size(), 5u);
        ASSERT_EQ(fractions.size(), 10u);
        EXPECT_DOUBLE_EQ(fractions[4], 0.5);
        EXPECT_DOUBLE_EQ(fractions.back(), 1.0);
        for (std::size_t i = 1; i < fractions.size(); ++i) EXPECT_GT(fractions[i], fractions[i - 1]);
    }
    // Cancelling in the warm pass cancels the benchmark.
    int calls = 0;
    auto cancelled = engine_->benchmarkDecode(request, [&](double, std::string_view) { return ++calls < 2; });
    EXPECT_EQ(cancelled.status().code(), gemma::ErrorCode::Cancelled);
    EXPECT_EQ(calls, 2);
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

// Engine::estimateMemory reads the package header alone (the app shows it before loading): its
// weights are the package's tensors, its KV cache the layers' slots (Backend.h kvCacheSlots, the
// GPU's GEMM chunk lengthening the sliding rings) at the cache's element size (the CPU backend
// keeps fp32 whatever is asked; the CUDA backend's bf16 cache is half the size), and a missing or
// truncated package is an error, not a crash.
TEST(MemoryEstimate, FollowsThePackageAndTheCacheType) {
    ScratchDir dir("estimate");
    gemma::test::TinyCheckpoint::make(3).write(dir / "hf");
    const auto path = dir / "model.gemma";
    ASSERT_TRUE(gemma::quantizeCheckpoint(dir / "hf", path, {}));
    auto package = gemma::Package::open(path);
    ASSERT_TRUE(package) << package.status().message();
    std::int64_t tensorBytes = 0;
    for (const auto& [name, tensor] : package->tensors()) tensorBytes += static_cast<std::int64_t>(tensor.bytes + tensor.scaleBytes);
    const auto& c = package->config();
    // Sliding layers' values at elementBytes, full layers' at fullBytes (default: the same).
    const auto expectedKv = [&](int allocation, int chunk, int elementBytes, int fullBytes = 0) {
        std::int64_t bytes = 0;
        for (const auto& g : c.layers) {
            if (g.kvShared) continue;
            const bool sliding = g.type == gemma::LayerType::Sliding;
            bytes += 2 * gemma::kvCacheSlots(sliding, c.slidingWindow, allocation, chunk) * g.kvHeads * g.headDim *
                     (sliding || fullBytes == 0 ? elementBytes : fullBytes);
        }
        return bytes;
    };

    gemma::OpenOptions cpu{gemma::Device::Cpu, 256};
    const auto onCpu = gemma::Engine::estimateMemory(path, cpu);
    ASSERT_TRUE(onCpu) << onCpu.status().message();
    EXPECT_EQ(onCpu->weightBytes, tensorBytes);
    EXPECT_GT(onCpu->weightBytes, 0);
    EXPECT_LE(onCpu->weightBytes, static_cast<std::int64_t>(std::filesystem::file_size(path)));
    EXPECT_EQ(onCpu->kvCacheBytes, expectedKv(256, gemma::kPrefillChunk, 4));
    EXPECT_GT(onCpu->workspaceBytes, 0);
    EXPECT_EQ(onCpu->total(), onCpu->weightBytes + onCpu->kvCacheBytes + onCpu->workspaceBytes);
    cpu.kvCache = gemma::KvCacheType::Bf16;
    const auto onCpuBf16 = gemma::Engine::estimateMemory(path, cpu);
    ASSERT_TRUE(onCpuBf16);
    EXPECT_EQ(onCpuBf16->kvCacheBytes, onCpu->kvCacheBytes);

    gemma::OpenOptions gpu{gemma::Device::Cuda, 1024, gemma::KvCacheType::F32};
    const auto f32 = gemma::Engine::estimateMemory(path, gpu);
    ASSERT_TRUE(f32) << f32.status().message();
    EXPECT_EQ(f32->weightBytes, tensorBytes);
    EXPECT_EQ(f32->kvCacheBytes, expectedKv(1024, gpu.gemmPrefillChunk, 4));
    EXPECT_GT(f32->workspaceBytes, onCpu->workspaceBytes);  // the GEMM prefill's chunk and FP16 weights
    gpu.kvCache = gemma::KvCacheType::Bf16;
    const auto bf16 = gemma::Engine::estimateMemory(path, gpu);
    ASSERT_TRUE(bf16);
    EXPECT_EQ(bf16->kvCacheBytes, expectedKv(1024, gpu.gemmPrefillChunk, 2));
    EXPECT_EQ(2 * bf16->kvCacheBytes, f32->kvCacheBytes);
    EXPECT_EQ(bf16->workspaceBytes, f32->workspaceBytes);
    ASSERT_EQ(gemma::OpenOptions{}.kvCache, gemma::KvCacheType::F16);  // the default: every layer in fp16
    gpu.kvCache = gemma::OpenOptions{}.kvCache;
    const auto defaults = gemma::Engine::estimateMemory(path, gpu);
    ASSERT_TRUE(defaults);
    EXPECT_EQ(defaults->kvCacheBytes, bf16->kvCacheBytes);  // two bytes a value in every layer, as bf16
    gpu.kvCache = gemma::KvCacheType::FullF16;  // fp16 in the full layers, f32 in the sliding ones
    const auto fullF16 = gemma::Engine::estimateMemory(path, gpu);
    ASSERT_TRUE(fullF16);
    EXPECT_EQ(fullF16->kvCacheBytes, expectedKv(1024, gpu.gemmPrefillChunk, 4, 2));
    EXPECT_LT(fullF16->kvCacheBytes, f32->kvCacheBytes);
    EXPECT_GT(fullF16->kvCacheBytes, bf16->kvCacheBytes);  // the tiny model has sliding and full layers
    gpu.kvCache = gemma::KvCacheType::Bf16;
    gpu.contextAllocation = 4096;  // a longer allocation grows the cache alone
    const auto longer = gemma::Engine::estimateMemory(path, gpu);
    ASSERT_TRUE(longer);
    EXPECT_GT(longer->kvCacheBytes, bf16->kvCacheBytes);
    EXPECT_EQ(longer->kvCacheBytes, expectedKv(4096, gpu.gemmPrefillChunk, 2));
    EXPECT_EQ(longer->weightBytes, bf16->weightBytes);

    const auto missing = gemma::Engine::estimateMemory(dir / "missing.gemma", gpu);
    ASSERT_FALSE(missing);
    EXPECT_EQ(missing.status().code(), gemma::ErrorCode::Io);
    const std::string bytes = gemma::test::readFile(path);
    gemma::test::writeFile(dir / "truncated.gemma", bytes.substr(0, bytes.size() / 3));
    const auto truncated = gemma::Engine::estimateMemory(dir / "truncated.gemma", gpu);
    ASSERT_FALSE(truncated);
    EXPECT_EQ(truncated.status().code(), gemma::ErrorCode::InvalidFile);
    EXPECT_FALSE(truncated.status().message().empty());
}

// The command-line spellings of the KV-cache types round-trip; anything else is refused and
// leaves the type as it was.
TEST(KvCacheType, NamesRoundTripAndUnknownNamesAreRefused) {
    using gemma::KvCacheType;
    for (const KvCacheType t : {KvCacheType::FullF16, KvCacheType::F32, KvCacheType::F16, KvCacheType::Bf16}) {
        KvCacheType parsed = t == KvCacheType::F32 ? KvCacheType::Bf16 : KvCacheType::F32;
        EXPECT_TRUE(gemma::parseKvCacheType(gemma::kvCacheTypeName(t), parsed)) << gemma::kvCacheTypeName(t);
        EXPECT_EQ(parsed, t);
    }
    KvCacheType kept = KvCacheType::F16;
    for (const char* bad : {"", "F32", "fp16", "full", "f16 "}) EXPECT_FALSE(gemma::parseKvCacheType(bad, kept)) << bad;
    EXPECT_EQ(kept, KvCacheType::F16);
    EXPECT_EQ(gemma::kvCacheElementBytes(KvCacheType::FullF16, true), 4);
    EXPECT_EQ(gemma::kvCacheElementBytes(KvCacheType::FullF16, false), 2);
    EXPECT_EQ(gemma::kvCacheElementBytes(KvCacheType::F32, false), 4);
    EXPECT_EQ(gemma::kvCacheElementBytes(KvCacheType::Bf16, true), 2);
}
