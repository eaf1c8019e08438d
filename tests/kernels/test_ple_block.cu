// Harness: the PLE block in one cluster launch (kernels/cuda/PleBlock.cu) against an FP64 host
// reference over the same fp32 inputs and FP4 weights, and against the two launches it replaces
// (the gate matvec with the residual update folded in and gelu ⊙ per-layer input in its store,
// then the projection matvec; Fp4Matvec.cu), which must meet the same reference.
// - shapes: e2b (H 1536, P 256), e4b (H 2560, P 256), the e2b_like golden (H 128, P 64: padded
//   groups), one of three groups (H 640, P 384: refused); cluster sizes automatic, 2, 4, 8 and 16
//   (where the shape splits into whole tiles);
// - forms: with and without the branch weight, a layer scalar other than 1, no residualOut, and
//   out aliasing branch (the CUDA backend's buffers);
// - memory that must not be read: NaN past every vector's end and around the per-layer input's
//   slice (the engine's [layers][P] table); out and residualOut poisoned with NaN before launch;
// - programmatic launch: residualIn, branch and the per-layer input written by a delayed producer
//   (HarnessCommon.h Producer), 10 rounds;
// - refusals: cluster size 3, P 384 (three groups), misaligned branch, residualOut aliasing
//   residualIn, perLayerInput inside out;
// - timing (information only, skipped with GEMMA_HARNESS_QUICK=1): the one launch against the two.
#include "../../kernels/cuda/Fp4Matvec.cu"
#include "../../kernels/cuda/PleBlock.cu"
#include "../../kernels/reference/ReferenceOps.cpp"  // standalone project: no reference library
#include "HarnessCommon.h"

using namespace harness;
namespace gc = gemma::cuda;

namespace {

constexpr int kGuard = 64;  // NaN floats after each vector (and before the per-layer input)

struct Shape {
    const char* name;
    std::int64_t hidden, perLayer;
};
struct Form {
    const char* name;
    bool branchWeight;
    float layerScalar;
    bool residualOut;
    bool outAliasesBranch;
};

// A weight in the tiled layout, uploaded as the CUDA backend holds it.
struct Tiled {
    DeviceBuffer<std::uint8_t> codes;
    DeviceBuffer<std::uint32_t> scales;
};
Tiled tiled(const Fp4Matrix& m) {
    std::vector<std::uint8_t> codes(static_cast<std::size_t>(gemma::formats::fp4tiled::codeBytes(m.out, m.in)));
    std::vector<std::uint32_t> scales(static_cast<std::size_t>(gemma::formats::fp4tiled::scaleWords(m.out, m.in)));
    gemma::reference::tileFp4(m.codes.data(), m.scales.data(), m.out, m.in, codes.data(), scales.data());
    Tiled t{DeviceBuffer<std::uint8_t>(codes.size()), DeviceBuffer<std::uint32_t>(scales.size())};
    t.codes.upload(codes);
    t.scales.upload(scales);
    return t;
}

// A vector of n floats followed by kGuard NaNs (and, with `lead`, preceded by kGuard NaNs).
std::vector<float> guarded(const std::vector<float>& v, bool lead = false) {
    std::vector<float> g(lead ? kGuard : 0, std::nanf(""));
    g.insert(g.end(), v.begin(), v.end());
    g.insert(g.end(), kGuard, std::nanf(""));
    return g;
}

double geluTanh64(double v) { return 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))); }

struct Reference {
    std::vector<double> r, out;
};
Reference reference(const std::vector<float>& residual, const std::vector<float>& branch, const std::vector<float>* weight,
                    float layerScalar, float eps, const Fp4Matrix& gate, const Fp4Matrix& projection, const std::vector<float>& input) {
    const std::int64_t H = gate.in, P = gate.out;
    Reference ref;
    double ss = 0;
    for (std::int64_t i = 0; i < H; ++i) ss += static_cast<double>(branch[i]) * branch[i];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(H) + eps);
    ref.r.resize(H);
    for (std::int64_t i = 0; i < H; ++i)
        ref.r[i] = (residual[i] + branch[i] * inv * (weight ? (*weight)[i] : 1.0)) * layerScalar;
    std::vector<double> g(P);
    for (std::int64_t o = 0; o < P; ++o) {
        double s = 0;
        for (std::int64_t i = 0; i < H; ++i) s += gate.weight(o, i) * ref.r[i];
        g[o] = geluTanh64(s) * input[o];
    }
    ref.out.resize(H);
    for (std::int64_t o = 0; o < H; ++o) {
        double s = 0;
        for (std::int64_t j = 0; j < P; ++j) s += projection.weight(o, j) * g[j];
        ref.out[o] = s;
    }
    return ref;
}

