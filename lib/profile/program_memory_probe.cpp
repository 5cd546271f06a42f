#include "profile/program_memory_probe.h"

#include <optional>

#include "core/error.h"
#include "models/weight_grad_store.h"
#include "profile/memory_meter.h"
#include "profile/unit_profiler.h"

namespace omnibal::profile {
namespace {

using models::UnitState;
using schedule::Op;

/// One (chunk, micro-batch) in flight: its input (the received activation), output and the
/// received output gradient.
struct Slot {
  UnitState input, output;
  torch::Tensor output_grad;
  bool forwarded = false, backwarded = false;
};

void check_program_probe(const ProgramProbe& p, size_t units) {
  OMNIBAL_CHECK(!p.chunks.empty() && p.inputs.size() == p.chunks.size(),
                "program probe: ", p.chunks.size(), " chunks with ", p.inputs.size(),
                " input lists");
  for (const auto& [begin, end] : p.chunks)
    OMNIBAL_CHECK(begin >= 0 && begin < end && end <= static_cast<int64_t>(units),
                  "program probe: unit range [", begin, ", ", end, ") is empty or outside the ",
                  units, " units");
  OMNIBAL_CHECK(p.recompute.size() == units, "program probe: ", p.recompute.size(),
                " recompute flags for ", units, " units");
  for (const auto& ins : p.program)
    if (ins.micro_batch >= 0)
      OMNIBAL_CHECK(ins.chunk >= 0 && ins.chunk < static_cast<int>(p.chunks.size()) &&
                        ins.micro_batch < static_cast<int>(p.inputs[ins.chunk].size()),
                    "program probe: ", schedule::to_string(ins), " has no input state");
}

/// A received activation (or a loaded pack) allocated inside the meter.
UnitState arrived(const UnitState& s, bool needs_grad) {
  UnitState in = s.with_hidden(s.hidden.detach().clone(), s.phase);
  if (needs_grad && in.hidden.is_floating_point()) in.hidden.requires_grad_(true);
  return in;
}

/// The tensor a chunk backpropagates from: the loss on the model's last chunk, else its output.
torch::Tensor backward_root(const UnitState& out) {
  return out.phase == models::Phase::kLoss ? out.loss_sum : out.hidden;
}

/// The walk of one program over built chunks (probe_program_memory's second half).
class ProgramWalk {
 public:
  ProgramWalk(const ProgramProbe& p, const std::vector<std::vector<models::UnitPtr>>& chunks,
              const std::vector<bool>& input_grad)
      : p_(p), chunks_(chunks), input_grad_(input_grad), slots_(chunks.size()) {
    for (size_t c = 0; c < chunks.size(); ++c) slots_[c].resize(p.inputs[c].size());
    for (const auto& ins : p.program)
      split_ = split_ || ins.op == Op::BackwardInput || ins.op == Op::BackwardWeight;
    store_ = c10::make_intrusive<models::WeightGradStore>();
    store_->set_defer_recomputed(p.defer_recomputed);
  }

  void run(const schedule::Instruction& ins) {
    const int c = ins.chunk, mb = ins.micro_batch;
    switch (ins.op) {
      case Op::RecvActivation: receive(c, mb); break;
      case Op::Forward: forward(c, mb); break;
      case Op::RecvGrad: {
        Slot& s = slot(c, mb, "RecvGrad");
        OMNIBAL_CHECK(s.forwarded, "program probe: ", schedule::to_string(ins), " before Forward");
        s.output_grad = torch::ones_like(backward_root(s.output));  // a received gradient
        break;
      }
      case Op::Backward:
      case Op::BackwardInput: backward(c, mb, ins.op == Op::BackwardInput); break;
      case Op::BackwardWeight:
        OMNIBAL_CHECK(slot(c, mb, "BackwardWeight").backwarded,
                      "program probe: ", schedule::to_string(ins), " before its BackwardInput");
        store_->run(key(c, mb));
        break;
      default: break;  // sends (buffers not counted), DP, optimizer
    }
  }

