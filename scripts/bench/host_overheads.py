#!/usr/bin/env python3
"""Host overheads for `omnibal-plan simulate`, measured on a calibration run.

    python3 scripts/bench/host_overheads.py --warmup W RUN_DIR SIM_JSON > overheads.args

RUN_DIR is a trainer run of a configuration that is *not* one of those the benchmark predicts;
SIM_JSON is `omnibal-plan simulate --json` of that run with no overheads (the profiled unit
table alone). Over the steps >= W, as medians:

  per-micro-batch overhead of stage s = (measured forward_s + backward_s of stage s
                                         - simulated forward_s + backward_s of stage s) / m
      what a stage spends per micro-batch beyond the profiled units: the pack hand-over and
      UnitState, activation/gradient messages (headers, copies, MPI progress), the loader
      thread sharing the rank's core, chaining of units (one autograd graph per stage,
      allocations of several micro-batches in flight);
  per-step overhead = step_seconds - (forward_s + backward_s + idle_s of stage 0)
      the trainer's work outside the 1F1B walk on rank 0 (stage 0 finishes last under 1F1B):
      waiting for the loader, the label all-reduce, zero_grad, gradient norm and clipping,
      AdamW; used for every stage.

Negative figures are clipped to 0. Prints the simulate flags on stdout and the figures on
stderr. Python 3 standard library only.
"""
import argparse
import json
import statistics
import sys

from sim_table import load_metrics  # same folder: one reader of metrics.jsonl


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("run_dir")
    ap.add_argument("sim_json")
    a = ap.parse_args()
    measured = load_metrics(a.run_dir)
    with open(a.sim_json) as f:
        sim = {r["step"]: r for r in json.load(f)["steps"]}
    m = None
    with open(f"{a.run_dir}/config.yaml") as f:
        in_parallel = False
        for line in f:
            if not line.startswith(" "):
                in_parallel = line.startswith("parallel:")
            elif in_parallel and line.strip().startswith("micro_batches:"):
                m = int(line.split(":", 1)[1])
    if m is None:
        sys.exit("host_overheads: parallel.micro_batches not found in config.yaml")
    steps = sorted(s for s in measured if s >= a.warmup and s in sim)
    if not steps:
        sys.exit(f"host_overheads: no common steps >= {a.warmup}")
    stages = len(measured[steps[0]]["stages"])
    per_mb = []
    for i in range(stages):
        gaps = []
        for s in steps:
            me, si = measured[s]["stages"][i], sim[s]["stages"][i]
            gaps.append((me["forward_s"] + me["backward_s"] - si["forward_s"] - si["backward_s"]) / m)
        per_mb.append(max(0.0, statistics.median(gaps)))
    outside = [measured[s]["step_seconds"] - sum(measured[s]["stages"][0][k] for k in
                                                  ("forward_s", "backward_s", "idle_s"))
               for s in steps]
    per_step = max(0.0, statistics.median(outside))
    print(f"host overheads from {a.run_dir} (m {m}, {len(steps)} steps): per micro-batch "
          + ", ".join(f"stage {i} {1e3 * x:.2f} ms" for i, x in enumerate(per_mb))
          + f"; per step {1e3 * per_step:.2f} ms", file=sys.stderr)
    print("--mb-overhead-s " + ",".join(f"{x:.6f}" for x in per_mb)
          + f" --step-overhead-s {per_step:.6f}")


if __name__ == "__main__":
    main()
