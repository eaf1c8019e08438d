// Harness: the building blocks of the GEMM prefill path.
// - Fp4Dequantize.cu: FP4-E2M1 group 128 → BF16, bit for bit against reference::dequantizeFp4ToBf16
//   on every FP4 linear shape of the 12b preset and odd sizes (in not a multiple of 128 or of 8,
//   out = 1, 3), wide-range scales (every exponent, both signs, subnormals, overflow to inf),
//   forced small grids (grid-stride loop), columns past `in` and row gaps poisoned (must stay so);
//   every case (BF16 and FP16) also from the tiled layout of the same weight (Fp4Tiled.h, by
//   reference::tileFp4; out not a multiple of 16 leaves zero padding rows), against the same reference
//   with every −0 code made +0 (the tiled layout stores every zero as +0);
// - ActivationConvert.cu: fp32 → bf16 hi (+ lo), bit for bit against reference::splitToBf16, and
//   |x − (hi + lo)| <= 2^-16·|x|; vector and element paths;
// - GegluElementwise.cu: against an FP64 gelu_tanh(gate)·up and reference::gegluGateUpRows; in place;
// - the GEMM itself: cuBLASLt BF16 × BF16 → fp32 (the engine's mapping, engine/src/CublasLt.cpp)
//   over the dequantized weights with hi and lo activations, two GEMMs (the second accumulating),
//   against an FP64 host product of the same bf16 weights with the fp32 activations;
// - information only (not QUICK): the dequantize of the 12b gate|up pair in GB/s (read + written).
#include "../../kernels/cuda/ActivationConvert.cu"
#include "../../kernels/cuda/Fp4Dequantize.cu"
#include "../../kernels/cuda/GegluElementwise.cu"
#include "../../kernels/reference/ReferenceOps.cpp"
#include "HarnessCommon.h"

#include <kernels/Fp4Tiled.h>

#include <iterator>

using namespace harness;
namespace kc = gemma::cuda;
namespace ref = gemma::reference;
namespace fmt = gemma::formats;

