// Measurement tool (not a test): can one persistent kernel keep a decode step's weight stream
// going across the step's op boundaries? docs/PERFORMANCE.md version 25 step 4 explains why it is
// asked: every FP4 matvec launch of the 12b is 1.3–3.8 µs slower than a plain read of its bytes,
// and a plain read of 5–30 MB itself reaches only 35–67 % of the read ceiling, because each
// launch starts its stream from nothing. Weights do not depend on activations, so a kernel that
// outlives the boundaries could stream the next op's weights while the current op's last blocks
// finish and while the blocks agree that its output is complete.
//
// The kernel here has no model arithmetic of its own beyond an optional stand-in: one block per SM
// (cooperative launch, all resident), a producer warp that copies the weights in 8 KB chunks into a
// shared-memory ring (cp.async.bulk, one mbarrier per stage for "full" and one for "empty"), and 8
// consumer warps that read every chunk. The step is the 12b's op sequence, 48 × (q/k/v 15.7 MB,
// o 7.9 MB, gate/up 59.0 MB, down 29.5 MB) = 5.43 GB of FP4 codes; op k's chunks go round-robin to
// the blocks. Forms, each timed as whole steps:
//   stream             no boundaries: the ring's rate over the whole step
//   boundaries         the consumers meet in a grid-wide barrier after every op (192 per step),
//                      the producer copying ahead across it (the ring holds 96 KB per SM)
//   boundaries, stop   the producer waits for each barrier too: the stream stops at every op, as
//                      it does between launches today
//   + x                after each barrier every block reads the op's input vector from global
//                      memory (3840, 4096, 3840, 15360 floats), as a matvec stages x
//   + decode           the consumers decode each 1 KB item as the FP4 matvec's integer path does
//                      (16 table lookups per lane and 8 int8 mma per item; x a constant)
// Against the read ceiling measured in the same run (StreamRead.h over the same bytes). A data
// check first: in the plain stream, the sum of every word the consumers read must equal the
// buffer's sum (each chunk delivered once, whole). Each form runs with 8 or 16 consumer warps, 96
// or 192 KB of ring, and two barriers (a counter the last block resets plus a generation word, or
// one monotonic counter), and with an op's chunks round-robin or handed out by an atomic counter.
// Last, five forms traced: block 0's time from one op's end to the next's, by op kind, against the
// op's bytes at the ceiling (where the boundaries' time goes).
//   measure_weight_stream     # prints one line per form; exit 77 without a CUDA device
// Its numbers are clean only with the GPU otherwise idle (scripts/gpu_persistent_probes.sh).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <vector>

#include "../../kernels/cuda/StreamRead.cu"  // standalone project: no kernel library
#include "CudaCommon.h"
#include "PersistentProbe.h"
#include "kernels/Fp4Decode.h"

