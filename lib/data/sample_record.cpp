#include "data/sample_record.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data/utf8_check.h"

namespace omnibal::data {
namespace {

using nlohmann::json;

[[noreturn]] void malformed(const SampleOrigin& origin, const std::string& detail) {
  throw BadSampleError(BadSampleReason::kMalformedJson, origin, detail);
}

std::vector<std::string> parse_images(const json& j, const SampleOrigin& origin) {
  std::vector<std::string> images;
  if (!j.contains("image") || j["image"].is_null()) return images;
  const json& image = j["image"];
  if (image.is_string()) {
    images.push_back(image.get<std::string>());
  } else if (image.is_array()) {
    for (const auto& p : image) {
      if (!p.is_string()) malformed(origin, "'image' list must hold path strings");
      images.push_back(p.get<std::string>());
    }
  } else {
    malformed(origin, "'image' must be a path or a list of paths");
  }
  for (const auto& p : images) {
    if (p.empty()) malformed(origin, "'image' holds an empty path");
  }
  return images;
}

std::vector<int> parse_dims(const json& j, const char* key, size_t n, const SampleOrigin& origin) {
  std::vector<int> dims;
  const json& v = j[key];
  if (v.is_number_integer() && n == 1) {
    dims.push_back(v.get<int>());
  } else if (v.is_array() && v.size() == n) {
    for (const auto& d : v) {
      if (!d.is_number_integer())
        malformed(origin, std::string("'") + key + "' must hold integers");
      dims.push_back(d.get<int>());
    }
  } else {
    malformed(origin, std::string("'") + key + "' must be an integer per image (" +
                          std::to_string(n) + " image(s))");
  }
  for (int d : dims) {
    if (d <= 0)
      malformed(origin, std::string("'") + key + "' must be positive, got " + std::to_string(d));
  }
  return dims;
}

std::vector<ImageSize> parse_sizes(const json& j, size_t n, const SampleOrigin& origin) {
  const bool has_w = j.contains("width"), has_h = j.contains("height");
  if (!has_w && !has_h) return {};
  if (has_w != has_h) malformed(origin, "'width' and 'height' must be given together");
  if (n == 0) malformed(origin, "'width'/'height' given for a record without images");
  const auto w = parse_dims(j, "width", n, origin);
  const auto h = parse_dims(j, "height", n, origin);
  std::vector<ImageSize> sizes(n);
  for (size_t i = 0; i < n; ++i) sizes[i] = {w[i], h[i]};
  return sizes;
}

std::vector<Turn> parse_turns(const json& j, const SampleOrigin& origin) {
  if (!j.contains("conversations") || !j["conversations"].is_array()) {
    malformed(origin, "expected a 'conversations' list");
  }
  std::vector<Turn> turns;
  for (const auto& t : j["conversations"]) {
    const std::string where = "conversations[" + std::to_string(turns.size()) + "]";
    if (!t.is_object() || !t.contains("from") || !t["from"].is_string() || !t.contains("value") ||
        !t["value"].is_string()) {
      malformed(origin, where + ": expected {\"from\": string, \"value\": string}");
    }
    const auto from = t["from"].get<std::string>();
    Turn turn;
    if (from == "human") {
      turn.role = Role::kHuman;
    } else if (from == "gpt") {
      turn.role = Role::kGpt;
    } else {
      malformed(origin, where + ": 'from' must be human or gpt, got '" + from + "'");
    }
    turn.value = t["value"].get<std::string>();
    turns.push_back(std::move(turn));
  }
  return turns;
}

void check_turns(const std::vector<Turn>& turns, const SampleOrigin& origin) {
  if (turns.empty()) {
    throw BadSampleError(BadSampleReason::kEmptyConversation, origin,
                         "the conversation has no turns");
  }
  for (size_t i = 0; i < turns.size(); ++i) {
    const Role expected = i % 2 == 0 ? Role::kHuman : Role::kGpt;
    if (turns[i].role != expected) {
      throw BadSampleError(BadSampleReason::kNonAlternating, origin,
                           "turn " + std::to_string(i) + " is from " +
                               (turns[i].role == Role::kHuman ? "human" : "gpt") +
                               "; expected human, gpt, human, ... alternating from human");
    }
  }
  if (turns.size() < 2) {
    throw BadSampleError(BadSampleReason::kEmptyConversation, origin,
                         "the conversation has no gpt reply to learn from");
  }
  if (turns.back().role != Role::kGpt) {
    throw BadSampleError(BadSampleReason::kNonAlternating, origin,
                         "the conversation ends with a human turn; expected a gpt reply last");
  }
}

void check_placeholders(const SampleRecord& r) {
  int placeholders = 0;
  for (const auto& t : r.turns) placeholders += count_image_placeholders(t.value);
  const int images = static_cast<int>(r.images.size());
  // InternVL rule: a single image without a placeholder is put in front of the first human turn.
  if (images == 1 && placeholders == 0) return;
  if (placeholders != images) {
    throw BadSampleError(BadSampleReason::kImageCountMismatch, r.origin,
                         "the conversation has " + std::to_string(placeholders) +
                             " <image> placeholder(s) but the record has " +
                             std::to_string(images) + " image(s)");
  }
}

SampleRecord record_from_json(const json& j, const SampleOrigin& origin) {
  if (!j.is_object()) malformed(origin, "expected a JSON object");
  SampleRecord r;
  r.origin = origin;
  if (j.contains("id")) r.id = j["id"].is_string() ? j["id"].get<std::string>() : j["id"].dump();
  r.images = parse_images(j, origin);
  r.sizes = parse_sizes(j, r.images.size(), origin);
  r.turns = parse_turns(j, origin);
  check_turns(r.turns, origin);
  check_placeholders(r);
  return r;
}

AnnotationEntry make_entry(const json& j, const SampleOrigin& origin) {
  AnnotationEntry e;
  e.origin = origin;
  try {
    e.record = record_from_json(j, origin);
  } catch (const BadSampleError& err) {
    e.error = err;
  }
  return e;
}

}  // namespace

int count_image_placeholders(const std::string& text) {
  int n = 0;
  const std::string p = kImagePlaceholder;
  for (size_t pos = text.find(p); pos != std::string::npos; pos = text.find(p, pos + p.size())) ++n;
  return n;
}

SampleRecord parse_sample_record(const std::string& json_text, const SampleOrigin& origin) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::parse_error& e) {
    malformed(origin, std::string("invalid JSON: ") + e.what());
  }
  return record_from_json(j, origin);
}

