#!/usr/bin/env python3
"""Host overheads for `omnibal-plan simulate`, fitted to held-out calibration runs.

    python3 scripts/bench/host_overheads.py --warmup W [--pass micro-batch|jitter|step|both] \\
        [--terms loader,compute,checkpoint] [--fixed TERM=V ...] RUNS [...] > flags.args
    python3 scripts/bench/host_overheads.py --warmup W RUN_DIR SIM_JSON > flags.args

RUNS is RUN_DIR[,RUN_DIR...]:SIM_JSON or RUN_DIR:SIM_JSON[,RUN_DIR:SIM_JSON...] (sim_table.py).
Each RUN_DIR is a trainer run of a calibration configuration (not one of those the benchmark
predicts; several run directories of one configuration are rounds with the same packs); SIM_JSON
is `omnibal-plan simulate --json` of that configuration (one for all rounds, or one per round
on the cost table profiled around that round's run). All configurations have the same
layout (dp, pp). Every step >= W of every run is one observation; with --per-run, every run is
one, the mean over its steps >= W (the mean, as a throughput figure is; the fit across runs
stays robust to one slow run).

--pass micro-batch (SIM_JSON: the profiled table alone). Per stage s, the busy time the table
does not explain,
    y = measured forward_s + backward_s - simulated forward_s + backward_s of stage s
(DP 1: the stage's figures; PP 1: the mean over DP ranks of their busy_s, against the simulated
stage, which is the DP mean too), is fitted as
    y = a_s m + b_s T + c_s N + d_s S + f_s C + h_s K
over the terms named by --terms (default loader,compute,checkpoint; loader alone when every
observation comes from one configuration, whose m and packs barely vary) (mb: a_s, fixed per
micro-batch, added to every forward; loader: the same fixed part per micro-batch on the first stage, but
as work on the rank's core from the step's start (`--loader-overhead-s`): the first stage's
loader workers build the next step's packs (pixel tensors) when the step takes its m packs,
which traces show as the first one or two forwards running up to twice as long as the rest;
the simulator shares the core between it and those forwards and lets it run alone in the
stage's first wait, so part of it hides in the bubble (the fit counts all of it as busy time:
in the traces it is done before stage 0 first waits); on later stages, whose loaders build
labels only, the loader term is an mb term; tile, token, sample: per tile,
real token or sample of the step's micro-batches on one DP rank, T, N, S; compute: f_s, a
fraction of C, the stage's simulated table busy time of the step; checkpoint: h_s, a further
fraction of K, the stage's checkpointed compute in the table (recomputed units' forwards and
their reruns, the simulation's checkpointed_s), dropped when no observation recomputes: a
step's recomputation does not cost what its units profiled one by one do) by least absolute
deviations (iteratively reweighted least squares): a minority of slow steps, or one slow run
among several, moves the fit little. A term whose coefficient comes out negative is dropped
and the rest refitted (the compute and checkpoint fractions may be negative, down to -0.9: the
table was profiled while the host ran slower than during the runs; checkpointed units run
faster in a step than in the profile). --fixed TERM=V takes a term from elsewhere instead
(sim_vs_measured.sh gives DP 2 the compute and checkpoint fractions of the PP 2 fit, which 13
configurations pin, where DP 2's two held-out ones cannot tell three terms apart): V times its
regressor comes off y before the fit, and every stage gets V. Prints --loader-overhead-s /
--mb-overhead-s / --tile-overhead-s / ... flags.

--pass jitter (SIM_JSON: simulated with the micro-batch flags; DP > 1). The DP ranks' busy
times differ by more than their packs explain: the host's speed varies per core and step, and
the gradient reduction waits for the slowest rank. Per step, each rank's relative residual
e_r = (measured busy_s - simulated busy_s of rank r) / the ranks' mean simulated busy; the
step's spread is max_r e_r - mean_r e_r, averaged over each run's steps, the median over the
runs; divided by E[max of dp standard normals] it is the relative standard deviation J
`omnibal-plan simulate --dp-jitter J` takes (dp 2: J = sqrt(pi) / 2 * mean |e_1 - e_0|).
Prints --dp-jitter (0 for DP 1).

--pass step (SIM_JSON: simulated with the flags of the passes before). The per-step
cost per stage (optimizer, gradient norm, the label all-reduce, waiting for the loader) is the
median over the observations of measured step_seconds - simulated step_seconds; prints
--step-overhead-s.

--pass both (the default; SIM_JSON: the table alone; the second form above is one run): the
micro-batch pass, then the per-step cost measured directly, as the median of step_seconds -
(forward_s + backward_s + idle_s of stage 0): the trainer's work outside the 1F1B walk on rank 0.

Residuals (measured - fitted, per configuration: median in ms and relative to the measured
median) go to stderr. Python 3 standard library only.
"""
import argparse
import math
import statistics
import sys

