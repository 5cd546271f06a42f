#include "models/tensor_parallel.h"
#include "models/weight_grad_store.h"

#include <torch/csrc/autograd/custom_function.h>

#include <limits>

#include "core/error.h"

namespace omnibal::models {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Op = TpCollectives::Op;

/// In-place all-reduce of a contiguous copy; skipped without a group (profiling stand-in).
torch::Tensor all_reduced(const torch::Tensor& x, const c10::intrusive_ptr<TpCollectives>& group,
                          Op op = Op::kSum) {
  torch::Tensor t = x.clone(at::MemoryFormat::Contiguous);  // one copy, reduced in place
  if (group) group->all_reduce(t, op);
  return t;
}

c10::intrusive_ptr<TpCollectives> group_of(AutogradContext* ctx) {
  return c10::static_intrusive_pointer_cast<TpCollectives>(ctx->saved_data["group"].toCapsule());
}

struct CopyToTp : torch::autograd::Function<CopyToTp> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x,
                               c10::intrusive_ptr<TpCollectives> group) {
    ctx->saved_data["group"] = c10::IValue::make_capsule(group);
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {all_reduced(grad[0], group_of(ctx)), torch::Tensor()};
  }
};

struct ReduceFromTp : torch::autograd::Function<ReduceFromTp> {
  static torch::Tensor forward(AutogradContext*, torch::Tensor x,
                               c10::intrusive_ptr<TpCollectives> group) {
    return all_reduced(x, group);
  }
  static variable_list backward(AutogradContext*, variable_list grad) {
    return {grad[0], torch::Tensor()};
  }
};

struct SumOverTp : torch::autograd::Function<SumOverTp> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x,
                               c10::intrusive_ptr<TpCollectives> group) {
    ctx->saved_data["group"] = c10::IValue::make_capsule(group);
    return all_reduced(x, group);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {all_reduced(grad[0], group_of(ctx)), torch::Tensor()};
  }
};

