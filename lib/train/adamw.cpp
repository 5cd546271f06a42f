#include "train/adamw.h"

#include <cmath>

namespace omnibal::train {

void adamw_update(torch::Tensor p, const torch::Tensor& g, torch::Tensor m, torch::Tensor v,
                  double lr, int64_t step, bool decay, const AdamWOptions& o) {
  torch::NoGradGuard no_grad;
  const double c1 = 1.0 - std::pow(o.beta1, static_cast<double>(step));
  const double c2 = 1.0 - std::pow(o.beta2, static_cast<double>(step));
  if (decay && o.weight_decay > 0) p.mul_(1.0 - lr * o.weight_decay);
  m.mul_(o.beta1).add_(g, 1.0 - o.beta1);
  v.mul_(o.beta2).addcmul_(g, g, 1.0 - o.beta2);
  const torch::Tensor denom = (v / c2).sqrt_().add_(o.eps);
  p.addcdiv_(m, denom, -lr / c1);
}

}  // namespace omnibal::train
