// cuBLASLt loaded with dlopen, and the BF16/FP16 GEMMs of the prefill path (CublasLt.h).
//
// Row-major → column-major mapping (cuBLASLt is column-major: element (i, j) of an m × n matrix
// with leading dimension ld lives at base[i + j·ld]):
//   y row-major [rows][ldy]: y[r][o] = y[o + r·ldy]  → column-major D, out × rows, ld = ldy: D(o, r)
//   w row-major [out][ldw]:  w[o][i] = w[i + o·ldw]  → column-major Wc, in × out,  ld = ldw: Wc(i, o)
//   x row-major [rows][ldx]: x[r][i] = x[i + r·ldx]  → column-major Xc, in × rows, ld = ldx: Xc(i, r)
//   D(o, r) = Σ_i w[o][i]·x[r][i] = Σ_i Wc(i, o)·Xc(i, r) = (Wcᵀ · Xc)(o, r)
// so the call is A = w (layout in × out, ld ldw) with TRANSA = T, B = x (layout in × rows,
// ld ldx) with TRANSB = N, C = D = y (layout out × rows, ld ldy); m = out, n = rows, k = in.
// This is the "TN" GEMM (both operands contiguous along k), cuBLASLt's primary layout for
// 16-bit tensor-core kernels. Nothing is transposed in memory.
#include "CublasLt.h"

#include <cstdint>
#include <mutex>

#include "RuntimeLibrary.h"

namespace gemma {

namespace {

// Largest power of two (<= 256) that divides the address: what the heuristic may assume.
unsigned alignmentOf(const void* p) {
    const auto address = reinterpret_cast<std::uintptr_t>(p);
    unsigned alignment = 256;
    while (alignment > 1 && (address & (alignment - 1)) != 0) alignment >>= 1;
    return alignment;
}

}  // namespace

Expected<CublasLtApi> loadCublasLtFrom(std::span<const char* const> sonames) {
    RuntimeLibrary library = RuntimeLibrary::openFirst(sonames);
    if (!library.handle) {
        return Status{ErrorCode::Unsupported, "cuBLASLt is not installed (" + sonameList(sonames) +
                                                  "): GPU prefill uses the matvec path"};
    }
    CublasLtApi api;
    api.soname = library.soname;
    const auto bind = [&](auto& function, const char* symbol, bool required) { library.bind(function, symbol, required); };
    bind(api.create, "cublasLtCreate", true);
    bind(api.destroy, "cublasLtDestroy", true);
    bind(api.descCreate, "cublasLtMatmulDescCreate", true);
    bind(api.descDestroy, "cublasLtMatmulDescDestroy", true);
    bind(api.descSet, "cublasLtMatmulDescSetAttribute", true);
    bind(api.layoutCreate, "cublasLtMatrixLayoutCreate", true);
    bind(api.layoutDestroy, "cublasLtMatrixLayoutDestroy", true);
    bind(api.preferenceCreate, "cublasLtMatmulPreferenceCreate", true);
    bind(api.preferenceDestroy, "cublasLtMatmulPreferenceDestroy", true);
    bind(api.preferenceSet, "cublasLtMatmulPreferenceSetAttribute", true);
    bind(api.heuristic, "cublasLtMatmulAlgoGetHeuristic", true);
    bind(api.matmul, "cublasLtMatmul", true);
    bind(api.getStatusName, "cublasLtGetStatusName", false);
    if (!library.missing.empty()) {
        // The library stays loaded (see the header); a process that hit this keeps one mapping.
        return Status{ErrorCode::InvalidFile, api.soname + " lacks " + library.missing +
                                                  ": this cuBLASLt is too old or damaged; GPU prefill uses the matvec path"};
    }
    return api;
}

Expected<const CublasLtApi*> loadCublasLt() {
    static std::once_flag once;
    static Expected<CublasLtApi>* result = nullptr;  // never freed: outlives every user
    std::call_once(once, [] { result = new Expected<CublasLtApi>(loadCublasLtFrom(kCublasLtSonames)); });
    if (!result->hasValue()) return result->status();
    return &result->value();
}

// ---- CublasLt ------------------------------------------------------------------------------------

Status CublasLt::cublasStatus(cublasStatus_t status, const std::string& what) const {
    if (status == CUBLAS_STATUS_SUCCESS) return Status::ok();
    const char* name = api_ && api_->getStatusName ? api_->getStatusName(status) : nullptr;
    const std::string detail = name ? std::string(name) : "cublasStatus " + std::to_string(static_cast<int>(status));
    ErrorCode code = ErrorCode::Device;
    if (status == CUBLAS_STATUS_ALLOC_FAILED) code = ErrorCode::OutOfMemory;
    else if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_ARCH_MISMATCH) code = ErrorCode::Unsupported;
    else if (status == CUBLAS_STATUS_INVALID_VALUE) code = ErrorCode::Internal;  // we checked the arguments
    const char* hint = status == CUBLAS_STATUS_NOT_INITIALIZED ? " (no usable CUDA device or driver)" : "";
    return {code, "cuBLASLt: " + what + " failed: " + detail + hint};
}

