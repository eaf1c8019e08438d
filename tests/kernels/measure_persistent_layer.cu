// Measurement tool (not a test): gate B of docs/PERFORMANCE.md's lever 1 (version 25). The 12b's
// decode matvecs, 48 layers × (q/k/v 8192 × 3840, o 3840 × 4096, gate/up GeGLU 2 × 15360 × 3840,
// down 3840 × 15360) on random tiled FP4 weights, run two ways over the same weights:
//   launches     the engine's kernels (launchFp4Matvec / launchFp4GegluMatvec, integer x, tiled,
//                programmatic launch), one launch per op, 192 per step;
//   persistent   one cooperative kernel for the whole step: one block per SM, a producer warp
//                that copies each tile's items (codes and scale words, up to 16 groups per stage)
//                into a shared-memory ring with cp.async.bulk and never waits for an op boundary,
//                and 16 consumer warps that stage x as integers after each op's grid barrier (one
//                monotonic counter), run Fp4Matvec.cu's integer mma path on the items (warp w takes
//                group w of each stage) and write the tile's outputs.
// The ops chain as in a step without its norms and attention: o reads q/k/v's first 4096 outputs,
// the GeGLU o's, down the GeGLU's, the next layer's q/k/v the down's. Checks first: every op of
// the first 4 layers of the persistent run against the engine's kernel on the persistent run's own
// input (the summation order differs: 16 warps per tile instead of 8, so within 1e-5 of the output
// norm, not bit-identical). Then the time per step of each, as the median of 7 runs.
//   measure_persistent_layer     # exit 77 without an sm_90+ CUDA device; 1 when a check fails
// Prepared in version 25 after the device time ran out: compiled, not yet run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "../../kernels/cuda/Fp4Matvec.cu"  // standalone project: no kernel library
#include "PersistentProbe.h"
#include "kernels/Fp4Tiled.h"

