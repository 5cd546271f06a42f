#include "pipeline/stage_executor.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "models/vlm.h"

namespace omnibal::pipeline {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// The dtype of a chunk's parameters (the activations it sends and expects), fp32 without any.
at::ScalarType chunk_dtype(const std::vector<models::UnitPtr>& units) {
  for (const auto& u : units)
    if (!u->parameters().empty()) return u->parameters().front().scalar_type();
  return at::kFloat;
}

}  // namespace

double trace_clock_us() {
  return std::chrono::duration<double, std::micro>(Clock::now().time_since_epoch()).count();
}

std::vector<FinalGradMark> final_grad_marks(const std::vector<schedule::Instruction>& program) {
  using schedule::Op;
  // Per chunk: the last instruction writing non-linear gradients (Backward, BackwardInput), the
  // last writing linear weights' (Backward, BackwardWeight: a BackwardInput defers them).
  std::map<int, int> last_b, last_w;
  for (size_t i = 0; i < program.size(); ++i) {
    const Op op = program[i].op;
    if (op == Op::Backward || op == Op::BackwardInput)
      last_b[program[i].chunk] = static_cast<int>(i);
    if (op == Op::Backward || op == Op::BackwardWeight)
      last_w[program[i].chunk] = static_cast<int>(i);
  }
  std::vector<FinalGradMark> out(program.size());
  std::set<int> chunks;
  for (const auto& [c, i] : last_b) chunks.insert(c);
  for (const auto& [c, i] : last_w) chunks.insert(c);
  for (const int c : chunks) {
    const int b = last_b.count(c) ? last_b[c] : -1, w = last_w.count(c) ? last_w[c] : -1;
    // A fused Backward also writes the other kind's gradients: it marks only when it is the
    // last of both kinds.
    if (b >= 0 && (program[b].op == Op::BackwardInput || b == w)) out[b].marks = true;
    if (w >= 0 && (program[w].op == Op::BackwardWeight || b == w)) out[w].marks = true;
    out[std::max(b, w)].chunk_done = true;
  }
  return out;
}

StageExecutor::StageExecutor(std::vector<models::UnitPtr> units, int stage, int stages,
                             comm::TensorMessenger* pipe, torch::Device device)
    : StageExecutor(std::vector<std::vector<models::UnitPtr>>{std::move(units)}, stage, stages,
                    pipe, device) {}

StageExecutor::StageExecutor(std::vector<std::vector<models::UnitPtr>> chunks, int stage,
                             int stages, comm::TensorMessenger* pipe, torch::Device device,
                             schedule::ChunkLayout layout)
    : chunks_(std::move(chunks)),
      stage_(stage),
      stages_(stages),
      pipe_(pipe),
      device_(device),
      layout_(layout) {
  OMNIBAL_CHECK(!chunks_.empty(), "StageExecutor: stage ", stage, " has no model chunks");
  OMNIBAL_CHECK(layout != schedule::ChunkLayout::kV || chunks_.size() == 2,
                "StageExecutor: the V layout (ZB-V) needs 2 model chunks per stage, stage ", stage,
                " has ", chunks_.size());
  for (size_t c = 0; c < chunks_.size(); ++c) {
    OMNIBAL_CHECK(!chunks_[c].empty(), "StageExecutor: stage ", stage, " chunk ", c,
                  " has no pipeline units");
    all_units_.insert(all_units_.end(), chunks_[c].begin(), chunks_[c].end());
  }
  OMNIBAL_CHECK(stages == 1 || pipe_ != nullptr, "StageExecutor: ", stages,
                " stages need a TensorMessenger");
}

StageExecutor::InFlight& StageExecutor::slot(int chunk, int mb) {
  OMNIBAL_CHECK(chunk >= 0 && chunk < chunks() && mb >= 0 &&
                    mb < static_cast<int>(flight_[chunk].size()),
                "stage ", stage_, ": instruction for chunk ", chunk, " micro-batch ", mb,
                " outside its ", chunks(), " chunks x ", micro_batches_, " micro-batches");
  return flight_[chunk][mb];
}

