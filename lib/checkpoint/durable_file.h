// Writing files so that they survive a crash: a POSIX file writer that reports every failed
// write with the file name and errno text, removes a partial file on failure, and fsyncs on
// finish(); plus fsync of a directory (needed after creating or renaming entries in it, so the
// directory entry itself is on disk). The checkpoint store builds its atomic save on these.
// Not here: O_DIRECT, preallocation, remote file systems' own durability knobs.
#pragma once

#include <cstddef>
#include <string>

namespace omnibal::checkpoint {

/// A file opened for writing (created or truncated). Move-only. If finish() was not reached
/// (an exception in between), the destructor closes and unlinks the partial file.
class DurableFile {
 public:
  /// Opens `path` for writing. Throws omnibal::Error naming the path and errno text.
  explicit DurableFile(std::string path);
  DurableFile(const DurableFile&) = delete;
  DurableFile& operator=(const DurableFile&) = delete;
  ~DurableFile();

  /// Appends `bytes` bytes (retries short writes). Throws omnibal::Error on failure.
  void write(const void* data, size_t bytes);
  /// fsync (when `durable`) and close. Throws omnibal::Error on failure.
  void finish(bool durable = true);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

/// Writes `text` to `path` and fsyncs it. Throws omnibal::Error on failure.
void write_text_file_durable(const std::string& path, const std::string& text);

/// Reads a whole file as text. Throws omnibal::Error naming the path when it cannot be read.
std::string read_text_file(const std::string& path);

/// fsyncs directory `dir` so that entries created, renamed or removed in it are durable.
/// Throws omnibal::Error naming the directory on failure.
void fsync_directory(const std::string& dir);

}  // namespace omnibal::checkpoint
