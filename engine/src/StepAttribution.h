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

}  // namespace gemma
