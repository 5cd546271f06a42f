#!/usr/bin/env python3
"""Simulated vs measured step times (scripts/bench/sim_vs_measured.sh).

    python3 scripts/bench/sim_table.py --warmup W [--stat mean|median] NAME=RUNS [...]
    RUNS: RUN_DIR[,RUN_DIR...]:SIM_JSON  (one simulation for every round)
       or RUN_DIR:SIM_JSON[,RUN_DIR:SIM_JSON...]  (each round simulated on its own cost table)

RUN_DIR holds the trainer's metrics.jsonl (several: rounds of the same configuration, which run
the same packs at the same steps), SIM_JSON the output of `omnibal-plan simulate --json` for the
same config and steps. For every configuration, over the steps >= W that both hold, pooled over
the rounds: the measured step_seconds and the simulated step time (same steps, same packs;
--stat: their mean, the default, which is what throughput is, or their median), their error,
and per stage the measured vs simulated forward, backward and idle seconds (same statistic). Then the ranks of both (1 = fastest), Spearman's rank correlation,
Kendall's tau-b, whether the order agrees, and the median and max |error|. Python 3 standard
library only.
"""
import argparse
import functools
import json
import statistics
import sys

from run_dir import metrics_by_step  # same folder: the one reader of run directories


def parse_runs(spec):
    """RUNS (see the module doc) -> [(run_dir, sim_json_path)], one per round."""
    parts = spec.split(",")
    if all(":" in p for p in parts):
        return [tuple(p.rsplit(":", 1)) for p in parts]
    if ":" not in parts[-1] or any(":" in p for p in parts[:-1]):
        sys.exit(f"bench: cannot read runs '{spec}': expected RUN_DIR[,RUN_DIR...]:SIM_JSON or "
                 "RUN_DIR:SIM_JSON[,RUN_DIR:SIM_JSON...]")
    last, sim = parts[-1].rsplit(":", 1)
    return [(d, sim) for d in parts[:-1] + [last]]


@functools.lru_cache(maxsize=None)
def load_sim_steps(path):
    """{step: row} of a `simulate --json` file, and the file's JSON (read once per path)."""
    with open(path) as f:
        j = json.load(f)
    return {r["step"]: r for r in j["steps"]}, j


STATS = {"mean": statistics.mean, "median": statistics.median}


def ranks(values):
    """1-based ranks, ties share the mean rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    ma, mb = statistics.mean(ra), statistics.mean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra)
    vb = sum((y - mb) ** 2 for y in rb)
    return cov / (va * vb) ** 0.5 if va and vb else float("nan")


def kendall_tau_b(a, b):
    """Kendall's tau-b (ties in either list counted as in scipy.stats.kendalltau)."""
    conc = disc = ties_a = ties_b = 0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            da, db = a[i] - a[j], b[i] - b[j]
            if da == 0 and db == 0:
                continue
            if da == 0:
                ties_a += 1
            elif db == 0:
                ties_b += 1
            elif (da > 0) == (db > 0):
                conc += 1
            else:
                disc += 1
    n0 = conc + disc
    den = ((n0 + ties_a) * (n0 + ties_b)) ** 0.5
    return (conc - disc) / den if den else float("nan")


