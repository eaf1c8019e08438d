// KernelBuckets.h: every __global__ function of kernels/cuda has a bucket, so a kernel added
// without one fails here instead of being charged to norm_elementwise by the trace's fallback.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "KernelBuckets.h"

namespace {

// The names of the __global__ functions defined in one source text: "__global__ void", an
// optional __launch_bounds__(...), then the name before "(".
std::set<std::string> globalFunctions(const std::string& text) {
    static const std::regex kDefinition(R"(__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?([A-Za-z_][A-Za-z0-9_]*)\s*\()");
    std::set<std::string> names;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), kDefinition); it != std::sregex_iterator(); ++it)
        names.insert((*it)[1].str());
    return names;
}

TEST(KernelBuckets, ParserFindsDefinitions) {
    const auto names = globalFunctions("template <int R>\n__global__ void __launch_bounds__(256, 2) oneKernel(\n int a) {}\n"
                                       "__global__ void twoKernel(const float* x) {}\n// __global__ is a word\n");
    EXPECT_EQ(names, (std::set<std::string>{"oneKernel", "twoKernel"}));
}

TEST(KernelBuckets, EveryCudaKernelHasABucket) {
    const std::filesystem::path dir = GEMMA_KERNELS_SOURCE_DIR;
    ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
    std::set<std::string> kernels;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        if (entry.path().extension() != ".cu" && entry.path().extension() != ".cuh" && entry.path().extension() != ".h") continue;
        std::ifstream in(entry.path());
        std::stringstream text;
        text << in.rdbuf();
        for (const auto& name : globalFunctions(text.str())) kernels.insert(name);
    }
    // The kernel library has well over a dozen kernels; an empty scan means the parser broke.
    ASSERT_GE(kernels.size(), 15u);
    for (const auto& name : kernels) EXPECT_GE(gemma::kernelBucket(name), 0) << name << " has no bucket in KernelBuckets.h";
}

TEST(KernelBuckets, Rules) {
    using gemma::Bucket;
    EXPECT_EQ(gemma::kernelBucket("fp4MatvecMmaKernel"), static_cast<int>(Bucket::Fp4Matvec));
    EXPECT_EQ(gemma::kernelBucket("qkvNormRopeKernel"), static_cast<int>(Bucket::Attention));
    EXPECT_EQ(gemma::kernelBucket("attentionMergeKernel"), static_cast<int>(Bucket::Attention));
    EXPECT_EQ(gemma::kernelBucket("fp8LmHeadPersistentKernel"), static_cast<int>(Bucket::LmHead));
    EXPECT_EQ(gemma::kernelBucket("argmaxKernel"), static_cast<int>(Bucket::Sampling));
    EXPECT_EQ(gemma::kernelBucket("rmsNormResidualKernel"), static_cast<int>(Bucket::NormElementwise));
    EXPECT_EQ(gemma::kernelBucket("someOtherKernel"), -1);
    EXPECT_EQ(gemma::kernelBucket(""), -1);
}

}  // namespace
