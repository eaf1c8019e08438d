// Harness: FP4-E2M1 group-128 matvec and the fused GeGLU variant (kernels/cuda/Fp4Matvec.cu).
// - every linear shape of the presets 12b, e2b, e4b, 31b (GEMMA4.md §6, PERF.md) and odd sizes
//   (out not a multiple of anything; in = 64, 130, 200, 2112), batches of 1, 3 and 5 rows;
// - FP64 host reference over the same stored codes/scales and fp32 inputs;
// - x padded past `in` with NaN (must never be read), y poisoned with NaN before each launch;
// - parity oracle: cuBLASLt fp32 GEMM over the dequantized weights, same inputs;
// - batch 1 runs the tensor-core kernel by default; every shape also runs on the fp32 CUDA-core
//   kernel (forceCudaCores) and with one-fp16 x (singleHalfX, looser tolerance: x carries ~11
//   bits there); q/k/v fused into one launch (Fp4MatvecParams::extra) against three references;
// - programmatic dependent launch: norm → matvec → matvec chains with every buffer NaN-poisoned
//   first, repeated, so a matvec that read x before its producer finished would show it;
// - the tiled device layout (Fp4Tile op, checked byte for byte against reference::tileFp4): every path
//   (tensor cores, CUDA cores, batches, GeGLU, fused q/k/v, fp16 x) bit-identical to the row layout;
// - the input norm folded into the matvec (Fp4MatvecParams::inputNorm) against an FP64 chain;
// - information only: achieved GB/s (CUDA events, median, weights rotated over > 2× L2); for the
//   tiled layout also the same launch from L2, launched programmatically, after an L2 prefetch,
//   and a plain streaming read of the same bytes (TimingContext: kernel cost against launch cost).
#include "../../kernels/cuda/Fp4Matvec.cu"
#include "../../kernels/cuda/Fp4Tile.cu"
#include "../../kernels/reference/ReferenceOps.cpp"  // standalone project: no reference library
#include "../../kernels/cuda/RmsNorm.cu"
#include "../../kernels/cuda/StreamRead.cu"
#include "HarnessCommon.h"
#include "PhaseReport.h"  // the measurement build (measure_matvec_phases) only

using namespace harness;
using gemma::cuda::Fp4MatvecParams;