namespace {

using namespace gemma::probe;

// A chunk is one 1 KB item per consumer warp; the ring holds `stages` chunks (at most
// StreamArgs::kMaxStages).
template <int CW>
__host__ __device__ constexpr int chunkBytes() { return CW * 1024; }
constexpr int kLayers = 48;
constexpr int kOpsPerLayer = 4;
// The 12b's FP4 code bytes per op (rows × in / 2) and the op's input width (floats).
__host__ __device__ constexpr std::int64_t opBytes(int op) {
    return op == 0 ? 8192LL * 3840 / 2 : op == 1 ? 3840LL * 4096 / 2 : op == 2 ? 2LL * 15360 * 3840 / 2 : 3840LL * 15360 / 2;
}


// kNoData: the producer copies nothing and the consumers read nothing (the barriers alone).
// kCounter: the barrier is one monotonic counter (each block adds 1 with release semantics and
// polls it with acquire loads until every block of this boundary has) instead of a counter the
// last block resets plus a generation word.
// kTrace: block 0 records the global time at the start and as each op ends for it (its consumers
// past the op's barrier; the last op: its own last chunk), so the host can split the step by op.
// kDynamic: an op's chunks are handed out by an atomic counter per op (each block's producer takes
// the next one until none is left, then sends its consumers an end mark through the ring) instead
// of round-robin, so that the blocks finish each op together whatever their rates.
enum Flags : unsigned {
    kBoundaries = 1,
    kStopAtBoundary = 2,
    kReadX = 4,
    kDecode = 8,
    kNoData = 16,
    kCounter = 32,
    kTrace = 64,
    kDynamic = 128
};

struct StreamArgs {
    const std::uint8_t* weights;
    const float* x;                  // 15360 floats: the ops' inputs
    unsigned* barrier;               // [0]: arrivals, [1]: generation (zeroed before each launch)
    unsigned long long* checksum;    // the consumers' sum of the words read
    unsigned flags;
    static constexpr int kMaxStages = 24;
    int stages;                      // ring depth in chunks, 1 .. kMaxStages
    unsigned sleepNs;                // the barrier's polling pause (0: spin)
    unsigned long long* trace;       // kTrace: [ops + 1] global times in ns (block 0)
    unsigned* opChunks;              // kDynamic: [ops] chunks handed out (zeroed before each launch)
};

// The device helpers exist where the kernel's body does (sm_90+; the host pass declares them).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
__host__ __device__ constexpr int opInput(int op) { return op == 0 ? 3840 : op == 1 ? 4096 : op == 2 ? 3840 : 15360; }

__device__ __forceinline__ unsigned loadVolatile(const unsigned* p) { return *reinterpret_cast<const volatile unsigned*>(p); }

__device__ __forceinline__ void imma(int (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// One 1 KB item as the FP4 matvec's tiled integer path decodes it (Fp4Matvec.cu's
// groupDotInteger<true>: stored codes, rows g and g+8, 16 code bytes each per lane), against
// constant B columns. (Version 25's numbers in docs/PERFORMANCE.md were measured with the xor form.)
__device__ __forceinline__ void decodeItem(const uint4 rowA, const uint4 rowB, int (&pos)[4], int (&neg)[4]) {
    const std::uint32_t wordsA[4] = {rowA.x, rowA.y, rowA.z, rowA.w};
    const std::uint32_t wordsB[4] = {rowB.x, rowB.y, rowB.z, rowB.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        std::uint32_t p[4], n[4];
        gemma::formats::fp4decode::decodeInt8QuadStored(wordsA[j], p[0], n[0]);
        gemma::formats::fp4decode::decodeInt8QuadStored(wordsB[j], p[1], n[1]);
        gemma::formats::fp4decode::decodeInt8QuadStored(wordsA[j] >> 16, p[2], n[2]);
        gemma::formats::fp4decode::decodeInt8QuadStored(wordsB[j] >> 16, p[3], n[3]);
        imma(pos, p, 0x01020304u, 0x05060708u);
        imma(neg, n, 0x01020304u, 0x05060708u);
    }
}

// The consumers' grid-wide barrier: every consumer thread of every block has finished the op
// before any goes on. One thread per block counts in; the last one bumps the generation.
// Boundary `generation` (0-based) has passed: every block has arrived at it.
__device__ __forceinline__ bool boundaryPassed(const unsigned* barrier, unsigned generation, bool counter) {
    return counter ? gemma::cuda::loadAcquire(barrier) >= (generation + 1) * gridDim.x : loadVolatile(barrier + 1) > generation;
}
template <int CW>
__device__ __forceinline__ void consumerBarrier(unsigned* barrier, unsigned generation, unsigned sleepNs, bool counter) {
    asm volatile("bar.sync 1, %0;\n" ::"n"(32 * CW) : "memory");
    if (threadIdx.x == 32 && counter) {
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(barrier) : "memory");
        while (!boundaryPassed(barrier, generation, true))
            if (sleepNs) __nanosleep(sleepNs);
    } else if (threadIdx.x == 32) {
        __threadfence();
        if (atomicAdd(barrier, 1u) == gridDim.x - 1) {
            barrier[0] = 0;
            __threadfence();
            atomicExch(barrier + 1, generation + 1);
        } else {
            while (loadVolatile(barrier + 1) <= generation)
                if (sleepNs) __nanosleep(sleepNs);
        }
        __threadfence();
    }
    asm volatile("bar.sync 1, %0;\n" ::"n"(32 * CW) : "memory");
}

#endif

// CW consumer warps and one producer warp per block.
template <int CW>
__global__ void __launch_bounds__(32 * (CW + 1), 1) weightStreamKernel(StreamArgs args) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    constexpr int kChunkBytes = chunkBytes<CW>();
    extern __shared__ __align__(128) std::uint8_t ring[];
    __shared__ __align__(8) std::uint64_t full[StreamArgs::kMaxStages], empty[StreamArgs::kMaxStages];
    __shared__ unsigned stageChunk[StreamArgs::kMaxStages];  // kDynamic: the chunk a stage holds, or kEndOfOp
    constexpr unsigned kEndOfOp = 0xFFFFFFFFu;
    const unsigned kStages = static_cast<unsigned>(args.stages);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (threadIdx.x == 0) initRing(full, empty, kStages, CW);
    __syncthreads();
    const unsigned flags = args.flags;
    const int ops = kLayers * kOpsPerLayer;
    if (warp == 0) {  // the producer
        if (lane == 0) {
            std::int64_t offset = 0;
            unsigned use = 0;  // chunks issued by this block so far
            for (int k = 0; k < ops; ++k) {
                const std::int64_t bytes = opBytes(k % kOpsPerLayer);
                if ((flags & kStopAtBoundary) && k > 0)
                    while (!boundaryPassed(args.barrier, static_cast<unsigned>(k - 1), flags & kCounter)) __nanosleep(20);
                if (flags & kNoData) continue;
                if (flags & kDynamic) {
                    // The next chunk's number is asked for before this one's stage is waited for,
                    // so the atomic's round trip overlaps the wait.
                    const unsigned chunks = static_cast<unsigned>(bytes / kChunkBytes);
                    unsigned c = atomicAdd(args.opChunks + k, 1u);
                    for (;; ++use) {
                        const unsigned next = c < chunks ? atomicAdd(args.opChunks + k, 1u) : chunks;
                        const int s = static_cast<int>(use % kStages);
                        if (use >= kStages) waitParity(&empty[s], (use / kStages - 1) & 1);
                        if (c >= chunks) {  // the end mark: a stage with no bytes
                            stageChunk[s] = kEndOfOp;
                            arrive(&full[s]);
                            ++use;
                            break;
                        }
                        stageChunk[s] = c;
                        expectBytes(&full[s], kChunkBytes);
                        bulkCopy(ring + s * kChunkBytes, args.weights + offset + static_cast<std::int64_t>(c) * kChunkBytes, kChunkBytes,
                                 &full[s]);
                        c = next;
                    }
                } else {
                    for (std::int64_t c = blockIdx.x; c * kChunkBytes < bytes; c += gridDim.x, ++use) {
                        const int s = static_cast<int>(use % kStages);
                        if (use >= kStages) waitParity(&empty[s], (use / kStages - 1) & 1);
                        expectBytes(&full[s], kChunkBytes);
                        bulkCopy(ring + s * kChunkBytes, args.weights + offset + c * kChunkBytes, kChunkBytes, &full[s]);
                    }
                }
                offset += bytes;
            }
        }
        return;
    }
    // The consumers: warp w reads its 1 KB item of each chunk.
    const int cw = warp - 1;
    unsigned long long sum = 0;
    int pos[4] = {0, 0, 0, 0}, neg[4] = {0, 0, 0, 0};
    unsigned use = 0;
    const bool tracer = (flags & kTrace) && blockIdx.x == 0 && threadIdx.x == 32;
    if (tracer) args.trace[0] = globalTime();
    for (int k = 0; k < ops; ++k) {
        const std::int64_t bytes = opBytes(k % kOpsPerLayer);
        if ((flags & kBoundaries) && k > 0) consumerBarrier<CW>(args.barrier, static_cast<unsigned>(k - 1), args.sleepNs, flags & kCounter);
        if (tracer && k > 0) args.trace[k] = globalTime();
        if (flags & kReadX) {  // the op's input, every block all of it (a matvec's x staging)
            const int n4 = opInput(k % kOpsPerLayer) / 4;
            float acc = 0.0f;
            for (int i = threadIdx.x - 32; i < n4; i += 32 * CW) {
                const float4 v = __ldcg(reinterpret_cast<const float4*>(args.x) + i);
                acc += v.x + v.y + v.z + v.w;
            }
            sum += static_cast<unsigned long long>(__float_as_uint(acc) & 1u);
        }
        if (flags & kNoData) continue;
        // One stage: wait for it, read (or decode) this warp's item unless it is the end mark,
        // release it. Returns whether it held a chunk.
        auto consume = [&]() {
            const int s = static_cast<int>(use % kStages);
            waitParity(&full[s], (use / kStages) & 1);
            ++use;
            const bool data = !(flags & kDynamic) || stageChunk[s] != kEndOfOp;
            if (data) {
                const uint4* item = reinterpret_cast<const uint4*>(ring + s * kChunkBytes + cw * 1024) + lane * 2;
                const uint4 a = item[0], b = item[1];
                if (flags & kDecode) {
                    decodeItem(a, b, pos, neg);
                } else {
                    sum += static_cast<unsigned long long>(a.x) + a.y + a.z + a.w + b.x + b.y + b.z + b.w;
                }
            }
            __syncwarp();
            if (lane == 0) arrive(&empty[s]);
            return data;
        };
        if (flags & kDynamic) {
            while (consume()) {
            }
        } else {
            for (std::int64_t c = blockIdx.x; c * kChunkBytes < bytes; c += gridDim.x) consume();
        }
    }
    if (tracer) args.trace[ops] = globalTime();
    sum += static_cast<unsigned long long>(static_cast<unsigned>(pos[0] + pos[1] + pos[2] + pos[3] - neg[0] - neg[1] - neg[2] - neg[3]) & 1u);
    atomicAdd(args.checksum, sum);
#endif
}

// The buffer's words: a hash of their index, so a chunk delivered twice or not at all changes the sum.
__global__ void fillKernel(std::uint32_t* words, std::int64_t n) {
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        std::uint32_t h = static_cast<std::uint32_t>(i) * 2654435761u;
        words[i] = h ^ (h >> 15);
    }
}
__global__ void sumKernel(const std::uint32_t* words, std::int64_t n, unsigned long long* total) {
    unsigned long long s = 0;
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
        s += words[i];
    atomicAdd(total, s);
}

}  // namespace