namespace {

constexpr std::uint16_t kPoison16 = 0xFFFFu;  // cudaMemset 0xFF: a bf16 NaN

std::int64_t roundUp(std::int64_t v, std::int64_t m) { return (v + m - 1) / m * m; }

std::string dims(std::int64_t a, std::int64_t b) { return std::to_string(a) + "x" + std::to_string(b); }

// Random finite bf16 bits over the whole range: both signs, every exponent 0..254 (0: subnormal or
// zero), so products overflow to inf, round in the subnormal range and hit every rounding case.
std::uint16_t randomFiniteBf16(std::mt19937_64& rng) {
    std::uniform_int_distribution<unsigned> sign(0, 1), exponent(0, 254), mantissa(0, 127);
    return static_cast<std::uint16_t>(sign(rng) << 15 | exponent(rng) << 7 | mantissa(rng));
}


// ---- dequantize ------------------------------------------------------------------------------------
// W in the tiled layout (kernels/include/kernels/Fp4Tiled.h) by reference::tileFp4: every byte
// written (the padding rows past `out` of the last tile are zero codes and zero scales), so the
// device copy is fully initialized (initcheck) although the kernel never reads those rows.
struct TiledFp4 {
    std::vector<std::uint8_t> codes;
    std::vector<std::uint32_t> scales;
};
TiledFp4 tileFp4(const Fp4Matrix& w) {
    TiledFp4 t;
    t.codes.resize(static_cast<std::size_t>(fmt::fp4tiled::codeBytes(w.out, w.in)));
    t.scales.resize(static_cast<std::size_t>(fmt::fp4tiled::scaleWords(w.out, w.in)));
    ref::tileFp4(w.codes.data(), w.scales.data(), w.out, w.in, t.codes.data(), t.scales.data());
    return t;
}

// "k of n differ" and, if any, the first mismatch ([row][column] of y, got and wanted bits).
std::string mismatchNote(const std::vector<std::uint16_t>& got, const std::vector<std::uint16_t>& want, std::int64_t ldOut,
                         std::size_t& mismatches) {
    std::size_t first = 0;
    mismatches = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
        if (got[i] != want[i] && mismatches++ == 0) first = i;
    std::string note = std::to_string(mismatches) + " of " + std::to_string(got.size()) + " differ";
    if (mismatches) {
        char buf[160];
        std::snprintf(buf, sizeof buf, " (first [%lld][%lld]: got 0x%04x want 0x%04x)",
                      static_cast<long long>(first / ldOut), static_cast<long long>(first % ldOut), got[first],
                      want[first]);
        note += buf;
    }
    return note;
}

// The codes with every −0 made +0: the tiled layout keeps no sign of a zero code (Fp4Tiled.h,
// toStoredCodes; the quantizer writes every zero as +0), so its expected bits come from these.
std::vector<std::uint8_t> positiveZeros(std::vector<std::uint8_t> codes) {
    for (auto& b : codes) {
        if ((b & 0x0Fu) == 0x08u) b &= 0xF0u;
        if ((b & 0xF0u) == 0x80u) b &= 0x0Fu;
    }
    return codes;
}

struct DequantCase {
    std::string name;
    std::int64_t out, in;
    std::int64_t ldOut = 0;  // 0: roundUp(in, 8) + 8 (a poisoned gap after every row)
    bool wideScales = false;
    int blocks = 0;  // 0: the launcher's grid
};

void runDequant(const DequantCase& c, std::mt19937_64& rng, Report& report) {
    Fp4Matrix w = randomFp4(c.out, c.in, rng);
    if (c.wideScales)
        for (auto& s : w.scales) s = randomFiniteBf16(rng);
    const std::int64_t ldOut = c.ldOut ? c.ldOut : roundUp(c.in, 8) + 8;
    DeviceFp4 dw = upload(w);
    DeviceBuffer<std::uint16_t> dy(static_cast<std::size_t>(c.out * ldOut));
    dy.poison();
    kc::Fp4DequantizeParams p;
    p.codes = dw.codes.ptr;
    p.scales = dw.scales.ptr;
    p.out = c.out;
    p.in = c.in;
    p.y = dy.ptr;
    p.ldOut = ldOut;
    p.blocks = c.blocks;
    HCHECK_STATUS(kc::launchFp4DequantizeBf16(p, nullptr));
    HCHECK(cudaDeviceSynchronize());
    const std::vector<std::uint16_t> got = dy.download();

    // The reference writes columns [0, in); the rest keeps the poison, as the device buffer must.
    std::vector<std::uint16_t> want(got.size(), kPoison16);
    ref::dequantizeFp4ToBf16(w.codes.data(), w.scales.data(), c.out, c.in, want.data(), ldOut);
    std::size_t mismatches = 0;
    const std::string note = mismatchNote(got, want, ldOut, mismatches);
    const std::string tag = c.name + " " + dims(c.out, c.in) + " ld " + std::to_string(ldOut) +
                            (c.wideScales ? " wide scales" : "") +
                            (c.blocks ? " blocks " + std::to_string(c.blocks) : "");
    report.addCheck("dequant bit-exact " + tag, mismatches == 0, note);

    // The same weight in the tiled layout: the same launch otherwise, so the same bits (the
    // reference and the poisoned columns included) are required, but for the sign of zero codes
    // (positiveZeros). Run again for FP16 below.
    const TiledFp4 tw = tileFp4(w);
    DeviceBuffer<std::uint8_t> dTiledCodes(tw.codes.size());
    DeviceBuffer<std::uint32_t> dTiledScales(tw.scales.size());
    dTiledCodes.upload(tw.codes);
    dTiledScales.upload(tw.scales);
    kc::Fp4DequantizeParams tiledParams = p;
    tiledParams.codes = dTiledCodes.ptr;
    tiledParams.scales = reinterpret_cast<const std::uint16_t*>(dTiledScales.ptr);  // cudaMalloc: aligned
    tiledParams.tiled = true;
    const auto runTiled = [&](bool fp16, float multiplier) {
        tiledParams.fp16 = fp16;
        tiledParams.multiplier = multiplier;
        dy.poison();
        HCHECK_STATUS(kc::launchFp4DequantizeBf16(tiledParams, nullptr));
        HCHECK(cudaDeviceSynchronize());
        return dy.download();
    };
    const std::vector<std::uint8_t> tiledCodes = positiveZeros(w.codes);
    std::vector<std::uint16_t> wantTiled(got.size(), kPoison16);
    ref::dequantizeFp4ToBf16(tiledCodes.data(), w.scales.data(), c.out, c.in, wantTiled.data(), ldOut);
    std::size_t tiledMismatches = 0;
    const std::string tiledNote = mismatchNote(runTiled(false, 1.0f), wantTiled, ldOut, tiledMismatches);
    report.addCheck("dequant tiled bit-exact " + tag, tiledMismatches == 0, tiledNote);

    // The reference's own semantics against exact arithmetic: bf16 round-to-nearest of the exact
    // product is within half a bf16 ulp, i.e. 2^-8 relative (normal range; ordinary scales only).
    if (!c.wideScales) {
        double worst = 0;
        for (std::int64_t o = 0; o < c.out; ++o)
            for (std::int64_t i = 0; i < c.in; ++i) {
                const double exact = w.weight(o, i);
                const double stored = fmt::bf16ToFloat(want[o * ldOut + i]);
                if (exact != 0) worst = std::max(worst, std::fabs(stored - exact) / std::fabs(exact));
                else if (stored != 0) worst = 1;
            }
        char buf[96];
        std::snprintf(buf, sizeof buf, "max rel %.3g vs exact product (bound 2^-8 = 3.91e-03)", worst);
        report.addCheck("  reference rounding " + tag, worst <= 1.0 / 256, buf);
    }

    // FP16 with the engine's power-of-two multiplier: bit for bit against the reference, and (for
    // ordinary scales) exactly the product: FP16's 11 bits hold E2M1 × bf16.
    std::uint16_t largest = 0;
    for (auto sc : w.scales)
        if ((sc & 0x7FFFu) < 0x7F80u) largest = std::max<std::uint16_t>(largest, sc & 0x7FFFu);
    const float multiplier = fmt::fp16WeightMultiplier(fmt::bf16ToFloat(largest));
    dy.poison();
    p.fp16 = true;
    p.multiplier = multiplier;
    HCHECK_STATUS(kc::launchFp4DequantizeBf16(p, nullptr));
    HCHECK(cudaDeviceSynchronize());
    const std::vector<std::uint16_t> got16 = dy.download();
    std::vector<std::uint16_t> want16(got16.size(), kPoison16);
    ref::dequantizeFp4ToFp16(w.codes.data(), w.scales.data(), c.out, c.in, want16.data(), ldOut, multiplier);
    std::size_t mismatches16 = 0, firstBad = got16.size();
    for (std::size_t i = 0; i < got16.size(); ++i)
        if (got16[i] != want16[i]) {
            ++mismatches16;
            firstBad = std::min(firstBad, i);
        }
    std::string detail = std::to_string(mismatches16) + " of " + std::to_string(got16.size()) + " differ";
    if (firstBad < got16.size()) {
        // The first mismatch in full, to explain it: element, codes nibble, bf16 scale, multiplier.
        const std::int64_t o = static_cast<std::int64_t>(firstBad) / ldOut, i = static_cast<std::int64_t>(firstBad) % ldOut;
        const unsigned nibble = i < c.in ? (w.codes[o * w.rowBytes + i / 2] >> (4 * (i % 2))) & 0xFu : 99u;
        char buf[200];
        std::snprintf(buf, sizeof buf, "; first at (%lld, %lld): gpu 0x%04x want 0x%04x nibble %u scale 0x%04x multiplier %a",
                      static_cast<long long>(o), static_cast<long long>(i), got16[firstBad], want16[firstBad], nibble,
                      i < c.in ? w.scales[o * w.groups + i / 128] : 0u, multiplier);
        detail += buf;
    }
    report.addCheck("dequant fp16 bit-exact " + tag, mismatches16 == 0, detail);
    std::vector<std::uint16_t> wantTiled16(got16.size(), kPoison16);
    ref::dequantizeFp4ToFp16(tiledCodes.data(), w.scales.data(), c.out, c.in, wantTiled16.data(), ldOut, multiplier);
    std::size_t tiledMismatches16 = 0;
    const std::string tiledNote16 = mismatchNote(runTiled(true, multiplier), wantTiled16, ldOut, tiledMismatches16);
    report.addCheck("dequant tiled fp16 bit-exact " + tag, tiledMismatches16 == 0, tiledNote16);
    if (!c.wideScales) {
        std::size_t inexact = 0;
        for (std::int64_t o = 0; o < c.out; ++o)
            for (std::int64_t i = 0; i < c.in; ++i)
                inexact += static_cast<double>(fmt::fp16ToFloat(want16[o * ldOut + i])) / multiplier != w.weight(o, i);
        report.addCheck("  fp16 holds every product exactly " + tag, inexact == 0, std::to_string(inexact) + " inexact");
    }
}

// ---- activation split --------------------------------------------------------------------------------
struct SplitCase {
    std::int64_t rows, cols, xStride, outStride;
    bool lo;
    std::int64_t xOffset = 0;  // floats: 1 misaligns x (element path)
};

void runSplit(const SplitCase& c, std::mt19937_64& rng, Report& report) {
    std::vector<float> x(static_cast<std::size_t>(c.xOffset + c.rows * c.xStride), std::nanf(""));
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::uniform_int_distribution<int> e(-40, 40);
    for (std::int64_t r = 0; r < c.rows; ++r)
        for (std::int64_t i = 0; i < c.cols; ++i) x[c.xOffset + r * c.xStride + i] = std::ldexp(u(rng), e(rng));
    // Planted cases: zeros of both signs, a bf16 tie (1 + 2^-8 rounds to even: 1), a tie that rounds
    // up (1 + 3·2^-8), the largest finite bf16 neighbourhood, a subnormal.
    const float planted[] = {0.0f, -0.0f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -(1.0f + 0x1p-8f), 3.0e38f, 1.0e-40f, 0x1.fffffep-1f};
    for (std::size_t k = 0; k < std::size(planted) && static_cast<std::int64_t>(k) < c.cols; ++k)
        x[c.xOffset + k] = planted[k];
    DeviceBuffer<float> dx(x.size());
    dx.upload(x);
    const std::size_t outCount = static_cast<std::size_t>(c.rows * c.outStride);
    DeviceBuffer<std::uint16_t> dhi(outCount), dlo(outCount);
    dhi.poison();
    dlo.poison();
    kc::ActivationConvertParams p;
    p.x = dx.ptr + c.xOffset;
    p.xStride = c.xStride;
    p.rows = c.rows;
    p.cols = c.cols;
    p.hi = dhi.ptr;
    p.lo = c.lo ? dlo.ptr : nullptr;
    p.outStride = c.outStride;
    HCHECK_STATUS(kc::launchActivationToBf16(p, nullptr));
    HCHECK(cudaDeviceSynchronize());
    const auto hi = dhi.download();
    const auto lo = dlo.download();
    std::vector<std::uint16_t> wantHi(outCount, kPoison16), wantLo(outCount, kPoison16);
    ref::splitToBf16(x.data() + c.xOffset, c.rows, c.cols, c.xStride, wantHi.data(), c.lo ? wantLo.data() : nullptr,
                     c.outStride);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < outCount; ++i) bad += (hi[i] != wantHi[i]) + (lo[i] != wantLo[i]);
    const bool vec = c.xOffset == 0 && c.xStride % 4 == 0 && c.outStride % 8 == 0;
    const std::string tag = std::to_string(c.rows) + "x" + std::to_string(c.cols) + " xs " + std::to_string(c.xStride) +
                            " os " + std::to_string(c.outStride) + (c.lo ? " hi+lo" : " hi only") +
                            (vec ? " vec" : " scalar");
    report.addCheck("split bit-exact " + tag, bad == 0, std::to_string(bad) + " values differ");
    if (c.lo) {
        double worst = 0;
        for (std::int64_t r = 0; r < c.rows; ++r)
            for (std::int64_t i = 0; i < c.cols; ++i) {
                const double v = x[c.xOffset + r * c.xStride + i];
                if (std::fabs(v) < 0x1p-100 || std::fabs(v) > 0x1p100) continue;  // normal range only
                const double sum = static_cast<double>(fmt::bf16ToFloat(hi[r * c.outStride + i])) +
                                   static_cast<double>(fmt::bf16ToFloat(lo[r * c.outStride + i]));
                worst = std::max(worst, std::fabs(sum - v) / std::fabs(v));
            }
        char buf[96];
        std::snprintf(buf, sizeof buf, "max |x-(hi+lo)|/|x| %.3g (bound 2^-16 = 1.53e-05)", worst);
        report.addCheck("  reconstruction " + tag, worst <= 0x1p-16, buf);
    }

