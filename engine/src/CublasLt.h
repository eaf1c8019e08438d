// cuBLASLt, loaded at run time. Installed programs must start on machines without NVIDIA's
// 540 MB libcublasLt (installer/README.md): nothing links it; the library is dlopen()ed on first
// use and its entry points are bound with dlsym. When it is missing, callers get a Status saying
// so and keep to the paths that need no GEMM library (GPU prefill falls back to the matvecs).
// Engine-internal (no Qt); built only with CUDA (the header needs the toolkit's cublasLt.h for the
// types, not its library). gemma-bench uses the same loader for its BF16 GEMM ceiling.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>

#include "gemma/Status.h"

namespace gemma {

// The entry points the engine and gemma-bench use. Every member is bound (non-null) in a loaded
// table except getStatusName, which is optional (older libraries lack it).
struct CublasLtApi {
    decltype(&cublasLtCreate) create = nullptr;
    decltype(&cublasLtDestroy) destroy = nullptr;
    decltype(&cublasLtMatmulDescCreate) descCreate = nullptr;
    decltype(&cublasLtMatmulDescDestroy) descDestroy = nullptr;
    decltype(&cublasLtMatmulDescSetAttribute) descSet = nullptr;
    decltype(&cublasLtMatrixLayoutCreate) layoutCreate = nullptr;
    decltype(&cublasLtMatrixLayoutDestroy) layoutDestroy = nullptr;
    decltype(&cublasLtMatmulPreferenceCreate) preferenceCreate = nullptr;
    decltype(&cublasLtMatmulPreferenceDestroy) preferenceDestroy = nullptr;
    decltype(&cublasLtMatmulPreferenceSetAttribute) preferenceSet = nullptr;
    decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
    decltype(&cublasLtMatmul) matmul = nullptr;
    decltype(&cublasLtGetStatusName) getStatusName = nullptr;  // optional
    std::string soname;  // the library that was loaded
};

// Tried in this order: the CUDA 13 and 12 libraries, then whatever libcublasLt.so points to.
inline constexpr const char* kCublasLtSonames[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"};

// Loads the first of `sonames` that dlopen() accepts and binds the table. Errors:
//   Unsupported  — none of them loads ("cuBLASLt is not installed (...)");
//   InvalidFile  — a library loaded but lacks a required entry point (named in the message).
// A loaded library stays loaded for the life of the process (dlopen counts references, so a
// repeated load is cheap; unloading CUDA libraries before process exit is not safe).
Expected<CublasLtApi> loadCublasLtFrom(std::span<const char* const> sonames);
// The same over kCublasLtSonames, loaded once per process (thread-safe); the table outlives every
// caller. A failure is cached too: the library does not appear while the process runs.
Expected<const CublasLtApi*> loadCublasLt();

// BF16 GEMMs with fp32 output and fp32 accumulation on the current CUDA device, for prefill.
// Owns the cuBLASLt handle, a workspace and the per-shape algorithm choice. One object serves
// one device and one stream order at a time: calls on different streams that may overlap would
// share the workspace, so the caller orders them (the engine uses one stream). Not thread-safe.
class CublasLt {
public:
    static constexpr std::size_t kDefaultWorkspaceBytes = std::size_t{32} << 20;

    // Loads the library (loadCublasLt), creates the handle and allocates the workspace.
    static Expected<std::unique_ptr<CublasLt>> create(std::size_t workspaceBytes = kDefaultWorkspaceBytes);
    ~CublasLt();
    CublasLt(const CublasLt&) = delete;
    CublasLt& operator=(const CublasLt&) = delete;

    // y[r][o] (+)= Σ_i x[r][i] · w[o][i]   for r < rows, o < out, i < in;
    //   x: BF16 bits, row-major [rows][ldx] (ldx >= in);
    //   w: BF16 bits, row-major [out][ldw] (ldw >= in), e.g. Fp4Dequantize's output;
    //   y: fp32, row-major [rows][ldy] (ldy >= out); columns [out, ldy) are not touched.
    // accumulate: y += x·wᵀ (beta = 1, y must hold values); otherwise y = x·wᵀ (y is not read).
    // Products of bf16 are exact in fp32; accumulation is fp32 (CUBLAS_COMPUTE_32F), and with an
    // fp32 output any split-K reduction is fp32 too. Asynchronous on `stream`; device pointers.
    // The heuristic's algorithm is chosen once per (shape, strides, pointer alignments).
    Status gemmBf16(int rows, std::int64_t out, std::int64_t in, const std::uint16_t* x, std::int64_t ldx,
                    const std::uint16_t* w, std::int64_t ldw, float* y, std::int64_t ldy, bool accumulate,
                    cudaStream_t stream);

    // The same with FP16 operands (x and w FP16 bits) and y (+)= alpha · x·wᵀ: the engine's
    // prefill stores FP4 weights as FP16 scaled by a power of two (exact, where bf16 would round)
    // and undoes the scaling of both operands in alpha.
    enum class Operands { Bf16, Fp16 };
    Status gemm(Operands operands, int rows, std::int64_t out, std::int64_t in, const std::uint16_t* x, std::int64_t ldx,
                const std::uint16_t* w, std::int64_t ldw, float* y, std::int64_t ldy, float alpha, bool accumulate,
                cudaStream_t stream);

    const CublasLtApi& api() const { return *api_; }
    std::size_t cachedPlans() const { return plans_.size(); }

private:
    struct Plan {
        cublasLtMatrixLayout_t a = nullptr;  // w
        cublasLtMatrixLayout_t b = nullptr;  // x
        cublasLtMatrixLayout_t c = nullptr;  // y (C and D)
        cublasLtMatmulAlgo_t algo{};
    };
    // operand type, rows, out, in, ldx, ldw, ldy, alignment of x, w, y (bytes, power of two <= 256).
    using PlanKey = std::tuple<int, int, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                               unsigned, unsigned, unsigned>;

    explicit CublasLt(const CublasLtApi* api) : api_(api) {}
    Status makePlan(const PlanKey& key, Plan& plan);
    void destroyPlan(Plan& plan);
    Status cublasStatus(cublasStatus_t status, const std::string& what) const;

    const CublasLtApi* api_;
    cublasLtHandle_t handle_ = nullptr;
    cublasLtMatmulDesc_t operation_ = nullptr;  // fp32 compute and scale, A transposed
    void* workspace_ = nullptr;
    std::size_t workspaceBytes_ = 0;
    std::map<PlanKey, Plan> plans_;
};

}  // namespace gemma
