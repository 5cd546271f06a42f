// The recompute knapsack of a pipeline rank with several chunks, bounded at every moment of its
// schedule (OmniBal §3.3's adaptive recomputation, docs/paper.md, for ZB-V's two chunks).
//
// A rank's activations at moment i of its list (memory_model.h, in_flight_states) are
// sum_c graphs_ic K_c + deferred_ic W_c: chunk c's kept bytes per graph alive and its W bytes per
// pending W. Each recompute candidate (a block) picks one option that adds `graph_bytes` to K_c
// and `deferred_bytes` to W_c of its chunk and gains `value` seconds; the constraint is, for
// every moment i, sum of what is alive then <= room_i (the budget minus the static bytes, the
// transient and what every block keeps whatever it picks). That is the exact bound: the largest
// sum at one moment, not each chunk's own peak added together (the linear knapsack of
// recompute_planner.cpp, an upper bound that overstates ZB-V's two chunks, issue 41).
//
// Solved per chunk as a Pareto set of (K bytes, W bytes, value) over the chunk's blocks (bytes
// rounded up to `granularity_bytes`, so the plan always fits; equal blocks collapse, so the set
// stays small: at most (n + 1)(n + 2) / 2 points for n equal blocks with three options), then
// the chunks' sets combined depth-first (highest value first, bounded) with every moment checked.
// Exact (the maximal value under the rounded bytes) while each chunk's set stays within
// kMaxParetoPoints; past that the granularity is coarsened 4x until it does, or until every
// option is within one granule (still within budget, possibly short of the optimum).
// Not here: which blocks are candidates, the transient term, the time model (the values).
#pragma once

#include <vector>

#include "memory/memory_model.h"

namespace omnibal::memory {

/// One way to treat a recompute candidate: bytes it adds per graph alive and per pending W of
/// its chunk (>= 0), and the seconds it saves (the knapsack's value).
struct KnapsackOption {
  double graph_bytes = 0;     ///< added to K_c: bytes kept per autograd graph alive
  double deferred_bytes = 0;  ///< added to W_c: bytes kept per deferred W pending
  double value = 0;           ///< seconds saved per micro-batch
};

/// A recompute candidate: its chunk (index into InFlightState::graphs) and its options (one is
/// chosen; at least one).
struct KnapsackItem {
  int chunk = 0;
  std::vector<KnapsackOption> options;
};

/// The solver's answer: `option[j]` is the option index chosen for item j; empty when no choice
/// fits every moment.
struct MultiStateKnapsackResult {
  bool feasible = false;
  double value = 0;         ///< summed value of the chosen options
  std::vector<int> option;  ///< [item] chosen option
};

/// Most points kept per chunk's Pareto set before the granularity is coarsened.
inline constexpr size_t kMaxParetoPoints = 4096;

/// Chooses one option per item, maximising the summed value subject to: for every state i,
/// sum_c states[i].graphs[c] * K_c + states[i].deferred[c] * W_c <= room[i], K_c / W_c the
/// chosen graph / deferred bytes of chunk c's items, each rounded up to `granularity_bytes`
/// (room rounded down); ties are broken deterministically. Throws omnibal::Error when room
/// and states differ in size, an item's chunk is outside the states' chunks, an item has no
/// option, a byte count is negative or the granularity is not > 0.
MultiStateKnapsackResult solve_multi_state_knapsack(const std::vector<KnapsackItem>& items,
                                                    const std::vector<InFlightState>& states,
                                                    const std::vector<double>& room,
                                                    double granularity_bytes);

}  // namespace omnibal::memory