namespace {

using gemma::cuda::Fp4MatvecParams;
using namespace gemma::probe;
namespace fd = gemma::cuda::fp4detail;
namespace tiled = gemma::formats::fp4tiled;

constexpr int kLayers = 48;
constexpr int kOpsPerLayer = 4;
constexpr int kOps = kLayers * kOpsPerLayer;
constexpr int kConsumerWarps = 16;
constexpr int kThreads = 32 * (kConsumerWarps + 1);
constexpr int kStageGroups = kConsumerWarps;            // items per weight per stage
constexpr int kStageCodeBytes = kStageGroups * 1024;    // per weight
constexpr int kStageScaleBytes = kStageGroups * 32;     // per weight
constexpr int kStageBytes = 2 * (kStageCodeBytes + kStageScaleBytes);  // room for gate and up
constexpr int kStages = 4;
constexpr int kMaxIn = 15360;
constexpr int kMaxGroups = kMaxIn / 128;

// One op of the step: its weight (and the GeGLU's up weight) in the tiled layout, its input and
// output vectors.
struct Op {
    const std::uint8_t* codes;
    const std::uint32_t* scales;  // tiled scale words
    const std::uint8_t* upCodes;  // GeGLU only
    const std::uint32_t* upScales;
    const float* x;
    float* y;
    int out, in;
    int geglu;
};

struct PersistentArgs {
    const Op* ops;       // [kOps]
    unsigned* barrier;   // one monotonic counter, zeroed before each launch
};

constexpr std::size_t planesBytes() { return static_cast<std::size_t>(fd::integerXBytes(kMaxGroups) + 127) / 128 * 128; }
constexpr std::size_t smemBytes() { return static_cast<std::size_t>(kStages) * kStageBytes + planesBytes(); }

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
__device__ __forceinline__ void consumersSync() { asm volatile("bar.sync 1, %0;\n" ::"n"(32 * kConsumerWarps) : "memory"); }

// x (global, written by the previous op of this launch: read through L2) → the integer planes and
// group factors of Fp4Matvec.cu's integer path, by the consumer threads (c = their index), with
// that path's own conversion (convertXPieces) and constant columns.
__device__ void stageX(const float* x, int in, std::uint8_t* planes, float* factors, int c) {
    const int groups = in / 128;  // every input width here is a whole number of groups
    const int pieces = groups * 8;
    constexpr int kStagers = 32 * kConsumerWarps;
    fd::writeConstantColumns(planes, groups, static_cast<unsigned>(c));
    for (int base = 0; base < pieces; base += kStagers) {  // warp-uniform trip count
        const int piece = base + c;
        float4 v[1][4];
#pragma unroll
        for (int f = 0; f < 4; ++f)
            v[0][f] = piece < pieces ? __ldcg(reinterpret_cast<const float4*>(x) + piece * 4 + f) : make_float4(0.f, 0.f, 0.f, 0.f);
        fd::convertXPieces<1>(v, base, pieces, fd::planeBytes(groups), planes, factors, c, kStagers);
    }
}
#endif

__global__ void __launch_bounds__(kThreads, 1) persistentStepKernel(PersistentArgs args) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) std::uint8_t smem[];
    __shared__ __align__(8) std::uint64_t full[kStages], empty[kStages];
    __shared__ float partial[2][kConsumerWarps][2][16];  // [tile parity][warp][gate, up][row]
    std::uint8_t* ring = smem;
    std::uint8_t* planes = smem + kStages * kStageBytes;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) initRing(full, empty, kStages, kConsumerWarps);
    __syncthreads();
    if (warp == 0) {  // the producer: every op's items for this block's tiles, never waiting for a boundary
        if (lane == 0) {
            unsigned use = 0;
            for (int k = 0; k < kOps; ++k) {
                const Op op = args.ops[k];
                const int groups = op.in / 128;
                const int tiles = (op.out + 15) / 16;
                for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
                    for (int g0 = 0; g0 < groups; g0 += kStageGroups, ++use) {
                        const int n = min(kStageGroups, groups - g0);
                        const int s = static_cast<int>(use % kStages);
                        if (use >= kStages) waitParity(&empty[s], (use / kStages - 1) & 1);
                        std::uint8_t* stage = ring + s * kStageBytes;
                        const std::int64_t item = static_cast<std::int64_t>(t) * groups + g0;
                        const unsigned codeBytes = static_cast<unsigned>(n) * 1024, scaleBytes = static_cast<unsigned>(n) * 32;
                        expectBytes(&full[s], (codeBytes + scaleBytes) * (op.geglu ? 2 : 1));
                        bulkCopy(stage, op.codes + item * 1024, codeBytes, &full[s]);
                        bulkCopy(stage + 2 * kStageCodeBytes, op.scales + item * 8, scaleBytes, &full[s]);
                        if (op.geglu) {
                            bulkCopy(stage + kStageCodeBytes, op.upCodes + item * 1024, codeBytes, &full[s]);
                            bulkCopy(stage + 2 * kStageCodeBytes + kStageScaleBytes, op.upScales + item * 8, scaleBytes, &full[s]);
                        }
                    }
                }
            }
        }
        return;
    }
    const int cw = warp - 1;                // consumer warp 0..15
    const int c = static_cast<int>(threadIdx.x) - 32;
    const int g = lane >> 2, q = lane & 3;
    unsigned use = 0;
    int tileCount = 0;                      // tiles finished by this block (partial's parity)
    for (int k = 0; k < kOps; ++k) {
        const Op op = args.ops[k];
        const int groups = op.in / 128;
        const int tiles = (op.out + 15) / 16;
        if (k > 0) {  // every block has written the previous op's output
            consumersSync();
            if (c == 0) {
                __threadfence();
                asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(args.barrier) : "memory");
                while (gemma::cuda::loadAcquire(args.barrier) < static_cast<unsigned>(k) * gridDim.x) {
                }
            }
            consumersSync();
        }
        float* factors = reinterpret_cast<float*>(planes + fd::kPlanes * fd::planeBytes(groups));
        stageX(op.x, op.in, planes, factors, c);
        consumersSync();
        const fd::IntegerLane il = fd::integerLane(g, q, planes, factors, groups);
        for (int t = blockIdx.x; t < tiles; t += gridDim.x, ++tileCount) {
            float acc[4] = {0.f, 0.f, 0.f, 0.f}, accUp[4] = {0.f, 0.f, 0.f, 0.f};
            for (int g0 = 0; g0 < groups; g0 += kStageGroups, ++use) {
                const int n = min(kStageGroups, groups - g0);
                const int s = static_cast<int>(use % kStages);
                waitParity(&full[s], (use / kStages) & 1);
                if (cw < n) {
                    const std::uint8_t* stage = ring + s * kStageBytes;
                    auto load = [&](int weight) {
                        const uint4* item = reinterpret_cast<const uint4*>(stage + weight * kStageCodeBytes + cw * 1024);
                        fd::GroupLoad l;
                        l.rowA = item[g * 4 + q];
                        l.rowB = item[32 + g * 4 + q];
                        l.scales = reinterpret_cast<const std::uint32_t*>(stage + 2 * kStageCodeBytes + weight * kStageScaleBytes + cw * 32)[g];
                        return l;
                    };
                    const fd::IntegerX xg = fd::loadIntegerX(il.b, g0 + cw);
                    fd::groupDotInteger(load(0), xg, il.fold, acc);
                    if (op.geglu) fd::groupDotInteger(load(1), xg, il.fold, accUp);
                }
                __syncwarp();
                if (lane == 0) arrive(&empty[s]);
            }
            // The tile's row sums: each warp's, then the 16 warps' in warp order.
            float rowA, rowB, upA = 0.f, upB = 0.f;
            fd::integerRowSums(acc, il, rowA, rowB);
            if (op.geglu) fd::integerRowSums(accUp, il, upA, upB);
            const int buffer = tileCount & 1;
            if (q == 0) {
                partial[buffer][cw][0][g] = rowA;
                partial[buffer][cw][0][g + 8] = rowB;
                partial[buffer][cw][1][g] = upA;
                partial[buffer][cw][1][g + 8] = upB;
            }
            consumersSync();
            if (cw == (tileCount & (kConsumerWarps - 1)) && lane < 16) {
                const int row = t * 16 + lane;
                if (row < op.out) {
                    float sum = 0.f, upSum = 0.f;
                    for (int w = 0; w < kConsumerWarps; ++w) {
                        sum += partial[buffer][w][0][lane];
                        upSum += partial[buffer][w][1][lane];
                    }
                    op.y[row] = op.geglu ? gemma::cuda::geluTanh(sum) * upSum : sum;
                }
            }
        }
    }
