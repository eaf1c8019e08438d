// Shared scaffolding of the GPU kernel harnesses (tests/kernels/*.cu). Each harness #includes
// the production .cu files it checks, builds FP64 host references over the same rounded inputs,
// poisons outputs (and memory that must not be read) with NaN, and prints a table.
//
// Environment:
//   GEMMA_SEED=<n>          reuse a seed (default: fresh from std::random_device, printed)
//   GEMMA_HARNESS_QUICK=1   small fixtures only, no timing (compute-sanitizer runs)
//   GEMMA_HARNESS_THREAD_COPIES=1  the attention kernels' K/V staging by every thread's cp.async
//                           instead of the default bulk copies (racecheck runs: bulkCopiesByDefault)
// Exit codes: 0 all passed, 1 a check failed, 77 no CUDA device (CTest SKIP_RETURN_CODE).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <kernels/WeightFormats.h>

#include "CudaCommon.h"  // allowDependentsToStart() for the producer kernel below
#include "KvCache.h"     // KvDtype, kvElementBytes for the cache value helpers below

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace harness {

#define HCHECK(call)                                                                          \
    do {                                                                                      \
        const cudaError_t err_ = (call);                                                      \
        if (err_ != cudaSuccess) {                                                            \
            std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorName(err_),       \
                         __FILE__, __LINE__, cudaGetErrorString(err_));                       \
            std::exit(1);                                                                     \
        }                                                                                     \
    } while (0)

#define HCHECK_STATUS(call)                                                                    \
    do {                                                                                       \
        const auto st_ = (call);                                                               \
        if (st_ != gemma::cuda::KernelStatus::Ok) {                                            \
            std::fprintf(stderr, "launcher returned %s at %s:%d\n",                             \
                         gemma::cuda::kernelStatusName(st_), __FILE__, __LINE__);               \
            std::exit(1);                                                                      \
        }                                                                                      \
        HCHECK(cudaGetLastError());                                                            \
    } while (0)

inline void requireDevice(const char* name) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        std::printf("%s: SKIP (no CUDA device)\n", name);
        std::exit(77);
    }
    cudaDeviceProp prop{};
    HCHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("%s on %s (sm_%d%d, %d SMs, L2 %d MB)\n", name, prop.name, prop.major, prop.minor,
                prop.multiProcessorCount, prop.l2CacheSize >> 20);
}

inline bool quickMode() {
    const char* q = std::getenv("GEMMA_HARNESS_QUICK");
    return q && q[0] == '1';
}

// The staging the attention harnesses give their kernels: the default (bulk copies on sm_90+)
// unless GEMMA_HARNESS_THREAD_COPIES=1. compute-sanitizer's racecheck does not model the
// happens-before edge from a raw cp.async.bulk's complete_tx on an mbarrier to the threads that
// wait on it, so it reports every read of a bulk-filled slot as a hazard (flash-attention's
// AI/RACECHECK_TMA_HAZARD.md found the same: raw cp.async.bulk reported, descriptor TMA clean).
// scripts/gpu_kernels.sh runs racecheck on the cp.async form (the same ring, the same barriers
// between its phases); the bulk form is checked bit for bit against it in every other run, and by
// memcheck and initcheck.
inline bool bulkCopiesByDefault() {
    const char* t = std::getenv("GEMMA_HARNESS_THREAD_COPIES");
    return !(t && t[0] == '1');
}

// GEMMA_HARNESS_SHARD=i/n (0 <= i < n): a harness runs only the cases whose running number
// (the order take() is called in) is i modulo n, so a sanitizer's slow run of one harness splits
// over n processes and every case runs in exactly one of them. Unset or malformed: every case.
class Shard {
public:
    Shard() {
        const char* s = std::getenv("GEMMA_HARNESS_SHARD");
        int index = 0, count = 0;
        if (s && std::sscanf(s, "%d/%d", &index, &count) == 2 && count > 0 && index >= 0 && index < count) {
            index_ = index;
            count_ = count;
            std::printf("shard %d of %d\n", index, count);
        }
    }
    bool take() { return counter_++ % count_ == index_; }

private:
    int index_ = 0, count_ = 1, counter_ = 0;
};

