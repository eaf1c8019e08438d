// Harness: q/k RMSNorm + half-split RoPE, v RMSNorm and the K/V cache write
// (kernels/cuda/NormRopeCache.cu) into bf16, fp16 and fp32 caches. FP64 host reference over the
// same fp32 inputs (the RoPE angle is float(invFreq·float(pos)) as transformers computes it;
// cos/sin in double). Caches are filled with NaN and every slot except the written ones must stay
// NaN; qOut is poisoned first.
// Programmatic launch: q, k and v written by a delayed producer kernel (HarnessCommon.h Producer),
// the kernel launched programmatically after it, 10 rounds over three fixtures.
#include "../../kernels/cuda/NormRopeCache.cu"
#include "HarnessCommon.h"

using namespace harness;
namespace gc = gemma::cuda;

namespace {

std::vector<float> inverseFrequencies(int headDim, int rotatedPairs, double theta) {
    std::vector<float> f(headDim / 2, 0.0f);
    for (int j = 0; j < rotatedPairs; ++j)
        f[j] = static_cast<float>(std::pow(theta, -2.0 * j / static_cast<double>(headDim)));
    return f;
}

struct Fixture {
    const char* name;
    int qHeads, kvHeads, headDim, rotatedPairs;
    double theta;
    bool shared;    // KV-shared layer: q only
    bool kEqV;      // v = raw k
    gc::KvDtype dtype;
    std::int64_t capacity;
    std::vector<int> positions;  // one per row
    bool separateCaches;         // cacheBatchStride = one cache per row
};

void runFixture(const Fixture& f, std::mt19937_64& rng, Report& report, Producer& producer) {
    const int rows = static_cast<int>(f.positions.size());
    const int d = f.headDim;
    const float eps = 1e-6f;
    const std::int64_t qStride = static_cast<std::int64_t>(f.qHeads) * d + 4;
    const std::int64_t kvStride = static_cast<std::int64_t>(f.kvHeads) * d + 4;
    const std::vector<float> q = randomFloats(rows * qStride, rng, -3.f, 3.f);
    const std::vector<float> k = randomFloats(rows * kvStride, rng, -3.f, 3.f);
    const std::vector<float> v = randomFloats(rows * kvStride, rng, -3.f, 3.f);
    const std::vector<float> qw = randomFloats(d, rng, 0.3f, 2.f), kw = randomFloats(d, rng, 0.3f, 2.f);
    const std::vector<float> invFreq = inverseFrequencies(d, f.rotatedPairs, f.theta);
    const std::int64_t cacheElems = f.capacity * f.kvHeads * d;
    const std::int64_t batchStride = f.separateCaches ? cacheElems : 0;
    const std::int64_t totalCache = f.separateCaches ? cacheElems * rows : cacheElems;
    const std::size_t eb = gc::kvElementBytes(f.dtype);

    DeviceBuffer<float> dq(q.size()), dk(k.size()), dv(v.size()), dqw(d), dkw(d), dinv(invFreq.size()),
        dqo(q.size());
    DeviceBuffer<int> dpos(rows);
    DeviceBuffer<std::uint8_t> kc(totalCache * eb), vc(totalCache * eb);
    producer.upload(dq, q);
    producer.upload(dk, k);
    producer.upload(dv, v);
    dqw.upload(qw);
    dkw.upload(kw);
    dinv.upload(invFreq);
    dpos.upload(f.positions);
    dqo.poison();
    kc.poison();
    vc.poison();
    gc::QkvNormRopeParams p;
    p.q = dq.ptr;
    p.qOut = dqo.ptr;
    p.qStride = qStride;
    p.k = f.shared ? nullptr : dk.ptr;
    p.v = f.kEqV ? dk.ptr : dv.ptr;
    p.kvStride = kvStride;
    p.qNormWeight = dqw.ptr;
    p.kNormWeight = dkw.ptr;
    p.invFreq = dinv.ptr;
    p.rotatedPairs = f.rotatedPairs;
    p.positions = dpos.ptr;
    p.kCache = kc.ptr;
    p.vCache = vc.ptr;
    p.kvDtype = f.dtype;
    p.capacity = f.capacity;
    p.cacheBatchStride = batchStride;
    p.qHeads = f.qHeads;
    p.kvHeads = f.kvHeads;
    p.headDim = d;
    p.rows = rows;
    p.eps = eps;
    p.programmaticLaunch = producer.programmatic();
    producer.produce();
    HCHECK_STATUS(gc::launchQkvNormRope(p, producer.stream()));
    HCHECK(cudaDeviceSynchronize());
    const std::vector<float> qo = dqo.download();
    const std::vector<std::uint8_t> kb = kc.download(), vb = vc.download();
    auto cacheValue = [&](const std::vector<std::uint8_t>& buf, std::int64_t idx) {
        return decodeKv(f.dtype, &buf[static_cast<std::size_t>(idx) * eb]);
    };

    std::vector<float> gotQ, gotK, gotV;
    std::vector<double> refQ, refK, refV;
    std::vector<char> written(static_cast<std::size_t>(totalCache), 0);
    std::vector<double> y;
    for (int r = 0; r < rows; ++r) {
        const int pos = f.positions[r];
        for (int h = 0; h < f.qHeads; ++h) {
            normRef(&q[r * qStride + h * d], qw.data(), d, eps, y);
            ropeRef(y, invFreq, f.rotatedPairs, pos);
            for (int i = 0; i < d; ++i) {
                gotQ.push_back(qo[r * qStride + h * d + i]);
                refQ.push_back(y[i]);
            }
        }
        if (f.shared) continue;
        const std::int64_t slot = pos % f.capacity;
        for (int h = 0; h < f.kvHeads; ++h) {
            const std::int64_t base = r * batchStride + (slot * f.kvHeads + h) * d;
            normRef(&k[r * kvStride + h * d], kw.data(), d, eps, y);
            ropeRef(y, invFreq, f.rotatedPairs, pos);
            for (int i = 0; i < d; ++i) {
                gotK.push_back(cacheValue(kb, base + i));
                refK.push_back(y[i]);
                written[base + i] = 1;
            }
            const float* vsrc = f.kEqV ? &k[r * kvStride + h * d] : &v[r * kvStride + h * d];
            normRef(vsrc, nullptr, d, eps, y);
            for (int i = 0; i < d; ++i) {
                gotV.push_back(cacheValue(vb, base + i));
                refV.push_back(y[i]);
            }
        }
    }
    bool qGapsNaN = true;
    for (int r = 0; r < rows; ++r)
        for (std::int64_t i = static_cast<std::int64_t>(f.qHeads) * d; i < qStride; ++i)
            qGapsNaN &= std::isnan(qo[r * qStride + i]);
    std::size_t stray = 0;
    for (std::int64_t i = 0; i < totalCache; ++i)
        if (!written[i]) stray += !std::isnan(cacheValue(kb, i)) + !std::isnan(cacheValue(vb, i));

    // The cache's rounding: bf16 keeps an 8-bit significand (half an ulp: 2^-8 relative); fp16
    // keeps 11 bits (2^-11), so bf16's bounds / 8; fp32 only the kernel's arithmetic.
    const bool bf16 = f.dtype == gc::KvDtype::BF16, fp16 = f.dtype == gc::KvDtype::F16;
    const double cacheRel = bf16 ? 3e-3 : fp16 ? 3e-3 / 8 : 3e-6;
    const double cacheAbs = bf16 ? 8e-3 : fp16 ? 8e-3 / 8 : 1e-5;
    const std::string name = producer.tag() + f.name;
    report.add("q " + name, compare(gotQ.data(), refQ.data(), gotQ.size()), 3e-6, 1e-5);
    if (!f.shared) {
        report.add("k cache " + name, compare(gotK.data(), refK.data(), gotK.size()), cacheRel, cacheAbs);
        report.add("v cache " + name, compare(gotV.data(), refV.data(), gotV.size()), cacheRel, cacheAbs);
    }
    report.addCheck("no stray writes " + name, stray == 0 && qGapsNaN,
                    "stray cache elements " + std::to_string(stray));
}

}  // namespace

