// Read-only mmap of a whole file (weights stay in the page cache; nothing is copied).
#include "io/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace di::io {

Result<std::shared_ptr<MmapFile>> MmapFile::open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        const int err = errno;
        return make_error(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo, "{}: cannot open: {}", path,
                          std::strerror(err));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int err = errno;
        ::close(fd);
        return make_error(ErrorCode::kIo, "{}: cannot stat: {}", path, std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        return make_error(ErrorCode::kIo, "{}: not a regular file", path);
    }
    std::shared_ptr<MmapFile> file(new MmapFile());
    file->path_ = path;
    file->size_ = static_cast<size_t>(st.st_size);
    if (file->size_ > 0) {  // mmap of length 0 is EINVAL; an empty file maps to nullptr
        void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            const int err = errno;
            ::close(fd);
            return make_error(ErrorCode::kIo, "{}: mmap of {} bytes failed: {}", path, file->size_,
                              std::strerror(err));
        }
        file->data_ = static_cast<const uint8_t*>(p);
    }
    ::close(fd);  // the mapping keeps the file referenced
    return file;
}

MmapFile::~MmapFile() {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

Result<std::string> read_text_file(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        const int err = errno;
        return make_error(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo, "{}: cannot open: {}", path,
                          std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) return make_error(ErrorCode::kIo, "{}: not a regular file", path);
    std::ifstream in(path, std::ios::binary);
    if (!in) return make_error(ErrorCode::kIo, "{}: cannot open for reading", path);
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) return make_error(ErrorCode::kIo, "{}: read error", path);
    return ss.str();
}

}  // namespace di::io
