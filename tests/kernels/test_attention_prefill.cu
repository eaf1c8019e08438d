// Harness: flash-attention prefill (kernels/cuda/AttentionPrefill.cu).
// - fixtures cover every head dim (32, 64, 128, 256, 512) with GQA and MQA groupings, row counts
//   that are not tile multiples (1, 2, 17, 64, 300), start position 0 and > 0 (prior context in
//   the cache), sliding windows smaller than / equal to / larger than the context (and smaller
//   than the chunk itself), ring wrap with capacity = window + rows − 1, full layers up to a 2048
//   context at d 512 MQA, bf16, fp16 and fp32 caches, padded q/out strides, a scale != 1 and one
//   fixture with sharp (large-range) scores;
// - an fp16 cache bit for bit against an fp32 cache of the same fp16 values (the kernel rounds an
//   fp32 cache's K/V to fp16 when staging them and copies an fp16 cache's as they are);
// - every cache slot outside the union of the rows' live bands is NaN, so one read of such a slot
//   fails the run (a NaN V row reaches O as 0·NaN even where its score is masked); q's stride
//   padding is NaN; out is poisoned with NaN before each launch and its stride padding must stay
//   NaN;
// - FP64 reference: gemma::reference::attentionDecode (double accumulation) called once per query
//   row over the same stored cache values and fp32 q;
// - launcher argument checks (InvalidArgument / Unsupported);
// - timing (not in quick mode): the 12b prefill of 2048 rows, sliding (16×8, d 256, window 1024)
//   and full (16×1, d 512), bf16, fp16 and fp32 caches, in µs and TFLOP/s over the keys attended.
#include "../../kernels/cuda/AttentionPrefill.cu"
#include "../../kernels/reference/ReferenceOps.cpp"  // standalone project: no reference library
#include "HarnessCommon.h"

using namespace harness;
namespace gc = gemma::cuda;