    // FP16 hi + lo of x·2^-8 (the engine's prefill operand): bit for bit, and hi + lo within
    // max(2^-22·|x·m|, 2^-25) of x·m (11 + 11 bits; lo's subnormal step below 2^-14).
    constexpr float kMultiplier = 1.0f / 256.0f;
    dhi.poison();
    dlo.poison();
    p.fp16 = true;
    p.multiplier = kMultiplier;
    HCHECK_STATUS(kc::launchActivationToBf16(p, nullptr));
    HCHECK(cudaDeviceSynchronize());
    const auto hi16 = dhi.download();
    const auto lo16 = dlo.download();
    std::vector<std::uint16_t> wantHi16(outCount, kPoison16), wantLo16(outCount, kPoison16);
    ref::splitToFp16(x.data() + c.xOffset, c.rows, c.cols, c.xStride, wantHi16.data(), c.lo ? wantLo16.data() : nullptr,
                     c.outStride, kMultiplier);
    std::size_t bad16 = 0;
    for (std::size_t i = 0; i < outCount; ++i) bad16 += (hi16[i] != wantHi16[i]) + (lo16[i] != wantLo16[i]);
    report.addCheck("split fp16 bit-exact " + tag, bad16 == 0, std::to_string(bad16) + " values differ");
    if (c.lo) {
        bool within = true;
        for (std::int64_t r = 0; r < c.rows; ++r)
            for (std::int64_t i = 0; i < c.cols; ++i) {
                const double v = static_cast<double>(x[c.xOffset + r * c.xStride + i]) * kMultiplier;
                if (!(std::fabs(v) < 65000.0)) continue;  // past FP16's range: inf by design
                const double sum = static_cast<double>(fmt::fp16ToFloat(hi16[r * c.outStride + i])) +
                                   static_cast<double>(fmt::fp16ToFloat(lo16[r * c.outStride + i]));
                within &= std::fabs(sum - v) <= std::max(0x1p-22 * std::fabs(v), 0x1p-25);
            }
        report.addCheck("  fp16 reconstruction " + tag, within, "bound max(2^-22 |x m|, 2^-25)");
    }
}

