// Status values returned by every CUDA launcher in kernels/cuda. Plain C++ (no engine, no Qt):
// the engine maps them onto its own Status. A launcher never exits or aborts; it checks its
// parameters, launches, and reports the launch error (cudaGetLastError) as LaunchFailed.
#pragma once

namespace gemma::cuda {

enum class KernelStatus {
    Ok = 0,
    InvalidArgument,  // a null pointer, a bad size, a misaligned buffer: the caller's bug
    Unsupported,      // a valid request this kernel does not implement (e.g. a head dim)
    LaunchFailed,     // the CUDA runtime refused the launch or a device query
};

inline const char* kernelStatusName(KernelStatus status) {
    switch (status) {
        case KernelStatus::Ok: return "Ok";
        case KernelStatus::InvalidArgument: return "InvalidArgument";
        case KernelStatus::Unsupported: return "Unsupported";
        case KernelStatus::LaunchFailed: return "LaunchFailed";
    }
    return "Unknown";
}

}  // namespace gemma::cuda
