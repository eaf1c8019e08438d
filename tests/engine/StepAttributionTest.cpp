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

// ---- stepSequence ------------------------------------------------------------------------------

// Two steps of the sequence A, B, C (kernel ids 7, 3, 7), given shuffled. B starts before A ends
// (programmatic overlap) and step 2's A starts before step 1's C ends.
//   step 1: A [100, 300), B [250, 400), C [400, 500)
//   step 2: A [480, 700), B [690, 800), C [820, 900)
TEST(StepSequence, AveragesEachPositionOverTheSteps) {
    const std::vector<TimedKernel> kernels = {{3, 690, 800}, {7, 100, 300}, {7, 820, 900}, {7, 400, 500},
                                              {3, 250, 400}, {7, 480, 700}};
    const std::vector<SequencePosition> seq = stepSequence(kernels, 2);
    ASSERT_EQ(seq.size(), 3u);
    EXPECT_EQ(seq[0].kernel, 7);
    EXPECT_EQ(seq[1].kernel, 3);
    EXPECT_EQ(seq[2].kernel, 7);
    // Starts and ends after each step's first start (100 and 480), in µs.
    EXPECT_NEAR(seq[0].startUs, 0.0, 1e-12);
    EXPECT_NEAR(seq[0].endUs, (0.200 + 0.220) / 2, 1e-12);
    EXPECT_NEAR(seq[1].startUs, (0.150 + 0.210) / 2, 1e-12);
    EXPECT_NEAR(seq[1].endUs, (0.300 + 0.320) / 2, 1e-12);
    EXPECT_NEAR(seq[2].startUs, (0.300 + 0.340) / 2, 1e-12);
    EXPECT_NEAR(seq[2].endUs, (0.400 + 0.420) / 2, 1e-12);
    // Charged: step 1 A 200, B 100 (from 300), C 100; step 2 A 200 (from 500: C owns 480-500),
    // B 100 (from 700), C 80.
    EXPECT_NEAR(seq[0].chargedUs, (0.200 + 0.200) / 2, 1e-12);
    EXPECT_NEAR(seq[1].chargedUs, (0.100 + 0.100) / 2, 1e-12);
    EXPECT_NEAR(seq[2].chargedUs, (0.100 + 0.080) / 2, 1e-12);
}

TEST(StepSequence, ChargedTimeSumsToTheBusyTimePerStep) {
    std::mt19937 rng(20261202);
    std::uniform_int_distribution<std::uint64_t> gap(0, 50), length(1, 120), overlap(0, 30);
    for (int trial = 0; trial < 20; ++trial) {
        const int steps = 1 + trial % 5;
        const int perStep = 1 + trial % 7;
        std::vector<TimedKernel> kernels;
        std::uint64_t t = 0;
        for (int s = 0; s < steps; ++s) {
            for (int k = 0; k < perStep; ++k) {
                // Strictly increasing starts, ends that may reach past the next start.
                t += 1 + gap(rng);
                kernels.push_back({k % 3, t, t + length(rng) + overlap(rng)});
            }
        }
        const std::vector<SequencePosition> seq = stepSequence(kernels, steps);
        ASSERT_EQ(seq.size(), static_cast<std::size_t>(perStep)) << "trial " << trial;
        double chargedUs = 0;
        for (const auto& p : seq) chargedUs += p.chargedUs;
        const StepAttribution a = attributeKernels(kernels, 3);
        EXPECT_NEAR(chargedUs * steps, 1e3 * a.busyMs, 1e-6) << "trial " << trial;
    }
}

TEST(StepSequence, RefusesTimelinesThatAreNotOneRepeatedSequence) {
    const std::vector<TimedKernel> five = {{1, 0, 10}, {2, 10, 20}, {1, 20, 30}, {2, 30, 40}, {1, 40, 50}};
    EXPECT_TRUE(stepSequence(five, 2).empty());  // 5 kernels are not 2 equal steps
    const std::vector<TimedKernel> swapped = {{1, 0, 10}, {2, 10, 20}, {2, 20, 30}, {1, 30, 40}};
    EXPECT_TRUE(stepSequence(swapped, 2).empty());  // position 0 holds 1, then 2
    EXPECT_EQ(stepSequence(swapped, 1).size(), 4u);  // as one step it is a sequence
    EXPECT_TRUE(stepSequence(swapped, 0).empty());
    EXPECT_TRUE(stepSequence(std::vector<TimedKernel>{}, 3).empty());
}

}  // namespace
}  // namespace gemma
