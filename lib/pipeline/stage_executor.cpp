#include "pipeline/stage_executor.h"

#include <chrono>

#include "core/error.h"
#include "models/vlm.h"

namespace omnibal::pipeline {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

StageExecutor::StageExecutor(std::vector<models::UnitPtr> units, int stage, int stages,
                             comm::TensorMessenger* pipe, torch::Device device)
    : units_(std::move(units)), stage_(stage), stages_(stages), pipe_(pipe), device_(device) {
  OMNIBAL_CHECK(!units_.empty(), "StageExecutor: stage ", stage, " has no pipeline units");
  OMNIBAL_CHECK(stages == 1 || pipe_ != nullptr, "StageExecutor: ", stages,
                " stages need a TensorMessenger");
}

comm::MessageHeader StageExecutor::expected_activation(int mb) const {
  // The hidden state's rank follows the boundary phase: ViT tokens [tiles, 1 + P, d] before the
  // projector, [tokens, d] after it.
  const models::UnitKind first = units_.front()->kind();
  const bool vit = first == models::UnitKind::kVitBlock || first == models::UnitKind::kProjector;
  const at::ScalarType dtype = units_.front()->parameters().empty()
                                   ? at::kFloat
                                   : units_.front()->parameters().front().scalar_type();
  comm::MessageHeader h;
  h.kind = comm::MessageKind::kActivation;
  h.micro_batch = mb;
  h.tensors = {{dtype, vit ? std::vector<int64_t>{-1, -1, -1} : std::vector<int64_t>{-1, -1}},
               {at::kLong, {-1}}};
  return h;
}

torch::Tensor StageExecutor::receive_activation(int mb) {
  const auto t0 = Clock::now();
  auto tensors = pipe_->recv(expected_activation(mb), stage_ - 1, device_).wait();
  idle_s_ += since(t0);
  received_side_[mb] = tensors[1];
  return tensors[0];
}

models::UnitState StageExecutor::input_state(int mb, const models::PackBatch* pack, bool grad) {
  if (stage_ == 0) {
    OMNIBAL_CHECK(pack != nullptr, "stage 0 needs the pack of micro-batch ", mb);
    std::optional<torch::Dtype> dtype;  // the model's (bf16 training feeds bf16 pixels)
    if (!units_.front()->parameters().empty())
      dtype = units_.front()->parameters().front().scalar_type();
    return models::UnitState::from_pack(*pack, device_, dtype);
  }
  OMNIBAL_CHECK(received_[mb].defined(), "Forward{", mb, "} on stage ", stage_,
                " before RecvActivation{", mb, "}");
  torch::Tensor hidden = received_[mb];
  received_[mb] = torch::Tensor();
  if (pack != nullptr && pack->cu_seqlens.defined()) {
    // The stage's own pack (the last stage holds one for the loss normaliser and metrics) must
    // describe the micro-batch the first stage sent: a sample skipped on one stage only would
    // otherwise shift labels and counts silently.
    const torch::Tensor side_cpu = received_side_[mb].to(torch::kCPU);
    const auto side = side_cpu.accessor<int64_t, 1>();
    const int64_t tokens = pack->cu_seqlens[-1].item<int64_t>();
    const int64_t samples = pack->cu_seqlens.size(0) - 1;
    OMNIBAL_CHECK(side[1] == tokens && side[2] == samples, "stage ", stage_, " micro-batch ", mb,
                  ": the activation from stage ", stage_ - 1, " carries ", side[2], " samples / ",
                  side[1], " tokens but this stage's pack has ", samples, " / ", tokens,
                  " (a sample skipped on one stage only?)");
  }
  if (grad && hidden.is_floating_point()) hidden.requires_grad_(true);
  flight_[mb].input = hidden;
  return models::UnitState::from_wire(hidden, received_side_[mb]);
}

void StageExecutor::send(comm::MessageKind kind, int mb, std::vector<torch::Tensor> tensors,
                         int peer) {
  sends_.push_back(pipe_->send({kind, mb, std::move(tensors)}, peer));
}

void StageExecutor::forward(int mb, const models::PackBatch* pack, StageStepResult& result,
                            double scale, const StepHooks& hooks) {
  const auto t0 = Clock::now();
  InFlight& f = flight_[mb];
  f.output = models::run_units(units_, input_state(mb, pack, true));
  if (is_last()) {
    const double loss = f.output.loss_sum.item<double>();
    result.loss_sum += loss;
    result.label_count += f.output.label_count;
    result.micro_batches.emplace_back(loss, f.output.label_count);
    torch::Tensor term = hooks.loss_term ? hooks.loss_term(f.output) : f.output.loss_sum;
    result.loss_term_sum += term.item<double>();
    f.output.loss_sum = term * scale;
  }
  result.times.forward_s += since(t0);
}

void StageExecutor::backward(int mb, double scale) {
  (void)scale;
  InFlight& f = flight_[mb];
  if (is_last()) {
    if (f.output.loss_sum.requires_grad()) f.output.loss_sum.backward();
  } else {
    OMNIBAL_CHECK(f.output_grad.defined(), "Backward{", mb, "} on stage ", stage_,
                  " before RecvGrad{", mb, "}");
    if (f.output.hidden.requires_grad())
      torch::autograd::backward({f.output.hidden}, {f.output_grad});
  }
  if (stage_ > 0) {
    torch::Tensor g = f.input.grad();
    f.input_grad = g.defined() ? g : torch::zeros_like(f.input);
  }
  f.output = models::UnitState();
  f.output_grad = torch::Tensor();
  f.input = torch::Tensor();
}

StageStepResult StageExecutor::run_step(const std::vector<schedule::Instruction>& program,
                                        const std::vector<models::PackBatch>& packs,
                                        double loss_scale, const StepHooks& hooks) {
  using schedule::Op;
  int m = 0;
  for (const auto& ins : program) m = std::max(m, ins.micro_batch + 1);
  OMNIBAL_CHECK(stage_ != 0 || static_cast<int>(packs.size()) >= m, "stage 0 got ", packs.size(),
                " packs for ", m, " micro-batches");
  flight_.assign(m, InFlight{});
  received_.assign(m, torch::Tensor());
  received_side_.assign(m, torch::Tensor());
  sends_.clear();
  idle_s_ = 0;
  StageStepResult result;
  for (const auto& ins : program) {
    const int mb = ins.micro_batch;
    switch (ins.op) {
      case Op::RecvActivation: received_[mb] = receive_activation(mb); break;
      case Op::Forward:
        if (hooks.before_op) hooks.before_op("forward", mb);
        forward(mb, mb < static_cast<int>(packs.size()) ? &packs[mb] : nullptr, result, loss_scale,
                hooks);
        break;
      case Op::SendActivation: {
        const models::UnitState& out = flight_[mb].output;
        send(comm::MessageKind::kActivation, mb, {out.hidden.detach(), out.side_tensor()},
             stage_ + 1);
        break;
      }
      case Op::RecvGrad: {
        comm::MessageHeader h;
        h.kind = comm::MessageKind::kGradient;
        h.micro_batch = mb;
        h.tensors = {comm::TensorMeta::of(flight_[mb].output.hidden)};
        const auto t0 = Clock::now();
        flight_[mb].output_grad = pipe_->recv(h, stage_ + 1, device_).wait()[0];
        idle_s_ += since(t0);
        break;
      }
      case Op::Backward: {
        if (hooks.before_op) hooks.before_op("backward", mb);
        const auto t0 = Clock::now();
        backward(mb, loss_scale);
        if (hooks.after_backward) hooks.after_backward(mb);
        result.times.backward_s += since(t0);
        break;
      }
      case Op::SendGrad:
        send(comm::MessageKind::kGradient, mb, {flight_[mb].input_grad}, stage_ - 1);
        flight_[mb].input_grad = torch::Tensor();
        break;
      case Op::ReduceGrads: {
        const auto t0 = Clock::now();
        wait_all(sends_);
        idle_s_ += since(t0);
        const auto t1 = Clock::now();
        if (hooks.reduce_grads) hooks.reduce_grads();
        result.times.reduce_s += since(t1);
        break;
      }
      case Op::OptimizerStep: break;
    }
  }
  wait_all(sends_);
  sends_.clear();
  result.times.idle_s = idle_s_;
  return result;
}

std::optional<models::UnitState> StageExecutor::forward_only(int index,
                                                             const models::PackBatch* pack) {
  torch::NoGradGuard no_grad;
  if (static_cast<int>(received_.size()) <= index) {
    received_.resize(index + 1);
    received_side_.resize(index + 1);
    flight_.resize(index + 1);
  }
  if (stage_ > 0) received_[index] = receive_activation(index);
  models::UnitState out = models::run_units(units_, input_state(index, pack, false));
  flight_[index] = InFlight{};
  received_side_[index] = torch::Tensor();
  if (is_last()) return out;
  comm::Request r =
      pipe_->send({comm::MessageKind::kActivation, index, {out.hidden, out.side_tensor()}},
                  stage_ + 1);
  r.wait();
  return std::nullopt;
}

}  // namespace omnibal::pipeline
