#include "data/conversation_dataset.h"

#include <algorithm>

#include "core/error.h"

namespace omnibal::data {

ConversationDataset ConversationDataset::load(const std::string& meta_path, OnBadSample policy) {
  std::vector<DatasetMetaEntry> metas = load_dataset_meta(meta_path);
  std::vector<std::vector<AnnotationEntry>> entries;
  for (const auto& m : metas) {
    entries.push_back(read_annotation_file(m.annotation));
    if (policy == OnBadSample::kError) {
      for (const auto& e : entries.back()) {
        if (e.error) throw *e.error;
      }
    }
  }
  return ConversationDataset(std::move(metas), std::move(entries));
}

ConversationDataset::ConversationDataset(std::vector<DatasetMetaEntry> metas,
                                         std::vector<std::vector<AnnotationEntry>> entries) {
  OMNIBAL_CHECK(metas.size() == entries.size(), "ConversationDataset: ", metas.size(),
                " meta entries for ", entries.size(), " entry lists");
  for (size_t d = 0; d < metas.size(); ++d) {
    const auto n = static_cast<int64_t>(entries[d].size());
    OMNIBAL_CHECK(metas[d].length < 0 || metas[d].length == n, metas[d].name, ": meta says length ",
                  metas[d].length, " but '", metas[d].annotation, "' holds ", n, " samples");
    sources_.push_back({std::move(metas[d]), std::move(entries[d]), size_});
    size_ += n;
  }
}

std::pair<int, int64_t> ConversationDataset::locate(int64_t global) const {
  OMNIBAL_CHECK(global >= 0 && global < size_, "sample index ", global, " out of range [0, ", size_,
                ")");
  const auto it = std::upper_bound(sources_.begin(), sources_.end(), global,
                                   [](int64_t g, const Source& s) { return g < s.offset; });
  const auto d = static_cast<int>(it - sources_.begin()) - 1;
  return {d, global - sources_[d].offset};
}

const AnnotationEntry& ConversationDataset::entry(int64_t global) const {
  const auto [d, element] = locate(global);
  return sources_[d].entries[element];
}

const std::string& ConversationDataset::root_of(int64_t global) const {
  return sources_[locate(global).first].meta.root;
}

}  // namespace omnibal::data
