// Reading Hugging Face safetensors checkpoints: a single file or shards listed by
// model.safetensors.index.json. Files are memory-mapped; every header size, offset and shape is
// checked against the file before any tensor byte is touched.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "MappedFile.h"
#include "gemma/Status.h"

namespace gemma {

enum class SourceDType { F32, F16, BF16 };
const char* sourceDTypeName(SourceDType dtype);

struct SourceTensor {
    std::string name;  // canonical: the text-model prefix ("model.language_model." or "model.") removed
    SourceDType dtype = SourceDType::F32;
    std::vector<std::int64_t> shape;
    const std::uint8_t* data = nullptr;
    std::size_t bytes = 0;
    std::int64_t elements() const;
};

class Checkpoint {
public:
    // Opens every safetensors file of an HF folder. Tensors outside the text model (vision and
    // audio towers) are skipped; text tensors must be BF16, F16 or F32.
    static Expected<Checkpoint> open(const std::filesystem::path& folder);
    // Parses one safetensors file (exposed for tests of hostile input).
    static Status parseFile(const MappedFile& file, std::vector<SourceTensor>& out);

    const SourceTensor* find(std::string_view canonicalName) const;
    const std::map<std::string, SourceTensor, std::less<>>& tensors() const { return tensors_; }
    // Converts a tensor to fp32; `out` must hold exactly elements() values.
    static Status toFloat32(const SourceTensor& tensor, std::span<float> out);
    // Converts elements [first, first + out.size()) only (row by row, so a 9 GB table never needs
    // a full fp32 copy).
    static Status toFloat32(const SourceTensor& tensor, std::int64_t first, std::span<float> out);

private:
    std::vector<MappedFile> files_;
    std::map<std::string, SourceTensor, std::less<>> tensors_;
};

}  // namespace gemma