namespace {

struct Shape {
    std::string name;
    std::int64_t out, in;
    bool geglu;  // also run the fused gate/up variant (gate and up get different weights)
};

std::vector<Shape> presetShapes() {
    std::vector<Shape> s;
    auto add = [&](const std::string& preset, const std::string& what, std::int64_t out,
                   std::int64_t in, bool geglu = false) {
        s.push_back({preset + "." + what, out, in, geglu});
    };
    // 12b: H 3840, 16 heads, sliding kv 8x256, full kv 1x512 (k_eq_v), FFN 15360.
    add("12b", "q_sliding", 16 * 256, 3840);
    add("12b", "kv_sliding", 8 * 256, 3840);
    add("12b", "o_sliding", 3840, 16 * 256);
    add("12b", "q_full", 16 * 512, 3840);
    add("12b", "k_full", 512, 3840);
    add("12b", "o_full", 3840, 16 * 512);
    add("12b", "gate_up", 15360, 3840, true);
    add("12b", "down", 3840, 15360);
    // e2b: H 1536, 8 heads, sliding 1x256, full 1x512, FFN 6144 (12288 double-wide), PLE 35x256.
    add("e2b", "q_sliding", 8 * 256, 1536);
    add("e2b", "kv_sliding", 256, 1536);
    add("e2b", "o_sliding", 1536, 8 * 256);
    add("e2b", "q_full", 8 * 512, 1536);
    add("e2b", "kv_full", 512, 1536);
    add("e2b", "o_full", 1536, 8 * 512);
    add("e2b", "gate_up", 6144, 1536, true);
    add("e2b", "down", 1536, 6144);
    add("e2b", "gate_up_wide", 12288, 1536, true);
    add("e2b", "down_wide", 1536, 12288);
    add("e2b", "ple_gate", 256, 1536);
    add("e2b", "ple_proj", 1536, 256);
    add("e2b", "ple_model_proj", 35 * 256, 1536);
    // e4b: H 2560, 8 heads, sliding 2x256, full 2x512, FFN 10240, PLE 42x256.
    add("e4b", "q_sliding", 8 * 256, 2560);
    add("e4b", "kv_sliding", 2 * 256, 2560);
    add("e4b", "o_sliding", 2560, 8 * 256);
    add("e4b", "q_full", 8 * 512, 2560);
    add("e4b", "kv_full", 2 * 512, 2560);
    add("e4b", "o_full", 2560, 8 * 512);
    add("e4b", "gate_up", 10240, 2560, true);
    add("e4b", "down", 2560, 10240);
    add("e4b", "ple_gate", 256, 2560);
    add("e4b", "ple_proj", 2560, 256);
    add("e4b", "ple_model_proj", 42 * 256, 2560);
    // 31b: H 5376, 32 heads, sliding 16x256, full 4x512 (k_eq_v), FFN 21504.
    add("31b", "q_sliding", 32 * 256, 5376);
    add("31b", "kv_sliding", 16 * 256, 5376);
    add("31b", "o_sliding", 5376, 32 * 256);
    add("31b", "q_full", 32 * 512, 5376);
    add("31b", "k_full", 4 * 512, 5376);
    add("31b", "o_full", 5376, 32 * 512);
    add("31b", "gate_up", 21504, 5376, true);
    add("31b", "down", 5376, 21504);
    return s;
}

std::vector<Shape> oddShapes() {
    return {{"odd.1x64", 1, 64, true},       {"odd.77x200", 77, 200, true},
            {"odd.1001x2112", 1001, 2112, true}, {"odd.333x130", 333, 130, false},
            {"odd.4099x96", 4099, 96, true},  {"odd.3x4000", 3, 4000, false}};
}

double referenceDot(const std::vector<float>& deq, std::int64_t in, std::int64_t r, const float* x) {
    double acc = 0;
    const float* w = &deq[r * in];
    for (std::int64_t i = 0; i < in; ++i) acc += static_cast<double>(w[i]) * static_cast<double>(x[i]);
    return acc;
}

// One pass over a row for a dot and the scales of its rounding errors: Σ_i |W[r][i]·x[i]| (whatever
// cancellation makes of the dot itself) and Σ_i |W[r][i]| (errors absolute in x).
struct DotTerms {
    double dot = 0, absDot = 0, absWeights = 0;
};
DotTerms referenceTerms(const std::vector<float>& deq, std::int64_t in, std::int64_t r, const float* x) {
    DotTerms t;
    const float* w = &deq[r * in];
    for (std::int64_t i = 0; i < in; ++i) {
        const double product = static_cast<double>(w[i]) * static_cast<double>(x[i]);
        t.dot += product;
        t.absDot += std::fabs(product);
        t.absWeights += std::fabs(static_cast<double>(w[i]));
    }
    return t;
}

// Pass when every |got - ref| <= tol · scale (scale per output, from referenceTerms). The
// max|ref|-relative check of Report::add alone flakes on shapes with a handful of outputs: one
// 64-term dot that happens to land near zero is all of max|ref|.
void addBoundCheck(Report& report, const std::string& name, const std::vector<float>& got, const std::vector<double>& ref,
                   const std::vector<double>& scale, double tol) {
    double worst = 0;
    bool finite = true;
    for (std::size_t k = 0; k < got.size(); ++k) {
        finite &= std::isfinite(got[k]);
        worst = std::max(worst, std::fabs(got[k] - ref[k]) / (tol * scale[k] + 1e-30));
    }
    char note[64];
    std::snprintf(note, sizeof note, "worst |err| / (%.0e · scale) = %.3f", tol, worst);
    report.addCheck(name + " per-output bound", finite && worst <= 1.0, note);
}

double geluTanhRef(double v) {
    return 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
}


// Tiled: the weights in the tiled layout (Fp4MatvecParams::tiled, built by the Fp4Tile op);
// TiledCudaCores: the same on the fp32 CUDA-core kernel.
enum class Path { Default, CudaCores, SingleHalf, TwoGroups, Fp16Split, Tiled, TiledCudaCores };
bool isTiled(Path p) { return p == Path::Tiled || p == Path::TiledCudaCores; }
#ifdef GEMMA_PHASE_CLOCK
// The phase clock's marks in fp4MatvecMmaKernel (measure_matvec_phases): 1-6 the launch's phases,
// 7-9 inside the staging of x without an input norm (per pass; 3 is then the staging barrier).
const std::vector<std::string> kMatvecPhases = {"",           "first weights issued", "dependency wait", "x staged (barrier)",
                                                "first tile", "later tiles",          "last stores",     "x loads issued",
                                                "x loads arrived", "x converted, stored"};
// The phases of `time(programmatic)`'s launches, alone and chained programmatically.
template <typename Time>
void appendMatvecPhases(std::vector<std::string>& lines, Time&& time) {
    for (const bool programmatic : {false, true})
        harness::appendPhases(lines, programmatic ? "  programmatic, each launch after the previous:" : "  alone:", kMatvecPhases,
                              [&] { time(programmatic); });
}
#endif

// A weight in the tiled layout (kernels/include/kernels/Fp4Tiled.h) on the device, made by the
// Fp4Tile op from the row layout into poisoned buffers; the op's output is checked byte for byte
// against reference::tileFp4 (which tests/engine/Fp4TiledTest.cpp checks against the header's
// index functions on every CI run).
struct TiledFp4 {
    DeviceBuffer<std::uint8_t> codes;
    DeviceBuffer<std::uint32_t> scales;
    const std::uint16_t* scaleBits() const { return reinterpret_cast<const std::uint16_t*>(scales.ptr); }
};
// A few initialized bytes standing in for a tiled weight on the paths that do not use one.
TiledFp4 noTiling() {
    TiledFp4 t{DeviceBuffer<std::uint8_t>(16), DeviceBuffer<std::uint32_t>(4)};
    t.codes.upload(std::vector<std::uint8_t>(16));
    t.scales.upload(std::vector<std::uint32_t>(4));
    return t;
}
TiledFp4 tileWeight(const Fp4Matrix& m, const DeviceFp4& d, Report& report) {
    std::vector<std::uint8_t> codes(static_cast<std::size_t>(gemma::formats::fp4tiled::codeBytes(m.out, m.in)));
    std::vector<std::uint32_t> scales(static_cast<std::size_t>(gemma::formats::fp4tiled::scaleWords(m.out, m.in)));
    gemma::reference::tileFp4(m.codes.data(), m.scales.data(), m.out, m.in, codes.data(), scales.data());
    TiledFp4 t{DeviceBuffer<std::uint8_t>(codes.size()), DeviceBuffer<std::uint32_t>(scales.size())};
    HCHECK(cudaMemset(t.codes.ptr, 0xFF, codes.size()));
    HCHECK(cudaMemset(t.scales.ptr, 0xFF, scales.size() * 4));
    gemma::cuda::Fp4TileParams tp;
    tp.codes = d.codes.ptr;
    tp.scales = d.scales.ptr;
    tp.out = m.out;
    tp.in = m.in;
    tp.tiledCodes = t.codes.ptr;
    tp.tiledScales = t.scales.ptr;
    HCHECK_STATUS(gemma::cuda::launchFp4Tile(tp, nullptr));
    HCHECK(cudaDeviceSynchronize());
    const std::string name = "tile op " + std::to_string(m.out) + "x" + std::to_string(m.in);
    report.addCheck(name + " codes equal reference::tileFp4", t.codes.download() == codes, "");
    report.addCheck(name + " scales equal reference::tileFp4", t.scales.download() == scales, "");
    return t;
}
// Back-to-back copies of a device buffer, which the timing loops rotate through so that each
// launch reads weights the L2 does not hold (at(c): copy c). copiesPastL2(bytes): enough copies
// of `bytes` per launch to span 3× the L2, at most 64.
int copiesPastL2(double bytes) {
    int dev = 0, l2 = 0;
    HCHECK(cudaGetDevice(&dev));
    HCHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    return static_cast<int>(std::min<double>(64, std::ceil(3.0 * l2 / bytes) + 1));
}
template <typename T>
struct Rotation {
    DeviceBuffer<T> buffer;
    std::size_t each;
    Rotation(const DeviceBuffer<T>& source, int copies) : buffer(source.count * copies), each(source.count) {
        for (int c = 0; c < copies; ++c) HCHECK(cudaMemcpy(buffer.ptr + c * each, source.ptr, each * sizeof(T), cudaMemcpyDeviceToDevice));
    }
    const T* at(int c) const { return buffer.ptr + c * each; }
};

// The diagnostic columns of a tiled timing line (information only): the same launch with its
// weights resident in L2 (one copy, launch after launch), launched back to back with programmatic
// dependent launch (each launch's start overlaps the previous one's tail, as in a decode step),
// and the streaming-read kernel over the same bytes (what one launch of that size can read at
// best). Together they say how much of a shape's time is the kernel and how much the launch.
// "after prefetch": the weights were asked into L2 (prefetchL2) by a kernel launched
// before a 20 µs wait that leaves the memory idle (as a decode step's attention does), then the
// matvec ran; its time is that sequence's minus the same sequence without the matvec.
struct TimingContext {
    double l2ResidentUs, programmaticUs, readAloneUs, prefetchedUs;
};
// Asks the L2 to fetch [p, p + bytes) from memory without waiting (a hint, done by the copy
// engine; sm_90+, elsewhere nothing). p 16-byte aligned, bytes a multiple of 16.
__device__ __forceinline__ void prefetchL2(const void* p, std::uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(bytes) : "memory");
#endif
}
// Block b asks for its slice of [p, p + bytes) in 64 KB pieces. bytes % 16 == 0.
__global__ void harnessPrefetchKernel(const std::uint8_t* p, std::int64_t bytes) {
    const std::int64_t per = ((bytes + gridDim.x - 1) / gridDim.x + 15) / 16 * 16;
    const std::int64_t blockEnd = (blockIdx.x + 1) * per;
    const std::int64_t end = blockEnd < bytes ? blockEnd : bytes;
    for (std::int64_t a = blockIdx.x * per + threadIdx.x * 65536; a < end; a += blockDim.x * 65536)
        prefetchL2(p + a, static_cast<std::uint32_t>(end - a < 65536 ? end - a : 65536));
}
__global__ void harnessWaitKernel(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    while (now - start < ns);
}
// µs of launch(c) after its weights (ranges(c)) were prefetched during a 20 µs idle wait.
template <typename Launch, typename Ranges>
double prefetchedMicros(int copies, Launch&& launch, Ranges&& ranges) {
    auto sequence = [&](int i, bool withMatvec) {
        const int c = i % copies;
        for (const auto& [ptr, bytes] : ranges(c))
            harnessPrefetchKernel<<<132, 32>>>(reinterpret_cast<const std::uint8_t*>(ptr), static_cast<std::int64_t>(bytes) / 16 * 16);
        harnessWaitKernel<<<1, 32>>>(20000);
        if (withMatvec) launch(c);
    };
    const double both = medianMicros([&](int i) { sequence(i, true); }, 10, 30);
    const double without = medianMicros([&](int i) { sequence(i, false); }, 10, 30);
    return both - without;
}
double readAloneMicros(double bytes) {
    const std::int64_t each = static_cast<std::int64_t>(bytes) / 16 * 16;
    const int copies = copiesPastL2(static_cast<double>(each));
    DeviceBuffer<std::uint8_t> data(static_cast<std::size_t>(each) * copies);
    HCHECK(cudaMemset(data.ptr, 0x5A, data.count));
    gemma::cuda::StreamReadParams r;
    r.bytes = each;
    DeviceBuffer<std::uint32_t> sink(static_cast<std::size_t>(gemma::cuda::streamReadBlocks(r)));
    r.sink = sink.ptr;
    return medianMicros(
        [&](int i) {
            r.data = data.ptr + static_cast<std::size_t>(i % copies) * each;
            gemma::cuda::launchStreamRead(r, nullptr);
        },
        10, 30);
}
std::string contextColumns(const TimingContext& t, double bytes) {
    char line[200];
    std::snprintf(line, sizeof line, " | L2-resident %6.2f us | programmatic %6.2f us | after prefetch %6.2f us | read alone %6.2f us %7.1f GB/s",
                  t.l2ResidentUs, t.programmaticUs, t.prefetchedUs, t.readAloneUs, bytes / t.readAloneUs * 1e-3);
    return line;
}

