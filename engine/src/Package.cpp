#include "Package.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "JsonLimits.h"
#include "kernels/WeightFormats.h"

namespace gemma {
namespace {

using Json = nlohmann::json;

struct FixedHeader {
    char magic[8];
    std::uint32_t version;
    std::uint32_t reserved0;
    std::uint64_t manifestOffset;
    std::uint64_t manifestBytes;
    std::uint64_t fileBytes;
    std::uint64_t reserved[3];
};
static_assert(sizeof(FixedHeader) == kPackageHeaderBytes);

Status packageError(const std::string& message) { return {ErrorCode::InvalidFile, "package: " + message}; }

bool parseFormat(const std::string& text, TensorFormat& format) {
    if (text == "f32") { format = TensorFormat::F32; return true; }
    if (text == "fp4-e2m1-g128") { format = TensorFormat::Fp4G128; return true; }
    if (text == "fp8-e4m3-row") { format = TensorFormat::Fp8RowScaled; return true; }
    return false;
}

}  // namespace

const char* tensorFormatName(TensorFormat format) {
    switch (format) {
        case TensorFormat::F32: return "f32";
        case TensorFormat::Fp4G128: return "fp4-e2m1-g128";
        case TensorFormat::Fp8RowScaled: return "fp8-e4m3-row";
    }
    return "?";
}

std::int64_t PackageTensor::elements() const {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

bool expectedTensorBytes(TensorFormat format, const std::vector<std::int64_t>& shape, std::uint64_t& dataBytes,
                         std::uint64_t& scaleBytes) {
    if (shape.empty() || shape.size() > 2) return false;
    for (auto d : shape) {
        if (d <= 0 || d > (std::int64_t{1} << 31)) return false;
    }
    const auto rows = static_cast<std::uint64_t>(shape.size() == 2 ? shape[0] : 1);
    const auto cols = static_cast<std::uint64_t>(shape.back());
    if (rows * cols > (std::uint64_t{1} << 40)) return false;  // keeps every byte count below 2^43, no overflow
    switch (format) {
        case TensorFormat::F32:
            dataBytes = rows * cols * 4;
            scaleBytes = 0;
            return true;
        case TensorFormat::Fp4G128:
            if (shape.size() != 2) return false;
            dataBytes = rows * static_cast<std::uint64_t>(formats::fp4RowBytes(static_cast<std::int64_t>(cols)));
            scaleBytes = rows * static_cast<std::uint64_t>(formats::fp4GroupsPerRow(static_cast<std::int64_t>(cols))) * 2;
            return true;
        case TensorFormat::Fp8RowScaled:
            if (shape.size() != 2) return false;
            dataBytes = rows * cols;
            scaleBytes = rows * 4;
            return true;
    }
    return false;
}

// ---- Reading ------------------------------------------------------------------------------------

Expected<Package> Package::open(const std::filesystem::path& path) {
    auto mapped = MappedFile::open(path);
    if (!mapped) return mapped.status();
    Package package;
    package.file_ = std::move(mapped.value());
    const auto size = static_cast<std::uint64_t>(package.file_.size());
    if (size == 0) return packageError("'" + path.string() + "' is empty");
    if (size < kPackageAlignment) return packageError("'" + path.string() + "' is too small to be a Gemma Desk package");
    FixedHeader header{};
    std::memcpy(&header, package.file_.data(), sizeof header);
    if (std::memcmp(header.magic, kPackageMagic, sizeof kPackageMagic) != 0) {
        return packageError("'" + path.filename().string() + "' is not a Gemma Desk package (bad magic); convert the model folder with gemma-quantize");
    }
    if (header.version != kPackageVersion) {
        return Status{ErrorCode::Unsupported, "package format version " + std::to_string(header.version) +
                                                  " is not supported (this build reads version " + std::to_string(kPackageVersion) + ")"};
    }
    if (header.fileBytes != size) {
        return packageError("the header says the file has " + std::to_string(header.fileBytes) + " bytes but it has " +
                            std::to_string(size) + " (truncated or appended to)");
    }
    if (header.manifestOffset < kPackageAlignment || header.manifestBytes == 0 || header.manifestOffset > size ||
        header.manifestBytes != size - header.manifestOffset) {
        return packageError("the manifest location is outside the file");
    }
    const char* manifestText = reinterpret_cast<const char*>(package.file_.data() + header.manifestOffset);
    if (!jsonDepthWithin(std::string_view(manifestText, header.manifestBytes))) return packageError("the manifest nests too deeply");
    Json manifest = Json::parse(manifestText, manifestText + header.manifestBytes, nullptr, false);
    if (manifest.is_discarded() || !manifest.is_object()) return packageError("the manifest is not valid JSON");

    try {
        // Config: the same parser and checks as config.json.
        if (!manifest.contains("config") || !manifest["config"].is_object()) return packageError("the manifest has no config");
        auto config = ModelConfig::fromJson(manifest["config"].dump());
        if (!config) return config.status().withContext("package config");
        package.config_ = std::move(config.value());

        const Json& meta = manifest.at("metadata");
        PackageMetadata& m = package.metadata_;
        m.name = meta.at("name").get<std::string>();
        m.embedScale = meta.at("embed_scale").get<float>();
        m.perLayerEmbedScale = meta.at("per_layer_embed_scale").get<float>();
        m.emptyThoughtChannel = meta.at("empty_thought_channel").get<bool>();
        m.linearFormat = meta.at("linear_format").get<std::string>();
        m.embeddingFormat = meta.at("embedding_format").get<std::string>();
        m.scaleRule = meta.at("scale_rule").get<std::string>();
        m.sourceDType = meta.at("source_dtype").get<std::string>();
        if (!std::isfinite(m.embedScale) || m.embedScale <= 0.0f || !std::isfinite(m.perLayerEmbedScale)) {
            return packageError("embedding scale is not a positive finite number");
        }

        const auto manifestOffset = header.manifestOffset;
        package.dataBytes_ = static_cast<std::size_t>(manifestOffset - kPackageAlignment);
        std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
        auto checkRange = [&](std::uint64_t offset, std::uint64_t bytes, const std::string& what) -> Status {
            if (offset % kPackageAlignment != 0) return packageError(what + " is not 256-byte aligned");
            if (offset < kPackageAlignment || offset > manifestOffset || bytes > manifestOffset - offset) {
                return packageError(what + " (offset " + std::to_string(offset) + ", " + std::to_string(bytes) +
                                    " bytes) lies outside the data section");
            }
            if (bytes > 0) ranges.emplace_back(offset, offset + bytes);
            return Status::ok();
        };

        const Json& tokenizer = manifest.at("tokenizer");
        const auto tokOffset = tokenizer.at("offset").get<std::uint64_t>();
        const auto tokBytes = tokenizer.at("bytes").get<std::uint64_t>();
        // A package without a tokenizer (tokBytes 0: a synthetic benchmark package) runs raw tokens only.
        if (tokBytes > 0) {
            GEMMA_RETURN_IF_ERROR(checkRange(tokOffset, tokBytes, "the tokenizer"));
            package.tokenizer_ = std::string_view(reinterpret_cast<const char*>(package.file_.data() + tokOffset), tokBytes);
        }

        const Json& tensors = manifest.at("tensors");
        if (!tensors.is_array()) return packageError("'tensors' is not a list");
        for (const auto& entry : tensors) {
            PackageTensor t;
            t.name = entry.at("name").get<std::string>();
            const std::string formatText = entry.at("format").get<std::string>();
            if (!parseFormat(formatText, t.format)) {
                return Status{ErrorCode::Unsupported, "package: tensor '" + t.name + "' uses an unknown quantization scheme '" + formatText + "'"};
            }
            t.shape = entry.at("shape").get<std::vector<std::int64_t>>();
            t.offset = entry.at("offset").get<std::uint64_t>();
            t.bytes = entry.at("bytes").get<std::uint64_t>();
            t.scaleOffset = entry.at("scale_offset").get<std::uint64_t>();
            t.scaleBytes = entry.at("scale_bytes").get<std::uint64_t>();
            std::uint64_t dataBytes = 0, scaleBytes = 0;
            if (!expectedTensorBytes(t.format, t.shape, dataBytes, scaleBytes)) {
                return packageError("tensor '" + t.name + "' has an impossible shape for " + formatText);
            }
            if (dataBytes != t.bytes || scaleBytes != t.scaleBytes) {
                return packageError("tensor '" + t.name + "' holds " + std::to_string(t.bytes) + "+" + std::to_string(t.scaleBytes) +
                                    " bytes but its shape needs " + std::to_string(dataBytes) + "+" + std::to_string(scaleBytes));
            }
            GEMMA_RETURN_IF_ERROR(checkRange(t.offset, t.bytes, "tensor '" + t.name + "'"));
            if (t.scaleBytes > 0) GEMMA_RETURN_IF_ERROR(checkRange(t.scaleOffset, t.scaleBytes, "scales of tensor '" + t.name + "'"));
            t.data = package.file_.data() + t.offset;
            t.scales = t.scaleBytes > 0 ? package.file_.data() + t.scaleOffset : nullptr;
            if (!package.tensors_.emplace(t.name, t).second) return packageError("tensor '" + t.name + "' is listed twice");
        }
        std::sort(ranges.begin(), ranges.end());
        for (std::size_t i = 1; i < ranges.size(); ++i) {
            if (ranges[i].first < ranges[i - 1].second) return packageError("two blobs overlap at offset " + std::to_string(ranges[i].first));
        }
    } catch (const Json::exception& error) {
        // nlohmann reports a missing key or a wrong type by exception; it never escapes open().
        return packageError(std::string("the manifest is malformed (") + error.what() + ")");
    }
    return package;
}

const PackageTensor* Package::find(const std::string& name) const {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
}

// ---- Writing ------------------------------------------------------------------------------------

Expected<PackageWriter> PackageWriter::create(const std::filesystem::path& path) {
    PackageWriter writer;
    writer.finalPath_ = path;
    writer.temporaryPath_ = path;
    writer.temporaryPath_ += ".partial";
    writer.out_.open(writer.temporaryPath_, std::ios::binary | std::ios::trunc);
    if (!writer.out_) return Status{ErrorCode::Io, "cannot write '" + writer.temporaryPath_.string() + "'"};
    // Placeholder header; the real one is written by finish().
    const std::vector<char> zeros(kPackageAlignment, 0);
    writer.out_.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
    writer.position_ = kPackageAlignment;
    return writer;
}

PackageWriter::PackageWriter(PackageWriter&& other) noexcept
    : finalPath_(std::move(other.finalPath_)),
      temporaryPath_(std::move(other.temporaryPath_)),
      out_(std::move(other.out_)),
      position_(other.position_),
      tokenizerOffset_(other.tokenizerOffset_),
      tokenizerBytes_(other.tokenizerBytes_),
      tensors_(std::move(other.tensors_)),
      finished_(other.finished_) {
    other.temporaryPath_.clear();  // the moved-from writer must not delete the file in its destructor
    other.finished_ = true;
}

PackageWriter::~PackageWriter() {
    if (!finished_ && !temporaryPath_.empty()) {
        out_.close();
        std::error_code ignored;
        std::filesystem::remove(temporaryPath_, ignored);
    }
}

Status PackageWriter::writeAligned(const void* bytes, std::uint64_t size, std::uint64_t& offset) {
    const std::uint64_t padding = (kPackageAlignment - position_ % kPackageAlignment) % kPackageAlignment;
    static const char zeros[kPackageAlignment] = {};
    out_.write(zeros, static_cast<std::streamsize>(padding));
    position_ += padding;
    offset = position_;
    out_.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(size));
    position_ += size;
    if (!out_) return {ErrorCode::Io, "writing '" + temporaryPath_.string() + "' failed (disk full?)"};
    return Status::ok();
}

Status PackageWriter::addTokenizer(std::string_view modelBytes) {
    tokenizerBytes_ = modelBytes.size();
    return writeAligned(modelBytes.data(), modelBytes.size(), tokenizerOffset_);
}

Status PackageWriter::addTensor(const std::string& name, TensorFormat format, const std::vector<std::int64_t>& shape,
                                const void* data, std::uint64_t dataBytes, const void* scales, std::uint64_t scaleBytes) {
    std::uint64_t expectedData = 0, expectedScales = 0;
    if (!expectedTensorBytes(format, shape, expectedData, expectedScales) || expectedData != dataBytes ||
        expectedScales != scaleBytes) {
        return {ErrorCode::Internal, "tensor '" + name + "': data size does not match its shape"};
    }
    PackageTensor t;
    t.name = name;
    t.format = format;
    t.shape = shape;
    t.bytes = dataBytes;
    t.scaleBytes = scaleBytes;
    GEMMA_RETURN_IF_ERROR(writeAligned(data, dataBytes, t.offset));
    if (scaleBytes > 0) GEMMA_RETURN_IF_ERROR(writeAligned(scales, scaleBytes, t.scaleOffset));
    tensors_.push_back(std::move(t));
    return Status::ok();
}

Status PackageWriter::finish(const ModelConfig& config, const PackageMetadata& metadata) {
    Json manifest;
    manifest["format"] = "gemma-desk-package";
    manifest["version"] = kPackageVersion;
    manifest["config"] = Json::parse(config.toJson());
    manifest["metadata"] = Json{{"name", metadata.name},
                                {"embed_scale", metadata.embedScale},
                                {"per_layer_embed_scale", metadata.perLayerEmbedScale},
                                {"empty_thought_channel", metadata.emptyThoughtChannel},
                                {"linear_format", metadata.linearFormat},
                                {"embedding_format", metadata.embeddingFormat},
                                {"scale_rule", metadata.scaleRule},
                                {"source_dtype", metadata.sourceDType}};
    manifest["tokenizer"] = Json{{"offset", tokenizerOffset_}, {"bytes", tokenizerBytes_}};
    Json list = Json::array();
    for (const auto& t : tensors_) {
        list.push_back(Json{{"name", t.name},
                            {"format", tensorFormatName(t.format)},
                            {"shape", t.shape},
                            {"offset", t.offset},
                            {"bytes", t.bytes},
                            {"scale_offset", t.scaleOffset},
                            {"scale_bytes", t.scaleBytes}});
    }
    manifest["tensors"] = list;
    const std::string text = manifest.dump(1);
    std::uint64_t manifestOffset = 0;
    GEMMA_RETURN_IF_ERROR(writeAligned(text.data(), text.size(), manifestOffset));

    FixedHeader header{};
    std::memcpy(header.magic, kPackageMagic, sizeof kPackageMagic);
    header.version = kPackageVersion;
    header.manifestOffset = manifestOffset;
    header.manifestBytes = text.size();
    header.fileBytes = position_;
    out_.seekp(0);
    out_.write(reinterpret_cast<const char*>(&header), sizeof header);
    out_.close();
    if (!out_) return {ErrorCode::Io, "finishing '" + temporaryPath_.string() + "' failed"};
    std::error_code error;
    std::filesystem::rename(temporaryPath_, finalPath_, error);
    if (error) return {ErrorCode::Io, "cannot rename the package into place: " + error.message()};
    finished_ = true;
    return Status::ok();
}

}  // namespace gemma
