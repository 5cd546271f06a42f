#include "train/nonfinite_guard.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>
#include <utility>

#include "core/error.h"
#include "core/log.h"

namespace omnibal::train {

namespace {

constexpr int64_t kClasses = 4;  // Finiteness values, the factor of the rank in the encoding

int64_t encode_class(Finiteness f, int world_rank, int world_size) {
  return f == Finiteness::kFinite ? int64_t{world_size} * kClasses
                                  : int64_t{world_rank} * kClasses + static_cast<int64_t>(f);
}

}  // namespace

Finiteness finiteness(double v) {
  if (std::isnan(v)) return Finiteness::kNan;
  if (std::isinf(v)) return v > 0 ? Finiteness::kPosInf : Finiteness::kNegInf;
  return Finiteness::kFinite;
}

const char* finiteness_name(Finiteness f) {
  switch (f) {
    case Finiteness::kFinite: return "finite";
    case Finiteness::kNan: return "nan";
    case Finiteness::kPosInf: return "inf";
    case Finiteness::kNegInf: return "-inf";
  }
  return "finite";
}

std::array<int64_t, 2> encode_observation(const StepObservation& mine, int world_rank,
                                          int world_size) {
  const Finiteness loss = mine.has_loss ? finiteness(mine.loss) : Finiteness::kFinite;
  return {encode_class(loss, world_rank, world_size),
          encode_class(finiteness(mine.local_grad_sq), world_rank, world_size)};
}

StepFindings decode_findings(const std::array<int64_t, 2>& reduced, int world_size,
                             double grad_norm) {
  StepFindings f;
  f.grad_norm = grad_norm;
  const int64_t none = int64_t{world_size} * kClasses;
  if (reduced[0] < none) {
    f.loss_rank = static_cast<int>(reduced[0] / kClasses);
    f.loss = static_cast<Finiteness>(reduced[0] % kClasses);
  }
  if (reduced[1] < none) {
    f.grad_rank = static_cast<int>(reduced[1] / kClasses);
    f.grad = static_cast<Finiteness>(reduced[1] % kClasses);
  }
  return f;
}

NonFiniteGuard::NonFiniteGuard(OnNonFinite policy, int max_skips, int64_t total_steps,
                               comm::ProcessGrid grid)
    : policy_(policy), max_skips_(max_skips), total_steps_(total_steps), grid_(std::move(grid)) {
  OMNIBAL_CHECK(max_skips_ >= 1, "train.max_nonfinite_skips: expected >= 1, got ", max_skips_);
}

std::string NonFiniteGuard::place(int world_rank) const {
  const comm::GridCoord c = grid_.coord(world_rank);
  return fmt::format("stage {}, dp rank {}, tp rank {}, world rank {}", c.pp, c.dp, c.tp,
                     world_rank);
}

std::string NonFiniteGuard::describe(const StepFindings& f) const {
  std::string out;
  if (f.loss_rank >= 0)
    out = fmt::format("the loss is {} (on {})", finiteness_name(f.loss), place(f.loss_rank));
  const Finiteness norm = finiteness(f.grad_norm);
  if (f.grad_rank >= 0 || norm != Finiteness::kFinite) {
    if (!out.empty()) out += " and ";
    out += fmt::format("the gradient norm is {}", finiteness_name(norm));
    if (f.grad_rank >= 0)
      out += fmt::format(" (non-finite gradients first on {})", place(f.grad_rank));
  }
  return out;
}

StepVerdict NonFiniteGuard::decide(int64_t step, const StepFindings& findings) {
  if (!findings.nonfinite()) {
    consecutive_ = 0;
    return StepVerdict::kApply;
  }
  const std::string at = fmt::format("step {} (progress line {}/{})", step, step + 1, total_steps_);
  const std::string what = describe(findings);
  if (policy_ == OnNonFinite::kStop)
    OMNIBAL_FAIL(at, ": ", what,
                 "; nothing of the step was applied (train.on_nonfinite stop). Set "
                 "train.on_nonfinite=skip to skip such steps, or lower train.lr (or set "
                 "train.grad_clip, lengthen train.warmup_steps)");
  if (consecutive_ >= max_skips_)
    OMNIBAL_FAIL(at, ": ", what, "; the ", max_skips_,
                 " steps before it were skipped as non-finite too and train.max_nonfinite_skips "
                 "is ",
                 max_skips_,
                 ": stopping (nothing of the step was applied). Lower train.lr (or set "
                 "train.grad_clip, lengthen train.warmup_steps), or raise "
                 "train.max_nonfinite_skips");
  ++consecutive_;
  ++skipped_;
  log_info("{}: {}; step skipped (train.on_nonfinite skip: not applied, {} in a row of at most {})",
           at, what, consecutive_, max_skips_);
  return StepVerdict::kSkip;
}

StepVerdict NonFiniteGuard::check(int64_t step, const StepObservation& mine,
                                  comm::Communicator& world) {
  const auto code = encode_observation(mine, world.rank(), world.size());
  torch::Tensor t = torch::tensor({code[0], code[1]}, torch::kLong);
  world.all_reduce(t, comm::ReduceOp::kMin, "non-finite check");
  return decide(step, decode_findings({t[0].item<int64_t>(), t[1].item<int64_t>()}, world.size(),
                                      mine.grad_norm));
}

}  // namespace omnibal::train