void runShape(const Shape& s, int rows, std::mt19937_64& rng, Report& report, cublasLtHandle_t lt,
              bool timing, std::vector<std::string>& perfLines, bool forceGlobalX = false,
              Path path = Path::Default) {
    const Fp4Matrix w = randomFp4(s.out, s.in, rng);
    const std::vector<float> deq = w.dequantize();
    const std::int64_t xStride = (s.in + 31) / 32 * 32 + 4;  // padding past `in` is NaN
    std::vector<float> x(static_cast<std::size_t>(rows * xStride), std::nanf(""));
    for (int r = 0; r < rows; ++r)
        for (std::int64_t i = 0; i < s.in; ++i)
            x[r * xStride + i] = std::uniform_real_distribution<float>(-1.f, 1.f)(rng);
    DeviceFp4 dw = upload(w);
    DeviceBuffer<float> dx(x.size());
    dx.upload(x);
    const std::int64_t yStride = s.out + 3;
    DeviceBuffer<float> dy(static_cast<std::size_t>(rows * yStride));

    Fp4MatvecParams p;
    p.codes = dw.codes.ptr;
    p.scales = dw.scales.ptr;
    p.out = s.out;
    p.in = s.in;
    p.x = dx.ptr;
    p.xStride = xStride;
    p.y = dy.ptr;
    p.yStride = yStride;
    p.rows = rows;
    p.forceGlobalX = forceGlobalX;
    p.forceCudaCores = forceGlobalX || path == Path::CudaCores;
    p.singleHalfX = path == Path::SingleHalf;
    p.twoGroupItems = path == Path::TwoGroups;
    p.fp16X = path == Path::Fp16Split;
    p.forceCudaCores = p.forceCudaCores || path == Path::TiledCudaCores;
    TiledFp4 tiled = isTiled(path) ? tileWeight(w, dw, report) : noTiling();
    if (isTiled(path)) {
        p.codes = tiled.codes.ptr;
        p.scales = tiled.scaleBits();
        p.tiled = true;
    }
    // hi + lo and the fp32 kernel are near fp32 (1e-4 leaves room for accumulation order over
    // 21504 inputs). One fp16 for x is checked below against its own error bound instead.
    const double tol = path == Path::SingleHalf ? 1.0 : 1e-4;
    dy.poison();
    HCHECK_STATUS(gemma::cuda::launchFp4Matvec(p, nullptr));
    HCHECK(cudaDeviceSynchronize());
    std::vector<float> y = dy.download();
    // The tiled layout feeds the same arithmetic in the same order (only the addresses differ),
    // so its outputs must equal the row layout's bit for bit.
    auto sameBits = [&](const std::vector<float>& a, const std::vector<float>& b, std::int64_t outs) {
        for (int r = 0; r < rows; ++r)
            for (std::int64_t o = 0; o < outs; ++o)
                if (std::memcmp(&a[r * yStride + o], &b[r * yStride + o], sizeof(float)) != 0) return false;
        return true;
    };
    // rowsLayout: the same launch with the row-layout pointers (gate, then up for GeGLU).
    auto checkAgainstRows = [&](const Fp4MatvecParams& tiledParams, bool geglu, const std::vector<float>& got,
                                const DeviceFp4* upRows) {
        Fp4MatvecParams registers = tiledParams;
        registers.tiled = false;
        registers.codes = dw.codes.ptr;
        registers.scales = dw.scales.ptr;
        if (upRows) {
            registers.upCodes = upRows->codes.ptr;
            registers.upScales = upRows->scales.ptr;
        }
        dy.poison();
        HCHECK_STATUS(geglu ? gemma::cuda::launchFp4GegluMatvec(registers, nullptr) : gemma::cuda::launchFp4Matvec(registers, nullptr));
        HCHECK(cudaDeviceSynchronize());
        report.addCheck(std::string(geglu ? "geglu  " : "matvec ") + s.name + " tiled layout bit-identical to the row layout",
                        sameBits(got, dy.download(), s.out), "");
    };
    if (isTiled(path)) checkAgainstRows(p, false, y, nullptr);

    // Compare only the written region [rows][out]; the gaps of yStride stay NaN by design.
    std::vector<float> got;
    std::vector<DotTerms> terms;  // [rows][out], reused by the GeGLU check below (same W, same x)
    std::vector<double> ref, scale, halfScale;
    for (int r = 0; r < rows; ++r)
        for (std::int64_t o = 0; o < s.out; ++o) {
            got.push_back(y[r * yStride + o]);
            terms.push_back(referenceTerms(deq, s.in, o, x.data() + r * xStride));
            ref.push_back(terms.back().dot);
            scale.push_back(terms.back().absDot);
            halfScale.push_back(terms.back().absDot + 0x1p-6 * terms.back().absWeights);
        }
    bool gapsIntact = true;
    for (int r = 0; r < rows; ++r)
        for (std::int64_t o = s.out; o < yStride; ++o) gapsIntact &= std::isnan(y[r * yStride + o]);
    const std::string tag = s.name + " " + std::to_string(s.out) + "x" + std::to_string(s.in) +
                            (rows > 1 ? " b" + std::to_string(rows) : "") +
                            (forceGlobalX ? " xglobal" : "") +
                            (path == Path::CudaCores ? " cuda-cores" : path == Path::SingleHalf ? " one-fp16-x"
                             : path == Path::TwoGroups ? " two-group items"
                             : path == Path::Fp16Split ? " fp16-x"
                             : path == Path::Tiled ? " tiled layout"
                             : path == Path::TiledCudaCores ? " tiled cuda-cores" : "");
    // Near-fp32 paths: 1e-4 of max|ref| over >= 64 outputs, and 1e-5·Σ|w·x| per output always.
    const bool manyOutputs = rows * s.out >= 64;
    if (path != Path::SingleHalf && manyOutputs)
        report.add("matvec " + tag, compare(got.data(), ref.data(), got.size()), tol, tol, gapsIntact ? "" : "(wrote past out!)");
    if (path != Path::SingleHalf) addBoundCheck(report, "matvec " + tag, got, ref, scale, 1e-5);
    // One fp16 of x·2^-8 carries a relative error <= 2^-11 (2^-25 absolute below fp16's normal
    // range), so |y - ref| <= 2^-11·Σ|w·x| + 2^-17·Σ|w| = 2^-11·halfScale per output, whatever
    // cancellation makes of ref itself; checked with a factor 2 of slack for the fp32 accumulation.
    if (path == Path::SingleHalf) addBoundCheck(report, "matvec " + tag + " (one-fp16 bound)", got, ref, halfScale, 0x1p-10);
    if (!gapsIntact) report.addCheck("matvec " + tag + " no stray writes", false, "");

    // Parity oracle: cuBLASLt fp32 over the dequantized weights.
    if (lt) {
        DeviceBuffer<float> dDeq(deq.size());
        dDeq.upload(deq);
        std::vector<float> xDense(static_cast<std::size_t>(rows * s.in));
        for (int r = 0; r < rows; ++r)
            std::memcpy(&xDense[r * s.in], &x[r * xStride], sizeof(float) * s.in);
        DeviceBuffer<float> dxDense(xDense.size());
        dxDense.upload(xDense);
        DeviceBuffer<float> dLt(static_cast<std::size_t>(rows * s.out));
        dLt.poison();
        // Column-major: Y (out × rows) = Wᵀ(in × out)ᵀ · X (in × rows).
        ltGemmF32(lt, true, false, static_cast<int>(s.out), rows, static_cast<int>(s.in), dDeq.ptr,
                  static_cast<int>(s.in), dxDense.ptr, static_cast<int>(s.in), dLt.ptr,
                  static_cast<int>(s.out));
        HCHECK(cudaDeviceSynchronize());
        std::vector<float> yl = dLt.download();
        std::vector<double> yld(yl.begin(), yl.end());
        // Same statistics as above (max|ref|-relative, so only over >= 64 outputs).
        if (manyOutputs) {
            const double ltTol = path == Path::SingleHalf ? 3e-3 : tol;
            report.add("  vs cuBLASLt " + tag, compare(got.data(), yld.data(), got.size()), ltTol, ltTol);
        }
    }

    if (s.geglu) {
        const Fp4Matrix up = randomFp4(s.out, s.in, rng);
        const std::vector<float> deqUp = up.dequantize();
        DeviceFp4 du = upload(up);
        Fp4MatvecParams g = p;
        g.upCodes = du.codes.ptr;
        g.upScales = du.scales.ptr;
        TiledFp4 upTiled = isTiled(path) ? tileWeight(up, du, report) : noTiling();
        if (isTiled(path)) {
            g.upCodes = upTiled.codes.ptr;
            g.upScales = upTiled.scaleBits();
        }
        dy.poison();
        HCHECK_STATUS(gemma::cuda::launchFp4GegluMatvec(g, nullptr));
        HCHECK(cudaDeviceSynchronize());
        std::vector<float> yg = dy.download();
        if (isTiled(path)) checkAgainstRows(g, true, yg, &du);
        std::vector<float> gotg;
        std::vector<double> refg, scaleg;
        for (int r = 0; r < rows; ++r)
            for (std::int64_t o = 0; o < s.out; ++o) {
                gotg.push_back(yg[r * yStride + o]);
                const DotTerms& gate = terms[static_cast<std::size_t>(r * s.out + o)];
                const DotTerms upTerms = referenceTerms(deqUp, s.in, o, x.data() + r * xStride);
                refg.push_back(geluTanhRef(gate.dot) * upTerms.dot);
                // First-order error of gelu(g)·u: |gelu'(g)| <= 1.13 times the gate's error scale
                // times |u|, plus |gelu(g)| times the up projection's.
                scaleg.push_back(1.2 * gate.absDot * std::fabs(upTerms.dot) + std::fabs(geluTanhRef(gate.dot)) * upTerms.absDot);
            }
        if (path != Path::SingleHalf) addBoundCheck(report, "geglu  " + tag, gotg, refg, scaleg, 1e-5);
        // One fp16 x: 3e-3 of max|ref| over at least 64 outputs (one near-zero output alone could
        // be dominated by cancellation; the plain matvec above carries the exact bound).
        if (path != Path::SingleHalf && manyOutputs) report.add("geglu  " + tag, compare(gotg.data(), refg.data(), gotg.size()), tol, tol);
        else if (path == Path::SingleHalf && manyOutputs) report.add("geglu  " + tag, compare(gotg.data(), refg.data(), gotg.size()), 3e-3, 3e-3);

        if (timing && rows == 1) {
            const double bytes = 2.0 * static_cast<double>(w.codes.size() + 2 * w.scales.size());
            const int copies = copiesPastL2(bytes);
            const Rotation<std::uint8_t> cg(dw.codes, copies), cu(du.codes, copies);
            const Rotation<std::uint16_t> sg(dw.scales, copies), su(du.scales, copies);
            // The tiled copies (dummies of a few bytes on the other paths).
            const Rotation<std::uint8_t> tcg(tiled.codes, copies), tcu(upTiled.codes, copies);
            const Rotation<std::uint32_t> tsg(tiled.scales, copies), tsu(upTiled.scales, copies);
            auto timeGeglu = [&](bool cudaCores, bool singleHalf, bool fp16 = false, bool sameCopy = false, bool programmatic = false) {
                return medianMicros(
                    [&](int i) {
                        Fp4MatvecParams t = g;
                        t.programmaticLaunch = programmatic;
                        const int c = sameCopy ? 0 : i % copies;
                        t.codes = t.tiled ? tcg.at(c) : cg.at(c);
                        t.upCodes = t.tiled ? tcu.at(c) : cu.at(c);
                        t.scales = t.tiled ? reinterpret_cast<const std::uint16_t*>(tsg.at(c)) : sg.at(c);
                        t.upScales = t.tiled ? reinterpret_cast<const std::uint16_t*>(tsu.at(c)) : su.at(c);
                        t.forceCudaCores = cudaCores;
                        t.singleHalfX = singleHalf;
                        t.fp16X = fp16;
                        gemma::cuda::launchFp4GegluMatvec(t, nullptr);
                    },
                    10, 50);
            };
            if (path == Path::Tiled) {  // the tiled layout against the row layout
                const double tiledUs = timeGeglu(false, false);
                const std::size_t codeBytes = w.codes.size(), scaleBytes = w.scales.size() * 2;
                const TimingContext context{
                    timeGeglu(false, false, false, true), timeGeglu(false, false, false, false, true), readAloneMicros(bytes),
                    prefetchedMicros(
                        copies,
                        [&](int c) {
                            Fp4MatvecParams t = g;
                            t.codes = tcg.at(c);
                            t.upCodes = tcu.at(c);
                            t.scales = reinterpret_cast<const std::uint16_t*>(tsg.at(c));
                            t.upScales = reinterpret_cast<const std::uint16_t*>(tsu.at(c));
                            gemma::cuda::launchFp4GegluMatvec(t, nullptr);
                        },
                        [&](int c) {
                            return std::vector<std::pair<const void*, std::size_t>>{
                                {tcg.at(c), codeBytes}, {tcu.at(c), codeBytes}, {tsg.at(c), scaleBytes}, {tsu.at(c), scaleBytes}};
                        })};
                g.tiled = false;  // the timing loop sets the row-layout copies' pointers
                const double registers = timeGeglu(false, false);
                g.tiled = true;
                char line[256];
                std::snprintf(line, sizeof line, "%-28s %6lld x %-6lld geglu  tiled %8.2f us %8.1f GB/s | row layout %8.1f GB/s",
                              s.name.c_str(), static_cast<long long>(s.out), static_cast<long long>(s.in), tiledUs, bytes / tiledUs * 1e-3,
                              bytes / registers * 1e-3);
                perfLines.push_back(line + contextColumns(context, bytes));
#ifdef GEMMA_PHASE_CLOCK
                // Where the tiled GeGLU launch's time goes (Fp4Matvec.cu's marks 1-6), over the
                // timed launches on rotating weight copies (from DRAM): alone, then
                // programmatically, each launch after the previous one (as in the decode step).
                appendMatvecPhases(perfLines, [&](bool programmatic) { timeGeglu(false, false, false, false, programmatic); });
#endif
            } else {
                const double us = timeGeglu(false, false);
                const double half1 = timeGeglu(false, true), cores = timeGeglu(true, false);
                const double fp16 = timeGeglu(false, false, true);
                char line[400];
                std::snprintf(line, sizeof line,
                              "%-28s %6lld x %-6lld geglu  %9.2f us  %8.1f GB/s | fp16-x %6.1f | one-fp16-x %6.1f | cuda-cores %6.1f GB/s",
                              s.name.c_str(), static_cast<long long>(s.out), static_cast<long long>(s.in),
                              us, bytes / us * 1e-3, bytes / fp16 * 1e-3, bytes / half1 * 1e-3, bytes / cores * 1e-3);
                perfLines.push_back(line);
            }
        }
    }

    if (timing && rows == 1) {
        const double bytes = static_cast<double>(w.codes.size() + 2 * w.scales.size());
        const int copies = copiesPastL2(bytes);
        const Rotation<std::uint8_t> cc(dw.codes, copies), tcc(tiled.codes, copies);
        const Rotation<std::uint16_t> ss(dw.scales, copies);
        const Rotation<std::uint32_t> tss(tiled.scales, copies);
        // cudaCores: the fp32 kernel with rowsPerWarp (0 = its own choice) / global x.
        auto timeVariant = [&](bool cudaCores, int rowsPerWarp, bool globalX, bool singleHalf, bool twoGroups = false,
                               bool fp16 = false, bool sameCopy = false, bool programmatic = false) {
            return medianMicros(
                [&](int i) {
                    Fp4MatvecParams t = p;
                    t.programmaticLaunch = programmatic;
                    const int c = sameCopy ? 0 : i % copies;
                    t.codes = t.tiled ? tcc.at(c) : cc.at(c);
                    t.scales = t.tiled ? reinterpret_cast<const std::uint16_t*>(tss.at(c)) : ss.at(c);
                    t.forceCudaCores = cudaCores;
                    t.singleHalfX = singleHalf;
                    t.rowsPerWarp = rowsPerWarp;
                    t.forceGlobalX = globalX;
                    t.twoGroupItems = twoGroups;
                    t.fp16X = fp16;
                    gemma::cuda::launchFp4Matvec(t, nullptr);
                },
                10, 30);
        };
        if (path == Path::Tiled) {  // p has the tiled layout: against the row layout
            const double tiledUs = timeVariant(false, 0, false, false);
            const std::size_t codeBytes = w.codes.size(), scaleBytes = w.scales.size() * 2;
            const TimingContext context{
                timeVariant(false, 0, false, false, false, false, true), timeVariant(false, 0, false, false, false, false, false, true),
                readAloneMicros(bytes),
                prefetchedMicros(
                    copies,
                    [&](int c) {
                        Fp4MatvecParams t = p;
                        t.codes = tcc.at(c);
                        t.scales = reinterpret_cast<const std::uint16_t*>(tss.at(c));
                        gemma::cuda::launchFp4Matvec(t, nullptr);
                    },
                    [&](int c) { return std::vector<std::pair<const void*, std::size_t>>{{tcc.at(c), codeBytes}, {tss.at(c), scaleBytes}}; })};
            p.tiled = false;
            const double registers = timeVariant(false, 0, false, false);
            char line[256];
            std::snprintf(line, sizeof line, "%-28s %6lld x %-6lld matvec tiled %8.2f us %8.1f GB/s | row layout %8.1f GB/s",
                          s.name.c_str(), static_cast<long long>(s.out), static_cast<long long>(s.in), tiledUs, bytes / tiledUs * 1e-3,
                          bytes / registers * 1e-3);
            perfLines.push_back(line + contextColumns(context, bytes));
            p.tiled = true;  // the row layout was timed last
#ifdef GEMMA_PHASE_CLOCK
            // Where the tiled launch's time goes (Fp4Matvec.cu's marks 1-6), over the timed
            // launches on rotating weight copies (from DRAM): alone, then programmatically, each
            // launch after the previous one (as in the decode step: the next launch's blocks issue
            // their weights and wait while the last blocks of the previous one finish).
            appendMatvecPhases(perfLines, [&](bool programmatic) { timeVariant(false, 0, false, false, false, false, false, programmatic); });
#endif
            return;
        }
        const double us = timeVariant(false, 0, false, false);
        const double half1 = timeVariant(false, 0, false, true);
        const double c0 = timeVariant(true, 0, false, false);
        const double two = timeVariant(false, 0, false, false, true);
        const double fp16 = timeVariant(false, 0, false, false, false, true);
        char line[400];
        std::snprintf(line, sizeof line,
                      "%-28s %6lld x %-6lld matvec %8.2f us %7.1f GB/s | fp16-x %6.1f | two-group %6.1f | one-fp16-x %6.1f | "
                      "cuda-cores %6.1f GB/s",
                      s.name.c_str(), static_cast<long long>(s.out), static_cast<long long>(s.in), us,
                      bytes / us * 1e-3, bytes / fp16 * 1e-3, bytes / two * 1e-3, bytes / half1 * 1e-3, bytes / c0 * 1e-3);
        perfLines.push_back(line);
    }
}


