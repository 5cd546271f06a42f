#include "data/pack_builder.h"

#include <cstring>

#include "core/error.h"

namespace omnibal::data {

PackBuilder::PackBuilder(const ConversationDataset& dataset, const SampleProcessor& processor,
                         BadSamplePolicy policy)
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

models::PackBatch PackBuilder::build(const std::vector<int64_t>& sample_ids, const PackParts& parts,
                                     BadSampleCounts* counts) const {
  OMNIBAL_CHECK(policy_ == BadSamplePolicy::kError || counts != nullptr,
                "PackBuilder::build: a BadSampleCounts is required under on_bad_sample: skip");
  const SampleParts sample_parts{parts.pixels, parts.input_ids || parts.labels};
  std::vector<ProcessedSample> samples;
  models::PackBatch batch;
  for (int64_t id : sample_ids) {
    const AnnotationEntry& entry = dataset_.entry(id);
    try {
      if (entry.error) throw *entry.error;
      samples.push_back(processor_.process(*entry.record, dataset_.root_of(id), sample_parts));
      batch.sample_ids.push_back(id);
    } catch (const BadSampleError& e) {
      if (policy_ == BadSamplePolicy::kError) throw;
      counts->add(e);
    }
  }
  std::vector<int64_t> cu{0}, positions, flags;
  std::vector<int32_t> ids, labels;
  for (const auto& s : samples) {
    cu.push_back(cu.back() + s.token_num);
    for (int64_t p = 0; p < s.token_num; ++p) positions.push_back(p);
    flags.insert(flags.end(), s.image_flags.begin(), s.image_flags.end());
    if (parts.input_ids) ids.insert(ids.end(), s.tokens.input_ids.begin(), s.tokens.input_ids.end());
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