#endif
}

// Random tiled weights: code bytes from a hash; scale words two bf16 of magnitude 2^-9 .. 2^-8,
// random signs (the outputs stay near the inputs' size over the chain).
__global__ void fillWeights(std::uint32_t* codes, std::int64_t codeWords, std::uint32_t* scales, std::int64_t scaleWords, std::uint32_t seed) {
    const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < codeWords; i += stride) {
        std::uint32_t h = (static_cast<std::uint32_t>(i) ^ seed) * 2654435761u;
        codes[i] = h ^ (h >> 13) ^ (h << 7);
    }
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < scaleWords; i += stride) {
        std::uint32_t h = (static_cast<std::uint32_t>(i) ^ (seed * 7u)) * 2246822519u;
        h ^= h >> 15;
        auto bf16 = [](std::uint32_t r) { return static_cast<std::uint32_t>(((r & 1u) << 15) | ((127u - 9u) << 7) | ((r >> 1) & 0x7Fu)); };
        scales[i] = bf16(h) | (bf16(h >> 8) << 16);
    }
}

}  // namespace

int main() {
    cudaDeviceProp prop{};
    if (const int skip = requireBulkCopyDevice(prop, "measure_persistent_layer")) return skip;
    // The layer's weights (out, in); the GeGLU's two weights share a shape.
    const int shapes[kOpsPerLayer][2] = {{8192, 3840}, {3840, 4096}, {15360, 3840}, {3840, 15360}};
    std::vector<std::uint8_t*> codeBuffers;
    std::vector<std::uint32_t*> scaleBuffers;
    std::int64_t stepBytes = 0;
    auto weight = [&](int out, int in, std::uint32_t seed, const std::uint8_t*& codes, const std::uint32_t*& scales) -> cudaError_t {
        const std::int64_t cb = tiled::codeBytes(out, in), sw = tiled::tiles(out) * (in / 128) * 8;
        std::uint8_t* c = nullptr;
        std::uint32_t* s = nullptr;
        if (cudaError_t e = cudaMalloc(&c, static_cast<std::size_t>(cb)); e != cudaSuccess) return e;
        if (cudaError_t e = cudaMalloc(&s, static_cast<std::size_t>(sw) * 4); e != cudaSuccess) return e;
        fillWeights<<<prop.multiProcessorCount * 4, 256>>>(reinterpret_cast<std::uint32_t*>(c), cb / 4, s, sw, seed);
        codeBuffers.push_back(c);
        scaleBuffers.push_back(s);
        stepBytes += cb + sw * 4;
        codes = c;
        scales = s;
        return cudaGetLastError();
    };
    // Vectors: the step's input, then one output per op (so every op's input and output survive
    // for the checks).
    float* vectors = nullptr;
    const std::size_t vectorFloats = kMaxIn;
    PROBE_CHECK(cudaMalloc(&vectors, (kOps + 1) * vectorFloats * sizeof(float)));
    std::vector<float> x0(vectorFloats);
    for (std::size_t i = 0; i < x0.size(); ++i) x0[i] = std::sin(0.37f * static_cast<float>(i)) * 0.8f;
    PROBE_CHECK(cudaMemcpy(vectors, x0.data(), x0.size() * sizeof(float), cudaMemcpyHostToDevice));
    std::vector<Op> ops(kOps);
    for (int k = 0; k < kOps; ++k) {
        const int kind = k % kOpsPerLayer;
        Op& op = ops[k];
        op.out = shapes[kind][0];
        op.in = shapes[kind][1];
        op.geglu = kind == 2;
        PROBE_CHECK(weight(op.out, op.in, 1000u + k, op.codes, op.scales));
        if (op.geglu) PROBE_CHECK(weight(op.out, op.in, 5000u + k, op.upCodes, op.upScales));
        op.x = vectors + k * vectorFloats;  // o reads q/k/v's first 4096 outputs
        op.y = vectors + (k + 1) * vectorFloats;
    }
    Op* deviceOps = nullptr;
    unsigned* barrier = nullptr;
    PROBE_CHECK(cudaMalloc(&deviceOps, ops.size() * sizeof(Op)));
    PROBE_CHECK(cudaMemcpy(deviceOps, ops.data(), ops.size() * sizeof(Op), cudaMemcpyHostToDevice));
    PROBE_CHECK(cudaMalloc(&barrier, sizeof(unsigned)));
    PROBE_CHECK(cudaDeviceSynchronize());

    const std::size_t smem = smemBytes();
    PROBE_CHECK(cudaFuncSetAttribute(persistentStepKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    const int blocks = prop.multiProcessorCount;
    auto persistent = [&]() {
        cudaMemsetAsync(barrier, 0, sizeof(unsigned));
        PersistentArgs args{deviceOps, barrier};
        void* params[] = {&args};
        return cudaLaunchCooperativeKernel(reinterpret_cast<void*>(persistentStepKernel), dim3(blocks), dim3(kThreads), params, smem, nullptr);
    };
    // The engine's launch for op k, reading `x` and writing `y`.
    auto launchOp = [&](int k, const float* x, float* y) {
        const Op& op = ops[k];
        Fp4MatvecParams p;
        p.codes = op.codes;
        p.scales = reinterpret_cast<const std::uint16_t*>(op.scales);
        p.out = op.out;
        p.in = op.in;
        p.x = x;
        p.xStride = op.in;
        p.y = y;
        p.yStride = op.out;
        p.tiled = true;
        p.programmaticLaunch = true;
        if (op.geglu) {
            p.upCodes = op.upCodes;
            p.upScales = reinterpret_cast<const std::uint16_t*>(op.upScales);
            return gemma::cuda::launchFp4GegluMatvec(p, nullptr);
        }
        return gemma::cuda::launchFp4Matvec(p, nullptr);
    };

    // Checks: the persistent run's ops of the first 4 layers against the engine's kernel on the
    // same input (the persistent run's own previous output).
    PROBE_CHECK(persistent());
    PROBE_CHECK(cudaDeviceSynchronize());
    float* check = nullptr;
    PROBE_CHECK(cudaMalloc(&check, vectorFloats * sizeof(float)));
    bool ok = true;
    double worst = 0.0;
    for (int k = 0; k < 4 * kOpsPerLayer; ++k) {
        const Op& op = ops[k];
        PROBE_CHECK(cudaMemset(check, 0xFF, vectorFloats * sizeof(float)));  // NaN: every output must be written
        if (launchOp(k, op.x, check) != gemma::cuda::KernelStatus::Ok) {
            std::printf("op %d: the engine's launch failed\n", k);
            return 1;
        }
        PROBE_CHECK(cudaDeviceSynchronize());
        std::vector<float> want(static_cast<std::size_t>(op.out)), got(static_cast<std::size_t>(op.out));
        PROBE_CHECK(cudaMemcpy(want.data(), check, want.size() * sizeof(float), cudaMemcpyDeviceToHost));
        PROBE_CHECK(cudaMemcpy(got.data(), op.y, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
        double diff = 0.0, norm = 0.0;
        bool finite = true;
        for (std::size_t i = 0; i < want.size(); ++i) {
            finite &= std::isfinite(got[i]) && std::isfinite(want[i]);
            diff += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
            norm += static_cast<double>(want[i]) * want[i];
        }
        const double rel = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
        worst = std::max(worst, rel);
        ok &= finite && rel <= 1e-5;
    }
    std::printf("measure_persistent_layer on %s (%d SMs): the 12b's decode matvecs, %d ops, %.2f GB\n", prop.name, blocks, kOps,
                static_cast<double>(stepBytes) * 1e-9);
    std::printf("check (layers 0-3, each op against the engine's kernel on the same input): %s, worst relative norm error %.2e\n",
                ok ? "ok" : "FAILED", worst);

    cudaEvent_t start, stop;
    PROBE_CHECK(cudaEventCreate(&start));
    PROBE_CHECK(cudaEventCreate(&stop));
    auto timeMs = [&](auto&& one) { return medianMs(one, 7, start, stop); };
    const double launchesMs = timeMs([&]() {
        for (int k = 0; k < kOps; ++k)
            if (launchOp(k, ops[k].x, ops[k].y) != gemma::cuda::KernelStatus::Ok) return cudaErrorUnknown;
        return cudaSuccess;
    });
    const double persistentMs = timeMs(persistent);
    std::printf("launches (192, programmatic)  %7.3f ms per step %7.0f GB/s\n", launchesMs, static_cast<double>(stepBytes) / (launchesMs * 1e6));
    std::printf("persistent (one launch)       %7.3f ms per step %7.0f GB/s (%.2fx)\n", persistentMs,
                static_cast<double>(stepBytes) / (persistentMs * 1e6), launchesMs / persistentMs);
    for (auto* c : codeBuffers) cudaFree(c);
    for (auto* s : scaleBuffers) cudaFree(s);
    return ok ? 0 : 1;
}