 private:
  int key(int c, int mb) const { return c * static_cast<int>(slots_[0].size() + 1) + mb; }
  Slot& slot(int c, int mb, const char* what) {
    OMNIBAL_CHECK(c >= 0 && c < static_cast<int>(slots_.size()) && mb >= 0 &&
                      mb < static_cast<int>(slots_[c].size()),
                  "program probe: ", what, " of chunk ", c, " micro-batch ", mb, " out of range");
    return slots_[c][mb];
  }
  /// The received activation, allocated when the list receives it (ZB-V may receive ahead).
  void receive(int c, int mb) {
    Slot& s = slot(c, mb, "RecvActivation");
    if (!s.input.hidden.defined()) s.input = arrived(p_.inputs[c][mb], input_grad_[c]);
  }
  void forward(int c, int mb) {
    Slot& s = slot(c, mb, "Forward");
    OMNIBAL_CHECK(!s.forwarded, "program probe: Forward{", mb, " c", c, "} twice");
    receive(c, mb);  // the first chunk's pack state is loaded here
    std::optional<models::WeightGradStore::Recording> recording;
    if (split_) recording.emplace(store_, key(c, mb));
    s.output = models::run_units(chunks_[c], s.input);
    s.forwarded = true;
  }
  void backward(int c, int mb, bool split) {
    Slot& s = slot(c, mb, "Backward");
    OMNIBAL_CHECK(s.forwarded && !s.backwarded, "program probe: backward of chunk ", c,
                  " micro-batch ", mb, s.forwarded ? " twice" : " before its Forward");
    const torch::Tensor root = backward_root(s.output);
    {
      std::optional<models::WeightGradStore::Recording> recording;
      if (split) recording.emplace(store_, key(c, mb));
      torch::Tensor grad = s.output_grad.defined() ? s.output_grad : torch::ones_like(root);
      if (root.requires_grad()) torch::autograd::backward({root}, {grad});
    }
    s = Slot();  // graph, input (its gradient sent) and output freed
    s.forwarded = s.backwarded = true;
  }

  const ProgramProbe& p_;
  const std::vector<std::vector<models::UnitPtr>>& chunks_;
  std::vector<bool> input_grad_;
  std::vector<std::vector<Slot>> slots_;
  c10::intrusive_ptr<models::WeightGradStore> store_;
  bool split_ = false;
};

}  // namespace

ProgramProbeResult probe_program_memory(const ProgramProbe& p) {
  check_program_probe(p, omnibal::unit_names(p.preset).size());
  const auto trainable = trainable_units(p.preset, {});
  std::vector<bool> input_grad;  // a chunk's input needs a gradient when a unit before trains
  for (const auto& [begin, end] : p.chunks) {
    bool any = false;
    for (int64_t u = 0; u < begin; ++u) any = any || trainable[u];
    input_grad.push_back(any);
  }
  ProgramProbeResult result;
  MemoryMeter meter(p.options.device);
  {
    const auto chunks = models::make_chunk_units(p.preset, p.options, p.chunks);
    std::vector<models::UnitPtr> all;
    for (size_t c = 0; c < chunks.size(); ++c)
      for (size_t i = 0; i < chunks[c].size(); ++i) {
        chunks[c][i]->set_recompute(p.recompute[p.chunks[c].first + static_cast<int64_t>(i)]);
        all.push_back(chunks[c][i]);
      }
    if (p.on_built) p.on_built(all);
    for (size_t c = 0; c < chunks.size(); ++c) {  // warm-up: gradients allocated from here on
      const UnitState out = models::run_units(chunks[c], arrived(p.inputs[c][0], input_grad[c]));
      const torch::Tensor root = backward_root(out);
      if (root.requires_grad()) torch::autograd::backward({root}, {torch::ones_like(root)});
    }
    result.static_bytes = meter.current_bytes();
    meter.reset_peak();
    {
      ProgramWalk walk(p, chunks, input_grad);
      for (const auto& ins : p.program) walk.run(ins);
    }
    result.peak_bytes = meter.peak_bytes();
  }
  return result;
}

}  // namespace omnibal::profile
