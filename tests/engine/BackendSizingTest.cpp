// Backend.h's sizing rules: the sliding rings' slots per prefill chunk, the KV cache's bytes, and
// the GEMM prefill chunk a GPU falls back to when its free memory does not hold the asked one.
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "Backend.h"

namespace {

// A memory model in the shape the CUDA backend's is: a fixed part plus a part per chunk row.
struct Model {
    std::size_t fixed = 0, perRow = 0;
    std::vector<int>* asked = nullptr;  // every chunk the rule asked about, in order
    std::size_t operator()(int chunk) const {
        if (asked) asked->push_back(chunk);
        return fixed + perRow * static_cast<std::size_t>(chunk);
    }
};

}  // namespace

TEST(BackendSizing, SlidingRingsHoldTheWindowPlusOneChunk) {
    EXPECT_EQ(gemma::kvCacheSlots(true, 1024, 32768, 2048), 1024 + 2048 - 1);
    EXPECT_EQ(gemma::kvCacheSlots(true, 1024, 512, 2048), 512);  // never more than the allocation
    EXPECT_EQ(gemma::kvCacheSlots(false, 1024, 32768, 2048), 32768);
    EXPECT_EQ(gemma::kvCacheSlots(true, 1024, 32768), 1024 + gemma::kPrefillChunk - 1);
}

TEST(BackendSizing, KvCacheBytesCountOwnedCachesAtTheirSlots) {
    gemma::ModelConfig c;
    c.slidingWindow = 512;
    gemma::LayerGeometry sliding, full, shared;
    sliding.type = gemma::LayerType::Sliding;
    sliding.kvHeads = 2;
    sliding.headDim = 64;
    full.type = gemma::LayerType::Full;
    full.kvHeads = 1;
    full.headDim = 128;
    shared = full;
    shared.kvShared = true;  // reads another layer's cache: no bytes of its own
    c.layers = {sliding, full, shared};
    // Keys and values: 2 × slots × heads × dim × bytes; the sliding ring holds window + chunk − 1.
    const std::int64_t slidingBytes = 2 * (512 + 32 - 1) * 2 * 64 * 4, fullBytes = 2 * 4096 * 1 * 128 * 4;
    using gemma::KvCacheType;
    EXPECT_EQ(gemma::kvCacheBytes(c, 4096, 32, KvCacheType::F32), slidingBytes + fullBytes);
    EXPECT_EQ(2 * gemma::kvCacheBytes(c, 4096, 32, KvCacheType::Bf16), slidingBytes + fullBytes);
    EXPECT_EQ(2 * gemma::kvCacheBytes(c, 4096, 32, KvCacheType::F16), slidingBytes + fullBytes);
    // The default: the full layer's cache in 2-byte values, the sliding ring in 4-byte ones.
    EXPECT_EQ(gemma::kvCacheBytes(c, 4096, 32, KvCacheType::FullF16), slidingBytes + fullBytes / 2);
    // An allocation below the window caps the ring too.
    EXPECT_EQ(gemma::kvCacheBytes(c, 256, 2048, KvCacheType::F32), 2 * 256 * 2 * 64 * 4 + 2 * 256 * 1 * 128 * 4);
}

TEST(BackendSizing, AskedChunkKeptWhenItFits) {
    std::vector<int> asked;
    const Model need{1000, 10, &asked};
    EXPECT_EQ(gemma::fitGemmPrefillChunk(2048, 1000 + 10 * 2048 + 100, 100, need), 2048);
    EXPECT_EQ(asked, (std::vector<int>{2048}));
}

TEST(BackendSizing, ChunkHalvedUntilItFits) {
    std::vector<int> asked;
    const Model need{1000, 10, &asked};
    // Room for 700 rows: 2048 and 1024 do not fit, 512 does.
    EXPECT_EQ(gemma::fitGemmPrefillChunk(2048, 1000 + 10 * 700, 0, need), 512);
    EXPECT_EQ(asked, (std::vector<int>{2048, 1024, 512}));
    // The headroom counts: with 3000 bytes of it, 512 rows no longer fit.
    EXPECT_EQ(gemma::fitGemmPrefillChunk(2048, 1000 + 10 * 700, 3000, Model{1000, 10}), 256);
}

TEST(BackendSizing, ChunkNeverBelowTheFloorNorAboveTheAsk) {
    // Nothing fits: the floor comes back and the caller refuses with its own message.
    EXPECT_EQ(gemma::fitGemmPrefillChunk(2048, 10, 0, Model{1000, 10}), gemma::kMinGemmPrefillChunk);
    // A non-power-of-two ask halves to the floor, not past it.
    EXPECT_EQ(gemma::fitGemmPrefillChunk(1500, 10, 0, Model{1000, 10}), gemma::kMinGemmPrefillChunk);
    // An ask at or below the floor is never changed, fitting or not.
    EXPECT_EQ(gemma::fitGemmPrefillChunk(128, 10, 0, Model{1000, 10}), 128);
    // Plenty of memory never raises a small ask.
    EXPECT_EQ(gemma::fitGemmPrefillChunk(300, 1u << 30, 0, Model{1000, 10}), 300);
}