namespace {

// Tolerances. The kernel rounds q, K and V to fp16 (2^-11 relative) and P to fp16, accumulating in
// fp32; the reference is exact over the stored (bf16, fp16 or fp32) values. A host emulation of exactly
// those roundings over this harness's input distribution (q ~ 0.25·U(−1,1), K, V ~ U(−1,1): score
// standard deviation 0.5–1.9 for d 32–512) gave relative L2 errors of 1.5e-4 … 5.6e-4 and
// max|err|/max|ref| of 2.3e-4 … 9.1e-4 over d 32–512, 1–2048 keys, bf16 and fp32 caches (bf16 values
// convert to fp16 exactly, so bf16 fixtures sit at the low end; fp16 caches, staged as they are,
// sit there too, so the same tolerances hold for them). The tolerances leave ~2× for the
// larger sample of a fixture (up to 10^7 outputs: deeper into the tail). The error grows with the
// score range (each score's absolute error ~ 2^-11·‖q‖‖k‖ moves exp(s) by that much): the "sharp"
// fixture (q ~ U(−1,1), score std 5.3 at d 256) emulated at 1.3e-3 max, so it gets 4e-3.
constexpr double kRelTol = 1e-3;
constexpr double kAbsTol = 2e-3;   // max|out − ref| <= kAbsTol · max|ref|
constexpr double kSharpRelTol = 2e-3;
constexpr double kSharpAbsTol = 4e-3;

struct Fixture {
    std::string name;
    int qHeads, kvHeads, headDim;
    int window;               // 0 = full layer
    std::int64_t capacity;
    gc::KvDtype dtype;
    int start;                // position of row 0; positions start .. start + rows − 1
    int rows;
    float qScale = 0.25f;     // q ~ qScale · U(−1, 1); K, V ~ U(−1, 1)
    float scale = 1.0f;
    int stridePad = 0;        // extra floats per q / out row (NaN in q; must stay NaN in out)
    double relTol = kRelTol;
    double absTol = kAbsTol;
    int checkEvery = 1;       // reference for every checkEvery-th row and the last row
    bool big = false;         // skipped in quick mode
    bool timing = false;
};

std::int64_t bandStart(const Fixture& f, std::int64_t pos) {
    std::int64_t first = 0;
    if (f.window > 0) first = std::max<std::int64_t>(first, pos + 1 - f.window);
    return std::max<std::int64_t>(first, pos + 1 - f.capacity);
}

struct Timing {
    std::string name;
    double us = 0, tflops = 0;
    bool sliding = false;
    gc::KvDtype dtype = gc::KvDtype::BF16;
};

// The launch fields every case sets: `rows` query rows of `qHeads` heads at `qStride` floats
// (the output at the same stride) over one layer's K and V cache; window and scale stay at their
// defaults, staging is the device's default.
gc::AttentionPrefillParams bandParams(const float* q, std::int64_t qStride, const void* kCache, const void* vCache,
                                      gc::KvDtype dtype, std::int64_t capacity, int qHeads, int kvHeads, int headDim,
                                      const int* positions, int rows, float* out) {
    gc::AttentionPrefillParams p;
    p.bulkCopies = bulkCopiesByDefault();
    p.q = q;
    p.qStride = qStride;
    p.kCache = kCache;
    p.vCache = vCache;
    p.kvDtype = dtype;
    p.capacity = capacity;
    p.qHeads = qHeads;
    p.kvHeads = kvHeads;
    p.headDim = headDim;
    p.positions = positions;
    p.rows = rows;
    p.out = out;
    p.outStride = qStride;
    return p;
}

bool runFixture(const Fixture& f, std::mt19937_64& rng, Report& report, std::vector<Timing>& timings) {
    const int d = f.headDim, rows = f.rows;
    const std::int64_t last = static_cast<std::int64_t>(f.start) + rows - 1;
    const std::int64_t unionFirst = bandStart(f, f.start);
    // Caller contract: no live key of the chunk is overwritten (ring holds window + rows − 1).
    if (last - unionFirst + 1 > f.capacity) {
        report.addCheck("prefill " + f.name, false, "fixture violates the capacity contract");
        return false;
    }
    const std::int64_t slotElems = static_cast<std::int64_t>(f.kvHeads) * d;
    const std::int64_t cacheElems = f.capacity * slotElems;

    // Host caches (the stored values as floats), NaN outside the union of the live bands.
    std::vector<float> kh(static_cast<std::size_t>(cacheElems), std::nanf("")), vh(kh.size(), std::nanf(""));
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    auto stored = [&](float x) { return static_cast<float>(storedKvValue(f.dtype, x)); };
    for (std::int64_t pos = unionFirst; pos <= last; ++pos) {
        const std::int64_t base = (pos % f.capacity) * slotElems;
        for (std::int64_t i = 0; i < slotElems; ++i) {
            kh[base + i] = stored(u(rng));
            vh[base + i] = stored(u(rng));
        }
    }
    const std::vector<std::uint8_t> kb = encodeKvCache(f.dtype, kh), vb = encodeKvCache(f.dtype, vh);  // NaN stays NaN
    const std::int64_t width = static_cast<std::int64_t>(f.qHeads) * d;
    const std::int64_t stride = width + f.stridePad;
    std::vector<float> q(static_cast<std::size_t>(rows * stride), std::nanf(""));
    for (int r = 0; r < rows; ++r)
        for (std::int64_t i = 0; i < width; ++i) q[r * stride + i] = f.qScale * u(rng);
    std::vector<int> positions(rows);
    for (int r = 0; r < rows; ++r) positions[r] = f.start + r;

    DeviceBuffer<std::uint8_t> dk(kb.size()), dv(vb.size());
    dk.upload(kb);
    dv.upload(vb);
    DeviceBuffer<float> dq(q.size()), dout(q.size());
    dq.upload(q);
    DeviceBuffer<int> dpos(rows);
    dpos.upload(positions);

    gc::AttentionPrefillParams p = bandParams(dq.ptr, stride, dk.ptr, dv.ptr, f.dtype, f.capacity, f.qHeads, f.kvHeads, d,
                                              dpos.ptr, rows, dout.ptr);
    p.window = f.window;
    p.scale = f.scale;
    gc::AttentionPrefillPlan plan;
    HCHECK_STATUS(gc::attentionPrefillPlan(p, plan));
    dout.poison();
    HCHECK_STATUS(gc::launchAttentionPrefill(p, nullptr));
    HCHECK(cudaDeviceSynchronize());
    const std::vector<float> out = dout.download();
    // On sm_90+ the default stages K/V by bulk copies: the cp.async form must give the same bits
    // (the same bytes staged, the same conversions), padding columns included.
    gc::AttentionPrefillParams threadCopies = p;
    threadCopies.bulkCopies = false;
    if (plan.bulkCopies) {
        dout.poison();
        HCHECK_STATUS(gc::launchAttentionPrefill(threadCopies, nullptr));
        HCHECK(cudaDeviceSynchronize());
        const std::vector<float> other = dout.download();
        report.addCheck("  bulk copies bit-identical to cp.async " + f.name,
                        std::memcmp(other.data(), out.data(), out.size() * sizeof(float)) == 0, "");
    }

    // Every live output finite, every padding column still NaN.
    std::size_t nonFinite = 0, padWritten = 0;
    for (int r = 0; r < rows; ++r) {
        for (std::int64_t i = 0; i < width; ++i) nonFinite += std::isfinite(out[r * stride + i]) ? 0 : 1;
        for (std::int64_t i = width; i < stride; ++i) padWritten += std::isnan(out[r * stride + i]) ? 0 : 1;
    }

    // FP64 reference (ReferenceOps::attentionDecode) on the checked rows.
    std::vector<float> got, refRow(static_cast<std::size_t>(width));
    std::vector<double> ref;
    int checked = 0;
    for (int r = 0; r < rows; ++r) {
        if (r % f.checkEvery != 0 && r != rows - 1) continue;
        const std::int64_t pos = positions[r];
        gemma::reference::attentionDecode(&q[r * stride], kh.data(), vh.data(), f.capacity, f.qHeads,
                                          f.kvHeads, d, bandStart(f, pos), pos, f.scale, refRow.data());
        for (std::int64_t i = 0; i < width; ++i) {
            got.push_back(out[r * stride + i]);
            ref.push_back(refRow[i]);
        }
        ++checked;
    }
    char note[200];
    std::snprintf(note, sizeof note, "[%d thr, %d×%d tile, %d %s stages, %zu B smem, %d blk/SM, %d/%d rows]",
                  plan.threads, plan.rowsPerBlock, plan.keysPerTile, plan.rawStages, plan.bulkCopies ? "bulk" : "cp.async",
                  plan.sharedBytes, plan.blocksPerSm, checked, rows);
    bool ok = report.add("prefill " + f.name, compare(got.data(), ref.data(), got.size()), f.relTol,
                         f.absTol, note);
    if (nonFinite || padWritten) {
        ok = false;
        report.addCheck("  outputs " + f.name, false,
                        std::to_string(nonFinite) + " non-finite, " + std::to_string(padWritten) +
                            " padding values written");
    }

    if (f.timing) {
        double keys = 0;
        for (int r = 0; r < rows; ++r) keys += double(positions[r] - bandStart(f, positions[r]) + 1);
        const double flops = 4.0 * keys * d * f.qHeads;
        const double us = medianMicros([&](int) { gc::launchAttentionPrefill(p, nullptr); }, 3, 15, 4);
        HCHECK(cudaGetLastError());
        timings.push_back({f.name, us, flops / us * 1e-6, f.window > 0, f.dtype});
        if (plan.bulkCopies) {  // the cp.async form beside it, for comparison (information only)
            const double cpUs = medianMicros([&](int) { gc::launchAttentionPrefill(threadCopies, nullptr); }, 3, 15, 4);
            HCHECK(cudaGetLastError());
            std::printf("  %-40s %9.1f us with bulk copies, %9.1f us with cp.async\n", f.name.c_str(), us, cpUs);
        }
    }
    return ok;
}

// An fp16 cache against an fp32 cache of the same fp16-representable values (d 512, 16 query heads
// on one kv head, a full layer, 17 rows after 1000 keys of context): the kernel copies the fp16
// cache's K/V into its tiles as they are and rounds the fp32 cache's to fp16 (nearest even), so
// both stage the same halves and every output must be the same bits.
void f16MatchesF32(std::mt19937_64& rng, Report& report) {
    constexpr int qHeads = 16, kvHeads = 1, headDim = 512, rows = 17, start = 1000;
    constexpr std::int64_t capacity = 4096;
    const std::int64_t slotElems = static_cast<std::int64_t>(kvHeads) * headDim;
    // fp16 values in slots 0 .. start + rows − 1 (every row's band), NaN past them (never read).
    const KvBand band = fp16KvBand(capacity, slotElems, 0, start + rows - 1, rng);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    const std::int64_t width = static_cast<std::int64_t>(qHeads) * headDim;
    std::vector<float> q(static_cast<std::size_t>(rows * width));
    for (auto& x : q) x = 0.25f * u(rng);
    std::vector<int> positions(rows);
    for (int r = 0; r < rows; ++r) positions[static_cast<std::size_t>(r)] = start + r;
    DeviceBuffer<float> dq(q.size()), dout(q.size());
    dq.upload(q);
    DeviceBuffer<int> dpos(rows);
    dpos.upload(positions);

    std::vector<float> outs[2];
    const gc::KvDtype dtypes[2] = {gc::KvDtype::F32, gc::KvDtype::F16};
    for (int i = 0; i < 2; ++i) {
        const auto kBytes = encodeKvCache(dtypes[i], band.keys), vBytes = encodeKvCache(dtypes[i], band.values);
        DeviceBuffer<std::uint8_t> dk(kBytes.size()), dv(vBytes.size());
        dk.upload(kBytes);
        dv.upload(vBytes);
        const gc::AttentionPrefillParams p =
            bandParams(dq.ptr, width, dk.ptr, dv.ptr, dtypes[i], capacity, qHeads, kvHeads, headDim, dpos.ptr, rows, dout.ptr);
        dout.poison();
        HCHECK_STATUS(gc::launchAttentionPrefill(p, nullptr));
        HCHECK(cudaDeviceSynchronize());
        outs[i] = dout.download();
    }
    std::string why;
    report.addCheck("prefill d512 mqa 16/1 full start1000 r17: f16 cache bit-identical to f32", sameBitsAndFinite(outs[0], outs[1], why), why);
}

// Launcher argument checks: nothing is launched for a rejected request.
void argumentChecks(Report& report) {
    DeviceBuffer<float> q(4096), out(4096);
    DeviceBuffer<std::uint8_t> cache(1 << 16);
    DeviceBuffer<int> pos(4);
    // A valid request (4 rows of 4 heads of d 64 over a bf16 cache) that each case breaks once.
    auto base = [&] { return bandParams(q.ptr, 256, cache.ptr, cache.ptr, gc::KvDtype::BF16, 16, 4, 2, 64, pos.ptr, 4, out.ptr); };
    struct Case {
        const char* name;
        gc::KernelStatus expect;
        void (*edit)(gc::AttentionPrefillParams&);
    };
    const Case cases[] = {
        {"headDim 96 -> Unsupported", gc::KernelStatus::Unsupported, [](gc::AttentionPrefillParams& p) { p.headDim = 96; }},
        {"qHeads 6 / kvHeads 4 -> InvalidArgument", gc::KernelStatus::InvalidArgument,
         [](gc::AttentionPrefillParams& p) { p.qHeads = 6; p.kvHeads = 4; }},
        {"null q -> InvalidArgument", gc::KernelStatus::InvalidArgument, [](gc::AttentionPrefillParams& p) { p.q = nullptr; }},
        {"null positions -> InvalidArgument", gc::KernelStatus::InvalidArgument,
         [](gc::AttentionPrefillParams& p) { p.positions = nullptr; }},
        {"qStride < width -> InvalidArgument", gc::KernelStatus::InvalidArgument, [](gc::AttentionPrefillParams& p) { p.qStride = 255; }},
        {"odd outStride -> InvalidArgument", gc::KernelStatus::InvalidArgument, [](gc::AttentionPrefillParams& p) { p.outStride = 257; }},
        {"misaligned cache -> InvalidArgument", gc::KernelStatus::InvalidArgument,
         [](gc::AttentionPrefillParams& p) { p.kCache = static_cast<const std::uint8_t*>(p.kCache) + 2; }},
        {"rows 0 -> InvalidArgument", gc::KernelStatus::InvalidArgument, [](gc::AttentionPrefillParams& p) { p.rows = 0; }},
    };
    for (const auto& c : cases) {
        gc::AttentionPrefillParams p = base();
        c.edit(p);
        const gc::KernelStatus got = gc::launchAttentionPrefill(p, nullptr);
        report.addCheck(std::string("args ") + c.name, got == c.expect, gc::kernelStatusName(got));
    }
    HCHECK(cudaDeviceSynchronize());
}

}  // namespace

