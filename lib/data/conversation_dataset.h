// The training set of a meta file: every dataset's annotation entries, in meta-file order, under
// one dense global sample index (dataset offset + element index in its annotation file). That
// index, or (dataset, element), is what the length files, the planner's packs and PackBatch's
// sample_ids refer to. repeat_time is the planner's business and is not expanded here.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "data/bad_sample.h"
#include "data/dataset_meta.h"
#include "data/sample_record.h"

namespace omnibal::data {

/// All annotation entries of the datasets of one meta file.
class ConversationDataset {
 public:
  /// Reads the meta file and every annotation file. Under OnBadSample::kError the first bad
  /// entry (malformed JSON, bad conversation, placeholder mismatch) throws its BadSampleError;
  /// under kSkip bad entries stay in place (so indices match the files) and are counted where
  /// they are used. Throws omnibal::Error for a missing or unreadable file.
  static ConversationDataset load(const std::string& meta_path, OnBadSample policy);

  /// Builds a dataset from already read parts (tests).
  ConversationDataset(std::vector<DatasetMetaEntry> metas,
                      std::vector<std::vector<AnnotationEntry>> entries);

  /// Samples over all datasets.
  int64_t size() const { return size_; }
  /// Datasets in meta-file order.
  int num_datasets() const { return static_cast<int>(sources_.size()); }
  /// Meta entry of dataset d.
  const DatasetMetaEntry& meta(int d) const { return sources_.at(d).meta; }
  /// Entries of dataset d, in file order.
  const std::vector<AnnotationEntry>& entries(int d) const { return sources_.at(d).entries; }
  /// Global index of element 0 of dataset d.
  int64_t offset(int d) const { return sources_.at(d).offset; }
  /// (dataset, element) of a global index; throws omnibal::Error when out of range.
  std::pair<int, int64_t> locate(int64_t global) const;
  /// The entry at a global index.
  const AnnotationEntry& entry(int64_t global) const;
  /// Image root of the dataset holding a global index.
  const std::string& root_of(int64_t global) const;

 private:
  struct Source {
    DatasetMetaEntry meta;
    std::vector<AnnotationEntry> entries;
    int64_t offset = 0;
  };
  std::vector<Source> sources_;
  int64_t size_ = 0;
};

}  // namespace omnibal::data
