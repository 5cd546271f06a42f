#include "checkpoint/tensor_finiteness.h"

#include <fmt/format.h>

#include <filesystem>

#include "checkpoint/checkpoint_manifest.h"
#include "checkpoint/safetensors.h"

namespace omnibal::checkpoint {

NonFiniteCount count_nonfinite(const torch::Tensor& t) {
  NonFiniteCount c;
  c.total = t.numel();
  if (!t.is_floating_point() || c.total == 0) return c;
  if (torch::isfinite(t).all().item<bool>()) return c;  // one pass for the common case
  c.nan = torch::isnan(t).sum().item<int64_t>();
  c.inf = torch::isinf(t).sum().item<int64_t>();
  return c;
}

std::vector<std::string> nonfinite_tensors(const std::map<std::string, torch::Tensor>& tensors) {
  std::vector<std::string> out;
  for (const auto& [name, t] : tensors) {
    const NonFiniteCount c = count_nonfinite(t);
    if (c.nan > 0 || c.inf > 0)
      out.push_back(
          fmt::format("'{}' holds {} nan and {} inf of {} values", name, c.nan, c.inf, c.total));
  }
  return out;
}

std::vector<std::string> checkpoint_nonfinite_tensors(const std::string& dir) {
  const CheckpointManifest manifest = CheckpointManifest::read(dir);
  std::vector<std::string> out;
  if (manifest.all_finite) return out;
  const std::string suffix = ".safetensors";
  for (const auto& f : manifest.files) {
    if (f.name.size() < suffix.size() ||
        f.name.compare(f.name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const SafetensorsFile file((std::filesystem::path(dir) / f.name).string());
    std::map<std::string, torch::Tensor> tensors;
    for (const auto& name : file.names()) tensors[name] = file.tensor(name);
    for (const auto& line : nonfinite_tensors(tensors)) out.push_back(f.name + ": " + line);
  }
  return out;
}

}  // namespace omnibal::checkpoint
