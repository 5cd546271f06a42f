#!/usr/bin/env python3
"""The bookkeeping of sim_vs_measured.sh over its rounds (Python 3 standard library only): runs
are OUT/NAME-rR (R = 1..ROUNDS) with the trainer's console in OUT/NAME-rR.log, the speed probes
OUT/probes/pN.json with OUT/probes/brackets.txt (`RUN pA pB`: the probes taken just before and
just after RUN).

    python3 scripts/bench/sim_rounds.py COMMAND ARG...
  pool OUT DIR,DIR[,...]        links every round of the DIRs into the new OUT, renumbered;
                                prints the number of rounds
  check-plans OUT NAME ROUNDS KIND   each round's simulation (OUT/NAME-rR.KIND.sim.json) ran
                                the trainer's plan (plan hash, split); exits 1 naming the first
                                that did not
  probe-tables OUT              per run the mean of its two probes (OUT/RUN.costs.json) and the
                                mean of every probe (OUT/probes/pooled.json)
  steal OUT LIMIT               the hypervisor's steal over the runs (OUT/*.steal)
  shared-terms FLAGS TERMS      `--fixed TERM=V` lines for host_overheads.py: each of TERMS
                                (comma-separated) at the mean over stages of its PP 2 fraction
"""
import glob
import json
import os
import re
import sys

import run_dir
from cost_tables import mean_cost_table


def _load(path):
    with open(path) as f:
        return json.load(f)


def pool(out, dirs_arg):
    """Links the plan, probes, runs, logs and steal files of every DIR into OUT (a new
    directory), rounds and probes renumbered after each other; load.before / load.after join
    the DIRs' with " | ". Refuses DIRs whose planner split differs."""
    dirs = dirs_arg.split(",")
    if os.path.exists(out):
        sys.exit(f"sim_vs_measured: --pool writes a new directory; {out} exists")
    os.makedirs(f"{out}/probes")
    split = lambda d: _load(f"{d}/plan.json")["rows"][2]["partition"]
    if any(split(d) != split(dirs[0]) for d in dirs):
        sys.exit("sim_vs_measured: --pool: the planner's split differs between "
                 + ", ".join(f"{d} {split(d)}" for d in dirs))
    ln = lambda src, dst: os.symlink(os.path.abspath(src), dst)
    ln(f"{dirs[0]}/plan.json", f"{out}/plan.json")
    offset, base, brackets, loads = 0, 0, [], {"before": [], "after": []}
    for d in dirs:
        probes = sum(bool(re.fullmatch(r"p\d+\.json", os.path.basename(p)))
                     for p in glob.glob(f"{d}/probes/p*.json"))
        for i in range(probes):
            ln(f"{d}/probes/p{i}.json", f"{out}/probes/p{offset + i}.json")
        rounds = 0
        for line in open(f"{d}/probes/brackets.txt"):
            run, a, b = line.split()
            name, r = run.rsplit("-r", 1)
            rounds = max(rounds, int(r))
            new = f"{name}-r{base + int(r)}"
            ln(f"{d}/{run}", f"{out}/{new}")
            ln(f"{d}/{run}.log", f"{out}/{new}.log")
            if os.path.exists(f"{d}/{run}.steal"):
                ln(f"{d}/{run}.steal", f"{out}/{new}.steal")
            brackets.append(f"{new} p{offset + int(a[1:])} p{offset + int(b[1:])}\n")
        for k in loads:
            with open(f"{d}/load.{k}") as f:
                loads[k].append(f.read().strip())
        offset, base = offset + probes, base + rounds
    with open(f"{out}/probes/brackets.txt", "w") as f:
        f.writelines(brackets)
    for k, v in loads.items():
        with open(f"{out}/load.{k}", "w") as f:
            f.write(" | ".join(v) + "\n")
    print(base)