comm::MessageHeader StageExecutor::expected_activation(int chunk, int mb) const {
  // The hidden state has the rank of the phase the chunk's first unit consumes: ViT tokens
  // [tiles, 1 + P, d] before the projector, [tokens, d] after it (sizes vary per micro-batch).
  const int64_t rank = models::hidden_rank(chunks_[chunk].front()->input_phase());
  comm::MessageHeader h;
  h.kind = comm::MessageKind::kActivation;
  h.micro_batch = mb;
  h.chunk = chunk;
  h.tensors = {{chunk_dtype(chunks_[chunk]), std::vector<int64_t>(rank, -1)}, {at::kLong, {-1}}};
  return h;
}

void StageExecutor::receive_activation(int chunk, int mb) {
  InFlight& f = slot(chunk, mb);
  const int from = virtual_of(chunk) - 1;
  OMNIBAL_CHECK(from >= 0, "RecvActivation{", mb, "} on the model's first virtual stage");
  std::vector<torch::Tensor> tensors;
  if (rank_of(from) == stage_) {  // a hand-over between two chunks of this rank
    auto it = local_.find({static_cast<int>(comm::MessageKind::kActivation), chunk, mb});
    OMNIBAL_CHECK(it != local_.end(), "stage ", stage_, ": RecvActivation{", mb, " chunk ", chunk,
                  "} before chunk ", chunk - 1, " sent it");
    tensors = std::move(it->second);
    local_.erase(it);
  } else {
    const auto t0 = Clock::now();
    const double t0_us = trace_clock_us();
    tensors = pipe_->recv(expected_activation(chunk, mb), rank_of(from), device_).wait();
    idle_s_ += since(t0);
    span("recv", mb, chunk, t0_us);
  }
  f.received = tensors[0];
  f.received_side = tensors[1];
}

void StageExecutor::receive_grad(int chunk, int mb) {
  InFlight& f = slot(chunk, mb);
  const int from = virtual_of(chunk) + 1;
  OMNIBAL_CHECK(from <= last_virtual(), "RecvGrad{", mb, "} on the model's last virtual stage");
  OMNIBAL_CHECK(f.forwarded, "stage ", stage_, ": RecvGrad{", mb, " chunk ", chunk,
                "} before its Forward");
  if (rank_of(from) == stage_) {
    auto it = local_.find({static_cast<int>(comm::MessageKind::kGradient), chunk, mb});
    OMNIBAL_CHECK(it != local_.end(), "stage ", stage_, ": RecvGrad{", mb, " chunk ", chunk,
                  "} before chunk ", chunk + 1, " sent it");
    f.output_grad = it->second[0];
    local_.erase(it);
    return;
  }
  comm::MessageHeader h;
  h.kind = comm::MessageKind::kGradient;
  h.micro_batch = mb;
  h.chunk = chunk;
  h.tensors = {comm::TensorMeta::of(f.output.hidden)};
  const auto t0 = Clock::now();
  const double t0_us = trace_clock_us();
  f.output_grad = pipe_->recv(h, rank_of(from), device_).wait()[0];
  idle_s_ += since(t0);
  span("recv", mb, chunk, t0_us);
}

models::UnitState StageExecutor::input_state(int chunk, int mb, const models::PackBatch* pack,
                                             bool grad) {
  if (virtual_of(chunk) == 0) {
    OMNIBAL_CHECK(pack != nullptr, "stage 0 needs the pack of micro-batch ", mb);
    std::optional<torch::Dtype> dtype;  // the model's (bf16 training feeds bf16 pixels)
    if (!chunks_[0].front()->parameters().empty())
      dtype = chunks_[0].front()->parameters().front().scalar_type();
    return models::UnitState::from_pack(*pack, device_, dtype);
  }
  InFlight& f = slot(chunk, mb);
  OMNIBAL_CHECK(f.received.defined(), "Forward{", mb, "} on stage ", stage_, " chunk ", chunk,
                " before RecvActivation{", mb, "}");
  torch::Tensor hidden = f.received;
  f.received = torch::Tensor();
  if (pack != nullptr && pack->cu_seqlens.defined()) {
    // The stage's own pack (the last stage holds one for the loss normaliser and metrics) must
    // describe the micro-batch the first stage sent: a sample skipped on one stage only would
    // otherwise shift labels and counts silently.
    const torch::Tensor side_cpu = f.received_side.to(torch::kCPU);
    const auto side = side_cpu.accessor<int64_t, 1>();
    const int64_t tokens = pack->cu_seqlens[-1].item<int64_t>();
    const int64_t samples = pack->cu_seqlens.size(0) - 1;
    OMNIBAL_CHECK(side[1] == tokens && side[2] == samples, "stage ", stage_, " micro-batch ", mb,
                  ": the activation from the previous stage carries ", side[2], " samples / ",
                  side[1], " tokens but this stage's pack has ", samples, " / ", tokens,
                  " (a sample skipped on one stage only?)");
  }
  if (grad && hidden.is_floating_point()) hidden.requires_grad_(true);
  f.input = hidden;
  return models::UnitState::from_wire(hidden, f.received_side);
}

