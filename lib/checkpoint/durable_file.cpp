#include "checkpoint/durable_file.h"

#include "core/error.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace omnibal::checkpoint {

DurableFile::DurableFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  OMNIBAL_CHECK(fd_ >= 0, "cannot create ", path_, ": ", std::strerror(errno));
}

DurableFile::~DurableFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
}

void DurableFile::write(const void* data, size_t bytes) {
  OMNIBAL_CHECK(fd_ >= 0, "write to ", path_, " after finish()");
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    OMNIBAL_CHECK(n > 0, "cannot write ", path_, ": ",
                  n < 0 ? std::strerror(errno) : "no progress");
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void DurableFile::finish(bool durable) {
  OMNIBAL_CHECK(fd_ >= 0, "finish() called twice on ", path_);
  if (durable) OMNIBAL_CHECK(::fsync(fd_) == 0, "cannot fsync ", path_, ": ", std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  OMNIBAL_CHECK(::close(fd) == 0, "cannot close ", path_, ": ", std::strerror(errno));
}

void write_text_file_durable(const std::string& path, const std::string& text) {
  DurableFile file(path);
  file.write(text.data(), text.size());
  file.finish(true);
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  OMNIBAL_CHECK(in.good(), "cannot read ", path, ": ", std::strerror(errno));
  std::ostringstream os;
  os << in.rdbuf();
  OMNIBAL_CHECK(!in.bad(), "error while reading ", path);
  return os.str();
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  OMNIBAL_CHECK(fd >= 0, "cannot open directory ", dir, ": ", std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  OMNIBAL_CHECK(rc == 0, "cannot fsync directory ", dir, ": ", std::strerror(err));
}

}  // namespace omnibal::checkpoint
