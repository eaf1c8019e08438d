#include "SafeTensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "JsonLimits.h"
#include "kernels/WeightFormats.h"

namespace gemma {
namespace {

using Json = nlohmann::json;
constexpr std::uint64_t kMaxHeaderBytes = 100u << 20;  // the format's own limit is 100 MB

Status fileError(const std::filesystem::path& path, const std::string& message) {
    return {ErrorCode::InvalidFile, "'" + path.filename().string() + "': " + message};
}

bool parseDType(const std::string& text, SourceDType& dtype, std::size_t& elementBytes) {
    if (text == "F32") { dtype = SourceDType::F32; elementBytes = 4; return true; }
    if (text == "F16") { dtype = SourceDType::F16; elementBytes = 2; return true; }
    if (text == "BF16") { dtype = SourceDType::BF16; elementBytes = 2; return true; }
    return false;
}

// Names of the text model: "model.language_model.X" (Gemma4ForConditionalGeneration) or
// "model.X" (Gemma4ForCausalLM), plus an untied "lm_head.weight".
bool canonicalName(const std::string& name, bool multimodal, std::string& out) {
    static const std::string kMultimodalPrefix = "model.language_model.";
    static const std::string kTextPrefix = "model.";
    if (name == "lm_head.weight") { out = name; return true; }
    const std::string& prefix = multimodal ? kMultimodalPrefix : kTextPrefix;
    if (name.compare(0, prefix.size(), prefix) != 0) return false;
    out = name.substr(prefix.size());
    return true;
}

}  // namespace

const char* sourceDTypeName(SourceDType dtype) {
    switch (dtype) {
        case SourceDType::F32: return "F32";
        case SourceDType::F16: return "F16";
        case SourceDType::BF16: return "BF16";
    }
    return "?";
}

std::int64_t SourceTensor::elements() const {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

Status Checkpoint::parseFile(const MappedFile& file, std::vector<SourceTensor>& out) {
    const auto& path = file.path();
    if (file.size() < 8) return fileError(path, "too small to be a safetensors file (" + std::to_string(file.size()) + " bytes)");
    std::uint64_t headerBytes = 0;
    std::memcpy(&headerBytes, file.data(), 8);  // little-endian on every platform we build for
    if (headerBytes == 0 || headerBytes > kMaxHeaderBytes) {
        return fileError(path, "header length " + std::to_string(headerBytes) + " is not plausible");
    }
    if (headerBytes > file.size() - 8) {
        return fileError(path, "header length " + std::to_string(headerBytes) + " runs past the end of the file (" +
                                   std::to_string(file.size()) + " bytes): truncated?");
    }
    const char* headerText = reinterpret_cast<const char*>(file.data() + 8);
    if (!jsonDepthWithin(std::string_view(headerText, headerBytes))) return fileError(path, "the header nests too deeply to be a safetensors header");
    Json header = Json::parse(headerText, headerText + headerBytes, nullptr, false);
    if (header.is_discarded() || !header.is_object()) return fileError(path, "the header is not a JSON object");
    const std::uint8_t* dataStart = file.data() + 8 + headerBytes;
    const std::uint64_t dataBytes = file.size() - 8 - headerBytes;

    std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
    for (const auto& [name, entry] : header.items()) {
        if (name == "__metadata__") continue;
        const std::string where = "tensor '" + name + "'";
        if (!entry.is_object()) return fileError(path, where + " has no descriptor object");
        auto dtypeIt = entry.find("dtype");
        auto shapeIt = entry.find("shape");
        auto offsetsIt = entry.find("data_offsets");
        if (dtypeIt == entry.end() || !dtypeIt->is_string() || shapeIt == entry.end() || !shapeIt->is_array() ||
            offsetsIt == entry.end() || !offsetsIt->is_array() || offsetsIt->size() != 2) {
            return fileError(path, where + " lacks dtype, shape or data_offsets");
        }
        SourceTensor tensor;
        tensor.name = name;
        std::size_t elementBytes = 0;
        const std::string dtypeText = dtypeIt->get<std::string>();
        const bool knownDType = parseDType(dtypeText, tensor.dtype, elementBytes);
        std::uint64_t elements = 1;
        for (const auto& dim : *shapeIt) {
            if (!dim.is_number_unsigned()) return fileError(path, where + " has a negative or non-integer dimension");
            const std::uint64_t d = dim.get<std::uint64_t>();
            if (d != 0 && elements > (std::uint64_t{1} << 50) / d) return fileError(path, where + " has an impossible shape");
            elements *= d;
            tensor.shape.push_back(static_cast<std::int64_t>(d));
        }
        for (const auto& offset : *offsetsIt) {
            if (!offset.is_number_unsigned()) return fileError(path, where + " has a negative or non-integer data offset");
        }
        const std::uint64_t begin = (*offsetsIt)[0].get<std::uint64_t>();
        const std::uint64_t end = (*offsetsIt)[1].get<std::uint64_t>();
        if (begin > end || end > dataBytes) {
            return fileError(path, where + " data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                                       ") lie outside the " + std::to_string(dataBytes) + "-byte data section");
        }
        if (knownDType && end - begin != elements * elementBytes) {
            return fileError(path, where + " holds " + std::to_string(end - begin) + " bytes but its shape and dtype need " +
                                       std::to_string(elements * elementBytes));
        }
        if (!knownDType) {
            // Kept so the error names the tensor if the model actually needs it.
            tensor.shape.insert(tensor.shape.begin(), -1);
            tensor.name += "\x01" + dtypeText;
        }
        if (end > begin) ranges.emplace_back(begin, end);
        tensor.data = dataStart + begin;
        tensor.bytes = static_cast<std::size_t>(end - begin);
        out.push_back(std::move(tensor));
    }
    std::sort(ranges.begin(), ranges.end());
    for (std::size_t i = 1; i < ranges.size(); ++i) {
        if (ranges[i].first < ranges[i - 1].second) return fileError(path, "two tensors' data ranges overlap");
    }
    return Status::ok();
}

Expected<Checkpoint> Checkpoint::open(const std::filesystem::path& folder) {
    std::error_code error;
    if (!std::filesystem::is_directory(folder, error)) {
        return Status{ErrorCode::Io, "'" + folder.string() + "' is not a folder"};
    }
    std::vector<std::string> fileNames;
    const auto indexPath = folder / "model.safetensors.index.json";
    if (std::filesystem::exists(indexPath, error)) {
        std::ifstream in(indexPath, std::ios::binary);
        std::stringstream text;
        text << in.rdbuf();
        if (!jsonDepthWithin(text.str())) return Status{ErrorCode::InvalidFile, "'model.safetensors.index.json' nests too deeply"};
        Json index = Json::parse(text.str(), nullptr, false);
        if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
            return Status{ErrorCode::InvalidFile, "'model.safetensors.index.json' has no weight_map object"};
        }
        std::set<std::string> unique;
        for (const auto& [name, file] : index["weight_map"].items()) {
            if (!file.is_string()) return Status{ErrorCode::InvalidFile, "weight_map entry for '" + name + "' is not a file name"};
            const std::string fileName = file.get<std::string>();
            // A hostile index must not reach outside the folder.
            if (fileName.empty() || fileName.find('/') != std::string::npos || fileName.find('\\') != std::string::npos ||
                fileName == "." || fileName == "..") {
                return Status{ErrorCode::InvalidFile, "weight_map names an unsafe file '" + fileName + "'"};
            }
            unique.insert(fileName);
        }
        fileNames.assign(unique.begin(), unique.end());
    } else if (std::filesystem::exists(folder / "model.safetensors", error)) {
        fileNames.push_back("model.safetensors");
    } else {
        for (const auto& entry : std::filesystem::directory_iterator(folder, error)) {
            if (entry.path().extension() == ".safetensors") fileNames.push_back(entry.path().filename().string());
        }
        std::sort(fileNames.begin(), fileNames.end());
    }
    if (fileNames.empty()) return Status{ErrorCode::InvalidFile, "no .safetensors files in '" + folder.string() + "'"};

    Checkpoint checkpoint;
    std::vector<SourceTensor> all;
    for (const auto& name : fileNames) {
        auto file = MappedFile::open(folder / name);
        if (!file) return file.status();
        GEMMA_RETURN_IF_ERROR(parseFile(*file, all));
        checkpoint.files_.push_back(std::move(file.value()));
    }
    bool multimodal = false;
    for (const auto& t : all) {
        if (t.name.rfind("model.language_model.", 0) == 0) multimodal = true;
    }
    for (auto& t : all) {
        const auto marker = t.name.find('\x01');
        const std::string rawName = t.name.substr(0, marker);
        std::string canonical;
        if (!canonicalName(rawName, multimodal, canonical)) continue;  // vision/audio towers
        if (marker != std::string::npos) {
            return Status{ErrorCode::Unsupported, "tensor '" + rawName + "' has dtype " + t.name.substr(marker + 1) +
                                                      "; expected BF16, F16 or F32"};
        }
        t.name = canonical;
        if (checkpoint.tensors_.count(canonical)) {
            return Status{ErrorCode::InvalidFile, "tensor '" + rawName + "' appears more than once"};
        }
        checkpoint.tensors_.emplace(canonical, std::move(t));
    }
    return checkpoint;
}

const SourceTensor* Checkpoint::find(std::string_view canonicalName) const {
    auto it = tensors_.find(canonicalName);
    return it == tensors_.end() ? nullptr : &it->second;
}

Status Checkpoint::toFloat32(const SourceTensor& tensor, std::span<float> out) {
    if (static_cast<std::int64_t>(out.size()) != tensor.elements()) {
        return {ErrorCode::Internal, "toFloat32: output size mismatch for '" + tensor.name + "'"};
    }
    return toFloat32(tensor, 0, out);
}

Status Checkpoint::toFloat32(const SourceTensor& tensor, std::int64_t first, std::span<float> out) {
    const auto n = out.size();
    if (first < 0 || first + static_cast<std::int64_t>(n) > tensor.elements()) {
        return {ErrorCode::Internal, "toFloat32: range outside '" + tensor.name + "'"};
    }
    const auto start = static_cast<std::size_t>(first);
    switch (tensor.dtype) {
        case SourceDType::F32:
            std::memcpy(out.data(), tensor.data + 4 * start, n * 4);
            break;
        case SourceDType::BF16:
            for (std::size_t i = 0; i < n; ++i) {
                std::uint16_t bits;
                std::memcpy(&bits, tensor.data + 2 * (start + i), 2);
                out[i] = formats::bf16ToFloat(bits);
            }
            break;
        case SourceDType::F16:
            for (std::size_t i = 0; i < n; ++i) {
                std::uint16_t bits;
                std::memcpy(&bits, tensor.data + 2 * (start + i), 2);
                out[i] = formats::fp16ToFloat(bits);
            }
            break;
    }
    return Status::ok();
}

}  // namespace gemma
