// Host-side quantization into the package formats of kernels/WeightFormats.h.
// These rules are mirrored literally by tools/make_goldens.py (docs/GOLDENS.md) so the FP4
// package can be checked against transformers run on the same fake-quantized weights.
#pragma once

#include <cstdint>
#include <span>

#include "gemma/Quantize.h"
#include "gemma/Status.h"

namespace gemma {

// Quantizes one weight row of `in` values into fp4RowBytes(in) code bytes and
// fp4GroupsPerRow(in) bf16 scales. Rejects NaN/Inf (InvalidFile, naming nothing: callers add
// the tensor name). AbsMax: scale = bf16(absmax / 6). MinimumError: among candidate scales
// bf16(absmax / 6 · (1 − k/32)), k = 0..12, the one with the least squared error (ties: smaller k).
Status quantizeFp4Row(std::span<const float> row, ScaleRule rule, std::uint8_t* codes, std::uint16_t* scales);

// Quantizes one row to FP8-E4M3 with scale = absmax / 448 (fp32). Rejects NaN/Inf.
Status quantizeFp8Row(std::span<const float> row, std::uint8_t* codes, float* scale);

// Squared error of one fp4 group quantized with `scale` (helper for the scale search and tests).
double fp4GroupSquaredError(std::span<const float> group, float scale);

}  // namespace gemma
