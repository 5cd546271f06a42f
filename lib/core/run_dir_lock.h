// One launch per run directory: an exclusive lock on `<run_dir>/.omnibal.lock`, taken by the
// trainer's rank 0 before anything is written to the run directory and held for the life of the
// process. Two launches on the same runtime.run_dir would otherwise interleave metrics.jsonl,
// truncate each other's lines and replace each other's checkpoints without a message.
// The lock is flock(2) on the file (on Linux NFS it maps to a POSIX byte-range lock, so it holds
// across hosts of a shared file system); the kernel releases it when the process ends, however it
// ends. The file holds the holder's program, pid, host and start time, so a refused launch names
// who holds the directory. A lock file left by a process that died without releasing it (killed,
// crashed) does not block: flock succeeds, and the old holder is logged as taken over.
// A clean release removes the file. File systems without lock support (flock fails with
// ENOLCK / EOPNOTSUPP) get a warning and no lock. Torch-free, MPI-free: the collective refusal
// (rank 0 decides, every rank ends) is the caller's (apps/omnibal-train/main.cpp).
#pragma once

#include <optional>
#include <string>

namespace omnibal {

/// Who holds (or held) a run directory: the lock file's content.
struct RunDirHolder {
  std::string program;  ///< e.g. "omnibal-train"
  long pid = 0;         ///< process id on `host`; 0 when the file names none
  std::string host;     ///< gethostname() of the holder
  std::string since;    ///< UTC start of the hold, ISO 8601 ("2026-12-06T05:01:02Z")
  /// "omnibal-train pid 1234 on host h since 2026-12-06T05:01:02Z".
  std::string describe() const;
};

/// The exclusive lock of one run directory, held until destruction. Not copyable or movable.
class RunDirLock {
 public:
  /// File name of the lock inside the run directory.
  static constexpr const char* kFileName = ".omnibal.lock";

  /// Creates `dir` when missing and locks `<dir>/.omnibal.lock` for `program` without waiting.
  /// Throws omnibal::Error "runtime.run_dir <dir> is in use by <program> pid P on host H since
  /// T (lock file <path>); wait for it, or use another runtime.run_dir" when another process
  /// holds it, or naming the path and errno text when the directory or file cannot be made.
  /// A stale lock file (its holder is gone) is taken over and logged as a warning.
  RunDirLock(const std::string& dir, const std::string& program);
  /// Removes the lock file and releases the lock.
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

  /// `<dir>/.omnibal.lock`.
  const std::string& path() const { return path_; }
  /// False on a file system without lock support (a warning was logged; nothing is excluded).
  bool held() const { return fd_ >= 0; }
  /// The earlier holder whose stale lock file this lock took over (it died holding it).
  const std::optional<RunDirHolder>& taken_over() const { return taken_over_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::optional<RunDirHolder> taken_over_;
};

/// Parses a lock file's text ("program X\npid N\nhost H\nsince T\n"); missing keys stay empty.
RunDirHolder parse_run_dir_holder(const std::string& text);

}  // namespace omnibal
