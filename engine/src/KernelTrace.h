// Per-kernel GPU timestamps of real (graph-replayed, PDL-overlapped) decode steps through CUPTI's
// activity API (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL): no event records between kernels, so the
// step runs as it does untraced, and kernels keep overlapping. StepAttribution.h turns a step's
// records into buckets.
//
// CUPTI is loaded at run time like cuBLASLt (CublasLt.h): nothing links libcupti, installed
// programs start without it, and callers get a Status saying it is missing. Engine-internal (no
// Qt); built only with CUDA (the header needs the toolkit's cupti_activity.h for the types).
#pragma once

#include <cupti_activity.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gemma/Status.h"

namespace gemma {

// The entry points KernelTrace uses. Every member is bound (non-null) in a loaded table except
// resultString, which is optional (it only names error codes).
struct CuptiApi {
    decltype(&cuptiActivityEnable) enable = nullptr;
    decltype(&cuptiActivityDisable) disable = nullptr;
    decltype(&cuptiActivityRegisterCallbacks) registerCallbacks = nullptr;
    decltype(&cuptiActivityFlushAll) flushAll = nullptr;
    decltype(&cuptiActivityGetNextRecord) nextRecord = nullptr;
    decltype(&cuptiActivityGetNumDroppedRecords) droppedRecords = nullptr;
    decltype(&cuptiGetResultString) resultString = nullptr;  // optional
    std::string soname;  // the library that was loaded
};

// Tried in this order: the CUDA 13 and 12 libraries, then whatever libcupti.so points to.
inline constexpr const char* kCuptiSonames[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so"};

// Loads the first of `sonames` that dlopen() accepts and binds the table. Errors:
//   Unsupported  — none of them loads ("CUPTI (libcupti.so) is not installed (...)");
//   InvalidFile  — a library loaded but lacks a required entry point (named in the message).
// A loaded library stays loaded for the life of the process.
Expected<CuptiApi> loadCuptiFrom(std::span<const char* const> sonames);
// The same over kCuptiSonames, loaded once per process (thread-safe); the table outlives every
// caller. A failure is cached too.
Expected<const CuptiApi*> loadCupti();

// One kernel execution as CUPTI reports it. Timestamps are CUPTI's GPU clock in ns; a record with
// startNs == endNs == 0 carried no timestamps (collect reports that as an error).
struct KernelRecord {
    std::string name;  // as CUPTI gives it: usually the mangled name; see kernelBaseName
    std::uint64_t startNs = 0;
    std::uint64_t endNs = 0;
    std::uint32_t correlationId = 0;  // the launch's id (graph replays: one per kernel node run)
};

// The kernel's plain function identifier, without namespaces, template arguments or parameters:
//   "_ZN5gemma4cuda12_GLOBAL__N_118fp4MatvecMmaKernelILb1E...EEvPKh..."  → "fp4MatvecMmaKernel"
//   "void gemma::cuda::(anonymous namespace)::argmaxKernel<4>(float const*)" → "argmaxKernel"
//   "streamReadKernel"                                                     → "streamReadKernel"
// Itanium-mangled names ("_Z...") are read up to the last component of the function's name, also
// when truncated; other text is read as a demangled signature. Text with no identifier where the
// name should be comes back unchanged.
std::string kernelBaseName(const std::string& mangledOrPlain);

// The kernel's identifier with its template arguments, namespaces dropped, for tables that tell
// the instances of one template apart (a fused attention from an unfused one):
//   "_ZN5gemma4cuda9fp4detail18fp4MatvecMmaKernelILb1ELNS1_5XFormE2ELi4ELi1ELb1EEEvNS1_7MmaArgsEi"
//       → "fp4MatvecMmaKernel<true, (XForm)2, 4, 1, true>"
// Mangled names are demangled first (abi::__cxa_demangle); a name that does not demangle, or has
// no template arguments, gives kernelBaseName's answer.
std::string kernelDisplayName(const std::string& mangledOrPlain);

// The kernel records CUPTI collects while the object lives.
//
// Process-global contract: CUPTI's activity API has one state per process, so at most one
// KernelTrace exists at a time (create() fails while another lives), and while it lives it sees
// every kernel of every stream, device and thread of the process, including kernels other code
// launches. Keep one for as long as tracing is wanted rather than one per step. The buffer
// callbacks stay registered with CUPTI after destruction (CUPTI cannot unregister them); they
// then only release buffers. Not thread-safe: one thread calls collect(); the records themselves
// arrive on CUPTI's threads and are handed over under a mutex.
class KernelTrace {
public:
    static constexpr std::size_t kBufferBytes = std::size_t{8} << 20;  // per activity buffer

    // Loads CUPTI (loadCupti), creates the calling thread's current device context if it does
    // not exist yet (cudaFree(nullptr); see KernelTrace.cpp for why), registers the buffer
    // callbacks and enables CONCURRENT_KERNEL records. Kernels launched from then on are
    // recorded, graph replays included (also of graphs instantiated before create). Errors:
    // loadCupti's; Device without a usable CUDA device; InvalidArgument while another
    // KernelTrace lives; Device when CUPTI refuses (another profiler attached, ...), with
    // CUPTI's reason.
    static Expected<std::unique_ptr<KernelTrace>> create();
    // Disables the record kind and flushes every buffer; records not collected are discarded.
    ~KernelTrace();
    KernelTrace(const KernelTrace&) = delete;
    KernelTrace& operator=(const KernelTrace&) = delete;

    // Appends to `out` every kernel record completed since the last collect (or since create),
    // in CUPTI's delivery order (not necessarily start order). Synchronize the traced streams
    // first: a kernel still running is not complete, and its buffer is not delivered (a
    // cuptiActivityFlushAll(0) delivers only buffers whose records are all complete).
    // Errors (the records that did arrive are appended all the same; the timeline is incomplete):
    //   Device — the flush failed, CUPTI dropped records (no buffer space), a buffer could not
    //            be read, or records carried no timestamps (CUPTI's device buffer was full).
    Status collect(std::vector<KernelRecord>& out);

    // Stops (false) or restarts (true) recording without giving up the trace: while recording,
    // every kernel carries CUPTI's timestamp instrumentation (measured on an H200: 0.05–0.4 µs
    // per kernel), so a caller that traces one step in N pauses between traced steps. Kernels
    // launched while paused are not recorded; records of earlier kernels stay collectable. Each
    // switch costs ~15 µs of host time. Errors: Device with CUPTI's reason.
    Status setRecording(bool recording);

private:
    explicit KernelTrace(const CuptiApi* api) : api_(api) {}

    const CuptiApi* api_;
};

}  // namespace gemma