void StageExecutor::send(comm::MessageKind kind, int chunk, int mb,
                         std::vector<torch::Tensor> tensors, int to_virtual) {
  const int peer = rank_of(to_virtual);
  const int peer_chunk = schedule::chunk_of_virtual(to_virtual, stages_);
  (void)chunk;
  if (peer == stage_) {
    local_[{static_cast<int>(kind), peer_chunk, mb}] = std::move(tensors);
    return;
  }
  comm::TensorMessage message{kind, mb, std::move(tensors)};
  message.chunk = peer_chunk;
  const double t0_us = trace_clock_us();
  sends_.push_back(pipe_->send(message, peer));
  span("send", mb, chunk, t0_us);
}

void StageExecutor::forward(int chunk, int mb, const models::PackBatch* pack,
                            StageStepResult& result, double scale, const StepHooks& hooks) {
  const auto t0 = Clock::now();
  InFlight& f = slot(chunk, mb);
  OMNIBAL_CHECK(!f.forwarded, "stage ", stage_, ": Forward{", mb, " chunk ", chunk, "} twice");
  {
    std::optional<models::WeightGradStore::Recording> recording;
    if (records(chunk, mb)) recording.emplace(store_, store_key(chunk, mb));
    f.output = models::run_units(chunks_[chunk], input_state(chunk, mb, pack, true));
  }
  f.forwarded = true;
  if (virtual_of(chunk) == last_virtual()) {
    const double loss = f.output.loss_sum.item<double>();
    result.loss_sum += loss;
    result.label_count += f.output.label_count;
    result.micro_batches.emplace_back(loss, f.output.label_count);
    torch::Tensor term = hooks.loss_term ? hooks.loss_term(f.output) : f.output.loss_sum;
    result.loss_term_sum += term.item<double>();
    f.output.loss_sum = term * scale;
  }
  if (hooks.settle) hooks.settle();
  result.times.forward_s += since(t0);
}

void StageExecutor::backward(int chunk, int mb) {
  InFlight& f = slot(chunk, mb);
  OMNIBAL_CHECK(f.forwarded && !f.input_done, "stage ", stage_, ": backward of micro-batch ", mb,
                " chunk ", chunk, f.forwarded ? " run twice" : " before its Forward");
  {
    std::optional<models::WeightGradStore::Recording> recording;  // ZB-V: not recomputed ones
    if (records(chunk, mb)) recording.emplace(store_, store_key(chunk, mb));
    if (virtual_of(chunk) == last_virtual()) {
      if (f.output.loss_sum.requires_grad()) f.output.loss_sum.backward();
    } else {
      OMNIBAL_CHECK(f.output_grad.defined(), "Backward{", mb, "} on stage ", stage_, " chunk ",
                    chunk, " before RecvGrad{", mb, "}");
      if (f.output.hidden.requires_grad())
        torch::autograd::backward({f.output.hidden}, {f.output_grad});
    }
  }
  f.input_done = true;
  if (virtual_of(chunk) > 0) {
    torch::Tensor g = f.input.grad();
    f.input_grad = g.defined() ? g : torch::zeros_like(f.input);
  }
  f.output = models::UnitState();
  f.output_grad = torch::Tensor();
  f.input = torch::Tensor();
}