int main() {
    cudaDeviceProp prop{};
    if (const int skip = requireBulkCopyDevice(prop, "measure_weight_stream")) return skip;
    std::int64_t stepBytes = 0;
    for (int op = 0; op < kOpsPerLayer; ++op) stepBytes += opBytes(op);
    stepBytes *= kLayers;
    std::uint8_t* weights = nullptr;
    float* x = nullptr;
    unsigned* barrier = nullptr;
    unsigned long long* sums = nullptr;
    unsigned long long* trace = nullptr;
    std::uint32_t* sink = nullptr;
    PROBE_CHECK(cudaMalloc(&weights, static_cast<std::size_t>(stepBytes)));
    PROBE_CHECK(cudaMalloc(&x, 15360 * sizeof(float)));
    PROBE_CHECK(cudaMalloc(&barrier, 2 * sizeof(unsigned)));
    PROBE_CHECK(cudaMalloc(&sums, 2 * sizeof(unsigned long long)));
    PROBE_CHECK(cudaMalloc(&trace, (kLayers * kOpsPerLayer + 1) * sizeof(unsigned long long)));
    unsigned* opChunks = nullptr;
    PROBE_CHECK(cudaMalloc(&opChunks, kLayers * kOpsPerLayer * sizeof(unsigned)));
    PROBE_CHECK(cudaMalloc(&sink, 4096 * sizeof(std::uint32_t)));
    PROBE_CHECK(cudaMemset(x, 0, 15360 * sizeof(float)));
    fillKernel<<<prop.multiProcessorCount * 8, 256>>>(reinterpret_cast<std::uint32_t*>(weights), stepBytes / 4);
    PROBE_CHECK(cudaMemset(sums, 0, 2 * sizeof(unsigned long long)));
    sumKernel<<<prop.multiProcessorCount * 8, 256>>>(reinterpret_cast<const std::uint32_t*>(weights), stepBytes / 4, sums + 1);
    PROBE_CHECK(cudaDeviceSynchronize());

    cudaEvent_t start, stop;
    PROBE_CHECK(cudaEventCreate(&start));
    PROBE_CHECK(cudaEventCreate(&stop));
    const int blocks = prop.multiProcessorCount;
    // One configuration of the kernel: CW consumer warps, `stages` chunks of ring, the barrier's pause.
    struct Config {
        int consumerWarps, stages;
        unsigned sleepNs;
    };
    auto launch = [&](const Config& c, unsigned flags) -> cudaError_t {
        if (c.stages < 1 || c.stages > StreamArgs::kMaxStages) return cudaErrorInvalidValue;
        const std::size_t smem = static_cast<std::size_t>(c.stages) * c.consumerWarps * 1024;
        const void* kernel = c.consumerWarps == 16 ? reinterpret_cast<const void*>(weightStreamKernel<16>)
                                                   : reinterpret_cast<const void*>(weightStreamKernel<8>);
        if (const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)); e != cudaSuccess)
            return e;
        cudaMemsetAsync(barrier, 0, 2 * sizeof(unsigned));
        cudaMemsetAsync(opChunks, 0, kLayers * kOpsPerLayer * sizeof(unsigned));
        StreamArgs args{weights, x, barrier, sums, flags, c.stages, c.sleepNs, trace, opChunks};
        void* params[] = {&args};
        return cudaLaunchCooperativeKernel(kernel, dim3(blocks), dim3(32 * (c.consumerWarps + 1)), params, smem, nullptr);
    };
    auto timeMs = [&](auto&& one, int reps) { return medianMs(one, reps, start, stop); };

    // The data check: the plain stream's consumers must read every word once (both kernels, the
    // chunks round-robin and handed out dynamically).
    bool delivered = true;
    for (const unsigned dataFlags : {0u, static_cast<unsigned>(kDynamic)}) {
        for (int cw : {8, 16}) {
            PROBE_CHECK(cudaMemset(sums, 0, sizeof(unsigned long long)));
            PROBE_CHECK(launch({cw, 12, 20}, dataFlags));
            PROBE_CHECK(cudaDeviceSynchronize());
            unsigned long long host[2] = {0, 0};
            PROBE_CHECK(cudaMemcpy(host, sums, sizeof host, cudaMemcpyDeviceToHost));
            delivered &= host[0] == host[1];
        }
    }

    gemma::cuda::StreamReadParams read;
    read.data = weights;
    read.bytes = stepBytes;
    read.sink = sink;
    const double ceilingMs = timeMs([&] { return gemma::cuda::launchStreamRead(read, nullptr) == gemma::cuda::KernelStatus::Ok ? cudaSuccess : cudaErrorUnknown; }, 7);
    const double ceiling = static_cast<double>(stepBytes) / (ceilingMs * 1e-3) * 1e-9;
    std::printf("measure_weight_stream on %s (%d SMs): a 12b step's FP4 codes, %.2f GB in %d ops\n", prop.name, blocks,
                static_cast<double>(stepBytes) * 1e-9, kLayers * kOpsPerLayer);
    std::printf("data check (every chunk read once, whole; 8 and 16 consumer warps; round-robin and dynamic chunks): %s\n",
                delivered ? "ok" : "FAILED");
    std::printf("read ceiling (StreamRead over the same bytes): %.3f ms, %.0f GB/s\n", ceilingMs, ceiling);
    struct Form {
        const char* name;
        unsigned flags;
    };
    const Form forms[] = {
        {"stream (no boundaries)", 0},
        {"boundaries, producer ahead", kBoundaries},
        {"boundaries, producer stops", kBoundaries | kStopAtBoundary},
        {"boundaries + x, producer ahead", kBoundaries | kReadX},
        {"boundaries + x, producer stops", kBoundaries | kStopAtBoundary | kReadX},
        {"boundaries + x + decode, ahead", kBoundaries | kReadX | kDecode},
        {"boundaries + x + decode, stops", kBoundaries | kStopAtBoundary | kReadX | kDecode},
        {"stream + decode (no boundaries)", kDecode},
        {"barriers alone (no data)", kBoundaries | kNoData},
        {"barriers alone, one counter", kBoundaries | kNoData | kCounter},
        {"boundaries (counter), ahead", kBoundaries | kCounter},
        {"boundaries + x + decode (counter)", kBoundaries | kReadX | kDecode | kCounter},
        {"boundaries (counter), dynamic chunks", kBoundaries | kCounter | kDynamic},
        {"b. + x + decode (counter), dynamic", kBoundaries | kReadX | kDecode | kCounter | kDynamic},
    };
    const Config configs[] = {{8, 12, 20}, {16, 6, 20}, {16, 12, 20}, {16, 12, 0}};
    for (const Config& c : configs) {
        std::printf("-- %d consumer warps, ring %d × %d KB per SM (%d KB), barrier poll pause %u ns\n", c.consumerWarps, c.stages,
                    c.consumerWarps, c.stages * c.consumerWarps, c.sleepNs);
        for (const Form& f : forms) {
            const double ms = timeMs([&] { return launch(c, f.flags); }, 7);
            if (ms < 0) {
                std::printf("%-34s launch failed: %s\n", f.name, cudaGetErrorString(cudaGetLastError()));
                continue;
            }
            if (f.flags & kNoData) {  // no bytes: the barriers' own time
                std::printf("%-34s %7.3f ms per step %7.2f us per barrier\n", f.name, ms, ms * 1e3 / (kLayers * kOpsPerLayer - 1));
                continue;
            }
            const double gbs = static_cast<double>(stepBytes) / (ms * 1e-3) * 1e-9;
            std::printf("%-34s %7.3f ms per step %7.0f GB/s %6.1f %% of the ceiling\n", f.name, ms, gbs, 100.0 * gbs / ceiling);
        }
    }
    // Where the boundaries' time goes, by op (16 consumer warps, 96 KB ring): one traced launch
    // per form after a warm-up; per op kind the mean time from one op's end to the next's as
    // block 0 saw it, against the op's bytes at the ceiling. The stream without boundaries, traced
    // the same way, shows what block 0's view of an op costs without them.
    const unsigned traced[] = {kCounter,
                               kBoundaries | kCounter,
                               kBoundaries | kCounter | kReadX | kDecode,
                               kBoundaries | kCounter | kReadX | kDecode | kDynamic,
                               kBoundaries | kStopAtBoundary | kReadX | kDecode};
    const char* tracedNames[] = {"stream (no boundaries)", "boundaries (counter), ahead", "boundaries + x + decode (counter), ahead",
                                 "the same, dynamic chunks", "boundaries + x + decode, stops"};
    const char* opNames[kOpsPerLayer] = {"q/k/v", "o", "gate/up", "down"};
    constexpr int kOps = kLayers * kOpsPerLayer;
    std::printf("-- per op, 16 consumer warps, ring 6 × 16 KB: mean µs from one op's end to the next's (block 0), "
                "and that minus the op's bytes at the ceiling\n");
    for (std::size_t t = 0; t < std::size(traced); ++t) {
        launch({16, 6, 20}, traced[t] | kTrace);  // warm-up
        PROBE_CHECK(launch({16, 6, 20}, traced[t] | kTrace));
        PROBE_CHECK(cudaDeviceSynchronize());
        std::vector<unsigned long long> times(kOps + 1);
        PROBE_CHECK(cudaMemcpy(times.data(), trace, times.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
        std::printf("%-42s", tracedNames[t]);
        for (int op = 0; op < kOpsPerLayer; ++op) {
            double sum = 0;
            for (int k = op; k < kOps; k += kOpsPerLayer) sum += static_cast<double>(times[k + 1] - times[k]) * 1e-3;
            const double mean = sum / kLayers;
            const double ideal = static_cast<double>(opBytes(op)) / (ceiling * 1e3);  // µs at the ceiling
            std::printf(" | %s %6.2f (+%5.2f)", opNames[op], mean, mean - ideal);
        }
        std::printf("\n");
    }
    PROBE_CHECK(cudaDeviceSynchronize());
    return delivered ? 0 : 1;
}
