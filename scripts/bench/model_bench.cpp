// Forward + backward throughput of a VLM preset on the CPU or one CUDA device, against a plain
// LibTorch matmul.
//
// After --warmup untimed steps, for each of --reps interleaved repetitions: one forward+backward
// of a realistic pack (several samples, most LLM tokens from images), then a block of matmuls of
// the LLM's MLP shape. Prints median and min-max of tokens/s, achieved model GFLOP/s, matmul
// GFLOP/s and their ratio, a line "TIMING_JSON {...}" with the medians (for
// scripts/gpu/check.sh), then on the CPU a table of the top operations by self CPU time from the
// autograd profiler (one extra iteration). On CUDA (--device cuda) parameters are in the device's
// default dtype (bf16, VlmOptions), the reference matmul runs in bf16, and every timed region
// ends with a device synchronize.
//
// Model FLOPs (no recomputation) count every parameter with the tokens it actually processes:
//   6 * (vit params * ViT tokens + projector params * tiles' shuffled tokens
//        + llm block params * T + head params * label tokens)
//   + attention: 12 * N^2 * d per ViT layer and tile (bidirectional),
//                6 * L (L + 1) * d per LLM layer and sample (causal, per sample, not per pack).
// Embedding lookups count 0. Usage: omnibal_model_bench --preset base-100m --threads 2 --reps 5
//   [--warmup 1] [--device cpu|cuda] [--dtype fp32|bf16 (default: the device's)]
//   [--samples 6 --tiles 2-6 --text 20-60]
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "core/model_preset.h"
#include "core/rng.h"
#include "models/torch_compat.h"
#include "models/vlm.h"

using namespace omnibal;
using namespace omnibal::models;