from run_dir import metrics_by_step  # same folder: one reader each
from sim_table import load_sim_steps, parse_runs

TERMS = ("loader", "mb", "tile", "token", "sample", "compute", "checkpoint")
FLAG = {"loader": "--loader-overhead-s", "mb": "--mb-overhead-s", "tile": "--tile-overhead-s", "token": "--token-overhead-s",
        "sample": "--sample-overhead-s", "compute": "--compute-fraction",
        "checkpoint": "--checkpoint-fraction"}
UNIT = {"loader": ("ms", 1e3), "mb": ("ms", 1e3), "tile": ("us/tile", 1e6), "token": ("us/token", 1e6),
        "sample": ("us/sample", 1e6), "compute": ("% of the table", 1e2),
        "checkpoint": ("% of the checkpointed compute", 1e2)}
FRACTIONS = ("compute", "checkpoint")  # may be negative, down to -0.9


def solve(a, b):
    """Solves the small dense system a x = b (Gaussian elimination, partial pivoting)."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        if abs(m[p][c]) < 1e-300:
            raise ValueError("singular")
        m[c], m[p] = m[p], m[c]
        for r in range(n):
            if r != c:
                f = m[r][c] / m[c][c]
                for k in range(c, n + 1):
                    m[r][k] -= f * m[c][k]
    return [m[i][n] / m[i][i] for i in range(n)]


def weighted_lsq(x, y, w):
    """argmin_c sum w_i (y_i - x_i . c)^2 on unit-norm columns."""
    k = len(x[0])
    norms = [max(1e-300, sum(r[j] ** 2 for r in x) ** 0.5) for j in range(k)]
    xs = [[r[j] / norms[j] for j in range(k)] for r in x]
    ata = [[sum(wi * r[i] * r[j] for r, wi in zip(xs, w)) for j in range(k)] for i in range(k)]
    aty = [sum(wi * r[i] * yi for r, yi, wi in zip(xs, y, w)) for i in range(k)]
    return [c / n for c, n in zip(solve(ata, aty), norms)]


def lad(x, y, iterations=100):
    """Least absolute deviations by iteratively reweighted least squares."""
    scale = max(1e-9, statistics.median(abs(v) for v in y) * 1e-4)
    w = [1.0] * len(y)
    c = weighted_lsq(x, y, w)
    for _ in range(iterations):
        r = [yi - sum(ci * xi for ci, xi in zip(c, row)) for row, yi in zip(x, y)]
        w = [1.0 / max(abs(v), scale) for v in r]
        c_new = weighted_lsq(x, y, w)
        done = all(abs(a - b) <= 1e-9 * max(1.0, abs(b)) for a, b in zip(c_new, c))
        c = c_new
        if done:
            break
    return c


def fit_nonnegative(x, y, names):
    """LAD fit; drops the most negative term and refits until every coefficient is >= 0, but for
    the fractions, which may be negative (> -1: a table slower than the run); a term whose
    column is all zero (no observation recomputes) is left out (coefficient 0)."""
    active = [j for j in range(len(names)) if any(row[j] != 0 for row in x)]
    floor = [-0.9 if n in FRACTIONS else 0.0 for n in names]
    while active:
        c = lad([[row[j] for j in active] for row in x], y)
        worst = min(range(len(active)), key=lambda i: c[i] - floor[active[i]])
        if c[worst] >= floor[active[worst]]:
            out = [0.0] * len(names)
            for j, v in zip(active, c):
                out[j] = v
            return out
        print(f"host_overheads: the {names[active[worst]]} term comes out below its floor "
              f"({c[worst]:.3g}); dropped", file=sys.stderr)
        del active[worst]
    return [0.0] * len(names)


def observations(specs, warmup):
    """[(config, round, step, metrics row, sim row, sim json)] over every spec."""
    obs = []
    for spec in specs:
        runs = parse_runs(spec)
        name = runs[0][0].rstrip("/").split("/")[-1].rsplit("-r", 1)[0]
        for k, (run_dir, sim_path) in enumerate(runs):
            sim, sim_json = load_sim_steps(sim_path)
            for step, row in sorted(metrics_by_step(run_dir).items()):
                if step >= warmup and step in sim:
                    obs.append((name, k, step, row, sim[step], sim_json))
    if not obs:
        sys.exit(f"host_overheads: no common steps >= {warmup}")
    layouts = {(o[5]["dp"], o[5]["pp"]) for o in obs}
    if len(layouts) != 1:
        sys.exit(f"host_overheads: calibration runs of several layouts (dp, pp): {layouts}")
    return obs


def measured_busy(row, stage, dp):
    if dp == 1:
        st = row["stages"][stage]
        return st["forward_s"] + st["backward_s"]
    if len(row["stages"]) != 1:
        sys.exit("host_overheads: DP > 1 with PP > 1: the trainer reports DP rank 0's stages only")
    return statistics.mean(d["busy_s"] for d in row["dp_ranks"])


def residual_report(obs, resid, what):
    by = {}
    for o, r, y in zip(obs, resid[0], resid[1]):
        by.setdefault(o[0], ([], []))
        by[o[0]][0].append(r)
        by[o[0]][1].append(y)
    for name, (r, y) in by.items():
        med, ref = statistics.median(r), statistics.median(y)
        print(f"  {name:<10} {what}: residual median {1e3 * med:+.2f} ms "
              f"({100 * med / ref:+.1f} % of {1e3 * ref:.1f} ms), "
              f"|residual| median {1e3 * statistics.median(abs(v) for v in r):.2f} ms "
              f"over {len(r)} observations", file=sys.stderr)


def by_run(obs, key, columns):
    """Averages each column (numbers or rows of numbers) over the observations sharing key(o);
    returns one observation per group (its first) and the averaged columns."""
    groups = {}
    for i, o in enumerate(obs):
        groups.setdefault(key(o), []).append(i)
    mean = lambda vals: (statistics.mean(vals) if not isinstance(vals[0], list)
                         else [statistics.mean(v) for v in zip(*vals)])
    return ([obs[ix[0]] for ix in groups.values()],
            [[mean([col[i] for i in ix]) for ix in groups.values()] for col in columns])


def expected_max_standard_normal(n):
    """E[max of n independent N(0, 1)]: the integral of 1 - Phi^n over [0, 9] minus that of
    Phi^n over [-9, 0] (Simpson's rule on each half, where the integrands are smooth)."""
    phi = lambda x: 0.5 * math.erfc(-x / math.sqrt(2))
    def simpson(f, lo, hi, steps=1800):
        h = (hi - lo) / steps
        return h / 3 * (f(lo) + f(hi) + sum((4 if k % 2 else 2) * f(lo + k * h)
                                            for k in range(1, steps)))
    return simpson(lambda x: 1 - phi(x) ** n, 0.0, 9.0) - simpson(lambda x: phi(x) ** n, -9.0, 0.0)


def dp_jitter(obs, dp, configs):
    """The --dp-jitter relative standard deviation (see --pass jitter); 0 for DP 1."""
    if dp == 1:
        print("host overheads: DP 1, no DP jitter", file=sys.stderr)
        return 0.0
    per_run = {}
    for o in obs:
        meas = [d["busy_s"] for d in o[3]["dp_ranks"]]
        sim = [d["busy_s"] for d in o[4]["dp_ranks"]]
        scale = statistics.mean(sim)
        e = [(b - s) / scale for b, s in zip(meas, sim)]
        per_run.setdefault((o[0], o[1]), []).append(max(e) - statistics.mean(e))
    spread = statistics.median(statistics.mean(v) for v in per_run.values())
    jitter = spread / expected_max_standard_normal(dp)
    print(f"host overheads (dp {dp}, pp 1; {', '.join(configs)}: {len(obs)} steps, "
          f"{len(per_run)} runs): the slowest DP rank {100 * spread:.2f} % of a step above the "
          f"ranks' mean beyond the packs (median over the runs): DP jitter {100 * jitter:.2f} %",
          file=sys.stderr)
    return jitter


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--pass", dest="which", choices=("micro-batch", "jitter", "step", "both"),
                    default="both")
    ap.add_argument("--per-run", action="store_true",
                    help="one observation per run: the mean of its steps (default: every step)")
    ap.add_argument("--terms", help="of loader, mb, tile, token, sample, compute, checkpoint "
                    "(default: loader,compute,checkpoint; loader alone for one configuration, whose steps cannot tell "
                    "them apart)")
    ap.add_argument("--fixed", action="append", default=[], metavar="TERM=V",
                    help="a term known from elsewhere (another layout's fit), not fitted: V times "
                    "its regressor is taken off the busy time first, and V is printed with the "
                    "fitted terms; every stage gets V (repeatable)")
    ap.add_argument("specs", nargs="+", help="RUNS: RUN_DIR[,RUN_DIR...]:SIM_JSON or "
                    "RUN_DIR:SIM_JSON[,RUN_DIR:SIM_JSON...]")
    a = ap.parse_args()
    if len(a.specs) == 2 and ":" not in a.specs[0] and ":" not in a.specs[1]:
        a.specs = [f"{a.specs[0]}:{a.specs[1]}"]  # RUN_DIR SIM_JSON
    obs = observations(a.specs, a.warmup)
    group = (lambda o: (o[0], o[1])) if a.per_run else (lambda o: (o[0], o[1], o[2]))
    dp, pp = obs[0][5]["dp"], obs[0][5]["pp"]
    if a.terms is None:
        a.terms = "loader,compute,checkpoint" if len({o[0] for o in obs}) > 1 else "loader"
    names = [t for t in a.terms.split(",") if t]
    for t in names:
        if t not in TERMS:
            sys.exit(f"host_overheads: unknown term {t} (of {', '.join(TERMS)})")
    fixed = {}
    # loader and mb are set by stage position (first / later), not one value for every stage
    fixable = [t for t in TERMS if t not in ("loader", "mb")]
    for f in a.fixed:
        t, _, v = f.partition("=")
        if t not in fixable:
            sys.exit(f"host_overheads: --fixed {f}: expected TERM=V with TERM one of "
                     f"{', '.join(fixable)}")
        try:
            fixed[t] = float(v)
        except ValueError:
            sys.exit(f"host_overheads: --fixed {f}: {v!r} is not a number")
    names = [t for t in names if t not in fixed]
    configs = sorted({o[0] for o in obs})
    if a.which == "jitter":
        print(f"--dp-jitter {dp_jitter(obs, dp, configs):.6f}")
        return
    if a.which == "step":
        g_obs, (resid, meas) = by_run(obs, group, [
            [o[3]["step_seconds"] - o[4]["step_seconds"] for o in obs],
            [o[3]["step_seconds"] for o in obs]])
        per_step = max(0.0, statistics.median(resid))
        print(f"host overheads (dp {dp}, pp {pp}; {', '.join(configs)}: {len(obs)} steps, "
              f"{len(g_obs)} observations): per step {1e3 * per_step:.2f} ms", file=sys.stderr)
        fitted = [r - per_step for r in resid]
        residual_report(g_obs, (fitted, meas), "step time")
        print(f"--step-overhead-s {per_step:.6f}")
        return
    coef = {}  # (term, stage) -> coefficient
    for s in range(pp):
        stage_names = ["mb" if t == "loader" and s > 0 else t for t in names]
        x, y, busy = [], [], []
        for o in obs:
            row, sim, sj = o[3], o[4], o[5]
            table = sim["stages"][s]["forward_s"] + sim["stages"][s]["backward_s"]
            m = sj["micro_batches"]
            load = {"loader": m, "mb": m, "tile": sim["tiles"] / dp, "token": sim["tokens"] / dp,
                    "sample": sim["samples"] / dp, "compute": table,
                    "checkpoint": sim["stages"][s].get("checkpointed_s", 0.0)}
            x.append([load[t] for t in stage_names])
            b = measured_busy(row, s, dp)
            busy.append(b)
            y.append(b - table - sum(v * load[t] for t, v in fixed.items()))
        g_obs, (x, y, busy) = by_run(obs, group, [x, y, busy])
        c = fit_nonnegative(x, y, stage_names)
        coef.update({(t, s): v for t, v in zip(stage_names, c)})
        coef.update({(t, s): v for t, v in fixed.items()})
        fitted = [yi - sum(ci * xi for ci, xi in zip(c, row)) for row, yi in zip(x, y)]
        print(f"host overheads (dp {dp}, pp {pp}; {', '.join(configs)}: {len(obs)} steps), "
              f"stage {s} per micro-batch: "
              + ", ".join(f"{t} {UNIT[t][1] * v:.3f} {UNIT[t][0]}" for t, v in zip(stage_names, c))
              + "".join(f", {t} {UNIT[t][1] * v:.3f} {UNIT[t][0]} (fixed)"
                        for t, v in fixed.items()),
              file=sys.stderr)
        residual_report(g_obs, (fitted, busy), f"stage {s} busy")
    for s in range(pp):  # checkpointed compute runs at 1 + compute + checkpoint > 0.1 x the table
        if ("checkpoint", s) in coef:
            coef[("checkpoint", s)] = max(coef[("checkpoint", s)], -0.9 - coef.get(("compute", s), 0.0))
    fitted_terms = [t for t in TERMS if any((t, s) in coef for s in range(pp))]
    flags = " ".join(f"{FLAG[t]} " + ",".join(f"{coef.get((t, s), 0.0):.9g}" for s in range(pp))
                     for t in fitted_terms)
    if a.which == "both":
        outside = [o[3]["step_seconds"] - sum(o[3]["stages"][0][k] for k in
                                              ("forward_s", "backward_s", "idle_s"))
                   for o in obs]
        per_step = max(0.0, statistics.median(outside))
        print(f"host overheads: per step {1e3 * per_step:.2f} ms (outside stage 0's walk)",
              file=sys.stderr)
        flags += f" --step-overhead-s {per_step:.6f}"
    print(flags)


if __name__ == "__main__":
    main()
