// Phase clock: where one kernel's time goes, phase by phase, for measurement builds only
// (docs/PERFORMANCE.md version 23). A kernel marks the end of each phase with
// GEMMA_PHASE_MARK(i) (i >= 1) and its last one with GEMMA_PHASE_END(i), after
// GEMMA_PHASE_START() at its entry. In a build with GEMMA_PHASE_CLOCK defined (the harness
// targets `measure_attention_phases` and `measure_matvec_phases`, never the engine) thread 0 of
// each block adds the SM cycles since its previous mark to gClock's sum for that mark, so phases
// inside loops add up over their iterations and launches. Without the define every mark is
// nothing at all, so production code and its registers are unchanged; with it, thread 0 keeps two
// 64-bit values in registers. A block that returns before its final mark has its phases counted
// but not its launch.
//
// Contract: marks are taken by thread 0 only, so a phase ending on a block barrier is timed for the
// whole block; a phase thread 0 does not take part in ends when thread 0 passes the mark.
#pragma once

#ifdef GEMMA_PHASE_CLOCK
namespace gemma::cuda::phaseclock {

constexpr int kMarks = 16;     // mark indices 0..15
constexpr int kBlocks = 2048;  // blocks of a grid that are timed (linear index); the rest are not

// Per block, summed over launches: SM cycles per mark since the previous mark (their sum is the
// block's span in cycles); globaltimer nanoseconds from the start to the final mark (with the
// cycles of the same span, this converts cycles to nanoseconds at the clock the SM actually ran);
// the launches counted; the latest launch's start, end and SM (%smid: where the block scheduler
// placed the block, which no launch parameter decides).
struct Clock {
    unsigned long long cycles[kBlocks][kMarks];
    unsigned long long spanNs[kBlocks];
    unsigned long long launches[kBlocks];
    unsigned long long lastStartNs[kBlocks];
    unsigned long long lastEndNs[kBlocks];
    unsigned lastSm[kBlocks];
};
__device__ Clock gClock;

// Thread 0's clock between marks, in registers: no shared memory (a kernel that takes all of an
// SM's shared memory still launches) and no load on the path (the sums are fire-and-forget
// reductions into gClock).
struct State {
    unsigned long long last = 0;
    unsigned long long startNs = 0;
};

__device__ __forceinline__ unsigned long long globalNanoseconds() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ unsigned smId() {
    unsigned id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    return id;
}
__device__ __forceinline__ bool timedThread() { return threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0; }
__device__ __forceinline__ unsigned timedBlock() { return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z); }

__device__ __forceinline__ State start() {
    State s;
    if (timedThread()) {
        s.startNs = globalNanoseconds();
        s.last = clock64();
    }
    return s;
}

// Makes thread 0 wait until a loaded `value` has arrived, for a mark after it: a store of it
// (a store reads its data register, so it waits for the load; a plain move could be removed).
__device__ float gWaitSink;
__device__ __forceinline__ void waitFor(float value) {
    if (timedThread()) gWaitSink = value;
}

// `final`: the block's last mark of this launch.
__device__ __forceinline__ void mark(int index, State& s, bool final) {
    if (!timedThread() || timedBlock() >= static_cast<unsigned>(kBlocks)) return;
    const unsigned b = timedBlock();
    const unsigned long long now = clock64();
    atomicAdd(&gClock.cycles[b][index], now - s.last);
    s.last = now;
    if (final) {
        const unsigned long long endNs = globalNanoseconds();
        atomicAdd(&gClock.spanNs[b], endNs - s.startNs);
        atomicAdd(&gClock.launches[b], 1ull);
        gClock.lastStartNs[b] = s.startNs;
        gClock.lastEndNs[b] = endNs;
        gClock.lastSm[b] = smId();
    }
}

}  // namespace gemma::cuda::phaseclock
#define GEMMA_PHASE_START() ::gemma::cuda::phaseclock::State gemmaPhaseState = ::gemma::cuda::phaseclock::start()
#define GEMMA_PHASE_MARK(index) ::gemma::cuda::phaseclock::mark((index), gemmaPhaseState, false)
#define GEMMA_PHASE_END(index) ::gemma::cuda::phaseclock::mark((index), gemmaPhaseState, true)
#else
#define GEMMA_PHASE_START() ((void)0)
#define GEMMA_PHASE_MARK(index) ((void)0)
#define GEMMA_PHASE_END(index) ((void)0)
#endif