// ---- GeGLU ----------------------------------------------------------------------------------------------
double geluTanhRef(double v) { return 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))); }

struct GegluCase {
    std::int64_t rows, width, ldIn, ldOut;
    bool inPlace;
};

void runGeglu(const GegluCase& c, std::mt19937_64& rng, Report& report) {
    std::vector<float> in(static_cast<std::size_t>(c.rows * c.ldIn), std::nanf(""));
    std::uniform_real_distribution<float> g(-5.f, 5.f), u(-1.f, 1.f);
    for (std::int64_t r = 0; r < c.rows; ++r)
        for (std::int64_t j = 0; j < c.width; ++j) {
            in[r * c.ldIn + j] = g(rng);
            in[r * c.ldIn + c.width + j] = u(rng);
        }
    DeviceBuffer<float> din(in.size());
    din.upload(in);
    DeviceBuffer<float> dy(c.inPlace ? 0 : static_cast<std::size_t>(c.rows * c.ldOut));
    if (!c.inPlace) dy.poison();
    kc::GegluElementwiseParams p;
    p.gateUp = din.ptr;
    p.ldIn = c.ldIn;
    p.rows = c.rows;
    p.width = c.width;
    p.y = c.inPlace ? din.ptr : dy.ptr;
    p.ldOut = c.inPlace ? c.ldIn : c.ldOut;
    HCHECK_STATUS(kc::launchGegluElementwise(p, nullptr));
    HCHECK(cudaDeviceSynchronize());
    const std::vector<float> y = c.inPlace ? din.download() : dy.download();
    const std::int64_t ld = p.ldOut;
    std::vector<float> got;
    std::vector<double> want, wantRef;
    std::vector<float> refOut(static_cast<std::size_t>(c.rows * c.width));
    ref::gegluGateUpRows(in.data(), c.rows, c.width, c.ldIn, refOut.data(), c.width);
    bool gapsIntact = true;
    for (std::int64_t r = 0; r < c.rows; ++r) {
        for (std::int64_t j = 0; j < c.width; ++j) {
            got.push_back(y[r * ld + j]);
            want.push_back(geluTanhRef(in[r * c.ldIn + j]) * static_cast<double>(in[r * c.ldIn + c.width + j]));
            wantRef.push_back(refOut[r * c.width + j]);
        }
        // Untouched: the gap of y (separate output), or the up half and the padding (in place).
        for (std::int64_t j = c.width; j < ld; ++j) {
            const float expect = c.inPlace ? in[r * ld + j] : std::nanf("");
            const float v = y[r * ld + j];
            gapsIntact &= c.inPlace ? (std::isnan(expect) ? std::isnan(v) : v == expect) : std::isnan(v);
        }
    }
    const std::string tag = std::to_string(c.rows) + "x" + std::to_string(c.width) + " ldIn " + std::to_string(c.ldIn) +
                            " ldOut " + std::to_string(ld) + (c.inPlace ? " in place" : "");
    // fp32 tanhf (<= 2 ulp) and a few fp32 roundings per element: ~3e-7 relative per element.
    report.add("geglu vs fp64 " + tag, compare(got.data(), want.data(), got.size()), 2e-6, 2e-6);
    report.add("  vs reference::gegluGateUpRows " + tag, compare(got.data(), wantRef.data(), got.size()), 2e-6, 2e-6);
    report.addCheck("  untouched columns " + tag, gapsIntact, "");
}

