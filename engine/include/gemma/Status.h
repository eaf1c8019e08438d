// Errors as values. Every fallible engine call returns Status or Expected<T>; nothing in the
// engine calls exit() or aborts on bad input. The message is written for a person: it names the
// file, tensor or field at fault and what was expected.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace gemma {

enum class ErrorCode {
    Ok = 0,
    InvalidArgument,   // a request or option the caller can fix
    InvalidConfig,     // config.json or a preset is impossible or unsupported
    InvalidFile,       // a model or package file is malformed, truncated or hostile
    Io,                // the OS refused (missing file, permission, mmap failure)
    Unsupported,       // a valid model this engine does not run (e.g. MoE)
    OutOfMemory,       // host or device memory could not be allocated
    Device,            // a CUDA/driver failure
    Cancelled,         // the caller asked to stop
    Internal,          // a bug: an invariant the engine itself broke
};

const char* errorCodeName(ErrorCode code);

class [[nodiscard]] Status {
public:
    Status() = default;
    Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

    static Status ok() { return {}; }
    bool isOk() const { return code_ == ErrorCode::Ok; }
    explicit operator bool() const { return isOk(); }
    ErrorCode code() const { return code_; }
    const std::string& message() const { return message_; }

    // Prefixes context ("while reading tensor X: ...") so a deep error keeps its origin.
    Status withContext(const std::string& context) const {
        if (isOk()) return *this;
        return {code_, context + ": " + message_};
    }

private:
    ErrorCode code_ = ErrorCode::Ok;
    std::string message_;
};

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Expected {
public:
    Expected(T value) : storage_(std::move(value)) {}  // NOLINT: implicit by design
    Expected(Status error) : storage_(std::move(error)) {}  // NOLINT: implicit by design

    bool hasValue() const { return std::holds_alternative<T>(storage_); }
    explicit operator bool() const { return hasValue(); }

    T& value() & { return std::get<T>(storage_); }
    const T& value() const& { return std::get<T>(storage_); }
    T&& value() && { return std::get<T>(std::move(storage_)); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }

    // The error; Status::ok() when a value is held.
    Status status() const { return hasValue() ? Status::ok() : std::get<Status>(storage_); }

private:
    std::variant<T, Status> storage_;
};

}  // namespace gemma

// Propagates a failed Status out of the calling function.
#define GEMMA_RETURN_IF_ERROR(expr)                  \
    do {                                             \
        ::gemma::Status gemma_status_ = (expr);      \
        if (!gemma_status_.isOk()) return gemma_status_; \
    } while (0)
