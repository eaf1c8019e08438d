// Harness: Flash-Decoding attention (kernels/cuda/AttentionDecode.cu).
// - fixtures pin split boundaries, positions before the window fills, ring wrap, len 1,
//   len = window, len = allocation, MQA (16×1, d 512) and GQA (d 256, d 128), several query rows
//   (shared cache and one cache per row), bf16, fp16 and fp32 caches, forced and automatic splits;
// - every cache slot outside each row's live band is NaN, so one out-of-band read fails the run;
//   the output and the split workspace are poisoned with NaN before each launch;
// - FP64 host reference over the same rounded cache values and fp32 q;
// - parity oracle: a cuBLASLt pipeline QKᵀ → softmax → ·V over the same op instance;
// - programmatic launch: q and the caches written by a delayed producer kernel (HarnessCommon.h
//   Producer), both kernels launched programmatically after it, 10 rounds over three fixtures;
// - the fused form (fuseNormRope + fuseMerge: one launch) against the separate launches
//   (launchQkvNormRope, split, merge) on the same raw q/k/v: output and cache bit for bit, the
//   current slot NaN before the fused launch, the raw q untouched, the merge counters back to zero.
// - the tensor-core form (tensorCores: the prefill kernel over pieces of the band, then the merge)
//   on every one-row fixture, against the same FP64 reference with the prefill harness's fp16
//   tolerances (test_attention_prefill.cu says where they come from; same input distribution),
//   forced and automatic splits, empty pieces, programmatic launch, and its refusals; an fp16
//   cache bit for bit against an fp32 cache of the same fp16 values (the kernel stages both as the
//   same halves), at automatic and forced splits.
// - the cluster form (cluster: one launch, blocks of a cluster merged through distributed shared
//   memory) on every fused fixture: output within 1e-5 of max|out| of the separate launches, the
//   cache bit for bit (a KV-shared layer: not written), forced and automatic cluster sizes (1, 4,
//   8, 16), groups of 2, 4 and 8, refusals (groups above 8, two rows), and its time next to the
//   fused split kernel's; at head dim 256 the same checks and timings for the heads split over
//   two clusters (clusterHeadSplit, bit for bit against one cluster per kv head; refused at other
//   head dims and odd groups); on the timed full-layer fixtures (e2b's and e4b's shapes) also the
//   time of the engine's default form for full layers (norm + RoPE kernel, tensor-core pieces,
//   merge kernel).
// - the tensor-core pieces with the norm + RoPE inside (tensorCores + fuseNormRope) on every fused
//   fixture: output and caches bit for bit against the norm + RoPE kernel before the same pieces
//   and merge, the current slot NaN and the partials poisoned before each launch, the written K/V
//   rows against the FP64 norm + RoPE, programmatic launch after delayed producers of each input,
//   refusals; on the `pieces` fixtures (head dims 512, 256 and the goldens', groups 2, 8 and 16,
//   the current position at position 0, at a piece's first and last key and inside a piece of a
//   band over several, f32, bf16 and f16, a KV-shared layer) also the output against an FP64 reference
//   within the tensor-core tolerance.
#include "../../kernels/cuda/AttentionDecode.cu"
#include "../../kernels/cuda/AttentionPrefill.cu"
#include "../../kernels/cuda/NormRopeCache.cu"
#include "PhaseReport.h"  // the measurement build (measure_attention_phases) only
#include <functional>

#include "HarnessCommon.h"

using namespace harness;
namespace gc = gemma::cuda;

