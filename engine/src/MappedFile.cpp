#include "MappedFile.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gemma {

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(other.data_), size_(other.size_), path_(std::move(other.path_)) {
    other.data_ = nullptr;
    other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
    if (this != &other) {
        reset();
        data_ = other.data_;
        size_ = other.size_;
        path_ = std::move(other.path_);
        other.data_ = nullptr;
        other.size_ = 0;
    }
    return *this;
}

MappedFile::~MappedFile() { reset(); }

void MappedFile::reset() {
    if (data_ && size_ > 0) munmap(const_cast<std::uint8_t*>(data_), size_);
    data_ = nullptr;
    size_ = 0;
}

Expected<MappedFile> MappedFile::open(const std::filesystem::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status{ErrorCode::Io, "cannot open '" + path.string() + "': " + std::strerror(errno)};
    struct stat info {};
    if (fstat(fd, &info) != 0) {
        const int error = errno;
        ::close(fd);
        return Status{ErrorCode::Io, "cannot stat '" + path.string() + "': " + std::strerror(error)};
    }
    if (!S_ISREG(info.st_mode)) {
        ::close(fd);
        return Status{ErrorCode::Io, "'" + path.string() + "' is not a regular file"};
    }
    MappedFile file;
    file.path_ = path;
    file.size_ = static_cast<std::size_t>(info.st_size);
    if (file.size_ > 0) {
        void* mapping = mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (mapping == MAP_FAILED) {
            const int error = errno;
            ::close(fd);
            file.size_ = 0;
            return Status{ErrorCode::Io, "cannot map '" + path.string() + "': " + std::strerror(error)};
        }
        file.data_ = static_cast<const std::uint8_t*>(mapping);
    }
    ::close(fd);
    return file;
}

}  // namespace gemma
