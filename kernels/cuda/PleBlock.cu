// The PLE block of a decode step in one cluster launch (PleBlock.h has the contract).
//
// Why: the block was two FP4 matvec launches per layer (the gate with the residual update in its
// staging and gelu ⊙ per-layer input in its store, then the projection), and each launch pays a
// boundary and an activation hand-off (≈ 3.7 µs above its bytes, docs/PERFORMANCE.md version 12)
// on weights of 0.2 MB each (e2b, e4b). The gate's P outputs are all the projection needs, so
// one cluster carries the dependency: every block computes the residual update, then a share of
// the gate's rows; the shares are exchanged through distributed shared memory after a cluster
// barrier; then every block computes a share of the projection's rows.
//
// Shape: one cluster of C (16, 8, 4 or 2) blocks of 512 threads; block b takes gate rows
// [b·P/C, (b+1)·P/C) and projection rows [b·H/C, (b+1)·H/C), whole 16-row tiles of the tiled
// layout, so each block's codes and scale words of both weights are two contiguous ranges. They
// are copied into shared memory (cp.async) before the dependency wait: the weights do not change
// between steps, and the copies overlap the kernel before.
//
// Arithmetic: fp32. r as Fp4MatvecParams::InputNorm computes it (the sums of squares reduced in
// another order). Each lane sums 32 inputs of one 16-byte chunk of codes (x · e2m1 in fp32 FMAs,
// the E2M1 values from a 16-entry table in shared memory: one load per nibble, the 16 entries in
// 16 banks) and multiplies the sum by the group's bf16 scale; a row's chunk sums are added in a
// warp reduction. x and g sit in shared memory padded by one float per 32, so the lanes' chunk reads
// (32 floats apart) fall in distinct banks.
#include "PleBlock.h"

#include <cooperative_groups.h>

#include <kernels/Fp4Tiled.h>
#include <kernels/WeightFormats.h>

#include "CudaCommon.h"

