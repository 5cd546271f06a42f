#include "models/unit_state.h"

#include "core/error.h"

namespace omnibal::models {

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::kPixels: return "pixels";
    case Phase::kVit: return "vit";
    case Phase::kProjected: return "projected";
    case Phase::kLlm: return "llm";
    case Phase::kLoss: return "loss";
  }
  return "unknown";
}

int64_t hidden_rank(Phase phase) {
  switch (phase) {
    case Phase::kPixels: return 4;
    case Phase::kVit: return 3;
    case Phase::kProjected:
    case Phase::kLlm: return 2;
    case Phase::kLoss: return 0;
  }
  return 0;
}

namespace {

constexpr int64_t kHeader = 5;  // side_tensor(): phase, T, n, tiles, dropout_key

torch::Tensor check_ids(const torch::Tensor& t, const char* field, int64_t expected_len) {
  OMNIBAL_CHECK(t.defined(), "PackBatch.", field, ": expected a [", expected_len,
                "] int64 tensor, got an undefined tensor");
  OMNIBAL_CHECK(t.dim() == 1 && t.size(0) == expected_len, "PackBatch.", field,
                ": expected shape [", expected_len, "], got ", t.sizes());
  return t.to(torch::kInt64);
}

void check_cu_seqlens(const torch::Tensor& cu, int64_t tokens) {
  OMNIBAL_CHECK(cu.defined() && cu.dim() == 1 && cu.size(0) >= 1,
                "PackBatch.cu_seqlens: expected [n + 1] int64 with n >= 0 samples");
  const auto acc = cu.accessor<int64_t, 1>();
  OMNIBAL_CHECK(acc[0] == 0, "PackBatch.cu_seqlens[0]: expected 0, got ", acc[0]);
  for (int64_t i = 1; i < cu.size(0); ++i)
    OMNIBAL_CHECK(acc[i] > acc[i - 1], "PackBatch.cu_seqlens[", i,
                  "]: expected strictly increasing offsets (every sample >= 1 token), got ",
                  acc[i - 1], " then ", acc[i]);
  OMNIBAL_CHECK(acc[cu.size(0) - 1] == tokens, "PackBatch.cu_seqlens: last entry ",
                acc[cu.size(0) - 1], " must equal the pack length T = ", tokens);
}

/// `t` on `device` (as `dtype` when given); asynchronous to a CUDA device (from pinned memory,
/// PackBatch::pin_memory, the host does not wait; from pageable memory it copies as before).
torch::Tensor to_device(const torch::Tensor& t, const torch::Device& device,
                        std::optional<torch::Dtype> dtype = std::nullopt) {
  return t.to(device, dtype.value_or(t.scalar_type()), /*non_blocking=*/device.is_cuda());
}

}  // namespace

UnitState UnitState::from_pack(const PackBatch& pack, const torch::Device& device,
                               std::optional<torch::Dtype> pixel_dtype) {
  OMNIBAL_CHECK(pack.input_ids.defined() && pack.input_ids.dim() == 1,
                "PackBatch.input_ids: expected a [T] int64 tensor");
  const int64_t tokens = pack.input_ids.size(0);
  UnitState s;
  s.phase = Phase::kPixels;
  s.dropout_key = pack.dropout_key;
  s.input_ids = to_device(check_ids(pack.input_ids, "input_ids", tokens), device);
  s.position_ids = to_device(check_ids(pack.position_ids, "position_ids", tokens), device);
  s.labels = to_device(check_ids(pack.labels, "labels", tokens), device);
  s.cu_seqlens = pack.cu_seqlens.to(torch::kCPU, torch::kInt64).contiguous();
  check_cu_seqlens(s.cu_seqlens, tokens);
  if (pack.pixel_values.defined()) {
    OMNIBAL_CHECK(pack.pixel_values.dim() == 4,
                  "PackBatch.pixel_values: expected [tiles, 3, H, W], got ",
                  pack.pixel_values.sizes());
    const int64_t tiles = pack.pixel_values.size(0);
    s.hidden = to_device(pack.pixel_values, device, pixel_dtype);
    s.image_flags = pack.image_flags.defined()
                        ? to_device(check_ids(pack.image_flags, "image_flags", tiles), device)
                        : torch::ones({tiles}, torch::dtype(torch::kInt64).device(device));
  }
  return s;
}

torch::Tensor UnitState::side_tensor() const {
  const int64_t tokens = input_ids.defined() ? input_ids.size(0) : 0;
  const int64_t samples = cu_seqlens.defined() ? cu_seqlens.size(0) - 1 : 0;
  const int64_t tiles = image_flags.defined() ? image_flags.size(0) : 0;
  const auto cpu = [](const torch::Tensor& t) {
    return t.to(torch::kCPU, torch::kInt64).reshape(-1);
  };
  std::vector<torch::Tensor> parts{
      torch::tensor({static_cast<int64_t>(phase), tokens, samples, tiles, dropout_key},
                    torch::kInt64)};
  if (tokens > 0) {
    parts.push_back(cpu(input_ids));
    parts.push_back(cpu(position_ids));
    parts.push_back(cpu(labels));
  }
  if (samples > 0) parts.push_back(cpu(cu_seqlens));
  if (tiles > 0) parts.push_back(cpu(image_flags));
  return torch::cat(parts);
}

UnitState UnitState::from_wire(torch::Tensor hidden, const torch::Tensor& side) {
  OMNIBAL_CHECK(side.dim() == 1 && side.size(0) >= kHeader && side.scalar_type() == torch::kInt64,
                "UnitState::from_wire: expected a 1-D int64 side tensor of >= ", kHeader,
                " entries, got ", side.sizes(), " ", side.scalar_type());
  const torch::Tensor s = side.to(torch::kCPU);
  const auto acc = s.accessor<int64_t, 1>();
  const int64_t tokens = acc[1], samples = acc[2], tiles = acc[3];
  const int64_t expected = kHeader + 3 * tokens + (samples > 0 ? samples + 1 : 0) + tiles;
  OMNIBAL_CHECK(acc[0] >= 0 && acc[0] <= 4 && s.size(0) == expected,
                "UnitState::from_wire: header (phase ", acc[0], ", T ", tokens, ", n ", samples,
                ", tiles ", tiles, ") implies ", expected, " entries, got ", s.size(0));
  UnitState out;
  out.phase = static_cast<Phase>(acc[0]);
  out.dropout_key = acc[4];
  const torch::Device device = hidden.defined() ? hidden.device() : torch::Device(torch::kCPU);
  out.hidden = std::move(hidden);
  int64_t at = kHeader;
  auto take = [&](int64_t len) {
    torch::Tensor t = s.narrow(0, at, len).clone();
    at += len;
    return t;
  };
  if (tokens > 0) {
    out.input_ids = take(tokens).to(device);
    out.position_ids = take(tokens).to(device);
    out.labels = take(tokens).to(device);
  }
  // An empty micro-batch (every sample skipped) has n = 0: cu_seqlens = [0], as from_pack has.
  out.cu_seqlens = samples > 0 ? take(samples + 1) : torch::zeros({1}, torch::kInt64);
  if (tiles > 0) out.image_flags = take(tiles).to(device);
  return out;
}

UnitState UnitState::with_hidden(torch::Tensor next, Phase next_phase) const {
  UnitState out = *this;
  out.hidden = std::move(next);
  out.phase = next_phase;
  return out;
}

}  // namespace omnibal::models