// ---- cuBLASLt BF16 GEMM, the engine's mapping (engine/src/CublasLt.cpp) ----------------------------------
// Row-major y[rows][ldy] is the column-major out × rows matrix D (ld ldy), row-major w[out][ldw]
// the column-major in × out matrix Wc (ld ldw), row-major x[rows][ldx] the column-major in × rows
// matrix Xc (ld ldx): D = Wcᵀ·Xc, i.e. A = w with TRANSA = T, B = x with TRANSB = N.
struct LtBf16 {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
    std::size_t workspaceBytes = std::size_t{32} << 20;
    LtBf16() {
        if (cublasLtCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
            std::fprintf(stderr, "cublasLtCreate failed\n");
            std::exit(1);
        }
        HCHECK(cudaMalloc(&workspace, workspaceBytes));
    }
    ~LtBf16() {
        cudaFree(workspace);
        cublasLtDestroy(handle);
    }
    void gemm(int rows, std::int64_t out, std::int64_t in, const std::uint16_t* x, std::int64_t ldx,
              const std::uint16_t* w, std::int64_t ldw, float* y, std::int64_t ldy, bool accumulate,
              cudaDataType_t type = CUDA_R_16BF, float alpha = 1.0f) {
        auto ck = [](cublasStatus_t s, int line) {
            if (s != CUBLAS_STATUS_SUCCESS) {
                std::fprintf(stderr, "cuBLASLt status %d at line %d\n", static_cast<int>(s), line);
                std::exit(1);
            }
        };
        cublasLtMatmulDesc_t op;
        ck(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), __LINE__);
        const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        ck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), __LINE__);
        ck(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), __LINE__);
        cublasLtMatrixLayout_t la, lb, lc;
        ck(cublasLtMatrixLayoutCreate(&la, type, in, out, ldw), __LINE__);
        ck(cublasLtMatrixLayoutCreate(&lb, type, in, rows, ldx), __LINE__);
        ck(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, out, rows, ldy), __LINE__);
        cublasLtMatmulPreference_t pref;
        ck(cublasLtMatmulPreferenceCreate(&pref), __LINE__);
        ck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspaceBytes,
                                                sizeof workspaceBytes),
           __LINE__);
        cublasLtMatmulHeuristicResult_t result{};
        int found = 0;
        ck(cublasLtMatmulAlgoGetHeuristic(handle, op, la, lb, lc, lc, pref, 1, &result, &found), __LINE__);
        if (found < 1) {
            std::fprintf(stderr, "cuBLASLt: no BF16 algorithm for %d x %lld x %lld\n", rows, static_cast<long long>(out),
                         static_cast<long long>(in));
            std::exit(1);
        }
        const float beta = accumulate ? 1.0f : 0.0f;
        ck(cublasLtMatmul(handle, op, &alpha, w, la, x, lb, &beta, y, lc, y, lc, &result.algo, workspace, workspaceBytes,
                          nullptr),
           __LINE__);
        cublasLtMatmulPreferenceDestroy(pref);
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(lc);
        cublasLtMatmulDescDestroy(op);
    }
};

// The GEMM operands on the device as the engine builds them: W dequantized (BF16, or FP16 × wm)
// into [out][ld], x (random normal, kept on the host for the reference) split into hi + lo
// (BF16, or FP16 of x·xm) in [rows][ld], ld = roundUp(in, 8). Padding columns are zeroed: no
// GEMM reads them, but initcheck would otherwise flag the whole rows cuBLASLt loads.
struct GemmOperands {
    std::int64_t ld = 0;
    std::vector<float> x;
    DeviceBuffer<std::uint16_t> w, hi, lo;
};
GemmOperands prepareGemm(const Fp4Matrix& w, int rows, bool fp16, float wm, float xm, std::mt19937_64& rng) {
    GemmOperands g;
    g.ld = roundUp(w.in, 8);
    DeviceFp4 dw = upload(w);
    g.w = DeviceBuffer<std::uint16_t>(static_cast<std::size_t>(w.out * g.ld));
    g.hi = DeviceBuffer<std::uint16_t>(static_cast<std::size_t>(rows * g.ld));
    g.lo = DeviceBuffer<std::uint16_t>(static_cast<std::size_t>(rows * g.ld));
    for (auto* b : {&g.w, &g.hi, &g.lo}) HCHECK(cudaMemset(b->ptr, 0, b->bytes()));
    kc::Fp4DequantizeParams dq;
    dq.codes = dw.codes.ptr;
    dq.scales = dw.scales.ptr;
    dq.out = w.out;
    dq.in = w.in;
    dq.y = g.w.ptr;
    dq.ldOut = g.ld;
    dq.fp16 = fp16;
    dq.multiplier = wm;
    HCHECK_STATUS(kc::launchFp4DequantizeBf16(dq, nullptr));
    g.x.resize(static_cast<std::size_t>(rows * w.in));
    std::normal_distribution<float> normal(0.f, 1.f);
    for (auto& v : g.x) v = normal(rng);
    DeviceBuffer<float> dx(g.x.size());
    dx.upload(g.x);
    kc::ActivationConvertParams ac;
    ac.x = dx.ptr;
    ac.xStride = w.in;
    ac.rows = rows;
    ac.cols = w.in;
    ac.hi = g.hi.ptr;
    ac.lo = g.lo.ptr;
    ac.outStride = g.ld;
    ac.fp16 = fp16;
    ac.multiplier = xm;
    HCHECK_STATUS(kc::launchActivationToBf16(ac, nullptr));
    HCHECK(cudaDeviceSynchronize());  // dw and dx go out of scope
    return g;
}