void StageExecutor::start_step(const std::vector<schedule::Instruction>& program, size_t packs) {
  using schedule::Op;
  int m = 0;
  split_ = false;
  for (const auto& ins : program) {
    m = std::max(m, ins.micro_batch + 1);
    if (ins.op == Op::BackwardInput || ins.op == Op::BackwardWeight) split_ = true;
  }
  OMNIBAL_CHECK(stage_ != 0 || static_cast<int>(packs) >= m, "stage 0 got ", packs, " packs for ",
                m, " micro-batches");
  micro_batches_ = m;
  split_keys_.clear();  // only micro-batches whose backward is split record their linears
  for (const auto& ins : program)
    if (ins.op == Op::BackwardInput) split_keys_.insert(store_key(ins.chunk, ins.micro_batch));
  flight_.assign(chunks(), std::vector<InFlight>(m));
  final_marks_ = final_grad_marks(program);
  first_forward_.assign(program.size(), false);
  std::set<int> forwarded;
  for (size_t i = 0; i < program.size(); ++i)
    if (program[i].op == Op::Forward && forwarded.insert(program[i].chunk).second)
      first_forward_[i] = true;
  local_.clear();
  sends_.clear();
  if (split_ && !store_) store_ = c10::make_intrusive<models::WeightGradStore>();
  if (store_) {
    store_->clear();
    // ZB-V computes a recomputed unit's dW in its B (lib/schedule/README.md, "Deferred W and
    // recomputation"); ZB-H1 defers every linear.
    store_->set_defer_recomputed(layout_ != schedule::ChunkLayout::kV);
  }
  idle_s_ = 0;
}

void StageExecutor::send_activation(int chunk, int mb) {
  const models::UnitState& out = slot(chunk, mb).output;
  OMNIBAL_CHECK(out.hidden.defined(), "stage ", stage_, ": SendActivation{", mb, " chunk ", chunk,
                "} before its Forward");
  send(comm::MessageKind::kActivation, chunk, mb, {out.hidden.detach(), out.side_tensor()},
       virtual_of(chunk) + 1);
}

void StageExecutor::send_grad(int chunk, int mb) {
  InFlight& f = slot(chunk, mb);
  OMNIBAL_CHECK(f.input_grad.defined(), "stage ", stage_, ": SendGrad{", mb, " chunk ", chunk,
                "} before its backward");
  send(comm::MessageKind::kGradient, chunk, mb, {f.input_grad}, virtual_of(chunk) - 1);
  f.input_grad = torch::Tensor();
}

void StageExecutor::backward_weight(int chunk, int mb, StageTimes& times, const StepHooks& hooks) {
  OMNIBAL_CHECK(slot(chunk, mb).input_done, "stage ", stage_, ": BackwardWeight{", mb, " chunk ",
                chunk, "} before its BackwardInput");
  const auto t0 = Clock::now();
  store_->run(store_key(chunk, mb));
  if (hooks.after_backward) hooks.after_backward(mb);
  if (hooks.settle) hooks.settle();
  const double dt = since(t0);
  times.backward_s += dt;
  times.weight_s += dt;
}

void StageExecutor::reduce_grads(StageTimes& times, const StepHooks& hooks, double start_us) {
  OMNIBAL_CHECK(!store_ || store_->held_bytes() == 0, "stage ", stage_,
                ": ReduceGrads with deferred weight gradients not yet run (a "
                "BackwardWeight missing from the program)");
  const auto t0 = Clock::now();
  wait_all(sends_);
  idle_s_ += since(t0);
  span("send_wait", -1, 0, start_us);
  const auto t1 = Clock::now();
  const double reduce_us = spans_ ? trace_clock_us() : 0.0;
  if (hooks.reduce_grads) hooks.reduce_grads();
  times.reduce_s += since(t1);
  span("dp_reduce", -1, 0, reduce_us);
}

void StageExecutor::count_comm(const std::vector<CommInterval>& work, int chunk,
                               double inside_before_us, StageTimes& times, bool weight) {
  for (const CommInterval& w : work) {
    const double s = (w.end_us - w.start_us) * 1e-6;
    times.reduce_s += s;
    if (w.start_us < inside_before_us) {  // launched inside the backward: not its compute
      times.backward_s -= s;
      if (weight) times.weight_s -= s;
    }
    if (spans_) spans_->push_back({"dp_reduce", -1, chunk, w.start_us, w.end_us});
  }
}

void StageExecutor::begin_final(size_t index, int chunk, const StepHooks& hooks,
                                StageTimes& times) {
  if (!hooks.final_grads || !final_marks_[index].marks) return;
  count_comm(hooks.final_grads({chunk, true, false}), chunk, 0.0, times, false);
}

void StageExecutor::end_final(size_t index, int chunk, const StepHooks& hooks, StageTimes& times,
                              bool weight) {
  const FinalGradMark mark = final_marks_[index];
  if (!hooks.final_grads || !(mark.marks || mark.chunk_done)) return;
  const double call_us = trace_clock_us();
  count_comm(hooks.final_grads({chunk, false, mark.chunk_done}), chunk, call_us, times, weight);
}

