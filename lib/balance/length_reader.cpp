#include "balance/length_reader.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string_view>

#include "balance/repeat_time.h"
#include "core/error.h"

namespace omnibal::balance {
namespace {

using Json = nlohmann::json;

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  OMNIBAL_CHECK(in.good(), path, ": cannot open ", what, " (check the path and permissions)");
  std::string text;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  if (size > 0) {
    text.resize(static_cast<size_t>(size));
    in.read(text.data(), size);
    OMNIBAL_CHECK(in.gcount() == size, path, ": cannot read ", what);
  }
  return text;
}

Json parse_json(const std::string& text, const std::string& path, const char* what) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    OMNIBAL_FAIL(path, ": not valid JSON (", what, "): ", e.what());
  }
}

// The fast path of read_length_file: one pass over the text for the shape every length file
// has (an array of objects whose keys are vit_num, token_num and image_flags, integer values,
// plain JSON whitespace), no DOM. It returns false on anything else: another key, an escape,
// a float, a duplicate or missing key, a value out of range, malformed JSON. The caller then
// parses the file with nlohmann::json, which accepts what JSON accepts and words the error, so
// results and messages are those of the DOM reader (and the 3.5 MB of the shared files read in
// ~5 ms instead of ~45).
class LengthFileScanner {
 public:
  explicit LengthFileScanner(const std::string& text)
      : p_(text.data()), end_(text.data() + text.size()) {}

  bool scan(std::vector<Load>& loads, std::vector<int32_t>& flags) {
    skip_ws();
    if (!eat('[')) return false;
    skip_ws();
    if (!eat(']')) {
      do {
        skip_ws();
        if (!record(loads, flags)) return false;
        skip_ws();
      } while (eat(','));
      if (!eat(']')) return false;
    }
    skip_ws();
    return p_ == end_;
  }

 private:
  bool eat(char c) {
    if (p_ == end_ || *p_ != c) return false;
    ++p_;
    return true;
  }
  void skip_ws() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  // 0 vit_num, 1 token_num, 2 image_flags, -1 anything else (or an escape).
  int key() {
    if (!eat('"')) return -1;
    const char* b = p_;
    while (p_ != end_ && *p_ != '"' && *p_ != '\\') ++p_;
    if (p_ == end_ || *p_ != '"') return -1;
    const std::string_view k(b, static_cast<size_t>(p_ - b));
    ++p_;
    if (k == "vit_num") return 0;
    if (k == "token_num") return 1;
    if (k == "image_flags") return 2;
    return -1;
  }
  // A JSON integer of at most 18 digits (no fraction or exponent, no "-0").
  bool integer(int64_t& v) {
    const bool neg = eat('-');
    const char* b = p_;
    while (p_ != end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    const auto digits = p_ - b;
    if (digits == 0 || digits > 18 || (*b == '0' && (digits > 1 || neg))) return false;
    if (p_ != end_ && (*p_ == '.' || *p_ == 'e' || *p_ == 'E')) return false;
    v = 0;
    for (const char* c = b; c != p_; ++c) v = 10 * v + (*c - '0');
    if (neg) v = -v;
    return true;
  }
  bool record(std::vector<Load>& loads, std::vector<int32_t>& flags) {
    if (!eat('{')) return false;
    int64_t value[3] = {0, 0, 0};
    bool seen[3] = {false, false, false};
    skip_ws();
    if (!eat('}')) {
      do {
        skip_ws();
        const int k = key();
        if (k < 0 || seen[k]) return false;
        skip_ws();
        if (!eat(':')) return false;
        skip_ws();
        if (!integer(value[k])) return false;
        seen[k] = true;
        skip_ws();
      } while (eat(','));
      if (!eat('}')) return false;
    }
    // The DOM reader's checks (int_field and image_flags <= vit_num); it words any failure.
    constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
    const int64_t vit = value[0], tok = value[1];
    if (!seen[0] || !seen[1] || vit < -1 || vit > kMax || tok < (vit == -1 ? -1 : 0) || tok > kMax)
      return false;
    const int64_t fl = seen[2] ? value[2] : std::max<int64_t>(vit, 0);
    if (fl < 0 || fl > kMax || (vit != -1 && fl > vit)) return false;
    loads.push_back(Load{{static_cast<int32_t>(vit), static_cast<int32_t>(tok)}});
    flags.push_back(static_cast<int32_t>(fl));
    return true;
  }

  const char* p_;
  const char* end_;
};

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

// The DOM reader: every JSON document, and the error of a malformed one. `on_size` runs once
// the record count is known, before the records are checked (repeat_time's check comes first).
template <typename OnSize>
void read_length_records(const std::string& text, const std::string& path, std::vector<Load>& loads,
                         std::vector<int32_t>& flags, OnSize on_size) {
  const Json doc = parse_json(text, path, "length file");
  OMNIBAL_CHECK(doc.is_array(), path, ": expected a JSON array of {vit_num, token_num, ",
                "image_flags} records, got a JSON ", doc.type_name());
  OMNIBAL_CHECK(doc.size() <= std::numeric_limits<uint32_t>::max(), path, ": too many records");
  on_size(doc.size());
  loads.assign(doc.size(), Load{});
  flags.assign(doc.size(), 0);
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
}

}  // namespace

void read_length_file(const std::string& path, const std::string& name, double repeat_time,
                      uint64_t seed, SampleTable& table) {
  const std::string text = read_file(path, "length file");
  std::vector<Load> loads;
  std::vector<int32_t> flags;
  loads.reserve(text.size() / 40);  // about 40 bytes per compact record
  flags.reserve(text.size() / 40);
  const auto ds_index = static_cast<uint32_t>(table.datasets.size());
  std::vector<uint32_t> rows;
  auto repeat = [&](size_t n) {
    rows = repeat_records(static_cast<int64_t>(n), repeat_time, seed, ds_index,
                          path + " (dataset '" + name + "')");
  };
  if (LengthFileScanner(text).scan(loads, flags) &&
      loads.size() <= std::numeric_limits<uint32_t>::max()) {
    repeat(loads.size());
  } else {
    loads.clear();
    flags.clear();
    read_length_records(text, path, loads, flags, repeat);  // throws on what the scan refused
  }
  DatasetInfo info{name, path, static_cast<int64_t>(loads.size()), 0, repeat_time};
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
    OMNIBAL_CHECK(
        tl != entry.end() && tl->is_string(), where,
        ": missing string key \"token_lengths\" (path of the per-sample length file; `omnibal-plan "
        "scan --meta META --out DIR` writes them and a meta naming them)");
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
