#include "partition/partition_search.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.h"
#include "partition/unit_cost_table.h"
#include "schedule/pipeline_timeline.h"
#include "schedule/schedules.h"
#include "schedule/zb_v_schedule.h"

namespace omnibal::partition {

int PartitionSearchInput::chunks() const {
  return stages * schedule::chunks_per_rank(schedule, virtual_stages);
}

namespace {

/// The anchor, each cut alone and each pair of cuts moved by offsets in [-r, r].
std::vector<std::vector<int>> single_and_pair_moves(const std::vector<int>& base, int radius) {
  std::vector<std::vector<int>> out = {base};
  const size_t k = base.size();
  for (size_t i = 0; i < k; ++i)
    for (int a = -radius; a <= radius; ++a) {
      if (a == 0) continue;
      std::vector<int> c = base;
      c[i] += a;
      out.push_back(c);
      for (size_t j = i + 1; j < k; ++j)
        for (int b = -radius; b <= radius; ++b) {
          if (b == 0) continue;
          std::vector<int> d = c;
          d[j] += b;
          out.push_back(d);
        }
    }
  return out;
}

}  // namespace

std::vector<std::vector<int>> neighbourhood_cuts(const Partition& anchor, int radius,
                                                 long max_candidates) {
  OMNIBAL_CHECK(radius >= 0, "partition search: radius must be >= 0, got ", radius);
  const std::vector<int> base = anchor.boundaries();
  const size_t k = base.size();
  double full = 1;
  for (size_t i = 0; i < k; ++i) full *= 2 * radius + 1;
  if (full > static_cast<double>(max_candidates)) return single_and_pair_moves(base, radius);
  std::vector<int> offset(k, 0);  // odometer over {0, -1, +1, -2, +2, ...} so the anchor is first
  auto delta = [](int i) { return i % 2 ? -(i + 1) / 2 : i / 2; };
  std::vector<std::vector<int>> out;
  for (;;) {
    std::vector<int> cuts(k);
    for (size_t i = 0; i < k; ++i) cuts[i] = base[i] + delta(offset[i]);
    out.push_back(cuts);
    size_t i = 0;
    while (i < k && ++offset[i] == 2 * radius + 1) offset[i++] = 0;
    if (i == k) break;
  }
  return out;
}

double pipeline_seconds(const Partition& partition, const PartitionSearchInput& input) {
  const int V = partition.stages(), m = std::max(1, input.micro_batches);
  OMNIBAL_CHECK(V == input.chunks(), "partition search: a split of ", V, " parts, expected ",
                input.chunks(), " chunks (", input.stages, " ranks x ",
                input.chunks() / input.stages, " under ", choice_name(input.schedule), ")");
  const auto& host = input.rank_micro_batch_s;
  OMNIBAL_CHECK(host.empty() || static_cast<int>(host.size()) == input.stages,
                "partition search: ", host.size(), " host costs per micro-batch for ", input.stages,
                " pipeline ranks");
  for (double h : host)
    OMNIBAL_CHECK(h >= 0, "partition search: negative host cost per micro-batch ", h, " s");
  const int per_rank = V / std::max(1, input.stages);
  auto costs = schedule::PipelineStepCosts::zeros(V, m);
  const schedule::ChunkLayout layout = schedule::chunk_layout(input.schedule);
  costs.layout = layout;
  const bool split = !input.unit_forward_s.empty();
  const bool zb = schedule::splits_backward(input.schedule);
  for (int k = 0; k < V; ++k) {
    double f = 0, total = 0, w = 0;
    for (int u = partition.begin(k); u < partition.end(k); ++u) {
      total += input.unit_seconds[u];
      const double fu = split ? input.unit_forward_s[u] : input.unit_seconds[u] / 3;
      f += fu;
      w += input.unit_weight_s.empty() ? kWeightShareEstimate * (input.unit_seconds[u] - fu)
                                       : input.unit_weight_s[u];
    }
    // A host cost of the micro-batch on its rank, shared by the rank's chunks.
    const double h =
        host.empty() ? 0.0 : host[schedule::stage_of_virtual(k, input.stages, layout)] / per_rank;
    const double out = input.output_bytes[partition.end(k) - 1] / input.link_bandwidth;
    const double in = k > 0 ? input.output_bytes[partition.begin(k) - 1] / input.link_bandwidth : 0;
    for (int i = 0; i < m; ++i) {
      costs.forward_s[k][i] = f + h;
      costs.backward_s[k][i] = total - f;
      costs.backward_weight_s[k][i] = zb ? w : 0.0;
      costs.backward_input_s[k][i] = total - f - costs.backward_weight_s[k][i];
      costs.send_activation_s[k][i] = out;
      costs.send_grad_s[k][i] = in;
    }
  }
  double end = 0;
  // ZB-V places its W's by these costs (zb_v_schedule.h); the others' lists are fixed.
  const auto lists =
      input.schedule == PipelineSchedule::kZbV
          ? schedule::build_zb_v_schedule(input.stages, m, &costs)
          : schedule::build_schedule(input.schedule, input.stages, m,
                                     schedule::chunks_per_rank(input.schedule,
                                                               input.virtual_stages));
  for (const auto& t : schedule::run_pipeline_timeline(lists, costs))
    end = std::max(end, t.ready_for_reduce_s);
  return end;
}

ScoredPartition score_partition(const Partition& partition, const PartitionSearchInput& input) {
  ScoredPartition sp;
  sp.partition = partition;
  const auto times = stage_sums(partition, input.unit_seconds);
  double mean = 0;
  for (double t : times) mean += t / times.size();
  double var = 0;
  for (double t : times) var += (t - mean) * (t - mean) / times.size();
  sp.stage_std_s = std::sqrt(var);
  sp.max_stage_s = *std::max_element(times.begin(), times.end());
  for (int cut : partition.boundaries()) sp.comm_bytes += input.output_bytes[cut - 1];
  sp.score = sp.stage_std_s + 2 * sp.comm_bytes / input.link_bandwidth;
  sp.pipeline_s = pipeline_seconds(partition, input);
  return sp;
}

namespace {

/// Moves of the descent: one cut by +-1 or +-2 units, or every cut from k on by +-1 (shifts a
/// whole tail of the pipeline, which single moves cannot do without passing a worse split).
std::vector<std::vector<int>> descent_moves(const std::vector<int>& cuts, int n) {
  std::vector<std::vector<int>> out;
  auto valid = [n](const std::vector<int>& c) {
    for (size_t k = 0; k < c.size(); ++k)
      if (c[k] <= (k ? c[k - 1] : 0) || c[k] >= n) return false;
    return true;
  };
  for (size_t k = 0; k < cuts.size(); ++k)
    for (int d : {-2, -1, 1, 2}) {
      std::vector<int> c = cuts;
      c[k] += d;
      if (valid(c)) out.push_back(c);
      c = cuts;
      for (size_t j = k; j < cuts.size() && std::abs(d) == 1; ++j) c[j] += d;
      if (std::abs(d) == 1 && k > 0 && valid(c)) out.push_back(c);
    }
  return out;
}

}  // namespace

Partition refine_anchor(const Partition& start, const PartitionSearchInput& input) {
  Partition best = start;
  double best_s = pipeline_seconds(best, input);
  const int n = best.units();
  for (bool improved = true; improved;) {
    improved = false;
    Partition round_best = best;
    for (const auto& c : descent_moves(best.boundaries(), n)) {
      const Partition p = Partition::from_boundaries(c, n);
      const double t = pipeline_seconds(p, input);
      if (t < best_s - 1e-12 && (!input.fits || input.fits(p))) {
        best_s = t;
        round_best = p;
        improved = true;
      }
    }
    best = round_best;
  }
  return best;
}

PartitionSearchResult search_partitions(const PartitionSearchInput& input) {
  const int n = static_cast<int>(input.unit_seconds.size());
  OMNIBAL_CHECK(static_cast<int>(input.output_bytes.size()) == n,
                "partition search: ", input.output_bytes.size(), " output sizes for ", n, " units");
  OMNIBAL_CHECK(input.link_bandwidth > 0, "partition search: link bandwidth must be > 0");
  OMNIBAL_CHECK(input.top_k >= 1, "partition search: top_k must be >= 1, got ", input.top_k);
  OMNIBAL_CHECK(input.unit_forward_s.empty() || static_cast<int>(input.unit_forward_s.size()) == n,
                "partition search: ", input.unit_forward_s.size(), " forward times for ", n,
                " units");
  OMNIBAL_CHECK(input.unit_weight_s.empty() || static_cast<int>(input.unit_weight_s.size()) == n,
                "partition search: ", input.unit_weight_s.size(), " weight-gradient times for ", n,
                " units");
  const int V = input.chunks();
  OMNIBAL_CHECK(V <= n, "partition search: ", choice_name(input.schedule), " with ", input.stages,
                " pipeline ranks x ", V / input.stages, " chunks needs ", V,
                " pipeline units, the model has ", n,
                "; use fewer parallel.virtual_stages or "
                "parallel.pp");
  PartitionSearchResult r;
  r.exact_anchor = min_max_partition(input.unit_seconds, V);
  r.greedy_anchor = greedy_anchor_partition(input.unit_seconds, V);
  // Descent from the two anchors and from the uniform split; keep the fastest end point.
  r.refined_anchor = refine_anchor(r.exact_anchor, input);
  for (const Partition& start : {r.greedy_anchor, uniform_partition(n, V)}) {
    const Partition p = refine_anchor(start, input);
    if (pipeline_seconds(p, input) < pipeline_seconds(r.refined_anchor, input))
      r.refined_anchor = p;
  }
  std::set<std::vector<int>> seen;
  std::vector<ScoredPartition> fitting;
  double smallest_over = 0;
  Partition smallest_over_partition;
  for (const auto* anchor : {&r.exact_anchor, &r.greedy_anchor, &r.refined_anchor}) {
    for (const auto& cuts : neighbourhood_cuts(*anchor, input.radius)) {
      ++r.generated;
      bool valid = true;
      for (size_t i = 0; i < cuts.size(); ++i)
        valid = valid && cuts[i] > (i ? cuts[i - 1] : 0) && cuts[i] < n;
      if (!valid || !seen.insert(cuts).second) continue;
      ++r.non_empty;
      const Partition p = Partition::from_boundaries(cuts, n);
      if (input.fits && !input.fits(p)) {
        const double worst = score_partition(p, input).max_stage_s;
        if (smallest_over == 0 || worst < smallest_over) {
          smallest_over = worst;
          smallest_over_partition = p;
        }
        continue;
      }
      fitting.push_back(score_partition(p, input));
    }
  }
  r.fitting = static_cast<int>(fitting.size());
  OMNIBAL_CHECK(!fitting.empty(), "partition search: no candidate within radius ", input.radius,
                " fits the memory budget (e.g. ", smallest_over_partition.to_string(),
                "); raise the budget (memory.budget_gb; omnibal-plan: --budget-gb), recompute more "
                "blocks or add pipeline stages");
  const bool by_pipeline = input.rank_by == PartitionSearchInput::RankBy::kPipelineTime;
  std::stable_sort(fitting.begin(), fitting.end(),
                   [by_pipeline](const ScoredPartition& a, const ScoredPartition& b) {
                     if (by_pipeline && a.pipeline_s != b.pipeline_s)
                       return a.pipeline_s < b.pipeline_s;
                     return a.score < b.score;
                   });
  fitting.resize(std::min<size_t>(fitting.size(), input.top_k));
  r.top = std::move(fitting);
  return r;
}

}  // namespace omnibal::partition
