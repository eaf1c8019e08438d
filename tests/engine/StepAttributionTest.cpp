// Tests for the overlap-aware attribution of a step's kernel timeline (engine/src/StepAttribution.h):
// each instant covered by kernels is charged once, to the earliest-started kernel running then.
// Plain C++, no GPU.
#include "StepAttribution.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace gemma {
namespace {

// Nanosecond figures in these tests are far below 2^53, so ns / 1e6 is as exact as a double allows;
// a tolerance of a thousandth of a nanosecond only absorbs the division's rounding.
constexpr double kTolMs = 1e-9;

double ms(std::uint64_t ns) { return static_cast<double>(ns) / 1e6; }

void expectBuckets(const StepAttribution& a, const std::vector<std::uint64_t>& expectedNs,
                   const std::vector<int>& expectedLaunches) {
    ASSERT_EQ(a.bucketMs.size(), expectedNs.size());
    ASSERT_EQ(a.launches.size(), expectedLaunches.size());
    for (std::size_t b = 0; b < expectedNs.size(); ++b) {
        EXPECT_NEAR(a.bucketMs[b], ms(expectedNs[b]), kTolMs) << "bucket " << b;
        EXPECT_EQ(a.launches[b], expectedLaunches[b]) << "bucket " << b;
    }
}

double sum(const std::vector<double>& values) {
    double total = 0;
    for (const double v : values) total += v;
    return total;
}

TEST(StepAttribution, DisjointKernelsKeepTheirWholeIntervals) {
    const std::vector<TimedKernel> kernels = {{0, 1000, 3000}, {1, 5000, 5500}, {0, 6000, 6250}};
    const StepAttribution a = attributeKernels(kernels, 2);
    expectBuckets(a, {2250, 500}, {2, 1});
    EXPECT_NEAR(a.busyMs, ms(2750), kTolMs);
    EXPECT_NEAR(a.firstStartToLastEndMs, ms(5250), kTolMs);
    EXPECT_EQ(a.ignored, 0);
}

TEST(StepAttribution, PdlSuccessorIsChargedOnlyAfterItsPredecessorEnds) {
    // B launches early (programmatic dependent launch) and waits inside A's tail.
    const std::vector<TimedKernel> kernels = {{0, 0, 1000}, {1, 600, 1500}};
    const StepAttribution a = attributeKernels(kernels, 2);
    expectBuckets(a, {1000, 500}, {1, 1});
    EXPECT_NEAR(a.busyMs, ms(1500), kTolMs);
    EXPECT_NEAR(a.firstStartToLastEndMs, ms(1500), kTolMs);
}

TEST(StepAttribution, KernelStartedLaterInsideAnotherIsChargedNothing) {
    const std::vector<TimedKernel> kernels = {{0, 100, 1100}, {1, 300, 800}};
    const StepAttribution a = attributeKernels(kernels, 2);
    expectBuckets(a, {1000, 0}, {1, 1});
    EXPECT_NEAR(a.busyMs, ms(1000), kTolMs);
}

TEST(StepAttribution, ThreeWayOverlapChargesEachInstantToTheEarliestStarter) {
    // A [0,100) B [50,300) C [80,200) D [250,400): A owns [0,100), B [100,300) (C runs wholly
    // under A then B), D only [300,400).
    const std::vector<TimedKernel> kernels = {{0, 0, 100}, {1, 50, 300}, {2, 80, 200}, {3, 250, 400}};
    const StepAttribution a = attributeKernels(kernels, 4);
    expectBuckets(a, {100, 200, 0, 100}, {1, 1, 1, 1});
    EXPECT_NEAR(a.busyMs, ms(400), kTolMs);
    EXPECT_NEAR(sum(a.bucketMs), a.busyMs, kTolMs);
}

TEST(StepAttribution, InputOrderDoesNotMatter) {
    std::vector<TimedKernel> kernels = {{0, 0, 100}, {1, 50, 300}, {2, 80, 200}, {3, 250, 400}, {1, 900, 950}};
    const StepAttribution sorted = attributeKernels(kernels, 4);
    std::reverse(kernels.begin(), kernels.end());
    const StepAttribution reversed = attributeKernels(kernels, 4);
    std::swap(kernels[0], kernels[3]);
    const StepAttribution shuffled = attributeKernels(kernels, 4);
    expectBuckets(reversed, {100, 250, 0, 100}, {1, 2, 1, 1});
    expectBuckets(shuffled, {100, 250, 0, 100}, {1, 2, 1, 1});
    for (int b = 0; b < 4; ++b) EXPECT_NEAR(sorted.bucketMs[b], reversed.bucketMs[b], kTolMs);
    EXPECT_NEAR(reversed.busyMs, ms(450), kTolMs);
    EXPECT_NEAR(reversed.firstStartToLastEndMs, ms(950), kTolMs);
}

TEST(StepAttribution, EqualStartsGoToTheKernelEarlierInTheInput) {
    const StepAttribution first = attributeKernels(std::vector<TimedKernel>{{0, 10, 510}, {1, 10, 810}}, 2);
    expectBuckets(first, {500, 300}, {1, 1});
    const StepAttribution swapped = attributeKernels(std::vector<TimedKernel>{{1, 10, 810}, {0, 10, 510}}, 2);
    expectBuckets(swapped, {0, 800}, {1, 1});
    EXPECT_NEAR(first.busyMs, swapped.busyMs, kTolMs);
}

TEST(StepAttribution, EmptyInputGivesZeroedBuckets) {
    const StepAttribution a = attributeKernels({}, 3);
    expectBuckets(a, {0, 0, 0}, {0, 0, 0});
    EXPECT_EQ(a.busyMs, 0.0);
    EXPECT_EQ(a.firstStartToLastEndMs, 0.0);
    EXPECT_EQ(a.ignored, 0);
}

TEST(StepAttribution, ZeroLengthAndReversedKernelsCountAsLaunchesWithNoTime) {
    // [200,200) is zero-length; 700 → 650 ends before it starts and counts as zero-length at 700.
    const std::vector<TimedKernel> kernels = {{0, 100, 300}, {1, 200, 200}, {2, 700, 650}};
    const StepAttribution a = attributeKernels(kernels, 3);
    expectBuckets(a, {200, 0, 0}, {1, 1, 1});
    EXPECT_NEAR(a.busyMs, ms(200), kTolMs);
    EXPECT_NEAR(a.firstStartToLastEndMs, ms(600), kTolMs);  // 100 → 700
    // A reversed record must not shadow a kernel that starts after its start.
    const StepAttribution b = attributeKernels(std::vector<TimedKernel>{{0, 100, 50}, {1, 120, 220}}, 2);
    expectBuckets(b, {0, 100}, {1, 1});
}

TEST(StepAttribution, OutOfRangeBucketsAreLeftOutEntirely) {
    // The ignored kernel starts first and spans everything; it must not shadow the others.
    const std::vector<TimedKernel> kernels = {{5, 0, 10000}, {-1, 0, 10000}, {0, 500, 800}, {1, 700, 900}};
    const StepAttribution a = attributeKernels(kernels, 2);
    EXPECT_EQ(a.ignored, 2);
    expectBuckets(a, {300, 100}, {1, 1});
    EXPECT_NEAR(a.busyMs, ms(400), kTolMs);
    EXPECT_NEAR(a.firstStartToLastEndMs, ms(400), kTolMs);

    const StepAttribution none = attributeKernels(kernels, 0);
    EXPECT_TRUE(none.bucketMs.empty());
    EXPECT_TRUE(none.launches.empty());
    EXPECT_EQ(none.ignored, 4);
    EXPECT_EQ(none.busyMs, 0.0);
}

// The rule evaluated literally, one integer nanosecond at a time: at each instant t the kernels
// running are those with start <= t < end; the one with the least (start, index) gets t.
struct BruteForce {
    std::vector<std::uint64_t> bucketNs;
    std::uint64_t unionNs = 0;
};

BruteForce bruteForce(const std::vector<TimedKernel>& kernels, int bucketCount, std::uint64_t horizon) {
    BruteForce result;
    result.bucketNs.assign(static_cast<std::size_t>(bucketCount), 0);
    for (std::uint64_t t = 0; t < horizon; ++t) {
        const TimedKernel* owner = nullptr;
        for (const TimedKernel& k : kernels) {
            if (k.startNs <= t && t < k.endNs && (!owner || k.startNs < owner->startNs)) owner = &k;
        }
        if (!owner) continue;
        ++result.bucketNs[static_cast<std::size_t>(owner->bucket)];
        ++result.unionNs;
    }
    return result;
}

TEST(StepAttribution, RandomTimelinesMatchABruteForceReference) {
    constexpr int kBuckets = 6;
    constexpr std::uint64_t kHorizon = 6000;
    std::mt19937 rng(20261130);
    for (int trial = 0; trial < 40; ++trial) {
        // Sparse to dense timelines; about a third of the kernels reuse an earlier kernel's start,
        // so ties happen where no earlier starter covers them and the tie-break decides.
        std::uniform_int_distribution<int> count(1, 80);
        std::uniform_int_distribution<int> bucket(0, kBuckets - 1);
        std::uniform_int_distribution<std::uint64_t> start(0, trial % 2 == 0 ? 5000 : 1500);
        std::uniform_int_distribution<std::uint64_t> length(0, 400);
        std::uniform_int_distribution<int> die(0, 9);
        std::vector<TimedKernel> kernels(static_cast<std::size_t>(count(rng)));
        std::vector<int> launches(kBuckets, 0);
        for (std::size_t i = 0; i < kernels.size(); ++i) {
            TimedKernel& k = kernels[i];
            k.bucket = bucket(rng);
            k.startNs = i > 0 && die(rng) < 3 ? kernels[rng() % i].startNs : start(rng);
            k.endNs = k.startNs + length(rng);
            if (die(rng) == 0 && k.startNs > 0) k.endNs = k.startNs - 1;  // malformed
            ++launches[static_cast<std::size_t>(k.bucket)];
        }
        const StepAttribution a = attributeKernels(kernels, kBuckets);
        const BruteForce expected = bruteForce(kernels, kBuckets, kHorizon);
        for (int b = 0; b < kBuckets; ++b) {
            EXPECT_NEAR(a.bucketMs[static_cast<std::size_t>(b)], ms(expected.bucketNs[static_cast<std::size_t>(b)]), kTolMs)
                << "trial " << trial << ", bucket " << b;
            EXPECT_EQ(a.launches[static_cast<std::size_t>(b)], launches[static_cast<std::size_t>(b)]);
        }
        EXPECT_NEAR(a.busyMs, ms(expected.unionNs), kTolMs) << "trial " << trial;
        EXPECT_NEAR(sum(a.bucketMs), a.busyMs, kTolMs) << "trial " << trial;
        EXPECT_LE(a.busyMs, a.firstStartToLastEndMs + kTolMs) << "trial " << trial;
    }
}

}  // namespace
}  // namespace gemma