Expected<std::unique_ptr<CublasLt>> CublasLt::create(std::size_t workspaceBytes) {
    auto api = loadCublasLt();
    if (!api) return api.status();
    std::unique_ptr<CublasLt> lt(new CublasLt(*api));
    GEMMA_RETURN_IF_ERROR(lt->cublasStatus(lt->api_->create(&lt->handle_), "cublasLtCreate"));
    if (workspaceBytes > 0) {
        const cudaError_t error = cudaMalloc(&lt->workspace_, workspaceBytes);
        if (error != cudaSuccess) {
            lt->workspace_ = nullptr;
            cudaGetLastError();  // clear the runtime's last error so a later launch check does not report it
            return Status{error == cudaErrorMemoryAllocation ? ErrorCode::OutOfMemory : ErrorCode::Device,
                          "cuBLASLt workspace (" + std::to_string(workspaceBytes >> 20) +
                              " MiB): cudaMalloc: " + cudaGetErrorString(error)};
        }
        lt->workspaceBytes_ = workspaceBytes;
    }
    GEMMA_RETURN_IF_ERROR(lt->cublasStatus(lt->api_->descCreate(&lt->operation_, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                                           "cublasLtMatmulDescCreate"));
    const cublasOperation_t transA = CUBLAS_OP_T;
    const cublasOperation_t transB = CUBLAS_OP_N;
    GEMMA_RETURN_IF_ERROR(lt->cublasStatus(
        lt->api_->descSet(lt->operation_, CUBLASLT_MATMUL_DESC_TRANSA, &transA, sizeof transA), "set TRANSA"));
    GEMMA_RETURN_IF_ERROR(lt->cublasStatus(
        lt->api_->descSet(lt->operation_, CUBLASLT_MATMUL_DESC_TRANSB, &transB, sizeof transB), "set TRANSB"));
    return lt;
}

CublasLt::~CublasLt() {
    for (auto& [key, plan] : plans_) destroyPlan(plan);
    if (operation_) api_->descDestroy(operation_);
    if (handle_) api_->destroy(handle_);
    if (workspace_) cudaFree(workspace_);
}

void CublasLt::destroyPlan(Plan& plan) {
    if (plan.a) api_->layoutDestroy(plan.a);
    if (plan.b) api_->layoutDestroy(plan.b);
    if (plan.c) api_->layoutDestroy(plan.c);
    plan = Plan{};
}

Status CublasLt::makePlan(const PlanKey& key, Plan& plan) {
    const auto& [operands, rows, out, in, ldx, ldw, ldy, alignX, alignW, alignY] = key;
    const cudaDataType_t half = operands == static_cast<int>(Operands::Fp16) ? CUDA_R_16F : CUDA_R_16BF;
    // Layouts per the mapping at the top of this file.
    Status status = cublasStatus(api_->layoutCreate(&plan.a, half, static_cast<std::uint64_t>(in),
                                                    static_cast<std::uint64_t>(out), ldw),
                                 "layout of w");
    if (status) status = cublasStatus(api_->layoutCreate(&plan.b, half, static_cast<std::uint64_t>(in),
                                                         static_cast<std::uint64_t>(rows), ldx),
                                      "layout of x");
    if (status) status = cublasStatus(api_->layoutCreate(&plan.c, CUDA_R_32F, static_cast<std::uint64_t>(out),
                                                         static_cast<std::uint64_t>(rows), ldy),
                                      "layout of y");
    if (!status) {
        destroyPlan(plan);
        return status;
    }
    cublasLtMatmulPreference_t preference = nullptr;
    status = cublasStatus(api_->preferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
    if (status) {
        const std::uint64_t workspace = workspaceBytes_;
        const std::uint32_t alignA = alignW, alignB = alignX, alignC = alignY;
        status = cublasStatus(api_->preferenceSet(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                  sizeof workspace),
                              "preference (workspace)");
        if (status) status = cublasStatus(api_->preferenceSet(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                              &alignA, sizeof alignA),
                                          "preference (alignment)");
        if (status) status = cublasStatus(api_->preferenceSet(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                              &alignB, sizeof alignB),
                                          "preference (alignment)");
        if (status) status = cublasStatus(api_->preferenceSet(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                              &alignC, sizeof alignC),
                                          "preference (alignment)");
        if (status) status = cublasStatus(api_->preferenceSet(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                              &alignC, sizeof alignC),
                                          "preference (alignment)");
        if (status) {
            cublasLtMatmulHeuristicResult_t result{};
            int found = 0;
            status = cublasStatus(api_->heuristic(handle_, operation_, plan.a, plan.b, plan.c, plan.c, preference, 1,
                                                  &result, &found),
                                  "cublasLtMatmulAlgoGetHeuristic");
            if (status && found < 1) {
                status = Status{ErrorCode::Unsupported,
                                std::string("cuBLASLt has no ") + (half == CUDA_R_16F ? "FP16" : "BF16") +
                                    " GEMM algorithm for rows " + std::to_string(rows) + ", out " +
                                    std::to_string(out) + ", in " + std::to_string(in)};
            }
            if (status) plan.algo = result.algo;
        }
        api_->preferenceDestroy(preference);
    }
    if (!status) destroyPlan(plan);
    return status;
}

Status CublasLt::gemmBf16(int rows, std::int64_t out, std::int64_t in, const std::uint16_t* x, std::int64_t ldx,
                          const std::uint16_t* w, std::int64_t ldw, float* y, std::int64_t ldy, bool accumulate,
                          cudaStream_t stream) {
    return gemm(Operands::Bf16, rows, out, in, x, ldx, w, ldw, y, ldy, 1.0f, accumulate, stream);
}

Status CublasLt::gemm(Operands operands, int rows, std::int64_t out, std::int64_t in, const std::uint16_t* x,
                      std::int64_t ldx, const std::uint16_t* w, std::int64_t ldw, float* y, std::int64_t ldy, float alpha,
                      bool accumulate, cudaStream_t stream) {
    if (rows < 1 || out < 1 || in < 1) {
        return {ErrorCode::InvalidArgument, std::string(operands == Operands::Fp16 ? "FP16" : "BF16") + " GEMM: rows " + std::to_string(rows) + ", out " + std::to_string(out) +
                                                ", in " + std::to_string(in) + " (each must be >= 1)"};
    }
    if (!x || !w || !y) return {ErrorCode::InvalidArgument, "GEMM: a null operand"};
    if (ldx < in || ldw < in || ldy < out) {
        return {ErrorCode::InvalidArgument, "GEMM: leading dimensions ldx " + std::to_string(ldx) + ", ldw " +
                                                std::to_string(ldw) + ", ldy " + std::to_string(ldy) +
                                                " are smaller than in " + std::to_string(in) + " / out " +
                                                std::to_string(out)};
    }
    const PlanKey key{static_cast<int>(operands), rows, out, in, ldx, ldw, ldy, alignmentOf(x), alignmentOf(w), alignmentOf(y)};
    auto it = plans_.find(key);
    if (it == plans_.end()) {
        // Prefill sees a handful of shapes (per linear: full chunks and one tail); the bound only
        // guards against a caller that sweeps row counts.
        if (plans_.size() >= 4096) {
            for (auto& [k, plan] : plans_) destroyPlan(plan);
            plans_.clear();
        }
        Plan plan;
        GEMMA_RETURN_IF_ERROR(makePlan(key, plan));
        it = plans_.emplace(key, plan).first;
    }
    const Plan& plan = it->second;
    const float beta = accumulate ? 1.0f : 0.0f;
    return cublasStatus(api_->matmul(handle_, operation_, &alpha, w, plan.a, x, plan.b, &beta, y, plan.c, y, plan.c,
                                     &plan.algo, workspace_, workspaceBytes_, stream),
                        std::string(operands == Operands::Fp16 ? "FP16" : "BF16") + " GEMM (rows " + std::to_string(rows) + ", out " + std::to_string(out) + ", in " +
                            std::to_string(in) + ")");
}

}  // namespace gemma
