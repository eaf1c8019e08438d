// Overlap-aware attribution of a step's kernel timeline to buckets (StepAttribution.h).
//
// Kernels are visited in order of (start, position in the input). When kernel k is visited, every
// kernel visited before it started no later than k, so their intervals' parts after k's start
// merge into one interval [start_k, coveredUntil), where coveredUntil is the latest end seen so
// far. The instants of k that belong to k under the earliest-start rule are exactly
// [max(start_k, coveredUntil), end_k): before coveredUntil an earlier starter is still running,
// after it none is, and every later-visited kernel started no earlier than k. Summing those
// pieces charges each instant of the union once.
#include "StepAttribution.h"

#include <algorithm>
#include <cstddef>
#include <utility>

namespace gemma {

namespace {

double nsToMs(std::uint64_t ns) { return static_cast<double>(ns) / 1e6; }

// The kernels' indices in order of (start, position in the input): a strict total order.
std::vector<std::size_t> startOrder(std::span<const TimedKernel> kernels, std::vector<std::size_t> order) {
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        return kernels[a].startNs != kernels[b].startNs ? kernels[a].startNs < kernels[b].startNs : a < b;
    });
    return order;
}

}  // namespace

StepAttribution attributeKernels(std::span<const TimedKernel> kernels, int bucketCount) {
    const std::size_t buckets = bucketCount > 0 ? static_cast<std::size_t>(bucketCount) : 0;
    StepAttribution result;
    result.bucketMs.assign(buckets, 0.0);
    result.launches.assign(buckets, 0);

    std::vector<std::size_t> order;
    order.reserve(kernels.size());
    for (std::size_t i = 0; i < kernels.size(); ++i) {
        const int bucket = kernels[i].bucket;
        if (bucket >= 0 && static_cast<std::size_t>(bucket) < buckets) order.push_back(i);
        else ++result.ignored;
    }
    if (order.empty()) return result;
    // (start, position) is a strict total order, so the result does not depend on the sort.
    order = startOrder(kernels, std::move(order));

    std::vector<std::uint64_t> bucketNs(buckets, 0);
    const std::uint64_t firstStart = kernels[order.front()].startNs;
    std::uint64_t coveredUntil = firstStart;  // latest end among the kernels visited so far
    std::uint64_t lastEnd = firstStart;
    std::uint64_t busyNs = 0;
    for (const std::size_t i : order) {
        const TimedKernel& kernel = kernels[i];
        const auto bucket = static_cast<std::size_t>(kernel.bucket);
        const std::uint64_t end = std::max(kernel.endNs, kernel.startNs);  // end < start: zero-length
        ++result.launches[bucket];
        lastEnd = std::max(lastEnd, end);
        const std::uint64_t from = std::max(kernel.startNs, coveredUntil);
        if (end <= from) continue;
        bucketNs[bucket] += end - from;
        busyNs += end - from;
        coveredUntil = end;
    }
    for (std::size_t b = 0; b < buckets; ++b) result.bucketMs[b] = nsToMs(bucketNs[b]);
    result.busyMs = nsToMs(busyNs);
    result.firstStartToLastEndMs = nsToMs(lastEnd - firstStart);
    return result;
}

std::vector<SequencePosition> stepSequence(std::span<const TimedKernel> kernels, int steps) {
    if (steps <= 0 || kernels.empty() || kernels.size() % static_cast<std::size_t>(steps) != 0) return {};
    std::vector<std::size_t> all(kernels.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
    const std::vector<std::size_t> order = startOrder(kernels, std::move(all));
    const std::size_t perStep = kernels.size() / static_cast<std::size_t>(steps);

    // The kernels in start order, each under its position in the step: attributeKernels then
    // charges them by its rule (the same order, so the same ties), per position over all steps.
    std::vector<TimedKernel> byPosition(kernels.size());
    std::vector<SequencePosition> positions(perStep);
    std::vector<double> startNs(perStep, 0.0), endNs(perStep, 0.0);
    for (std::size_t i = 0; i < order.size(); ++i) {
        const std::size_t k = i % perStep;
        const TimedKernel& kernel = kernels[order[i]];
        if (i < perStep) positions[k].kernel = kernel.bucket;
        else if (positions[k].kernel != kernel.bucket) return {};
        const std::uint64_t stepStart = kernels[order[i - k]].startNs;
        const std::uint64_t end = std::max(kernel.endNs, kernel.startNs);
        startNs[k] += static_cast<double>(kernel.startNs - stepStart);
        endNs[k] += static_cast<double>(end - stepStart);
        byPosition[i] = {static_cast<int>(k), kernel.startNs, kernel.endNs};
    }
    const StepAttribution charged = attributeKernels(byPosition, static_cast<int>(perStep));
    const double perStepUs = 1e3 * steps;  // ns summed over the steps → mean µs
    for (std::size_t k = 0; k < perStep; ++k) {
        positions[k].startUs = startNs[k] / perStepUs;
        positions[k].endUs = endNs[k] / perStepUs;
        positions[k].chargedUs = 1e3 * charged.bucketMs[k] / steps;
    }
    return positions;
}

}  // namespace gemma
