// Where a decode step's GPU time goes, from a per-kernel timeline (KernelTrace.h on CUDA builds).
// Engine-internal, plain C++ (no CUDA): built in every configuration, so its tests run in CI.
//
// Kernels of one step may overlap: with programmatic dependent launch a kernel starts while its
// predecessor drains, and may spin on griddepcontrol.wait until the predecessor ends. Every
// instant covered by at least one kernel is charged to exactly one kernel, the one that started
// earliest among those running at that instant: a predecessor owns its whole tail, and a successor
// is charged only from the moment every earlier-started kernel has ended. Hence
//   Σ bucketMs == busyMs == the measure of the union of the kernels' intervals <= firstStartToLastEndMs.
// The caller derives the host-side gap (wall time − busyMs); nothing here knows the wall time.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace gemma {

// One kernel execution: [startNs, endNs) on one clock (CUPTI's GPU timestamps, for instance).
struct TimedKernel {
    int bucket = 0;  // the caller's category, 0 <= bucket < bucketCount
    std::uint64_t startNs = 0;
    std::uint64_t endNs = 0;
};

struct StepAttribution {
    std::vector<double> bucketMs;  // [bucketCount]: time charged to each bucket
    std::vector<int> launches;     // [bucketCount]: kernels counted in each bucket (charged or not)
    double busyMs = 0;             // the measure of the union of the counted kernels' intervals
    double firstStartToLastEndMs = 0;  // earliest start to latest end of the counted kernels; 0 if none
    int ignored = 0;               // kernels left out because their bucket is outside [0, bucketCount)
};

// Attributes the kernels' time to their buckets (the rule at the top of this file). O(n log n).
//   * Input order is free. Equal start times are broken by position: the kernel earlier in
//     `kernels` counts as the earlier start, so it owns the shared time.
//   * A zero-length kernel (endNs == startNs) counts as a launch and is charged 0 ms; a kernel
//     with endNs < startNs is treated as zero-length at startNs.
//   * A kernel whose bucket is outside [0, bucketCount) is left out entirely: no time, no launch,
//     no part of busyMs or the span, and it shadows no other kernel; `ignored` counts it.
//     bucketCount <= 0 gives empty vectors and ignores every kernel.
StepAttribution attributeKernels(std::span<const TimedKernel> kernels, int bucketCount);

// One position of a repeated step's kernel sequence, averaged over the steps (stepSequence).
struct SequencePosition {
    int kernel = 0;         // the TimedKernel::bucket at this position (the same in every step)
    double startUs = 0.0;   // mean start after its step's first start
    double endUs = 0.0;     // mean end after its step's first start
    double chargedUs = 0.0; // mean time charged to it by the rule at the top of this file
};

// The timeline of `steps` runs of one kernel sequence (the decode graph replayed), position by
// position: the kernels, ordered by (start, position in the input) as attributeKernels orders
// them, are cut into `steps` runs of equal length. Time is charged over the whole timeline, so a
// step's first kernel is charged nothing while the previous step's last still runs, and the
// positions' chargedUs sum to attributeKernels' busyMs / steps (in µs). Empty when steps <= 0,
// when the kernel count is not a multiple of steps, or when a position holds different kernels in
// different steps (the steps did not run one sequence): the caller reports no sequence rather
// than a wrong one. Every bucket value counts (none is ignored).
std::vector<SequencePosition> stepSequence(std::span<const TimedKernel> kernels, int steps);

}  // namespace gemma