// q, k and v of a layer in one launch (Fp4MatvecParams::extra): three weights, one x, three
// outputs, each checked against its own FP64 reference; the tiles of segment boundaries that are
// not multiples of 16 rows check the segment lookup.
void runFused(const std::string& name, std::int64_t in, const std::int64_t (&outs)[3], int rows,
              std::mt19937_64& rng, Report& report, bool twoGroups = false, bool fp16 = false, bool tiled = false) {
    std::vector<Fp4Matrix> ws;
    std::vector<DeviceFp4> dws;
    std::vector<TiledFp4> tws;
    for (std::int64_t o : outs) {
        ws.push_back(randomFp4(o, in, rng));
        dws.push_back(upload(ws.back()));
        if (tiled) tws.push_back(tileWeight(ws.back(), dws.back(), report));
    }
    const std::int64_t xStride = (in + 31) / 32 * 32 + 4;
    std::vector<float> x(static_cast<std::size_t>(rows * xStride), std::nanf(""));
    for (int r = 0; r < rows; ++r)
        for (std::int64_t i = 0; i < in; ++i) x[r * xStride + i] = std::uniform_real_distribution<float>(-2.f, 2.f)(rng);
    DeviceBuffer<float> dx(x.size());
    dx.upload(x);
    const std::int64_t yStride = std::max({outs[0], outs[1], outs[2]}) + 5;
    std::vector<DeviceBuffer<float>> dys;
    for (int k = 0; k < 3; ++k) dys.emplace_back(static_cast<std::size_t>(rows * yStride));
    Fp4MatvecParams p;
    p.codes = dws[0].codes.ptr;
    p.scales = dws[0].scales.ptr;
    p.out = outs[0];
    p.in = in;
    p.x = dx.ptr;
    p.xStride = xStride;
    p.y = dys[0].ptr;
    p.yStride = yStride;
    p.rows = rows;
    p.extraCount = 2;
    p.twoGroupItems = twoGroups;
    p.fp16X = fp16;
    for (int k = 1; k < 3; ++k) p.extra[k - 1] = {dws[k].codes.ptr, dws[k].scales.ptr, outs[k], dys[k].ptr};
    if (tiled) {
        p.tiled = true;
        p.codes = tws[0].codes.ptr;
        p.scales = tws[0].scaleBits();
        for (int k = 1; k < 3; ++k) {
            p.extra[k - 1].codes = tws[k].codes.ptr;
            p.extra[k - 1].scales = tws[k].scaleBits();
        }
    }
    for (auto& d : dys) d.poison();
    HCHECK_STATUS(gemma::cuda::launchFp4Matvec(p, nullptr));
    HCHECK(cudaDeviceSynchronize());
    for (int k = 0; k < 3; ++k) {
        const std::vector<float> y = dys[k].download();
        const std::vector<float> deq = ws[k].dequantize();
        std::vector<float> got;
        std::vector<double> ref;
        bool gapsIntact = true;
        for (int r = 0; r < rows; ++r) {
            for (std::int64_t o = 0; o < outs[k]; ++o) {
                got.push_back(y[r * yStride + o]);
                ref.push_back(referenceDot(deq, in, o, x.data() + r * xStride));
            }
            for (std::int64_t o = outs[k]; o < yStride; ++o) gapsIntact &= std::isnan(y[r * yStride + o]);
        }
        const std::string tag = "fused " + name + " segment " + std::to_string(k) + (rows > 1 ? " b" + std::to_string(rows) : "") +
                                (twoGroups ? " two-group items" : "") + (fp16 ? " fp16-x" : "") + (tiled ? " tiled" : "");
        report.add(tag, compare(got.data(), ref.data(), got.size()), 1e-4, 1e-4, gapsIntact ? "" : "(wrote past out!)");
        if (!gapsIntact) report.addCheck(tag + " no stray writes", false, "");
    }
}


