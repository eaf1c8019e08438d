// Tests for the CUPTI kernel trace (engine/src/KernelTrace.h): kernel names reduced to their
// identifier and the run-time loader's errors need no GPU; the trace itself records real launches
// of gemma_kernels_cuda's streaming-read kernel, direct and replayed from a CUDA graph, and skips
// without a device or without CUPTI. Built in CUDA builds only.
#include "KernelTrace.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "StreamRead.h"

namespace gemma {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(KernelTraceNames, MangledNamesGiveTheFunctionIdentifier) {
    // As nvcc mangles this project's kernels (anonymous namespaces, templates with enum literals).
    EXPECT_EQ(kernelBaseName("_ZN5gemma4cuda12_GLOBAL__N_118fp4MatvecMmaKernelILb1ELNS1_5XFormE2ELi2ELi1ELb1EEEvPKhPKt"),
              "fp4MatvecMmaKernel");
    EXPECT_EQ(kernelBaseName("_ZN5gemma4cuda9fp4detail18fp4MatvecMmaKernelILb0ELNS1_5XFormE0ELi2ELi2ELb0EEEvNS1_7MmaArgsEi"),
              "fp4MatvecMmaKernel");
    EXPECT_EQ(kernelBaseName("_ZN5gemma4cuda46_GLOBAL__N__a9325ec3_13_StreamRead_cu_c8d426dc16streamReadKernelEPK5uint4lPj"),
              "streamReadKernel");
    EXPECT_EQ(kernelBaseName("_ZN5gemma4cuda12argmaxdetail12argmaxKernelEPKfllPiPfS4_S4_S5_S4_S4_i"), "argmaxKernel");
    EXPECT_EQ(kernelBaseName("_Z16streamReadKernelPK5uint4lPj"), "streamReadKernel");  // not nested
    EXPECT_EQ(kernelBaseName("_ZL10rmsNormKeyPfi"), "rmsNormKey");                      // internal linkage
    EXPECT_EQ(kernelBaseName("_ZN5gemma4cuda16embedd"), "embedd");                      // truncated: what is there
}

TEST(KernelTraceNames, DemangledAndPlainNamesGiveTheFunctionIdentifier) {
    EXPECT_EQ(kernelBaseName("void gemma::cuda::(anonymous namespace)::argmaxKernel<4>(float const*, long, int*)"),
              "argmaxKernel");
    EXPECT_EQ(kernelBaseName("void gemma::cuda::fp4detail::fp4MatvecMmaKernel<true, (gemma::cuda::fp4detail::XForm)2, "
                             "2, 1, true>(gemma::cuda::fp4detail::MmaArgs, int)"),
              "fp4MatvecMmaKernel");
    EXPECT_EQ(kernelBaseName("gemma::cuda::rmsNormKernel(float*, int)"), "rmsNormKernel");
    EXPECT_EQ(kernelBaseName("topKKernel<64>"), "topKKernel");
    EXPECT_EQ(kernelBaseName("streamReadKernel"), "streamReadKernel");
}

TEST(KernelTraceNames, TextWithoutAnIdentifierComesBackUnchanged) {
    EXPECT_EQ(kernelBaseName(""), "");
    EXPECT_EQ(kernelBaseName("(anonymous)"), "(anonymous)");
    EXPECT_EQ(kernelBaseName("_ZSt4movev"), "_ZSt4movev");  // a substitution first: not a kernel's shape
}

TEST(KernelTraceNames, DisplayNamesKeepTheTemplateArgumentsWithoutNamespaces) {
    EXPECT_EQ(kernelDisplayName("_ZN5gemma4cuda9fp4detail18fp4MatvecMmaKernelILb0ELNS1_5XFormE0ELi2ELi2ELb0EEEvNS1_7MmaArgsEi"),
              "fp4MatvecMmaKernel<false, (XForm)0, 2, 2, false>");
    EXPECT_EQ(kernelDisplayName("void gemma::cuda::(anonymous namespace)::argmaxKernel<4>(float const*, long, int*)"),
              "argmaxKernel<4>");
    // No template arguments, or nothing demangleable: the identifier alone.
    EXPECT_EQ(kernelDisplayName("_ZN5gemma4cuda12argmaxdetail12argmaxKernelEPKfllPiPfS4_S4_S5_S4_S4_i"), "argmaxKernel");
    EXPECT_EQ(kernelDisplayName("_ZN5gemma4cuda16embedd"), "embedd");
    EXPECT_EQ(kernelDisplayName("streamReadKernel"), "streamReadKernel");
    EXPECT_EQ(kernelDisplayName(""), "");
}

TEST(KernelTraceLoader, MissingLibraryIsUnsupportedWithAClearMessage) {
    const char* sonames[] = {"libgemma-test-no-such-cupti.so.99", "/nonexistent/libcupti.so"};
    const auto api = loadCuptiFrom(sonames);
    ASSERT_FALSE(api.hasValue());
    const Status status = api.status();
    EXPECT_EQ(status.code(), ErrorCode::Unsupported);
    const std::string& message = status.message();
    EXPECT_TRUE(contains(message, "CUPTI (libcupti.so) is not installed")) << message;
    EXPECT_TRUE(contains(message, "libgemma-test-no-such-cupti.so.99")) << message;
    EXPECT_TRUE(contains(message, "/nonexistent/libcupti.so")) << message;
}

TEST(KernelTraceLoader, LibraryWithoutTheEntryPointsIsRefused) {
    // libm is on every glibc system and has none of CUPTI's symbols.
    const char* sonames[] = {"libgemma-test-no-such-cupti.so.99", "libm.so.6"};
    const auto api = loadCuptiFrom(sonames);
    ASSERT_FALSE(api.hasValue());
    const Status status = api.status();
    EXPECT_EQ(status.code(), ErrorCode::InvalidFile);
    EXPECT_TRUE(contains(status.message(), "libm.so.6")) << status.message();
    EXPECT_TRUE(contains(status.message(), "cuptiActivityEnable")) << status.message();
    EXPECT_TRUE(contains(status.message(), "cuptiActivityFlushAll")) << status.message();
}

TEST(KernelTraceLoader, DefaultLoadBindsEveryEntryPointOrExplains) {
    const auto api = loadCupti();
    if (!api.hasValue()) {
        EXPECT_TRUE(api.status().code() == ErrorCode::Unsupported || api.status().code() == ErrorCode::InvalidFile);
        EXPECT_TRUE(contains(api.status().message(), "libcupti")) << api.status().message();
        return;
    }
    const CuptiApi& cupti = **api;
    EXPECT_TRUE(cupti.enable && cupti.disable && cupti.registerCallbacks && cupti.flushAll && cupti.nextRecord &&
                cupti.droppedRecords);
    bool known = false;
    for (const char* name : kCuptiSonames) known = known || cupti.soname == name;
    EXPECT_TRUE(known) << cupti.soname;
    const auto again = loadCupti();
    ASSERT_TRUE(again.hasValue());
    EXPECT_EQ(*again, *api);
}

std::size_t countStreamReads(const std::vector<KernelRecord>& records) {
    return static_cast<std::size_t>(std::count_if(records.begin(), records.end(), [](const KernelRecord& r) {
        return kernelBaseName(r.name) == "streamReadKernel";
    }));
}

// Device buffers and a stream, released at scope exit.
struct StreamReadRig {
    void* data = nullptr;
    std::uint32_t* sink = nullptr;
    cudaStream_t stream = nullptr;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ~StreamReadRig() {
        if (exec) cudaGraphExecDestroy(exec);
        if (graph) cudaGraphDestroy(graph);
        if (stream) cudaStreamDestroy(stream);
        cudaFree(sink);
        cudaFree(data);
    }
};

bool haveDevice() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0) return true;
    cudaGetLastError();
    return false;
}