def stage_stats(rows, keys, key, stat):
    n = len(rows[keys[0]]["stages"])
    return [stat([rows[k]["stages"][i][key] for k in keys]) for i in range(n)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--warmup", type=int, default=5, help="steps dropped at the start")
    ap.add_argument("--stat", choices=sorted(STATS), default="mean",
                    help="of the step times pooled over steps and rounds (default mean)")
    ap.add_argument("--json", help="write the table as JSON here")
    ap.add_argument("configs", nargs="+", help="NAME=RUNS (NAME may hold '=')")
    args = ap.parse_args()
    stat = STATS[args.stat]
    table = []
    for spec in args.configs:
        name, rest = spec.rsplit("=", 1)
        measured, simk = {}, {}  # (round, step) -> metrics row / simulated row
        for k, (run_dir, sim_path) in enumerate(parse_runs(rest)):
            sim = load_sim_steps(sim_path)[0]
            for step, r in metrics_by_step(run_dir).items():
                if step >= args.warmup and step in sim:
                    measured[(k, step)] = r
                    simk[(k, step)] = sim[step]
        keys = sorted(measured)
        if not keys:
            sys.exit(f"sim_table: {name}: no common steps >= {args.warmup}")
        times = [measured[k]["step_seconds"] for k in keys]
        meas = stat(times)
        simu = stat([simk[k]["step_seconds"] for k in keys])
        row = {"config": name, "steps": len(keys), "simulated_s": simu, "measured_s": meas,
               "error_pct": 100.0 * (simu - meas) / meas,
               "measured_min_s": min(times), "measured_max_s": max(times),
               "stages": []}
        rounds = sorted({k[0] for k in keys})
        if len(rounds) > 1:
            row["round_measured_s"] = [stat([measured[k]["step_seconds"]
                                              for k in keys if k[0] == r]) for r in rounds]
            row["round_simulated_s"] = [stat([simk[k]["step_seconds"]
                                               for k in keys if k[0] == r]) for r in rounds]
        for key in ("forward_s", "backward_s", "idle_s"):
            m = stage_stats(measured, keys, key, stat)
            p = stage_stats(simk, keys, key, stat)
            for i, (x, y) in enumerate(zip(m, p)):
                while len(row["stages"]) <= i:
                    row["stages"].append({})
                row["stages"][i][key] = {"measured": x, "simulated": y}
        table.append(row)
    sim_rank = ranks([r["simulated_s"] for r in table])
    meas_rank = ranks([r["measured_s"] for r in table])
    for r, a, b in zip(table, sim_rank, meas_rank):
        r["simulated_rank"], r["measured_rank"] = a, b
    rho = spearman([r["simulated_s"] for r in table], [r["measured_s"] for r in table])
    tau = kendall_tau_b([r["simulated_s"] for r in table], [r["measured_s"] for r in table])
    med_err = statistics.median(abs(r["error_pct"]) for r in table)
    max_err = max(abs(r["error_pct"]) for r in table)
    w = max(22, max(len(r["config"]) for r in table))
    print(f"{'config':<{w}} {'steps':>5} {'simulated s':>11} {'measured s (min-max)':>24} "
          f"{'error':>8} {'rank sim/meas':>13}  rounds measured / simulated (s)")
    for r in table:
        span = f"{r['measured_s']:.4f} ({r['measured_min_s']:.3f}-{r['measured_max_s']:.3f})"
        rounds = " ".join(f"{x:.3f}/{y:.3f}" for x, y in zip(r.get("round_measured_s", []),
                                                              r.get("round_simulated_s", [])))
        print(f"{r['config']:<{w}} {r['steps']:>5} {r['simulated_s']:>11.4f} {span:>24} "
              f"{r['error_pct']:>+7.1f}% {r['simulated_rank']:>6g}/{r['measured_rank']:<6g}  "
              f"{rounds}")
    print(f"({args.stat} step time) Spearman {rho:.3f}; Kendall tau-b {tau:.3f}; same order: "
          f"{'yes' if sim_rank == meas_rank else 'no'}; median |error| {med_err:.1f}%; "
          f"max |error| {max_err:.1f}%")
    print(f"\nper stage, {args.stat} per step (measured / simulated, ms):")
    for r in table:
        parts = []
        for i, st in enumerate(r["stages"]):
            parts.append(f"s{i} fwd {1e3*st['forward_s']['measured']:.1f}/"
                         f"{1e3*st['forward_s']['simulated']:.1f} bwd "
                         f"{1e3*st['backward_s']['measured']:.1f}/"
                         f"{1e3*st['backward_s']['simulated']:.1f} idle "
                         f"{1e3*st['idle_s']['measured']:.1f}/{1e3*st['idle_s']['simulated']:.1f}")
        print(f"  {r['config']:<{w}} " + " | ".join(parts))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"statistic": args.stat, "rows": table, "spearman": rho, "kendall_tau_b": tau,
                       "same_order": sim_rank == meas_rank, "median_abs_error_pct": med_err,
                       "max_abs_error_pct": max_err}, f, indent=1)


if __name__ == "__main__":
    main()
