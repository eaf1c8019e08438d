// A read-only memory-mapped file. Move-only; unmaps on destruction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

#include "gemma/Status.h"

namespace gemma {

class MappedFile {
public:
    MappedFile() = default;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    MappedFile(MappedFile&& other) noexcept;
    MappedFile& operator=(MappedFile&& other) noexcept;
    ~MappedFile();

    static Expected<MappedFile> open(const std::filesystem::path& path);

    const std::uint8_t* data() const { return data_; }
    std::size_t size() const { return size_; }
    std::span<const std::uint8_t> bytes() const { return {data_, size_}; }
    const std::filesystem::path& path() const { return path_; }

private:
    void reset();
    const std::uint8_t* data_ = nullptr;
    std::size_t size_ = 0;
    std::filesystem::path path_;
};

}  // namespace gemma
