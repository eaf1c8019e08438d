// How the batch-1 tensor-core FP4 matvec (kernels/cuda/Fp4Matvec.cu) shares a block's work among
// its warps. A block computes 16-row tiles; its k-th tile has `groups` items (one per 128-input
// group). The block's items, in order n = k·groups + G, are dealt round robin to its `warps` warps
// (warp w takes every n ≡ w mod warps), so the warps of a block get the same number of items to
// within one however `groups` divides. Dealt tile by tile from group 0 instead (before version 35
// of docs/PERFORMANCE.md), the 12b's 30 groups gave warps 0–5 four items of every tile and warps
// 6–7 three, and every tile waited for the fours. Where warps divides groups both deals are the
// same. Host and device (tests/engine/Fp4MatvecShareTest.cpp checks it on every CI run).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define GEMMA_MATVEC_SHARE_HD __host__ __device__
#else
#define GEMMA_MATVEC_SHARE_HD
#endif

namespace gemma::formats::matvecshare {

// Warp w's groups of the block's k-th tile: first, first + warps, ...; count of them (0 only
// when groups < warps).
struct WarpTileShare {
    int first;
    int count;
};

// warps: a power of two.
GEMMA_MATVEC_SHARE_HD constexpr WarpTileShare warpTileShare(int warp, int k, int groups, int warps) {
    // Unsigned: k·groups may wrap, and its residue mod warps (a power of two) survives the wrap.
    const int first = static_cast<int>((static_cast<unsigned>(warp) - static_cast<unsigned>(k) * static_cast<unsigned>(groups)) &
                                       static_cast<unsigned>(warps - 1));
    return {first, first < groups ? (groups - 1 - first) / warps + 1 : 0};
}

// Warp w's items over the block's `tiles` tiles: the sum of warpTileShare's counts.
GEMMA_MATVEC_SHARE_HD constexpr int warpItems(int warp, int tiles, int groups, int warps) {
    const std::int64_t dealt = static_cast<std::int64_t>(tiles) * groups;
    return dealt > warp ? static_cast<int>((dealt - 1 - warp) / warps + 1) : 0;
}

}  // namespace gemma::formats::matvecshare
