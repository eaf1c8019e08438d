// Harness: the best entries of a row of logits (kernels/cuda/TopK.cu) against reference::topK,
// bit for bit (logits and ids): Gemma's 262144-entry vocabulary and odd sizes (1, 7, 65, 4095,
// 4097, 70001, a 1M row that takes several windows per block), counts 1, 2, 65 and 128, rows
// with heavy ties (a coarse value grid, so the cut falls inside a tie), NaN, -inf, ±0, +inf, a
// row of only NaN/-inf, shorter rows than count; the output poisoned with NaN before each launch
// (entries past min(count, vocab) must stay untouched); the counter left at zero (20 repeated
// launches on the same workspace, 4 in quick mode); host-mapped output (the CUDA backend's use); a programmatic
// launch behind a producer that writes the row late; the launcher's refusals.
// Information only: µs per launch for the 262144 row, count 65.
#include "../../kernels/cuda/TopK.cu"
#include "../../kernels/reference/ReferenceOps.cpp"  // standalone project: no reference library
#include "HarnessCommon.h"

using namespace harness;
using gemma::cuda::TopKEntry;
using gemma::cuda::TopKParams;

namespace {

std::vector<float> makeRow(std::int64_t n, int pattern, std::mt19937_64& rng) {
    std::vector<float> row(static_cast<std::size_t>(n));
    std::uniform_real_distribution<float> wide(-30.f, 30.f);
    std::uniform_int_distribution<int> grid(-6, 6);
    for (auto& v : row) v = pattern == 1 ? static_cast<float>(grid(rng)) * 0.25f : wide(rng);
    const float inf = std::numeric_limits<float>::infinity();
    if (pattern == 2) {  // non-finite and signed zeros
        for (std::int64_t i = 0; i < n; i += 7) row[static_cast<std::size_t>(i)] = std::nanf("");
        for (std::int64_t i = 3; i < n; i += 11) row[static_cast<std::size_t>(i)] = -inf;
        for (std::int64_t i = 5; i < n; i += 13) row[static_cast<std::size_t>(i)] = (i / 13) % 2 ? -0.0f : 0.0f;
        if (n > 40) row[static_cast<std::size_t>(n - 2)] = inf;
    }
    if (pattern == 3) {  // nothing possible
        for (std::int64_t i = 0; i < n; ++i) row[static_cast<std::size_t>(i)] = i % 2 ? std::nanf("") : -inf;
    }
    if (pattern == 4) {  // every value equal: the ids decide
        for (auto& v : row) v = -0.0f;
    }
    return row;
}

bool sameBits(float a, float b) {
    std::uint32_t x, y;
    std::memcpy(&x, &a, 4);
    std::memcpy(&y, &b, 4);
    return x == y;
}

// A launch's parameters over the harness's one workspace.
TopKParams launchParams(const float* row, std::int64_t n, int count, TopKEntry* out, DeviceBuffer<unsigned char>& workspace) {
    TopKParams p;
    p.logits = row;
    p.vocab = n;
    p.count = count;
    p.out = out;
    p.workspace = workspace.ptr;
    p.workspaceBytes = workspace.bytes();
    return p;
}

// Empty when got[0, min(count, n)) equals reference::topK of the row bit for bit and every slot
// after it (up to got.size()) is still the 0xFF poison; else what differs first.
std::string mismatch(const std::vector<float>& row, int count, const std::vector<TopKEntry>& got) {
    const std::int64_t n = static_cast<std::int64_t>(row.size());
    const int wanted = static_cast<int>(std::min<std::int64_t>(count, n));
    std::vector<float> refLogits(static_cast<std::size_t>(wanted));
    std::vector<std::int32_t> refIds(static_cast<std::size_t>(wanted));
    gemma::reference::topK(row.data(), n, count, refLogits.data(), refIds.data());
    for (int i = 0; i < wanted; ++i) {
        if (got[i].id != refIds[i] || !sameBits(got[i].logit, refLogits[i])) {
            char line[160];
            std::snprintf(line, sizeof line, "entry %d: got (%g, %d), want (%g, %d)", i, got[i].logit, got[i].id, refLogits[i], refIds[i]);
            return line;
        }
    }
    for (std::size_t i = static_cast<std::size_t>(wanted); i < got.size(); ++i)
        if (got[i].id != -1) return "wrote past min(count, vocab) at " + std::to_string(i);
    return {};
}

constexpr int kSlots = gemma::cuda::kTopKMaxCount + 8;  // output slots, poisoned before each launch

// One launch on the legacy stream against the reference; true when it matches (mismatch()).
bool runOnce(const std::vector<float>& row, int count, DeviceBuffer<float>& dRow, DeviceBuffer<unsigned char>& workspace,
             TopKEntry* out, std::string& why) {
    HCHECK(cudaMemset(out, 0xFF, sizeof(TopKEntry) * kSlots));
    TopKParams p = launchParams(dRow.ptr, static_cast<std::int64_t>(row.size()), count, out, workspace);
    HCHECK_STATUS(gemma::cuda::launchTopK(p, nullptr));
    HCHECK(cudaDeviceSynchronize());
    std::vector<TopKEntry> got(kSlots);
    HCHECK(cudaMemcpy(got.data(), out, sizeof(TopKEntry) * kSlots, cudaMemcpyDeviceToHost));
    why = mismatch(row, count, got);
    return why.empty();
}

}  // namespace

