#include "data/input_checks.h"

#include "core/error.h"

namespace omnibal::data {

void check_tokenizer_fits(const Tokenizer& tokenizer, const ModelPreset& preset,
                          const std::string& preset_name) {
  const int pieces = tokenizer.vocab_size();
  const int rows = preset.llm.vocab_size;
  OMNIBAL_CHECK(pieces <= rows, "data.tokenizer '", tokenizer.path(), "' has ", pieces,
                " pieces, more than llm.vocab_size ", rows, " of model.preset '", preset_name,
                "' (ids ", rows, "..", pieces - 1,
                " would have no embedding row); use the tokenizer the preset was made for, or a "
                "preset with llm.vocab_size >= ",
                pieces);
}

namespace {

// "dataset 'd' (annotation 'a.jsonl') has no samples" or "... has 12 samples, all skipped as
// bad ...", or "" when dataset d has a usable sample.
std::string emptiness(const ConversationDataset& dataset, int d,
                      const std::vector<SampleLengths>& lengths) {
  const auto n = static_cast<int64_t>(dataset.entries(d).size());
  int64_t usable = 0;
  for (int64_t e = 0; e < n; ++e) usable += lengths.at(dataset.offset(d) + e).vit_num >= 0;
  if (usable > 0) return "";
  const DatasetMetaEntry& m = dataset.meta(d);
  std::string s = "dataset '" + m.name + "' (annotation '" + m.annotation + "') ";
  if (n == 0) return s + "has no samples";
  return s + "has " + std::to_string(n) + " sample" + (n == 1 ? "" : "s") +
         ", all skipped as bad under data.on_bad_sample: skip (the skip counts name the reasons)";
}

}  // namespace

std::vector<std::string> check_empty_datasets(const std::string& meta_path,
                                              const ConversationDataset& dataset,
                                              const std::vector<SampleLengths>& lengths,
                                              bool allow) {
  OMNIBAL_CHECK(static_cast<int64_t>(lengths.size()) == dataset.size(),
                "check_empty_datasets: ", lengths.size(), " lengths for the ", dataset.size(),
                " samples of ", meta_path);
  std::vector<std::string> empty;
  for (int d = 0; d < dataset.num_datasets(); ++d) {
    std::string why = emptiness(dataset, d, lengths);
    if (!why.empty()) empty.push_back(std::move(why));
  }
  if (empty.empty()) return {};
  if (!allow) {
    std::string list;
    for (const auto& e : empty) list += "\n  " + e;
    OMNIBAL_FAIL("meta file '", meta_path, "' lists ", empty.size(), " dataset",
                 empty.size() == 1 ? "" : "s", " without a usable sample:", list,
                 "\nfix or remove ", empty.size() == 1 ? "it" : "them",
                 ", or set data.allow_empty_datasets: true to go on without ",
                 empty.size() == 1 ? "it" : "them");
  }
  std::vector<std::string> warnings;
  for (const auto& e : empty)
    warnings.push_back("warning: meta file '" + meta_path + "': " + e +
                       "; going on without it (data.allow_empty_datasets: true)");
  return warnings;
}

}  // namespace omnibal::data