std::vector<AnnotationEntry> read_annotation_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  OMNIBAL_CHECK(in.good(), "annotation file '", path, "' cannot be opened");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  std::vector<AnnotationEntry> entries;
  // A UTF-8 byte-order mark (editors on Windows write one) is not part of the format test;
  // the JSON parser skips it itself.
  const size_t bom = text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  const auto first = text.find_first_not_of(" \t\r\n", bom);
  if (first != std::string::npos && text[first] == '[') {
    json array;
    try {
      array = json::parse(text);
    } catch (const json::parse_error& e) {
      if (const auto bad = find_invalid_utf8(text)) {
        const auto line =
            1 +
            std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(bad->offset), '\n');
        OMNIBAL_FAIL(path, ":", line, ": invalid UTF-8 at byte offset ", bad->offset,
                     " of the file ", bad->hex(), "; a JSON array of records must be UTF-8");
      }
      OMNIBAL_FAIL(path, ": not a valid JSON array of records: ", e.what());
    }
    OMNIBAL_CHECK(array.is_array(), path, ": expected a JSON array of records");
    for (size_t i = 0; i < array.size(); ++i) {
      entries.push_back(make_entry(array[i], SampleOrigin{path, static_cast<int64_t>(i), true}));
    }
    return entries;
  }
  std::istringstream lines(text);
  std::string line;
  for (int64_t number = 1; std::getline(lines, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const SampleOrigin origin{path, number, false};
    // JSON text is UTF-8; say so precisely rather than "not valid JSON" (a Latin-1 file, a
    // truncated character). Checked first, because the JSON parser stops at the same bytes.
    const auto bad_utf8 = find_invalid_utf8(line);
    json j = bad_utf8 ? json(json::value_t::discarded)
                      : json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      AnnotationEntry e;
      e.origin = origin;
      e.error = BadSampleError(BadSampleReason::kMalformedJson, origin,
                               bad_utf8 ? "invalid UTF-8 at byte offset " +
                                              std::to_string(bad_utf8->offset) + " of the line " +
                                              bad_utf8->hex()
                                        : std::string("the line is not valid JSON"));
      entries.push_back(std::move(e));
    } else {
      entries.push_back(make_entry(j, origin));
    }
  }
  return entries;
}

}  // namespace omnibal::data