int main() {
    requireDevice("test_attention_prefill");
    std::mt19937_64 rng(seedFromEnv());
    const bool quick = quickMode();
    Report report("attention_prefill");
    using gc::KvDtype;
    const KvDtype B = KvDtype::BF16, F = KvDtype::F32, F16 = KvDtype::F16;
    auto fx = [](std::string name, int qh, int kvh, int dim, int window, std::int64_t capacity, KvDtype dt,
                 int start, int rows) {
        Fixture f{};
        f.name = std::move(name);
        f.qHeads = qh;
        f.kvHeads = kvh;
        f.headDim = dim;
        f.window = window;
        f.capacity = capacity;
        f.dtype = dt;
        f.start = start;
        f.rows = rows;
        return f;
    };
    std::vector<Fixture> fixtures;
    auto add = [&](Fixture f) { fixtures.push_back(std::move(f)); };
    // Tiles: d32/64 64 pairs × 64 keys, d128 64 × 32, d256 64 × 32, d512 32 × 16.
    add(fx("d32 gqa 4/2 win16 ring wrap cap=win+rows-1 r17 bf16", 4, 2, 32, 16, 32, B, 40, 17));
    add(fx("d32 mqa 4/1 full pos0 r1 fp32", 4, 1, 32, 0, 64, F, 0, 1));
    {
        Fixture f = fx("d32 mqa 4/1 win8 < chunk r64 fp32 padded strides", 4, 1, 32, 8, 76, F, 3, 64);
        f.stridePad = 6;
        add(f);
    }
    add(fx("d64 gqa 8/2 full start0 r64 fp32", 8, 2, 64, 0, 128, F, 0, 64));
    add(fx("d64 mqa 4/1 win128 > context r17 bf16", 4, 1, 64, 128, 160, B, 5, 17));
    add(fx("d64 gqa 8/2 win100 far ring wrap r17 fp32", 8, 2, 64, 100, 116, F, 100000, 17));
    add(fx("d128 gqa 8/2 win64 = context r64 bf16", 8, 2, 128, 64, 127, B, 0, 64));
    add(fx("d128 mqa 4/1 full start100 r300 fp32", 4, 1, 128, 0, 512, F, 100, 300));
    {
        Fixture f = fx("d128 gqa 8/2 win32 < chunk r300 bf16 scale 1/8", 8, 2, 128, 32, 331, B, 0, 300);
        f.scale = 0.125f;
        f.qScale = 2.0f;  // same score range as the other fixtures
        add(f);
    }
    add(fx("d256 gqa 16/8 pos0 r1 bf16", 16, 8, 256, 1024, 1024, B, 0, 1));
    add(fx("d256 gqa 16/8 win1024 start0 r300 bf16", 16, 8, 256, 1024, 1323, B, 0, 300));
    add(fx("d256 gqa 16/8 win128 ring wrap cap=win+rows-1 r64 fp32", 16, 8, 256, 128, 191, F, 1000, 64));
    add(fx("d256 e2b 8/1 win512 start600 r2 bf16", 8, 1, 256, 512, 513, B, 600, 2));
    {
        Fixture f = fx("d256 gqa 16/8 win1024 sharp scores start5000 r17 bf16", 16, 8, 256, 1024, 1040, B, 5000, 17);
        f.qScale = 1.0f;
        f.relTol = kSharpRelTol;
        f.absTol = kSharpAbsTol;
        add(f);
    }
    add(fx("d512 mqa 16/1 full start0 r17 bf16", 16, 1, 512, 0, 4096, B, 0, 17));
    add(fx("d512 mqa 16/1 full start0 r17 f16", 16, 1, 512, 0, 4096, F16, 0, 17));
    add(fx("d512 31b 32/4 full start300 r2 fp32", 32, 4, 512, 0, 1024, F, 300, 2));
    {
        Fixture f = fx("d512 e4b 8/2 full start0 r300 fp32 padded strides", 8, 2, 512, 0, 512, F, 0, 300);
        f.stridePad = 2;
        add(f);
    }
    {
        Fixture f = fx("d512 mqa 16/1 full 2048 context r64 bf16", 16, 1, 512, 0, 2048, B, 1984, 64);
        f.big = true;
        add(f);
    }
    {
        Fixture f = fx("d512 mqa 16/1 full start700 r100 fp32", 16, 1, 512, 0, 1024, F, 700, 100);
        f.big = true;
        add(f);
    }
    {
        // Ring wrap with NaN slots left over (capacity 7 above the contract's minimum).
        Fixture f = fx("d256 gqa 16/8 win1024 ring wrap + NaN slots r300 bf16", 16, 8, 256, 1024, 1330, B, 4000, 300);
        f.big = true;
        f.checkEvery = 3;
        add(f);
        f.name = "d256 gqa 16/8 win1024 ring wrap + NaN slots r300 f16";
        f.dtype = F16;
        add(f);
    }
    // 12b prefill of 2048 rows: timed; the reference checks every 16th row. The summary below
    // keeps its totals in the order of kTimedDtypes.
    const KvDtype kTimedDtypes[] = {B, F, F16};
    const char* const kDtypeTags[] = {"bf16", "fp32", "f16"};
    for (int which = 0; which < 3; ++which) {
        const KvDtype dt = kTimedDtypes[which];
        const char* tag = kDtypeTags[which];
        Fixture s = fx(std::string("12b sliding 16/8 d256 win1024 r2048 ") + tag, 16, 8, 256, 1024, 2048 + 1023, dt, 0, 2048);
        s.big = s.timing = true;
        s.checkEvery = 16;
        add(s);
        Fixture g = fx(std::string("12b full 16/1 d512 r2048 ") + tag, 16, 1, 512, 0, 2048, dt, 0, 2048);
        g.big = g.timing = true;
        g.checkEvery = 16;
        add(g);
    }

    argumentChecks(report);
    std::vector<Timing> timings;
    int run = 0;
    for (const auto& f : fixtures) {
        if (quick && f.big) continue;
        runFixture(f, rng, report, timings);
        ++run;
    }
    f16MatchesF32(rng, report);
    std::printf("%d fixtures%s\n", run, quick ? " (quick mode: large fixtures and timing skipped)" : "");
    if (!timings.empty()) {
        std::printf("\nprefill attention timing (information only, median of 15 × 4 launches):\n");
        double sliding[3] = {0, 0, 0}, full[3] = {0, 0, 0};
        for (const auto& t : timings) {
            std::printf("  %-40s %9.1f us  %6.1f TFLOP/s (4·keys·d·qHeads over the keys attended)\n",
                        t.name.c_str(), t.us, t.tflops);
            const int i = static_cast<int>(std::find(std::begin(kTimedDtypes), std::end(kTimedDtypes), t.dtype) - std::begin(kTimedDtypes));
            (t.sliding ? sliding : full)[i] = t.us;
        }
        for (int i = 0; i < 3; ++i)
            if (sliding[i] > 0 && full[i] > 0)
                std::printf("  12b prompt of 2048 (%s cache): 40 sliding + 8 full layers = %.2f ms of attention\n",
                            kDtypeTags[i], (40 * sliding[i] + 8 * full[i]) * 1e-3);
    }
    return report.finish();
}
