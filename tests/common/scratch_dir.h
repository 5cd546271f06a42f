// Scratch directories for the tests: one folder per test (and per process, or per mpiexec run
// when the ranks agree on an id) under the system temp dir, emptied at the start and removed at
// the end of the test. Used by the checkpoint, core, memory and train tests; header only, no
// LibTorch.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace omnibal::testing {

/// A directory <temp>/omnibal_<tag>_<id>, removed (recursively) on destruction. Whatever an
/// earlier run left there is removed first; the folder is then created, unless made by `absent`
/// (for code under test that creates the folder itself, or must refuse a file in its place).
class ScratchDir {
 public:
  /// `tag` names the test; `id` makes it unique (default: this process's pid). Only the `owner`
  /// clears, creates and removes the folder (the other ranks of a run sharing it pass false).
  explicit ScratchDir(const std::string& tag, long id = static_cast<long>(::getpid()),
                      bool owner = true)
      : ScratchDir(tag, id, owner, /*create=*/true) {}

  /// The path of ScratchDir(tag), cleared but not created; removed at the end all the same.
  static ScratchDir absent(const std::string& tag) {
    return ScratchDir(tag, static_cast<long>(::getpid()), true, /*create=*/false);
  }

  ~ScratchDir() {
    std::error_code ec;
    if (owner_) std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  /// The path of `name` inside the directory (not created).
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  ScratchDir(const std::string& tag, long id, bool owner, bool create)
      : path_(std::filesystem::temp_directory_path() /
              ("omnibal_" + tag + "_" + std::to_string(id))),
        owner_(owner) {
    if (!owner_) return;
    std::filesystem::remove_all(path_);
    if (create) std::filesystem::create_directories(path_);
  }

  std::filesystem::path path_;
  bool owner_;
};

}  // namespace omnibal::testing
