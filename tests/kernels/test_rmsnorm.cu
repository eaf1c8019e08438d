// Harness: RMSNorm fused with residual add, layer scalar and the following norm
// (kernels/cuda/RmsNorm.cu). FP64 host reference over the same fp32 inputs; `out` poisoned with
// NaN before each launch; the row gaps (stride > n) of residual and out are NaN and must stay so.
// Programmatic launch: x and the branch written by a delayed producer kernel (HarnessCommon.h
// Producer), the norm launched programmatically after it, 10 rounds over both kernel paths.
#include "../../kernels/cuda/RmsNorm.cu"
#include "HarnessCommon.h"

using namespace harness;
namespace gc = gemma::cuda;

namespace {

struct Mode {
    const char* name;
    bool branch, branchWeighted, outNorm, outWeighted;
    float scalar;
};

void runCase(const Mode& m, std::int64_t n, int rows, std::mt19937_64& rng, Report& report, Producer& producer) {
    const std::int64_t stride = n + 3;
    const float eps = 1e-6f;
    auto padded = [&](float lo, float hi) {
        std::vector<float> v(static_cast<std::size_t>(rows * stride), std::nanf(""));
        for (int r = 0; r < rows; ++r)
            for (std::int64_t i = 0; i < n; ++i)
                v[r * stride + i] = std::uniform_real_distribution<float>(lo, hi)(rng);
        return v;
    };
    const std::vector<float> x = padded(-4.f, 4.f), a = padded(-20.f, 20.f);
    const std::vector<float> w1 = randomFloats(n, rng, 0.2f, 2.0f), w2 = randomFloats(n, rng, 0.2f, 2.0f);
    DeviceBuffer<float> dx(x.size()), da(a.size()), dw1(n), dw2(n), dout(x.size());
    producer.upload(dx, x);
    producer.upload(da, a);
    dw1.upload(w1);
    dw2.upload(w2);
    dout.poison();
    gc::RmsNormParams p;
    p.branch = m.branch ? da.ptr : nullptr;
    p.branchWeight = m.branchWeighted ? dw1.ptr : nullptr;
    p.residual = dx.ptr;
    p.layerScalar = m.scalar;
    p.outWeight = m.outWeighted ? dw2.ptr : nullptr;
    p.out = m.outNorm ? dout.ptr : nullptr;
    p.n = n;
    p.stride = stride;
    p.rows = rows;
    p.eps = eps;
    p.programmaticLaunch = producer.programmatic();
    producer.produce();
    HCHECK_STATUS(gc::launchRmsNormResidual(p, producer.stream()));
    HCHECK(cudaDeviceSynchronize());
    const std::vector<float> gx = dx.download(), go = dout.download();

    std::vector<float> gotX, gotO;
    std::vector<double> refX, refO;
    bool gapsOk = true;
    for (int r = 0; r < rows; ++r) {
        std::vector<double> xn(n);
        double inv1 = 0;
        if (m.branch) {
            double ss = 0;
            for (std::int64_t i = 0; i < n; ++i) ss += double(a[r * stride + i]) * a[r * stride + i];
            inv1 = 1.0 / std::sqrt(ss / n + eps);
        }
        double ss2 = 0;
        for (std::int64_t i = 0; i < n; ++i) {
            double v = x[r * stride + i];
            if (m.branch) v += a[r * stride + i] * inv1 * (m.branchWeighted ? w1[i] : 1.0);
            v *= m.scalar;
            xn[i] = v;
            ss2 += v * v;
        }
        const double inv2 = 1.0 / std::sqrt(ss2 / n + eps);
        for (std::int64_t i = 0; i < n; ++i) {
            gotX.push_back(gx[r * stride + i]);
            refX.push_back(xn[i]);
            if (m.outNorm) {
                gotO.push_back(go[r * stride + i]);
                refO.push_back(xn[i] * inv2 * (m.outWeighted ? w2[i] : 1.0));
            }
        }
        for (std::int64_t i = n; i < stride && r * stride + i < static_cast<std::int64_t>(gx.size()); ++i)
            gapsOk &= std::isnan(gx[r * stride + i]) && std::isnan(go[r * stride + i]);
    }
    const std::string tag = producer.tag() + m.name + " n" + std::to_string(n) + " b" + std::to_string(rows);
    report.add("residual " + tag, compare(gotX.data(), refX.data(), gotX.size()), 3e-6, 1e-5);
    if (m.outNorm) report.add("out      " + tag, compare(gotO.data(), refO.data(), gotO.size()), 3e-6, 1e-5);
    if (!m.outNorm) {
        bool untouched = true;
        for (float v : go) untouched &= std::isnan(v);
        report.addCheck("no out written " + tag, untouched, "");
    }
    if (!gapsOk) report.addCheck("row gaps untouched " + tag, false, "");
}

}  // namespace

int main() {
    requireDevice("test_rmsnorm");
    std::mt19937_64 rng(seedFromEnv());
    Report report("rmsnorm");
    const Mode modes[] = {
        {"plain weighted", false, false, true, true, 1.0f},
        {"plain unweighted", false, false, true, false, 1.0f},
        {"post_attn+add+pre_ffn", true, true, true, true, 1.0f},
        {"post_ffn+add+scalar+next_input", true, true, true, true, 0.37f},
        {"branch+add only", true, true, false, false, 1.0f},
        {"scalar only+norm", false, false, true, true, 1.7f},
        {"unweighted branch", true, false, true, true, 1.0f},
    };
    // 1001 (n % 4 != 0) and 17000 (> 16384) take the looped path, the rest the register path
    // with 1, 2 and 4 float4 pieces per thread.
    const std::int64_t sizes[] = {100, 1001, 1536, 2560, 3840, 5376, 12288, 17000};
    Producer ordinary(false);
    for (const auto& m : modes)
        for (std::int64_t n : sizes)
            for (int rows : {1, 3}) runCase(m, n, rows, rng, report, ordinary);
    // Programmatic launch, 10 rounds: register path with 1 and 3 pieces per thread, looped path.
    const std::int64_t pdlSizes[] = {3840, 12288, 1001};
    for (int round = 0; round < 10; ++round) {
        Producer producer(true);
        runCase(modes[3], pdlSizes[round % 3], 1 + 2 * (round & 1), rng, report, producer);
    }
    return report.finish();
}