/// Megatron's _VocabParallelCrossEntropy: inputs logits [K, Vl] (padding already -inf) and
/// targets [K]; saves softmax and the local one-hot position for the backward.
struct VocabParallelCe : torch::autograd::Function<VocabParallelCe> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor logits, torch::Tensor targets,
                               int64_t vocab_start, c10::intrusive_ptr<TpCollectives> group) {
    const int64_t local = logits.size(1);
    const torch::Tensor max = all_reduced(std::get<0>(logits.max(1)), group, Op::kMax);
    const torch::Tensor shifted = logits - max.unsqueeze(1);
    const torch::Tensor exp = shifted.exp();
    const torch::Tensor sum = all_reduced(exp.sum(1), group);
    const torch::Tensor in_range =
        targets.ge(vocab_start).logical_and(targets.lt(vocab_start + local));
    const torch::Tensor column = (targets - vocab_start).clamp(0, local - 1);
    // where(), not a product: a rank holding only padding would multiply -inf by 0.
    const torch::Tensor picked =
        all_reduced(torch::where(in_range, shifted.gather(1, column.unsqueeze(1)).squeeze(1),
                                 torch::zeros({}, shifted.options())),
                    group);
    ctx->save_for_backward({exp / sum.unsqueeze(1), column, in_range});
    return sum.log() - picked;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    torch::Tensor g = saved[0].clone();  // softmax over the whole vocabulary, this rank's columns
    g.scatter_add_(1, saved[1].unsqueeze(1), -saved[2].to(g.scalar_type()).unsqueeze(1));
    return {g * grad[0].unsqueeze(1), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

/// logits with the padded columns (global id >= vocab) set to -inf.
torch::Tensor mask_padding(const torch::Tensor& logits, int64_t vocab_start, int64_t vocab) {
  const int64_t local = logits.size(1), valid = std::max<int64_t>(0, vocab - vocab_start);
  if (valid >= local) return logits;
  const torch::Tensor pad = torch::arange(local, logits.options().dtype(torch::kInt64)).ge(valid);
  return logits.masked_fill(pad.unsqueeze(0), -std::numeric_limits<float>::infinity());
}

}  // namespace

int64_t vocab_per_rank(int64_t vocab, int tp) { return padded_vocab_size(vocab, tp) / tp; }

torch::Tensor shard_of(const torch::Tensor& full, const ShardSpec& spec, const TensorParallel& tp) {
  if (!spec.sharded() || !tp.active()) return full;
  torch::Tensor t = full;
  const int64_t rows = full.size(spec.dim);
  if (spec.padded > rows) {
    std::vector<int64_t> pad_shape = full.sizes().vec();
    pad_shape[spec.dim] = spec.padded - rows;
    t = torch::cat({full, torch::zeros(pad_shape, full.options())}, spec.dim);
  }
  const int64_t n = t.size(spec.dim);
  OMNIBAL_CHECK(n % (int64_t{spec.groups} * tp.size) == 0, "tensor parallel: dimension ", spec.dim,
                " of size ", n, " does not split into ", spec.groups, " x parallel.tp = ", tp.size,
                " parts");
  const int64_t chunk = n / spec.groups, part = chunk / tp.size;
  std::vector<torch::Tensor> parts;
  for (int g = 0; g < spec.groups; ++g)
    parts.push_back(t.narrow(spec.dim, g * chunk + tp.rank * part, part));
  return torch::cat(parts, spec.dim).contiguous();
}

torch::Tensor gather_full(const torch::Tensor& local, const ShardSpec& spec,
                          const TensorParallel& tp) {
  if (!spec.sharded() || !tp.active()) return local;
  OMNIBAL_CHECK(tp.group, "tensor parallel: gather_full needs a TP group");
  // Each rank's shard with `dim` moved to the front, flattened: rank blocks of [part * rest].
  const torch::Tensor front = local.movedim(spec.dim, 0).contiguous();
  const torch::Tensor all = tp.group->all_gather(front.reshape({-1}));
  std::vector<int64_t> shape = front.sizes().vec();
  const int64_t part_rows = shape[0];
  shape.insert(shape.begin(), tp.size);
  const torch::Tensor ranks = all.view(shape);  // [tp, groups * part, rest...]
  const int64_t part = part_rows / spec.groups;
  std::vector<torch::Tensor> rows;
  for (int g = 0; g < spec.groups; ++g)
    for (int r = 0; r < tp.size; ++r) rows.push_back(ranks[r].narrow(0, g * part, part));
  return torch::cat(rows, 0).narrow(0, 0, spec.rows).movedim(0, spec.dim).contiguous();
}

torch::Tensor copy_to_tp(const torch::Tensor& x, const TensorParallel& tp) {
  if (!tp.active()) return x;
  return CopyToTp::apply(x, tp.group);
}

torch::Tensor reduce_from_tp(const torch::Tensor& x, const TensorParallel& tp) {
  if (!tp.active()) return x;
  return ReduceFromTp::apply(x, tp.group);
}

torch::Tensor sum_over_tp(const torch::Tensor& x, const TensorParallel& tp) {
  if (!tp.active()) return x;
  return SumOverTp::apply(x, tp.group);
}

torch::Tensor row_parallel_linear(const torch::Tensor& x, const torch::Tensor& weight,
                                  const torch::Tensor& bias, const TensorParallel& tp) {
  if (!tp.active()) return linear_layer(x, weight, bias);
  const torch::Tensor y = reduce_from_tp(linear_layer(x, weight), tp);
  return bias.defined() ? y + bias : y;
}

torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits,
                                           const torch::Tensor& targets, int64_t vocab_start,
                                           int64_t vocab, const TensorParallel& tp) {
  OMNIBAL_CHECK(logits.dim() == 2 && targets.dim() == 1 && logits.size(0) == targets.size(0),
                "vocab_parallel_cross_entropy: expected logits [K, V/tp] and targets [K], got ",
                logits.sizes(), " and ", targets.sizes());
  if (logits.size(0) == 0) return torch::zeros({0}, logits.options()) + logits.sum(1);
  return VocabParallelCe::apply(mask_padding(logits, vocab_start, vocab), targets, vocab_start,
                                tp.group);
}

torch::Tensor vocab_parallel_argmax(const torch::Tensor& logits, int64_t vocab_start, int64_t vocab,
                                    const TensorParallel& tp) {
  torch::NoGradGuard no_grad;
  if (logits.size(0) == 0) return torch::zeros({0}, logits.options().dtype(torch::kInt64));
  const torch::Tensor masked = mask_padding(logits.to(torch::kFloat32), vocab_start, vocab);
  const torch::Tensor index = masked.argmax(1);  // the first maximum
  const torch::Tensor value = masked.gather(1, index.unsqueeze(1)).squeeze(1);
  if (!tp.active()) return index;
  const torch::Tensor best = all_reduced(value, tp.group, Op::kMax);
  // The lowest global id among the ranks holding the maximum.
  const torch::Tensor candidate =
      torch::where(value.eq(best), index + vocab_start,
                   torch::full_like(index, std::numeric_limits<int64_t>::max()));
  return all_reduced(candidate, tp.group, Op::kMin);
}

}  // namespace omnibal::models
