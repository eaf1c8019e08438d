// The tiled device layout of FP4 weights (kernels/Fp4Tiled.h), on the host, every CI run: the
// lane-order tiling of reference::tileFp4 against the header's index functions (which the kernels
// use to find a row's chunk and scale), on shapes with a partial last tile and a partial last
// group, each code word in its stored form (toStoredCodes), and the stored form's round trip. The
// GPU harnesses check the Fp4Tile op against the same tiling byte for byte and every kernel's tiled
// path bit for bit against its row-layout path.
#include <gtest/gtest.h>

#include <kernels/Fp4Tiled.h>
#include <kernels/WeightFormats.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "reference/ReferenceOps.h"

namespace {

namespace tiled = gemma::formats::fp4tiled;
namespace fmt = gemma::formats;

struct Weight {
    std::int64_t out, in;
    std::vector<std::uint8_t> codes;
    std::vector<std::uint16_t> scales;
};

Weight randomWeight(std::int64_t out, std::int64_t in, std::mt19937& rng) {
    Weight w{out, in, std::vector<std::uint8_t>(static_cast<std::size_t>(out * fmt::fp4RowBytes(in))),
             std::vector<std::uint16_t>(static_cast<std::size_t>(out * fmt::fp4GroupsPerRow(in)))};
    std::uniform_int_distribution<int> byte(0, 255), bits(1, 0xFFFF);
    for (auto& c : w.codes) c = static_cast<std::uint8_t>(byte(rng));
    for (auto& s : w.scales) s = static_cast<std::uint16_t>(bits(rng));  // nonzero: a lost scale shows
    return w;
}

class Fp4Tiled : public ::testing::TestWithParam<std::pair<int, int>> {};

TEST_P(Fp4Tiled, IndexFunctionsFindEveryChunkAndScaleOfTheReferenceTiling) {
    std::mt19937 rng(17);
    const auto [out, in] = GetParam();
    const Weight w = randomWeight(out, in, rng);
    const std::int64_t groups = fmt::fp4GroupsPerRow(in), rowBytes = fmt::fp4RowBytes(in);
    std::vector<std::uint8_t> codes(static_cast<std::size_t>(tiled::codeBytes(out, in)), 0xAB);
    std::vector<std::uint32_t> scales(static_cast<std::size_t>(tiled::scaleWords(out, in)), 0xDEADBEEFu);
    gemma::reference::tileFp4(w.codes.data(), w.scales.data(), out, in, codes.data(), scales.data());

    // Every row's chunk and scale where the header says, and every byte of the tiled copy
    // accounted for: real rows' chunks once, padding rows' chunks zero.
    std::vector<int> covered(codes.size(), 0);
    for (std::int64_t row = 0; row < tiled::tiles(out) * tiled::kTileRows; ++row) {
        for (std::int64_t chunk = 0; chunk < rowBytes / 16; ++chunk) {
            const std::int64_t at = tiled::chunkOffset(row, chunk, groups);
            ASSERT_LE(at + 16, static_cast<std::int64_t>(codes.size()));
            for (int word = 0; word < 4; ++word) {  // each 32-bit word as its stored codes
                std::uint32_t want = 0, got = 0;
                if (row < out) std::memcpy(&want, w.codes.data() + row * rowBytes + chunk * 16 + 4 * word, 4);
                std::memcpy(&got, codes.data() + at + 4 * word, 4);
                ASSERT_EQ(got, tiled::toStoredCodes(want)) << "row " << row << " chunk " << chunk;
                for (int b = 0; b < 4; ++b) ++covered[static_cast<std::size_t>(at + 4 * word + b)];
            }
        }
        for (std::int64_t group = 0; group < groups; ++group) {
            const std::uint32_t word = scales[static_cast<std::size_t>(tiled::scaleWord(row, group, groups))];
            const std::uint16_t want = row < out ? w.scales[static_cast<std::size_t>(row * groups + group)] : 0;
            ASSERT_EQ(static_cast<std::uint16_t>(word >> tiled::scaleShift(row)), want) << "row " << row << " group " << group;
        }
    }
    for (std::size_t i = 0; i < covered.size(); ++i) ASSERT_EQ(covered[i], 1) << "byte " << i;
}

// The stored codes (Fp4Tiled.h): every code word comes back from its stored form, with −0 as
// +0 (which the quantizer writes for every zero); tested on all 65536 values of each half.
TEST(Fp4TiledLayout, StoredCodesRoundTripWithNegativeZeroAsZero) {
    const auto canonical = [](std::uint32_t w) {
        for (int k = 0; k < 8; ++k)
            if (((w >> (4 * k)) & 0xFu) == 8u) w &= ~(0xFu << (4 * k));
        return w;
    };
    std::mt19937 rng(5);
    for (std::uint32_t v = 0; v < 65536; ++v) {
        const std::uint32_t other = rng() & 0xFFFFu;
        for (const std::uint32_t w : {v | (other << 16), other | (v << 16)}) {
            ASSERT_EQ(tiled::fromStoredCodes(tiled::toStoredCodes(w)), canonical(w)) << "word " << w;
            if (w == canonical(w)) ASSERT_EQ(tiled::toStoredCodes(tiled::fromStoredCodes(tiled::toStoredCodes(w))), tiled::toStoredCodes(w));
        }
    }
    // Zero codes (padding) are stored as zero.
    EXPECT_EQ(tiled::toStoredCodes(0u), 0u);
    EXPECT_EQ(tiled::fromStoredCodes(0u), 0u);
}

// 16 × 128: one item; 31 × 1000: a partial last tile and group; 48 × 256, 512 × 3840: whole tiles.
INSTANTIATE_TEST_SUITE_P(Shapes, Fp4Tiled,
                         ::testing::Values(std::pair{16, 128}, std::pair{31, 1000}, std::pair{48, 256}, std::pair{1, 64},
                                           std::pair{512, 3840}));

TEST(Fp4TiledLayout, SizesMatchTheRowLayoutWhenOutIsAMultipleOf16) {
    // The CUDA backend rearranges weights in place, which needs equal sizes.
    for (std::int64_t out : {16, 256, 3840, 15360})
        for (std::int64_t in : {128, 1536, 3840, 21504}) {
            EXPECT_EQ(tiled::codeBytes(out, in), out * fmt::fp4RowBytes(in));
            EXPECT_EQ(tiled::scaleWords(out, in) * 4, out * fmt::fp4GroupsPerRow(in) * 2);
        }
    EXPECT_GT(tiled::codeBytes(17, 128), 17 * fmt::fp4RowBytes(128));
}

}  // namespace
