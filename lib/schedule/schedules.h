// The pipeline schedules beyond plain 1F1B, and one entry point that builds any of them.
//
//   const StageSchedules lists = build_schedule(PipelineSchedule::kZbH1, /*P=*/4, /*m=*/8);
//   lists[s]  // stage s's program, walked by the executor (lib/pipeline) and the simulator
//
// - 1F1B (one_f_one_b.h): PipeDream-Flush; bubble (P-1)/(m+P-1) on equal micro-batches.
// - Interleaved 1F1B (Megatron `forward_backward_pipelining_with_interleaving`): the model is cut
//   into P x v chunks, rank s holds virtual stages s, s+P, ...; forwards run in groups of P
//   micro-batches per chunk, warm-up min((P-s-1)*2 + (v-1)*P, v*m) forwards, so rank s holds at
//   most min((P-s-1)*2 + (v-1)*P + 1, v*m) chunk graphs. Needs m % P == 0 (Megatron's
//   constraint). With equal chunks (each 1/v of its stage's forward and backward) and free
//   transfers the step is m(T_F+T_B) + (P-1)(T_F+T_B)/v exactly, for any T_F, T_B: Megatron's
//   bubble ratio (P-1)/(v m) is idle time over *compute* time; the idle share of the step is
//   (P-1)/(v m + P-1).
// - ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, §3.1): the backward is split
//   into B (input gradient, on the critical path) and W (weight gradient); stage s runs 1F1B's
//   warm-up and F/B order and defers each W by s backwards, so W fills the cool-down bubble.
//   Stage s holds at most min(m, P-s) autograd graphs (1F1B's), min(m, s+1) deferred W inputs
//   (s+1 right after a B, before the W it releases) and min(m, P) of both together (1F1B's
//   stage 0 on every stage). With T_F = T_B = T_W = 1 the step is max(3m + P-1, 2m + 2P-1):
//   the paper's (P-1)(T_F+T_B-T_W) bubble needs m >= P; with fewer micro-batches the last stage's
//   2m of F and B after its first input at P-1, then the B chain back to stage 0 and its last W,
//   bound every F/B/W schedule.
// - ZB-V (zb_v_schedule.h): 2P chunks in a V (rank s holds virtual stages s and 2P-1-s), B/W
//   split, the W's placed greedily into the bubbles of the simulated timeline; at most 2P chunk
//   graphs plus deferred W's per rank (1F1B's activation memory); bubble (P-1)/(6m+P-1) on equal
//   costs for m >= 2P - 1 (the lower bound), a few chunk-times more below.
// Receives are placed right before the compute that needs them and sends right after the compute
// that produces them (non-blocking); schedule_checker.h verifies every built list.
#pragma once

#include "core/choices.h"
#include "schedule/instruction.h"
#include "schedule/one_f_one_b.h"
#include "schedule/zb_v_schedule.h"

namespace omnibal::schedule {

/// Megatron's interleaved 1F1B for P stages, m micro-batches and v >= 1 chunks per rank
/// (v == 1 gives exactly build_1f1b_schedule(P, m)). Instruction::chunk names the chunk.
/// Throws omnibal::Error when P < 1, m < 1, v < 1 or (v > 1 and m % P != 0).
StageSchedules build_interleaved_schedule(int stages, int micro_batches, int virtual_stages);

/// ZB-H1 for P stages and m micro-batches: Forward, BackwardInput and BackwardWeight
/// instructions (no fused Backward). Throws omnibal::Error when P < 1 or m < 1.
StageSchedules build_zb_h1_schedule(int stages, int micro_batches);

/// Builds `kind` (not kAuto) for P stages, m micro-batches and v chunks per rank (v must be 1
/// except for kInterleaved; kZbV takes 1 or 2 and always builds 2, on equal costs: the lists for
/// a step's own costs are build_zb_v_schedule's). Throws omnibal::Error naming the constraint
/// that fails.
StageSchedules build_schedule(PipelineSchedule kind, int stages, int micro_batches,
                              int virtual_stages = 1);

/// Model chunks per rank `kind` runs with `virtual_stages` configured: v for kInterleaved, 2 for
/// kZbV, else 1.
int chunks_per_rank(PipelineSchedule kind, int virtual_stages);

/// True for the schedules that split the backward into BackwardInput and BackwardWeight (ZB-H1,
/// ZB-V): their plans need W's share of the backward and the bytes a deferred W keeps.
bool splits_backward(PipelineSchedule kind);

/// How `kind`'s chunks lie on the ranks (instruction.h): kV for kZbV, kLoop otherwise. Every
/// walker of a schedule's lists (checker, timeline, executor, simulator, memory model) maps
/// chunks to virtual stages through it.
ChunkLayout chunk_layout(PipelineSchedule kind);

/// The bubble fraction of `kind` for P stages, m micro-batches, v chunks, with every chunk's
/// forward, input-gradient and weight-gradient times equal (T_F = T_B = T_W, the ZB paper's
/// setting), idle time over step time: 1F1B (P-1)/(m+P-1), interleaved (P-1)/(v*m+P-1) (m % P
/// == 0, as the builder), ZB-H1 1 - 3m/T with T = max(3m+P-1, 2m+2P-1), i.e. (P-1)/(3m+P-1)
/// for m >= P, ZB-V (P-1)/(6m+P-1) for m >= 2P - 1 (the lower bound: the last rank starts P-1
/// chunk-times late and has 6m of work; zb_v_schedule.h) and, for fewer micro-batches, the bubble
/// of the built lists (simulated; above the bound by at most a few chunk-times). Exact for the
/// built lists on free transfers (tests/schedule). Throws omnibal::Error for kAuto or P, m, v < 1.
double bubble_fraction(PipelineSchedule kind, int stages, int micro_batches,
                       int virtual_stages = 1);

}  // namespace omnibal::schedule