// Y = hi·Wᵀ + lo·Wᵀ (two GEMMs, the second with beta = 1) against Σ_i w_bf16[o][i]·x[r][i] in FP64
// with the fp32 x. Tolerance 3e-5 (rel) and 1e-4·max|ref| (max abs), from:
//   - the operand: |x − (hi + lo)| <= 2^-16·|x| per element (checked above), random in sign, so
//     the norm-wise error of the dot products is about 2^-18 ≈ 4e-6;
//   - fp32 accumulation on tensor cores over k <= 15360: products of bf16 are exact, the fp32
//     sums are rounded (possibly truncated) once per k-step of 8-16 terms: <= ~1e-5 norm-wise;
//   - the second GEMM adds lo·Wᵀ (|lo| <= 2^-8|x|) into fp32: one more rounding.
// Failures it separates: hi only (no lo or beta = 0 on the first GEMM) is ~1.5e-3 (2^-9 per
// element), a dropped accumulation (y = lo·Wᵀ) or a wrong mapping is O(1).
void runGemm(LtBf16& lt, const std::string& name, std::int64_t out, std::int64_t in, int rows, std::mt19937_64& rng,
             Report& report) {
    const Fp4Matrix w = randomFp4(out, in, rng);
    GemmOperands g = prepareGemm(w, rows, false, 1.0f, 1.0f, rng);
    const std::int64_t ldw = g.ld, ldx = g.ld, ldy = out + 4;
    const std::vector<float>& x = g.x;
    DeviceBuffer<std::uint16_t>& dwBf16 = g.w;
    DeviceBuffer<std::uint16_t>& dhi = g.hi;
    DeviceBuffer<std::uint16_t>& dlo = g.lo;

    DeviceBuffer<float> dy(static_cast<std::size_t>(rows * ldy)), dyHi(static_cast<std::size_t>(rows * ldy));
    dy.poison();
    dyHi.poison();
    lt.gemm(rows, out, in, dhi.ptr, ldx, dwBf16.ptr, ldw, dy.ptr, ldy, false);
    lt.gemm(rows, out, in, dlo.ptr, ldx, dwBf16.ptr, ldw, dy.ptr, ldy, true);
    lt.gemm(rows, out, in, dhi.ptr, ldx, dwBf16.ptr, ldw, dyHi.ptr, ldy, false);
    HCHECK(cudaDeviceSynchronize());
    const auto y = dy.download();
    const auto yHi = dyHi.download();
    const auto wb = dwBf16.download();

    // Rows compared: all up to 8, else the first, the last and 6 random ones (FP64 on the host).
    std::vector<int> sample;
    if (rows <= 8) {
        for (int r = 0; r < rows; ++r) sample.push_back(r);
    } else {
        sample = {0, rows - 1};
        std::uniform_int_distribution<int> pick(1, rows - 2);
        for (int k = 0; k < 6; ++k) sample.push_back(pick(rng));
    }
    std::vector<float> got, gotHi;
    std::vector<double> want;
    std::vector<double> wRow(static_cast<std::size_t>(in));
    bool gapsIntact = true;
    for (std::int64_t o = 0; o < out; ++o) {
        for (std::int64_t i = 0; i < in; ++i) wRow[i] = fmt::bf16ToFloat(wb[o * ldw + i]);
        for (int r : sample) {
            double acc = 0;
            const float* xr = &x[static_cast<std::size_t>(r) * in];
            for (std::int64_t i = 0; i < in; ++i) acc += wRow[i] * static_cast<double>(xr[i]);
            want.push_back(acc);
            got.push_back(y[r * ldy + o]);
            gotHi.push_back(yHi[r * ldy + o]);
        }
    }
    for (int r = 0; r < rows; ++r)
        for (std::int64_t o = out; o < ldy; ++o) gapsIntact &= std::isnan(y[r * ldy + o]);
    const std::string tag = name + " " + dims(out, in) + " rows " + std::to_string(rows);
    const Compare split = compare(got.data(), want.data(), got.size());
    const Compare hiOnly = compare(gotHi.data(), want.data(), gotHi.size());
    char note[96];
    std::snprintf(note, sizeof note, "(hi only: rel %.2e)", hiOnly.relErr);
    report.add("gemm hi+lo vs fp64 " + tag, split, 3e-5, 1e-4, note);
    report.addCheck("  lo term counts " + tag, split.relErr * 8 < hiOnly.relErr, "hi+lo at least 8x closer than hi only");
    report.addCheck("  y gap columns untouched " + tag, gapsIntact, "");
}

// The engine's prefill GEMM: W as FP16 × m (m = fp16WeightMultiplier, exact), x as FP16 hi + lo of
// x·2^-8, y = (hi·Wᵀ + lo·Wᵀ)·2^8/m through alpha. Compared with Σ_i W[o][i]·x[r][i] in FP64 over the
// EXACT FP4 weights (nothing is rounded on the weight side any more). Tolerance 3e-5 rel /
// 1e-4·max|ref|: x carries ~2^-22 relative (or 2^-25·2^8 absolute), products are exact in fp32,
// and what remains is fp32 accumulation over k <= 15360 (as in runGemm).
void runGemmFp16(LtBf16& lt, const std::string& name, std::int64_t out, std::int64_t in, int rows, std::mt19937_64& rng,
                 Report& report) {
    const Fp4Matrix w = randomFp4(out, in, rng);
    std::uint16_t largest = 0;
    for (auto sc : w.scales) largest = std::max<std::uint16_t>(largest, sc & 0x7FFFu);
    const float wm = fmt::fp16WeightMultiplier(fmt::bf16ToFloat(largest));
    constexpr float xm = 1.0f / 256.0f;
    GemmOperands g = prepareGemm(w, rows, true, wm, xm, rng);
    const std::int64_t ld = g.ld, ldy = out + 4;
    const std::vector<float>& x = g.x;
    DeviceBuffer<float> dy(static_cast<std::size_t>(rows * ldy));
    dy.poison();
    const float alpha = 1.0f / (wm * xm);
    lt.gemm(rows, out, in, g.hi.ptr, ld, g.w.ptr, ld, dy.ptr, ldy, false, CUDA_R_16F, alpha);
    lt.gemm(rows, out, in, g.lo.ptr, ld, g.w.ptr, ld, dy.ptr, ldy, true, CUDA_R_16F, alpha);
    HCHECK(cudaDeviceSynchronize());
    const auto y = dy.download();
    std::vector<int> sample;
    for (int r = 0; r < rows && r < 8; ++r) sample.push_back(r);
    if (rows > 8) sample.push_back(rows - 1);
    std::vector<float> got;
    std::vector<double> want;
    for (std::int64_t o = 0; o < out; ++o)
        for (int r : sample) {
            double acc = 0;
            for (std::int64_t i = 0; i < in; ++i) acc += w.weight(o, i) * static_cast<double>(x[static_cast<std::size_t>(r) * in + i]);
            want.push_back(acc);
            got.push_back(y[r * ldy + o]);
        }
    char note[64];
    std::snprintf(note, sizeof note, "(w multiplier 2^%d)", static_cast<int>(std::log2(wm)));
    report.add("gemm fp16 hi+lo vs exact fp64 " + name + " " + dims(out, in) + " rows " + std::to_string(rows),
               compare(got.data(), want.data(), got.size()), 3e-5, 1e-4, note);
}