int main() {
    requireDevice("test_topk");
    std::mt19937_64 rng(seedFromEnv());
    const bool quick = quickMode();
    Report report("topk");
    // Quick mode (the sanitizer runs): the odd sizes; Gemma's row still runs in the checks below.
    std::vector<std::int64_t> sizes = {1, 7, 65, 4095, 4096, 4097, 70001};
    if (!quick) {
        sizes.push_back(262144);
        sizes.push_back(1 << 20);
    }
    DeviceBuffer<unsigned char> workspace(gemma::cuda::topKWorkspaceBytes(1 << 20, gemma::cuda::kTopKMaxCount) + 1024);
    HCHECK(cudaMemset(workspace.ptr, 0, workspace.bytes()));
    DeviceBuffer<TopKEntry> out(kSlots);
    for (const std::int64_t n : sizes) {
        DeviceBuffer<float> dRow(static_cast<std::size_t>(n));
        for (int pattern = 0; pattern < 5; ++pattern) {
            const std::vector<float> row = makeRow(n, pattern, rng);
            dRow.upload(row);
            for (const int count : {1, 2, 65, 128}) {
                std::string why;
                const bool ok = runOnce(row, count, dRow, workspace, out.ptr, why);
                report.addCheck("n " + std::to_string(n) + " pattern " + std::to_string(pattern) + " count " + std::to_string(count), ok, why);
            }
        }
    }
    // The counter returns to zero: 20 launches in a row on one workspace, fresh rows each time.
    {
        DeviceBuffer<float> dRow(262144);
        bool ok = true;
        std::string why;
        for (int round = 0; round < (quick ? 4 : 20) && ok; ++round) {
            const std::vector<float> row = makeRow(262144, round % 3, rng);
            dRow.upload(row);
            ok = runOnce(row, 65, dRow, workspace, out.ptr, why);
        }
        report.addCheck("repeated launches on one workspace", ok, why);
    }
    // Host-mapped output, as the CUDA backend reads it: the kernel writes through the device
    // pointer, the host poisons and reads through its own.
    {
        TopKEntry* mappedHost = nullptr;
        HCHECK(cudaHostAlloc(reinterpret_cast<void**>(&mappedHost), sizeof(TopKEntry) * kSlots, cudaHostAllocMapped));
        TopKEntry* mappedDevice = nullptr;
        HCHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&mappedDevice), mappedHost, 0));
        DeviceBuffer<float> dRow(262144);
        const std::vector<float> row = makeRow(262144, 1, rng);
        dRow.upload(row);
        std::memset(mappedHost, 0xFF, sizeof(TopKEntry) * kSlots);
        TopKParams p = launchParams(dRow.ptr, 262144, 65, mappedDevice, workspace);
        HCHECK_STATUS(gemma::cuda::launchTopK(p, nullptr));
        HCHECK(cudaDeviceSynchronize());
        const std::string why = mismatch(row, 65, std::vector<TopKEntry>(mappedHost, mappedHost + kSlots));
        report.addCheck("host-mapped output", why.empty(), why);
        HCHECK(cudaFreeHost(mappedHost));
    }
    // Programmatic launch: a producer writes the row ~50 µs late (HarnessCommon.h, Producer); the
    // top-k launched behind it must wait for it and see the new row, not the NaN poison.
    {
        const std::int64_t n = 262144;
        DeviceBuffer<float> dRow(static_cast<std::size_t>(n));
        bool ok = true;
        std::string why;
        for (int round = 0; round < (quick ? 3 : 10) && ok; ++round) {
            Producer producer(true);
            const std::vector<float> row = makeRow(n, round % 2, rng);
            producer.upload(dRow, row);
            HCHECK(cudaMemset(out.ptr, 0xFF, out.bytes()));
            producer.produce();
            TopKParams p = launchParams(dRow.ptr, n, 65, out.ptr, workspace);
            p.programmaticLaunch = true;
            HCHECK_STATUS(gemma::cuda::launchTopK(p, producer.stream()));
            HCHECK(cudaDeviceSynchronize());
            std::vector<TopKEntry> got(kSlots);
            HCHECK(cudaMemcpy(got.data(), out.ptr, kSlots * sizeof(TopKEntry), cudaMemcpyDeviceToHost));
            why = mismatch(row, 65, got);
            ok = why.empty();
            if (!ok) why = "round " + std::to_string(round) + ": " + why;
        }
        report.addCheck("programmatic launch behind a late producer", ok, why);
    }
    // Refusals.
    {
        DeviceBuffer<float> dRow(16);
        auto status = [&](auto&& edit) {
            TopKParams p = launchParams(dRow.ptr, 16, 4, out.ptr, workspace);
            edit(p);
            return gemma::cuda::launchTopK(p, nullptr);
        };
        using gemma::cuda::KernelStatus;
        const bool refused = status([](TopKParams& p) { p.count = 0; }) == KernelStatus::InvalidArgument &&
                             status([](TopKParams& p) { p.count = gemma::cuda::kTopKMaxCount + 1; }) == KernelStatus::InvalidArgument &&
                             status([](TopKParams& p) { p.vocab = 0; }) == KernelStatus::InvalidArgument &&
                             status([](TopKParams& p) { p.out = nullptr; }) == KernelStatus::InvalidArgument &&
                             status([](TopKParams& p) { p.workspaceBytes = 8; }) == KernelStatus::InvalidArgument &&
                             status([](TopKParams& p) { p.workspace = static_cast<unsigned char*>(p.workspace) + 4; }) ==
                                 KernelStatus::InvalidArgument;
        report.addCheck("launcher refuses bad arguments", refused, "");
        HCHECK(cudaDeviceSynchronize());
    }
    // Information only.
    {
        DeviceBuffer<float> dRow(262144);
        dRow.upload(makeRow(262144, 0, rng));
        TopKParams p = launchParams(dRow.ptr, 262144, 65, out.ptr, workspace);
        const double us = medianMicros([&](int) { HCHECK_STATUS(gemma::cuda::launchTopK(p, nullptr)); }, 5, 20);
        std::printf("\ntop-65 of a 262144-entry row: %.1f us per launch (information only)\n", us);
    }
    return report.finish();
}
