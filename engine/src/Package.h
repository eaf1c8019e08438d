// The Gemma Desk package: one self-contained, mmap-able file (docs/PACKAGE_FORMAT.md).
//
//   [0, 64)        fixed header: magic "GEMMADSK", format version, manifest offset/size, file size
//   [256, ...)     blobs (tokenizer model, tensor data, tensor scales), each 256-byte aligned
//   [manifest]     UTF-8 JSON at the end: config, metadata, tokenizer and tensor tables
//
// The manifest is written last so tensors stream to disk without knowing the table's size.
// Opening validates every offset, size, alignment and overlap before anything is read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "MappedFile.h"
#include "gemma/Config.h"
#include "gemma/Status.h"

namespace gemma {

inline constexpr char kPackageMagic[8] = {'G', 'E', 'M', 'M', 'A', 'D', 'S', 'K'};
inline constexpr std::uint32_t kPackageVersion = 1;
inline constexpr std::uint64_t kPackageAlignment = 256;
inline constexpr std::uint64_t kPackageHeaderBytes = 64;

enum class TensorFormat { F32, Fp4G128, Fp8RowScaled };
const char* tensorFormatName(TensorFormat format);

struct PackageTensor {
    std::string name;
    TensorFormat format = TensorFormat::F32;
    std::vector<std::int64_t> shape;  // [out, in] for matrices, [n] for vectors
    std::uint64_t offset = 0, bytes = 0;            // data (codes, or f32 values)
    std::uint64_t scaleOffset = 0, scaleBytes = 0;  // scales (0 bytes for F32)
    const std::uint8_t* data = nullptr;             // set when read from a mapped file
    const std::uint8_t* scales = nullptr;
    std::int64_t elements() const;
};

// Sizes of data and scales implied by format and shape; false if the shape is impossible.
bool expectedTensorBytes(TensorFormat format, const std::vector<std::int64_t>& shape, std::uint64_t& dataBytes,
                         std::uint64_t& scaleBytes);

struct PackageMetadata {
    std::string name;
    float embedScale = 1.0f;          // √H rounded as the checkpoint's dtype rounds it (GEMMA4.md §2.1)
    float perLayerEmbedScale = 1.0f;  // √P, same rule
    bool emptyThoughtChannel = true;  // generation prompt ends with an empty thought channel
    std::string linearFormat;         // "fp4-e2m1-g128" or "f32"
    std::string embeddingFormat;      // "fp8-e4m3-row" or "f32"
    std::string scaleRule;            // "absmax", "minimum-error" or "" when unquantized
    std::string sourceDType;          // dtype of the checkpoint's embedding
};

class Package {
public:
    static Expected<Package> open(const std::filesystem::path& path);

    const ModelConfig& config() const { return config_; }
    const PackageMetadata& metadata() const { return metadata_; }
    std::string_view tokenizerModel() const { return tokenizer_; }
    const PackageTensor* find(const std::string& name) const;
    const std::map<std::string, PackageTensor>& tensors() const { return tensors_; }
    std::uint64_t fileBytes() const { return file_.size(); }
    // The blob section [256, manifest): every tensor lies inside it, so a backend can upload it in
    // one copy and translate a tensor's host pointer by its offset from dataSection().data().
    std::span<const std::uint8_t> dataSection() const { return {file_.data() + kPackageAlignment, dataBytes_}; }

private:
    MappedFile file_;
    ModelConfig config_;
    PackageMetadata metadata_;
    std::string_view tokenizer_;
    std::map<std::string, PackageTensor> tensors_;
    std::size_t dataBytes_ = 0;
};

// Streams blobs to a temporary file, then writes the manifest and header and renames the file
// into place, so a reader never sees a half-written package.
class PackageWriter {
public:
    static Expected<PackageWriter> create(const std::filesystem::path& path);
    PackageWriter(PackageWriter&& other) noexcept;
    PackageWriter& operator=(PackageWriter&&) = delete;
    ~PackageWriter();

    Status addTokenizer(std::string_view modelBytes);
    // Appends data (and scales, for quantized formats) of one tensor.
    Status addTensor(const std::string& name, TensorFormat format, const std::vector<std::int64_t>& shape,
                     const void* data, std::uint64_t dataBytes, const void* scales, std::uint64_t scaleBytes);
    Status finish(const ModelConfig& config, const PackageMetadata& metadata);
    std::uint64_t bytesWritten() const { return position_; }

private:
    PackageWriter() = default;
    Status writeAligned(const void* bytes, std::uint64_t size, std::uint64_t& offset);

    std::filesystem::path finalPath_, temporaryPath_;
    std::ofstream out_;
    std::uint64_t position_ = 0;
    std::uint64_t tokenizerOffset_ = 0, tokenizerBytes_ = 0;
    std::vector<PackageTensor> tensors_;
    bool finished_ = false;
};

}  // namespace gemma