int main() {
    requireDevice("test_qkv_rope");
    std::mt19937_64 rng(seedFromEnv());
    Report report("qkv_norm_rope");
    using gc::KvDtype;
    const std::vector<Fixture> fixtures = {
        {"12b sliding pos0", 16, 8, 256, 128, 1e4, false, false, KvDtype::BF16, 1024, {0}, false},
        {"12b sliding pos1023", 16, 8, 256, 128, 1e4, false, false, KvDtype::BF16, 1024, {1023}, false},
        {"12b sliding wrap pos1024", 16, 8, 256, 128, 1e4, false, false, KvDtype::BF16, 1024, {1024}, false},
        {"12b sliding pos5000 b3 shared cache", 16, 8, 256, 128, 1e4, false, false, KvDtype::BF16, 1024, {5000, 5001, 5002}, false},
        {"12b full k_eq_v pos20000", 16, 1, 512, 64, 1e6, false, true, KvDtype::BF16, 32768, {20000}, false},
        {"12b full k_eq_v fp32 cache", 16, 1, 512, 64, 1e6, false, true, KvDtype::F32, 4096, {4095}, false},
        {"31b sliding b2 separate caches", 32, 16, 256, 128, 1e4, false, false, KvDtype::BF16, 1024, {7, 300000}, true},
        {"31b full k_eq_v", 32, 4, 512, 64, 1e6, false, true, KvDtype::BF16, 8192, {8191}, false},
        {"e2b shared layer (q only)", 8, 1, 256, 128, 1e4, true, false, KvDtype::BF16, 512, {777}, false},
        {"gqa d128 fp32", 8, 2, 128, 64, 1e4, false, false, KvDtype::F32, 64, {130}, false},
        {"d128 partial rotation", 8, 2, 128, 16, 1e6, false, false, KvDtype::BF16, 64, {63}, false},
        // Small head dims of the golden and demo models: d 64 (one pair per lane) and d 32 (lanes
        // past 16 idle), sliding full rotation and a proportional partial one.
        {"demo d64 sliding", 8, 2, 64, 32, 1e4, false, false, KvDtype::F32, 159, {700}, false},
        {"golden d32 sliding rows", 4, 2, 32, 16, 1e4, false, false, KvDtype::F32, 47, {40, 41, 42}, false},
        {"golden d64 full partial k_eq_v", 4, 1, 64, 8, 1e6, false, true, KvDtype::BF16, 512, {79}, false},
        // fp16 caches (the engine's full-layer default), appended so that the programmatic rounds'
        // indices below still pick the same fixtures.
        {"12b full k_eq_v f16 cache", 16, 1, 512, 64, 1e6, false, true, KvDtype::F16, 32768, {20000}, false},
        {"golden d32 sliding rows f16", 4, 2, 32, 16, 1e4, false, false, KvDtype::F16, 47, {40, 41, 42}, false},
    };
    Producer ordinary(false);
    for (const auto& f : fixtures) runFixture(f, rng, report, ordinary);
    // Programmatic launch, 10 rounds: several rows on a shared cache, own caches, k_eq_v + fp32.
    const std::size_t pdlFixtures[] = {3, 6, 5};
    for (int round = 0; round < 10; ++round) {
        Producer producer(true);
        runFixture(fixtures[pdlFixtures[round % 3]], rng, report, producer);
    }
    return report.finish();
}