namespace {

constexpr int64_t kImgContextId = 3;

struct PackStats {
  int64_t tiles = 0, tokens = 0, image_tokens = 0, labels = 0, samples = 0;
  double flops = 0;
};

PackBatch make_bench_pack(const ModelPreset& p, int samples, int min_tiles, int max_tiles,
                          int min_text, int max_text, uint64_t seed, PackStats& st) {
  Rng rng(seed);
  std::vector<int64_t> ids, labels, pos, cu{0};
  const int64_t tpt = p.tokens_per_tile();
  for (int s = 0; s < samples; ++s) {
    const int64_t tiles = min_tiles + static_cast<int64_t>(rng.below(max_tiles - min_tiles + 1));
    const int64_t text = min_text + static_cast<int64_t>(rng.below(max_text - min_text + 1));
    const int64_t prompt = text / 2;  // prompt text before the image; the answer is labelled
    std::vector<int64_t> sample;
    for (int64_t i = 0; i < prompt; ++i)
      sample.push_back(10 + static_cast<int64_t>(rng.below(p.llm.vocab_size - 10)));
    for (int64_t i = 0; i < tiles * tpt; ++i) sample.push_back(kImgContextId);
    for (int64_t i = prompt; i < text; ++i)
      sample.push_back(10 + static_cast<int64_t>(rng.below(p.llm.vocab_size - 10)));
    for (size_t i = 0; i < sample.size(); ++i) {
      ids.push_back(sample[i]);
      labels.push_back(i >= sample.size() - static_cast<size_t>(text - prompt) ? sample[i] : -100);
      pos.push_back(static_cast<int64_t>(i));
    }
    cu.push_back(cu.back() + static_cast<int64_t>(sample.size()));
    st.tiles += tiles;
    st.image_tokens += tiles * tpt;
    st.labels += text - prompt - 1 + 1;  // every answer token is predicted by its predecessor
    const double len = static_cast<double>(sample.size());
    st.flops += 6.0 * len * (len + 1) * p.llm.width * p.llm.depth;
  }
  st.samples = samples;
  st.tokens = cu.back();
  const int64_t side = p.vit.tile_size;
  PackBatch pack;
  pack.pixel_values = torch::rand({st.tiles, 3, side, side}) * 2 - 1;
  pack.image_flags = torch::ones({st.tiles}, torch::kInt64);
  pack.input_ids = torch::tensor(ids);
  pack.labels = torch::tensor(labels);
  pack.position_ids = torch::tensor(pos);
  pack.cu_seqlens = torch::tensor(cu);
  return pack;
}

void add_parameter_flops(const ModelPreset& p, PackStats& st) {
  const auto counts = unit_parameter_counts(p);
  const auto names = unit_names(p);
  const int64_t side = p.vit.tile_size / p.vit.patch_size, n_vit = side * side + 1;
  const double vit_tokens = static_cast<double>(st.tiles * n_vit);
  for (size_t i = 0; i < names.size(); ++i) {
    const double c = static_cast<double>(counts[i]);
    if (names[i] == "vit_embed")
      st.flops +=
          6.0 * 3 * p.vit.patch_size * p.vit.patch_size * p.vit.width * st.tiles * side * side;
    else if (names[i].rfind("vit_block", 0) == 0)
      st.flops += 6.0 * c * vit_tokens + 12.0 * n_vit * n_vit * p.vit.width * st.tiles;
    else if (names[i] == "projector")
      st.flops += 6.0 * c * static_cast<double>(st.tiles * p.tokens_per_tile());
    else if (names[i].rfind("llm_block", 0) == 0)
      st.flops += 6.0 * c * static_cast<double>(st.tokens);
    else if (names[i] == "llm_head") st.flops += 6.0 * c * static_cast<double>(st.labels);
  }
}

/// Waits for queued device work, so wall-clock times cover it (a no-op on the CPU).
void sync(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index() < 0 ? -1 : device.index());
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Summary {
  double median, min, max;
};
Summary summarise(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

void print_profile(Vlm& model, const PackBatch& pack, int top) {
  namespace prof = torch::autograd::profiler;
  model->zero_grad(/*set_to_none=*/true);
  prof::enableProfilerLegacy(
      torch::profiler::impl::ProfilerConfig(torch::profiler::impl::ProfilerState::CPU));
  model->forward(pack).loss_sum.backward();
  const auto lists = prof::disableProfilerLegacy();
  std::map<std::string, std::pair<double, int64_t>> self;  // name -> (self us, calls)
  double total = 0;
  for (const auto& list : lists) {
    struct Open {
      const prof::LegacyEvent* e;
      double child_us;
    };
    std::vector<Open> stack;
    for (const auto& e : list) {
      if (e.kind() == prof::EventKind::PushRange) {
        stack.push_back({&e, 0.0});
      } else if (e.kind() == prof::EventKind::PopRange && !stack.empty()) {
        const Open open = stack.back();
        stack.pop_back();
        const double inclusive = open.e->cpuElapsedUs(e);
        auto& slot = self[open.e->name()];
        slot.first += inclusive - open.child_us;
        slot.second += 1;
        if (!stack.empty()) stack.back().child_us += inclusive;
        else total += inclusive;
      }
    }
  }
  std::vector<std::pair<std::string, std::pair<double, int64_t>>> rows(self.begin(), self.end());
  std::sort(rows.begin(), rows.end(),
            [](auto& a, auto& b) { return a.second.first > b.second.first; });
  std::printf(
      "\n| op (self CPU time, one fwd+bwd under the profiler) | ms | %% | calls "
      "|\n|---|---:|---:|---:|\n");
  for (int i = 0; i < top && i < static_cast<int>(rows.size()); ++i)
    std::printf("| %s | %.1f | %.1f | %lld |\n", rows[i].first.c_str(), rows[i].second.first / 1e3,
                100.0 * rows[i].second.first / total,
                static_cast<long long>(rows[i].second.second));
}

/// The command line (defaults: base-100m on 2 CPU threads, 5 reps after 1 warm-up step, packs of
/// 6 samples of 2-6 tiles and 20-60 text tokens).
struct BenchOptions {
  std::string preset = "base-100m";
  std::string device = "cpu";
  std::string dtype;  // "": the device's default (compat::default_dtype)
  int threads = 2, reps = 5, warmup = 1, samples = 6, min_tiles = 2, max_tiles = 6, min_text = 20,
      max_text = 60;
};

/// Reads `--key value` pairs into `o`; 0, or 2 after printing an unknown option.
int parse_options(int argc, char** argv, BenchOptions& o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const char* v = argv[i + 1];
    if (key == "--preset") o.preset = v;
    else if (key == "--threads") o.threads = std::stoi(v);
    else if (key == "--reps") o.reps = std::stoi(v);
    else if (key == "--warmup") o.warmup = std::stoi(v);
    else if (key == "--device") o.device = v;
    else if (key == "--dtype") o.dtype = v;
    else if (key == "--samples") o.samples = std::stoi(v);
    else if (key == "--tiles") {
      std::sscanf(v, "%d-%d", &o.min_tiles, &o.max_tiles);
    } else if (key == "--text") {
      std::sscanf(v, "%d-%d", &o.min_text, &o.max_text);
    } else {
      std::fprintf(stderr, "unknown option %s\n", key.c_str());
      return 2;
    }
  }
  return 0;
}

/// Checks --device and --dtype: 0, 2 (a bad value) or 3 (cuda asked, none present), printed.
int check_device(const BenchOptions& o) {
  if (o.device != "cpu" && o.device != "cuda") {
    std::fprintf(stderr, "--device must be cpu or cuda, got '%s'\n", o.device.c_str());
    return 2;
  }
  if (o.device == "cuda" && !torch::cuda::is_available()) {
    std::fprintf(stderr, "--device cuda: no CUDA device (LibTorch %s)\n", compat::torch_version());
    return 3;
  }
  if (!o.dtype.empty() && o.dtype != "fp32" && o.dtype != "bf16") {
    std::fprintf(stderr, "--dtype must be fp32 or bf16, got '%s'\n", o.dtype.c_str());
    return 2;
  }
  return 0;
}

/// The reference matmul: the LLM MLP's up-projection [tokens x width] x [width x mlp_dim].
struct Matmul {
  torch::Tensor a, b;
  double flops = 0;  ///< per matmul
  int iters = 1;     ///< per timed block: about 1/4 of a model step's FLOPs, at least 3
};

Matmul make_matmul(const ModelPreset& preset, const PackStats& st, torch::TensorOptions options) {
  Matmul mm;
  const int64_t m = st.tokens, k = preset.llm.width, n = preset.llm.mlp_dim;
  mm.a = torch::randn({m, k}, options);
  mm.b = torch::randn({k, n}, options);
  mm.flops = 2.0 * m * k * n;
  for (int i = 0; i < 3; ++i) torch::matmul(mm.a, mm.b);  // warm the kernels
  mm.iters = std::max(3, static_cast<int>(st.flops / mm.flops / 4));
  return mm;
}

/// Per repetition: seconds of one fwd+bwd of `pack` and matmul GFLOP/s, interleaved.
struct Timings {
  std::vector<double> step_s, mm_gflops;
};

Timings time_steps(Vlm& model, const PackBatch& pack, const Matmul& mm, const BenchOptions& o,
                   const torch::Device& device) {
  for (int w = 0; w < o.warmup; ++w) {
    model->zero_grad(true);
    model->forward(pack).loss_sum.backward();
  }
  sync(device);
  Timings t;
  for (int r = 0; r < o.reps; ++r) {
    model->zero_grad(/*set_to_none=*/true);  // one micro-batch: gradients are assigned, not added
    sync(device);
    auto t0 = std::chrono::steady_clock::now();
    model->forward(pack).loss_sum.backward();
    sync(device);
    t.step_s.push_back(seconds_since(t0));
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < mm.iters; ++i) torch::matmul(mm.a, mm.b);
    sync(device);
    t.mm_gflops.push_back(mm.flops * mm.iters / seconds_since(t0) / 1e9);
  }
  return t;
}