inline std::uint64_t seedFromEnv() {
    const char* s = std::getenv("GEMMA_SEED");
    std::uint64_t seed;
    if (s && *s) seed = std::strtoull(s, nullptr, 10);
    else seed = (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
    std::printf("seed %llu (rerun with GEMMA_SEED=%llu)\n", static_cast<unsigned long long>(seed),
                static_cast<unsigned long long>(seed));
    return seed;
}

// ---- device buffers ------------------------------------------------------------------------------
template <typename T>
struct DeviceBuffer {
    T* ptr = nullptr;
    std::size_t count = 0;
    DeviceBuffer() = default;
    explicit DeviceBuffer(std::size_t n) : count(n) {
        HCHECK(cudaMalloc(&ptr, std::max<std::size_t>(n, 1) * sizeof(T)));
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    DeviceBuffer(DeviceBuffer&& o) noexcept : ptr(o.ptr), count(o.count) { o.ptr = nullptr; o.count = 0; }
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        std::swap(ptr, o.ptr);
        std::swap(count, o.count);
        return *this;
    }
    ~DeviceBuffer() { if (ptr) cudaFree(ptr); }
    void upload(const std::vector<T>& h) {
        HCHECK(cudaMemcpy(ptr, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    }
    std::vector<T> download() const {
        std::vector<T> h(count);
        HCHECK(cudaMemcpy(h.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost));
        return h;
    }
    void poison() { HCHECK(cudaMemset(ptr, 0xFF, count * sizeof(T))); }  // NaN for f32, bf16 and fp16
    std::size_t bytes() const { return count * sizeof(T); }
};

// ---- programmatic launch checks ------------------------------------------------------------------
// The producer of a "programmatic launch" check: an ordinary kernel that lets its dependents start
// at once (sm_90+), spins for ~50 µs, then copies `bytes` from src to dst. A kernel launched
// programmatically right after it starts during the spin, and sees the NaN poison in dst unless it
// waits (griddepcontrol.wait) before reading.
__global__ void delayedCopyKernel(const std::uint8_t* src, std::uint8_t* dst, std::size_t bytes) {
    gemma::cuda::allowDependentsToStart();
    const long long start = clock64();
    while (clock64() - start < 100000) {
    }
    for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < bytes;
         i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
        dst[i] = src[i];
}

// How a fixture feeds the inputs that, in the engine, an earlier kernel writes. Ordinary
// (programmatic = false): upload() writes them into the kernel's buffers and produce() does
// nothing; launch on stream() (the legacy stream) as before. Programmatic: upload() writes a
// staging copy and poisons the kernel's buffer with NaN; produce() waits for the device (poisons
// and uploads run on the legacy stream), then copies every staged input in with delayedCopyKernel
// on a non-blocking stream; the fixture then launches the kernel under test on stream() with
// programmaticLaunch = true and synchronizes.
class Producer {
public:
    explicit Producer(bool programmatic) : programmatic_(programmatic) {
        if (programmatic_) HCHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    }
    Producer(const Producer&) = delete;
    Producer& operator=(const Producer&) = delete;
    ~Producer() { if (stream_) cudaStreamDestroy(stream_); }
    bool programmatic() const { return programmatic_; }
    cudaStream_t stream() const { return stream_; }
    std::string tag() const { return programmatic_ ? "programmatic launch: " : ""; }
    template <typename T>
    void upload(DeviceBuffer<T>& input, const std::vector<T>& host) {
        if (!programmatic_) return input.upload(host);
        input.poison();
        stage(reinterpret_cast<std::uint8_t*>(input.ptr), host.data(), host.size() * sizeof(T));
    }
    // Like upload(), for a byte range inside a larger buffer (the rest of it is left as it is).
    void uploadBytes(std::uint8_t* dst, const std::vector<std::uint8_t>& host) {
        if (!programmatic_) {
            HCHECK(cudaMemcpy(dst, host.data(), host.size(), cudaMemcpyHostToDevice));
            return;
        }
        HCHECK(cudaMemset(dst, 0xFF, host.size()));
        stage(dst, host.data(), host.size());
    }
    void produce() {
        if (!programmatic_) return;
        HCHECK(cudaDeviceSynchronize());
        for (auto& c : copies_) {
            delayedCopyKernel<<<64, 256, 0, stream_>>>(c.staging.ptr, c.dst, c.staging.bytes());
            HCHECK(cudaGetLastError());
        }
    }

private:
    // The host bytes into a staging buffer that produce() copies into dst.
    void stage(std::uint8_t* dst, const void* host, std::size_t bytes) {
        DeviceBuffer<std::uint8_t> staging(bytes);
        HCHECK(cudaMemcpy(staging.ptr, host, bytes, cudaMemcpyHostToDevice));
        copies_.push_back({std::move(staging), dst});
    }
    struct Copy {
        DeviceBuffer<std::uint8_t> staging;
        std::uint8_t* dst;
    };
    bool programmatic_;
    cudaStream_t stream_ = nullptr;
    std::vector<Copy> copies_;
};

// ---- FP64 references shared by harnesses ------------------------------------------------------------
// RMSNorm of one head (w null: unweighted) and its half-split RoPE for pairs j < rotatedPairs, over
// the same fp32 inputs as NormRopeCache.cu; the angle is float(invFreq[j]·float(pos)) as
// transformers computes it (and the kernels), cos/sin in double.
inline void normRef(const float* x, const float* w, int d, float eps, std::vector<double>& y) {
    double ss = 0;
    for (int i = 0; i < d; ++i) ss += double(x[i]) * x[i];
    const double inv = 1.0 / std::sqrt(ss / d + eps);
    y.resize(d);
    for (int i = 0; i < d; ++i) y[i] = x[i] * inv * (w ? w[i] : 1.0);
}
inline void ropeRef(std::vector<double>& y, const std::vector<float>& invFreq, int rotatedPairs, int pos) {
    const int half = static_cast<int>(y.size() / 2);
    for (int j = 0; j < rotatedPairs; ++j) {
        const float angle = invFreq[j] * static_cast<float>(pos);
        const double c = std::cos(static_cast<double>(angle)), s = std::sin(static_cast<double>(angle));
        const double a = y[j], b = y[j + half];
        y[j] = a * c - b * s;
        y[j + half] = b * c + a * s;
    }
}

// ---- KV cache element values (KvCache.h) ---------------------------------------------------------
// The harnesses fill caches with values the cache can hold, so that their FP64 references read
// exactly what the kernels read. The roundings are the cache writers' (nearest even); NaN stays NaN.

// The value a cache of `dtype` holds for x: fp32 as is, bf16 and fp16 rounded (exact in a double).
inline double storedKvValue(gemma::cuda::KvDtype dtype, float x) {
    switch (dtype) {
        case gemma::cuda::KvDtype::BF16: return gemma::formats::roundToBf16(x);
        case gemma::cuda::KvDtype::F16: return gemma::formats::fp16ToFloat(gemma::formats::floatToFp16(x));
        default: return x;
    }
}

// x as the cache stores it, in the kvElementBytes(dtype) bytes at dst.
inline void encodeKv(gemma::cuda::KvDtype dtype, float x, std::uint8_t* dst) {
    switch (dtype) {
        case gemma::cuda::KvDtype::BF16: {
            const std::uint16_t bits = gemma::formats::floatToBf16(x);
            std::memcpy(dst, &bits, sizeof bits);
            break;
        }
        case gemma::cuda::KvDtype::F16: {
            const std::uint16_t bits = gemma::formats::floatToFp16(x);
            std::memcpy(dst, &bits, sizeof bits);
            break;
        }
        default: std::memcpy(dst, &x, sizeof x); break;
    }
}

// The value of the cache element at src (exact).
inline float decodeKv(gemma::cuda::KvDtype dtype, const std::uint8_t* src) {
    if (dtype == gemma::cuda::KvDtype::F32) {
        float x;
        std::memcpy(&x, src, sizeof x);
        return x;
    }
    std::uint16_t bits;
    std::memcpy(&bits, src, sizeof bits);
    return dtype == gemma::cuda::KvDtype::F16 ? gemma::formats::fp16ToFloat(bits) : gemma::formats::bf16ToFloat(bits);
}

// A whole host cache (float or double values the cache can hold) as the bytes to upload.
template <typename T>
std::vector<std::uint8_t> encodeKvCache(gemma::cuda::KvDtype dtype, const std::vector<T>& values) {
    const std::size_t bytes = gemma::cuda::kvElementBytes(dtype);
    std::vector<std::uint8_t> out(values.size() * bytes);
    for (std::size_t i = 0; i < values.size(); ++i) encodeKv(dtype, static_cast<float>(values[i]), &out[i * bytes]);
    return out;
}

// Keys and values of a cache of `capacity` slots of `slotElems` values, fp16-representable draws
// of U(−1, 1) (so that an f32 and an fp16 cache hold the same values) at positions [first, last]
// in slot position % capacity, NaN in every other slot (never read). Per position and element:
// the key's draw, then the value's.
struct KvBand {
    std::vector<float> keys, values;
};
inline KvBand fp16KvBand(std::int64_t capacity, std::int64_t slotElems, std::int64_t first, std::int64_t last, std::mt19937_64& rng) {
    KvBand band;
    band.keys.assign(static_cast<std::size_t>(capacity * slotElems), std::nanf(""));
    band.values = band.keys;
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (std::int64_t pos = first; pos <= last; ++pos)
        for (std::int64_t i = 0; i < slotElems; ++i) {
            const std::size_t at = static_cast<std::size_t>((pos % capacity) * slotElems + i);
            band.keys[at] = static_cast<float>(storedKvValue(gemma::cuda::KvDtype::F16, u(rng)));
            band.values[at] = static_cast<float>(storedKvValue(gemma::cuda::KvDtype::F16, u(rng)));
        }
    return band;
}

// The most that storing x in a cache of `dtype` can move it: half an ulp, so 2^-8 |x| for bf16's
// 8-bit significand and 2^-11 |x| for fp16's 11 bits (at least 2^-25, half of fp16's subnormal
// spacing 2^-24; below fp16's overflow at 65520, far above the harnesses' values); fp32 stores the
// value as it is.
inline double kvRoundingBound(gemma::cuda::KvDtype dtype, double x) {
    switch (dtype) {
        case gemma::cuda::KvDtype::BF16: return std::ldexp(std::fabs(x), -8);
        case gemma::cuda::KvDtype::F16: return std::max(std::ldexp(std::fabs(x), -11), std::ldexp(1.0, -25));
        default: return 0.0;
    }
}

// ---- comparison ----------------------------------------------------------------------------------
// Two outputs of one computation on differently stored inputs: the same bits, and finite (two
// all-NaN outputs would compare equal, e.g. from poisoned memory nothing wrote). Says which failed.
inline bool sameBitsAndFinite(const std::vector<float>& a, const std::vector<float>& b, std::string& why) {
    bool finite = true;
    for (float x : b) finite &= std::isfinite(x);
    const bool same = a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    why = !finite ? "non-finite output" : same ? "" : "bits differ";
    return finite && same;
}

struct Compare {
    double relErr = 0;   // ||out - ref||2 / ||ref||2
    double maxAbs = 0;   // max |out - ref|
    double maxRef = 0;   // max |ref|
    std::size_t nonFinite = 0;
    std::size_t count = 0;
    // max |out - ref| over max |ref| (maxAbs itself where ref is all zero).
    double maxRelative() const { return maxRef > 0 ? maxAbs / maxRef : maxAbs; }
};

// Ref: double (an FP64 reference) or float (another kernel's output).
template <typename Ref>
inline Compare compare(const float* out, const Ref* ref, std::size_t n) {
    Compare c;
    double num = 0, den = 0;
    for (std::size_t i = 0; i < n; ++i) {
        if (!std::isfinite(out[i])) { ++c.nonFinite; continue; }
        const double r = static_cast<double>(ref[i]);
        const double d = static_cast<double>(out[i]) - r;
        num += d * d;
        den += r * r;
        c.maxAbs = std::max(c.maxAbs, std::fabs(d));
        c.maxRef = std::max(c.maxRef, std::fabs(r));
    }
    c.count = n;
    c.relErr = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    return c;
}

struct Result {
    std::string name;
    Compare cmp;
    double relTol;
    double absTol;  // max |out - ref| <= absTol · max |ref|
    bool pass;
    std::string note;
};

class Report {
public:
    explicit Report(std::string title) : title_(std::move(title)) {}
    bool add(const std::string& name, const Compare& c, double relTol, double absTol,
             const std::string& note = {}) {
        const bool pass = c.nonFinite == 0 && c.count > 0 && c.relErr <= relTol &&
                          c.maxAbs <= absTol * std::max(c.maxRef, 1e-30);
        results_.push_back({name, c, relTol, absTol, pass, note});
        std::printf("  %-44s rel %.2e  maxAbs %.2e / maxRef %.2e  nonfinite %zu  %s %s\n",
                    name.c_str(), c.relErr, c.maxAbs, c.maxRef, c.nonFinite, pass ? "ok" : "FAIL",
                    note.c_str());
        std::fflush(stdout);
        return pass;
    }
    void addCheck(const std::string& name, bool pass, const std::string& note) {
        Compare c;
        c.count = 1;
        results_.push_back({name, c, 0, 0, pass, note});
        std::printf("  %-44s %s %s\n", name.c_str(), pass ? "ok" : "FAIL", note.c_str());
    }
    int finish() const {
        int failed = 0;
        double worstRel = 0;
        for (const auto& r : results_) {
            failed += r.pass ? 0 : 1;
            worstRel = std::max(worstRel, r.cmp.relErr);
        }
        std::printf("SUMMARY %s: %zu checks, %d failed, worst rel err %.2e -> %s\n", title_.c_str(),
                    results_.size(), failed, worstRel, failed ? "FAIL" : "PASS");
        return failed ? 1 : 0;
    }

private:
    std::string title_;
    std::vector<Result> results_;
};

// ---- random formatted data --------------------------------------------------------------------
struct Fp4Matrix {
    std::int64_t out = 0, in = 0, rowBytes = 0, groups = 0;
    std::vector<std::uint8_t> codes;
    std::vector<std::uint16_t> scales;
    // Row-major fp32 copy of the decoded weights (exact: a 2-bit by 8-bit significand product).
    std::vector<float> dequantize() const {
        std::vector<float> w(static_cast<std::size_t>(out * in));
        float lut[16];
        for (unsigned c = 0; c < 16; ++c) lut[c] = gemma::formats::e2m1ToFloat(c);
        for (std::int64_t r = 0; r < out; ++r)
            for (std::int64_t i = 0; i < in; ++i) {
                const std::uint8_t byte = codes[r * rowBytes + i / 2];
                const unsigned nib = (i & 1) ? (byte >> 4) : (byte & 15u);
                w[r * in + i] = lut[nib] * gemma::formats::bf16ToFloat(scales[r * groups + i / 128]);
            }
        return w;
    }
    double weight(std::int64_t r, std::int64_t i) const {
        const std::uint8_t byte = codes[r * rowBytes + i / 2];
        const unsigned nib = (i & 1) ? (byte >> 4) : (byte & 15u);
        return static_cast<double>(gemma::formats::e2m1ToFloat(nib)) *
               static_cast<double>(gemma::formats::bf16ToFloat(scales[r * groups + i / 128]));
    }
};

// An Fp4Matrix on the device (codes base 256-byte aligned by cudaMalloc).
struct DeviceFp4 {
    DeviceBuffer<std::uint8_t> codes;
    DeviceBuffer<std::uint16_t> scales;
};
inline DeviceFp4 upload(const Fp4Matrix& m) {
    DeviceFp4 d{DeviceBuffer<std::uint8_t>(m.codes.size()), DeviceBuffer<std::uint16_t>(m.scales.size())};
    d.codes.upload(m.codes);
    d.scales.upload(m.scales);
    return d;
}

// Uniformly random E2M1 codes (every nibble value, -0 included) with bf16 group scales around
// 1/(6·sqrt(in)) so that outputs stay O(1); padding nibbles past `in` are 0 (the format's rule).
inline Fp4Matrix randomFp4(std::int64_t out, std::int64_t in, std::mt19937_64& rng) {
    Fp4Matrix m;
    m.out = out;
    m.in = in;
    m.groups = gemma::formats::fp4GroupsPerRow(in);
    m.rowBytes = gemma::formats::fp4RowBytes(in);
    m.codes.assign(static_cast<std::size_t>(out * m.rowBytes), 0);
    m.scales.resize(static_cast<std::size_t>(out * m.groups));
    std::uniform_int_distribution<std::uint64_t> bits;
    std::uniform_real_distribution<float> sc(0.5f, 2.0f);
    const float base = 1.0f / (3.0f * std::sqrt(static_cast<float>(in)));
    const std::int64_t fullBytes = in / 2;
    for (std::int64_t r = 0; r < out; ++r) {
        std::uint8_t* row = &m.codes[r * m.rowBytes];
        for (std::int64_t j = 0; j < fullBytes; j += 8) {
            std::uint64_t v = bits(rng);
            for (std::int64_t k = j; k < j + 8 && k < fullBytes; ++k, v >>= 8) row[k] = static_cast<std::uint8_t>(v);
        }
        if (in & 1) row[fullBytes] = static_cast<std::uint8_t>(bits(rng) & 15u);  // high nibble = padding 0
        for (std::int64_t g = 0; g < m.groups; ++g)
            m.scales[r * m.groups + g] = gemma::formats::floatToBf16(base * sc(rng));
    }
    return m;
}

inline std::vector<float> randomFloats(std::size_t n, std::mt19937_64& rng, float lo = -1.f,
                                       float hi = 1.f) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

inline std::uint8_t randomE4M3(std::mt19937_64& rng) {
    std::uniform_int_distribution<unsigned> d(0, 255);
    for (;;) {
        const auto c = static_cast<std::uint8_t>(d(rng));
        if ((c & 0x7F) != 0x7F) return c;  // skip the two NaN codes
    }
}

// ---- timing --------------------------------------------------------------------------------------
// Median over `reps` event-timed batches of `batch` back-to-back launches (the queue stays ahead of
// the GPU, so host launch cost is hidden as in a CUDA graph); returns microseconds per launch.
// launch(i) gets a running index for rotating buffers.
template <typename F>
double medianMicros(F&& launch, int warmup, int reps, int batch = 10) {
    cudaEvent_t a, b;
    HCHECK(cudaEventCreate(&a));
    HCHECK(cudaEventCreate(&b));
    int index = 0;
    for (int i = 0; i < warmup; ++i) launch(index++);
    std::vector<float> ms;
    for (int i = 0; i < reps; ++i) {
        HCHECK(cudaEventRecord(a));
        for (int k = 0; k < batch; ++k) launch(index++);
        HCHECK(cudaEventRecord(b));
        HCHECK(cudaEventSynchronize(b));
        float t = 0;
        HCHECK(cudaEventElapsedTime(&t, a, b));
        ms.push_back(t);
    }
    HCHECK(cudaEventDestroy(a));
    HCHECK(cudaEventDestroy(b));
    std::sort(ms.begin(), ms.end());
    return 1000.0 * ms[ms.size() / 2] / batch;
}

// ---- cuBLASLt fp32 GEMM (column-major), the parity oracle's engine ----------------------------
// C[m×n] = op(A)·op(B), fp32 inputs, fp32 compute (CUBLAS_COMPUTE_32F: no TF32).
inline void ltGemmF32(cublasLtHandle_t lt, bool transA, bool transB, int m, int n, int k,
                      const float* A, int lda, const float* B, int ldb, float* C, int ldc,
                      cudaStream_t stream = nullptr) {
    auto ck = [](cublasStatus_t s, int line) {
        if (s != CUBLAS_STATUS_SUCCESS) {
            std::fprintf(stderr, "cuBLASLt error %d at line %d\n", static_cast<int>(s), line);
            std::exit(1);
        }
    };
    cublasLtMatmulDesc_t op;
    ck(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), __LINE__);
    const cublasOperation_t ta = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    ck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), __LINE__);
    ck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), __LINE__);
    cublasLtMatrixLayout_t la, lb, lc;
    ck(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, transA ? k : m, transA ? m : k, lda), __LINE__);
    ck(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, transB ? n : k, transB ? k : n, ldb), __LINE__);
    ck(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, m, n, ldc), __LINE__);
    const float alpha = 1.0f, beta = 0.0f;
    ck(cublasLtMatmul(lt, op, &alpha, A, la, B, lb, &beta, C, lc, C, lc, nullptr, nullptr, 0,
                      stream),
       __LINE__);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(op);
}

}  // namespace harness
