// Row layout → tiled layout of an FP4 weight (Fp4Tile.h), every code word as its stored codes
// (Fp4Tiled.h, toStoredCodes). One thread per 16-byte chunk of the tiled codes, then one per tiled
// scale word, grid-stride: a gather run once per weight at model load, so it is written for
// clarity, not speed (it moves the weights once at several TB/s).
#include "Fp4Tile.h"

#include <kernels/Fp4Tiled.h>
#include <kernels/WeightFormats.h>

#include "CudaCommon.h"

#include <utility>

namespace gemma::cuda {
namespace {

namespace tiled = formats::fp4tiled;

__global__ void fp4TileKernel(const uint4* __restrict__ codes, const std::uint16_t* __restrict__ scales, std::int64_t out,
                              std::int64_t groups, uint4* __restrict__ tiledCodes, std::uint32_t* __restrict__ tiledScales) {
    const std::int64_t tiles = tiled::tiles(out);
    const std::int64_t chunks = tiles * groups * (tiled::kItemBytes / 16);
    const std::int64_t words = tiles * groups * tiled::kItemScaleWords;
    const std::int64_t rowChunks = groups * 4;
    const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
    const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    for (std::int64_t k = first; k < chunks; k += stride) {
        // Chunk k of the tiled codes: item k / 64, half (k / 32) % 2, lane k % 32.
        const std::int64_t item = k / 64, tile = item / groups, group = item % groups;
        const int lane = static_cast<int>(k % 32), half = static_cast<int>((k / 32) % 2);
        const std::int64_t row = tile * tiled::kTileRows + lane / 4 + 8 * half;
        uint4 v = row < out ? codes[row * rowChunks + group * 4 + lane % 4] : make_uint4(0, 0, 0, 0);
        v = make_uint4(tiled::toStoredCodes(v.x), tiled::toStoredCodes(v.y), tiled::toStoredCodes(v.z), tiled::toStoredCodes(v.w));
        tiledCodes[k] = v;
    }
    for (std::int64_t w = first; w < words; w += stride) {
        const std::int64_t item = w / tiled::kItemScaleWords, tile = item / groups, group = item % groups;
        const std::int64_t rowA = tile * tiled::kTileRows + w % tiled::kItemScaleWords, rowB = rowA + 8;
        const std::uint32_t lo = rowA < out ? scales[rowA * groups + group] : 0u;
        const std::uint32_t hi = rowB < out ? scales[rowB * groups + group] : 0u;
        tiledScales[w] = lo | (hi << 16);
    }
}

}  // namespace

KernelStatus launchFp4Tile(const Fp4TileParams& p, cudaStream_t stream) {
    if (!p.codes || !p.scales || !p.tiledCodes || !p.tiledScales || p.out < 1 || p.in < 1) return KernelStatus::InvalidArgument;
    if (!aligned16(p.codes) || !aligned16(p.tiledCodes) || reinterpret_cast<std::uintptr_t>(p.tiledScales) % 4 != 0 ||
        reinterpret_cast<std::uintptr_t>(p.scales) % 2 != 0)
        return KernelStatus::InvalidArgument;
    const std::int64_t groups = formats::fp4GroupsPerRow(p.in);
    const std::int64_t codeBytes = p.out * formats::fp4RowBytes(p.in), scaleBytes = p.out * groups * 2;
    const std::int64_t tiledCodeBytes = tiled::codeBytes(p.out, p.in), tiledScaleBytes = tiled::scaleWords(p.out, p.in) * 4;
    for (const auto& [target, targetBytes] : {std::pair<const void*, std::int64_t>{p.tiledCodes, tiledCodeBytes}, {p.tiledScales, tiledScaleBytes}})
        if (rangesOverlap(target, targetBytes, p.codes, codeBytes) || rangesOverlap(target, targetBytes, p.scales, scaleBytes))
            return KernelStatus::InvalidArgument;
    if (rangesOverlap(p.tiledCodes, tiledCodeBytes, p.tiledScales, tiledScaleBytes)) return KernelStatus::InvalidArgument;
    DeviceFacts facts;
    if (queryDeviceFacts(facts) != KernelStatus::Ok) return KernelStatus::LaunchFailed;
    const std::int64_t chunks = tiledCodeBytes / 16;
    const std::int64_t wanted = (chunks + 255) / 256;
    const int blocks = static_cast<int>(wanted < facts.smCount * 8LL ? wanted : facts.smCount * 8LL);
    fp4TileKernel<<<blocks, 256, 0, stream>>>(reinterpret_cast<const uint4*>(p.codes), p.scales, p.out, groups,
                                              reinterpret_cast<uint4*>(p.tiledCodes), p.tiledScales);
    return launchStatus();
}

}  // namespace gemma::cuda