/// The header lines, the median / min / max table and the TIMING_JSON line.
void print_results(const BenchOptions& o, int64_t params, const torch::Device& device,
                   torch::Dtype dtype, const PackStats& st, const Matmul& mm, const Timings& t) {
  std::vector<double> tok_s, gflops, ratio;
  for (int r = 0; r < o.reps; ++r) {
    tok_s.push_back(st.tokens / t.step_s[r]);
    gflops.push_back(st.flops / t.step_s[r] / 1e9);
    ratio.push_back(gflops.back() / t.mm_gflops[r]);
  }
  const auto ts = summarise(t.step_s), tk = summarise(tok_s), gf = summarise(gflops),
             mg = summarise(t.mm_gflops), ra = summarise(ratio);
  const long long m = mm.a.size(0), k = mm.a.size(1), n = mm.b.size(1);
  std::printf(
      "preset %s: %.1fM parameters, LibTorch %s, %s %s, %d threads, %d reps after %d warm-up\n",
      o.preset.c_str(), params / 1e6, compat::torch_version(), device.str().c_str(),
      c10::toString(dtype), o.threads, o.reps, o.warmup);
  std::printf(
      "pack: %lld samples, %lld tiles, %lld LLM tokens (%lld from images, %.0f%%), %lld labels, "
      "%.1f GFLOP per fwd+bwd\n",
      static_cast<long long>(st.samples), static_cast<long long>(st.tiles),
      static_cast<long long>(st.tokens), static_cast<long long>(st.image_tokens),
      100.0 * st.image_tokens / st.tokens, static_cast<long long>(st.labels), st.flops / 1e9);
  std::printf("\n| metric | median | min | max |\n|---|---:|---:|---:|\n");
  std::printf("| fwd+bwd s | %.3f | %.3f | %.3f |\n", ts.median, ts.min, ts.max);
  std::printf("| LLM tokens/s | %.0f | %.0f | %.0f |\n", tk.median, tk.min, tk.max);
  std::printf("| model GFLOP/s | %.1f | %.1f | %.1f |\n", gf.median, gf.min, gf.max);
  std::printf("| matmul GFLOP/s [%lldx%lld]x[%lldx%lld] | %.1f | %.1f | %.1f |\n", m, k, k, n,
              mg.median, mg.min, mg.max);
  std::printf("| ratio model / matmul | %.3f | %.3f | %.3f |\n", ra.median, ra.min, ra.max);
  std::printf(
      "TIMING_JSON {\"preset\": \"%s\", \"device\": \"%s\", \"dtype\": \"%s\", "
      "\"reps\": %d, \"warmup\": %d, \"tokens\": %lld, \"tiles\": %lld, "
      "\"model_flops\": %.6g, \"step_s_median\": %.6g, \"step_s_min\": %.6g, "
      "\"step_s_max\": %.6g, \"model_tflops\": %.6g, \"matmul_tflops\": %.6g}\n",
      o.preset.c_str(), device.str().c_str(), c10::toString(dtype), o.reps, o.warmup,
      static_cast<long long>(st.tokens), static_cast<long long>(st.tiles), st.flops, ts.median,
      ts.min, ts.max, st.flops / ts.median / 1e12, mg.median / 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  BenchOptions o;
  if (const int rc = parse_options(argc, argv, o)) return rc;
  if (const int rc = check_device(o)) return rc;
  const torch::Device device =
      o.device == "cuda" ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  torch::set_num_threads(o.threads);
  torch::manual_seed(0);
  const torch::Dtype dtype = o.dtype.empty()     ? compat::default_dtype(device)
                             : o.dtype == "bf16" ? torch::kBFloat16
                                                 : torch::kFloat32;
  const ModelPreset preset = load_model_preset(o.preset);
  Vlm model(preset, VlmOptions{}
                        .with_img_context_id(kImgContextId)
                        .with_seed(1)
                        .with_device(device)
                        .with_dtype(dtype));
  int64_t params = 0;
  for (const auto& p : model->parameters()) params += p.numel();
  PackStats st;
  const PackBatch pack =
      make_bench_pack(preset, o.samples, o.min_tiles, o.max_tiles, o.min_text, o.max_text, 7, st);
  add_parameter_flops(preset, st);
  const Matmul mm = make_matmul(preset, st, torch::TensorOptions().device(device).dtype(dtype));
  const Timings t = time_steps(model, pack, mm, o, device);
  print_results(o, params, device, dtype, st, mm, t);
  if (device.is_cpu()) print_profile(model, pack, 15);
  return 0;
}
