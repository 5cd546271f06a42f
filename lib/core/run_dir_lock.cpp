#include "core/run_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "core/log.h"

namespace omnibal {

namespace fs = std::filesystem;

namespace {

/// The whole (small) file at `fd`, read from offset 0.
std::string read_lock_text(int fd) {
  std::string text;
  char buf[512];
  for (off_t offset = 0; text.size() < 4096;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
    offset += n;
  }
  return text;
}

/// The holder of the lock at `fd`. It writes the file right after taking the lock, so an empty
/// file is read again for up to ~1 s before the refusal names no one.
RunDirHolder read_holder(int fd) {
  RunDirHolder h = parse_run_dir_holder(read_lock_text(fd));
  for (int i = 0; i < 50 && h.pid == 0; ++i) {
    ::usleep(20000);
    h = parse_run_dir_holder(read_lock_text(fd));
  }
  return h;
}

std::string this_host() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

/// flock's answers on file systems that cannot lock (NFS without lockd, some FUSE mounts).
bool locks_unsupported(int err) {
  return err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS || err == EINVAL;
}

/// Whether `fd` is still the file at `path`: a releasing holder unlinks the file before it
/// unlocks, and a lock on the unlinked file would exclude no one.
bool still_linked(int fd, const std::string& path) {
  struct stat open_file;
  struct stat named;
  return ::fstat(fd, &open_file) == 0 && ::stat(path.c_str(), &named) == 0 &&
         open_file.st_dev == named.st_dev && open_file.st_ino == named.st_ino;
}

/// Replaces the content of the locked file with `text`; false (errno set) on failure.
bool write_lock_text(int fd, const std::string& text) {
  if (::ftruncate(fd, 0) != 0) return false;
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::pwrite(fd, text.data() + done, text.size() - done, done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

std::string RunDirHolder::describe() const {
  if (pid == 0) return "another process (its lock file names no holder)";
  std::ostringstream os;
  os << (program.empty() ? std::string("a process") : program) << " pid " << pid << " on host "
     << (host.empty() ? std::string("?") : host);
  if (!since.empty()) os << " since " << since;
  return os.str();
}

RunDirHolder parse_run_dir_holder(const std::string& text) {
  RunDirHolder h;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const auto space = line.find(' ');
    if (space == std::string::npos) continue;
    const std::string key = line.substr(0, space), value = line.substr(space + 1);
    if (key == "program") h.program = value;
    else if (key == "host") h.host = value;
    else if (key == "since") h.since = value;
    else if (key == "pid") h.pid = std::strtol(value.c_str(), nullptr, 10);
  }
  return h;
}

RunDirLock::RunDirLock(const std::string& dir, const std::string& program)
    : path_((fs::path(dir) / kFileName).string()) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  OMNIBAL_CHECK(!ec, "runtime.run_dir ", dir, ": cannot create the directory (", ec.message(), ")");
  // Retried only when the file was unlinked between our open and flock (a holder releasing).
  for (int attempt = 0; fd_ < 0; ++attempt) {
    OMNIBAL_CHECK(attempt < 100, "runtime.run_dir ", dir, ": the lock file ", path_,
                  " keeps being replaced; is another launch starting and stopping in a loop?");
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    OMNIBAL_CHECK(fd >= 0, "runtime.run_dir ", dir, ": cannot open the lock file ", path_, " (",
                  std::strerror(errno), ")");
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err == EWOULDBLOCK) {
        const RunDirHolder holder = read_holder(fd);
        ::close(fd);
        OMNIBAL_FAIL("runtime.run_dir ", dir, " is in use by ", holder.describe(), " (lock file ",
                     path_, "); wait for it, or use another runtime.run_dir");
      }
      ::close(fd);
      OMNIBAL_CHECK(locks_unsupported(err), "runtime.run_dir ", dir, ": cannot lock ", path_, " (",
                    std::strerror(err), ")");
      log_info(
          "warning: runtime.run_dir {}: the file system cannot lock {} ({}); a second "
          "launch on this run directory would not be refused",
          dir, path_, std::strerror(err));
      return;
    }
    if (still_linked(fd, path_)) fd_ = fd;
    else ::close(fd);
  }
  const RunDirHolder old = parse_run_dir_holder(read_lock_text(fd_));
  const std::string host = this_host();
  if (old.pid != 0 && !(old.pid == ::getpid() && old.host == host)) {
    taken_over_ = old;
    log_info(
        "warning: runtime.run_dir {}: taking over the lock left by pid {} on host {} (not "
        "running; held by {} since {})",
        dir, old.pid, old.host, old.program.empty() ? "?" : old.program,
        old.since.empty() ? "?" : old.since);
  }
  std::ostringstream text;
  text << "program " << program << "\npid " << ::getpid() << "\nhost " << host << "\nsince "
       << utc_now() << "\n";
  if (!write_lock_text(fd_, text.str())) {
    const int err = errno;
    ::unlink(path_.c_str());
    ::close(fd_);
    fd_ = -1;
    OMNIBAL_FAIL("runtime.run_dir ", dir, ": writing the lock file ", path_, " failed (",
                 std::strerror(err), ") - is the disk full?");
  }
}

RunDirLock::~RunDirLock() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // before the unlock: see still_linked()
  ::close(fd_);
}

}  // namespace omnibal
