// Scratch directories and file damage for the checkpoint tests. Scratch directories are unique
// per process (and shared by the ranks of one mpiexec run when created through
// shared_scratch_dir), removed at the end of the test.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace omnibal::checkpoint::testing {

/// A fresh directory under the system temp dir, removed (recursively) on destruction.
class ScratchDir {
 public:
  /// `tag` names the test; `id` makes it unique (default: this process's pid).
  explicit ScratchDir(const std::string& tag, long id = static_cast<long>(::getpid()),
                      bool owner = true)
      : path_(std::filesystem::temp_directory_path() /
              ("omnibal_" + tag + "_" + std::to_string(id))),
        owner_(owner) {
    if (owner_) {
      std::filesystem::remove_all(path_);
      std::filesystem::create_directories(path_);
    }
  }
  ~ScratchDir() {
    std::error_code ec;
    if (owner_) std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string str() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
  bool owner_;
};

/// Flips bit 6 of the byte at offset `at` of `path` in place (a corrupted shard or manifest).
inline void flip_byte(const std::string& path, std::streamoff at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  const char c = static_cast<char>(f.get());
  f.seekp(at);
  f.put(static_cast<char>(c ^ 0x40));
}

}  // namespace omnibal::checkpoint::testing