def check_plans(out, name, rounds, kind):
    """Every round's simulation ran its trainer's plan (plan hash and split); with KIND *.raw,
    notes on stderr when the rounds recomputed different units."""
    plans = {}
    for r in range(1, int(rounds) + 1):
        run = f"{out}/{name}-r{r}"
        sim = _load(f"{run}.{kind}.sim.json")
        log = run_dir.console_log(run)
        h = run_dir.plan_hash(log)
        part = run_dir.summary(run)["partition"]
        plans.setdefault(run_dir.recompute_line(log), []).append(r)
        if h != sim["plan_hash"] or part != sim["partition"]:
            sys.exit(f"sim_vs_measured: {run}: trainer plan {h} split {part}, simulator plan "
                     f"{sim['plan_hash']} split {sim['partition']}")
    if len(plans) > 1 and kind.endswith(".raw"):
        print(f"sim_vs_measured: {name}: the rounds recompute differently, each simulated with "
              "its own: " + "; ".join(f"rounds {rs}: {p}" for p, rs in plans.items()),
              file=sys.stderr)


def probe_tables(out):
    """Per run of brackets.txt, the mean of its two probes; the pooled table of every probe.
    Prints the pooled whole-model busy time per pack and the probes' range."""
    probe = {}  # name (p0, p1, ...) -> table
    for p in glob.glob(f"{out}/probes/p*.json"):
        name = os.path.basename(p)[:-len(".json")]
        if re.fullmatch(r"p\d+", name):
            probe[name] = _load(p)
    busy = lambda t: sum(u["forward_s"] + u["backward_s"] for u in t["units"])

    def mean_table(names, dest, what):
        t = mean_cost_table([probe[n] for n in names])
        t["source"] += f" (mean of {what})"
        with open(dest, "w") as f:
            json.dump(t, f, indent=1)
        return busy(t)

    for line in open(f"{out}/probes/brackets.txt"):
        run, a, b = line.split()
        mean_table([a, b], f"{out}/{run}.costs.json", f"probes {a} and {b}")
    each = [busy(t) for t in probe.values()]
    total = mean_table(sorted(probe), f"{out}/probes/pooled.json", f"{len(probe)} probes")
    print(f"probes: {len(probe)}, whole model forward + backward per pack {1e3 * total:.1f} ms "
          f"(each probe {1e3 * min(each):.1f}-{1e3 * max(each):.1f} ms)")


def steal(out, limit):
    """The median and max hypervisor steal over OUT/*.steal, and the runs above LIMIT %."""
    limit = float(limit)
    values = {}
    for p in glob.glob(f"{out}/*.steal"):
        values[os.path.basename(p)[:-len(".steal")]] = run_dir.steal_percent(p[:-len(".steal")])
    if values:
        worst = max(values, key=values.get)
        over = sorted(n for n, v in values.items() if v > limit)
        print(f"sim_vs_measured: hypervisor steal during the runs: median "
              f"{sorted(values.values())[len(values) // 2]:.2f} %, max {values[worst]:.2f} % "
              f"({worst})" + (f"; above {limit:g} %: {', '.join(over)}" if over else ""))


def shared_terms(flags_arg, terms_arg):
    """--fixed TERM=V lines: for each TERM of TERMS that the PP 2 flags fitted, the mean of its
    per-stage fractions (a DP 2 rank runs the units of both PP 2 stages)."""
    flags, terms = flags_arg.split(), [t for t in terms_arg.split(",") if t]
    for t in terms:
        if f"--{t}-fraction" not in flags:  # PP 2 fitted without it (nothing recomputed)
            continue
        values = [float(v) for v in flags[flags.index(f"--{t}-fraction") + 1].split(",")]
        print("--fixed")
        print(f"{t}={sum(values) / len(values):.9g}")


COMMANDS = {"pool": pool, "check-plans": check_plans, "probe-tables": probe_tables,
            "steal": steal, "shared-terms": shared_terms}


if __name__ == "__main__":
    run_dir.run_command(COMMANDS, sys.argv[1:], "sim_rounds", __doc__)