TEST(KernelTrace, CreateWithoutADeviceFailsCleanly) {
    if (haveDevice()) {
        GTEST_SKIP() << "a CUDA device is present (RecordsDirectAndGraphReplayedKernels covers it)";
    }
    const auto trace = KernelTrace::create();
    ASSERT_FALSE(trace.hasValue());
    const Status status = trace.status();
    if (status.code() == ErrorCode::Unsupported) {  // no CUPTI either
        EXPECT_TRUE(contains(status.message(), "CUPTI (libcupti.so) is not installed")) << status.message();
        return;
    }
    EXPECT_EQ(status.code(), ErrorCode::Device);
    EXPECT_TRUE(contains(status.message(), "no usable CUDA device")) << status.message();
}

TEST(KernelTrace, RecordsDirectAndGraphReplayedKernels) {
    if (!haveDevice()) {
        GTEST_SKIP() << "no CUDA device: the kernel trace needs a GPU";
    }
    if (const auto api = loadCupti(); !api.hasValue()) {
        GTEST_SKIP() << api.status().message();
    }
    auto created = KernelTrace::create();
    ASSERT_TRUE(created.hasValue()) << created.status().message();
    KernelTrace& trace = **created;

    // CUPTI's activity API is process-global: a second trace is refused while this one lives.
    const auto second = KernelTrace::create();
    ASSERT_FALSE(second.hasValue());
    EXPECT_EQ(second.status().code(), ErrorCode::InvalidArgument);

    constexpr std::int64_t kBytes = std::int64_t{64} << 20;
    StreamReadRig rig;
    ASSERT_EQ(cudaMalloc(&rig.data, kBytes), cudaSuccess);
    ASSERT_EQ(cudaMemset(rig.data, 0x5a, kBytes), cudaSuccess);
    cuda::StreamReadParams params{rig.data, kBytes, nullptr, 0};
    params.blocks = cuda::streamReadBlocks(params);  // fixed before capture: no device query inside it
    ASSERT_GT(params.blocks, 0);
    ASSERT_EQ(cudaMalloc(&rig.sink, sizeof(std::uint32_t) * static_cast<std::size_t>(params.blocks)), cudaSuccess);
    params.sink = rig.sink;
    ASSERT_EQ(cudaStreamCreateWithFlags(&rig.stream, cudaStreamNonBlocking), cudaSuccess);

    for (int i = 0; i < 3; ++i) ASSERT_EQ(cuda::launchStreamRead(params, rig.stream), cuda::KernelStatus::Ok);
    ASSERT_EQ(cudaStreamSynchronize(rig.stream), cudaSuccess);
    ASSERT_EQ(cudaStreamBeginCapture(rig.stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(cuda::launchStreamRead(params, rig.stream), cuda::KernelStatus::Ok);
    ASSERT_EQ(cudaStreamEndCapture(rig.stream, &rig.graph), cudaSuccess);
    ASSERT_EQ(cudaGraphInstantiate(&rig.exec, rig.graph, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(rig.exec, rig.stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(rig.stream), cudaSuccess);

    std::vector<KernelRecord> records;
    const Status collected = trace.collect(records);
    ASSERT_TRUE(collected.isOk()) << collected.message();
    std::vector<KernelRecord> reads;
    std::copy_if(records.begin(), records.end(), std::back_inserter(reads),
                 [](const KernelRecord& r) { return kernelBaseName(r.name) == "streamReadKernel"; });
    ASSERT_EQ(reads.size(), 6u) << records.size() << " kernel records in all";
    std::sort(reads.begin(), reads.end(),
              [](const KernelRecord& a, const KernelRecord& b) { return a.startNs < b.startNs; });
    std::set<std::uint32_t> directIds;
    for (std::size_t k = 0; k < reads.size(); ++k) {
        EXPECT_GT(reads[k].endNs, reads[k].startNs) << "record " << k << " (" << reads[k].name << ")";
        // One stream, no programmatic launch: each kernel starts after its predecessor ended.
        if (k > 0) {
            EXPECT_GE(reads[k].startNs, reads[k - 1].endNs) << "record " << k;
        }
        if (k < 3) directIds.insert(reads[k].correlationId);
    }
    EXPECT_EQ(directIds.size(), 3u) << "each direct launch has its own correlation id";
    EXPECT_EQ(directIds.count(0u), 0u);

    // Everything was handed over: a second collect has nothing new.
    std::vector<KernelRecord> again;
    ASSERT_TRUE(trace.collect(again).isOk());
    EXPECT_EQ(countStreamReads(again), 0u);

    // Paused, the same replay leaves no records; resumed, it is recorded again.
    ASSERT_TRUE(trace.setRecording(false).isOk());
    ASSERT_EQ(cudaGraphLaunch(rig.exec, rig.stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(rig.stream), cudaSuccess);
    ASSERT_TRUE(trace.collect(again).isOk());
    EXPECT_EQ(countStreamReads(again), 0u);
    ASSERT_TRUE(trace.setRecording(true).isOk());
    ASSERT_EQ(cudaGraphLaunch(rig.exec, rig.stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(rig.stream), cudaSuccess);
    ASSERT_TRUE(trace.collect(again).isOk());
    EXPECT_EQ(countStreamReads(again), 3u);
}

}  // namespace
}  // namespace gemma