namespace {

struct Fixture {
    std::string name;
    int qHeads, kvHeads, headDim;
    int window;  // 0 = full layer
    std::int64_t capacity;
    gc::KvDtype dtype;
    std::vector<int> positions;  // per row
    bool separateCaches;
    int splits = 0;  // 0 = automatic
    bool oracle = false;
    bool timing = false;
    bool tensorCores = false;
};

// The tensor-core form's tolerances: test_attention_prefill.cu's kRelTol / kAbsTol (fp16 q, K, V
// and P; this harness draws q, K and V from the same distributions).
constexpr double kTensorCoreRelTol = 1e-3;
constexpr double kTensorCoreAbsTol = 2e-3;
// The fused pieces' fixtures against FP64: unit-RMS normed q (weights U(−w,w)) against U(−1,1)
// cached keys make scores of std ≈ 3.9 at d 512, sharper than the distribution the tolerances
// above were emulated over (0.5–1.9). tests/kernels/emulate_pieces_rounding.cpp, the same roundings
// over these fixtures (d 512; 300 seeds each): relative L2 up to 1.18e-3 (p99 9.6e-4) and
// max|err|/max|ref| up to 2.76e-3 (p99 2.1–2.3e-3); the GPU measured 8.6e-4 and 2.24e-3 at seed
// 149849228406940283 (version 32). Hence test_attention_prefill.cu's sharp tolerances here.
constexpr double kFusedPiecesRelTol = 2e-3;
constexpr double kFusedPiecesAbsTol = 4e-3;

std::int64_t bandStart(const Fixture& f, int pos) {
    std::int64_t start = 0;
    const std::int64_t len = pos + 1;
    if (f.window > 0) start = std::max<std::int64_t>(start, len - f.window);
    start = std::max<std::int64_t>(start, len - f.capacity);
    return start;
}

bool runFixture(const Fixture& f, std::mt19937_64& rng, Report& report, cublasLtHandle_t lt,
                std::vector<std::string>& perf, Producer& producer) {
    const int rows = static_cast<int>(f.positions.size());
    const int d = f.headDim, g = f.qHeads / f.kvHeads;
    const std::int64_t cacheElems = f.capacity * f.kvHeads * d;
    const std::int64_t nCaches = f.separateCaches ? rows : 1;
    const std::int64_t batchStride = f.separateCaches ? cacheElems : 0;

    // Host caches as doubles (the rounded stored values); NaN outside every live band.
    std::vector<double> kh(static_cast<std::size_t>(cacheElems * nCaches), std::nan("")),
        vh(kh.size(), std::nan(""));
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    auto stored = [&](float x) { return storedKvValue(f.dtype, x); };
    for (int r = 0; r < rows; ++r) {
        const std::int64_t c = f.separateCaches ? r : 0;
        for (std::int64_t pos = bandStart(f, f.positions[r]); pos <= f.positions[r]; ++pos) {
            const std::int64_t base = c * cacheElems + (pos % f.capacity) * f.kvHeads * d;
            if (!std::isnan(kh[base])) continue;  // shared cache: already filled by another row
            for (std::int64_t i = 0; i < static_cast<std::int64_t>(f.kvHeads) * d; ++i) {
                kh[base + i] = stored(u(rng));
                vh[base + i] = stored(u(rng));
            }
        }
    }
    const std::int64_t qStride = static_cast<std::int64_t>(f.qHeads) * d;
    std::vector<float> q(static_cast<std::size_t>(rows * qStride));
    for (auto& x : q) x = 0.25f * u(rng);

    // Upload caches in their dtype (the NaN slots stay NaN).
    const std::size_t eb = gc::kvElementBytes(f.dtype);
    const std::vector<std::uint8_t> kb = encodeKvCache(f.dtype, kh), vb = encodeKvCache(f.dtype, vh);
    DeviceBuffer<std::uint8_t> dk(kb.size()), dv(vb.size());
    producer.upload(dk, kb);
    producer.upload(dv, vb);
    DeviceBuffer<float> dq(q.size()), dout(q.size());
    producer.upload(dq, q);
    DeviceBuffer<int> dpos(rows);
    dpos.upload(f.positions);

    gc::AttentionDecodeParams p;
    p.bulkCopies = bulkCopiesByDefault();
    p.q = dq.ptr;
    p.qStride = qStride;
    p.kCache = dk.ptr;
    p.vCache = dv.ptr;
    p.kvDtype = f.dtype;
    p.capacity = f.capacity;
    p.cacheBatchStride = batchStride;
    p.qHeads = f.qHeads;
    p.kvHeads = f.kvHeads;
    p.headDim = d;
    p.positions = dpos.ptr;
    p.window = f.window;
    p.maxBand = f.window > 0 ? std::min<std::int64_t>(f.window, f.capacity) : f.capacity;
    p.scale = 1.0f;
    p.out = dout.ptr;
    p.outStride = qStride;
    p.rows = rows;
    p.splits = f.splits;
    p.tensorCores = f.tensorCores;
    const std::size_t wsBytes = gc::attentionDecodeWorkspaceBytes(p);
    DeviceBuffer<float> dws(wsBytes / sizeof(float));
    dws.poison();
    p.workspace = dws.ptr;
    p.workspaceBytes = wsBytes;
    dout.poison();
    p.programmaticLaunch = producer.programmatic();
    producer.produce();
    HCHECK_STATUS(gc::launchAttentionDecode(p, producer.stream()));
    HCHECK(cudaDeviceSynchronize());
    const std::vector<float> out = dout.download();

    // FP64 reference.
    std::vector<double> ref(out.size());
    for (int r = 0; r < rows; ++r) {
        const std::int64_t c = f.separateCaches ? r : 0;
        const std::int64_t start = bandStart(f, f.positions[r]);
        const std::int64_t len = f.positions[r] + 1;
        for (int h = 0; h < f.qHeads; ++h) {
            const int kvh = h / g;
            std::vector<double> s;
            double mx = -INFINITY;
            for (std::int64_t pos = start; pos < len; ++pos) {
                const std::int64_t base = c * cacheElems + ((pos % f.capacity) * f.kvHeads + kvh) * d;
                double acc = 0;
                for (int i = 0; i < d; ++i) acc += double(q[r * qStride + h * d + i]) * kh[base + i];
                s.push_back(acc);
                mx = std::max(mx, acc);
            }
            double l = 0;
            for (auto& x : s) { x = std::exp(x - mx); l += x; }
            for (int i = 0; i < d; ++i) {
                double acc = 0;
                for (std::int64_t pos = start; pos < len; ++pos) {
                    const std::int64_t base = c * cacheElems + ((pos % f.capacity) * f.kvHeads + kvh) * d;
                    acc += s[pos - start] * vh[base + i];
                }
                ref[r * qStride + h * d + i] = acc / l;
            }
        }
    }
    const int splitsUsed = gc::attentionDecodeSplits(p);
    const std::string note = "splits " + std::to_string(splitsUsed);
    const double tol = f.tensorCores ? kTensorCoreRelTol : 1e-4, absTol = f.tensorCores ? kTensorCoreAbsTol : 1e-4;
    const std::string form = f.tensorCores ? "tensor cores " : "";
    bool ok = report.add("attn " + producer.tag() + form + f.name, compare(out.data(), ref.data(), out.size()), tol, absTol, note);

    // Parity oracle: cuBLASLt S = Q·Kᵀ, softmax, O = P·V, per (row, kv head), over the band.
    if (lt && f.oracle) {
        std::vector<float> oracle(out.size());
        for (int r = 0; r < rows; ++r) {
            const std::int64_t c = f.separateCaches ? r : 0;
            const std::int64_t start = bandStart(f, f.positions[r]);
            const int n = static_cast<int>(f.positions[r] + 1 - start);
            for (int kvh = 0; kvh < f.kvHeads; ++kvh) {
                std::vector<float> K(static_cast<std::size_t>(n) * d), V(K.size()), Q(static_cast<std::size_t>(g) * d);
                for (int t = 0; t < n; ++t) {
                    const std::int64_t base = c * cacheElems + (((start + t) % f.capacity) * f.kvHeads + kvh) * d;
                    for (int i = 0; i < d; ++i) {
                        K[t * d + i] = static_cast<float>(kh[base + i]);
                        V[t * d + i] = static_cast<float>(vh[base + i]);
                    }
                }
                std::memcpy(Q.data(), &q[r * qStride + static_cast<std::int64_t>(kvh) * g * d], sizeof(float) * g * d);
                DeviceBuffer<float> dK(K.size()), dV(V.size()), dQ(Q.size()), dS(static_cast<std::size_t>(g) * n),
                    dO(static_cast<std::size_t>(g) * d);
                dK.upload(K);
                dV.upload(V);
                dQ.upload(Q);
                // Sᵀ (n × g, col-major) = K(n×d) · Qᵀ: A = K stored col-major d×n, transposed.
                ltGemmF32(lt, true, false, n, g, d, dK.ptr, d, dQ.ptr, d, dS.ptr, n);
                HCHECK(cudaDeviceSynchronize());
                std::vector<float> S = dS.download();
                std::vector<float> P(S.size());
                for (int h = 0; h < g; ++h) {
                    double mx = -INFINITY, l = 0;
                    for (int t = 0; t < n; ++t) mx = std::max(mx, double(S[h * n + t]));
                    for (int t = 0; t < n; ++t) l += std::exp(double(S[h * n + t]) - mx);
                    for (int t = 0; t < n; ++t) P[h * n + t] = static_cast<float>(std::exp(double(S[h * n + t]) - mx) / l);
                }
                DeviceBuffer<float> dP(P.size());
                dP.upload(P);
                // Oᵀ (d × g) = Vᵀ(d×n) · Pᵀ(n×g): V stored col-major d×n, P stored col-major n×g.
                ltGemmF32(lt, false, false, d, g, n, dV.ptr, d, dP.ptr, n, dO.ptr, d);
                HCHECK(cudaDeviceSynchronize());
                const std::vector<float> O = dO.download();
                std::memcpy(&oracle[r * qStride + static_cast<std::int64_t>(kvh) * g * d], O.data(), sizeof(float) * g * d);
            }
        }
        std::vector<double> od(oracle.begin(), oracle.end());
        ok &= report.add("  vs cuBLASLt pipeline " + form + f.name, compare(out.data(), od.data(), out.size()), tol, absTol);
    }

    if (f.timing) {
        const double us = medianMicros([&](int) { gc::launchAttentionDecode(p, nullptr); }, 5, 30);
        double bytes = 0;
        for (int r = 0; r < rows; ++r)
            bytes += double(f.positions[r] + 1 - bandStart(f, f.positions[r])) * f.kvHeads * d * 2 * eb;
        char line[200];
        std::snprintf(line, sizeof line, "%-40s %8.1f us  %7.1f GB/s (live K+V band, %d splits)",
                      (form + f.name).c_str(), us, bytes / us * 1e-3, splitsUsed);
        perf.push_back(line);
    }
    return ok;
}

// The tensor-core form with an fp16 cache against an fp32 cache of the same fp16-representable
// values (a full MQA layer at head dim 512, one row): the prefill kernel copies an fp16 cache's
// K/V as they are and rounds an fp32 cache's to fp16 (nearest even) when staging them, so both
// stage the same halves and the outputs must be the same bits (KvCache.h: the engine's FullF16
// default rests on it). `splits` 0: the automatic count; where that differs between the dtypes
// (the fp32 staging ring is larger, which may change the occupancy), both run at the fp32 count,
// since different pieces merge in a different order.
struct BitIdentityCase {
    std::string name;
    int position;
    std::int64_t capacity;
    int splits;  // 0 = automatic
};

void tensorCoreF16MatchesF32(const BitIdentityCase& c, std::mt19937_64& rng, Report& report) {
    constexpr int qHeads = 16, kvHeads = 1, headDim = 512;
    const std::int64_t slotElems = static_cast<std::int64_t>(kvHeads) * headDim;
    // fp16 values in the live band, NaN in every other slot (never read).
    const KvBand band = fp16KvBand(c.capacity, slotElems, std::max<std::int64_t>(0, c.position + 1 - c.capacity), c.position, rng);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<float> q(static_cast<std::size_t>(qHeads) * headDim);
    for (auto& x : q) x = 0.25f * u(rng);
    DeviceBuffer<float> dq(q.size()), dout(q.size());
    dq.upload(q);
    DeviceBuffer<int> dpos(1);
    dpos.upload(std::vector<int>{c.position});

    // The same launch over each cache: forms[0] fp32, forms[1] fp16.
    struct Form {
        gc::KvDtype dtype = gc::KvDtype::F32;
        DeviceBuffer<std::uint8_t> k, v;
        gc::AttentionDecodeParams params;
    };
    Form forms[2];
    forms[1].dtype = gc::KvDtype::F16;
    for (Form& form : forms) {
        const auto kBytes = encodeKvCache(form.dtype, band.keys), vBytes = encodeKvCache(form.dtype, band.values);
        form.k = DeviceBuffer<std::uint8_t>(kBytes.size());
        form.v = DeviceBuffer<std::uint8_t>(vBytes.size());
        form.k.upload(kBytes);
        form.v.upload(vBytes);
        gc::AttentionDecodeParams& p = form.params;
        p.bulkCopies = bulkCopiesByDefault();
        p.q = dq.ptr;
        p.qStride = static_cast<std::int64_t>(qHeads) * headDim;
        p.kCache = form.k.ptr;
        p.vCache = form.v.ptr;
        p.kvDtype = form.dtype;
        p.capacity = c.capacity;
        p.qHeads = qHeads;
        p.kvHeads = kvHeads;
        p.headDim = headDim;
        p.positions = dpos.ptr;
        p.maxBand = c.capacity;
        p.scale = 1.0f;
        p.out = dout.ptr;
        p.outStride = p.qStride;
        p.splits = c.splits;
        p.tensorCores = true;
    }
    const int f32Splits = gc::attentionDecodeSplits(forms[0].params), f16Splits = gc::attentionDecodeSplits(forms[1].params);
    std::string note = "splits " + std::to_string(f32Splits);
    if (f16Splits != f32Splits) {
        note += " (automatic for fp16: " + std::to_string(f16Splits) + ", forced to fp32's)";
        forms[1].params.splits = f32Splits;
    }
    std::vector<float> outs[2];
    for (int i = 0; i < 2; ++i) {
        gc::AttentionDecodeParams& p = forms[i].params;
        const std::size_t wsBytes = gc::attentionDecodeWorkspaceBytes(p);
        DeviceBuffer<std::uint8_t> workspace(wsBytes);
        workspace.poison();
        p.workspace = workspace.ptr;
        p.workspaceBytes = wsBytes;
        dout.poison();
        HCHECK_STATUS(gc::launchAttentionDecode(p, nullptr));
        HCHECK(cudaDeviceSynchronize());
        outs[i] = dout.download();
    }
    std::string why;
    const bool ok = sameBitsAndFinite(outs[0], outs[1], why);
    report.addCheck("tensor cores " + c.name + ": f16 cache bit-identical to f32", ok, note + (why.empty() ? "" : ", " + why));
}


// The fused attention of one decode row against launchQkvNormRope + split + merge.
struct FusedFixture {
    std::string name;
    int qHeads, kvHeads, headDim;
    int window;  // 0 = full layer
    std::int64_t capacity;
    gc::KvDtype dtype;
    int position;
    bool kvShared;  // q only: the cache is not written
    int rotatedPairs;
    int splits = 0;  // 0 = automatic
    bool timing = false;  // time the fused launch at its automatic and at forced split counts
    // Only for its timings (a longer band of a shape checked elsewhere): skipped in quick mode,
    // where the sanitizers run and racecheck over long bands outlasts its time limit.
    bool timingOnly = false;
    // Norm weights drawn so that the scores spread as in the tensor-core fixtures (std ≈ 2, which
    // the pieces' fp16 tolerance is for), and the pieces with the norm + RoPE inside checked
    // against an FP64 reference too (every fixture checks them against the separate launches).
    bool pieces = false;
};

void fusedCase(const FusedFixture& f, std::mt19937_64& rng, Report& report, std::vector<std::string>& perf) {
    const int d = f.headDim;
    const std::size_t eb = gc::kvElementBytes(f.dtype);
    const std::int64_t slotElems = static_cast<std::int64_t>(f.kvHeads) * d;
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    auto randoms = [&](std::size_t n, float scale) {
        std::vector<float> v(n);
        for (auto& x : v) x = u(rng) * scale;
        return v;
    };
    // Cache bytes: the live band before the current position random, everything else NaN (0xFF).
    std::vector<std::uint8_t> cache(static_cast<std::size_t>(f.capacity * slotElems) * eb, 0xFF);
    const std::int64_t len = f.position + 1;
    std::int64_t start = 0;
    if (f.window > 0) start = std::max<std::int64_t>(start, len - f.window);
    start = std::max<std::int64_t>(start, len - f.capacity);
    auto fillBand = [&](std::vector<std::uint8_t>& bytes, std::int64_t last) {
        for (std::int64_t pos = start; pos <= last; ++pos) {
            for (std::int64_t i = 0; i < slotElems; ++i) {
                const std::size_t at = static_cast<std::size_t>(((pos % f.capacity) * slotElems + i)) * eb;
                encodeKv(f.dtype, u(rng), &bytes[at]);
            }
        }
    };
    std::vector<std::uint8_t> kBytes = cache, vBytes = cache;
    // A KV-shared layer reads the current position from the cache (its source layer wrote it).
    fillBand(kBytes, f.kvShared ? len - 1 : len - 2);
    fillBand(vBytes, f.kvShared ? len - 1 : len - 2);
    const auto q = randoms(static_cast<std::size_t>(f.qHeads) * d, 3.0f);
    const auto k = randoms(static_cast<std::size_t>(slotElems), 3.0f);
    const auto v = randoms(static_cast<std::size_t>(slotElems), 3.0f);
    // Scores q·k of normed heads: d terms of variance (weightScale²/3)², std sqrt(d)·weightScale²/3.
    const float weightScale = f.pieces ? static_cast<float>(std::min(1.0, std::sqrt(6.0 / std::sqrt(static_cast<double>(d))))) : 1.0f;
    const auto qw = randoms(static_cast<std::size_t>(d), weightScale), kw = randoms(static_cast<std::size_t>(d), weightScale);
    std::vector<float> freq(static_cast<std::size_t>(d / 2));
    for (int j = 0; j < d / 2; ++j) freq[static_cast<std::size_t>(j)] = std::pow(10000.0f, -2.0f * j / d);

    DeviceBuffer<float> dq(q.size()), dk(k.size()), dv(v.size()), dqw(qw.size()), dkw(kw.size()), dfreq(freq.size()), dout(q.size());
    DeviceBuffer<std::uint8_t> dkc(kBytes.size()), dvc(vBytes.size());
    DeviceBuffer<int> dpos(1);
    dk.upload(k);
    dv.upload(v);
    dqw.upload(qw);
    dkw.upload(kw);
    dfreq.upload(freq);
    dpos.upload(std::vector<int>{f.position});

    gc::QkvNormRopeParams r;
    r.q = dq.ptr;
    r.qOut = dq.ptr;
    r.qStride = static_cast<std::int64_t>(f.qHeads) * d;
    if (!f.kvShared) {
        r.k = dk.ptr;
        r.v = dv.ptr;
        r.kNormWeight = dkw.ptr;
        r.kCache = dkc.ptr;
        r.vCache = dvc.ptr;
        r.capacity = f.capacity;
    }
    r.kvStride = slotElems;
    r.qNormWeight = dqw.ptr;
    r.invFreq = dfreq.ptr;
    r.rotatedPairs = f.rotatedPairs;
    r.positions = dpos.ptr;
    r.kvDtype = f.dtype;
    r.qHeads = f.qHeads;
    r.kvHeads = f.kvHeads;
    r.headDim = d;
    r.eps = 1e-6f;
    r.programmaticLaunch = true;

    gc::AttentionDecodeParams p;
    p.bulkCopies = bulkCopiesByDefault();
    p.q = dq.ptr;
    p.qStride = r.qStride;
    p.kCache = dkc.ptr;
    p.vCache = dvc.ptr;
    p.kvDtype = f.dtype;
    p.capacity = f.capacity;
    p.qHeads = f.qHeads;
    p.kvHeads = f.kvHeads;
    p.headDim = d;
    p.positions = dpos.ptr;
    p.window = f.window;
    p.maxBand = f.window > 0 ? std::min<std::int64_t>(f.window, f.capacity) : f.capacity;
    p.out = dout.ptr;
    p.outStride = r.qStride;
    p.splits = f.splits;
    p.programmaticLaunch = true;
    const std::size_t wsBytes = gc::attentionDecodeWorkspaceBytes(p);
    DeviceBuffer<std::uint8_t> dws(wsBytes);
    p.workspace = dws.ptr;
    p.workspaceBytes = wsBytes;

    // Separate launches: the norm + RoPE kernel (q in place), then `form`, on fresh raw inputs and
    // caches, a poisoned output and workspace; the output (q left raw again).
    const auto separateLaunches = [&](const gc::AttentionDecodeParams& form, DeviceBuffer<std::uint8_t>& workspace) {
        dq.upload(q);
        dk.upload(k);
        dv.upload(v);
        dkc.upload(kBytes);
        dvc.upload(vBytes);
        workspace.poison();
        dout.poison();
        HCHECK_STATUS(gc::launchQkvNormRope(r, nullptr));
        HCHECK_STATUS(gc::launchAttentionDecode(form, nullptr));
        HCHECK(cudaDeviceSynchronize());
        dq.upload(q);
        return dout.download();
    };
    const auto wantOut = separateLaunches(p, dws);
    const auto wantK = dkc.download(), wantV = dvc.download();

    // Fused, three launches (the counters must come back to zero each time; one in quick mode).
    HCHECK(cudaMemset(dws.ptr, 0xFF, wsBytes));
    HCHECK(cudaMemset(dws.ptr, 0, 1024));  // the counters start at zero (the backend zeroes them once)
    p.fuseNormRope = true;
    p.normRope = r;
    p.fuseMerge = true;
    // Three launches of `form` (one in quick mode: the sanitizer runs) on fresh caches and a
    // poisoned output (and `prepare` run first): each output to `visit`, whether every launch left
    // the caches equal to the separate launches'.
    const int launches = quickMode() ? 1 : 3;
    auto repeatedLaunches = [&](const gc::AttentionDecodeParams& form, const std::function<void(const std::vector<float>&)>& visit,
                                const std::function<void()>& prepare = {}) {
        bool cachesSame = true;
        for (int launch = 0; launch < launches; ++launch) {
            if (prepare) prepare();
            dkc.upload(kBytes);
            dvc.upload(vBytes);
            dout.poison();
            HCHECK_STATUS(gc::launchAttentionDecode(form, nullptr));
            HCHECK(cudaDeviceSynchronize());
            visit(dout.download());
            cachesSame &= dkc.download() == wantK && dvc.download() == wantV;
        }
        return cachesSame;
    };
    bool same = true;
    const bool cacheSame = repeatedLaunches(p, [&](const std::vector<float>& out) {
        same &= std::memcmp(out.data(), wantOut.data(), out.size() * sizeof(float)) == 0;
    });
    const auto qAfter = dq.download();
    const auto ws = dws.download();
    bool countersZero = true;
    for (std::size_t i = 0; i < 1024; ++i) countersZero &= ws[i] == 0;
    report.addCheck("fused " + f.name + ": output bit-identical to norm+RoPE, split, merge", same, "");
    report.addCheck("fused " + f.name + ": K/V cache bit-identical, raw q untouched, counters zero",
                    cacheSame && qAfter == q && countersZero,
                    std::string(cacheSame ? "" : "cache differs; ") + (qAfter == q ? "" : "q written; ") + (countersZero ? "" : "counters left"));
    // Misuse is refused: two rows, or a normRope that does not describe this launch.
    gc::AttentionDecodeParams bad = p;
    bad.normRope.headDim = d * 2;
    report.addCheck("fused " + f.name + ": mismatched normRope refused",
                    gc::launchAttentionDecode(bad, nullptr) == gc::KernelStatus::InvalidArgument, "");
    // The cluster form (AttentionDecodeParams::cluster) on the same raw q/k/v, three launches (one
    // in quick mode):
    // output within fp32 rounding of the separate launches (another summation order), the K/V
    // cache bit-identical, the raw q untouched. Groups above 8 query heads are refused.
    const int group = f.qHeads / f.kvHeads;
    gc::AttentionDecodeParams c = p;
    c.fuseMerge = false;
    c.cluster = true;
    c.workspace = nullptr;  // the cluster form reads none
    c.workspaceBytes = 0;
    c.splits = (f.splits > 0 && (f.splits & (f.splits - 1)) == 0 && f.splits <= 16) ? f.splits : 0;
    if (group > gc::kClusterAttentionMaxGroup) {
        report.addCheck("cluster " + f.name + ": a group of " + std::to_string(group) + " refused",
                        gc::launchAttentionDecode(c, nullptr) == gc::KernelStatus::InvalidArgument, "");
    } else {
        // The checks of one cluster form (one cluster per kv head; at head dim 256 also the head
        // split, which must meet the same bounds). `last`: the last launch's output.
        const auto clusterChecks = [&](const gc::AttentionDecodeParams& form, const std::string& tag, std::vector<float>& last) {
            Compare worst;  // maxAbs over every launch (maxRef is wantOut's in each)
            bool finite = true;
            const bool clusterCacheSame = repeatedLaunches(form, [&](const std::vector<float>& out) {
                last = out;
                const Compare c = compare(out.data(), wantOut.data(), out.size());
                finite &= c.nonFinite == 0;
                worst.maxAbs = std::max(worst.maxAbs, c.maxAbs);
                worst.maxRef = c.maxRef;
            });
            const double rel = worst.maxRelative();
            char detail[160];
            std::snprintf(detail, sizeof detail, "max |diff| %.3g of max|out| %.3g (rel %.3g), cluster size %d", worst.maxAbs, worst.maxRef,
                          rel, gc::attentionDecodeSplits(form));
            report.addCheck(tag + f.name + ": output within fp32 rounding of norm+RoPE, split, merge", finite && rel <= 1e-5,
                            detail);
            report.addCheck(tag + f.name + ": K/V cache bit-identical, raw q untouched", clusterCacheSame && dq.download() == q, "");
            // prefetchBand, launched programmatically after delayed producers of q, k, v (and, for a
            // KV-shared layer, of the current position's cache rows, which the engine writes in the
            // same step): only the band's earlier rows may be read before the wait, so reading
            // anything else early meets the NaN poison.
            {
                Producer producer(true);
                gc::AttentionDecodeParams early = form;
                early.prefetchBand = true;
                early.programmaticLaunch = true;
                // The producers run in stream order and only the last one overlaps the kernel, so the
                // input that must not be read early is produced last: the current rows of a
                // KV-shared layer (the cache bytes the engine writes in the same step), else q.
                dkc.upload(kBytes);
                dvc.upload(vBytes);
                if (f.kvShared) {
                    producer.upload(dq, q);
                    const std::size_t at = static_cast<std::size_t>((f.position % f.capacity) * slotElems) * eb;
                    const std::size_t n = static_cast<std::size_t>(slotElems) * eb;
                    // Two producers: only the V row's is last, so an early read of the V row is what
                    // fails here; the kernel loads the K and V rows in the same statement.
                    producer.uploadBytes(dkc.ptr + at, std::vector<std::uint8_t>(kBytes.begin() + at, kBytes.begin() + at + n));
                    producer.uploadBytes(dvc.ptr + at, std::vector<std::uint8_t>(vBytes.begin() + at, vBytes.begin() + at + n));
                } else {
                    producer.upload(dk, k);
                    producer.upload(dv, v);
                    producer.upload(dq, q);
                }
                dout.poison();
                producer.produce();
                HCHECK_STATUS(gc::launchAttentionDecode(early, producer.stream()));
                HCHECK(cudaDeviceSynchronize());
                const auto out = dout.download();
                const Compare earlyDiff = compare(out.data(), wantOut.data(), out.size());
                const bool earlyFinite = earlyDiff.nonFinite == 0;
                const double earlyRel = earlyDiff.maxRelative();
                report.addCheck(tag + f.name + ": band prefetched before the wait, after delayed producers",
                                earlyFinite && earlyRel <= 1e-5 && dkc.download() == wantK && dvc.download() == wantV,
                                "rel " + std::to_string(earlyRel));
            }
        };
        std::vector<float> oneCluster, other;
        clusterChecks(c, "cluster ", oneCluster);
        // The head split (clusterHeadSplit 2): at the same cluster size the same arithmetic per
        // head as one cluster per kv head, so the same bits, where both compute the scores warp
        // per key: the split never sums them keys over lanes, one cluster per kv head does from
        // kClusterKeysOverLanesFrom keys per block (AttentionDecode.h). Longer pieces: within
        // fp32 rounding of it. Refused off head dim 256 or odd groups.
        gc::AttentionDecodeParams split = c;
        split.clusterHeadSplit = 2;
        if (gc::clusterHeadSplitFits(d, group)) {
            clusterChecks(split, "cluster heads split ", other);
            // At one cluster per kv head's size (forced: the automatic size may differ with twice
            // the clusters).
            gc::AttentionDecodeParams sameSize = split;
            sameSize.splits = gc::attentionDecodeSplits(c);
            const bool cachesSame = repeatedLaunches(sameSize, [&](const std::vector<float>& out) { other = out; });
            const std::int64_t piece = (len - start + sameSize.splits - 1) / sameSize.splits;  // keys per block
            const bool sameForm = !gc::clusterKeysOverLanes(d, false) || piece < gc::kClusterKeysOverLanesFrom;
            const std::string at = "cluster size " + std::to_string(sameSize.splits) + ", " + std::to_string(piece) + " keys per block";
            if (sameForm) {
                report.addCheck("cluster heads split " + f.name + ": bit-identical to one cluster per kv head at the same size",
                                cachesSame && std::memcmp(other.data(), oneCluster.data(), other.size() * sizeof(float)) == 0, at);
            } else {
                const Compare c = compare(other.data(), oneCluster.data(), other.size());
                const double rel = c.nonFinite == 0 ? c.maxRelative() : INFINITY;  // a non-finite output fails (std::max skipped NaN differences here before)
                report.addCheck("cluster heads split " + f.name + ": within fp32 rounding of one cluster per kv head (scores keys over lanes there)",
                                cachesSame && rel <= 1e-5, at + ", rel " + std::to_string(rel));
            }
        } else {
            report.addCheck("cluster heads split " + f.name + ": refused (head dim " + std::to_string(d) + ", group " +
                                std::to_string(group) + ")",
                            gc::launchAttentionDecode(split, nullptr) == gc::KernelStatus::InvalidArgument, "");
        }
        gc::AttentionDecodeParams twoRows = c;
        twoRows.rows = 2;
        report.addCheck("cluster " + f.name + ": two rows refused",
                        gc::launchAttentionDecode(twoRows, nullptr) == gc::KernelStatus::InvalidArgument, "");
    }
    // The tensor-core pieces with the norm + RoPE inside (tensorCores + fuseNormRope: the CUDA
    // backend's full layers under OpenOptions::fusedPiecesNormRope), `launches` times on fresh
    // caches (the current slot NaN), a poisoned output and poisoned partials: against the norm +
    // RoPE kernel before the same pieces and merge, bit for bit (output and caches: the fp16 q
    // fragments round the same fp32 values); the written rows against the FP64 norm + RoPE; on
    // `pieces` fixtures the output against an FP64 reference within the pieces' tolerance; then
    // programmatically after delayed producers of each input in turn; and its refusals.
    {
        gc::AttentionDecodeParams plain = p;
        plain.fuseNormRope = false;
        plain.fuseMerge = false;
        plain.tensorCores = true;
        gc::AttentionDecodeParams fusedPieces = plain;
        fusedPieces.fuseNormRope = true;
        fusedPieces.normRope = r;
        const std::size_t pieceBytes = std::max(gc::attentionDecodeWorkspaceBytes(plain), gc::attentionDecodeWorkspaceBytes(fusedPieces));
        DeviceBuffer<std::uint8_t> pieceWs(pieceBytes);
        for (gc::AttentionDecodeParams* form : {&plain, &fusedPieces}) {
            form->workspace = pieceWs.ptr;
            form->workspaceBytes = pieceBytes;
        }
        const std::string note = "splits " + std::to_string(gc::attentionDecodeSplits(fusedPieces));
        const auto wantPieces = separateLaunches(plain, pieceWs);
        bool same = true;
        std::vector<float> out;
        const bool cachesSame = repeatedLaunches(
            fusedPieces,
            [&](const std::vector<float>& launched) {
                out = launched;
                same &= std::memcmp(out.data(), wantPieces.data(), out.size() * sizeof(float)) == 0;
            },
            [&] { pieceWs.poison(); });
        const auto writtenK = dkc.download(), writtenV = dvc.download();  // the last launch's
        report.addCheck("pieces " + f.name + ": output bit-identical to norm+RoPE, pieces, merge", same, note);
        report.addCheck("pieces " + f.name + ": K/V cache bit-identical, raw q untouched", cachesSame && dq.download() == q,
                        cachesSame ? "" : "cache differs");
        // The pieces' K/V tiles staged by every thread's cp.async instead of the default (bulk copies
        // on sm_90+): the same bytes staged and converted, so the same bits and the same caches.
        if (fusedPieces.bulkCopies) {
            gc::AttentionDecodeParams threadCopies = fusedPieces;
            threadCopies.bulkCopies = false;
            bool sameStaging = true;
            const bool stagingCachesSame = repeatedLaunches(
                threadCopies,
                [&](const std::vector<float>& launched) {
                    sameStaging &= std::memcmp(launched.data(), out.data(), out.size() * sizeof(float)) == 0;
                },
                [&] { pieceWs.poison(); });
            report.addCheck("pieces " + f.name + ": cp.async staging bit-identical to the default staging", sameStaging && stagingCachesSame,
                            stagingCachesSame ? note : "cache differs");
        }
        // One stored cache element as a double.
        const auto storedValue = [&](const std::vector<std::uint8_t>& bytes, std::int64_t index) -> double {
            return decodeKv(f.dtype, &bytes[static_cast<std::size_t>(index) * eb]);
        };
        const std::int64_t slotBase = f.position % f.capacity * slotElems;
        if (!f.kvShared) {
            // fp32 within 1e-5 of the row's largest element; bf16 and fp16 also the storage's half
            // ulp (kvRoundingBound: 2^-8 relative for bf16's 8-bit significand, 2^-11 for fp16's 11).
            double worst = 0.0;
            bool close = true;
            for (int h = 0; h < f.kvHeads; ++h) {
                std::vector<double> refK, refV;
                normRef(&k[static_cast<std::size_t>(h) * d], kw.data(), d, r.eps, refK);
                ropeRef(refK, freq, f.rotatedPairs, f.position);
                normRef(&v[static_cast<std::size_t>(h) * d], nullptr, d, r.eps, refV);
                for (int which = 0; which < 2; ++which) {
                    const std::vector<double>& ref = which == 0 ? refK : refV;
                    const std::vector<std::uint8_t>& bytes = which == 0 ? writtenK : writtenV;
                    double largest = 0.0;
                    for (double x : ref) largest = std::max(largest, std::fabs(x));
                    for (int i = 0; i < d; ++i) {
                        const double got = storedValue(bytes, slotBase + static_cast<std::int64_t>(h) * d + i);
                        const double diff = std::fabs(got - ref[static_cast<std::size_t>(i)]);
                        close &= diff <= kvRoundingBound(f.dtype, ref[static_cast<std::size_t>(i)]) + 1e-5 * largest;
                        worst = std::max(worst, diff / largest);
                    }
                }
            }
            report.addCheck("pieces " + f.name + ": K/V rows written as the FP64 norm + RoPE", close,
                            "max |diff| / max|row| " + std::to_string(worst));
        }
        if (f.pieces) {
            // FP64 attention over the FP64 normed, rotated q and the cache as stored (the current
            // rows as the kernel wrote them, checked above).
            const int group = f.qHeads / f.kvHeads;
            std::vector<double> ref(out.size());
            for (int h = 0; h < f.qHeads; ++h) {
                const int kvh = h / group;
                std::vector<double> qRef;
                normRef(&q[static_cast<std::size_t>(h) * d], qw.data(), d, r.eps, qRef);
                ropeRef(qRef, freq, f.rotatedPairs, f.position);
                const auto keyOrValue = [&](bool key, std::int64_t pos, int i) {
                    const bool current = pos == f.position && !f.kvShared;
                    const std::vector<std::uint8_t>& bytes = key ? (current ? writtenK : kBytes) : (current ? writtenV : vBytes);
                    return storedValue(bytes, pos % f.capacity * slotElems + static_cast<std::int64_t>(kvh) * d + i);
                };
                std::vector<double> weights;
                double largest = -INFINITY, sum = 0.0;
                for (std::int64_t pos = start; pos < len; ++pos) {
                    double score = 0.0;
                    for (int i = 0; i < d; ++i) score += qRef[static_cast<std::size_t>(i)] * keyOrValue(true, pos, i);
                    weights.push_back(score);
                    largest = std::max(largest, score);
                }
                for (double& w : weights) sum += (w = std::exp(w - largest));
                for (int i = 0; i < d; ++i) {
                    double acc = 0.0;
                    for (std::int64_t pos = start; pos < len; ++pos) acc += weights[static_cast<std::size_t>(pos - start)] * keyOrValue(false, pos, i);
                    ref[static_cast<std::size_t>(h) * d + i] = acc / sum;
                }
            }
            report.add("pieces " + f.name + " vs FP64", compare(out.data(), ref.data(), out.size()), kFusedPiecesRelTol, kFusedPiecesAbsTol,
                       note);
        }
        // Programmatic launch: only the last producer overlaps the kernel, so each input it reads
        // after its wait is produced last once (q; then k, or for a KV-shared layer the current
        // position's cache rows, which its source layer writes in the same step).
        for (const bool queryLast : {true, false}) {
            Producer producer(true);
            gc::AttentionDecodeParams early = fusedPieces;
            early.programmaticLaunch = true;
            dkc.upload(kBytes);
            dvc.upload(vBytes);
            pieceWs.poison();
            dout.poison();
            const std::size_t at = static_cast<std::size_t>(slotBase) * eb, rowBytes = static_cast<std::size_t>(slotElems) * eb;
            const auto rows = [&](std::uint8_t* device, const std::vector<std::uint8_t>& bytes) {
                producer.uploadBytes(device + at, std::vector<std::uint8_t>(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                                                                            bytes.begin() + static_cast<std::ptrdiff_t>(at + rowBytes)));
            };
            // V's input, then K's: the raw v and k, or a KV-shared layer's current cache rows.
            const auto keysAndValues = [&] {
                if (f.kvShared) {
                    rows(dvc.ptr, vBytes);
                    rows(dkc.ptr, kBytes);
                } else {
                    producer.upload(dv, v);
                    producer.upload(dk, k);
                }
            };
            if (queryLast) keysAndValues();
            producer.upload(dq, q);
            if (!queryLast) keysAndValues();
            producer.produce();
            HCHECK_STATUS(gc::launchAttentionDecode(early, producer.stream()));
            HCHECK(cudaDeviceSynchronize());
            const auto late = dout.download();
            report.addCheck("pieces " + f.name + ": programmatic launch, " + (queryLast ? "q" : f.kvShared ? "cache rows" : "k") +
                                " produced last",
                            std::memcmp(late.data(), wantPieces.data(), late.size() * sizeof(float)) == 0 && dkc.download() == wantK &&
                                dvc.download() == wantV,
                            "");
        }
        gc::AttentionDecodeParams bad = fusedPieces;
        bad.normRope.headDim = d * 2;
        report.addCheck("pieces " + f.name + ": mismatched normRope refused",
                        gc::launchAttentionDecode(bad, nullptr) == gc::KernelStatus::InvalidArgument, "");
        bad = fusedPieces;
        bad.rows = 2;
        report.addCheck("pieces " + f.name + ": two rows refused", gc::launchAttentionDecode(bad, nullptr) == gc::KernelStatus::InvalidArgument,
                        "");
    }
    // The fused launch's time against its split count (information only): each block's piece is
    // short at a full window, and the last block merges every split of the group.
    if (f.timing && !quickMode()) {
        const double bandBytes = 2.0 * static_cast<double>(std::min<std::int64_t>(len, p.maxBand)) * slotElems * eb;
        // A zeroed workspace of the size `t` needs, set into it; the buffer must outlive its launches.
        const auto attachWorkspace = [](gc::AttentionDecodeParams& t) {
            const std::size_t bytes = gc::attentionDecodeWorkspaceBytes(t);
            DeviceBuffer<std::uint8_t> ws(bytes);
            HCHECK(cudaMemset(ws.ptr, 0, bytes));
            t.workspace = ws.ptr;
            t.workspaceBytes = bytes;
            return ws;
        };
#ifdef GEMMA_PHASE_CLOCK
        const auto launches200 = [](const gc::AttentionDecodeParams& form) {
            for (int i = 0; i < 200; ++i) gc::launchAttentionDecode(form, nullptr);
        };
#endif
        for (int splits : {0, 8, 16, 24, 32, 48}) {
            gc::AttentionDecodeParams t = p;
            t.splits = splits;
            t.programmaticLaunch = false;
            t.normRope.programmaticLaunch = false;
            const auto ws = attachWorkspace(t);
            const double us = medianMicros([&](int) { gc::launchAttentionDecode(t, nullptr); }, 5, 30);
            char line[200];
            std::snprintf(line, sizeof line, "fused %-34s %8.1f us  %7.1f GB/s (live K+V band, %d splits%s)", f.name.c_str(), us,
                          bandBytes / us * 1e-3, gc::attentionDecodeSplits(t), splits ? ", forced" : "");
            perf.push_back(line);
        }
        // A full layer: also the engine's default form for it (the norm + RoPE kernel, the
        // tensor-core pieces, the merge kernel; three launches), the cluster form's alternative
        // at a short band (docs/PERFORMANCE.md version 19, the small presets' levers).
        if (f.window == 0) {
            gc::QkvNormRopeParams norm = r;
            norm.programmaticLaunch = false;
            gc::AttentionDecodeParams t = p;
            t.fuseNormRope = false;
            t.fuseMerge = false;
            t.tensorCores = true;
            t.splits = 0;
            t.programmaticLaunch = false;
            const auto ws = attachWorkspace(t);
            const double us = medianMicros(
                [&](int) {
                    gc::launchQkvNormRope(norm, nullptr);
                    gc::launchAttentionDecode(t, nullptr);
                },
                5, 30);
            char line[200];
            std::snprintf(line, sizeof line, "default %-32s %8.1f us  %7.1f GB/s (norm + RoPE, tensor-core pieces, merge: %d splits)",
                          f.name.c_str(), us, bandBytes / us * 1e-3, gc::attentionDecodeSplits(t));
            perf.push_back(line);
            // The CUDA backend's form since version 21 (OpenOptions::fusedPiecesNormRope): the norm
            // + RoPE inside the pieces, then the merge (two launches). Its own workspace: another
            // kernel instance, whose split count may differ.
            gc::AttentionDecodeParams inside = t;
            inside.fuseNormRope = true;
            inside.normRope = norm;
            const auto insideWs = attachWorkspace(inside);
            const double insideUs = medianMicros([&](int) { gc::launchAttentionDecode(inside, nullptr); }, 5, 30);
            std::snprintf(line, sizeof line, "inside  %-32s %8.1f us  %7.1f GB/s (tensor-core pieces with the norm + RoPE, merge: %d splits)",
                          f.name.c_str(), insideUs, bandBytes / insideUs * 1e-3, gc::attentionDecodeSplits(inside));
            perf.push_back(line);
#ifdef GEMMA_PHASE_CLOCK
            // Where the pieces' time goes (AttentionPrefill.cu's marks 1-7; the merge kernel has none).
            harness::appendPhases(perf, "",
                                  {"", "dependency wait", "prologue (norm + RoPE, hull)", "first phases issued", "K tile arrival",
                                   "scores + softmax", "P.V", "partials stored"},
                                  [&] { launches200(inside); });
#endif
        }
        for (int size : {0, 8, 16}) {
            if (group > gc::kClusterAttentionMaxGroup) break;
            for (int headSplit : {1, 2}) {  // one cluster per kv head, heads split over two clusters
                if (headSplit == 2 && !gc::clusterHeadSplitFits(d, group)) continue;
                gc::AttentionDecodeParams t = c;
                t.splits = size;
                t.clusterHeadSplit = headSplit;
                t.programmaticLaunch = false;
                t.normRope.programmaticLaunch = false;
                const double us = medianMicros([&](int) { gc::launchAttentionDecode(t, nullptr); }, 5, 30);
                char line[200];
                std::snprintf(line, sizeof line, "cluster %-32s %8.1f us  %7.1f GB/s (live K+V band, cluster of %d%s%s)", f.name.c_str(), us,
                              bandBytes / us * 1e-3, gc::attentionDecodeSplits(t), size ? ", forced" : "",
                              headSplit == 2 ? ", heads split over two clusters" : "");
                perf.push_back(line);
#ifdef GEMMA_PHASE_CLOCK
                // Where the launch's time goes (AttentionDecode.cu's marks 1-9), over 200 launches.
                harness::appendPhases(perf, "",
                                      {"", "band issue + wait", "prologue (norm + RoPE)", "chunk arrival", "scores", "softmax", "P.V",
                                       "O stored + cluster barrier", "merge", "second cluster barrier"},
                                      [&] { launches200(t); });
#endif
            }
        }
    }
}

}  // namespace

