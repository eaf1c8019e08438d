// Measurements gemma-bench takes beside the engine, in the same process and run (PERF.md):
// the read and copy bandwidth ceilings, the cuBLASLt BF16 GEMM rate, and per-shape kernel timings.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gemma::bench {

struct Ceilings {
    std::string gpu;
    double readGBs = 0.0;        // streaming read, bytes read / time
    double copyGBs = 0.0;        // device-to-device copy, (read + write) / time
    double bf16GemmTflops = 0.0; // cuBLASLt BF16 GEMM 8192³
    double probeBytes = 0.0;
};

struct KernelTiming {
    std::string name;   // e.g. "q_proj 4096x3840"
    std::int64_t out = 0, in = 0;
    double microseconds = 0.0;
    double bytes = 0.0;  // weights + scales + activations
    double gbs = 0.0;
};

// Every measurement runs after warm-up and reports the median of repeats (CUDA events).
bool measureCeilings(Ceilings& ceilings, std::string& error);
// FP4 matvec per distinct shape (gate/up fused where `geglu`), rotating weight copies past L2;
// `integerX` as OpenOptions::integerMatvec (false: x as fp16 hi + lo), `tiled` as
// OpenOptions::tiledWeights (the weights are random bytes, so only the layout flag differs; shapes
// with out % 16 != 0 run in rows, as the engine keeps them).
bool timeFp4Matvec(std::int64_t out, std::int64_t in, bool geglu, bool integerX, bool tiled, KernelTiming& timing,
                   std::string& error);
// FP8 lm_head (vocab × hidden) with the softcap, in the form the engine runs (`persistent` as
// OpenOptions::persistentLmHead).
bool timeLmHead(std::int64_t vocab, std::int64_t hidden, bool persistent, KernelTiming& timing, std::string& error);

// The lm_head and the ceiling's streaming read over the same bytes, each launch alone after the
// GPU has idled `gapMs` (docs/PERFORMANCE.md version 21 step 6: inside a decode step the lm_head
// reads faster than in the back-to-back timing, perhaps from the idle headroom a step's duty
// cycle leaves). Both are timed by an event pair around one launch, so both count the host's
// launch latency alike; their ratio is the lm_head's share of the read rate under that duty cycle.
struct SpacedTiming {
    double gapMs = 0.0;
    double bytes = 0.0;          // the lm_head's codes (the read covers the same buffer)
    double lmHeadUs = 0.0;       // median of the spaced launches
    double readUs = 0.0;
    double percentOfRead() const { return 100.0 * readUs / lmHeadUs; }  // the lm_head's share of the spaced read rate
};
bool timeSpacedLmHead(std::int64_t vocab, std::int64_t hidden, bool persistent, double gapMs, SpacedTiming& timing, std::string& error);

}  // namespace gemma::bench