// One input vector, contiguous x and y.
Fp4MatvecParams oneVector(const DeviceFp4& w, std::int64_t out, std::int64_t in, const float* x, float* y) {
    Fp4MatvecParams p;
    p.codes = w.codes.ptr;
    p.scales = w.scales.ptr;
    p.out = out;
    p.in = in;
    p.x = x;
    p.xStride = in;
    p.y = y;
    p.yStride = out;
    return p;
}

// x as integers (the tensor-core default) scales x by a power of two from max|x|: an outlier
// 4000 times the rest must not cost the small entries their precision beyond the bound, x = 0
// must give exact zeros, and a NaN or an infinity in x must give NaN (the fp16 paths propagate
// them too), never a finite number.
void runIntegerEdgeCases(std::mt19937_64& rng, Report& report) {
    constexpr std::int64_t kOut = 512, kIn = 3840;
    const Fp4Matrix w = randomFp4(kOut, kIn, rng);
    const std::vector<float> deq = w.dequantize();
    DeviceFp4 dw = upload(w);
    DeviceBuffer<float> dx(kIn), dy(kOut);
    auto run = [&](const std::vector<float>& x, bool geglu) {
        dx.upload(x);
        dy.poison();
        Fp4MatvecParams p = oneVector(dw, kOut, kIn, dx.ptr, dy.ptr);
        if (geglu) {
            p.upCodes = dw.codes.ptr;
            p.upScales = dw.scales.ptr;
            HCHECK_STATUS(gemma::cuda::launchFp4GegluMatvec(p, nullptr));
        } else {
            HCHECK_STATUS(gemma::cuda::launchFp4Matvec(p, nullptr));
        }
        HCHECK(cudaDeviceSynchronize());
        return dy.download();
    };
    std::vector<float> x(kIn);
    for (auto& v : x) v = std::uniform_real_distribution<float>(-1e-2f, 1e-2f)(rng);
    x[7] = 40.0f;
    x[kIn - 1] = -35.0f;
    {
        // Integer x holds every entry to 2^-22 of its 128-group's largest magnitude (one shared
        // exponent per group: Fp4Decode.h), so next to the outlier the small entries keep ~11 of
        // their bits. The bound adds that rounding, Σ_i |w_i|·2^-22·max_G(i)|x|, to the
        // 1e-5·Σ|w·x| of the other checks. (A row whose weight at the outlier is zero does
        // not see the outlier in Σ|w·x|; 31-bit x kept such rows inside 1e-5·Σ|w·x| alone.)
        const std::vector<float> y = run(x, false);
        std::vector<double> groupMax(static_cast<std::size_t>((kIn + 127) / 128), 0.0);
        for (std::int64_t i = 0; i < kIn; ++i) groupMax[i / 128] = std::max(groupMax[i / 128], std::fabs(static_cast<double>(x[i])));
        constexpr double kTol = 1e-5;
        std::vector<double> ref, scale;
        for (std::int64_t o = 0; o < kOut; ++o) {
            const DotTerms t = referenceTerms(deq, kIn, o, x.data());
            double rounding = 0;
            for (std::int64_t i = 0; i < kIn; ++i) rounding += std::fabs(static_cast<double>(deq[o * kIn + i])) * groupMax[i / 128];
            ref.push_back(t.dot);
            scale.push_back(t.absDot + std::ldexp(rounding, -22) / kTol);
        }
        addBoundCheck(report, "integer-x outlier 4000x (x to 2^-22 of its group's max)", y, ref, scale, kTol);
    }
    std::fill(x.begin(), x.end(), 0.0f);
    {
        const std::vector<float> y = run(x, false), yg = run(x, true);
        bool zero = true;
        for (std::int64_t o = 0; o < kOut; ++o) zero &= y[o] == 0.0f && yg[o] == 0.0f;
        report.addCheck("integer-x x = 0 gives exact zeros (matvec, geglu)", zero, "");
    }
    for (const float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
        for (auto& v : x) v = std::uniform_real_distribution<float>(-1.f, 1.f)(rng);
        x[1234] = bad;
        const std::vector<float> y = run(x, false);
        bool allNan = true;
        for (std::int64_t o = 0; o < kOut; ++o) allNan &= std::isnan(y[o]);
        report.addCheck(std::string("integer-x with ") + (std::isnan(bad) ? "NaN" : "inf") + " in x gives NaN", allNan, "");
    }
}

