#include "data/pack_builder.h"

#include <cstring>

#include "core/error.h"
#include "data/length_scanner.h"

namespace omnibal::data {

PackBuilder::PackBuilder(const ConversationDataset& dataset, const SampleProcessor& processor,
                         OnBadSample policy)
    : dataset_(dataset), processor_(processor), policy_(policy) {}

namespace {

torch::Tensor int64_tensor(const std::vector<int64_t>& v) {
  return torch::tensor(v, torch::dtype(torch::kInt64));
}

torch::Tensor int64_tensor(const std::vector<int32_t>& v) {
  auto t = torch::empty({static_cast<int64_t>(v.size())}, torch::dtype(torch::kInt64));
  auto* p = t.data_ptr<int64_t>();
  for (size_t i = 0; i < v.size(); ++i) p[i] = v[i];
  return t;
}

}  // namespace

void PackBuilder::expect_lengths(std::vector<SampleLengths> lengths) {
  OMNIBAL_CHECK(lengths.empty() || static_cast<int64_t>(lengths.size()) == dataset_.size(),
                "expect_lengths: ", lengths.size(), " lengths for ", dataset_.size(), " samples");
  expected_ = std::move(lengths);
}

void PackBuilder::check_lengths(int64_t id, const ProcessedSample& sample) const {
  if (expected_.empty()) return;
  const SampleLengths& want = expected_[id];
  int64_t real = 0;
  for (int64_t f : sample.image_flags) real += f;
  const SampleLengths got{static_cast<int64_t>(sample.image_flags.size()), sample.token_num, real};
  OMNIBAL_CHECK(got == want, dataset_.entry(id).origin.to_string(), ": sample ", id, " has ", got,
                " but the length file says ", want,
                "; the length files are stale (rerun omnibal-plan scan with this config)");
}

std::vector<SampleLengths> load_meta_lengths(const ConversationDataset& dataset) {
  std::vector<SampleLengths> all;
  for (int d = 0; d < dataset.num_datasets(); ++d) {
    const DatasetMetaEntry& m = dataset.meta(d);
    OMNIBAL_CHECK(!m.token_lengths.empty(), "dataset '", m.name, "' has no token_lengths file");
    const auto lengths = read_length_file(m.token_lengths);
    OMNIBAL_CHECK(lengths.size() == dataset.entries(d).size(), m.token_lengths, ": ",
                  lengths.size(), " entries for the ", dataset.entries(d).size(), " samples of '",
                  m.annotation, "'");
    all.insert(all.end(), lengths.begin(), lengths.end());
  }
  return all;
}

ProcessedSample PackBuilder::process(int64_t id, const SampleParts& parts) const {
  // Only failures found while decoding are remembered, and only decoding builds use them: a
  // later stage that does not decode (under kError) trusts the record's width/height as the
  // scan did, so a sample whose pixels failed may still be fine for it.
  if (parts.pixels) {
    std::lock_guard<std::mutex> lock(bad_mutex_);
    const auto known = bad_.find(id);
    if (known != bad_.end()) throw known->second;
  }
  const AnnotationEntry& entry = dataset_.entry(id);
  if (entry.error) throw *entry.error;
  try {
    ++processed_;
    return processor_.process(*entry.record, dataset_.root_of(id), parts);
  } catch (const BadSampleError& e) {
    // Whether a sample's images decode is a property of its files: decoding a bad one again
    // (every epoch, under skip) would only repeat the failure, or the decompression bomb.
    if (parts.pixels) {
      std::lock_guard<std::mutex> lock(bad_mutex_);
      bad_.emplace(id, e);
    }
    throw;
  }
}

models::PackBatch PackBuilder::build(const std::vector<int64_t>& sample_ids, const PackParts& parts,
                                     BadSampleCounts* counts) const {
  OMNIBAL_CHECK(policy_ == OnBadSample::kError || counts != nullptr,
                "PackBuilder::build: a BadSampleCounts is required under on_bad_sample: skip");
  // Under kSkip every pack decodes its images, whichever parts it keeps: a pipeline stage that
  // does not keep pixels must still skip exactly the samples whose images the first stage
  // cannot decode, or its labels and loss normaliser would count a sample the model never saw.
  const bool decode = parts.pixels || policy_ == OnBadSample::kSkip;
  const SampleParts sample_parts{decode, parts.input_ids || parts.labels};
  std::vector<ProcessedSample> samples;
  models::PackBatch batch;
  for (int64_t id : sample_ids) {
    try {
      samples.push_back(process(id, sample_parts));
      check_lengths(id, samples.back());
      batch.sample_ids.push_back(id);
    } catch (const BadSampleError& e) {
      if (policy_ == OnBadSample::kError) throw;
      counts->add(e);
      batch.skipped.push_back(e.what());
    }
  }
  std::vector<int64_t> cu{0}, positions, flags;
  std::vector<int32_t> ids, labels;
  for (const auto& s : samples) {
    cu.push_back(cu.back() + s.token_num);
    for (int64_t p = 0; p < s.token_num; ++p) positions.push_back(p);
    flags.insert(flags.end(), s.image_flags.begin(), s.image_flags.end());
    if (parts.input_ids)
      ids.insert(ids.end(), s.tokens.input_ids.begin(), s.tokens.input_ids.end());
    if (parts.labels) labels.insert(labels.end(), s.tokens.labels.begin(), s.tokens.labels.end());
  }
  batch.cu_seqlens = int64_tensor(cu);
  batch.position_ids = int64_tensor(positions);
  batch.image_flags = int64_tensor(flags);
  if (parts.input_ids) batch.input_ids = int64_tensor(ids);
  if (parts.labels) batch.labels = int64_tensor(labels);
  if (parts.pixels) {
    const int64_t side = processor_.options().tiling.tile_size;
    batch.pixel_values = torch::empty({static_cast<int64_t>(flags.size()), 3, side, side},
                                      torch::dtype(torch::kFloat32));
    float* dst = batch.pixel_values.data_ptr<float>();
    for (const auto& s : samples) {
      std::memcpy(dst, s.pixels.data(), s.pixels.size() * sizeof(float));
      dst += s.pixels.size();
    }
  }
  return batch;
}

}  // namespace omnibal::data