// Whether v[n .. n + kGuard) (and v[0 .. kGuard) with `lead`) are still NaN.
bool guardsIntact(const std::vector<float>& v, std::size_t n, bool lead = false) {
    const std::size_t start = lead ? kGuard : 0;
    for (std::size_t i = 0; i < kGuard; ++i)
        if (!std::isnan(v[start + n + i]) || (lead && !std::isnan(v[i]))) return false;
    return true;
}

void runCase(const Shape& s, const Form& f, int clusterSize, bool programmatic, std::mt19937_64& rng, Report& report) {
    const std::int64_t H = s.hidden, P = s.perLayer;
    const float eps = 1e-6f;
    const Fp4Matrix gate = randomFp4(P, H, rng), projection = randomFp4(H, P, rng);
    const std::vector<float> residual = randomFloats(H, rng, -4.f, 4.f), branch = randomFloats(H, rng, -20.f, 20.f);
    const std::vector<float> weight = randomFloats(H, rng, 0.2f, 2.0f), input = randomFloats(P, rng, -2.f, 2.f);
    const Tiled tg = tiled(gate), tp = tiled(projection);
    const Reference ref = reference(residual, branch, f.branchWeight ? &weight : nullptr, f.layerScalar, eps, gate, projection, input);

    Producer producer(programmatic);
    DeviceBuffer<float> dResidual(H + kGuard), dBranch(H + kGuard), dWeight(H + kGuard), dInput(P + 2 * kGuard);
    DeviceBuffer<float> dResidualOut(H + kGuard), dOut(H + kGuard);
    producer.upload(dResidual, guarded(residual));
    producer.upload(dBranch, guarded(branch));
    producer.upload(dInput, guarded(input, true));
    dWeight.upload(guarded(weight));
    dResidualOut.poison();
    dOut.poison();
    gc::PleBlockParams p;
    p.residualIn = dResidual.ptr;
    p.branch = dBranch.ptr;
    p.branchWeight = f.branchWeight ? dWeight.ptr : nullptr;
    p.layerScalar = f.layerScalar;
    p.eps = eps;
    p.residualOut = f.residualOut ? dResidualOut.ptr : nullptr;
    p.hidden = H;
    p.gateCodes = tg.codes.ptr;
    p.gateScales = tg.scales.ptr;
    p.projectionCodes = tp.codes.ptr;
    p.projectionScales = tp.scales.ptr;
    p.perLayer = P;
    p.perLayerInput = dInput.ptr + kGuard;
    p.out = f.outAliasesBranch ? dBranch.ptr : dOut.ptr;
    p.clusterSize = clusterSize;
    p.programmaticLaunch = programmatic;
    const int size = gc::pleBlockClusterSize(p);
    std::string name = std::string(producer.tag()) + s.name + " " + f.name + " cluster " + std::to_string(clusterSize ? clusterSize : size) +
                       (clusterSize ? " (forced)" : "");
    if (size == 0) {
        // Only a forced size whose shared memory passes the opt-in limit may be refused (e4b at 2).
        int optin = 0;
        HCHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
        const int bytes = clusterSize ? gc::pledetail::layoutFor(H, P, clusterSize).total : 0;
        const bool tooLarge = bytes > optin;
        report.addCheck(name + (tooLarge ? ": refused, shared memory past the opt-in limit" : ": launcher takes the shape"),
                        tooLarge && gc::launchPleBlock(p, nullptr) == gc::KernelStatus::Unsupported,
                        std::to_string(bytes) + " of " + std::to_string(optin) + " bytes");
        return;
    }
    producer.produce();
    HCHECK_STATUS(gc::launchPleBlock(p, producer.stream()));
    HCHECK(cudaDeviceSynchronize());
    const std::vector<float> out = (f.outAliasesBranch ? dBranch : dOut).download();
    report.add(name + ": out", compare(out.data(), ref.out.data(), static_cast<std::size_t>(H)), 2e-5, 5e-5);
    report.addCheck(name + ": nothing written past out", guardsIntact(out, static_cast<std::size_t>(H)), "");
    const std::vector<float> rOut = dResidualOut.download();
    if (f.residualOut) {
        report.add(name + ": residualOut", compare(rOut.data(), ref.r.data(), static_cast<std::size_t>(H)), 2e-6, 4e-6);
        report.addCheck(name + ": nothing written past residualOut", guardsIntact(rOut, static_cast<std::size_t>(H)), "");
    } else {
        bool untouched = true;
        for (float v : rOut) untouched &= std::isnan(v);
        report.addCheck(name + ": residualOut null, nothing written there", untouched, "");
    }
    // residualIn is only read (its guards and values as uploaded); the per-layer input's too.
    const std::vector<float> residualAfter = dResidual.download(), inputAfter = dInput.download();
    report.addCheck(name + ": residualIn and the per-layer input unchanged",
                    std::equal(residual.begin(), residual.end(), residualAfter.begin()) && guardsIntact(residualAfter, static_cast<std::size_t>(H)) &&
                        std::equal(input.begin(), input.end(), inputAfter.begin() + kGuard) && guardsIntact(inputAfter, static_cast<std::size_t>(P), true),
                    "");
}

