#include "data/dataset_meta.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace omnibal::data {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

std::string resolve(const fs::path& base, const std::string& p) {
  if (p.empty()) return p;
  const fs::path path(p);
  return (path.is_absolute() ? path : base / path).lexically_normal().string();
}

std::string string_field(const ordered_json& d, const char* key, const std::string& where,
                         bool required) {
  if (!d.contains(key)) {
    OMNIBAL_CHECK(!required, where, ": missing required key '", key, "'");
    return "";
  }
  OMNIBAL_CHECK(d[key].is_string(), where, ".", key, ": expected a path string, got ",
                d[key].dump());
  return d[key].get<std::string>();
}

}  // namespace

std::vector<DatasetMetaEntry> load_dataset_meta(const std::string& path) {
  std::ifstream in(path);
  OMNIBAL_CHECK(in.good(), "meta file '", path, "' cannot be opened");
  ordered_json meta;
  try {
    meta = ordered_json::parse(in);
  } catch (const ordered_json::parse_error& e) {
    OMNIBAL_FAIL(path, ": not valid JSON: ", e.what());
  }
  OMNIBAL_CHECK(meta.is_object() && !meta.empty(), path,
                ": expected an object {name: {root, annotation, repeat_time, token_lengths}}");
  const fs::path base = fs::path(path).parent_path();
  std::vector<DatasetMetaEntry> entries;
  for (const auto& [name, d] : meta.items()) {
    const std::string where = path + ": " + name;
    OMNIBAL_CHECK(d.is_object(), where, ": expected an object");
    DatasetMetaEntry e;
    e.name = name;
    e.root = resolve(base, string_field(d, "root", where, false));
    if (e.root.empty()) e.root = base.empty() ? "." : base.string();
    e.annotation = resolve(base, string_field(d, "annotation", where, true));
    e.token_lengths = resolve(base, string_field(d, "token_lengths", where, false));
    if (d.contains("repeat_time")) {
      OMNIBAL_CHECK(d["repeat_time"].is_number() && d["repeat_time"].get<double>() > 0, where,
                    ".repeat_time: expected a positive number, got ", d["repeat_time"].dump());
      e.repeat_time = d["repeat_time"].get<double>();
    }
    if (d.contains("length")) {
      OMNIBAL_CHECK(d["length"].is_number_integer(), where, ".length: expected an integer");
      e.length = d["length"].get<int64_t>();
    }
    entries.push_back(std::move(e));
  }
  return entries;
}

void write_dataset_meta(const std::string& path, const std::vector<DatasetMetaEntry>& entries) {
  ordered_json meta = ordered_json::object();
  for (const auto& e : entries) {
    ordered_json d;
    d["root"] = e.root;
    d["annotation"] = e.annotation;
    d["repeat_time"] = e.repeat_time;
    if (e.length >= 0) d["length"] = e.length;
    if (!e.token_lengths.empty()) d["token_lengths"] = e.token_lengths;
    meta[e.name] = d;
  }
  std::ofstream out(path);
  OMNIBAL_CHECK(out.good(), "cannot write meta file '", path, "'");
  out << meta.dump(2) << "\n";
}

}  // namespace omnibal::data
