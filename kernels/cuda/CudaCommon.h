// Device helpers shared by the kernels in kernels/cuda: warp reductions, BF16 / FP16 storage helpers,
// cp.async wrappers, the device-property query every launcher sizes its grid from, and the launch
// helper (optionally programmatic) of the decode-step kernels.
// Header-only (everything inline) so that a harness may #include several production .cu files.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <kernels/WeightFormats.h>

#include "KernelStatus.h"
#include "KvCache.h"

namespace gemma::cuda {

// ---- host: device facts ------------------------------------------------------------------------
struct DeviceFacts {
    int device = 0;
    int smCount = 0;
    int maxSharedPerBlockOptin = 0;  // bytes a block may use after cudaFuncSetAttribute
    int maxSharedPerSm = 0;
    int computeMajor = 0;            // 9 and up: programmatic dependent launch exists
};

// Cached per host thread and device: a launcher calls this on every launch, and the attribute
// queries would otherwise add host time to each one.
inline KernelStatus queryDeviceFacts(DeviceFacts& facts) {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return KernelStatus::LaunchFailed;
    thread_local DeviceFacts cached{-1, 0, 0, 0, 0};
    if (cached.device == device) {
        facts = cached;
        return KernelStatus::Ok;
    }
    facts.device = device;
    if (cudaDeviceGetAttribute(&facts.smCount, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
        return KernelStatus::LaunchFailed;
    if (cudaDeviceGetAttribute(&facts.maxSharedPerBlockOptin,
                               cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)
        return KernelStatus::LaunchFailed;
    if (cudaDeviceGetAttribute(&facts.maxSharedPerSm, cudaDevAttrMaxSharedMemoryPerMultiprocessor,
                               device) != cudaSuccess)
        return KernelStatus::LaunchFailed;
    if (cudaDeviceGetAttribute(&facts.computeMajor, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess)
        return KernelStatus::LaunchFailed;
    cached = facts;
    return KernelStatus::Ok;
}

inline KernelStatus launchStatus() {
    return cudaGetLastError() == cudaSuccess ? KernelStatus::Ok : KernelStatus::LaunchFailed;
}
inline KernelStatus launchStatus(cudaError_t err) {
    return err == cudaSuccess ? KernelStatus::Ok : KernelStatus::LaunchFailed;
}

// kernel<<<grid, block, smem, stream>>>(args...), optionally as a programmatic dependent launch,
// optionally in thread-block clusters of `clusterX` blocks along x (launchClusterKernel).
// Contract:
// - `args` convert to the kernel's parameter types at the call, by the rules of an ordinary call
//   (Params is deduced from `kernel` only): an int64 passed for an int parameter converts as in a
//   call, a pointer of the wrong type (e.g. const for non-const) does not compile, and
//   cudaLaunchKernelEx gets exactly the kernel's types.
// - programmatic and the current device is sm_90+: the launch carries
//   cudaLaunchAttributeProgrammaticStreamSerialization, so the kernel may start while the
//   previous kernel in `stream` still runs (once that kernel called allowDependentsToStart() in
//   every block, or finished). The kernel must then call gridDependencyWait() in every thread of
//   every block (early-returning ones too) before it reads anything an earlier kernel writes and
//   before its first global write. That wait covers the previous kernel only; earlier ones are
//   covered because every kernel of the chain waits before it can finish. Otherwise (not asked,
//   below sm_90): an ordinary launch.
// - clusterX > 0 (sm_90+ only; the caller checks): cudaLaunchAttributeClusterDimension {clusterX,
//   1, 1}; grid.x must be a multiple of it, and sizes above 8 need the kernel's
//   cudaFuncAttributeNonPortableClusterSizeAllowed set first.
// - Returns the launch's error; the runtime's last-error slot is consumed as launchStatus() does.
template <typename... Params>
inline cudaError_t launchKernelWith(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem, cudaStream_t stream,
                                    bool programmatic, unsigned clusterX, std::type_identity_t<Params>... args) {
    cudaLaunchAttribute attributes[2]{};
    cudaLaunchConfig_t config{};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    config.attrs = attributes;
    config.numAttrs = 0;
    if (programmatic) {
        DeviceFacts facts;
        if (queryDeviceFacts(facts) != KernelStatus::Ok) return cudaErrorInvalidDevice;
        if (facts.computeMajor >= 9) {
            attributes[config.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
            attributes[config.numAttrs].val.programmaticStreamSerializationAllowed = 1;
            ++config.numAttrs;
        }
    }
    if (clusterX > 0) {
        attributes[config.numAttrs].id = cudaLaunchAttributeClusterDimension;
        attributes[config.numAttrs].val.clusterDim.x = clusterX;
        attributes[config.numAttrs].val.clusterDim.y = 1;
        attributes[config.numAttrs].val.clusterDim.z = 1;
        ++config.numAttrs;
    }
    const cudaError_t err = cudaLaunchKernelEx(&config, kernel, args...);
    const cudaError_t last = cudaGetLastError();
    return err != cudaSuccess ? err : last;
}
template <typename... Params>
inline cudaError_t launchKernel(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem,
                                cudaStream_t stream, bool programmatic, std::type_identity_t<Params>... args) {
    return launchKernelWith(kernel, grid, block, smem, stream, programmatic, 0u, args...);
}

inline bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }
// Whether the byte ranges [a, a + aBytes) and [b, b + bBytes) share a byte (launchers refusing
// aliased buffers).
inline bool rangesOverlap(const void* a, std::int64_t aBytes, const void* b, std::int64_t bBytes) {
    const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
    return x < y + static_cast<std::uintptr_t>(bBytes) && y < x + static_cast<std::uintptr_t>(aBytes);
}

// A positive power of two (the exact multipliers of the FP16 conversions).
inline bool isPowerOfTwo(float v) {
    int exponent = 0;
    return v > 0.0f && std::frexp(v, &exponent) == 0.5f;
}

// Blocks of a grid-stride kernel: `wanted`, capped at one resident wave (a block past it would run
// as a late second wave and double the time). Blocks per SM come from the occupancy calculator,
// cached in `cache` per device (one cache per kernel instance: thread_local at the call site).
struct OccupancyCache {
    int device = -1;
    int blocksPerSm = 1;
};
template <typename Kernel>
inline KernelStatus oneWaveBlocks(Kernel kernel, int threads, std::int64_t wanted, const DeviceFacts& facts,
                                  OccupancyCache& cache, unsigned& blocks) {
    if (cache.device != facts.device) {
        int perSm = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kernel, threads, 0) != cudaSuccess)
            return KernelStatus::LaunchFailed;
        cache.blocksPerSm = perSm > 0 ? perSm : 1;
        cache.device = facts.device;
    }
    const std::int64_t resident = static_cast<std::int64_t>(facts.smCount) * cache.blocksPerSm;
    blocks = static_cast<unsigned>(wanted < 1 ? 1 : wanted > resident ? resident : wanted);
    return KernelStatus::Ok;
}

// ---- device: programmatic dependent launch (sm_90+; no-ops elsewhere) ---------------------------
// A kernel launched with cudaLaunchAttributeProgrammaticStreamSerialization (launchKernel with
// programmatic = true) may start while the previous kernel in the stream still runs; it must call
// gridDependencyWait() before it reads anything that kernel writes (the wait returns at once when
// there is no such dependency). A kernel calls allowDependentsToStart() to let such a successor be
// scheduled before it finishes (the successor still waits for all of its writes).
__device__ __forceinline__ void gridDependencyWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
// A word another block (or kernel) publishes with release semantics, read at GPU scope with
// acquire semantics: what it wrote before the release is visible after this load returns it.
__device__ __forceinline__ unsigned loadAcquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void allowDependentsToStart() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// ---- device: GELU ---------------------------------------------------------------------------------
// gelu with the tanh approximation (GEMMA4.md: hidden_activation gelu_pytorch_tanh).
__device__ __forceinline__ float geluTanh(float v) {
    const float kAlpha = 0.7978845608028654f;  // sqrt(2/pi)
    const float inner = kAlpha * (v + 0.044715f * v * v * v);
    return 0.5f * v * (1.0f + tanhf(inner));
}

// ---- device: reductions ------------------------------------------------------------------------
__device__ __forceinline__ float warpSum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}
__device__ __forceinline__ float warpMax(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Sum over the block; every thread gets the result. `scratch` holds >= 32 floats of shared
// memory. Contains two __syncthreads(): call it from all threads of the block.
__device__ __forceinline__ float blockSum(float v, float* scratch) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = (blockDim.x + 31) >> 5;
    v = warpSum(v);
    __syncthreads();  // scratch may still be read by a previous call
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < warps; ++w) total += scratch[w];
    return total;
}
// blockSum for a scratch area that no earlier call in this launch has used, so that nothing can
// still be reading it: without blockSum's first barrier. The same sum in the same order.
__device__ __forceinline__ float blockSumFresh(float v, float* scratch) {
    v = warpSum(v);
    if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < static_cast<int>((blockDim.x + 31) >> 5); ++w) total += scratch[w];
    return total;
}

