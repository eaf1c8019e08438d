// CUPTI loaded with dlopen, the kernel-record collector, and kernel names reduced to their
// function identifier (KernelTrace.h).
//
// CUPTI hands activity to two plain function pointers with no user data: one asks for an empty
// buffer, the other returns a filled one, possibly on a CUPTI thread. Both therefore work on one
// process-wide Collector, and a completed buffer is parsed outside its mutex and appended under it.
#include "KernelTrace.h"

#include <cuda_runtime.h>

#include <cxxabi.h>

#include <cctype>
#include <cstddef>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <string_view>

#include "RuntimeLibrary.h"

namespace gemma {

namespace {

// Records arrive in the layout of the loaded library's version (CUDA 13.0 writes
// CUpti_ActivityKernel10, older and newer libraries other versions). The four fields read here sit
// at the same offsets in every version since CUpti_ActivityKernel4; these checks pin that for the
// versions the toolkit's headers know, so reading a CUDA 12 library's records through the 13.0
// struct is sound.
using KernelActivity = CUpti_ActivityKernel10;
static_assert(offsetof(KernelActivity, start) == offsetof(CUpti_ActivityKernel9, start));
static_assert(offsetof(KernelActivity, end) == offsetof(CUpti_ActivityKernel9, end));
static_assert(offsetof(KernelActivity, correlationId) == offsetof(CUpti_ActivityKernel9, correlationId));
static_assert(offsetof(KernelActivity, name) == offsetof(CUpti_ActivityKernel9, name));
static_assert(offsetof(KernelActivity, start) == offsetof(CUpti_ActivityKernel4, start));
static_assert(offsetof(KernelActivity, name) == offsetof(CUpti_ActivityKernel4, name));

constexpr std::size_t kBufferAlignment = 8;  // CUPTI requires 8-byte aligned activity buffers

std::string resultName(const CuptiApi& api, CUptiResult result) {
    const char* text = nullptr;
    if (api.resultString && api.resultString(result, &text) == CUPTI_SUCCESS && text) return text;
    return "CUptiResult " + std::to_string(static_cast<int>(result));
}

Status cuptiFailure(const CuptiApi& api, CUptiResult result, const std::string& what) {
    return {ErrorCode::Device, "CUPTI (" + api.soname + "): " + what + " failed: " + resultName(api, result)};
}

// What the buffer callbacks hand to collect(). Never freed: CUPTI's threads may deliver a buffer
// while static objects are destroyed at exit.
struct Collector {
    std::mutex mutex;
    bool live = false;  // a KernelTrace exists; buffers completed otherwise are only released
    std::vector<KernelRecord> records;
    std::uint64_t dropped = 0;  // records CUPTI had no buffer space for
    std::uint64_t untimed = 0;  // kernel records without valid timestamps
    std::string unreadable;     // why the first unreadable buffer since the last collect stopped
};

Collector& collector() {
    static auto* instance = new Collector;
    return *instance;
}

void CUPTIAPI bufferRequested(std::uint8_t** buffer, std::size_t* size, std::size_t* maxNumRecords) {
    // A null buffer makes CUPTI drop records, which collect() then reports.
    *buffer = static_cast<std::uint8_t*>(std::aligned_alloc(kBufferAlignment, KernelTrace::kBufferBytes));
    *size = *buffer ? KernelTrace::kBufferBytes : 0;
    *maxNumRecords = 0;  // as many as fit
}

void CUPTIAPI bufferCompleted(CUcontext context, std::uint32_t streamId, std::uint8_t* buffer, std::size_t,
                              std::size_t validSize) {
    std::vector<KernelRecord> records;
    std::uint64_t untimed = 0;
    std::string unreadable;
    std::size_t dropped = 0;
    // CUPTI calls back only after registerCallbacks succeeded, so the table is loaded.
    const auto api = loadCupti();
    if (api.hasValue() && buffer && validSize > 0) {
        const CuptiApi& cupti = **api;
        CUpti_Activity* record = nullptr;
        for (;;) {
            const CUptiResult result = cupti.nextRecord(buffer, validSize, &record);
            if (result == CUPTI_ERROR_MAX_LIMIT_REACHED) break;  // the end of the buffer
            if (result != CUPTI_SUCCESS) {
                unreadable = resultName(cupti, result);
                break;
            }
            if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
            const auto* kernel = reinterpret_cast<const KernelActivity*>(record);
            if ((kernel->start == 0 && kernel->end == 0) || kernel->end < kernel->start) ++untimed;
            records.push_back({kernel->name ? kernel->name : "", kernel->start, kernel->end, kernel->correlationId});
        }
    }
    if (api.hasValue() && (*api)->droppedRecords(context, streamId, &dropped) != CUPTI_SUCCESS) dropped = 0;
    std::free(buffer);

    Collector& shared = collector();
    const std::lock_guard lock(shared.mutex);
    if (!shared.live) return;
    shared.records.insert(shared.records.end(), std::make_move_iterator(records.begin()),
                          std::make_move_iterator(records.end()));
    shared.dropped += dropped;
    shared.untimed += untimed;
    if (shared.unreadable.empty()) shared.unreadable = unreadable;
}

// ---- kernelBaseName ------------------------------------------------------------------------------

bool isIdentifierChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// For text that ends with `close` at s[end - 1]: the index of the matching `open`, or npos.
std::size_t matchingOpen(std::string_view s, std::size_t end, char open, char close) {
    int depth = 0;
    for (std::size_t i = end; i-- > 0;) {
        if (s[i] == close) ++depth;
        else if (s[i] == open && --depth == 0) return i;
    }
    return std::string_view::npos;
}

// Itanium mangling of a free function: _Z [L] <source-name> ... or _Z [L] N <source-name>+ [I...E] E ...
// where <source-name> is <length><identifier>. The function's identifier is the last source-name
// before anything else (template arguments, the end of the nested name, the parameter types).
std::string_view mangledBaseName(std::string_view s) {
    std::size_t p = 2;  // past "_Z"
    if (p < s.size() && s[p] == 'L') ++p;  // internal linkage
    if (p < s.size() && s[p] == 'N') {
        ++p;
        while (p < s.size() && (s[p] == 'r' || s[p] == 'V' || s[p] == 'K')) ++p;  // cv-qualifiers
    }
    std::string_view last;
    while (p < s.size() && std::isdigit(static_cast<unsigned char>(s[p]))) {
        std::size_t length = 0;
        while (p < s.size() && std::isdigit(static_cast<unsigned char>(s[p]))) {
            length = length * 10 + static_cast<std::size_t>(s[p] - '0');
            if (length > s.size()) return last;  // not a length any name here could have
            ++p;
        }
        if (length == 0) break;
        last = s.substr(p, length);  // shorter when the name was truncated
        p += last.size();
    }
    return last;
}

// A demangled signature such as "void ns::(anonymous namespace)::f<4>(float const*)", or a plain
// identifier: drop a trailing parameter list and template argument list, keep the identifier left.
std::string_view demangledBaseName(std::string_view s) {
    std::size_t end = s.size();
    const auto dropTrailing = [&](char open, char close) {
        while (end > 0 && s[end - 1] == ' ') --end;
        if (end == 0 || s[end - 1] != close) return;
        const std::size_t at = matchingOpen(s, end, open, close);
        if (at != std::string_view::npos) end = at;
    };
    dropTrailing('(', ')');
    dropTrailing('<', '>');
    std::size_t begin = end;
    while (begin > 0 && isIdentifierChar(s[begin - 1])) --begin;
    return s.substr(begin, end - begin);
}

}  // namespace

std::string kernelBaseName(const std::string& mangledOrPlain) {
    const std::string_view name = mangledOrPlain;
    const std::string_view base = name.starts_with("_Z") ? mangledBaseName(name) : demangledBaseName(name);
    return base.empty() ? mangledOrPlain : std::string(base);
}

namespace {

// Removes every namespace qualifier ("a::b::", "(anonymous namespace)::") from `text`.
std::string withoutQualifiers(std::string_view text) {
    constexpr std::string_view kAnonymous = "(anonymous namespace)::";
    std::string out;
    std::size_t i = 0;
    while (i < text.size()) {
        if (text.substr(i).starts_with(kAnonymous)) {
            i += kAnonymous.size();
            continue;
        }
        if (isIdentifierChar(text[i])) {
            std::size_t end = i;
            while (end < text.size() && isIdentifierChar(text[end])) ++end;
            if (text.substr(end).starts_with("::")) {
                i = end + 2;  // a qualifier: dropped
            } else {
                out.append(text.substr(i, end - i));
                i = end;
            }
            continue;
        }
        out.push_back(text[i++]);
    }
    return out;
}

}  // namespace

std::string kernelDisplayName(const std::string& mangledOrPlain) {
    std::string demangled = mangledOrPlain;
    if (mangledOrPlain.starts_with("_Z")) {
        int status = 0;
        char* text = abi::__cxa_demangle(mangledOrPlain.c_str(), nullptr, nullptr, &status);
        if (status != 0 || !text) {
            std::free(text);
            return kernelBaseName(mangledOrPlain);
        }
        demangled = text;
        std::free(text);
    }
    const std::string_view s = demangled;
    std::size_t end = s.size();
    while (end > 0 && s[end - 1] == ' ') --end;
    if (end > 0 && s[end - 1] == ')') {  // the parameter list
        const std::size_t at = matchingOpen(s, end, '(', ')');
        if (at != std::string_view::npos) end = at;
    }
    while (end > 0 && s[end - 1] == ' ') --end;
    if (end == 0 || s[end - 1] != '>') return kernelBaseName(mangledOrPlain);
    const std::size_t open = matchingOpen(s, end, '<', '>');
    if (open == std::string_view::npos) return kernelBaseName(mangledOrPlain);
    std::size_t begin = open;
    while (begin > 0 && isIdentifierChar(s[begin - 1])) --begin;
    if (begin == open) return kernelBaseName(mangledOrPlain);
    return std::string(s.substr(begin, open - begin)) + withoutQualifiers(s.substr(open, end - open));
}

// ---- Loading -------------------------------------------------------------------------------------

Expected<CuptiApi> loadCuptiFrom(std::span<const char* const> sonames) {
    RuntimeLibrary library = RuntimeLibrary::openFirst(sonames);
    if (!library.handle) {
        return Status{ErrorCode::Unsupported, "CUPTI (libcupti.so) is not installed: none of " + sonameList(sonames) + " loads" +
                                                  (library.lastError.empty() ? "" : " (" + library.lastError + ")") +
                                                  "; per-kernel step timelines are unavailable"};
    }
    CuptiApi api;
    api.soname = library.soname;
    const auto bind = [&](auto& function, const char* symbol, bool required) { library.bind(function, symbol, required); };
    bind(api.enable, "cuptiActivityEnable", true);
    bind(api.disable, "cuptiActivityDisable", true);
    bind(api.registerCallbacks, "cuptiActivityRegisterCallbacks", true);
    bind(api.flushAll, "cuptiActivityFlushAll", true);
    bind(api.nextRecord, "cuptiActivityGetNextRecord", true);
    bind(api.droppedRecords, "cuptiActivityGetNumDroppedRecords", true);
    bind(api.resultString, "cuptiGetResultString", false);
    if (!library.missing.empty()) {
        // The library stays loaded (see the header).
        return Status{ErrorCode::InvalidFile, api.soname + " lacks " + library.missing +
                                                  ": this CUPTI is too old or damaged; per-kernel step timelines are unavailable"};
    }
    return api;
}

Expected<const CuptiApi*> loadCupti() {
    static std::once_flag once;
    static Expected<CuptiApi>* result = nullptr;  // never freed: outlives every user
    std::call_once(once, [] { result = new Expected<CuptiApi>(loadCuptiFrom(kCuptiSonames)); });
    if (!result->hasValue()) return result->status();
    return &result->value();
}

// ---- KernelTrace ---------------------------------------------------------------------------------

Expected<std::unique_ptr<KernelTrace>> KernelTrace::create() {
    auto api = loadCupti();
    if (!api) return api.status();
    const CuptiApi& cupti = **api;
    // The current device's context must exist before recording is enabled: when CUPTI is enabled
    // before the context is created, a later cuptiActivityDisable does not stop the recording of
    // graph launches on it (seen on an H200 with CUDA 13.0, driver 580), so setRecording(false)
    // would not pause replayed steps.
    if (const cudaError_t error = cudaFree(nullptr); error != cudaSuccess) {
        cudaGetLastError();  // clear the runtime's last error so a later launch check does not report it
        return Status{ErrorCode::Device, std::string("KernelTrace: no usable CUDA device: ") + cudaGetErrorString(error)};
    }
    Collector& shared = collector();
    {
        const std::lock_guard lock(shared.mutex);
        if (shared.live) {
            return Status{ErrorCode::InvalidArgument,
                          "KernelTrace: one already exists in this process (CUPTI's activity API is process-global)"};
        }
        shared.live = true;
        shared.records.clear();
        shared.dropped = shared.untimed = 0;
        shared.unreadable.clear();
    }
    const auto fail = [&](CUptiResult result, const char* what) {
        const std::lock_guard lock(shared.mutex);
        shared.live = false;
        return cuptiFailure(cupti, result, what);
    };
    CUptiResult result = cupti.registerCallbacks(bufferRequested, bufferCompleted);
    if (result != CUPTI_SUCCESS) return fail(result, "cuptiActivityRegisterCallbacks");
    result = cupti.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    if (result != CUPTI_SUCCESS) return fail(result, "cuptiActivityEnable(CONCURRENT_KERNEL)");
    return std::unique_ptr<KernelTrace>(new KernelTrace(*api));
}

KernelTrace::~KernelTrace() {
    // Failures here change nothing the caller could act on: records after this point are discarded.
    static_cast<void>(api_->disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    static_cast<void>(api_->flushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    Collector& shared = collector();
    const std::lock_guard lock(shared.mutex);
    shared.live = false;
    shared.records.clear();
}

Status KernelTrace::setRecording(bool recording) {
    const CUptiResult result = recording ? api_->enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
                                         : api_->disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    if (result != CUPTI_SUCCESS) {
        return cuptiFailure(*api_, result, recording ? "cuptiActivityEnable(CONCURRENT_KERNEL)"
                                                     : "cuptiActivityDisable(CONCURRENT_KERNEL)");
    }
    return Status::ok();
}

Status KernelTrace::collect(std::vector<KernelRecord>& out) {
    const CUptiResult flushed = api_->flushAll(0);
    std::size_t droppedNow = 0;  // records dropped but not yet reported with a completed buffer
    if (api_->droppedRecords(nullptr, 0, &droppedNow) != CUPTI_SUCCESS) droppedNow = 0;

    Collector& shared = collector();
    std::vector<KernelRecord> records;
    std::uint64_t dropped = 0, untimed = 0;
    std::string unreadable;
    {
        const std::lock_guard lock(shared.mutex);
        records.swap(shared.records);
        dropped = shared.dropped + droppedNow;
        untimed = shared.untimed;
        unreadable.swap(shared.unreadable);
        shared.dropped = shared.untimed = 0;
    }
    out.insert(out.end(), std::make_move_iterator(records.begin()), std::make_move_iterator(records.end()));

    if (flushed != CUPTI_SUCCESS) return cuptiFailure(*api_, flushed, "cuptiActivityFlushAll");
    std::string problems;
    const auto note = [&](const std::string& problem) { problems += (problems.empty() ? "" : "; ") + problem; };
    if (dropped > 0) note(std::to_string(dropped) + " records dropped (no activity buffer space)");
    if (untimed > 0) note(std::to_string(untimed) + " kernel records without valid timestamps (CUPTI's device buffer was full)");
    if (!unreadable.empty()) note("an activity buffer could not be read (" + unreadable + ")");
    if (!problems.empty()) return {ErrorCode::Device, "KernelTrace: " + problems + "; the collected timeline is incomplete"};
    return Status::ok();
}

}  // namespace gemma
