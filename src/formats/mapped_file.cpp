// formats/mapped_file.cpp — see mapped_file.h.
#include "formats/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace hs {

Result<MappedRegion> map_file(const std::string& path, const char* what) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return make_error(errno == ENOENT ? StatusCode::kNotFound : StatusCode::kIoError, "{}: cannot open '{}': {}",
                      what, path, std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error(StatusCode::kIoError, "{}: '{}' is not a regular file", what, path);
  }
  MappedRegion r;
  r.size = static_cast<uint64_t>(st.st_size);
  if (r.size > 0) {
    void* p = mmap(nullptr, r.size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      return make_error(StatusCode::kIoError, "{}: cannot mmap '{}': {}", what, path, std::strerror(e));
    }
    r.base = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return r;
}

void unmap_file(const MappedRegion& r) {
  if (r.base) munmap(const_cast<uint8_t*>(r.base), r.size);
}

}  // namespace hs
