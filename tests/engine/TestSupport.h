// Helpers shared by the engine tests: scratch folders, file I/O, a safetensors writer and a
// small random Gemma 4 checkpoint that hostile-input tests can then break in one place each.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace gemma::test {

std::filesystem::path testData();  // tests/data
std::filesystem::path goldens();   // tests/data/goldens

// A fresh, empty folder under the system temp dir, removed when the object dies.
class ScratchDir {
public:
    explicit ScratchDir(const std::string& tag);
    ~ScratchDir();
    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;
    const std::filesystem::path& path() const { return path_; }
    std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

private:
    std::filesystem::path path_;
};

std::string readFile(const std::filesystem::path& path);
void writeFile(const std::filesystem::path& path, const std::string& bytes);
std::vector<float> readFloats(const std::filesystem::path& path);

struct RawTensor {
    std::string dtype = "F32";  // as written in the header
    std::vector<std::int64_t> shape;
    std::string bytes;          // raw little-endian data
};
// Serialises tensors (sorted by name) into safetensors bytes.
std::string makeSafetensors(const std::map<std::string, RawTensor>& tensors);
RawTensor f32Tensor(std::vector<std::int64_t> shape, const std::vector<float>& values);

// A tiny random Gemma 4 text model (2 sliding + 1 full layer, hidden 128) in memory, using the
// goldens' tokenizer; write() puts config.json, model.safetensors and tokenizer.model in a folder.
struct TinyCheckpoint {
    std::string configJson;
    std::map<std::string, RawTensor> tensors;
    static TinyCheckpoint make(unsigned seed = 1);
    void write(const std::filesystem::path& folder) const;
};

}  // namespace gemma::test
