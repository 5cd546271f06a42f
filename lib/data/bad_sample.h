// Bad input samples: the reasons a conversation record cannot be trained on, the error that
// names the file, line and reason, the `data.on_bad_sample` policy (error | skip) and the
// per-reason counts that scan and every epoch report. Nothing is dropped silently: a skipped
// sample is always counted under its reason. This file does no I/O.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>

#include "core/choices.h"
#include "core/error.h"

namespace omnibal::data {

/// Why a sample was rejected. Order fixes the order of reports.
enum class BadSampleReason : int {
  kMalformedJson = 0,   ///< the line (or array element) is not a JSON object of the format
  kMissingImage,        ///< an image file does not exist
  kCorruptImage,        ///< an image file exists but cannot be decoded / its header read
  kImageTooLarge,       ///< an image over data.max_image_pixels (or too large for stb to decode)
  kImageCountMismatch,  ///< `<image>` placeholders do not match the record's images
  kEmptyConversation,   ///< no turns, or no assistant reply to learn from
  kNonAlternating,      ///< turns are not human, gpt, human, gpt, ...
  kOverBudget,          ///< expanded sample is longer than the pack budget (never truncated)
  kCount
};

/// Number of reasons.
inline constexpr int kNumBadSampleReasons = static_cast<int>(BadSampleReason::kCount);

/// Short stable name of a reason ("missing_image"), used in reports and JSON.
const char* reason_name(BadSampleReason reason);

/// Where a sample comes from: its annotation file and 1-based line (JSONL) or 0-based element
/// (JSON array).
struct SampleOrigin {
  std::string file;
  int64_t line = 0;         ///< 1-based line for JSONL; 0-based element index for a JSON array
  bool is_element = false;  ///< true when `line` is a JSON-array element index
  /// "file:12" or "file[element 3]".
  std::string to_string() const;
};

/// A sample that cannot be used: thrown by record parsing and sample processing. what() reads
/// "<file>:<line>: bad sample (<reason>): <detail>".
class BadSampleError : public Error {
 public:
  BadSampleError(BadSampleReason reason, const SampleOrigin& origin, const std::string& detail);
  BadSampleReason reason() const { return reason_; }
  const SampleOrigin& origin() const { return origin_; }

 private:
  BadSampleReason reason_;
  SampleOrigin origin_;
};

using ::omnibal::OnBadSample;  ///< data.on_bad_sample (core/choices.h)

/// Thread-safe per-reason counts of skipped samples, with the first example of each reason.
class BadSampleCounts {
 public:
  BadSampleCounts() = default;
  BadSampleCounts(const BadSampleCounts& other);
  BadSampleCounts& operator=(const BadSampleCounts& other);

  /// Counts one skipped sample (keeps the message of the first one per reason).
  void add(const BadSampleError& error);
  /// Adds every count of `other`.
  void merge(const BadSampleCounts& other);
  /// Skipped samples with `reason`.
  int64_t count(BadSampleReason reason) const;
  /// Skipped samples over all reasons.
  int64_t total() const;
  /// "skipped 3 bad samples: missing_image 2 (first: f.jsonl:4: ...), over_budget 1 (...)",
  /// or "no bad samples".
  std::string report() const;

 private:
  mutable std::mutex mutex_;
  std::array<int64_t, kNumBadSampleReasons> counts_{};
  std::array<std::string, kNumBadSampleReasons> first_{};
};

}  // namespace omnibal::data
