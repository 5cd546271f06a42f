// Where omnibal finds files it does not own: the shared real data ($OMNIBAL_SHARED_DATA) and the
// source tree (for tests and presets).
#pragma once

#include <string>

namespace omnibal {

/// Directory of the shared real data: $OMNIBAL_SHARED_DATA, else "../shared/data" relative to
/// the source tree ($OMNIBAL_SOURCE_DIR or the compile-time source dir). Does not check existence.
std::string shared_data_dir();

/// The repository root: $OMNIBAL_SOURCE_DIR when set, else the directory omnibal was built from.
std::string source_dir();

/// Throws omnibal::Error naming the path and $OMNIBAL_SHARED_DATA when a required shared-data
/// file is missing; returns the path otherwise. Real-data tests call this so they fail, not skip.
std::string require_shared_file(const std::string& relative_path);

}  // namespace omnibal
