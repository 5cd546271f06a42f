#include "train/adamw.h"

#include <cmath>

#include "core/error.h"

namespace omnibal::train {

AdamW::AdamW(std::vector<std::pair<std::string, torch::Tensor>> params, AdamWOptions options)
    : options_(options) {
  for (auto& [name, p] : params) {
    if (!p.requires_grad()) continue;
    params_.emplace_back(name, p);
    exp_avg_.push_back(torch::zeros_like(p));
    exp_avg_sq_.push_back(torch::zeros_like(p));
  }
}

void AdamW::step(double lr) {
  torch::NoGradGuard no_grad;
  ++steps_;
  const double b1 = options_.beta1, b2 = options_.beta2;
  const double c1 = 1.0 - std::pow(b1, static_cast<double>(steps_));
  const double c2 = 1.0 - std::pow(b2, static_cast<double>(steps_));
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor p = params_[i].second;
    const torch::Tensor g = p.grad();
    if (!g.defined()) continue;
    if (p.dim() >= 2 && options_.weight_decay > 0) p.mul_(1.0 - lr * options_.weight_decay);
    exp_avg_[i].mul_(b1).add_(g, 1.0 - b1);
    exp_avg_sq_[i].mul_(b2).addcmul_(g, g, 1.0 - b2);
    const torch::Tensor denom = (exp_avg_sq_[i] / c2).sqrt_().add_(options_.eps);
    p.addcdiv_(exp_avg_[i], denom, -lr / c1);
  }
}

void AdamW::zero_grad() {
  for (auto& [name, p] : params_)
    if (p.grad().defined()) p.mutable_grad().zero_();
}

std::vector<std::string> AdamW::state_names() const {
  std::vector<std::string> names;
  for (const auto& [name, p] : params_) {
    names.push_back(name + "#exp_avg");
    names.push_back(name + "#exp_avg_sq");
  }
  return names;
}

std::map<std::string, torch::Tensor> AdamW::state_tensors() const {
  std::map<std::string, torch::Tensor> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    out[params_[i].first + "#exp_avg"] = exp_avg_[i];
    out[params_[i].first + "#exp_avg_sq"] = exp_avg_sq_[i];
  }
  return out;
}

void AdamW::load_state_tensors(const std::map<std::string, torch::Tensor>& state) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    for (auto* slot : {&exp_avg_[i], &exp_avg_sq_[i]}) {
      const std::string name =
          params_[i].first + (slot == &exp_avg_[i] ? "#exp_avg" : "#exp_avg_sq");
      auto it = state.find(name);
      OMNIBAL_CHECK(it != state.end(), "AdamW: checkpoint has no optimizer state '", name, "'");
      OMNIBAL_CHECK(it->second.sizes() == slot->sizes(), "AdamW: '", name, "' has shape ",
                    it->second.sizes(), " in the checkpoint, expected ", slot->sizes());
      slot->copy_(it->second);
    }
  }
}

}  // namespace omnibal::train