namespace gemma::cuda {
namespace pledetail {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = formats::fp4tiled::kTileRows;
constexpr int kItem = formats::fp4tiled::kItemBytes;
constexpr int kScaleWords = formats::fp4tiled::kItemScaleWords;
constexpr std::int64_t kMaxHidden = 8192;

// Index of x[i] (or g[i]) in its padded shared copy.
__host__ __device__ constexpr int padded(int i) { return i + i / 32; }

// Byte offsets of the regions of one block's dynamic shared memory.
struct Layout {
    int gateCodes = 0, projectionCodes = 0, gateScales = 0, projectionScales = 0;
    int x = 0, gateMine = 0, gateAll = 0, scratch = 0, table = 0, total = 0;
    int gateTiles = 0, projectionTiles = 0;  // per block
};
// Inputs past H (P) up to whole groups are the format's zero padding; xs (gateAll) hold zeros there.
__host__ __device__ inline Layout layoutFor(std::int64_t hidden, std::int64_t perLayer, int cluster) {
    Layout l;
    const int groupsH = static_cast<int>(formats::fp4GroupsPerRow(hidden));
    const int groupsP = static_cast<int>(formats::fp4GroupsPerRow(perLayer));
    l.gateTiles = static_cast<int>(perLayer / kTile / cluster);
    l.projectionTiles = static_cast<int>(hidden / kTile / cluster);
    l.gateCodes = 0;
    l.projectionCodes = l.gateCodes + l.gateTiles * groupsH * kItem;
    l.gateScales = l.projectionCodes + l.projectionTiles * groupsP * kItem;
    l.projectionScales = l.gateScales + l.gateTiles * groupsH * kScaleWords * 4;
    l.x = l.projectionScales + l.projectionTiles * groupsP * kScaleWords * 4;
    l.gateMine = l.x + padded(groupsH * formats::kFp4GroupSize) * 4;
    l.gateAll = l.gateMine + static_cast<int>(perLayer / cluster) * 4;
    l.scratch = l.gateAll + padded(groupsP * formats::kFp4GroupSize) * 4;
    l.table = l.scratch + 32 * 4;
    l.total = l.table + 16 * 4;
    return l;
}

// Σ_k e2m1(nibble k of `codes`) · x[k] over the 32 inputs of one 16-byte chunk; x padded-contiguous
// (the chunk's 32 inputs never straddle a pad: they start at a multiple of 32); `table`: the 16
// E2M1 values (formats::e2m1ToFloat) in shared memory.
__device__ __forceinline__ float chunkDot(const uint4 codes, const float* x, const float* table) {
    const std::uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < 4; ++w)
#pragma unroll
        for (int j = 0; j < 8; ++j) s = fmaf(table[(words[w] >> (4 * j)) & 15u], x[w * 8 + j], s);
    return s;
}

// The 16 bytes of chunk c (= 4·group + quarter) of row `row` of a block's tiles, and its scale.
__device__ __forceinline__ uint4 chunkCodes(const unsigned char* codes, int groups, int row, int c) {
    const int r = row % kTile;
    const int offset = ((row / kTile) * groups + c / 4) * kItem + (r / 8) * 512 + ((r % 8) * 4 + c % 4) * 16;
    return *reinterpret_cast<const uint4*>(codes + offset);
}
__device__ __forceinline__ float chunkScale(const std::uint32_t* scales, int groups, int row, int c) {
    const std::uint32_t word = scales[((row / kTile) * groups + c / 4) * kScaleWords + row % 8];
    return row % kTile >= 8 ? bf16HiToFloat(word) : bf16LoToFloat(word);
}

// Copies `bytes` (a multiple of 16) from global to shared memory with cp.async, every thread a share.
__device__ __forceinline__ void copyAsync(unsigned char* dst, const void* src, int bytes) {
    const auto* s = static_cast<const unsigned char*>(src);
    for (int i = static_cast<int>(threadIdx.x) * 16; i < bytes; i += kThreads * 16) cpAsync16(dst + i, s + i, true);
}

// CP = 4·groups(P): the chunks of one projection row (padding included), one lane each (32 / CP
// rows per warp pass).
template <int CP>
__global__ void __launch_bounds__(kThreads, 1) pleBlockKernel(PleBlockParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    const int C = static_cast<int>(cluster.num_blocks());
    const int rank = static_cast<int>(cluster.block_rank());
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int H = static_cast<int>(p.hidden);
    const int P = static_cast<int>(p.perLayer);
    const int groupsH = static_cast<int>(formats::fp4GroupsPerRow(H));
    constexpr int groupsP = CP / 4;
    const Layout L = layoutFor(H, P, C);

    extern __shared__ float4 smemRaw[];
    unsigned char* smem = reinterpret_cast<unsigned char*>(smemRaw);
    const unsigned char* gateCodes = smem + L.gateCodes;
    const unsigned char* projectionCodes = smem + L.projectionCodes;
    const auto* gateScales = reinterpret_cast<const std::uint32_t*>(smem + L.gateScales);
    const auto* projectionScales = reinterpret_cast<const std::uint32_t*>(smem + L.projectionScales);
    float* xs = reinterpret_cast<float*>(smem + L.x);
    float* gateMine = reinterpret_cast<float*>(smem + L.gateMine);
    float* gateAll = reinterpret_cast<float*>(smem + L.gateAll);
    float* scratch = reinterpret_cast<float*>(smem + L.scratch);
    float* table = reinterpret_cast<float*>(smem + L.table);
    if (tid < 16) table[tid] = formats::e2m1ToFloat(static_cast<unsigned>(tid));

    // This block's tiles of both weights (constant between steps: requested before the wait).
    {
        const std::int64_t gateItem = static_cast<std::int64_t>(rank) * L.gateTiles * groupsH;
        const std::int64_t projectionItem = static_cast<std::int64_t>(rank) * L.projectionTiles * groupsP;
        copyAsync(smem + L.gateCodes, p.gateCodes + gateItem * kItem, L.gateTiles * groupsH * kItem);
        copyAsync(smem + L.projectionCodes, p.projectionCodes + projectionItem * kItem, L.projectionTiles * groupsP * kItem);
        copyAsync(smem + L.gateScales, p.gateScales + gateItem * kScaleWords, L.gateTiles * groupsH * kScaleWords * 4);
        copyAsync(smem + L.projectionScales, p.projectionScales + projectionItem * kScaleWords,
                  L.projectionTiles * groupsP * kScaleWords * 4);
        cpAsyncCommit();
    }
    gridDependencyWait();      // residualIn, branch and perLayerInput come from earlier kernels (PDL)
    allowDependentsToStart();  // the next layer's q/k/v matvec may request its weights now

    // r = (residualIn + rmsNorm(branch; branchWeight)) · layerScalar, into xs (padded).
    float ss = 0.0f;
    for (int i = tid * 4; i < H; i += kThreads * 4) {
        const float4 b = *reinterpret_cast<const float4*>(p.branch + i);
        ss += b.x * b.x + b.y * b.y + b.z * b.z + b.w * b.w;
    }
    const float inv = rsqrtf(blockSum(ss, scratch) / static_cast<float>(H) + p.eps);
    for (int i = tid * 4; i < H; i += kThreads * 4) {
        const float4 res = *reinterpret_cast<const float4*>(p.residualIn + i);
        const float4 b = *reinterpret_cast<const float4*>(p.branch + i);
        const float4 w = p.branchWeight ? *reinterpret_cast<const float4*>(p.branchWeight + i) : make_float4(1.f, 1.f, 1.f, 1.f);
        const float4 r = make_float4((res.x + b.x * inv * w.x) * p.layerScalar, (res.y + b.y * inv * w.y) * p.layerScalar,
                                     (res.z + b.z * inv * w.z) * p.layerScalar, (res.w + b.w * inv * w.w) * p.layerScalar);
        if (rank == 0 && p.residualOut) *reinterpret_cast<float4*>(p.residualOut + i) = r;
        // i % 4 == 0, so the four land before one pad boundary at most: padded() each.
        xs[padded(i)] = r.x;
        xs[padded(i + 1)] = r.y;
        xs[padded(i + 2)] = r.z;
        xs[padded(i + 3)] = r.w;
    }
    for (int i = H + tid; i < groupsH * formats::kFp4GroupSize; i += kThreads) xs[padded(i)] = 0.0f;  // padding inputs
    for (int i = P + tid; i < groupsP * formats::kFp4GroupSize; i += kThreads) gateAll[padded(i)] = 0.0f;
    cpAsyncWait<0>();
    __syncthreads();  // xs and the weights are in place

    // Gate rows: warp per row, lanes over the row's chunks.
    const int gateRows = L.gateTiles * kTile;
    for (int row = warp; row < gateRows; row += kWarps) {
        float s = 0.0f;
        for (int c = lane; c < groupsH * 4; c += 32)
            s += chunkDot(chunkCodes(gateCodes, groupsH, row, c), xs + padded(c * 32), table) * chunkScale(gateScales, groupsH, row, c);
        s = warpSum(s);
        if (lane == 0) gateMine[row] = geluTanh(s) * p.perLayerInput[rank * gateRows + row];
    }
    // Every block's gate share is complete, and every block has read `branch` (out may alias it).
    cluster.sync();
    for (int i = tid; i < P; i += kThreads) gateAll[padded(i)] = *cluster.map_shared_rank(gateMine + i % gateRows, i / gateRows);
    // The peers may leave once every block has copied the shares (the wait is at the end).
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
    __syncthreads();  // gateAll in place

    // Projection rows: 32 / CP rows per warp pass, CP lanes per row (one chunk each).
    constexpr int kRowsPerPass = 32 / CP;
    const int projectionRows = L.projectionTiles * kTile;
    const int c = lane % CP;
    for (int first = warp * kRowsPerPass; first < projectionRows; first += kWarps * kRowsPerPass) {
        const int row = first + lane / CP;
        float s = 0.0f;
        if (row < projectionRows)
            s = chunkDot(chunkCodes(projectionCodes, groupsP, row, c), gateAll + padded(c * 32), table) *
                chunkScale(projectionScales, groupsP, row, c);
#pragma unroll
        for (int offset = CP / 2; offset > 0; offset >>= 1) s += __shfl_xor_sync(0xffffffffu, s, offset);
        if (c == 0 && row < projectionRows) p.out[static_cast<std::int64_t>(rank) * projectionRows + row] = s;
    }
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}

// Groups of P in {1, 2, 4, 8} (a projection row's chunks divide a warp), whole tiles per block.
bool shapeFits(std::int64_t hidden, std::int64_t perLayer, int cluster) {
    if (hidden <= 0 || hidden > kMaxHidden || perLayer <= 0) return false;
    const std::int64_t groupsP = formats::fp4GroupsPerRow(perLayer);
    if (groupsP != 1 && groupsP != 2 && groupsP != 4 && groupsP != 8) return false;
    return hidden % (kTile * cluster) == 0 && perLayer % (kTile * cluster) == 0;
}

template <int CP>
cudaError_t prepareKernel(int device, int smem) {
    thread_local int prepared = -1;
    thread_local int preparedSmem = 0;
    if (prepared == device && preparedSmem >= smem) return cudaSuccess;
    cudaError_t err = cudaFuncSetAttribute(pleBlockKernel<CP>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err == cudaSuccess) err = cudaFuncSetAttribute(pleBlockKernel<CP>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (err == cudaSuccess) {
        prepared = device;
        preparedSmem = smem;
    }
    return err;
}

// Calls f.template operator()<CP>() for the shape's P (shapeFits checked first).
template <typename F>
auto withInstance(std::int64_t perLayer, F&& f) {
    switch (formats::fp4GroupsPerRow(perLayer)) {
        case 1: return f.template operator()<4>();
        case 2: return f.template operator()<8>();
        case 4: return f.template operator()<16>();
        default: return f.template operator()<32>();
    }
}

// Whether one cluster of `size` blocks of this shape is resident on the device.
bool clusterFits(const PleBlockParams& p, int size, const DeviceFacts& facts) {
    if (!shapeFits(p.hidden, p.perLayer, size)) return false;
    const Layout L = layoutFor(p.hidden, p.perLayer, size);
    if (L.total > facts.maxSharedPerBlockOptin) return false;
    return withInstance(p.perLayer, [&]<int CP>() {
        if (prepareKernel<CP>(facts.device, L.total) != cudaSuccess) {
            cudaGetLastError();
            return false;
        }
        cudaLaunchAttribute attribute{};
        attribute.id = cudaLaunchAttributeClusterDimension;
        attribute.val.clusterDim.x = static_cast<unsigned>(size);
        attribute.val.clusterDim.y = 1;
        attribute.val.clusterDim.z = 1;
        cudaLaunchConfig_t config{};
        config.gridDim = dim3(static_cast<unsigned>(size));
        config.blockDim = dim3(kThreads);
        config.dynamicSmemBytes = static_cast<std::size_t>(L.total);
        config.attrs = &attribute;
        config.numAttrs = 1;
        int active = 0;
        if (cudaOccupancyMaxActiveClusters(&active, pleBlockKernel<CP>, &config) != cudaSuccess) {
            cudaGetLastError();
            return false;
        }
        return active >= 1;
    });
}

bool validSize(int size) { return size == 0 || size == 2 || size == 4 || size == 8 || size == 16; }

int chooseClusterSize(const PleBlockParams& p, const DeviceFacts& facts) {
    if (facts.computeMajor < 9) return 0;
    if (p.clusterSize != 0) return clusterFits(p, p.clusterSize, facts) ? p.clusterSize : 0;
    // Cached per device and shape: the engine asks on every launch.
    struct Cached {
        int device = -1;
        std::int64_t hidden = 0, perLayer = 0;
        int size = 0;
    };
    thread_local Cached cached;
    if (cached.device == facts.device && cached.hidden == p.hidden && cached.perLayer == p.perLayer) return cached.size;
    int chosen = 0;
    for (int size : {16, 8, 4, 2})
        if (chosen == 0 && clusterFits(p, size, facts)) chosen = size;
    cached = {facts.device, p.hidden, p.perLayer, chosen};
    return chosen;
}

}  // namespace pledetail

int pleBlockClusterSize(const PleBlockParams& p) {
    DeviceFacts facts;
    if (queryDeviceFacts(facts) != KernelStatus::Ok) return 0;
    if (!pledetail::validSize(p.clusterSize)) return 0;
    return pledetail::chooseClusterSize(p, facts);
}

KernelStatus launchPleBlock(const PleBlockParams& p, cudaStream_t stream) {
    using namespace pledetail;
    if (!p.residualIn || !p.branch || !p.gateCodes || !p.gateScales || !p.projectionCodes || !p.projectionScales ||
        !p.perLayerInput || !p.out || p.hidden <= 0 || p.perLayer <= 0)
        return KernelStatus::InvalidArgument;
    if (!validSize(p.clusterSize)) return KernelStatus::InvalidArgument;
    for (const void* v : {static_cast<const void*>(p.residualIn), static_cast<const void*>(p.branch),
                          static_cast<const void*>(p.branchWeight), static_cast<const void*>(p.residualOut),
                          static_cast<const void*>(p.gateCodes), static_cast<const void*>(p.gateScales),
                          static_cast<const void*>(p.projectionCodes), static_cast<const void*>(p.projectionScales),
                          static_cast<const void*>(p.out)})
        if (v && !aligned16(v)) return KernelStatus::InvalidArgument;
    const std::int64_t bytesH = p.hidden * 4, bytesP = p.perLayer * 4;
    if (p.residualOut && (rangesOverlap(p.residualOut, bytesH, p.residualIn, bytesH) || rangesOverlap(p.residualOut, bytesH, p.branch, bytesH) ||
                          rangesOverlap(p.residualOut, bytesH, p.out, bytesH)))
        return KernelStatus::InvalidArgument;
    if (rangesOverlap(p.perLayerInput, bytesP, p.out, bytesH) || rangesOverlap(p.residualIn, bytesH, p.out, bytesH))
        return KernelStatus::InvalidArgument;
    DeviceFacts facts;
    if (queryDeviceFacts(facts) != KernelStatus::Ok) return KernelStatus::LaunchFailed;
    const int size = chooseClusterSize(p, facts);
    if (size < 1) return KernelStatus::Unsupported;
    const Layout L = layoutFor(p.hidden, p.perLayer, size);
    return withInstance(p.perLayer, [&]<int CP>() {
        if (prepareKernel<CP>(facts.device, L.total) != cudaSuccess) return KernelStatus::LaunchFailed;
        return launchStatus(launchKernelWith(pleBlockKernel<CP>, dim3(static_cast<unsigned>(size)), dim3(kThreads),
                                             static_cast<std::size_t>(L.total), stream, p.programmaticLaunch,
                                             static_cast<unsigned>(size), p));
    });
}

}  // namespace gemma::cuda