// ---- device: BF16 storage (raw uint16 bits, as WeightFormats.h) --------------------------------
__device__ __forceinline__ float bf16LoToFloat(std::uint32_t pair) { return __uint_as_float(pair << 16); }
__device__ __forceinline__ float bf16HiToFloat(std::uint32_t pair) {
    return __uint_as_float(pair & 0xFFFF0000u);
}

// ---- device: 16-bit KV-cache storage (KvCache.h): KvT std::uint16_t holds BF16 bits, __half FP16 --
// One 32-bit word of two stored values (the lower address in the low half) as two floats (exact).
template <typename KvT>
__device__ __forceinline__ float2 kvPairToFloat2(std::uint32_t pair) {
    if constexpr (std::is_same_v<KvT, __half>) return __half22float2(*reinterpret_cast<const __half2*>(&pair));
    else return make_float2(bf16LoToFloat(pair), bf16HiToFloat(pair));
}
// One stored value as a float (exact), and a float rounded to the storage type (nearest even).
template <typename KvT>
__device__ __forceinline__ float kvToFloat(KvT v) {
    if constexpr (std::is_same_v<KvT, __half>) return __half2float(v);
    else return bf16LoToFloat(v);
}
template <typename KvT>
__device__ __forceinline__ KvT floatToKv(float v) {
    if constexpr (std::is_same_v<KvT, __half>) return __float2half_rn(v);
    else return formats::floatToBf16(v);
}
// Host: calls f.template operator()<KvT>() with the storage type of `dtype` (float, std::uint16_t
// for BF16 bits, __half), so that every kernel templated on the cache type picks it in one place.
template <typename F>
decltype(auto) withKvStorage(KvDtype dtype, F&& f) {
    switch (dtype) {
        case KvDtype::BF16: return f.template operator()<std::uint16_t>();
        case KvDtype::F16: return f.template operator()<__half>();
        case KvDtype::F32: break;
    }
    return f.template operator()<float>();
}

