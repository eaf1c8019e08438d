#include "BenchCeilings.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <random>
#include <thread>

#include "CublasLt.h"
#include "Fp4Matvec.h"
#include "Fp8LmHead.h"
#include "StreamRead.h"
#include "kernels/WeightFormats.h"

namespace gemma::bench {
namespace {

#define BENCH_CHECK(call)                                                        \
    do {                                                                         \
        const cudaError_t e_ = (call);                                           \
        if (e_ != cudaSuccess) {                                                 \
            error = std::string(#call) + ": " + cudaGetErrorString(e_);          \
            return false;                                                        \
        }                                                                        \
    } while (0)

struct Device {
    void* p = nullptr;
    ~Device() {
        if (p) cudaFree(p);
    }
};

// Launches per graph in the kernel table (each a different weight copy where there are enough).
constexpr int kLaunchesPerGraph = 20;

// Median milliseconds of `repeats` timed calls after `warmup` untimed ones (the events are
// recorded in `stream`, where the body's work must go); before each call the host sleeps
// `idleMs` with the GPU idle (0: none).
bool medianMs(const std::function<bool()>& body, int warmup, int repeats, double& ms, std::string& error,
              cudaStream_t stream = nullptr, double idleMs = 0.0) {
    cudaEvent_t start, stop;
    BENCH_CHECK(cudaEventCreate(&start));
    BENCH_CHECK(cudaEventCreate(&stop));
    std::vector<float> samples;
    for (int i = 0; i < warmup + repeats; ++i) {
        if (idleMs > 0.0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(idleMs));
        BENCH_CHECK(cudaEventRecord(start, stream));
        if (!body()) {
            error = "launch failed: " + std::string(cudaGetErrorString(cudaGetLastError()));
            return false;
        }
        BENCH_CHECK(cudaEventRecord(stop, stream));
        BENCH_CHECK(cudaEventSynchronize(stop));
        float elapsed = 0.0f;
        BENCH_CHECK(cudaEventElapsedTime(&elapsed, start, stop));
        if (i >= warmup) samples.push_back(elapsed);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
    ms = samples[samples.size() / 2];
    return true;
}

// Median milliseconds per launch of `perGraph` launches (launch(stream, i), i = 0 .. perGraph-1)
// captured as one CUDA graph and replayed `repeats` times after `warmup` replays. Kernel-table
// timing: a launch timed alone between two events also counts the host's launch latency (several
// µs, as much as a small matvec takes), which a decode step, itself a graph, does not pay. One
// untimed direct launch first does any per-kernel setup (shared-memory limits) outside the capture.
bool graphMedianMs(const std::function<bool(cudaStream_t, int)>& launch, int perGraph, int warmup, int repeats, double& ms,
                   std::string& error) {
    struct Resources {
        cudaStream_t stream = nullptr;
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        ~Resources() {
            if (exec) cudaGraphExecDestroy(exec);
            if (graph) cudaGraphDestroy(graph);
            if (stream) cudaStreamDestroy(stream);
        }
    } r;
    BENCH_CHECK(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking));
    if (!launch(r.stream, 0)) {
        error = "launch failed: " + std::string(cudaGetErrorString(cudaGetLastError()));
        return false;
    }
    BENCH_CHECK(cudaStreamSynchronize(r.stream));
    BENCH_CHECK(cudaStreamBeginCapture(r.stream, cudaStreamCaptureModeThreadLocal));
    bool launched = true;
    for (int i = 0; i < perGraph && launched; ++i) launched = launch(r.stream, i);
    const cudaError_t captured = cudaStreamEndCapture(r.stream, &r.graph);
    if (!launched) {
        error = "launch failed during graph capture: " + std::string(cudaGetErrorString(cudaGetLastError()));
        return false;
    }
    BENCH_CHECK(captured);
    BENCH_CHECK(cudaGraphInstantiate(&r.exec, r.graph, 0));
    double graphMs = 0.0;
    if (!medianMs([&] { return cudaGraphLaunch(r.exec, r.stream) == cudaSuccess; }, warmup, repeats, graphMs, error, r.stream))
        return false;
    ms = graphMs / perGraph;
    return true;
}

bool fillRandom(void* device, std::size_t bytes, unsigned seed, std::string& error) {
    std::vector<std::uint8_t> host(bytes);
    std::mt19937_64 rng(seed);
    for (std::size_t i = 0; i + 8 <= bytes; i += 8) {
        const std::uint64_t v = rng();
        std::memcpy(&host[i], &v, 8);
    }
    BENCH_CHECK(cudaMemcpy(device, host.data(), bytes, cudaMemcpyHostToDevice));
    return true;
}

bool fillConstant16(void* device, std::size_t count, std::uint16_t value, std::string& error) {
    std::vector<std::uint16_t> host(count, value);
    BENCH_CHECK(cudaMemcpy(device, host.data(), count * 2, cudaMemcpyHostToDevice));
    return true;
}

// cuBLASLt is loaded at run time by the engine's loader (engine/src/CublasLt.h): a tool that
// needed the 540 MB library at start could not ship without it (installer/README.md).
bool measureGemm(Ceilings& ceilings, std::string& error) {
    const auto loaded = loadCublasLt();
    if (!loaded) {
        error = loaded.status().code() == ErrorCode::Unsupported
                    ? "cuBLASLt (libcublasLt.so) is not installed: the BF16 GEMM ceiling is not measured"
                    : "libcublasLt lacks a symbol gemma-bench needs";
        return false;
    }
    const CublasLtApi& lt = **loaded;
    const int n = 8192;
    const std::size_t bytes = static_cast<std::size_t>(n) * n * 2;
    Device a, b, c, workspace;
    BENCH_CHECK(cudaMalloc(&a.p, bytes));
    BENCH_CHECK(cudaMalloc(&b.p, bytes));
    BENCH_CHECK(cudaMalloc(&c.p, bytes));
    const std::size_t workspaceBytes = 64u << 20;
    BENCH_CHECK(cudaMalloc(&workspace.p, workspaceBytes));
    // Random bf16 values in [-1, 1): never time on zeros.
    {
        std::vector<std::uint16_t> host(static_cast<std::size_t>(n) * n);
        std::mt19937 rng(5);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (auto& v : host) v = formats::floatToBf16(u(rng));
        BENCH_CHECK(cudaMemcpy(a.p, host.data(), bytes, cudaMemcpyHostToDevice));
        BENCH_CHECK(cudaMemcpy(b.p, host.data(), bytes, cudaMemcpyHostToDevice));
    }
    cublasLtHandle_t handle;
    if (lt.create(&handle) != CUBLAS_STATUS_SUCCESS) {
        error = "cublasLtCreate failed";
        return false;
    }
    cublasLtMatmulDesc_t op;
    lt.descCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    const cublasOperation_t transpose = CUBLAS_OP_T;
    lt.descSet(op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose);
    cublasLtMatrixLayout_t la, lb, lc;
    lt.layoutCreate(&la, CUDA_R_16BF, n, n, n);
    lt.layoutCreate(&lb, CUDA_R_16BF, n, n, n);
    lt.layoutCreate(&lc, CUDA_R_16BF, n, n, n);
    cublasLtMatmulPreference_t preference;
    lt.preferenceCreate(&preference);
    lt.preferenceSet(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspaceBytes, sizeof workspaceBytes);
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    lt.heuristic(handle, op, la, lb, lc, lc, preference, 1, &heuristic, &found);
    bool ok = found > 0;
    if (!ok) error = "cuBLASLt found no BF16 GEMM algorithm";
    double ms = 0.0;
    const float alpha = 1.0f, beta = 0.0f;
    if (ok) {
        ok = medianMs(
            [&] {
                return lt.matmul(handle, op, &alpha, a.p, la, b.p, lb, &beta, c.p, lc, c.p, lc, &heuristic.algo, workspace.p,
                                      workspaceBytes, nullptr) == CUBLAS_STATUS_SUCCESS;
            },
            3, 10, ms, error);
    }
    lt.preferenceDestroy(preference);
    lt.layoutDestroy(la);
    lt.layoutDestroy(lb);
    lt.layoutDestroy(lc);
    lt.descDestroy(op);
    lt.destroy(handle);
    if (ok) ceilings.bf16GemmTflops = 2.0 * n * static_cast<double>(n) * n / (ms * 1e-3) / 1e12;
    return ok;
}

}  // namespace

bool measureCeilings(Ceilings& ceilings, std::string& error) {
    int device = 0;
    cudaDeviceProp properties{};
    BENCH_CHECK(cudaGetDevice(&device));
    BENCH_CHECK(cudaGetDeviceProperties(&properties, device));
    ceilings.gpu = properties.name;
    std::size_t freeBytes = 0, totalBytes = 0;
    BENCH_CHECK(cudaMemGetInfo(&freeBytes, &totalBytes));
    // ≥ 4 GB where memory allows (PERF.md), never more than a quarter of what is free.
    const std::size_t probe = std::min<std::size_t>(std::size_t{4} << 30, freeBytes / 4) & ~std::size_t{255};
    ceilings.probeBytes = static_cast<double>(probe);
    Device buffer, copy, sink;
    BENCH_CHECK(cudaMalloc(&buffer.p, probe));
    BENCH_CHECK(cudaMalloc(&copy.p, probe / 2));
    BENCH_CHECK(cudaMalloc(&sink.p, 1 << 20));
    if (!fillRandom(buffer.p, probe, 1, error)) return false;
    cuda::StreamReadParams read;
    read.data = buffer.p;
    read.bytes = static_cast<std::int64_t>(probe);
    read.sink = static_cast<std::uint32_t*>(sink.p);
    double ms = 0.0;
    if (!medianMs([&] { return cuda::launchStreamRead(read, nullptr) == cuda::KernelStatus::Ok; }, 3, 15, ms, error)) return false;
    ceilings.readGBs = static_cast<double>(probe) / (ms * 1e-3) / 1e9;
    if (!medianMs([&] { return cudaMemcpyAsync(copy.p, buffer.p, probe / 2, cudaMemcpyDeviceToDevice) == cudaSuccess; }, 3, 15, ms, error)) {
        return false;
    }
    ceilings.copyGBs = static_cast<double>(probe) / (ms * 1e-3) / 1e9;  // read + write of probe/2 each
    return measureGemm(ceilings, error);
}

bool timeFp4Matvec(std::int64_t out, std::int64_t in, bool geglu, bool integerX, bool tiled, KernelTiming& timing,
                   std::string& error) {
    // The tiled layout has the row layout's sizes when out % 16 == 0 (Fp4Tiled.h).
    tiled = tiled && out % 16 == 0;
    const std::size_t codeBytes = static_cast<std::size_t>(out) * formats::fp4RowBytes(in);
    const std::size_t scaleCount = static_cast<std::size_t>(out) * formats::fp4GroupsPerRow(in);
    const std::size_t perCopy = (codeBytes + scaleCount * 2) * (geglu ? 2 : 1);
    // Rotate through enough copies that each launch reads weights the L2 cannot hold (≥ 512 MB).
    const int copies = static_cast<int>(std::max<std::size_t>(2, (std::size_t{512} << 20) / perCopy + 1));
    std::vector<Device> codes(static_cast<std::size_t>(copies) * (geglu ? 2 : 1)), scales(codes.size());
    for (std::size_t i = 0; i < codes.size(); ++i) {
        BENCH_CHECK(cudaMalloc(&codes[i].p, codeBytes));
        BENCH_CHECK(cudaMalloc(&scales[i].p, scaleCount * 2));
        if (i < (geglu ? 2u : 1u)) {
            if (!fillRandom(codes[i].p, codeBytes, static_cast<unsigned>(i + 7), error)) return false;
            if (!fillConstant16(scales[i].p, scaleCount, formats::floatToBf16(0.01f), error)) return false;
        } else {
            BENCH_CHECK(cudaMemcpy(codes[i].p, codes[i % (geglu ? 2 : 1)].p, codeBytes, cudaMemcpyDeviceToDevice));
            BENCH_CHECK(cudaMemcpy(scales[i].p, scales[i % (geglu ? 2 : 1)].p, scaleCount * 2, cudaMemcpyDeviceToDevice));
        }
    }
    Device x, y;
    BENCH_CHECK(cudaMalloc(&x.p, static_cast<std::size_t>(in) * 4));
    BENCH_CHECK(cudaMalloc(&y.p, static_cast<std::size_t>(out) * 4));
    {
        std::vector<float> host(static_cast<std::size_t>(in));
        std::mt19937 rng(3);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        for (auto& v : host) v = normal(rng);
        BENCH_CHECK(cudaMemcpy(x.p, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
    }
    double ms = 0.0;
    const bool ok = graphMedianMs(
        [&](cudaStream_t stream, int i) {
            const int c = i % copies;
            cuda::Fp4MatvecParams p;
            const std::size_t base = static_cast<std::size_t>(c) * (geglu ? 2 : 1);
            p.codes = static_cast<const std::uint8_t*>(codes[base].p);
            p.scales = static_cast<const std::uint16_t*>(scales[base].p);
            if (geglu) {
                p.upCodes = static_cast<const std::uint8_t*>(codes[base + 1].p);
                p.upScales = static_cast<const std::uint16_t*>(scales[base + 1].p);
            }
            p.out = out;
            p.in = in;
            p.x = static_cast<const float*>(x.p);
            p.xStride = in;
            p.y = static_cast<float*>(y.p);
            p.yStride = out;
            p.rows = 1;
            p.fp16X = !integerX;
            p.tiled = tiled;
            return (geglu ? cuda::launchFp4GegluMatvec(p, stream) : cuda::launchFp4Matvec(p, stream)) == cuda::KernelStatus::Ok;
        },
        kLaunchesPerGraph, 2, 15, ms, error);
    if (!ok) return false;
    timing.out = out;
    timing.in = in;
    timing.microseconds = ms * 1e3;
    timing.bytes = static_cast<double>(perCopy) + static_cast<double>(in) * 4 + static_cast<double>(out) * 4;
    timing.gbs = timing.bytes / (ms * 1e-3) / 1e9;
    return true;
}

// Prepares `p`, the lm_head's launch over `codes` (vocab × hidden E4M3 bytes) with row scales 1/448
// and x = 0.01 (the kernel's time does not depend on the values), in the engine's form
// (`persistent`). The buffers it needs besides the codes live in `buffers`.
struct LmHeadBuffers {
    Device scales, x, logits;
};
bool prepareLmHead(const void* codes, std::int64_t vocab, std::int64_t hidden, bool persistent, LmHeadBuffers& buffers,
                  cuda::Fp8LmHeadParams& p, std::string& error) {
    BENCH_CHECK(cudaMalloc(&buffers.scales.p, static_cast<std::size_t>(vocab) * 4));
    BENCH_CHECK(cudaMalloc(&buffers.x.p, static_cast<std::size_t>(hidden) * 4));
    BENCH_CHECK(cudaMalloc(&buffers.logits.p, static_cast<std::size_t>(vocab) * 4));
    const std::vector<float> rowScales(static_cast<std::size_t>(vocab), 1.0f / 448.0f);
    BENCH_CHECK(cudaMemcpy(buffers.scales.p, rowScales.data(), rowScales.size() * 4, cudaMemcpyHostToDevice));
    const std::vector<float> host(static_cast<std::size_t>(hidden), 0.01f);
    BENCH_CHECK(cudaMemcpy(buffers.x.p, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
    p.codes = static_cast<const std::uint8_t*>(codes);
    p.rowScales = static_cast<const float*>(buffers.scales.p);
    p.vocab = vocab;
    p.hidden = hidden;
    p.x = static_cast<const float*>(buffers.x.p);
    p.xStride = hidden;
    p.logits = static_cast<float*>(buffers.logits.p);
    p.logitStride = vocab;
    p.rows = 1;
    p.softcap = 30.0f;
    p.persistent = persistent;
    return true;
}

bool timeLmHead(std::int64_t vocab, std::int64_t hidden, bool persistent, KernelTiming& timing, std::string& error) {
    const std::size_t codeBytes = static_cast<std::size_t>(vocab) * hidden;
    // Two copies of the codes, alternating (each far past the L2). Random bytes include the two
    // E4M3 NaN codes; they only make some logits NaN, which does not change the time of a
    // streaming dot product.
    Device codes[2];
    LmHeadBuffers buffers[2];
    cuda::Fp8LmHeadParams params[2];
    for (int i = 0; i < 2; ++i) {
        BENCH_CHECK(cudaMalloc(&codes[i].p, codeBytes));
        if (!fillRandom(codes[i].p, codeBytes, static_cast<unsigned>(20 + i), error) ||
            !prepareLmHead(codes[i].p, vocab, hidden, persistent, buffers[i], params[i], error))
            return false;
    }
    double ms = 0.0;
    const bool ok = graphMedianMs(
        [&](cudaStream_t stream, int i) { return cuda::launchFp8LmHead(params[i % 2], stream) == cuda::KernelStatus::Ok; },
        kLaunchesPerGraph, 2, 15, ms, error);
    if (!ok) return false;
    timing.name = "lm_head (fp8)";
    timing.out = vocab;
    timing.in = hidden;
    timing.microseconds = ms * 1e3;
    timing.bytes = static_cast<double>(codeBytes) + static_cast<double>(vocab) * 4.0 * 2 + static_cast<double>(hidden) * 4.0;
    timing.gbs = timing.bytes / (ms * 1e-3) / 1e9;
    return true;
}

bool timeSpacedLmHead(std::int64_t vocab, std::int64_t hidden, bool persistent, double gapMs, SpacedTiming& timing, std::string& error) {
    const std::size_t total = static_cast<std::size_t>(vocab) * hidden;
    const std::size_t codeBytes = total & ~std::size_t{15};  // the read probe's whole 16-byte loads
    Device codes, sink;
    BENCH_CHECK(cudaMalloc(&codes.p, total));
    BENCH_CHECK(cudaMalloc(&sink.p, 1 << 20));
    LmHeadBuffers buffers;
    cuda::Fp8LmHeadParams p;
    if (!fillRandom(codes.p, total, 20, error) ||
        !prepareLmHead(codes.p, vocab, hidden, persistent, buffers, p, error))
        return false;
    cuda::StreamReadParams read;
    read.data = codes.p;
    read.bytes = static_cast<std::int64_t>(codeBytes);
    read.sink = static_cast<std::uint32_t*>(sink.p);
    constexpr int kRepeats = 15;
    double headMs = 0.0, readMs = 0.0;
    if (!medianMs([&] { return cuda::launchFp8LmHead(p, nullptr) == cuda::KernelStatus::Ok; }, 1, kRepeats, headMs, error, nullptr, gapMs) ||
        !medianMs([&] { return cuda::launchStreamRead(read, nullptr) == cuda::KernelStatus::Ok; }, 1, kRepeats, readMs, error, nullptr, gapMs))
        return false;
    timing.gapMs = gapMs;
    timing.bytes = static_cast<double>(codeBytes);
    timing.lmHeadUs = headMs * 1e3;
    timing.readUs = readMs * 1e3;
    return true;
}

}  // namespace gemma::bench
