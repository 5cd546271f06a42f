#include "balance/length_reader.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "balance/repeat_time.h"
#include "core/error.h"

namespace omnibal::balance {
namespace {

using Json = nlohmann::json;

Json parse_json_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  OMNIBAL_CHECK(in.good(), path, ": cannot open ", what, " (check the path and permissions)");
  std::stringstream buf;
  buf << in.rdbuf();
  try {
    return Json::parse(buf.str());
  } catch (const Json::parse_error& e) {
    OMNIBAL_FAIL(path, ": not valid JSON (", what, "): ", e.what());
  }
}

// Reads element[key] as an integer in [lo, int32 max]; `required` false returns `fallback`.
int32_t int_field(const Json& element, const char* key, int64_t lo, const std::string& path,
                  size_t i, bool required = true, int32_t fallback = 0) {
  const auto it = element.find(key);
  if (it == element.end()) {
    OMNIBAL_CHECK(!required, path, ": element ", i, ": missing field \"", key,
                  "\" (expected {\"vit_num\": int, \"token_num\": int, \"image_flags\": int})");
    return fallback;
  }
  OMNIBAL_CHECK(it->is_number_integer(), path, ": element ", i, ": field \"", key,
                "\" must be an integer, got ", it->dump());
  const int64_t v = it->get<int64_t>();
  OMNIBAL_CHECK(v >= lo && v <= std::numeric_limits<int32_t>::max(), path, ": element ", i,
                ": field \"", key, "\" = ", v, " out of range (expected >= ", lo, ")");
  return static_cast<int32_t>(v);
}

}  // namespace

void read_length_file(const std::string& path, const std::string& name, double repeat_time,
                      uint64_t seed, SampleTable& table) {
  const Json doc = parse_json_file(path, "length file");
  OMNIBAL_CHECK(doc.is_array(), path, ": expected a JSON array of {vit_num, token_num, ",
                "image_flags} records, got a JSON ", doc.type_name());
  OMNIBAL_CHECK(doc.size() <= std::numeric_limits<uint32_t>::max(), path, ": too many records");
  const auto ds_index = static_cast<uint32_t>(table.datasets.size());
  const std::vector<uint32_t> rows = repeat_records(static_cast<int64_t>(doc.size()), repeat_time,
                                                    seed, ds_index, path + " (dataset '" + name + "')");
  std::vector<Load> loads(doc.size());
  std::vector<int32_t> flags(doc.size());
  for (size_t i = 0; i < doc.size(); ++i) {
    const Json& e = doc[i];
    OMNIBAL_CHECK(e.is_object(), path, ": element ", i, ": expected an object, got ",
                  e.type_name());
    const int32_t vit = int_field(e, "vit_num", -1, path, i);
    // Failed statistics (vit_num -1) may carry token_num -1 too (omnibal-plan scan writes both).
    const int32_t tok = int_field(e, "token_num", vit == -1 ? -1 : 0, path, i);
    const int32_t fl = int_field(e, "image_flags", 0, path, i, false, std::max(vit, 0));
    OMNIBAL_CHECK(vit == -1 || fl <= vit, path, ": element ", i, ": image_flags ", fl,
                  " exceeds vit_num ", vit, " (image_flags counts the real tiles among vit_num)");
    loads[i] = Load{{vit, tok}};
    flags[i] = fl;
  }
  DatasetInfo info{name, path, static_cast<int64_t>(doc.size()), 0, repeat_time};
  const uint32_t ds = table.add_dataset(info);
  for (const uint32_t i : rows) {
    if (loads[i].tiles() == -1) {  // failed statistics: skipped like the reference, but counted
      ++table.datasets[ds].failed_stats;
      continue;
    }
    table.add(ds, i, loads[i], flags[i]);
  }
}

std::string dataset_name_from_path(const std::string& path) {
  std::string stem = std::filesystem::path(path).filename().string();
  for (const char* suffix : {"_token_lengths.json", ".json"}) {
    const std::string s(suffix);
    if (stem.size() > s.size() && stem.compare(stem.size() - s.size(), s.size(), s) == 0) {
      stem.resize(stem.size() - s.size());
      break;
    }
  }
  return stem;
}

SampleTable read_length_files(const std::vector<std::string>& paths) {
  OMNIBAL_CHECK(!paths.empty(), "read_length_files: no length files given");
  SampleTable table;
  for (const auto& p : paths) read_length_file(p, dataset_name_from_path(p), 1.0, 0, table);
  return table;
}

SampleTable read_meta_file(const std::string& meta_path, uint64_t seed) {
  std::ifstream in(meta_path, std::ios::binary);
  OMNIBAL_CHECK(in.good(), meta_path, ": cannot open meta file");
  nlohmann::ordered_json meta;
  try {
    meta = nlohmann::ordered_json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    OMNIBAL_FAIL(meta_path, ": not valid JSON (meta file): ", e.what());
  }
  OMNIBAL_CHECK(meta.is_object() && !meta.empty(), meta_path,
                ": expected a non-empty JSON object {dataset: {token_lengths, repeat_time}}");
  const auto dir = std::filesystem::path(meta_path).parent_path();
  SampleTable table;
  for (const auto& [name, entry] : meta.items()) {
    const std::string where = meta_path + ": dataset \"" + name + "\"";
    OMNIBAL_CHECK(entry.is_object(), where, ": expected an object, got ", entry.type_name());
    const auto tl = entry.find("token_lengths");
    OMNIBAL_CHECK(tl != entry.end() && tl->is_string(), where,
                  ": missing string key \"token_lengths\" (path of the per-sample length file)");
    double repeat = 1.0;
    if (const auto r = entry.find("repeat_time"); r != entry.end()) {
      OMNIBAL_CHECK(r->is_number(), where, ": \"repeat_time\" must be a number, got ", r->dump());
      repeat = r->get<double>();
      OMNIBAL_CHECK(std::isfinite(repeat) && repeat > 0, where,
                    ": \"repeat_time\" must be > 0, got ", r->dump());
    }
    std::filesystem::path file(tl->get<std::string>());
    if (file.is_relative()) file = dir / file;
    read_length_file(file.string(), name, repeat, seed, table);
  }
  return table;
}

}  // namespace omnibal::balance