// ---- device: cp.async (sm_80+) -----------------------------------------------------------------
// A shared-memory pointer as the 32-bit shared address the PTX instructions take.
__device__ __forceinline__ unsigned sharedAddress(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }
// 16-byte global->shared copy; when `valid` is false the 16 shared bytes are zero-filled and the
// global address is not read.
__device__ __forceinline__ void cpAsync16(void* smem, const void* gmem, bool valid) {
    const unsigned saddr = sharedAddress(smem);
    const int srcBytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(saddr), "l"(gmem),
                 "r"(srcBytes)
                 : "memory");
}
__device__ __forceinline__ void cpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cpAsyncWait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ---- device: bulk copies and mbarriers (sm_90+) ------------------------------------------------
// The Hopper copy engine's one-instruction global->shared copies (cp.async.bulk), completing on an
// mbarrier that counts their bytes. The instructions exist on sm_90+ only: a caller must not
// instantiate a use for an older target (AttentionPrefill.cu's bulk instance traps there).
// An mbarrier expecting `count` arrivals per phase.
__device__ __forceinline__ void initBarrier(std::uint64_t* b, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(sharedAddress(b)), "r"(count) : "memory");
}
// Makes the barriers' initialization visible to the copy engine (before the block barrier that
// precedes their first use).
__device__ __forceinline__ void fenceBarrierInit() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void waitParity(std::uint64_t* b, unsigned parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n"
        "}\n" ::"r"(sharedAddress(b)),
        "r"(parity)
        : "memory");
}
__device__ __forceinline__ void arrive(std::uint64_t* b) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(sharedAddress(b)) : "memory");
}
// One arrival that also expects `bytes` of bulk copies to complete before the phase does.
__device__ __forceinline__ void expectBytes(std::uint64_t* b, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(sharedAddress(b)), "r"(bytes) : "memory");
}
// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global to shared memory,
// completing on `full`.
__device__ __forceinline__ void bulkCopy(void* dst, const void* src, unsigned bytes, std::uint64_t* full) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(sharedAddress(dst)),
                 "l"(src), "r"(bytes), "r"(sharedAddress(full))
                 : "memory");
}
// Orders this thread's generic-proxy accesses before its later async-proxy ones (bulk copies):
// shared memory (a slot the block has read, about to be refilled) and global memory (a row this
// block wrote, about to be read by a bulk copy).
__device__ __forceinline__ void fenceProxyAsyncShared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void fenceProxyAsyncGlobal() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

// ---- device: streaming loads -------------------------------------------------------------------
// Weights are read exactly once per launch: bypass L1 allocation, keep L2 default.
__device__ __forceinline__ uint4 ldgStream16(const void* p) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}

}  // namespace gemma::cuda