// Programmatic dependent launch (sm_90+; an ordinary launch elsewhere): RMSNorm writes x, a matvec
// launched programmatically reads it, a second one reads the first's output. Every buffer is
// poisoned with NaN before each round, so reading x or y1 early gives NaN or stale values. The
// references use the GPU's own x and y1 (downloaded after the round), so only the ordering is
// under test, 20 rounds.
void runProgrammaticChain(std::mt19937_64& rng, Report& report) {
    constexpr std::int64_t kIn = 3840, kMid = 2048, kOut = 512;
    const Fp4Matrix w1 = randomFp4(kMid, kIn, rng), w2 = randomFp4(kOut, kMid, rng);
    DeviceFp4 d1 = upload(w1), d2 = upload(w2);
    std::vector<float> input(static_cast<std::size_t>(kIn));
    for (auto& v : input) v = std::uniform_real_distribution<float>(-3.f, 3.f)(rng);
    DeviceBuffer<float> residual(kIn), x(kIn), y1(kMid), y2(kOut);
    const std::vector<float> deq1 = w1.dequantize(), deq2 = w2.dequantize();
    double worst = 0;
    bool finite = true;
    for (int round = 0; round < 20; ++round) {
        residual.upload(input);
        x.poison();
        y1.poison();
        y2.poison();
        gemma::cuda::RmsNormParams norm;
        norm.residual = residual.ptr;
        norm.out = x.ptr;
        norm.n = kIn;
        norm.stride = kIn;
        HCHECK_STATUS(gemma::cuda::launchRmsNormResidual(norm, nullptr));
        Fp4MatvecParams a = oneVector(d1, kMid, kIn, x.ptr, y1.ptr);
        a.programmaticLaunch = true;
        HCHECK_STATUS(gemma::cuda::launchFp4Matvec(a, nullptr));
        Fp4MatvecParams b = a;
        b.codes = d2.codes.ptr;
        b.scales = d2.scales.ptr;
        b.out = kOut;
        b.in = kMid;
        b.x = y1.ptr;
        b.xStride = kMid;
        b.y = y2.ptr;
        b.yStride = kOut;
        HCHECK_STATUS(gemma::cuda::launchFp4Matvec(b, nullptr));
        HCHECK(cudaDeviceSynchronize());
        const auto hx = x.download(), h1 = y1.download(), h2 = y2.download();
        std::vector<float> got;
        std::vector<double> ref;
        for (std::int64_t o = 0; o < kMid; ++o) {
            got.push_back(h1[o]);
            ref.push_back(referenceDot(deq1, kIn, o, hx.data()));
        }
        for (std::int64_t o = 0; o < kOut; ++o) {
            got.push_back(h2[o]);
            ref.push_back(referenceDot(deq2, kMid, o, h1.data()));
        }
        const Compare c = compare(got.data(), ref.data(), got.size());
        finite &= c.nonFinite == 0;
        worst = std::max(worst, c.relErr);
    }
    char note[96];
    std::snprintf(note, sizeof note, "20 rounds, worst rel %.2e", worst);
    report.addCheck("programmatic launch chain norm -> matvec -> matvec", finite && worst <= 1e-4, note);
}

// The input norm folded into the matvec (Fp4MatvecParams::inputNorm): x computed in every block
// from residualIn, branch and the two norm weights, the new residual written by block 0. FP64
// reference of the whole chain (r, x = rmsNorm(r), y = W·x); x itself is passed as null (the kernel
// must not read it); y and residualOut poisoned with NaN; residualIn and branch must stay intact.
// Shapes: the 12b q/k/v launch (in 3840), the 12b GeGLU in the tiled layout, the widest allowed
// (4096: every thread a piece), e2b's width, odd widths (200, 36: groups past `in`).
// Variants: without a branch (the first layer's plain norm), unweighted, layer scalar != 1, no
// residual write; the per-layer-input gate's form (InputNorm::normalizeOutput false: x = r, and
// the geluGate epilogue y = gelu(W·x) ⊙ gate, gate random and poisoned past `out`). Plus a programmatic chain (the branch produced by the previous matvec) and the
// launcher's refusals.
struct NormCase {
    std::string name;
    std::int64_t in;
    std::int64_t outs[3];
    int segments;
    bool geglu, tiled, branch, weights, writeResidual;
    float layerScalar;
    bool residualOnly = false;  // InputNorm::normalizeOutput false
    bool geluGate = false;      // Fp4MatvecParams::geluGate
};

// FP64 reference of the input norm (RmsNorm.h's function): r = (residual + rmsNorm(branch;
// branchWeight))·scalar (no branch: residual·scalar), x = rmsNorm(r; outWeight); null = absent
// or unweighted.
struct NormChain {
    std::vector<double> r, x;
};
NormChain referenceInputNorm(const std::vector<float>& residual, const float* branch, const float* branchWeight, double scalar,
                             const float* outWeight, bool normalizeOutput = true) {
    const std::size_t n = residual.size();
    NormChain c{std::vector<double>(n), std::vector<double>(n)};
    double ss = 0, ss2 = 0;
    for (std::size_t i = 0; branch && i < n; ++i) ss += static_cast<double>(branch[i]) * branch[i];
    const double inv1 = 1.0 / std::sqrt(ss / static_cast<double>(n) + 1e-6);
    for (std::size_t i = 0; i < n; ++i) {
        double v = residual[i];
        if (branch) v += branch[i] * inv1 * (branchWeight ? branchWeight[i] : 1.0);
        c.r[i] = v * scalar;
        ss2 += c.r[i] * c.r[i];
    }
    const double inv2 = 1.0 / std::sqrt(ss2 / static_cast<double>(n) + 1e-6);
    for (std::size_t i = 0; i < n; ++i) c.x[i] = normalizeOutput ? c.r[i] * inv2 * (outWeight ? outWeight[i] : 1.0) : c.r[i];
    return c;
}

// Σ_i W[o][i]·x[i] in FP64 over a dequantized weight.
double referenceDotD(const std::vector<float>& deq, std::int64_t in, std::int64_t o, const std::vector<double>& x) {
    double acc = 0;
    for (std::int64_t i = 0; i < in; ++i) acc += static_cast<double>(deq[o * in + i]) * x[static_cast<std::size_t>(i)];
    return acc;
}

