// One conversation record in the LLaVA / InternVL annotation convention (docs/paper.md):
//   {"id", "image": path | [paths], "width"/"height": int | [ints] (optional),
//    "conversations": [{"from": "human" | "gpt", "value": "...<image>..."}]}
// and the reading of an annotation file, either JSONL (one record per line) or one JSON array.
// Structural checks (field types, alternating turns, `<image>` count) happen here and raise
// BadSampleError naming the file and line; images are not touched (see image_io.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/bad_sample.h"

namespace omnibal::data {

/// Placeholder that a human turn uses for each image, in order.
inline constexpr const char* kImagePlaceholder = "<image>";

/// Speaker of one turn.
enum class Role { kHuman, kGpt };

/// One turn of a conversation.
struct Turn {
  Role role = Role::kHuman;
  std::string value;  ///< text with `<image>` placeholders, as in the file
};

/// Image width and height in pixels.
struct ImageSize {
  int width = 0;
  int height = 0;
};

/// A parsed, structurally valid record.
struct SampleRecord {
  std::string id;                   ///< "id" field as text (may be empty)
  std::vector<std::string> images;  ///< image paths as written (relative to the dataset root)
  std::vector<ImageSize> sizes;     ///< one per image when the record has width/height, else empty
  std::vector<Turn> turns;          ///< human, gpt, human, gpt, ... ending with gpt
  SampleOrigin origin;              ///< file and line it came from
  /// True when the record has no image (a text-only sample: one dummy tile, image_flags 0).
  bool text_only() const { return images.empty(); }
};

/// One entry of an annotation file: a record, or why the line/element is unusable.
struct AnnotationEntry {
  std::optional<SampleRecord> record;
  std::optional<BadSampleError> error;  ///< set exactly when record is not
  SampleOrigin origin;
};

/// Parses one record from JSON text. Throws BadSampleError (malformed_json, empty_conversation,
/// non_alternating, image_count_mismatch) naming `origin`.
SampleRecord parse_sample_record(const std::string& json_text, const SampleOrigin& origin);

/// Reads every entry of an annotation file: JSONL (blank lines ignored, 1-based line numbers) or,
/// when the first non-blank character is '[', a JSON array (0-based element indices). Bad entries
/// are returned with their error, in file order, so entry i is the i-th sample of the file; a
/// JSONL line that is not UTF-8 is a malformed_json entry "invalid UTF-8 at byte offset N of
/// the line (0xC3 0x28)" (utf8_check.h). Throws omnibal::Error when the file is missing or a
/// JSON array does not parse as a whole (naming line and byte offset when it is not UTF-8).
std::vector<AnnotationEntry> read_annotation_file(const std::string& path);

/// Number of `<image>` placeholders in `text`.
int count_image_placeholders(const std::string& text);

}  // namespace omnibal::data
