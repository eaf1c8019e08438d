// Tests for the engine's run-time cuBLASLt loader (engine/src/CublasLt.h). They need no GPU: a
// missing library and a library without the entry points must come back as clear Status values,
// the default load either binds every entry point or explains why not, and creating the GEMM
// object on a machine without a device fails cleanly. Built in CUDA builds only.
#include "CublasLt.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "CudaBackend.h"

namespace gemma {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(CublasLtLoader, MissingLibraryIsUnsupportedWithAClearMessage) {
    const char* sonames[] = {"libgemma-test-no-such-cublasLt.so.99", "/nonexistent/libcublasLt.so"};
    const auto api = loadCublasLtFrom(sonames);
    ASSERT_FALSE(api.hasValue());
    const Status status = api.status();
    EXPECT_EQ(status.code(), ErrorCode::Unsupported);
    const std::string& message = status.message();
    EXPECT_TRUE(contains(message, "cuBLASLt is not installed")) << message;
    EXPECT_TRUE(contains(message, "libgemma-test-no-such-cublasLt.so.99")) << message;
    EXPECT_TRUE(contains(message, "/nonexistent/libcublasLt.so")) << message;
    EXPECT_TRUE(contains(message, "matvec")) << message;
}

TEST(CublasLtLoader, LibraryWithoutTheEntryPointsIsRefused) {
    // libm is on every glibc system and has none of cuBLASLt's symbols.
    const char* sonames[] = {"libgemma-test-no-such-cublasLt.so.99", "libm.so.6"};
    const auto api = loadCublasLtFrom(sonames);
    ASSERT_FALSE(api.hasValue());
    const Status status = api.status();
    EXPECT_EQ(status.code(), ErrorCode::InvalidFile);
    const std::string& message = status.message();
    EXPECT_TRUE(contains(message, "libm.so.6")) << message;
    EXPECT_TRUE(contains(message, "cublasLtCreate")) << message;
    EXPECT_TRUE(contains(message, "cublasLtMatmul")) << message;
}

TEST(CublasLtLoader, DefaultLoadBindsEveryEntryPointOrExplains) {
    const auto api = loadCublasLt();
    if (!api.hasValue()) {
        const Status status = api.status();
        EXPECT_TRUE(status.code() == ErrorCode::Unsupported || status.code() == ErrorCode::InvalidFile);
        EXPECT_TRUE(contains(status.message(), "cuBLASLt") || contains(status.message(), "libcublasLt"))
            << status.message();
        return;
    }
    const CublasLtApi& lt = **api;
    EXPECT_TRUE(lt.create && lt.destroy && lt.descCreate && lt.descDestroy && lt.descSet && lt.layoutCreate &&
                lt.layoutDestroy && lt.preferenceCreate && lt.preferenceDestroy && lt.preferenceSet && lt.heuristic &&
                lt.matmul);
    bool known = false;
    for (const char* name : kCublasLtSonames) known = known || lt.soname == name;
    EXPECT_TRUE(known) << lt.soname;
    // Loaded once per process: a second call returns the same table.
    const auto again = loadCublasLt();
    ASSERT_TRUE(again.hasValue());
    EXPECT_EQ(*again, *api);
}

TEST(CublasLt, CreateFailsCleanlyWithoutADeviceAndValidatesArguments) {
    auto lt = CublasLt::create();
    if (!cudaDeviceAvailable()) {
        // No device: the library may load, but the handle or the workspace cannot be made.
        ASSERT_FALSE(lt.hasValue());
        const Status status = lt.status();
        EXPECT_NE(status.code(), ErrorCode::Ok);
        EXPECT_TRUE(contains(status.message(), "cuBLASLt")) << status.message();
        return;
    }
    if (!lt.hasValue()) {
        // A device but no library: the message says what is missing.
        const Status status = lt.status();
        EXPECT_TRUE(contains(status.message(), "cuBLASLt")) << status.message();
        return;
    }
    // Argument checks happen before anything reaches the device.
    CublasLt& gemm = **lt;
    const auto* x = reinterpret_cast<const std::uint16_t*>(std::uintptr_t{256});
    auto* y = reinterpret_cast<float*>(std::uintptr_t{512});
    EXPECT_EQ(gemm.gemmBf16(0, 8, 8, x, 8, x, 8, y, 8, false, nullptr).code(), ErrorCode::InvalidArgument);
    EXPECT_EQ(gemm.gemmBf16(1, 8, 16, x, 8, x, 16, y, 8, false, nullptr).code(), ErrorCode::InvalidArgument);
    EXPECT_EQ(gemm.gemmBf16(1, 8, 16, x, 16, x, 16, y, 4, false, nullptr).code(), ErrorCode::InvalidArgument);
    EXPECT_EQ(gemm.gemmBf16(1, 8, 16, nullptr, 16, x, 16, y, 8, false, nullptr).code(), ErrorCode::InvalidArgument);
    EXPECT_EQ(gemm.cachedPlans(), 0u);
}

}  // namespace
}  // namespace gemma