void runInputNorm(std::mt19937_64& rng, Report& report) {
    const std::vector<NormCase> cases = {
        {"12b q/k/v", 3840, {4096, 2048, 2048}, 3, false, false, true, true, true, 1.0f},
        {"12b gate/up tiled", 3840, {15360, 0, 0}, 1, true, true, true, true, true, 0.75f},
        {"12b first layer (no branch)", 3840, {4096, 2048, 2048}, 3, false, true, false, true, false, 1.0f},
        {"4096 wide", 4096, {512, 0, 0}, 1, false, false, true, true, true, 1.5f},
        {"e2b gate/up", 1536, {1000, 0, 0}, 1, true, false, true, false, true, 1.0f},
        {"odd 200 unweighted", 200, {77, 0, 0}, 1, false, false, true, false, true, 1.0f},
        {"odd 36 scalar only", 36, {33, 0, 0}, 1, true, false, false, false, true, 0.5f},
        {"e2b per-layer-input gate", 1536, {256, 0, 0}, 1, false, true, true, true, true, 1.0f, true, true},
        {"e4b per-layer-input gate rows", 2560, {256, 0, 0}, 1, false, false, true, true, true, 1.0f, true, true},
        {"odd 200 residual only", 200, {77, 0, 0}, 1, false, false, true, false, true, 0.5f, true, false},
        {"odd 36 gelu gate", 36, {33, 0, 0}, 1, false, false, true, true, false, 1.0f, false, true},
    };
    for (const NormCase& k : cases) {
        const std::int64_t in = k.in;
        auto vec = [&](float lo, float hi) { return randomFloats(static_cast<std::size_t>(in), rng, lo, hi); };
        const std::vector<float> residual = vec(-4.f, 4.f), branch = vec(-30.f, 30.f), bw = vec(0.2f, 2.f), ow = vec(0.2f, 2.f);
        DeviceBuffer<float> dResidual(in), dBranch(in), dBw(in), dOw(in), dResidualOut(in);
        dResidual.upload(residual);
        dBranch.upload(branch);
        dBw.upload(bw);
        dOw.upload(ow);
        dResidualOut.poison();
        const NormChain chain = referenceInputNorm(residual, k.branch ? branch.data() : nullptr, k.weights ? bw.data() : nullptr,
                                                   k.layerScalar, k.weights ? ow.data() : nullptr, !k.residualOnly);
        // The gate vector: `out` values, then NaN past `out` (must not be read).
        std::vector<float> gate = randomFloats(static_cast<std::size_t>(k.outs[0]), rng, -3.f, 3.f);
        DeviceBuffer<float> dGate(static_cast<std::size_t>(k.outs[0]) + 16);
        dGate.poison();
        dGate.upload(gate);

        const int weights = k.geglu ? 2 : k.segments;
        std::vector<Fp4Matrix> ws;
        std::vector<DeviceFp4> dws;
        std::vector<TiledFp4> tws;
        for (int s = 0; s < weights; ++s) {
            ws.push_back(randomFp4(k.geglu ? k.outs[0] : k.outs[s], in, rng));
            dws.push_back(upload(ws.back()));
            if (k.tiled) tws.push_back(tileWeight(ws.back(), dws.back(), report));
        }
        auto codes = [&](int s) { return k.tiled ? tws[s].codes.ptr : dws[s].codes.ptr; };
        auto scales = [&](int s) { return k.tiled ? tws[s].scaleBits() : dws[s].scales.ptr; };
        std::vector<DeviceBuffer<float>> dys;
        for (int s = 0; s < k.segments; ++s) dys.emplace_back(static_cast<std::size_t>(k.outs[s]));
        Fp4MatvecParams p = oneVector(dws[0], k.outs[0], in, nullptr, dys[0].ptr);
        p.codes = codes(0);
        p.scales = scales(0);
        p.tiled = k.tiled;
        if (k.geglu) {
            p.upCodes = codes(1);
            p.upScales = scales(1);
        }
        for (int s = 1; s < k.segments; ++s) p.extra[s - 1] = {codes(s), scales(s), k.outs[s], dys[s].ptr};
        p.extraCount = k.segments - 1;
        p.inputNorm.residualIn = dResidual.ptr;
        p.inputNorm.branch = k.branch ? dBranch.ptr : nullptr;
        p.inputNorm.branchWeight = k.weights ? dBw.ptr : nullptr;
        p.inputNorm.outWeight = k.weights ? dOw.ptr : nullptr;
        p.inputNorm.layerScalar = k.layerScalar;
        p.inputNorm.residualOut = k.writeResidual ? dResidualOut.ptr : nullptr;
        p.inputNorm.normalizeOutput = !k.residualOnly;
        if (k.geluGate) p.geluGate = dGate.ptr;
        for (auto& d : dys) d.poison();
        HCHECK_STATUS(k.geglu ? gemma::cuda::launchFp4GegluMatvec(p, nullptr) : gemma::cuda::launchFp4Matvec(p, nullptr));
        HCHECK(cudaDeviceSynchronize());
        const std::string tag = "input norm " + k.name;
        for (int s = 0; s < k.segments; ++s) {
            const std::vector<float> y = dys[s].download();
            const std::vector<float> deq = ws[s].dequantize(), deqUp = k.geglu ? ws[1].dequantize() : std::vector<float>{};
            std::vector<float> got;
            std::vector<double> ref;
            for (std::int64_t o = 0; o < k.outs[s]; ++o) {
                const double dot = referenceDotD(deq, in, o, chain.x);
                got.push_back(y[o]);
                ref.push_back(k.geglu      ? geluTanhRef(dot) * referenceDotD(deqUp, in, o, chain.x)
                              : k.geluGate ? geluTanhRef(dot) * gate[static_cast<std::size_t>(o)]
                                           : dot);
            }
            report.add(tag + " y segment " + std::to_string(s), compare(got.data(), ref.data(), got.size()), 1e-4, 1e-4);
        }
        const std::vector<float> rOut = dResidualOut.download();
        if (k.writeResidual) {
            report.add(tag + " residual out", compare(rOut.data(), chain.r.data(), chain.r.size()), 1e-6, 1e-6);
        } else {
            bool untouched = true;
            for (float v : rOut) untouched &= std::isnan(v);
            report.addCheck(tag + " residual out not written", untouched, "");
        }
        report.addCheck(tag + " residual in and branch intact", dResidual.download() == residual && dBranch.download() == branch, "");
    }

    // Programmatic chain: a matvec writes the branch, the normed matvec launched programmatically
    // reads it (branch and y poisoned each round; the reference uses the GPU's own branch).
    {
        constexpr std::int64_t kIn = 3840, kMid = 3840, kOut = 2048;
        const Fp4Matrix w1 = randomFp4(kMid, kIn, rng), w2 = randomFp4(kOut, kMid, rng);
        DeviceFp4 d1 = upload(w1), d2 = upload(w2);
        const std::vector<float> x0 = randomFloats(kIn, rng, -2.f, 2.f), residual = randomFloats(kMid, rng, -4.f, 4.f);
        DeviceBuffer<float> dx(kIn), branch(kMid), dResidual(kMid), dResidualOut(kMid), y(kOut);
        dx.upload(x0);
        dResidual.upload(residual);
        const std::vector<float> deq2 = w2.dequantize();
        double worst = 0;
        bool finite = true;
        for (int round = 0; round < 20; ++round) {
            branch.poison();
            y.poison();
            dResidualOut.poison();
            Fp4MatvecParams a = oneVector(d1, kMid, kIn, dx.ptr, branch.ptr);
            a.programmaticLaunch = true;
            HCHECK_STATUS(gemma::cuda::launchFp4Matvec(a, nullptr));
            Fp4MatvecParams b = oneVector(d2, kOut, kMid, nullptr, y.ptr);
            b.programmaticLaunch = true;
            b.inputNorm.residualIn = dResidual.ptr;
            b.inputNorm.branch = branch.ptr;
            b.inputNorm.residualOut = dResidualOut.ptr;
            HCHECK_STATUS(gemma::cuda::launchFp4Matvec(b, nullptr));
            HCHECK(cudaDeviceSynchronize());
            const std::vector<float> hb = branch.download(), hy = y.download();
            const NormChain chain = referenceInputNorm(residual, hb.data(), nullptr, 1.0, nullptr);
            std::vector<double> ref;
            for (std::int64_t o = 0; o < kOut; ++o) ref.push_back(referenceDotD(deq2, kMid, o, chain.x));
            const Compare c = compare(hy.data(), ref.data(), ref.size());
            finite &= c.nonFinite == 0;
            worst = std::max(worst, c.relErr);
        }
        char note[96];
        std::snprintf(note, sizeof note, "20 rounds, worst rel %.2e", worst);
        report.addCheck("programmatic chain matvec -> normed matvec", finite && worst <= 1e-4, note);
    }

    // Refusals: the fused norm exists for batch 1 on the integer tensor-core path only.
    {
        DeviceFp4 w = upload(randomFp4(16, 256, rng));
        DeviceBuffer<float> a(8200), b(8200), y(16);
        auto status = [&](auto&& edit) {
            Fp4MatvecParams p = oneVector(w, 16, 256, nullptr, y.ptr);
            p.inputNorm.residualIn = a.ptr;
            p.inputNorm.residualOut = b.ptr;
            edit(p);
            return gemma::cuda::launchFp4Matvec(p, nullptr);
        };
        using gemma::cuda::KernelStatus;
        const bool refused =
            status([](Fp4MatvecParams& p) { p.rows = 2; }) == KernelStatus::InvalidArgument &&
            status([](Fp4MatvecParams& p) { p.fp16X = true; }) == KernelStatus::InvalidArgument &&
            status([](Fp4MatvecParams& p) { p.forceCudaCores = true; }) == KernelStatus::InvalidArgument &&
            status([](Fp4MatvecParams& p) { p.inputNorm.residualOut = const_cast<float*>(p.inputNorm.residualIn); }) ==
                KernelStatus::InvalidArgument &&
            status([](Fp4MatvecParams& p) { p.in = 254; }) == KernelStatus::InvalidArgument &&
            status([](Fp4MatvecParams& p) { p.in = 4100; }) == KernelStatus::InvalidArgument &&
            status([](Fp4MatvecParams& p) { p.inputNorm.branch = p.inputNorm.residualIn + 1; }) == KernelStatus::InvalidArgument;
        report.addCheck("launcher refuses the input norm off its path (batch, fp16 x, CUDA cores, aliasing, in % 4, in > 4096, alignment)",
                        refused, "");
        // The gelu gate: one weight's rows on the tensor-core path only.
        auto gated = [&](auto&& edit) {
            Fp4MatvecParams p = oneVector(w, 16, 256, a.ptr, y.ptr);
            p.geluGate = b.ptr;
            edit(p);
            return gemma::cuda::launchFp4Matvec(p, nullptr);
        };
        Fp4MatvecParams g = oneVector(w, 16, 256, a.ptr, y.ptr);
        g.geluGate = b.ptr;
        g.upCodes = w.codes.ptr;
        g.upScales = w.scales.ptr;
        const bool gateRefused =
            gated([](Fp4MatvecParams& p) { p.rows = 2; }) == KernelStatus::InvalidArgument &&
            gated([](Fp4MatvecParams& p) { p.forceCudaCores = true; }) == KernelStatus::InvalidArgument &&
            gated([&](Fp4MatvecParams& p) {
                p.extra[0] = {w.codes.ptr, w.scales.ptr, 16, b.ptr};
                p.extraCount = 1;
            }) == KernelStatus::InvalidArgument &&
            gemma::cuda::launchFp4GegluMatvec(g, nullptr) == KernelStatus::InvalidArgument;
        report.addCheck("launcher refuses the gelu gate off its path (batch, CUDA cores, extras, GeGLU)", gateRefused, "");
        HCHECK(cudaDeviceSynchronize());
    }
}

}  // namespace

