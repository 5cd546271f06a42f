#include "checkpoint/checkpoint_manifest.h"

#include "checkpoint/durable_file.h"
#include "checkpoint/file_digest.h"
#include "core/error.h"

#include <filesystem>

namespace omnibal::checkpoint {
namespace fs = std::filesystem;
namespace {
constexpr const char* kChecksumKey = "manifest_xxh3_64";
}  // namespace

nlohmann::json CheckpointManifest::to_json() const {
  nlohmann::json files_json = nlohmann::json::array();
  for (const auto& f : files)
    files_json.push_back({{"name", f.name}, {"bytes", f.bytes}, {"xxh3_64", f.xxh3_64}});
  nlohmann::json j = {{"format", kFormat},         {"version", kVersion}, {"step", step},
                      {"world_size", world_size},  {"files", files_json}, {"tensors", tensors},
                      {"config_file", kConfigFile}};
  if (all_finite) j["all_finite"] = true;
  j[kChecksumKey] = to_hex64(xxh3_of(j.dump()));
  return j;
}

CheckpointManifest CheckpointManifest::from_json(const nlohmann::json& j,
                                                 const std::string& origin) {
  CheckpointManifest m;
  try {
    OMNIBAL_CHECK(j.is_object() && j.value("format", "") == kFormat, origin,
                  ": not an omnibal checkpoint manifest (format must be \"", kFormat, "\")");
    const int version = j.at("version").get<int>();
    OMNIBAL_CHECK(version == 1 || version == kVersion, origin, ": manifest version ", version,
                  ", this build reads 1 and ", kVersion);
    if (version >= 2) {
      nlohmann::json rest = j;
      const std::string stored = rest.at(kChecksumKey).get<std::string>();
      rest.erase(kChecksumKey);
      const std::string actual = to_hex64(xxh3_of(rest.dump()));
      OMNIBAL_CHECK(stored == actual, origin, ": the manifest does not match its own checksum (",
                    kChecksumKey, " ", stored, ", contents hash to ", actual,
                    "): it was edited or damaged after the checkpoint was written");
    }
    m.step = j.at("step").get<int64_t>();
    m.world_size = j.at("world_size").get<int>();
    for (const auto& f : j.at("files"))
      m.files.push_back({f.at("name").get<std::string>(), f.at("bytes").get<uint64_t>(),
                         f.at("xxh3_64").get<std::string>()});
    m.tensors = j.at("tensors").get<std::map<std::string, std::string>>();
    m.all_finite = j.value("all_finite", false);
  } catch (const nlohmann::json::exception& e) {
    OMNIBAL_FAIL(origin, ": malformed manifest: ", e.what());
  }
  return m;
}

CheckpointManifest CheckpointManifest::read(const std::string& dir) {
  const std::string path = (fs::path(dir) / kFileName).string();
  OMNIBAL_CHECK(fs::is_regular_file(path), path, ": missing (an incomplete or foreign directory)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    OMNIBAL_FAIL(path, ": not valid JSON (truncated?): ", e.what());
  }
  return from_json(j, path);
}

std::vector<std::string> checkpoint_differences(const std::string& dir) {
  const CheckpointManifest manifest = CheckpointManifest::read(dir);
  std::vector<std::string> problems;
  for (const auto& f : manifest.files) {
    const fs::path path = fs::path(dir) / f.name;
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) {
      problems.push_back(f.name + ": missing");
      continue;
    }
    const uint64_t size = fs::file_size(path, ec);
    if (ec) {
      problems.push_back(f.name + ": cannot stat: " + ec.message());
      continue;
    }
    if (size != f.bytes) {
      problems.push_back(f.name + ": size " + std::to_string(size) + " bytes, manifest says " +
                         std::to_string(f.bytes));
      continue;
    }
    const FileDigest digest = digest_file(path.string());
    if (digest.hex() != f.xxh3_64)
      problems.push_back(f.name + ": checksum xxh3_64 " + digest.hex() + ", manifest says " +
                         f.xxh3_64);
  }
  return problems;
}

}  // namespace omnibal::checkpoint
