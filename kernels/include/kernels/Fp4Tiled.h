// The tiled device layout of an FP4-E2M1 group-128 weight (the CUDA backend's copy; the package
// and the CPU backend keep the row layout of WeightFormats.h).
//
// Why: the batch-1 tensor-core matvec (kernels/cuda/Fp4Matvec.cu) has a warp consume a 16-row
// tile one 128-input group at a time ("an item"). In the row layout an item's 1 KB of codes is 16
// pieces of 64 bytes, 16 rows apart, and its 16 bf16 scales sit in 16 rows: every 16-byte load
// instruction of the warp touches 8 rows, every scale load 8 rows for 16 useful bytes. In the
// tiled layout an item is contiguous and in the lanes' read order, so a warp's item is two
// 512-byte loads and one scale word per lane (measured +2 to +18 % per shape on the H200,
// docs/PERFORMANCE.md version 5).
//
// Layout, for W[out][in] with groups = fp4GroupsPerRow(in) and tiles = ceil(out / 16):
// - codes: tiles × groups items of 1024 bytes, item (t, G) at byte (t·groups + G)·1024. Inside
//   an item, the row layout's 16-byte chunk c = 4G + q (bytes [16c, 16c + 16) of a row) of row
//   16t + r sits at byte (r / 8)·512 + ((r % 8)·4 + q)·16: the first 512 bytes are rows 0–7 of the
//   tile, the second rows 8–15, and lane L = 4g + q of a warp reads bytes [16L, 16L + 16) of each.
// - scales: tiles × groups items of 8 words, word (t·groups + G)·8 + g = row 16t + g's bf16 scale
//   of group G in the low half, row 16t + g + 8's in the high half.
// Rows past `out` in the last tile are zero codes and zero scales.
// - stored codes (since version 27 of docs/PERFORMANCE.md): every 32-bit word of codes is kept as
//   toStoredCodes() of the row layout's word, so that the integer matvec forms its negative
//   selectors with one multiply-add on the FMA pipe instead of an xor on the integer pipe
//   (Fp4Decode.h, decodeInt8QuadStored). Readers that want the codes themselves apply
//   fromStoredCodes() to each loaded word.
#pragma once

#include <cstdint>

#include "WeightFormats.h"

#if defined(__CUDACC__)
#define GEMMA_FP4_TILED_HD __host__ __device__
#else
#define GEMMA_FP4_TILED_HD
#endif

namespace gemma::formats::fp4tiled {

constexpr int kTileRows = 16;
constexpr int kItemBytes = 1024;
constexpr int kItemScaleWords = 8;

GEMMA_FP4_TILED_HD constexpr std::int64_t tiles(std::int64_t out) { return (out + kTileRows - 1) / kTileRows; }
GEMMA_FP4_TILED_HD constexpr std::int64_t codeBytes(std::int64_t out, std::int64_t in) {
    return tiles(out) * fp4GroupsPerRow(in) * kItemBytes;
}
GEMMA_FP4_TILED_HD constexpr std::int64_t scaleWords(std::int64_t out, std::int64_t in) {
    return tiles(out) * fp4GroupsPerRow(in) * kItemScaleWords;
}

// Byte offset of row `row`'s 16-byte chunk `chunk` (row-layout bytes [16·chunk, 16·chunk + 16)).
GEMMA_FP4_TILED_HD constexpr std::int64_t chunkOffset(std::int64_t row, std::int64_t chunk, std::int64_t groups) {
    const std::int64_t r = row % kTileRows;
    return ((row / kTileRows) * groups + chunk / 4) * kItemBytes + (r / 8) * 512 + ((r % 8) * 4 + chunk % 4) * 16;
}
// The scale word holding row `row`'s scale of `group`, and the shift of its half (0 or 16).
GEMMA_FP4_TILED_HD constexpr std::int64_t scaleWord(std::int64_t row, std::int64_t group, std::int64_t groups) {
    return ((row / kTileRows) * groups + group) * kItemScaleWords + row % 8;
}
GEMMA_FP4_TILED_HD constexpr unsigned scaleShift(std::int64_t row) { return row % kTileRows >= 8 ? 16u : 0u; }

// ---- stored codes ---------------------------------------------------------------------------------
// The integer matvec looks a 16-bit half h of a code word up twice in a table of positive bytes
// (Fp4Decode.h): with h itself (a nibble whose sign bit is set reads 0) for the positive weights,
// and with a selector whose sign bits are flipped for the negative ones. The flip as an xor
// (h ^ 0x8888) costs an integer-pipe instruction per half; as an add (h + 0x8888) it is a
// multiply-add on the FMA pipe, but the add carries: a nibble with its sign bit set carries 1 into
// the next nibble (and so does a positive 7 that receives a carry). The stored nibble of a negative
// code is therefore its magnitude minus the carry it will receive, which the add restores:
//   positive code m (sign clear):  stored m;                 h + 0x8888's nibble is 8 + m + c_in,
//                                                            sign set (reads 0) unless m = 7 and
//                                                            c_in = 1 (then 0, which reads 0 too);
//                                                            carries 1 only in that case;
//   negative code 8 | m, m >= 1:   stored 8 | (m − c_in);    the add's nibble is m, sign clear, and
//                                                            it always carries 1;
//   −0 (code 8):                   stored 0, as +0 (m − c_in would be −1 after a negative nibble;
//                                  the quantizer writes every zero as +0 anyway, floatToE2M1).
// The carry starts at 0 in each 16-bit half (the matvec adds 0x8888 to each half separately; the
// carry out of a half's top nibble is dropped: the byte permute reads a selector's low 16 bits).
GEMMA_FP4_TILED_HD constexpr std::uint32_t toStoredCodes(std::uint32_t codes) {
    std::uint32_t stored = 0;
    for (int half = 0; half < 2; ++half) {
        unsigned carry = 0;
        for (int k = 0; k < 4; ++k) {
            const int shift = 16 * half + 4 * k;
            const unsigned code = (codes >> shift) & 0xFu, magnitude = code & 7u;
            unsigned nibble = magnitude;
            if ((code & 8u) != 0 && magnitude != 0) {
                nibble = 8u | (magnitude - carry);
                carry = 1;
            } else {
                carry = magnitude == 7u ? carry : 0u;
            }
            stored |= nibble << shift;
        }
    }
    return stored;
}

// The codes a stored word holds, as the integer matvec reads them, for any 32 bits (not only
// toStoredCodes' images): per nibble s with t = the nibble of (its half + 0x8888), the code is s
// when s's sign is clear, 8 | t when s's sign is set and t's clear, and 0 when both are set (both
// table reads yield 0 there). fromStoredCodes(toStoredCodes(w)) == w with every −0 made +0.
GEMMA_FP4_TILED_HD constexpr std::uint32_t fromStoredCodes(std::uint32_t stored) {
    const std::uint32_t added = ((stored + 0x8888u) & 0xFFFFu) | ((((stored >> 16) + 0x8888u) & 0xFFFFu) << 16);
    const std::uint32_t positive = ~stored & 0x88888888u;         // sign bits of the nibbles kept as they are
    const std::uint32_t negative = stored & ~added & 0x88888888u;  // sign bits of the negative codes
    // A nibble's sign bit spread over the nibble: (bit 3 → bit 0) × 15, no carries between nibbles.
    const std::uint32_t keep = (positive >> 3) * 0xFu, negate = (negative >> 3) * 0xFu;
    return (stored & keep) | ((added | 0x88888888u) & negate);
}

}  // namespace gemma::formats::fp4tiled

#undef GEMMA_FP4_TILED_HD