// ---- timing ---------------------------------------------------------------------------------------------
std::string timeGateUpDequant(std::int64_t ffn, std::int64_t hidden, std::mt19937_64& rng) {
    const Fp4Matrix gate = randomFp4(ffn, hidden, rng), up = randomFp4(ffn, hidden, rng);
    const std::size_t codeBytes = gate.codes.size(), scaleCount = gate.scales.size();
    const double readBytes = 2.0 * static_cast<double>(codeBytes + 2 * scaleCount);
    const double writeBytes = 2.0 * 2.0 * static_cast<double>(ffn * hidden);
    int dev = 0, l2 = 0;
    HCHECK(cudaGetDevice(&dev));
    HCHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    // Rotate input copies over > 3x L2 so every launch reads from memory (the output, 2·F·H bf16,
    // is far larger than L2 already).
    const int copies = static_cast<int>(std::min<double>(16, std::ceil(3.0 * l2 / readBytes) + 1));
    DeviceBuffer<std::uint8_t> codes(2 * codeBytes * copies);
    DeviceBuffer<std::uint16_t> scales(2 * scaleCount * copies);
    for (int c = 0; c < copies; ++c) {
        HCHECK(cudaMemcpy(codes.ptr + (2 * c) * codeBytes, gate.codes.data(), codeBytes, cudaMemcpyHostToDevice));
        HCHECK(cudaMemcpy(codes.ptr + (2 * c + 1) * codeBytes, up.codes.data(), codeBytes, cudaMemcpyHostToDevice));
        HCHECK(cudaMemcpy(scales.ptr + (2 * c) * scaleCount, gate.scales.data(), scaleCount * 2, cudaMemcpyHostToDevice));
        HCHECK(cudaMemcpy(scales.ptr + (2 * c + 1) * scaleCount, up.scales.data(), scaleCount * 2,
                          cudaMemcpyHostToDevice));
    }
    // The engine's layout: gate rows [0, F), up rows [F, 2F) of one [2F][H] bf16 operand.
    DeviceBuffer<std::uint16_t> y(static_cast<std::size_t>(2 * ffn * hidden));
    const double us = medianMicros(
        [&](int i) {
            const int c = i % copies;
            for (int half = 0; half < 2; ++half) {
                kc::Fp4DequantizeParams p;
                p.codes = codes.ptr + (2 * c + half) * codeBytes;
                p.scales = scales.ptr + (2 * c + half) * scaleCount;
                p.out = ffn;
                p.in = hidden;
                p.y = y.ptr + half * ffn * hidden;
                p.ldOut = hidden;
                kc::launchFp4DequantizeBf16(p, nullptr);
            }
        },
        5, 30, 5);
    HCHECK(cudaGetLastError());
    char line[256];
    std::snprintf(line, sizeof line,
                  "dequant 12b gate|up pair 2 x %lld x %lld: %8.1f us  %7.1f GB/s (%.1f MB read + %.1f MB written)",
                  static_cast<long long>(ffn), static_cast<long long>(hidden), us, (readBytes + writeBytes) / us * 1e-3,
                  readBytes * 1e-6, writeBytes * 1e-6);
    return line;
}

}  // namespace

