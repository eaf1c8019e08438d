// Measurement tool (not a test): what one dependent kernel boundary costs inside a graph of
// programmatic launches, the way a decode step chains its kernels, before any weight is read.
// docs/PERFORMANCE.md (version 12) explains why: a 12b FP4 matvec launch costs a fixed ≈ 3.7 µs
// on top of its bytes, and this splits that into the hop itself and the x hand-off.
//
// Each form is a chain of kLaunches launches of one kernel captured into a CUDA graph; every
// launch waits (griddepcontrol.wait) for the one before and, except in the "empty" form, reads
// the vector the one before wrote (x, fp32, the 12b widths 3840 and 15360) in every block, as
// the matvecs stage their input; the graph is replayed and the time per launch printed:
//   empty            wait, then one thread writes a word: the boundary alone
//   stage            + every block reads all of x (float4 loads, one pass) and one barrier
//   stage+norm       + two block reductions (the folded input norm's sums of squares)
//   stage, counters  as stage, but without griddepcontrol.wait: each block waits until every
//                    block of the previous launch has counted its slice of y as written (one
//                    counter per launch, release/acquire at GPU scope), the mechanism of
//                    docs/PERFORMANCE.md's first lever (version 16), whose premise is that such a
//                    wait costs less than the grid-wide dependency's. Safe from deadlock: a
//                    dependent grid starts only after every block of the previous one has started
//                    (launch_dependents at each block's start), so no spinning block holds out a
//                    block it waits for. The counters are cleared by a memset node at the graph's start.
// Each at the matvec's residency (two blocks of 256 threads per SM, shared memory sized so that
// no third block and no block of the next launch fits beside them) and, for the shared-x
// question, one block of 512 threads per SM.
//   measure_hop            # prints one line per form; exit 77 without a CUDA device
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "CudaCommon.h"

namespace {

using gemma::cuda::allowDependentsToStart;
using gemma::cuda::blockSum;
using gemma::cuda::gridDependencyWait;
using gemma::cuda::loadAcquire;

constexpr int kLaunches = 256;
constexpr int kReplays = 20;
constexpr int kLoads = 16;  // float4 per thread at most: 15360 floats over 256 threads

enum class Form { Empty, Stage, StageNorm, StageCounters };

// Counter `c` at GPU scope: a release increment (the acquire load is CudaCommon.h's loadAcquire).
__device__ __forceinline__ void addRelease(unsigned* c) { asm volatile("red.release.gpu.global.add.u32 [%0], 1;\n" ::"l"(c) : "memory"); }

// x: the previous launch's output; y: this launch's (each block writes its slice), n floats.
// counters (StageCounters only): one per launch of the chain; `launch` is this one's index.
template <Form F>
__global__ void hopKernel(const float* __restrict__ x, float* __restrict__ y, int n, unsigned* counters, int launch) {
    extern __shared__ float4 staged[];
    __shared__ float scratch[32];
    allowDependentsToStart();
    if constexpr (F == Form::StageCounters) {
        // Every block of the previous launch has written its slice: one thread waits, the barrier
        // passes the acquired view to the block.
        if (threadIdx.x == 0 && launch > 0)
            while (loadAcquire(counters + launch - 1) < gridDim.x) __nanosleep(32);
        __syncthreads();
    } else {
        gridDependencyWait();
    }
    if constexpr (F == Form::Empty) {
        if (blockIdx.x == 0 && threadIdx.x == 0) y[0] = x[0] + 1.0f;
        return;
    } else {
        const float4* x4 = reinterpret_cast<const float4*>(x);
        const int n4 = n / 4;
        // One pass: every thread's loads issued before any is used (n4 <= kLoads · blockDim).
        float4 v[kLoads];
#pragma unroll
        for (int k = 0; k < kLoads; ++k) {
            const int i = threadIdx.x + k * blockDim.x;
            // Without the grid dependency's wait, x is read past L1 (.cg): the SM's L1 may hold the
            // buffer from two launches ago.
            if constexpr (F == Form::StageCounters) v[k] = i < n4 ? __ldcg(x4 + i) : make_float4(0.f, 0.f, 0.f, 0.f);
            else v[k] = i < n4 ? x4[i] : make_float4(0.f, 0.f, 0.f, 0.f);
        }
        float ss = 0.0f;
#pragma unroll
        for (int k = 0; k < kLoads; ++k) ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
        float scale = 1.0f;
        if constexpr (F == Form::StageNorm) {
            // The reduction the matvec's folded norm runs (CudaCommon.h), twice.
            scale = rsqrtf(blockSum(ss, scratch) / n + 1e-6f);
            scale *= rsqrtf(blockSum(ss * scale, scratch) / n + 1e-6f);
        }
#pragma unroll
        for (int k = 0; k < kLoads; ++k) {
            const int i = threadIdx.x + k * blockDim.x;
            if (i < n4) staged[i] = make_float4(v[k].x * scale, v[k].y * scale, v[k].z * scale, v[k].w * scale);
        }
        __syncthreads();
        // This block's slice of y from the staged x (the next launch's input).
        const int slice = (n + gridDim.x - 1) / gridDim.x;
        const int i = blockIdx.x * slice + threadIdx.x;
        if (threadIdx.x < slice && i < n) y[i] = reinterpret_cast<const float*>(staged)[(i * 7) % n] * 0.5f + 0.25f;
        if constexpr (F == Form::StageCounters) {
            __syncthreads();  // the block's writes of y, then its count (release at GPU scope)
            if (threadIdx.x == 0) addRelease(counters + launch);
        }
    }
}

template <Form F>
double microsPerLaunch(int blocks, int threads, std::size_t smem, int n, float* a, float* b, unsigned* counters, cudaStream_t stream) {
    const auto kernel = hopKernel<F>;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)) != cudaSuccess) return -1;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return -1;
    if (F == Form::StageCounters && cudaMemsetAsync(counters, 0, kLaunches * sizeof(unsigned), stream) != cudaSuccess) {
        cudaStreamEndCapture(stream, &graph);
        return -1;
    }
    for (int l = 0; l < kLaunches; ++l) {
        const float* in = l % 2 ? b : a;
        float* out = l % 2 ? a : b;
        if (gemma::cuda::launchKernel(kernel, dim3(blocks), dim3(threads), smem, stream, true, in, out, n, counters, l) != cudaSuccess) {
            cudaStreamEndCapture(stream, &graph);
            return -1;
        }
    }
    if (cudaStreamEndCapture(stream, &graph) != cudaSuccess || cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) return -1;
    cudaGraphLaunch(exec, stream);  // warm-up
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    std::vector<float> ms;
    for (int r = 0; r < kReplays; ++r) {
        cudaEventRecord(start, stream);
        cudaGraphLaunch(exec, stream);
        cudaEventRecord(stop, stream);
        cudaEventSynchronize(stop);
        float t = 0;
        cudaEventElapsedTime(&t, start, stop);
        ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return ms[ms.size() / 2] * 1000.0 / kLaunches;
}

}  // namespace

