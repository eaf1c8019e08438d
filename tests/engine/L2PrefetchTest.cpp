// The plan of the weights a sliding layer's cluster attention asks the L2 for
// (kernels/cuda/L2Prefetch.h, OpenOptions::attentionWarmL2Megabytes): host arithmetic only, over
// fake addresses that are never dereferenced.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>

#include "../../kernels/cuda/L2Prefetch.h"

namespace {

using gemma::cuda::kL2WarmRanges;
using gemma::cuda::L2Range;
using gemma::cuda::WeightArrays;

const void* at(std::uintptr_t address) { return reinterpret_cast<const void*>(address); }
std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

// A 12b sliding layer's arrays: o 3840 × 4096, gate and up 15360 × 3840 (codes in/2 bytes a row,
// one bf16 scale per 128 inputs), at aligned fake addresses, the scales of `up` misaligned by 4.
WeightArrays o() { return {at(0x100000000), 3840u * 2048u, at(0x200000000), 3840u * 32u * 2u}; }
WeightArrays gate() { return {at(0x300000000), 15360u * 1920u, at(0x400000000), 15360u * 30u * 2u}; }
WeightArrays up() { return {at(0x500000000), 15360u * 1920u, at(0x600000004), 15360u * 30u * 2u}; }

std::size_t total(const L2Range (&r)[kL2WarmRanges]) {
    std::size_t sum = 0;
    for (const L2Range& x : r) sum += x.bytes;
    return sum;
}

// Every non-empty range lies inside [start, start + bytes) of its array and starts 16-byte aligned.
void expectInside(const L2Range& r, const void* start, std::size_t bytes) {
    if (r.bytes == 0) return;
    EXPECT_EQ(address(r.data) % 16, 0u);
    EXPECT_GE(address(r.data), address(start));
    EXPECT_LE(address(r.data) + r.bytes, address(start) + bytes);
}
void expectAllInside(const L2Range (&r)[kL2WarmRanges]) {
    const WeightArrays arrays[3] = {o(), gate(), up()};
    for (int k = 0; k < 3; ++k) {
        expectInside(r[2 * k], arrays[k].codes, arrays[k].codeBytes);
        expectInside(r[2 * k + 1], arrays[k].scales, arrays[k].scaleBytes);
    }
}

TEST(L2Prefetch, NoBudgetAsksForNothing) {
    L2Range r[kL2WarmRanges];
    r[3] = {at(0x700000000), 4096};  // stale entries are cleared
    gemma::cuda::planNextWeights(0, o(), gate(), up(), r);
    EXPECT_EQ(total(r), 0u);
    for (const L2Range& x : r) EXPECT_EQ(x.data, nullptr);
}

TEST(L2Prefetch, OProjectionFirstThenGateAndUpEvenly) {
    L2Range r[kL2WarmRanges];
    const std::size_t budget = 24u << 20;
    gemma::cuda::planNextWeights(budget, o(), gate(), up(), r);
    // o whole, codes and scales.
    EXPECT_EQ(r[0].data, o().codes);
    EXPECT_EQ(r[0].bytes, o().codeBytes);
    EXPECT_EQ(r[1].data, o().scales);
    EXPECT_EQ(r[1].bytes, o().scaleBytes);
    // The rest split evenly: gate and up each within 32 bytes (rounding, up's alignment) of half.
    const std::size_t half = (budget - o().codeBytes - o().scaleBytes) / 2;
    EXPECT_LE(r[2].bytes + r[3].bytes, half);
    EXPECT_GE(r[2].bytes + r[3].bytes + 32, half);
    EXPECT_LE(r[4].bytes + r[5].bytes, half);
    EXPECT_GE(r[4].bytes + r[5].bytes + 32, half);
    // The same leading share of codes and scales (the same tiles): ratios equal to 1e-3.
    const double codeShare = static_cast<double>(r[2].bytes) / gate().codeBytes;
    const double scaleShare = static_cast<double>(r[3].bytes) / gate().scaleBytes;
    EXPECT_NEAR(codeShare, scaleShare, 1e-3);
    EXPECT_GT(codeShare, 0.1);
    EXPECT_LT(codeShare, 0.3);
    // Gate and up from their starts; up's scales from the first aligned address.
    EXPECT_EQ(r[2].data, gate().codes);
    EXPECT_EQ(r[4].data, up().codes);
    EXPECT_EQ(address(r[5].data), address(up().scales) + 12);
    EXPECT_LE(total(r), budget);
    expectAllInside(r);
}

TEST(L2Prefetch, BudgetBelowTheOProjectionTakesItsLeadingShare) {
    L2Range r[kL2WarmRanges];
    const std::size_t budget = 4u << 20;  // about half of o's 8.1 MB
    gemma::cuda::planNextWeights(budget, o(), gate(), up(), r);
    EXPECT_LE(r[0].bytes + r[1].bytes, budget);
    EXPECT_GE(r[0].bytes + r[1].bytes + 16, budget);
    EXPECT_NEAR(static_cast<double>(r[0].bytes) / o().codeBytes, static_cast<double>(r[1].bytes) / o().scaleBytes, 1e-3);
    for (int k = 2; k < kL2WarmRanges; ++k) EXPECT_EQ(r[k].bytes, 0u);
    expectAllInside(r);
}

TEST(L2Prefetch, BudgetBeyondEverythingStopsAtTheArrays) {
    L2Range r[kL2WarmRanges];
    gemma::cuda::planNextWeights(std::size_t{1} << 40, o(), gate(), up(), r);
    EXPECT_EQ(r[0].bytes, o().codeBytes);
    EXPECT_EQ(r[2].bytes, gate().codeBytes);
    EXPECT_EQ(r[3].bytes, gate().scaleBytes);
    EXPECT_EQ(r[4].bytes, up().codeBytes);
    EXPECT_EQ(r[5].bytes, up().scaleBytes - 12);  // from the first aligned address to the end
    expectAllInside(r);
    EXPECT_TRUE(gemma::cuda::l2RangesValid(r));
}

TEST(L2Prefetch, MissingWeightsAndMisalignedRangesAreHandled) {
    L2Range r[kL2WarmRanges];
    gemma::cuda::planNextWeights(24u << 20, WeightArrays{}, gate(), up(), r);  // no o: all to gate and up
    EXPECT_EQ(r[0].bytes, 0u);
    EXPECT_EQ(r[1].bytes, 0u);
    EXPECT_GT(r[2].bytes, 11u << 20);
    // A range shorter than its distance to the next 16-byte boundary is empty.
    const L2Range tiny = gemma::cuda::alignedL2Range(at(0x1001), 10);
    EXPECT_EQ(tiny.data, nullptr);
    EXPECT_EQ(tiny.bytes, 0u);
    // The launchers' test: misaligned or too large ranges refused, empty ones ignored.
    L2Range bad[kL2WarmRanges];
    bad[1] = {at(0x1008), 4096};
    EXPECT_FALSE(gemma::cuda::l2RangesValid(bad));
    bad[1] = {at(0x1000), std::size_t{1} << 35};  // 2^31 units: the first count refused
    EXPECT_FALSE(gemma::cuda::l2RangesValid(bad));
    bad[1] = {at(0x1000), (std::size_t{1} << 35) - 16};
    EXPECT_TRUE(gemma::cuda::l2RangesValid(bad));
    bad[1] = {at(0x1008), 8};  // below one unit: never asked for
    EXPECT_TRUE(gemma::cuda::l2RangesValid(bad));
}

}  // namespace
