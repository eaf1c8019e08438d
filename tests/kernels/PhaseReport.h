// Host side of the phase clock (kernels/cuda/PhaseClock.h), for the measurement build of a harness
// (-DGEMMA_PHASE_CLOCK): reset the sums, run launches, then one line per phase with the mean over
// blocks of its time per launch and the slowest block's. Information only, never a check.
#pragma once

#ifdef GEMMA_PHASE_CLOCK
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "HarnessCommon.h"
#include "PhaseClock.h"

namespace harness {

inline void phaseClockReset() {
    const auto zero = std::make_unique<gemma::cuda::phaseclock::Clock>();
    *zero = {};
    HCHECK(cudaMemcpyToSymbol(gemma::cuda::phaseclock::gClock, zero.get(), sizeof *zero));
}

// Where the block scheduler put the latest launch's blocks: how many SMs ran 1, 2, ... blocks, and
// per group the mean and latest time (from the launch's first block start) at which an SM's last
// block ended; then which blocks share an SM (a static split of tiles over blocks assumes block b
// shares with b + SMs). Tells whether SMs with fewer blocks finish early (a balance
// question) or whether the stream ends everywhere at once (docs/PERFORMANCE.md version 43 step 5).
inline std::vector<std::string> placementReport(const gemma::cuda::phaseclock::Clock& clock, const std::vector<int>& blocks,
                                                unsigned long long firstStart, int smTotal) {
    std::vector<std::string> lines;
    unsigned smCount = 0;
    for (const int b : blocks) smCount = std::max(smCount, clock.lastSm[b] + 1);
    std::vector<int> perSm(smCount, 0);
    std::vector<unsigned long long> smEnd(smCount, 0);
    for (const int b : blocks) {
        const unsigned sm = clock.lastSm[b];
        ++perSm[sm];
        smEnd[sm] = std::max(smEnd[sm], clock.lastEndNs[b] - firstStart);
    }
    int mostPerSm = 0;
    for (const int n : perSm) mostPerSm = std::max(mostPerSm, n);
    char line[240];
    for (int n = 1; n <= mostPerSm; ++n) {
        int sms = 0;
        double sum = 0;
        unsigned long long latest = 0;
        for (unsigned sm = 0; sm < smCount; ++sm)
            if (perSm[sm] == n) {
                ++sms;
                sum += static_cast<double>(smEnd[sm]);
                latest = std::max(latest, smEnd[sm]);
            }
        if (sms == 0) continue;
        std::snprintf(line, sizeof line, "  placement: %3d SMs ran %d block(s); their last block ended %8.0f ns mean, %8llu ns latest", sms, n,
                      sum / sms, latest);
        lines.emplace_back(line);
    }
    // %smid need not count 0..SMs-1 without gaps, so the two placements are told apart by which
    // blocks share an SM: b with b + SMs (one block per SM, then a second wave), or b with b + 1.
    const auto sharing = [&](int distance) {
        int pairs = 0, shared = 0;
        for (const int b : blocks) {
            const int other = b + distance;
            if (other >= gemma::cuda::phaseclock::kBlocks || clock.launches[other] == 0) continue;
            ++pairs;
            shared += clock.lastSm[other] == clock.lastSm[b] ? 1 : 0;
        }
        return std::make_pair(shared, pairs);
    };
    const auto [wave, wavePairs] = sharing(smTotal);
    const auto [next, nextPairs] = sharing(1);
    std::snprintf(line, sizeof line, "  placement: blocks b and b + %d on one SM: %d of %d pairs; b and b + 1: %d of %d", smTotal, wave, wavePairs, next,
                  nextPairs);
    lines.emplace_back(line);
    return lines;
}

// names[i]: mark i's phase (index 0, the kernel's entry, has none; an empty name = unused mark).
// Lines: per phase, mean and slowest block in ns per launch; the block span (the start to the
// final mark) the same way; the latest launch's spread of block starts and its first start to last end.
inline std::vector<std::string> phaseClockReport(const std::vector<std::string>& names) {
    namespace pc = gemma::cuda::phaseclock;
    const auto clock = std::make_unique<pc::Clock>();
    HCHECK(cudaMemcpyFromSymbol(clock.get(), pc::gClock, sizeof *clock));
    double spanNs = 0, spanCycles = 0;
    std::vector<int> blocks;
    for (int b = 0; b < pc::kBlocks; ++b)
        if (clock->launches[b] > 0) {
            blocks.push_back(b);
            spanNs += static_cast<double>(clock->spanNs[b]);
            for (int i = 1; i < pc::kMarks; ++i) spanCycles += static_cast<double>(clock->cycles[b][i]);
        }
    std::vector<std::string> lines;
    if (blocks.empty() || spanNs <= 0) {
        lines.emplace_back("phase clock: no block reached its final mark");
        return lines;
    }
    const double nsPerCycle = spanNs / spanCycles;
    char line[240];
    auto addLine = [&](const std::string& name, auto&& perBlockNs) {
        double sum = 0, worst = 0;
        for (const int b : blocks) {
            const double ns = perBlockNs(b);
            sum += ns;
            worst = std::max(worst, ns);
        }
        std::snprintf(line, sizeof line, "  %-28s %8.0f ns mean %8.0f ns slowest block", name.c_str(), sum / static_cast<double>(blocks.size()), worst);
        lines.emplace_back(line);
    };
    std::snprintf(line, sizeof line, "phase clock: %zu blocks, %.3f GHz SM clock, per launch:", blocks.size(), 1.0 / nsPerCycle);
    lines.emplace_back(line);
    for (int i = 1; i < pc::kMarks && i < static_cast<int>(names.size()); ++i) {
        if (names[static_cast<std::size_t>(i)].empty()) continue;
        addLine(names[static_cast<std::size_t>(i)], [&](int b) {
            return static_cast<double>(clock->cycles[b][i]) * nsPerCycle / static_cast<double>(clock->launches[b]);
        });
    }
    addLine("block span", [&](int b) { return static_cast<double>(clock->spanNs[b]) / static_cast<double>(clock->launches[b]); });
    unsigned long long firstStart = ~0ull, lastStart = 0, lastEnd = 0;
    for (const int b : blocks) {
        firstStart = std::min(firstStart, clock->lastStartNs[b]);
        lastStart = std::max(lastStart, clock->lastStartNs[b]);
        lastEnd = std::max(lastEnd, clock->lastEndNs[b]);
    }
    std::snprintf(line, sizeof line, "  latest launch: block starts spread %llu ns, first start to last end %llu ns (globaltimer)",
                  lastStart - firstStart, lastEnd - firstStart);
    lines.emplace_back(line);
    int device = 0, smTotal = 0;
    HCHECK(cudaGetDevice(&device));
    HCHECK(cudaDeviceGetAttribute(&smTotal, cudaDevAttrMultiProcessorCount, device));
    for (auto& placementLine : placementReport(*clock, blocks, firstStart, smTotal)) lines.push_back(std::move(placementLine));
    return lines;
}

// Runs `run` (launches of the instrumented kernels) on a zeroed clock, waits for them, and
// appends `title` (unless empty) and the report to `lines`.
template <typename Run>
void appendPhases(std::vector<std::string>& lines, const std::string& title, const std::vector<std::string>& names, Run&& run) {
    phaseClockReset();
    run();
    HCHECK(cudaDeviceSynchronize());
    if (!title.empty()) lines.push_back(title);
    for (auto& line : phaseClockReport(names)) lines.push_back(std::move(line));
}

}  // namespace harness
#endif