void StageExecutor::execute(size_t index, const schedule::Instruction& ins,
                            const std::vector<models::PackBatch>& packs, double loss_scale,
                            const StepHooks& hooks, StageStepResult& result) {
  using schedule::Op;
  const int mb = ins.micro_batch, c = ins.chunk;
  const double start_us = spans_ ? trace_clock_us() : 0.0;
  switch (ins.op) {
    case Op::RecvActivation: receive_activation(c, mb); break;
    case Op::Forward: {
      if (hooks.before_op) hooks.before_op(FailWhere::kForward, mb);
      if (hooks.before_chunk_forward && first_forward_[index]) {  // not in the forward's span
        const auto t0 = Clock::now();
        hooks.before_chunk_forward(c);
        result.times.reduce_s += since(t0);
      }
      const double forward_us = spans_ ? trace_clock_us() : 0.0;
      forward(c, mb, mb < static_cast<int>(packs.size()) ? &packs[mb] : nullptr, result, loss_scale,
              hooks);
      span("forward", mb, c, forward_us);
      break;
    }
    case Op::SendActivation: send_activation(c, mb); break;
    case Op::RecvGrad: receive_grad(c, mb); break;
    case Op::Backward:
    case Op::BackwardInput: {
      if (hooks.before_op) hooks.before_op(FailWhere::kBackward, mb);
      begin_final(index, c, hooks, result.times);
      const auto t0 = Clock::now();
      backward(c, mb);
      if (hooks.after_backward) hooks.after_backward(mb);
      if (hooks.settle) hooks.settle();
      result.times.backward_s += since(t0);
      span(ins.op == Op::Backward ? "backward" : "backward_input", mb, c, start_us);
      end_final(index, c, hooks, result.times, false);
      break;
    }
    case Op::BackwardWeight:
      begin_final(index, c, hooks, result.times);
      backward_weight(c, mb, result.times, hooks);
      span("backward_weight", mb, c, start_us);
      end_final(index, c, hooks, result.times, true);
      break;
    case Op::SendGrad: send_grad(c, mb); break;
    case Op::ReduceGrads: reduce_grads(result.times, hooks, start_us); break;
    case Op::OptimizerStep: break;
  }
}

StageStepResult StageExecutor::run_step(const std::vector<schedule::Instruction>& program,
                                        const std::vector<models::PackBatch>& packs,
                                        double loss_scale, const StepHooks& hooks) {
  start_step(program, packs.size());
  StageStepResult result;
  spans_ = hooks.trace ? &result.spans : nullptr;
  for (size_t i = 0; i < program.size(); ++i)
    execute(i, program[i], packs, loss_scale, hooks, result);
  wait_all(sends_);
  sends_.clear();
  OMNIBAL_CHECK(local_.empty(), "stage ", stage_, ": ", local_.size(),
                " chunk hand-overs sent and never received");
  result.times.idle_s = idle_s_;
  spans_ = nullptr;
  return result;
}

std::optional<models::UnitState> StageExecutor::forward_only(int index,
                                                             const models::PackBatch* pack) {
  torch::NoGradGuard no_grad;
  if (micro_batches_ <= index) {
    micro_batches_ = index + 1;
    flight_.resize(chunks());
  }
  for (auto& chunk_flight : flight_)
    if (static_cast<int>(chunk_flight.size()) <= index) chunk_flight.resize(index + 1);
  for (int c = 0; c < chunks(); ++c) {
    if (virtual_of(c) > 0) receive_activation(c, index);
    models::UnitState out = models::run_units(chunks_[c], input_state(c, index, pack, false));
    flight_[c][index] = InFlight{};
    if (virtual_of(c) == last_virtual()) return out;
    const int to = virtual_of(c) + 1, to_chunk = schedule::chunk_of_virtual(to, stages_);
    if (rank_of(to) == stage_) {
      local_[{static_cast<int>(comm::MessageKind::kActivation), to_chunk, index}] = {
          out.hidden, out.side_tensor()};
      continue;
    }
    comm::TensorMessage message{comm::MessageKind::kActivation,
                                index,
                                {out.hidden, out.side_tensor()}};
    message.chunk = to_chunk;
    comm::Request r = pipe_->send(message, rank_of(to));
    r.wait();
  }
  return std::nullopt;
}

}  // namespace omnibal::pipeline
