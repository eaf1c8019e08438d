// Harness: the FP8-E4M3 row-scaled table kernels and greedy sampling:
//   lm_head matvec + softcap (kernels/cuda/Fp8LmHead.cu), embedding gather (Embedding.cu),
//   argmax (Argmax.cu).
// FP64 host references over the same stored codes/scales; outputs poisoned with NaN; x padded
// with NaN past H. Information only: lm_head GB/s (CUDA events, median, table rotated past L2) and
// the embedding gather's and the argmax's times per launch (full mode).
// Programmatic launch: x (lm_head) and the token ids (gather) written by a delayed producer kernel
// (HarnessCommon.h Producer), the kernel launched programmatically after it, 10 rounds each.
#include "../../kernels/cuda/Argmax.cu"
#include "../../kernels/cuda/Embedding.cu"
#include "../../kernels/cuda/Fp8LmHead.cu"
#include "HarnessCommon.h"

#include <numeric>

using namespace harness;
namespace gc = gemma::cuda;
namespace gf = gemma::formats;

namespace {

struct Table {
    std::int64_t vocab, hidden;
    std::vector<std::uint8_t> codes;
    std::vector<float> scales;
};

Table randomTable(std::int64_t vocab, std::int64_t hidden, std::mt19937_64& rng) {
    Table t{vocab, hidden, std::vector<std::uint8_t>(static_cast<std::size_t>(vocab * hidden)),
            std::vector<float>(static_cast<std::size_t>(vocab))};
    std::uniform_int_distribution<std::uint64_t> bits;
    for (std::size_t i = 0; i < t.codes.size(); i += 8) {
        std::uint64_t r = bits(rng);
        for (std::size_t k = 0; k < 8 && i + k < t.codes.size(); ++k, r >>= 8) {
            std::uint8_t c = static_cast<std::uint8_t>(r);
            if ((c & 0x7F) == 0x7F) c ^= 0x01;  // no NaN codes in a valid table
            t.codes[i + k] = c;
        }
    }
    std::uniform_real_distribution<float> s(0.5f, 2.0f);
    const float base = 30.0f / (150.0f * std::sqrt(static_cast<float>(hidden)));
    for (auto& v : t.scales) v = base * s(rng);
    return t;
}

void lmHeadCase(std::int64_t vocab, std::int64_t hidden, int rows, float cap, std::mt19937_64& rng,
                Report& report, bool timing, std::vector<std::string>& perf, Producer& producer) {
    const Table t = randomTable(vocab, hidden, rng);
    const std::int64_t xStride = hidden + 8;  // NaN past H: must not be read
    std::vector<float> x(static_cast<std::size_t>(rows * xStride), std::nanf(""));
    for (int r = 0; r < rows; ++r)
        for (std::int64_t h = 0; h < hidden; ++h)
            x[r * xStride + h] = std::uniform_real_distribution<float>(-1.f, 1.f)(rng);
    DeviceBuffer<std::uint8_t> dc(t.codes.size());
    dc.upload(t.codes);
    DeviceBuffer<float> ds(t.scales.size());
    ds.upload(t.scales);
    DeviceBuffer<float> dx(x.size());
    producer.upload(dx, x);
    DeviceBuffer<float> dl(static_cast<std::size_t>(rows * vocab));
    dl.poison();
    gc::Fp8LmHeadParams p;
    p.codes = dc.ptr;
    p.rowScales = ds.ptr;
    p.vocab = vocab;
    p.hidden = hidden;
    p.x = dx.ptr;
    p.xStride = xStride;
    p.logits = dl.ptr;
    p.logitStride = vocab;
    p.rows = rows;
    p.softcap = cap;
    p.programmaticLaunch = producer.programmatic();
    producer.produce();
    HCHECK_STATUS(gc::launchFp8LmHead(p, producer.stream()));
    HCHECK(cudaDeviceSynchronize());
    const std::vector<float> got = dl.download();
    std::vector<double> lut(256);
    for (int c = 0; c < 256; ++c) lut[c] = gf::e4m3ToFloat(static_cast<std::uint8_t>(c));
    std::vector<double> ref(got.size());
    for (int r = 0; r < rows; ++r)
        for (std::int64_t v = 0; v < vocab; ++v) {
            double acc = 0;
            const std::uint8_t* row = &t.codes[v * hidden];
            const float* xr = &x[r * xStride];
            for (std::int64_t h = 0; h < hidden; ++h) acc += lut[row[h]] * xr[h];
            double z = acc * t.scales[v];
            if (cap > 0) z = cap * std::tanh(z / cap);
            ref[r * vocab + v] = z;
        }
    char name[128];
    std::snprintf(name, sizeof name, "lm_head V%lld H%lld b%d cap%g", static_cast<long long>(vocab),
                  static_cast<long long>(hidden), rows, cap);
    report.add(producer.tag() + name, compare(got.data(), ref.data(), got.size()), 1e-4, 1e-4);
    // The resident 8-row grid (Fp8LmHeadParams::persistent, one row) must give the one-shot
    // grid's bits: same per-lane FMA order, same reduction. Programmatic too when the producer
    // is (its first codes are read before the wait).
    auto persistent = [&](const std::uint8_t* codes, cudaStream_t stream, bool programmatic) {
        gc::Fp8LmHeadParams q = p;
        q.codes = codes;
        q.persistent = true;
        q.programmaticLaunch = programmatic;
        HCHECK_STATUS(gc::launchFp8LmHead(q, stream));
    };
    if (rows == 1) {
        dl.poison();
        producer.produce();
        persistent(dc.ptr, producer.stream(), producer.programmatic());
        HCHECK(cudaDeviceSynchronize());
        const std::vector<float> again = dl.download();
        report.addCheck(producer.tag() + name + " persistent 8-row grid bit-identical",
                        again.size() == got.size() && std::memcmp(again.data(), got.data(), got.size() * sizeof(float)) == 0, "");
    }

    if (timing && rows == 1) {
        const double bytes = static_cast<double>(t.codes.size()) + 4.0 * vocab;
        const int copies = bytes > 200e6 ? 2 : 4;
        DeviceBuffer<std::uint8_t> cc(t.codes.size() * copies);
        for (int c = 0; c < copies; ++c)
            HCHECK(cudaMemcpy(cc.ptr + c * t.codes.size(), dc.ptr, t.codes.size(), cudaMemcpyDeviceToDevice));
        const double us = medianMicros(
            [&](int i) {
                gc::Fp8LmHeadParams q = p;
                q.codes = cc.ptr + (i % copies) * t.codes.size();
                q.programmaticLaunch = false;
                gc::launchFp8LmHead(q, nullptr);
            },
            5, 30);
        const double persistentUs = medianMicros([&](int i) { persistent(cc.ptr + (i % copies) * t.codes.size(), nullptr, false); }, 5, 30);
        char line[256];
        std::snprintf(line, sizeof line, "lm_head %lld x %lld: %.1f us, %.1f GB/s | persistent 8-row grid %.1f us, %.1f GB/s",
                      static_cast<long long>(vocab), static_cast<long long>(hidden), us, bytes / us * 1e-3, persistentUs,
                      bytes / persistentUs * 1e-3);
        perf.push_back(line);
    }
}

// outPad: the output row stride is hidden + outPad (1 by default, so that rows after the first are
// not 16-byte aligned: the gather's element stores; 0: its 16-byte stores). With `perf`, one
// timing line (information only): single-row gathers of distinct random rows, so that each
// launch reads its row from DRAM as in a decode step.
void embeddingCase(std::int64_t vocab, std::int64_t hidden, std::mt19937_64& rng, Report& report, Producer& producer,
                   std::int64_t outPad = 1, std::vector<std::string>* perf = nullptr) {
    const Table t = randomTable(vocab, hidden, rng);
    std::vector<int> ids = {0, static_cast<int>(vocab - 1), -1, static_cast<int>(vocab)};
    std::uniform_int_distribution<int> pick(0, static_cast<int>(vocab - 1));
    for (int i = 0; i < 4; ++i) ids.push_back(pick(rng));
    const int rows = static_cast<int>(ids.size());
    const float embedScale = gf::roundToBf16(std::sqrt(static_cast<float>(hidden)));
    DeviceBuffer<std::uint8_t> dc(t.codes.size());
    dc.upload(t.codes);
    DeviceBuffer<float> ds(t.scales.size());
    ds.upload(t.scales);
    DeviceBuffer<int> di(ids.size());
    producer.upload(di, ids);
    const std::int64_t outStride = hidden + outPad;
    DeviceBuffer<float> dout(static_cast<std::size_t>(rows * outStride));
    dout.poison();
    gc::EmbeddingParams p;
    p.codes = dc.ptr;
    p.rowScales = ds.ptr;
    p.vocab = vocab;
    p.hidden = hidden;
    p.tokenIds = di.ptr;
    p.embedScale = embedScale;
    p.out = dout.ptr;
    p.outStride = outStride;
    p.rows = rows;
    p.programmaticLaunch = producer.programmatic();
    producer.produce();
    HCHECK_STATUS(gc::launchEmbeddingGather(p, producer.stream()));
    HCHECK(cudaDeviceSynchronize());
    const std::vector<float> got = dout.download();
    std::size_t mismatches = 0, badInvalid = 0;
    for (int r = 0; r < rows; ++r) {
        const bool valid = ids[r] >= 0 && ids[r] < vocab;
        for (std::int64_t c = 0; c < hidden; ++c) {
            const float g = got[r * outStride + c];
            if (!valid) {
                badInvalid += std::isnan(g) ? 0 : 1;
                continue;
            }
            const float want =
                (gf::e4m3ToFloat(t.codes[static_cast<std::int64_t>(ids[r]) * hidden + c]) * t.scales[ids[r]]) *
                embedScale;
            std::uint32_t a, b;
            std::memcpy(&a, &g, 4);
            std::memcpy(&b, &want, 4);
            mismatches += a != b;
        }
    }
    char name[128];
    std::snprintf(name, sizeof name, "embedding V%lld H%lld out stride H+%lld (bit-exact, 2 invalid ids)",
                  static_cast<long long>(vocab), static_cast<long long>(hidden), static_cast<long long>(outPad));
    report.addCheck(producer.tag() + name, mismatches == 0 && badInvalid == 0,
                    "mismatches " + std::to_string(mismatches) + ", invalid-id rows not NaN " +
                        std::to_string(badInvalid));
    if (!perf) return;
    // 5 warm-up and 30 × 10 timed launches, each on a row no launch before it read.
    constexpr int kLaunches = 5 + 30 * 10;
    std::vector<int> distinct(static_cast<std::size_t>(vocab));
    std::iota(distinct.begin(), distinct.end(), 0);
    std::shuffle(distinct.begin(), distinct.end(), rng);
    distinct.resize(std::min<std::size_t>(distinct.size(), kLaunches));
    DeviceBuffer<int> dd(distinct.size());
    dd.upload(distinct);
    gc::EmbeddingParams one = p;
    one.rows = 1;
    one.programmaticLaunch = false;
    const double us = medianMicros(
        [&](int i) {
            one.tokenIds = dd.ptr + static_cast<std::size_t>(i) % distinct.size();
            HCHECK_STATUS(gc::launchEmbeddingGather(one, nullptr));
        },
        5, 30);
    char line[160];
    std::snprintf(line, sizeof line, "embedding gather, one row of H %lld from a table of %lld rows: %.2f us per launch",
                  static_cast<long long>(hidden), static_cast<long long>(vocab), us);
    perf->push_back(line);
}

// With `perf`: one timing line (information only), the launch repeated on the same row (in L2, as
// the lm_head leaves it in a decode step).
void argmaxCase(std::int64_t n, int rows, std::mt19937_64& rng, Report& report, std::vector<std::string>* perf = nullptr) {
    const std::int64_t stride = n + 5;
    std::vector<float> logits(static_cast<std::size_t>(rows * stride), std::nanf(""));
    std::vector<int> want(rows);
    std::uniform_int_distribution<std::int64_t> pos(0, n - 1);
    for (int r = 0; r < rows; ++r) {
        for (std::int64_t i = 0; i < n; ++i)
            logits[r * stride + i] = std::uniform_real_distribution<float>(-30.f, 30.f)(rng);
        // Planted maximum, duplicated at a later index (tie: the lower index wins), and NaNs.
        std::int64_t a = pos(rng), b = pos(rng);
        if (a > b) std::swap(a, b);
        logits[r * stride + a] = 31.0f;
        logits[r * stride + b] = 31.0f;
        for (int k = 0; k < 3; ++k) logits[r * stride + pos(rng)] = std::nanf("");
        logits[r * stride + a] = 31.0f;  // keep the planted values if a NaN landed there
        logits[r * stride + b] = 31.0f;
        want[r] = static_cast<int>(a);
    }
    DeviceBuffer<float> dl(logits.size());
    dl.upload(logits);
    DeviceBuffer<int> di(rows);
    DeviceBuffer<float> dv(rows);
    gc::ArgmaxParams p;
    p.logits = dl.ptr;
    p.n = n;
    p.stride = stride;
    p.rows = rows;
    p.outIndex = di.ptr;
    p.outValue = dv.ptr;
    const std::size_t ws = gc::argmaxWorkspaceBytes(p);
    DeviceBuffer<std::uint8_t> dws(ws);
    HCHECK(cudaMemset(dws.ptr, 0, ws));  // counters zero once; the kernel re-zeroes them
    p.workspace = dws.ptr;
    p.workspaceBytes = ws;
    bool ok = true;
    for (int rep = 0; rep < 3; ++rep) {  // repeated launches prove the counters reset
        di.poison();
        dv.poison();
        HCHECK_STATUS(gc::launchArgmax(p, nullptr));
        HCHECK(cudaDeviceSynchronize());
        const std::vector<int> got = di.download();
        const std::vector<float> val = dv.download();
        for (int r = 0; r < rows; ++r) ok &= got[r] == want[r] && val[r] == 31.0f;
    }
    char name[128];
    std::snprintf(name, sizeof name, "argmax n%lld b%d (ties, NaNs, 3 launches)",
                  static_cast<long long>(n), rows);
    report.addCheck(name, ok, "");
    if (perf) {
        const double us = medianMicros([&](int) { HCHECK_STATUS(gc::launchArgmax(p, nullptr)); }, 5, 30);
        char line[128];
        std::snprintf(line, sizeof line, "argmax over %lld entries, %d row(s): %.2f us per launch", static_cast<long long>(n), rows, us);
        perf->push_back(line);
    }
    if (rows != 1) return;

    // Greedy feedback: three launches from position 5 into a 4-entry history must fill entries
    // 5 % 4, 6 % 4, 7 % 4 with the id, leave entry 4 % 4 alone and leave the position at 8.
    constexpr int kHistory = 4;
    const std::vector<int> before = {-7, -7, -7, -7};
    DeviceBuffer<int> history(kHistory), position(1);
    history.upload(before);
    position.upload(std::vector<int>{5});
    p.position = position.ptr;
    p.history = history.ptr;
    p.historySize = kHistory;
    for (int rep = 0; rep < 3; ++rep) HCHECK_STATUS(gc::launchArgmax(p, nullptr));
    HCHECK(cudaDeviceSynchronize());
    const std::vector<int> h = history.download();
    const int next = position.download()[0];
    const bool fed = h[1] == want[0] && h[2] == want[0] && h[3] == want[0] && h[0] == -7 && next == 8;
    std::snprintf(name, sizeof name, "argmax n%lld feedback (history and position, 3 launches)", static_cast<long long>(n));
    report.addCheck(name, fed, "history " + std::to_string(h[0]) + " " + std::to_string(h[1]) + " " + std::to_string(h[2]) + " " +
                                   std::to_string(h[3]) + ", position " + std::to_string(next));
    p.history = nullptr;  // a position without a history is refused
    report.addCheck("argmax feedback without history refused", gc::launchArgmax(p, nullptr) == gc::KernelStatus::InvalidArgument, "");
}

}  // namespace