// The two launches the engine ran before (gate matvec with the norm and gelu gate folded in,
// projection matvec), on the same inputs and reference; the one launch's time beside theirs.
void compareWithTwoLaunches(const Shape& s, std::mt19937_64& rng, Report& report, std::vector<std::string>& perf, bool quick) {
    const std::int64_t H = s.hidden, P = s.perLayer;
    const float eps = 1e-6f;
    const Fp4Matrix gate = randomFp4(P, H, rng), projection = randomFp4(H, P, rng);
    const std::vector<float> residual = randomFloats(H, rng, -4.f, 4.f), branch = randomFloats(H, rng, -20.f, 20.f);
    const std::vector<float> weight = randomFloats(H, rng, 0.2f, 2.0f), input = randomFloats(P, rng, -2.f, 2.f);
    const Tiled tg = tiled(gate), tp = tiled(projection);
    const Reference ref = reference(residual, branch, &weight, 1.0f, eps, gate, projection, input);
    DeviceBuffer<float> dResidual(H), dBranch(H), dWeight(H), dInput(P), dResidualOut(H), dGate(P), dOut(H);
    dResidual.upload(residual);
    dBranch.upload(branch);
    dWeight.upload(weight);
    dInput.upload(input);

    gc::Fp4MatvecParams g;
    g.codes = tg.codes.ptr;
    g.scales = reinterpret_cast<const std::uint16_t*>(tg.scales.ptr);
    g.tiled = true;
    g.out = P;
    g.in = H;
    g.x = dResidual.ptr;  // not read: the input norm computes x
    g.xStride = H;
    g.y = dGate.ptr;
    g.yStride = P;
    g.inputNorm.residualIn = dResidual.ptr;
    g.inputNorm.branch = dBranch.ptr;
    g.inputNorm.branchWeight = dWeight.ptr;
    g.inputNorm.residualOut = dResidualOut.ptr;
    g.inputNorm.eps = eps;
    g.inputNorm.normalizeOutput = false;
    g.geluGate = dInput.ptr;
    gc::Fp4MatvecParams pr;
    pr.codes = tp.codes.ptr;
    pr.scales = reinterpret_cast<const std::uint16_t*>(tp.scales.ptr);
    pr.tiled = true;
    pr.out = H;
    pr.in = P;
    pr.x = dGate.ptr;
    pr.xStride = P;
    pr.y = dOut.ptr;
    pr.yStride = H;
    dOut.poison();
    HCHECK_STATUS(gc::launchFp4Matvec(g, nullptr));
    HCHECK_STATUS(gc::launchFp4Matvec(pr, nullptr));
    HCHECK(cudaDeviceSynchronize());
    const std::vector<float> twoLaunches = dOut.download();
    report.add(std::string(s.name) + " two launches (gate, projection): out", compare(twoLaunches.data(), ref.out.data(), static_cast<std::size_t>(H)),
               2e-5, 5e-5);

    gc::PleBlockParams p;
    p.residualIn = dResidual.ptr;
    p.branch = dBranch.ptr;
    p.branchWeight = dWeight.ptr;
    p.eps = eps;
    p.residualOut = dResidualOut.ptr;
    p.hidden = H;
    p.gateCodes = tg.codes.ptr;
    p.gateScales = tg.scales.ptr;
    p.projectionCodes = tp.codes.ptr;
    p.projectionScales = tp.scales.ptr;
    p.perLayer = P;
    p.perLayerInput = dInput.ptr;
    p.out = dOut.ptr;
    dOut.poison();
    HCHECK_STATUS(gc::launchPleBlock(p, nullptr));
    HCHECK(cudaDeviceSynchronize());
    const std::vector<float> one = dOut.download();
    report.add(std::string(s.name) + " one launch: out, against the two launches' out",
               [&] {
                   std::vector<double> asDouble(twoLaunches.begin(), twoLaunches.end());
                   return compare(one.data(), asDouble.data(), static_cast<std::size_t>(H));
               }(),
               4e-5, 1e-4);
    if (quick) return;
    const double two = medianMicros(
        [&](int) {
            HCHECK_STATUS(gc::launchFp4Matvec(g, nullptr));
            HCHECK_STATUS(gc::launchFp4Matvec(pr, nullptr));
        },
        5, 30);
    const double fused = medianMicros([&](int) { HCHECK_STATUS(gc::launchPleBlock(p, nullptr)); }, 5, 30);
    char line[200];
    std::snprintf(line, sizeof line, "%-6s H %5lld P %4lld: two launches %6.1f us, one cluster launch %6.1f us (cluster of %d)", s.name,
                  static_cast<long long>(H), static_cast<long long>(P), two, fused, gc::pleBlockClusterSize(p));
    perf.push_back(line);
}

