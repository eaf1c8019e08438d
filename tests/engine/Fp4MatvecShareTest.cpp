// How the batch-1 tensor-core FP4 matvec shares a block's items among its warps
// (kernels/Fp4MatvecShare.h), on the host, every CI run: each warp's share of each tile against a
// brute-force round robin over the block's (tile, group) items, the per-warp totals against
// warpItems and within one of each other, the tile-by-tile deal where the warps divide the
// groups, and the shapes whose index products wrap an unsigned int. The GPU harness
// (test_fp4_matvec) checks the kernel's outputs under this share on every shape.
#include <gtest/gtest.h>

#include <kernels/Fp4MatvecShare.h>

#include <algorithm>
#include <vector>

namespace {

namespace share = gemma::formats::matvecshare;

// The groups warp w gets in tile k, dealt one item at a time round robin over n = k·groups + G.
std::vector<int> dealtGroups(int warp, int k, int groups, int warps) {
    std::vector<int> out;
    for (int G = 0; G < groups; ++G)
        if ((static_cast<long long>(k) * groups + G) % warps == warp) out.push_back(G);
    return out;
}

TEST(Fp4MatvecShare, MatchesTheRoundRobinAndBalancesTheWarps) {
    for (int warps : {1, 2, 4, 8, 16}) {
        for (int groups : {1, 2, 3, 5, 7, 8, 9, 12, 20, 30, 32, 42, 120}) {
            for (int tiles : {0, 1, 2, 3, 4, 5, 9}) {
                int least = 1 << 30, most = -1;
                for (int w = 0; w < warps; ++w) {
                    int total = 0;
                    for (int k = 0; k < tiles; ++k) {
                        const auto expected = dealtGroups(w, k, groups, warps);
                        const auto got = share::warpTileShare(w, k, groups, warps);
                        ASSERT_EQ(got.count, static_cast<int>(expected.size())) << warps << " warps, " << groups << " groups, tile " << k << ", warp " << w;
                        if (!expected.empty()) {
                            ASSERT_EQ(got.first, expected.front());
                            for (std::size_t i = 0; i < expected.size(); ++i) ASSERT_EQ(expected[i], got.first + static_cast<int>(i) * warps);
                        }
                        total += got.count;
                    }
                    EXPECT_EQ(share::warpItems(w, tiles, groups, warps), total) << warps << " warps, " << groups << " groups, " << tiles << " tiles, warp " << w;
                    least = std::min(least, total);
                    most = std::max(most, total);
                }
                EXPECT_LE(most - least, 1) << warps << " warps, " << groups << " groups, " << tiles << " tiles";
            }
        }
    }
}

TEST(Fp4MatvecShare, WhereTheWarpsDivideTheGroupsEveryTileIsDealtFromGroupZero) {
    // o (32 groups) and down (120) of the 12b: the same items per warp as before version 35.
    for (int groups : {8, 32, 120})
        for (int k = 0; k < 6; ++k)
            for (int w = 0; w < 8; ++w) {
                const auto got = share::warpTileShare(w, k, groups, 8);
                EXPECT_EQ(got.first, w);
                EXPECT_EQ(got.count, groups / 8);
            }
}

TEST(Fp4MatvecShare, TheTwelveBsThirtyGroupsEvenOutOverFourTiles) {
    // The GeGLU's blocks hold up to four tiles of 30 groups: 15 items for every warp (dealt tile
    // by tile: 16 for warps 0–5, 12 for warps 6–7).
    for (int w = 0; w < 8; ++w) EXPECT_EQ(share::warpItems(w, 4, 30, 8), 15);
}

TEST(Fp4MatvecShare, IndexProductsThatWrapKeepTheirResidue) {
    // k·groups past 2^32: the residue mod 8 of the true product.
    const int groups = 1 << 20, k = (1 << 12) + 3;
    for (int w = 0; w < 8; ++w) {
        const long long product = static_cast<long long>(k) * groups;
        const int first = static_cast<int>(((w - product) % 8 + 8) % 8);
        EXPECT_EQ(share::warpTileShare(w, k, groups, 8).first, first);
    }
}

}  // namespace