int main() {
    requireDevice("test_fp4_matvec");
    std::mt19937_64 rng(seedFromEnv());
    const bool quick = quickMode();
    Report report("fp4_matvec");

    // First launch of the process: x of exactly 48 KB (12288 inputs as fp16 hi + lo) plus the
    // kernel's static shared memory needs the raised limit before any larger shape raised it.
    {
        std::vector<std::string> none;
        runShape({"e2b.down_wide first", 1536, 12288, false}, 1, rng, report, nullptr, false, none);
    }
    // Launcher argument checks: a misaligned x and a bad stride are refused, not launched.
    {
        Fp4MatvecParams bad;
        report.addCheck("launcher refuses null pointers",
                        gemma::cuda::launchFp4Matvec(bad, nullptr) == gemma::cuda::KernelStatus::InvalidArgument, "");
    }

    // GEMMA_SHAPES=<substring>: only the preset shapes whose name contains it, timed (profiling).
    if (const char* only = std::getenv("GEMMA_SHAPES")) {
        std::vector<std::string> perfOnly;
        for (const auto& s : presetShapes())
            if (s.name.find(only) != std::string::npos) {
                runShape(s, 1, rng, report, nullptr, true, perfOnly);
                runShape(s, 1, rng, report, nullptr, true, perfOnly, false, Path::Tiled);
            }
        for (const auto& line : perfOnly) std::printf("%s\n", line.c_str());
        return report.finish();
    }
    cublasLtHandle_t lt = nullptr;
    if (!quick) {
        if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
            std::fprintf(stderr, "cublasLtCreate failed\n");
            return 1;
        }
    }
    std::vector<std::string> perf;
    for (const auto& s : oddShapes()) {
        runShape(s, 1, rng, report, lt, false, perf);
        runShape(s, 1, rng, report, lt, false, perf, false, Path::CudaCores);
        runShape(s, 1, rng, report, lt, false, perf, false, Path::SingleHalf);
        runShape(s, 1, rng, report, lt, false, perf, false, Path::TwoGroups);
        runShape(s, 1, rng, report, lt, false, perf, false, Path::Fp16Split);
        runShape(s, 3, rng, report, lt, false, perf);
        runShape(s, 1, rng, report, lt, false, perf, /*forceGlobalX=*/true);
        runShape(s, 2, rng, report, lt, false, perf, /*forceGlobalX=*/true);
        runShape(s, 1, rng, report, lt, false, perf, false, Path::Tiled);
        runShape(s, 3, rng, report, lt, false, perf, false, Path::Tiled);
        runShape(s, 1, rng, report, lt, false, perf, false, Path::TiledCudaCores);
    }
    runFused("odd 40/24/8", 200, {40, 24, 8}, 1, rng, report, false, false, /*tiled=*/true);
    runFused("odd 40/24/8", 200, {40, 24, 8}, 1, rng, report, false, /*fp16=*/true, /*tiled=*/true);
    runFused("12b sliding q/k/v", 3840, {4096, 2048, 2048}, 1, rng, report, false, false, /*tiled=*/true);
    // The tiled layout's scale words must be 4-byte aligned: a 2-byte-aligned pointer is refused.
    {
        DeviceBuffer<std::uint8_t> codes(1024);
        DeviceBuffer<std::uint32_t> scales(16);
        DeviceBuffer<float> x(128), y(16);
        Fp4MatvecParams t = oneVector(DeviceFp4{DeviceBuffer<std::uint8_t>(16), DeviceBuffer<std::uint16_t>(8)}, 16, 128, x.ptr, y.ptr);
        t.codes = codes.ptr;
        t.scales = reinterpret_cast<const std::uint16_t*>(scales.ptr) + 1;
        t.tiled = true;
        report.addCheck("launcher refuses misaligned tiled scales",
                        gemma::cuda::launchFp4Matvec(t, nullptr) == gemma::cuda::KernelStatus::InvalidArgument, "");
    }
    runShape({"odd.1001x2112", 1001, 2112, true}, 5, rng, report, lt, false, perf);
    runFused("12b sliding q/k/v", 3840, {4096, 2048, 2048}, 1, rng, report);
    runProgrammaticChain(rng, report);
    runFused("odd 40/24/8", 200, {40, 24, 8}, 1, rng, report);
    runFused("odd 40/24/8", 200, {40, 24, 8}, 1, rng, report, /*twoGroups=*/true);
    runFused("12b sliding q/k/v", 3840, {4096, 2048, 2048}, 1, rng, report, /*twoGroups=*/true);
    runFused("odd 40/24/8", 200, {40, 24, 8}, 1, rng, report, false, /*fp16=*/true);
    runFused("12b sliding q/k/v", 3840, {4096, 2048, 2048}, 1, rng, report, false, /*fp16=*/true);
    runIntegerEdgeCases(rng, report);
    runInputNorm(rng, report);
    runFused("odd 40/24/8", 200, {40, 24, 8}, 2, rng, report);
    if (!quick) {
        runFused("12b full q/k", 3840, {8192, 512, 512}, 1, rng, report);
        for (const auto& s : presetShapes()) {
            runShape(s, 1, rng, report, lt, true, perf);
            runShape(s, 1, rng, report, lt, false, perf, false, Path::CudaCores);
            runShape(s, 1, rng, report, lt, false, perf, false, Path::TwoGroups);
            runShape(s, 1, rng, report, lt, false, perf, false, Path::Fp16Split);
            runShape(s, 1, rng, report, lt, true, perf, false, Path::Tiled);
        }
        runShape({"12b.q_sliding", 4096, 3840, true}, 3, rng, report, lt, false, perf);
        runShape({"31b.down", 5376, 21504, false}, 4, rng, report, lt, false, perf);
        runShape({"12b.down", 3840, 15360, true}, 1, rng, report, lt, false, perf, true);
    } else {
        runShape({"e2b.kv_sliding", 256, 1536, true}, 1, rng, report, lt, false, perf);
        runShape({"e2b.ple_proj", 1536, 256, false}, 2, rng, report, lt, false, perf);
        runShape({"e2b.kv_sliding", 256, 1536, true}, 1, rng, report, lt, false, perf, false, Path::Tiled);
    }
    if (lt) cublasLtDestroy(lt);
    if (!perf.empty()) {
        std::printf("\nFP4 matvec achieved bandwidth (information only; weights+scales bytes, "
                    "median of 50, weights rotated over > 3x L2):\n");
        for (const auto& l : perf) std::printf("  %s\n", l.c_str());
    }
    return report.finish();
}