void refusals(Report& report) {
    DeviceBuffer<float> v(4096);
    DeviceBuffer<std::uint8_t> codes(1 << 20);
    DeviceBuffer<std::uint32_t> scales(1 << 16);
    gc::PleBlockParams p;
    p.residualIn = v.ptr;
    p.branch = v.ptr + 1024;
    p.residualOut = v.ptr + 2048;
    p.out = v.ptr + 2560;
    p.perLayerInput = v.ptr + 3584;
    p.hidden = 512;
    p.perLayer = 256;
    p.gateCodes = p.projectionCodes = codes.ptr;
    p.gateScales = p.projectionScales = scales.ptr;
    gc::PleBlockParams q = p;
    q.clusterSize = 3;
    report.addCheck("refused: cluster size 3", gc::launchPleBlock(q, nullptr) == gc::KernelStatus::InvalidArgument, "");
    q = p;
    q.perLayer = 384;
    report.addCheck("refused: P 384", gc::launchPleBlock(q, nullptr) == gc::KernelStatus::Unsupported, "");
    q = p;
    q.branch = v.ptr + 1025;
    report.addCheck("refused: misaligned branch", gc::launchPleBlock(q, nullptr) == gc::KernelStatus::InvalidArgument, "");
    q = p;
    q.residualOut = v.ptr;  // = residualIn
    report.addCheck("refused: residualOut aliasing residualIn", gc::launchPleBlock(q, nullptr) == gc::KernelStatus::InvalidArgument, "");
    q = p;
    q.perLayerInput = p.out + 100;
    report.addCheck("refused: perLayerInput inside out", gc::launchPleBlock(q, nullptr) == gc::KernelStatus::InvalidArgument, "");
    HCHECK(cudaGetLastError());
}

}  // namespace

int main() {
    requireDevice("test_ple_block");
    std::mt19937_64 rng(seedFromEnv());
    const bool quick = quickMode();
    Report report("ple_block");
    int major = 0;
    HCHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    if (major < 9) {
        // Clusters need sm_90: the launcher must say so, not fail.
        gc::PleBlockParams p;
        report.addCheck("below sm_90: no cluster size", gc::pleBlockClusterSize(p) == 0, "");
        return report.finish();
    }
    const std::vector<Shape> shapes = {{"e2b", 1536, 256}, {"e4b", 2560, 256}, {"golden", 128, 64}};
    const std::vector<Form> forms = {
        {"plain", true, 1.0f, true, false},
        {"out aliases branch", true, 1.0f, true, true},
        {"no branch weight, scalar 0.5, no residualOut", false, 0.5f, false, false},
    };
    for (const auto& s : shapes) {
        for (const auto& f : forms) runCase(s, f, 0, false, rng, report);
        for (int size : {2, 4, 8, 16})
            if (s.hidden % (16 * size) == 0 && s.perLayer % (16 * size) == 0) runCase(s, forms[1], size, false, rng, report);
    }
    for (int round = 0; round < (quick ? 2 : 10); ++round) runCase(shapes[round % 2], forms[1], 0, true, rng, report);
    refusals(report);
    std::vector<std::string> perf;
    for (const auto& s : shapes) compareWithTwoLaunches(s, rng, report, perf, quick);
    if (!perf.empty()) {
        std::printf("\nPLE block timing (information only, back-to-back launches, median of 30):\n");
        for (const auto& l : perf) std::printf("  %s\n", l.c_str());
    }
    return report.finish();
}
