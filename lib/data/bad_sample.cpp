#include "data/bad_sample.h"

#include <sstream>

namespace omnibal::data {

const char* reason_name(BadSampleReason reason) {
  switch (reason) {
    case BadSampleReason::kMalformedJson: return "malformed_json";
    case BadSampleReason::kMissingImage: return "missing_image";
    case BadSampleReason::kCorruptImage: return "corrupt_image";
    case BadSampleReason::kImageTooLarge: return "image_too_large";
    case BadSampleReason::kImageCountMismatch: return "image_count_mismatch";
    case BadSampleReason::kEmptyConversation: return "empty_conversation";
    case BadSampleReason::kNonAlternating: return "non_alternating";
    case BadSampleReason::kOverBudget: return "over_budget";
    case BadSampleReason::kCount: break;
  }
  return "unknown";
}

std::string SampleOrigin::to_string() const {
  std::ostringstream os;
  if (is_element) {
    os << file << "[element " << line << "]";
  } else {
    os << file << ":" << line;
  }
  return os.str();
}

namespace {
std::string bad_sample_message(BadSampleReason reason, const SampleOrigin& origin,
                               const std::string& detail) {
  return origin.to_string() + ": bad sample (" + reason_name(reason) + "): " + detail;
}
}  // namespace

BadSampleError::BadSampleError(BadSampleReason reason, const SampleOrigin& origin,
                               const std::string& detail)
    : Error(bad_sample_message(reason, origin, detail)), reason_(reason), origin_(origin) {}

BadSampleCounts::BadSampleCounts(const BadSampleCounts& other) { *this = other; }

BadSampleCounts& BadSampleCounts::operator=(const BadSampleCounts& other) {
  if (this == &other) return *this;
  std::scoped_lock lock(mutex_, other.mutex_);
  counts_ = other.counts_;
  first_ = other.first_;
  return *this;
}

void BadSampleCounts::add(const BadSampleError& error) {
  const auto r = static_cast<size_t>(error.reason());
  std::lock_guard<std::mutex> lock(mutex_);
  if (counts_[r]++ == 0) first_[r] = error.what();
}

void BadSampleCounts::merge(const BadSampleCounts& other) {
  if (this == &other) return;
  std::scoped_lock lock(mutex_, other.mutex_);
  for (size_t r = 0; r < counts_.size(); ++r) {
    if (counts_[r] == 0 && other.counts_[r] > 0) first_[r] = other.first_[r];
    counts_[r] += other.counts_[r];
  }
}

int64_t BadSampleCounts::count(BadSampleReason reason) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counts_[static_cast<size_t>(reason)];
}

int64_t BadSampleCounts::total() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t sum = 0;
  for (auto c : counts_) sum += c;
  return sum;
}

std::string BadSampleCounts::report() const {
  const int64_t n = total();
  if (n == 0) return "no bad samples";
  std::lock_guard<std::mutex> lock(mutex_);
  std::ostringstream os;
  os << "skipped " << n << " bad sample" << (n == 1 ? "" : "s") << ":";
  for (size_t r = 0; r < counts_.size(); ++r) {
    if (counts_[r] == 0) continue;
    os << "\n  " << reason_name(static_cast<BadSampleReason>(r)) << " " << counts_[r]
       << " (first: " << first_[r] << ")";
  }
  return os.str();
}

}  // namespace omnibal::data