int main() {
    requireDevice("test_fp8_lmhead");
    std::mt19937_64 rng(seedFromEnv());
    const bool quick = quickMode();
    Report report("fp8_lmhead_embedding_argmax");
    std::vector<std::string> perf;
    Producer ordinary(false);

    lmHeadCase(4099, 2816, 1, 30.0f, rng, report, false, perf, ordinary);
    lmHeadCase(4099, 2816, 3, 30.0f, rng, report, false, perf, ordinary);
    lmHeadCase(1000, 1536, 2, 0.0f, rng, report, false, perf, ordinary);
    lmHeadCase(37, 16, 1, 30.0f, rng, report, false, perf, ordinary);
    if (!quick) {
        lmHeadCase(262144, 3840, 1, 30.0f, rng, report, true, perf, ordinary);   // 12b
        lmHeadCase(262144, 5376, 1, 30.0f, rng, report, true, perf, ordinary);   // 31b
        lmHeadCase(262144, 1536, 1, 30.0f, rng, report, true, perf, ordinary);   // e2b
        lmHeadCase(262144, 2560, 2, 30.0f, rng, report, false, perf, ordinary);  // e4b, batch 2
    }
    // Programmatic launch, 10 rounds each: lm_head with 1 and 3 rows (two launches), gather.
    for (int round = 0; round < 10; ++round) {
        Producer lmHead(true), gather(true);
        lmHeadCase(4099, 2816, 1 + 2 * (round & 1), 30.0f, rng, report, false, perf, lmHead);
        embeddingCase(1000, 1536, rng, report, gather);
    }
    {
        gc::Fp8LmHeadParams bad;
        bad.codes = reinterpret_cast<const std::uint8_t*>(16);
        bad.rowScales = reinterpret_cast<const float*>(16);
        bad.x = reinterpret_cast<const float*>(16);
        bad.logits = reinterpret_cast<float*>(16);
        bad.vocab = 10;
        bad.hidden = 100;  // not a multiple of 16
        bad.xStride = 100;
        bad.logitStride = 10;
        report.addCheck("lm_head refuses H % 16 != 0",
                        gc::launchFp8LmHead(bad, nullptr) == gc::KernelStatus::Unsupported, "");
    }

    embeddingCase(1000, 1536, rng, report, ordinary);
    embeddingCase(1000, 1536, rng, report, ordinary, 0);  // aligned output rows
    embeddingCase(999, 100, rng, report, ordinary, 3);    // H % 16 != 0: the byte loop
    embeddingCase(quick ? 5000 : 262144, quick ? 2816 : 5376, rng, report, ordinary, 1, quick ? nullptr : &perf);
    if (!quick) embeddingCase(262144, 3840, rng, report, ordinary, 0, &perf);  // the 12b's, as the engine lays it out

    argmaxCase(1000, 1, rng, report);
    argmaxCase(8193, 3, rng, report);
    argmaxCase(quick ? 40000 : 262144, 2, rng, report);
    if (!quick) argmaxCase(262144, 1, rng, report, &perf);  // the vocabulary of every preset
    argmaxCase(600001, 1, rng, report);  // over 256 blocks of 2048: every block's slice in two passes

    if (!perf.empty()) {
        std::printf("\nFP8 lm_head achieved bandwidth, embedding gather and argmax times (information only):\n");
        for (const auto& l : perf) std::printf("  %s\n", l.c_str());
    }
    return report.finish();
}
