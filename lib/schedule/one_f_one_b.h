// The non-interleaved 1F1B pipeline schedule (PipeDream-Flush / Megatron
// `forward_backward_pipelining_without_interleaving`) as per-stage instruction lists.
// Stage s of P first runs min(P - s - 1, m) warm-up forwards, then alternates one forward and
// one backward in the steady state, then drains the remaining backwards; every stage ends with
// ReduceGrads and OptimizerStep. Stage s therefore holds at most min(m, P - s) micro-batches in
// flight (docs/conventions.md). Interleaved 1F1B and ZB-H1 are in schedules.h.
#pragma once

#include "schedule/instruction.h"

namespace omnibal::schedule {

/// Builds the 1F1B instruction lists for `stages` pipeline stages (P >= 1) and `micro_batches`
/// micro-batches per step (m >= 1). Sends are meant to be non-blocking and receives blocking;
/// every SendActivation{mb} of stage s is matched by RecvActivation{mb} of stage s+1 in the same
/// order, and every SendGrad{mb} of stage s+1 by RecvGrad{mb} of stage s.
/// Throws omnibal::Error when P < 1 or m < 1.
StageSchedules build_1f1b_schedule(int stages, int micro_batches);

/// Micro-batches stage s (0-based) holds in flight under 1F1B: min(m, P - s).
int in_flight_micro_batches(int stage, int stages, int micro_batches);

/// The 1F1B bubble fraction for uniform micro-batches: (P - 1) / (m + P - 1).
double bubble_fraction_1f1b(int stages, int micro_batches);

}  // namespace omnibal::schedule
