#include "gemma/Status.h"

namespace gemma {

const char* errorCodeName(ErrorCode code) {
    switch (code) {
        case ErrorCode::Ok: return "ok";
        case ErrorCode::InvalidArgument: return "invalid argument";
        case ErrorCode::InvalidConfig: return "invalid config";
        case ErrorCode::InvalidFile: return "invalid file";
        case ErrorCode::Io: return "i/o error";
        case ErrorCode::Unsupported: return "unsupported";
        case ErrorCode::OutOfMemory: return "out of memory";
        case ErrorCode::Device: return "device error";
        case ErrorCode::Cancelled: return "cancelled";
        case ErrorCode::Internal: return "internal error";
    }
    return "unknown error";
}

}  // namespace gemma
