#include "balance/sample_table.h"

#include <algorithm>

#include "core/error.h"
#include "core/rng.h"

namespace omnibal::balance {

int64_t SampleTable::failed_stats() const {
  int64_t n = 0;
  for (const auto& d : datasets) n += d.failed_stats;
  return n;
}

uint32_t SampleTable::add_dataset(DatasetInfo info) {
  datasets.push_back(std::move(info));
  return static_cast<uint32_t>(datasets.size() - 1);
}

void SampleTable::add(uint32_t ds, uint32_t element, Load l, int32_t flags) {
  OMNIBAL_CHECK(ds < datasets.size(), "SampleTable::add: dataset id ", ds, " not registered");
  load.push_back(l);
  image_flags.push_back(flags);
  dataset.push_back(ds);
  index.push_back(element);
}

std::array<double, kLoadDims> SampleTable::mean_load() const {
  std::array<double, kLoadDims> sum{};
  for (const auto& l : load)
    for (int d = 0; d < kLoadDims; ++d) sum[d] += l.v[d];
  if (!load.empty())
    for (auto& s : sum) s /= static_cast<double>(load.size());
  return sum;
}

std::array<int32_t, kLoadDims> SampleTable::max_load() const {
  std::array<int32_t, kLoadDims> mx{};
  for (const auto& l : load)
    for (int d = 0; d < kLoadDims; ++d) mx[d] = std::max(mx[d], l.v[d]);
  return mx;
}

std::string SampleTable::describe(uint32_t sample) const {
  if (sample >= size()) return "sample id " + std::to_string(sample) + " (out of range)";
  const auto& ds = datasets[dataset[sample]];
  return "sample " + std::to_string(index[sample]) + " of dataset '" + ds.name + "' (" + ds.path +
         ")";
}

SampleTable subset(const SampleTable& table, const std::vector<uint32_t>& ids) {
  SampleTable out;
  out.datasets = table.datasets;
  out.load.reserve(ids.size());
  out.image_flags.reserve(ids.size());
  out.dataset.reserve(ids.size());
  out.index.reserve(ids.size());
  for (uint32_t id : ids) {
    OMNIBAL_CHECK(id < table.size(), "subset: sample id ", id, " >= table size ", table.size());
    out.add(table.dataset[id], table.index[id], table.load[id], table.image_flags[id]);
  }
  return out;
}

SampleTable resample(const SampleTable& table, size_t n, uint64_t seed) {
  OMNIBAL_CHECK(table.size() > 0 || n == 0, "resample: cannot draw ", n, " from an empty table");
  Rng rng(seed);
  std::vector<uint32_t> ids(n);
  for (auto& id : ids) id = static_cast<uint32_t>(rng.below(table.size()));
  return subset(table, ids);
}

}  // namespace omnibal::balance