int main() {
    requireDevice("test_fp4_dequantize");
    std::mt19937_64 rng(seedFromEnv());
    const bool quick = quickMode();
    Report report("fp4_dequantize_gemm_blocks");

    // Launchers refuse bad arguments without launching.
    {
        DeviceBuffer<std::uint8_t> codes(64 * 4);
        DeviceBuffer<std::uint16_t> scales(4), y(64 * 8);
        kc::Fp4DequantizeParams p;
        report.addCheck("dequant refuses null pointers", kc::launchFp4DequantizeBf16(p, nullptr) == kc::KernelStatus::InvalidArgument, "");
        p.codes = codes.ptr;
        p.scales = scales.ptr;
        p.y = y.ptr;
        p.out = 4;
        p.in = 100;
        p.ldOut = 100;  // not a multiple of 8
        report.addCheck("dequant refuses ldOut % 8 != 0", kc::launchFp4DequantizeBf16(p, nullptr) == kc::KernelStatus::InvalidArgument, "");
        p.ldOut = 96;  // < in
        report.addCheck("dequant refuses ldOut < in", kc::launchFp4DequantizeBf16(p, nullptr) == kc::KernelStatus::InvalidArgument, "");
        p.ldOut = 104;
        p.y = y.ptr + 1;  // 2-byte aligned
        report.addCheck("dequant refuses a misaligned y", kc::launchFp4DequantizeBf16(p, nullptr) == kc::KernelStatus::InvalidArgument, "");
        p.y = y.ptr;
        p.fp16 = true;
        p.multiplier = 3.0f;
        report.addCheck("dequant refuses a multiplier that is not a power of two",
                        kc::launchFp4DequantizeBf16(p, nullptr) == kc::KernelStatus::InvalidArgument, "");
        // Otherwise valid arguments (BF16, multiplier 1, buffers of the tiled sizes, so that a
        // launcher that failed to refuse would still stay in bounds), the scale words 2-byte aligned.
        DeviceBuffer<std::uint8_t> tiledCodes(static_cast<std::size_t>(fmt::fp4tiled::codeBytes(4, 100)));
        DeviceBuffer<std::uint32_t> tiledScales(static_cast<std::size_t>(fmt::fp4tiled::scaleWords(4, 100)) + 1);
        p.fp16 = false;
        p.multiplier = 1.0f;
        p.tiled = true;
        p.codes = tiledCodes.ptr;
        p.scales = reinterpret_cast<const std::uint16_t*>(tiledScales.ptr) + 1;
        report.addCheck("dequant refuses a misaligned tiled scale pointer",
                        kc::launchFp4DequantizeBf16(p, nullptr) == kc::KernelStatus::InvalidArgument, "");
        kc::ActivationConvertParams a;
        report.addCheck("split refuses null pointers", kc::launchActivationToBf16(a, nullptr) == kc::KernelStatus::InvalidArgument, "");
        DeviceBuffer<float> f(4 * 64);
        kc::GegluElementwiseParams g;
        g.gateUp = f.ptr;
        g.ldIn = 64;
        g.rows = 2;
        g.width = 32;
        g.y = f.ptr + 8;  // overlaps the input without being in place
        g.ldOut = 64;
        report.addCheck("geglu refuses a partial overlap", kc::launchGegluElementwise(g, nullptr) == kc::KernelStatus::InvalidArgument, "");
        HCHECK(cudaGetLastError());
    }

    // Dequantize: odd sizes always; every FP4 linear shape of the 12b preset unless QUICK.
    std::vector<DequantCase> dequant = {
        {"odd", 1, 64},          {"odd", 3, 200},         {"odd", 1, 1},          {"odd", 3, 77},
        {"odd", 77, 200},        {"odd", 333, 130},       {"odd", 5, 129},        {"odd", 2, 8, 8},
        {"odd", 7, 256, 256},    {"odd", 3, 4000},        {"odd", 1001, 2112},    {"wide", 64, 1000, 0, true},
        {"wide", 3, 77, 0, true}, {"grid", 77, 200, 0, false, 1}, {"grid", 1001, 2112, 0, false, 3},
        {"grid", 333, 130, 0, false, 2},
        {"odd", 16, 128},        {"odd", 31, 1000},  // one whole tile; one row short of two (tiled padding)
    };
    if (quick) {
        dequant.push_back({"12b.k_full", 512, 3840});
    } else {
        // 12b: H 3840, 16 heads; sliding kv 8x256, full kv 1x512 (k_eq_v); FFN 15360.
        dequant.push_back({"12b.q_sliding", 16 * 256, 3840});
        dequant.push_back({"12b.kv_sliding", 8 * 256, 3840});
        dequant.push_back({"12b.o_sliding", 3840, 16 * 256});
        dequant.push_back({"12b.q_full", 16 * 512, 3840});
        dequant.push_back({"12b.k_full", 512, 3840});
        dequant.push_back({"12b.o_full", 3840, 16 * 512});
        dequant.push_back({"12b.gate", 15360, 3840, 3840});
        dequant.push_back({"12b.up", 15360, 3840});
        dequant.push_back({"12b.down", 3840, 15360});
        dequant.push_back({"wide", 3840, 3840, 0, true});
    }
    for (const auto& c : dequant) runDequant(c, rng, report);

    // Activation split hi (+ lo).
    std::vector<SplitCase> splits = {
        {1, 3840, 3840, 3840, true},  {7, 3840, 3844, 3848, true}, {5, 77, 77, 80, true},
        {3, 200, 203, 200, false},    {2, 1, 1, 8, true},          {4, 64, 64, 64, true, 1},
    };
    if (!quick) {
        splits.push_back({64, 15360, 15360, 15368, true});
        splits.push_back({512, 3840, 3840, 3840, true});
    }
    for (const auto& c : splits) runSplit(c, rng, report);

    // GeGLU over a gate|up output.
    std::vector<GegluCase> geglus = {
        {1, 77, 160, 80, false}, {5, 130, 261, 131, false}, {3, 64, 128, 64, false}, {4, 384, 768, 768, true},
    };
    if (!quick) {
        geglus.push_back({1, 15360, 30720, 15360, false});
        geglus.push_back({7, 15360, 30724, 15364, false});
        geglus.push_back({64, 6144, 12288, 6144, false});
        geglus.push_back({16, 15360, 30720, 30720, true});
    }
    for (const auto& c : geglus) runGeglu(c, rng, report);

    // The GEMM (cuBLASLt, not under QUICK: the sanitizer runs check our kernels, not cuBLASLt's).
    std::vector<std::string> perf;
    if (!quick) {
        LtBf16 lt;
        for (int rows : {1, 7, 64, 512}) {
            runGemm(lt, "odd", 333, 200, rows, rng, report);
            runGemm(lt, "12b.q_sliding", 4096, 3840, rows, rng, report);
            runGemm(lt, "12b.down", 3840, 15360, rows, rng, report);
            runGemmFp16(lt, "odd", 333, 200, rows, rng, report);
            runGemmFp16(lt, "12b.q_sliding", 4096, 3840, rows, rng, report);
            runGemmFp16(lt, "12b.down", 3840, 15360, rows, rng, report);
        }
        perf.push_back(timeGateUpDequant(15360, 3840, rng));
    }
    if (!perf.empty()) {
        std::printf("\nFP4 -> BF16 dequantize achieved bandwidth (information only; median of 30 batches of 5):\n");
        for (const auto& l : perf) std::printf("  %s\n", l.c_str());
    }
    return report.finish();
}