int main() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("no CUDA device: skipped\n");
        return 77;
    }
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    if (prop.major < 9) {
        std::printf("%s: programmatic launches need sm_90: skipped\n", prop.name);
        return 77;
    }
    const int sms = prop.multiProcessorCount;
    // Shared memory per block that leaves room for exactly `perSm` blocks of this launch per SM.
    const auto smemFor = [&](int perSm) {
        return std::min(prop.sharedMemPerMultiprocessor / perSm - 2048, prop.sharedMemPerBlockOptin - 1024);
    };
    float *a = nullptr, *b = nullptr;
    unsigned* counters = nullptr;
    cudaMalloc(&counters, kLaunches * sizeof(unsigned));
    cudaMalloc(&a, 16384 * sizeof(float));
    cudaMalloc(&b, 16384 * sizeof(float));
    std::vector<float> init(16384, 0.5f);
    cudaMemcpy(a, init.data(), init.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(b, init.data(), init.size() * 4, cudaMemcpyHostToDevice);
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    std::printf("%s, %d SMs: µs per launch in a graph of %d programmatic launches (median of %d replays)\n", prop.name, sms,
                kLaunches, kReplays);
    struct Shape {
        const char* name;
        int blocks, threads, perSm;
    };
    const Shape shapes[] = {{"2 x 256 threads per SM", 2 * sms, 256, 2}, {"1 x 512 threads per SM", sms, 512, 1}};
    for (const Shape& s : shapes) {
        for (int n : {3840, 15360}) {
            const std::size_t smem = smemFor(s.perSm);
            const double empty = microsPerLaunch<Form::Empty>(s.blocks, s.threads, smem, n, a, b, counters, stream);
            const double stage = microsPerLaunch<Form::Stage>(s.blocks, s.threads, smem, n, a, b, counters, stream);
            const double norm = microsPerLaunch<Form::StageNorm>(s.blocks, s.threads, smem, n, a, b, counters, stream);
            const double counted = microsPerLaunch<Form::StageCounters>(s.blocks, s.threads, smem, n, a, b, counters, stream);
            std::printf("  %-24s x %5d floats: empty %5.2f | stage %5.2f | stage+norm %5.2f | stage, counters %5.2f\n", s.name, n, empty,
                        stage, norm, counted);
        }
    }
    const cudaError_t err = cudaDeviceSynchronize();
    std::printf("%s\n", err == cudaSuccess ? "done" : cudaGetErrorString(err));
    return err == cudaSuccess ? 0 : 1;
}