int main() {
    requireDevice("test_attention");
    std::mt19937_64 rng(seedFromEnv());
    const bool quick = quickMode();
    Report report("attention_decode");
    using gc::KvDtype;
    const KvDtype B = KvDtype::BF16, F = KvDtype::F32, F16 = KvDtype::F16;
    // MQA (12b full layer): 16 query heads, 1 kv head, head dim 512. Tile = 8 keys in bf16.
    // GQA (12b sliding): 16 query heads, 8 kv heads, head dim 256, window 1024. Tile = 16 keys.
    std::vector<Fixture> fx = {
        {"mqa full len1", 16, 1, 512, 0, 4096, B, {0}, false, 0, true},
        {"mqa full len2", 16, 1, 512, 0, 4096, B, {1}, false},
        {"mqa full len100", 16, 1, 512, 0, 4096, B, {99}, false, 0, true},
        {"mqa full len=allocation 4096", 16, 1, 512, 0, 4096, B, {4095}, false},
        {"mqa full 1 split", 16, 1, 512, 0, 4096, B, {700}, false, 1},
        {"mqa full 16 splits len20 (empty splits)", 16, 1, 512, 0, 4096, B, {19}, false, 16},
        {"mqa split boundary n=4*8*8", 16, 1, 512, 0, 4096, B, {255}, false, 4},
        {"mqa split boundary n=4*8*8+1", 16, 1, 512, 0, 4096, B, {256}, false, 4},
        {"mqa split boundary n=4*8*8-1", 16, 1, 512, 0, 4096, B, {254}, false, 4},
        {"mqa full fp32 cache", 16, 1, 512, 0, 2048, F, {1500}, false, 0, true},
        {"gqa sliding len1", 16, 8, 256, 1024, 1024, B, {0}, false},
        {"gqa sliding before window fills", 16, 8, 256, 1024, 1024, B, {500}, false, 0, true},
        {"gqa sliding len=window", 16, 8, 256, 1024, 1024, B, {1023}, false},
        {"gqa sliding ring wrap len=window+1", 16, 8, 256, 1024, 1024, B, {1024}, false},
        {"gqa sliding far wrap", 16, 8, 256, 1024, 1024, B, {100003}, false, 0, true},
        {"gqa sliding capacity>window", 16, 8, 256, 1024, 1040, B, {3000}, false},
        {"gqa sliding b3 shared ring", 16, 8, 256, 1000, 1024, B, {4000, 4001, 4002}, false},
        {"gqa sliding b2 own caches", 16, 8, 256, 1024, 1024, B, {5, 70000}, true, 0, true},
        {"gqa sliding splits=3 odd pieces", 16, 8, 256, 1024, 1024, B, {777}, false, 3},
        {"gqa d128 full fp32", 8, 2, 128, 0, 1024, F, {777}, false, 0, true},
        {"gqa d128 sliding wrap", 8, 2, 128, 64, 64, B, {1000}, false},
        {"31b sliding 32q/16kv", 32, 16, 256, 1024, 1024, B, {2000}, false},
        {"31b full 32q/4kv d512", 32, 4, 512, 0, 8192, B, {3000}, false, 0, true},
        {"e2b sliding 8q/1kv", 8, 1, 256, 512, 512, B, {600}, false},
        {"e4b full 8q/2kv d512", 8, 2, 512, 0, 4096, B, {10}, false},
        {"mqa b4 own caches mixed lengths", 16, 1, 512, 0, 4096, B, {0, 16, 500, 4095}, true},
        // Small head dims of the golden and demo models (d 64 / 32), incl. ring wrap and prefill rows.
        {"demo sliding d64 8q/2kv wrap", 8, 2, 64, 128, 159, B, {700}, false, 0, true},
        {"demo full d64 fp32 8q/2kv", 8, 2, 64, 0, 512, F, {300}, false},
        {"golden sliding d32 4q/2kv rows", 4, 2, 32, 16, 47, B, {40, 41, 42, 43}, false},
        {"golden sliding d32 len1", 4, 1, 32, 16, 47, F, {0}, false},
        // fp16 caches (the engine's full-layer default), appended so that the programmatic rounds'
        // indices below still pick the same fixtures.
        {"mqa full f16 cache", 16, 1, 512, 0, 2048, F16, {1500}, false, 0, true, true},
        {"gqa sliding f16 ring wrap", 16, 8, 256, 1024, 1024, F16, {100003}, false},
        {"golden sliding d32 f16 rows", 4, 2, 32, 16, 47, F16, {40, 41, 42, 43}, false},
    };
    if (!quick) {
        fx.push_back({"mqa full len=allocation 32768", 16, 1, 512, 0, 32768, B, {32767}, false, 0, false, true});
        fx.push_back({"mqa full f32 len=allocation 32768", 16, 1, 512, 0, 32768, F, {32767}, false, 0, false, true});
        fx.push_back({"mqa full f16 len=allocation 32768", 16, 1, 512, 0, 32768, F16, {32767}, false, 0, false, true});
        fx.push_back({"gqa sliding f32 window 1024 full band", 16, 8, 256, 1024, 1024, F, {50000}, false, 0, false, true});
        fx.push_back({"gqa sliding 12b window 1024 full band", 16, 8, 256, 1024, 1024, B, {50000}, false, 0, false, true});
        fx.push_back({"31b full 4kv 16K band", 32, 4, 512, 0, 16384, B, {16383}, false, 0, false, true});
    } else {
        // Sanitizer runs: keep the fixture list but shrink the large ones.
        for (auto& f : fx) f.oracle = false;
    }
    // GEMMA_FIXTURES=<substring>: only the fixtures whose name contains it (profiling one case).
    const char* only = std::getenv("GEMMA_FIXTURES");
    const auto unwanted = [&](const auto& f) { return only && f.name.find(only) == std::string::npos; };
    std::erase_if(fx, unwanted);
    cublasLtHandle_t lt = nullptr;
    if (!quick && cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
        std::fprintf(stderr, "cublasLtCreate failed\n");
        return 1;
    }
    std::vector<std::string> perf;
    Producer ordinary(false);
    Shard shard;  // GEMMA_HARNESS_SHARD: the racecheck run splits this harness (scripts/gpu_kernels.sh)
    for (const auto& f : fx)
        if (shard.take()) runFixture(f, rng, report, lt, perf, ordinary);
    // The tensor-core form on every one-row fixture (the CUDA backend's full layers use it).
    std::vector<Fixture> tensorCoreFixtures;
    for (Fixture f : fx)
        if (f.positions.size() == 1) {
            f.tensorCores = true;
            tensorCoreFixtures.push_back(f);
        }
    tensorCoreFixtures.push_back({"mqa full f32 17 splits len700", 16, 1, 512, 0, 4096, F, {699}, false, 17});
    tensorCoreFixtures.push_back({"mqa full f32 40 splits len33 (empty pieces)", 16, 1, 512, 0, 4096, F, {32}, false, 40});
    tensorCoreFixtures.push_back({"gqa d256 f32 sliding wrap 5 splits", 16, 8, 256, 1024, 1055, F, {5000}, false, 5});
    std::erase_if(tensorCoreFixtures, unwanted);
    for (auto& f : tensorCoreFixtures) {
        f.tensorCores = true;
        if (shard.take()) runFixture(f, rng, report, lt, perf, ordinary);
    }
    // Refusals: more than one row, or the fused merge, with tensorCores.
    if (shard.take()) {
        gc::AttentionDecodeParams bad;
        DeviceBuffer<float> buffer(1 << 16);
        DeviceBuffer<int> position(2);
        position.upload(std::vector<int>{3, 4});
        bad.q = bad.out = buffer.ptr;
        bad.kCache = bad.vCache = buffer.ptr;
        bad.kvDtype = F;
        bad.capacity = 8;
        bad.qHeads = 16;
        bad.kvHeads = 1;
        bad.headDim = 512;
        bad.qStride = bad.outStride = 16 * 512;
        bad.positions = position.ptr;
        bad.workspace = buffer.ptr;
        bad.workspaceBytes = buffer.count * sizeof(float);
        bad.tensorCores = true;
        bad.rows = 2;
        report.addCheck("tensor cores: two rows refused", gc::launchAttentionDecode(bad, nullptr) == gc::KernelStatus::InvalidArgument, "");
        bad.rows = 1;
        bad.fuseMerge = true;
        report.addCheck("tensor cores: a fused merge refused", gc::launchAttentionDecode(bad, nullptr) == gc::KernelStatus::InvalidArgument,
                        "");
    }
    // The tensor-core form over an fp16 cache and an fp32 cache of the same fp16 values: the same
    // bits, at the automatic split count and at a forced one of several pieces (odd, so that the
    // pieces' ends fall inside tiles).
    const std::vector<BitIdentityCase> bitIdentityCases = {
        {"d512 16q/1kv full pos 3000 auto splits", 3000, 4096, 0},
        {"d512 16q/1kv full pos 3000 7 splits", 3000, 4096, 7},
    };
    for (const auto& c : bitIdentityCases)
        if (!unwanted(c) && shard.take()) tensorCoreF16MatchesF32(c, rng, report);
    // Programmatic launch, 10 rounds: MQA with empty splits, GQA with 3 rows on one ring and an
    // odd split count (no oracle, no timing); then 2 rounds of the tensor-core form.
    // (Skipped under GEMMA_FIXTURES: they pick fixtures by index.)
    const std::size_t pdlFixtures[] = {5, 16, 18};
    for (int round = 0; round < (only ? 0 : 12); ++round) {
        // Rounds 10 and 11: the tensor-core form (its split kernel and the merge, programmatic).
        Fixture f = round < 10 ? fx[pdlFixtures[round % 3]] : tensorCoreFixtures[tensorCoreFixtures.size() - 3 + (round - 10)];
        f.oracle = f.timing = false;
        if (!shard.take()) continue;
        Producer producer(true);
        runFixture(f, rng, report, nullptr, perf, producer);
    }
    if (lt) cublasLtDestroy(lt);
    // The fused decode form: 12b sliding (GQA d256, ring wrap too) and full (MQA d512, partial
    // RoPE) layers, a KV-shared layer, bf16 and f16, empty splits, one split, the small golden head dims.
    const std::vector<FusedFixture> fused = {
        {"12b sliding pos 150 f32", 16, 8, 256, 1024, 1055, F, 150, false, 128, 0, true},
        {"12b sliding pos 40 bf16", 16, 8, 256, 1024, 1055, B, 40, false, 128},
        {"12b sliding ring wrap bf16", 16, 8, 256, 1024, 1055, B, 9000, false, 128, 0, true},
        {"31b sliding 32q/16kv f32", 32, 16, 256, 1024, 1055, F, 2000, false, 128},
        {"12b sliding pos 600 f32 cluster of 8", 16, 8, 256, 1024, 1055, F, 600, false, 128, 8},
        {"12b sliding len1 f32", 16, 8, 256, 1024, 1055, F, 0, false, 128},
        {"12b sliding ring wrap f32", 16, 8, 256, 1024, 1055, F, 5000, false, 128, 0, true},
        // The engine's default cache (fp16 in every layer, docs/PERFORMANCE.md version 41) at the
        // benchmark's short band and over a full window: the cluster scores' timings (version 47).
        {"12b sliding pos 150 f16", 16, 8, 256, 1024, 1055, F16, 150, false, 128, 0, true},
        {"12b sliding ring wrap f16", 16, 8, 256, 1024, 1055, F16, 5000, false, 128, 0, true},
        {"12b full pos 3000 f32", 16, 1, 512, 0, 4096, F, 3000, false, 64},
        {"12b full pos 3000 f16", 16, 1, 512, 0, 4096, F16, 3000, false, 64},
        // The 12b's full layer at the benchmark's short band, timed: ≈ 14 µs per layer in the
        // step's kernel timeline for a band of ≈ 150 keys (docs/PERFORMANCE.md version 22).
        {"12b full pos 150 f32", 16, 1, 512, 0, 4096, F, 150, false, 64, 0, true, true},
        {"12b full len1 f32", 16, 1, 512, 0, 4096, F, 0, false, 64},
        {"31b full bf16 32q/4kv", 32, 4, 512, 0, 8192, B, 100, false, 64},
        {"e2b kv-shared sliding 8q/1kv", 8, 1, 256, 512, 543, F, 600, true, 128},
        {"e2b sliding pos 150 f32", 8, 1, 256, 512, 543, F, 150, false, 128, 0, true},
        {"e2b kv-shared sliding pos 150 f32", 8, 1, 256, 512, 543, F, 150, true, 128, 0, true},
        // e2b's and e4b's full layers (groups of 8 and 4 at head dim 512, partial RoPE) at a short
        // band: the cluster form against the default three launches (timing lines "default ...").
        {"e2b full pos 150 f32", 8, 1, 512, 0, 4096, F, 150, false, 64, 0, true},
        {"e4b full pos 150 f32", 8, 2, 512, 0, 4096, F, 150, false, 64, 0, true},
        // Longer bands: where the cluster form stops paying (its default band limit).
        {"e2b full pos 700 f32", 8, 1, 512, 0, 4096, F, 700, false, 64, 0, true, true},
        {"e2b full pos 1500 f32", 8, 1, 512, 0, 4096, F, 1500, false, 64, 0, true, true},
        {"e2b full pos 3500 f32", 8, 1, 512, 0, 4096, F, 3500, false, 64, 0, true, true},
        {"e4b full pos 700 f32", 8, 2, 512, 0, 4096, F, 700, false, 64, 0, true, true},
        {"e4b full pos 1500 f32", 8, 2, 512, 0, 4096, F, 1500, false, 64, 0, true, true},
        {"e4b full pos 3500 f32", 8, 2, 512, 0, 4096, F, 3500, false, 64, 0, true, true},
        {"31b full pos 150 f32 32q/4kv", 32, 4, 512, 0, 4096, F, 150, false, 64, 0, true},
        {"31b full pos 1500 f32 32q/4kv", 32, 4, 512, 0, 4096, F, 1500, false, 64, 0, true, true},
        {"16 splits len20 (empty splits)", 16, 1, 512, 0, 4096, F, 19, false, 64, 16},
        {"1 split", 16, 8, 256, 1024, 1055, B, 700, false, 128, 1},
        {"demo d64 wrap", 8, 2, 64, 128, 159, F, 700, false, 32},
        {"golden d32", 4, 2, 32, 16, 47, B, 40, false, 4},
        // The pieces with the norm + RoPE inside, against FP64 (tiles of 32 keys at d 512 and 256).
        // Forced splits place the current position: 128 keys in 4 pieces of 32 (its piece's last
        // key), 129 in pieces of 64 (the first key of piece 2, piece 3 empty), 701 in 5 of 160 (inside
        // piece 4, inside a tile), 65 in 2 of 64, 96 in 3 of 32; position 0 alone and with 3 empty pieces.
        {"pieces 12b full pos 0 f32", 16, 1, 512, 0, 4096, F, 0, false, 64, 0, false, false, true},
        {"pieces g2 d512 piece's last key bf16", 16, 8, 512, 0, 4096, B, 127, false, 64, 4, false, false, true},
        {"pieces g2 d512 piece's first key f32", 16, 8, 512, 0, 4096, F, 128, false, 64, 4, false, false, true},
        {"pieces g8 d512 inside piece 4 of 5 bf16", 8, 1, 512, 0, 4096, B, 700, false, 64, 5, false, false, true},
        {"pieces g8 d512 inside piece 4 of 5 f16", 8, 1, 512, 0, 4096, F16, 700, false, 64, 5, false, false, true},
        {"pieces g8 d512 32q/4kv auto splits f32", 32, 4, 512, 0, 8192, F, 3000, false, 64, 0, false, false, true},
        {"pieces g16 d512 piece's first key bf16", 16, 1, 512, 0, 4096, B, 64, false, 64, 2, false, false, true},
        {"pieces kv-shared g2 d512 f32", 16, 8, 512, 0, 4096, F, 300, true, 64, 0, false, false, true},
        {"pieces g2 d256 piece's last key f32", 16, 8, 256, 0, 2048, F, 95, false, 128, 3, false, false, true},
        {"pieces g8 d256 pos 0 4 splits bf16", 16, 2, 256, 0, 1024, B, 0, false, 128, 4, false, false, true},
        {"pieces g8 d256 sliding ring wrap bf16", 8, 1, 256, 512, 543, B, 2000, false, 128, 0, false, false, true},
        {"pieces golden d64 f32", 4, 2, 64, 0, 512, F, 60, false, 16, 0, false, false, true},
        {"pieces golden d32 2 splits bf16", 4, 1, 32, 0, 512, B, 45, false, 16, 2, false, false, true},
    };
    // GEMMA_FIXTURES filters these by name too, so one fused case can be profiled alone (e.g.
    // "12b sliding ring wrap f32": the cluster form over a full f32 window).
    for (const auto& f : fused)
        if (!(f.timingOnly && quickMode()) && !unwanted(f) && shard.take()) fusedCase(f, rng, report, perf);
    std::printf("%zu fixtures\n", fx.size());
    if (!perf.empty()) {
        std::printf("\nattention timing (information only, split + merge, median of 30):\n");
        for (const auto& l : perf) std::printf("  %s\n", l.c_str());
    }
    return report.finish();
}
