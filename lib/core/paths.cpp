#include "core/paths.h"

#include <cstdlib>
#include <filesystem>

#include "core/error.h"

namespace omnibal {

std::string source_dir() {
  if (const char* env = std::getenv("OMNIBAL_SOURCE_DIR"); env && *env) return env;
  return OMNIBAL_BUILD_SOURCE_DIR;
}

std::string shared_data_dir() {
  if (const char* env = std::getenv("OMNIBAL_SHARED_DATA"); env && *env) return env;
  return (std::filesystem::path(source_dir()) / ".." / "shared" / "data")
      .lexically_normal()
      .string();
}

std::string require_shared_file(const std::string& relative_path) {
  const auto path = (std::filesystem::path(shared_data_dir()) / relative_path).string();
  OMNIBAL_CHECK(std::filesystem::exists(path), "shared data file '", path,
                "' is missing; set OMNIBAL_SHARED_DATA to the folder that holds "
                "internvl-chat-1.2-lengths/ (default ../shared/data beside the repository)");
  return path;
}

}  // namespace omnibal
