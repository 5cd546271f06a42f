// Where bf16 loses precision: the tiny VLM (or any preset) in fp32 and in bf16 on real packs of
// the demo set, unit by unit (docs/results.md#bf16-at-the-demo-learning-rate).
//
// 1. --pretrain N: N fp32 training steps first (AdamW with the config's lr schedule, weight decay
//    and clipping; packs of --samples samples spread over the whole set, --micro packs a step),
//    so that the comparison is made at a trained state as well as at initialisation.
// 2. Compare: the fp32 model ("ref"), the same model with every weight rounded to bf16 ("wround",
//    still computed in fp32: what weight rounding alone costs) and a bf16 model holding those
//    rounded weights ("bf16": weight and compute rounding) run forward + backward on --packs
//    packs (gradients summed over them in fp32, as the trainer's main gradient). Per unit: the
//    relative L2 error of its output and of its parameters' gradients (all of the unit's
//    parameters together, and the worst one), against ref; "bf16 vs wround" isolates compute.
// 3. --train N: N steps from the same initial weights for each of --runs (fp32; bf16: bf16
//    model, fp32 master weights and moments, gradients folded into fp32 after each pack, the
//    trainer's scheme; fp32-init-rounded; fp32-wround, see train_run()), each loss curve
//    appended to --curves, then every curve of that file against its fp32 one: the mean
//    relative loss gap over the last half of the steps and over the last 5.
// Usage (scripts/bench/precision_diag.sh): omnibal_precision_diag --config configs/demo.yaml
//        [--set key=value ...] [--pretrain 60] [--packs 4] [--train 100 --runs fp32,bf16]
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/model_preset.h"
#include "data/conversation_dataset.h"
#include "data/pack_builder.h"
#include "data/sample_processor.h"
#include "data/tokenizer.h"
#include "models/vlm.h"

using namespace omnibal;
using namespace omnibal::models;

namespace {

struct Args {
  std::string config = "configs/demo.yaml";
  std::vector<std::string> sets;
  int pretrain = 0, packs = 4, train = 0, samples = 8, micro = 4, threads = 1;
  std::string runs = "fp32,bf16", curves = "precision_curves.txt";
};

/// `count` packs of `samples` samples each, drawn over the whole dataset in a fixed order
/// (sample k of the sequence is id k * 7919 mod size: every dataset's kinds of sample mix).
std::vector<PackBatch> build_packs(const Config& cfg, const ModelPreset& preset,
                                   const data::Tokenizer& tok, int samples, int count) {
  const auto ds = data::ConversationDataset::load(cfg.data.meta, cfg.data.on_bad_sample);
  const data::SampleProcessor proc(tok, data::sample_options(cfg.data, preset));
  const data::PackBuilder builder(ds, proc, cfg.data.on_bad_sample);
  std::vector<PackBatch> packs;
  for (int p = 0; p < count; ++p) {
    std::vector<int64_t> ids;
    for (int s = 0; s < samples; ++s) ids.push_back((int64_t{p} * samples + s) * 7919 % ds.size());
    packs.push_back(builder.build(ids, data::PackParts::all()));
  }
  return packs;
}

using Params = std::map<std::string, torch::Tensor>;

Params snapshot(const Vlm& m) {
  Params out;
  for (const auto& kv : m->named_parameters())
    out[kv.key()] = kv.value().detach().to(torch::kFloat32).clone();
  return out;
}

void assign(Vlm& m, const Params& values, bool round_bf16) {
  torch::NoGradGuard no_grad;
  for (auto& kv : m->named_parameters()) {
    torch::Tensor v = values.at(kv.key());
    if (round_bf16) v = v.to(torch::kBFloat16);
    kv.value().copy_(v);
  }
}

double rel(const torch::Tensor& a, const torch::Tensor& ref) {
  const double d = (a.to(torch::kFloat64) - ref.to(torch::kFloat64)).norm().item<double>();
  const double n = ref.to(torch::kFloat64).norm().item<double>();
  return n > 0 ? d / n : d;
}

/// One variant's outputs per unit (summed over nothing: the first pack's), gradients summed in
/// fp32 over the packs, and the loss (sum of loss sums / labels).
struct Run {
  std::vector<torch::Tensor> outputs;  // per unit, first pack; the head's: the fp32 logits
  Params grads;
  double loss = 0;
};

Run run_variant(Vlm& m, const std::vector<PackBatch>& packs, int64_t labels) {
  Run r;
  const auto dtype = m->parameters().front().scalar_type();
  for (size_t p = 0; p < packs.size(); ++p) {
    UnitState s = UnitState::from_pack(packs[p], torch::kCPU, dtype);
    for (int64_t u = 0; u < m->num_units(); ++u) {
      s = m->forward(s, u, u + 1);
      if (p == 0)
        r.outputs.push_back(
            (s.hidden.defined() ? s.hidden : s.logits).detach().to(torch::kFloat32));
    }
    r.loss += s.loss_sum.item<double>() / labels;
    (s.loss_sum / static_cast<double>(labels)).backward();
    for (auto& kv : m->named_parameters()) {
      torch::Tensor& acc = r.grads[kv.key()];
      const torch::Tensor g = kv.value().grad().to(torch::kFloat32);
      acc = acc.defined() ? acc + g : g.clone();
      kv.value().mutable_grad() = torch::Tensor();
    }
  }
  return r;
}

std::string unit_of(const std::string& param) { return param.substr(0, param.find('.')); }

/// Relative error of a unit's gradients (all its parameters together) and its worst parameter.
void unit_grad_error(const Params& a, const Params& ref, const std::string& unit, double& all,
                     double& worst, std::string& worst_name) {
  double d2 = 0, n2 = 0;
  worst = 0;
  for (const auto& [name, g] : ref) {
    if (unit_of(name) != unit) continue;
    const torch::Tensor diff = (a.at(name).to(torch::kFloat64) - g.to(torch::kFloat64));
    d2 += diff.pow(2).sum().item<double>();
    n2 += g.to(torch::kFloat64).pow(2).sum().item<double>();
    const double e = rel(a.at(name), g);
    if (e > worst) worst = e, worst_name = name.substr(unit.size() + 1);
  }
  all = n2 > 0 ? std::sqrt(d2 / n2) : 0;
}

void compare(const ModelPreset& preset, const VlmOptions& opt, const Params& weights,
             const std::vector<PackBatch>& packs, int64_t labels) {
  Vlm ref(preset, VlmOptions(opt).with_dtype(torch::kFloat32));
  Vlm b16(preset, VlmOptions(opt).with_dtype(torch::kBFloat16));
  assign(ref, weights, false);
  const Run r = run_variant(ref, packs, labels);
  assign(ref, weights, true);
  const Run w = run_variant(ref, packs, labels);
  assign(b16, weights, true);
  const Run b = run_variant(b16, packs, labels);
  std::printf("%-13s %11s %11s %11s | %11s %11s %11s  %s\n", "unit", "out wround", "out bf16",
              "bf16/wrnd", "grad wround", "grad bf16", "bf16/wrnd", "worst bf16 gradient");
  const auto names = unit_names(preset);
  for (size_t u = 0; u < names.size(); ++u) {
    double gw, gb, gbw, worst_w, worst_b, worst_bw;
    std::string nw, nb, nbw;
    unit_grad_error(w.grads, r.grads, names[u], gw, worst_w, nw);
    unit_grad_error(b.grads, r.grads, names[u], gb, worst_b, nb);
    unit_grad_error(b.grads, w.grads, names[u], gbw, worst_bw, nbw);
    std::printf("%-13s %11.2e %11.2e %11.2e | %11.2e %11.2e %11.2e  %s %.2e\n", names[u].c_str(),
                rel(w.outputs[u], r.outputs[u]), rel(b.outputs[u], r.outputs[u]),
                rel(b.outputs[u], w.outputs[u]), gw, gb, gbw, nb.c_str(), worst_b);
  }
  std::printf("loss: fp32 %.6f, wround %.6f (%+.3f %%), bf16 %.6f (%+.3f %%)\n", r.loss, w.loss,
              100 * (w.loss / r.loss - 1), b.loss, 100 * (b.loss / r.loss - 1));
  std::printf("per-parameter gradient errors of bf16 vs fp32 over 1e-2:");
  for (const auto& [name, g] : r.grads)
    if (rel(b.grads.at(name), g) > 1e-2)
      std::printf(" %s %.2e", name.c_str(), rel(b.grads.at(name), g));
  std::printf("\n");
}

/// lr of step `step` (0-based): lib/train/lr_schedule.cpp's warmup + cosine.
double lr_at(const TrainConfig& t, int64_t step, int64_t steps) {
  if (step < t.warmup_steps) return t.lr * static_cast<double>(step + 1) / t.warmup_steps;
  const double span = std::max<int64_t>(1, steps - t.warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - t.warmup_steps) / span);
  const double floor = t.lr * t.min_lr_ratio;
  return floor + (t.lr - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

/// AdamW (lib/train/adamw.h) on fp32 master weights; returns the per-step losses. The model's
/// parameters (fp32 or bf16) get the master weights after every step.
std::vector<double> train(Vlm& m, Params& master, const TrainConfig& t,
                          const std::vector<PackBatch>& packs, int steps, int micro,
                          bool round_weights = false) {
  Params m1, m2;
  for (const auto& [n, p] : master) m1[n] = torch::zeros_like(p), m2[n] = torch::zeros_like(p);
  std::vector<double> losses;
  const double b1 = 0.9, b2 = 0.95, eps = 1e-8;
  for (int step = 0; step < steps; ++step) {
    std::vector<PackBatch> mb;
    int64_t labels = 0;
    for (int k = 0; k < micro; ++k) {
      mb.push_back(packs[(static_cast<size_t>(step) * micro + k) % packs.size()]);
      labels += mb.back().labels.slice(0, 1).ne(-100).sum().item<int64_t>();
    }
    const Run r = run_variant(m, mb, labels);  // (keeps the first pack's unit outputs too)
    losses.push_back(r.loss);
    double sq = 0;
    for (const auto& [n, g] : r.grads) sq += g.to(torch::kFloat64).pow(2).sum().item<double>();
    const double coef = std::min(1.0, t.grad_clip / (std::sqrt(sq) + 1e-6));
    const double lr = lr_at(t, step, steps);
    torch::NoGradGuard no_grad;
    for (auto& [n, p] : master) {
      const torch::Tensor g = r.grads.at(n) * coef;
      if (p.dim() >= 2) p.mul_(1 - lr * t.weight_decay);
      m1[n].mul_(b1).add_(g, 1 - b1);
      m2[n].mul_(b2).addcmul_(g, g, 1 - b2);
      const double c1 = 1 - std::pow(b1, step + 1), c2 = 1 - std::pow(b2, step + 1);
      p.addcdiv_(m1[n], (m2[n] / c2).sqrt_().add_(eps), -lr / c1);
    }
    assign(m, master, round_weights);
  }
  return losses;
}

/// One training run of `kind` from `init`: "fp32"; "bf16" (bf16 model, fp32 master weights);
/// "fp32-init-rounded" (fp32, the initial weights rounded to bf16 once: a perturbation of the
/// size of bf16's rounding, to measure how far two fp32 trajectories drift apart);
/// "fp32-wround" (fp32 compute on weights rounded to bf16 before every step, fp32 master).
std::vector<double> train_run(const std::string& kind, const ModelPreset& preset,
                              const VlmOptions& opt, const Params& init, const TrainConfig& t,
                              const std::vector<PackBatch>& packs, const Args& a) {
  const bool b16 = kind == "bf16";
  Vlm m(preset, VlmOptions(opt).with_dtype(b16 ? torch::kBFloat16 : torch::kFloat32));
  Params master;
  for (const auto& [n, p] : init)
    master[n] =
        kind == "fp32-init-rounded" ? p.to(torch::kBFloat16).to(torch::kFloat32) : p.clone();
  assign(m, master, false);
  return train(m, master, t, packs, a.train, a.micro, kind == "fp32-wround");
}

/// Runs --runs, appends each curve to --curves ("label loss0 loss1 ..."; the label carries
/// OMNIBAL_BF16_EXP when set), then prints every curve of the file against its "fp32" curve:
/// the mean relative gap over the last half of the steps, over the last 5, and how many steps
/// of the last half are above fp32.
void train_compare(const ModelPreset& preset, const VlmOptions& opt, const Params& init,
                   const TrainConfig& t, const std::vector<PackBatch>& packs, const Args& a) {
  const char* exp = std::getenv("OMNIBAL_BF16_EXP");
  std::stringstream kinds(a.runs);
  for (std::string kind; std::getline(kinds, kind, ',');) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto losses = train_run(kind, preset, opt, init, t, packs, a);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s: %d steps in %.1f s\n", kind.c_str(), a.train, s);
    std::ofstream out(a.curves, std::ios::app);
    out << kind << (exp && *exp && kind == "bf16" ? std::string("+") + exp : std::string());
    for (double l : losses) out << " " << l;
    out << "\n";
  }
  std::map<std::string, std::vector<double>> curves;
  std::vector<std::string> order;
  std::ifstream in(a.curves);
  for (std::string line; std::getline(in, line);) {
    std::stringstream ls(line);
    std::string label;
    ls >> label;
    if (!curves.count(label)) order.push_back(label);
    curves[label].clear();
    for (double v; ls >> v;) curves[label].push_back(v);
  }
  if (!curves.count("fp32")) return;
  const auto& ref = curves.at("fp32");
  const int n = static_cast<int>(ref.size()), half = n / 2;
  std::printf("%-28s %14s %12s %10s %10s\n", "run", "gap last half", "gap last 5", "above",
              "last loss");
  for (const auto& label : order) {
    const auto& c = curves.at(label);
    if (static_cast<int>(c.size()) != n) continue;
    double gap = 0, tail5 = 0;
    int above = 0;
    for (int i = n - half; i < n; ++i) {
      const double g = c[i] / ref[i] - 1;
      gap += g / half;
      above += g > 0;
      if (i >= n - 5) tail5 += g / 5;
    }
    std::printf("%-28s %+13.3f%% %+11.3f%% %7d/%d %10.5f\n", label.c_str(), 100 * gap, 100 * tail5,
                above, half, c.back());
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"bf16 vs fp32 per pipeline unit on demo packs"};
  app.add_option("--config", a.config);
  app.add_option("--set", a.sets);
  app.add_option("--pretrain", a.pretrain, "fp32 steps before the comparison");
  app.add_option("--packs", a.packs, "packs of the comparison");
  app.add_option("--train", a.train, "steps of the fp32 vs bf16 training comparison (0: none)");
  app.add_option("--runs", a.runs, "training runs: fp32,bf16,fp32-init-rounded,fp32-wround");
  app.add_option("--curves", a.curves, "file the training runs' loss curves are appended to");
  app.add_option("--samples", a.samples, "samples per pack");
  app.add_option("--micro", a.micro, "packs per training step");
  app.add_option("--threads", a.threads);
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  torch::set_num_threads(a.threads);
  const Config cfg = load_config(a.config, a.sets);
  const ModelPreset preset = load_model_preset(cfg.model.preset);
  const data::Tokenizer tok(cfg.data.tokenizer);
  const int steps = std::max(a.pretrain, a.train);
  const auto packs = build_packs(cfg, preset, tok, a.samples, std::max(a.packs, steps * a.micro));
  VlmOptions opt =
      VlmOptions{}.with_img_context_id(tok.special().img_context).with_seed(cfg.train.seed);
  Vlm init(preset, VlmOptions(opt).with_dtype(torch::kFloat32));
  const Params init_weights = snapshot(init);
  const std::vector<PackBatch> cmp(packs.begin(), packs.begin() + a.packs);
  int64_t labels = 0;
  for (const auto& p : cmp) labels += p.labels.slice(0, 1).ne(-100).sum().item<int64_t>();
  std::printf("%s, %d packs of %d samples (%lld labels); lr %g\n", preset.name.c_str(), a.packs,
              a.samples, static_cast<long long>(labels), cfg.train.lr);
  if (a.packs > 0) {
    std::printf("== at initialisation\n");
    compare(preset, opt, init_weights, cmp, labels);
  }
  if (a.pretrain > 0 && a.packs > 0) {
    Params master = init_weights;
    for (auto& [n, p] : master) p = p.clone();
    Vlm m(preset, VlmOptions(opt).with_dtype(torch::kFloat32));
    assign(m, master, false);
    const auto losses = train(m, master, cfg.train, packs, a.pretrain, a.micro);
    std::printf("== after %d fp32 steps (loss %.4f -> %.4f)\n", a.pretrain, losses.front(),
                losses.back());
    compare(preset, opt, master, cmp, labels);
  }
  if (a.train > 0) train_compare(preset, opt, init_weights, cfg.train, packs, a);
  return 0;
}
