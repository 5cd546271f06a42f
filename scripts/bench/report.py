#!/usr/bin/env python3
"""What the bench scripts compute between their runs and print after them (Python 3 standard
library only): one command per step that used to be an inline heredoc, run directories read
through run_dir.py. Every table keeps the layout docs/results.md quotes.

    python3 scripts/bench/report.py COMMAND ARG...

Inputs of the scripts (read from omnibal-plan's and omnibal-train's outputs):
  plan-row PLAN_JSON ROW KEY          a row's value of `omnibal-plan partition --json` ("6, 4")
  ablation-plan RUN                   the planner run's split, candidates and memory-row budget
  ablation-steps OUT STEPS NAME=ROW...  per configuration, its steps for the row's samples
  equal-sample-steps SIM_JSON STEPS   steps of a simulation reaching STEPS x 32 samples
  scan-meta DEMO OUT_JSON             the demo training split listed 10 times
Tables (one per script, named after it):
  ablation-measured OUT REPS WARMUP LOAD_BEFORE LOAD_AFTER RULES NAME=ROW...
  ablation-schedules JSON | ablation-tp OUT | balance OUT REPS | model-pair TIMINGS A B
  omnibal-vs-baseline OUT REPS WARMUP OMNI_STEPS | planner-startup REPS DATA BIN...
  precision OUT REPS PRECISION... | schedules OUT WARMUP REPS NAME... | tp OUT REPS WARMUP LAT GBPS
"""
import json
import os
import statistics as st
import sys
import time

import run_dir


def _load(path):
    with open(path) as f:
        return json.load(f)


def _span(v, d=2, dash="-"):
    """median (min-max) of v with d decimals."""
    return f"{st.median(v):.{d}f} ({min(v):.{d}f}{dash}{max(v):.{d}f})"


# --- inputs of the scripts -------------------------------------------------------------------


def plan_row(plan_json, row, key):
    """bench_common.sh: rows[ROW][KEY] of `omnibal-plan partition --json` ("6, 4")."""
    print(run_dir.format_value(_load(plan_json)["rows"][int(row)][key]))


def ablation_plan(run):
    """ablation_measured.sh: the planner run's split, its other candidates ("-" for none) and the
    memory row's budget in GiB: halfway between the larger stage's full-recompute and
    no-recompute bytes (adaptive must keep recomputing some blocks there, full fits)."""
    p = run_dir.stage_plan(run)
    split = ",".join(map(str, p["partition"]))
    cands = ";".join(",".join(map(str, c["partition"])) for c in p.get("candidates", []))
    full, none = max(p["full_bytes"]), max(p["none_bytes"])
    print(split, cands or "-", f"{(full + 0.5 * (none - full)) / 2**30:.6f}")


def ablation_steps(out, steps, *name_rows):
    """ablation_measured.sh: per row, the samples of its reference configuration's STEPS steps
    (the random one where the row has one, else the row's first); every configuration of the row
    runs until it reaches them (OUT/NAME.samples.json: `simulate --json`). Prints NAME STEPS."""
    steps = int(steps)
    names = [a.split("=") for a in name_rows]
    per = {n: [r["samples"] for r in _load(f"{out}/{n}.samples.json")["steps"]]
           for n, _ in names}
    for row in dict.fromkeys(r for _, r in names):
        ns = [n for n, r in names if r == row]
        ref = next((n for n in ns if "random" in n or n == "baseline"), ns[0])
        target = sum(per[ref][:steps])
        for n in ns:
            total, k = 0, 0
            for k, s in enumerate(per[n], 1):
                total += s
                if total >= target:
                    break
            print(n, k)


def equal_sample_steps(sim_json, steps):
    """omnibal_vs_baseline.sh: the fewest steps of the simulation whose samples reach STEPS x 32
    (all its steps when none does)."""
    rows = _load(sim_json)["steps"]
    target, total = int(steps) * 32, 0
    for k, r in enumerate(rows, 1):
        total += r["samples"]
        if total >= target:
            print(k)
            return
    print(len(rows))


def scan_meta(demo, out):
    """scan_bench.sh: the demo training split listed 10 times, roots made absolute."""
    meta = _load(os.path.join(demo, "train_meta.json"))
    big = {f"{name}_{k}": {**d, "root": os.path.join(demo, d["root"]),
                           "annotation": os.path.join(demo, d["annotation"])}
           for k in range(10) for name, d in meta.items()}
    with open(out, "w") as f:
        json.dump(big, f)


# --- tables -----------------------------------------------------------------------------------


def _ablation_run(d, warmup):
    rows = run_dir.metrics(d)
    stdy = run_dir.steady(rows, warmup, fallback=True)
    busy = [[x["busy_s"] for x in r["dp_ranks"]] for r in stdy]
    return {"steps": len(rows), "samples": sum(r["samples"] for r in rows),
            "sps": run_dir.samples_per_second(rows),
            "step_s": st.median(r["step_seconds"] for r in stdy),
            "bubble": st.median(r["bubble_fraction"] for r in stdy),
            "dp_wait_s": st.median(r["dp_wait_s"] for r in stdy),
            "busy_spread_s": st.median(max(b) - min(b) for b in busy)}


def _ablation_sim(path, warmup):
    j = _load(path)["steps"]
    return {"sps": run_dir.samples_per_second(j),
            "step_s": st.median(r["step_seconds"] for r in j[warmup:] or j)}


def ablation_measured(out, reps, warmup, load_before, load_after, rules_arg, *name_rows):
    """ablation_measured.sh: per row and configuration, samples/s over the whole run, the steady
    step median, bubble, dp_wait and the DP busy spread (median (min-max) over REPS runs), beside
    the simulator's samples/s; writes OUT/result.<rows>.json."""
    reps, warmup = int(reps), int(warmup)
    rules = {}  # split "[6, 4]" -> the rules that give it
    for kv in rules_arg.split():
        k, v = kv.split("=")
        rules.setdefault("[" + v.replace(",", ", ") + "]", []).append(k)
    row_of = dict(a.split("=") for a in name_rows)
    names = list(row_of)
    cfg = {}
    for n in names:
        s = run_dir.summary(f"{out}/{n}.1")
        cfg[n] = {"partition": s["partition"], "recomputed": s["recomputed_per_stage"],
                  "method": s["balance_method"]}
    res = {n: [_ablation_run(f"{out}/{n}.{k}", warmup) for k in range(1, reps + 1)]
           for n in names}
    sims = {n: _ablation_sim(f"{out}/{n}.sim.json", warmup) for n in names}
    med = lambda n, k: st.median(r[k] for r in res[n])
    rng = lambda n, k, d: _span([r[k] for r in res[n]], d, "–")
    rows = {}
    for n in names:
        rows.setdefault(row_of[n], []).append(n)
    ref = {"data": "dp2-random",
           "model": "split-" + rules_arg.split()[0].split("=")[1].replace(",", "-"),
           "memory": "mem-full", "combined": "baseline"}
    print(f"load average before {load_before}, after {load_after}; {reps} interleaved runs each, "
          f"medians (min–max); steady = steps >= {warmup}")
    print("| row | configuration | split / recomputed | samples | samples/s | vs row ref. | "
          "step s (steady) | bubble | dp_wait s | DP busy spread s | simulated samples/s | "
          "sim. ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    summary = {}
    for row, ns in rows.items():
        r0 = ref[row] if ref[row] in ns else ns[0]
        for n in ns:
            c = cfg[n]
            ratio = med(n, "sps") / med(r0, "sps")
            sratio = sims[n]["sps"] / sims[r0]["sps"]
            summary[n] = {"row": row, **c, "sps": med(n, "sps"), "ratio": ratio,
                          "step_s": med(n, "step_s"), "dp_wait_s": med(n, "dp_wait_s"),
                          "busy_spread_s": med(n, "busy_spread_s"), "sim_sps": sims[n]["sps"],
                          "sim_ratio": sratio, "runs": res[n]}
            label = n + (f" ({', '.join(rules[c['partition']])})"
                         if row == "model" and c["partition"] in rules else "")
            print(f"| {row} | {label} | {c['partition']} / {c['recomputed']} | "
                  f"{res[n][0]['samples']} | {rng(n, 'sps', 1)} | {ratio:.2f}x | "
                  f"{rng(n, 'step_s', 3)} | {med(n, 'bubble'):.3f} | {med(n, 'dp_wait_s'):.4f} | "
                  f"{med(n, 'busy_spread_s'):.4f} | {sims[n]['sps']:.1f} | {sratio:.2f}x |")
    with open(f"{out}/result.{'-'.join(rows)}.json", "w") as f:
        json.dump({"load_before": load_before, "load_after": load_after, "reps": reps,
                   "configs": summary}, f, indent=1)


def ablation_schedules(path):
    """ablation_schedules.sh: the rows of `omnibal-plan partition --schedule all` as a table;
    checks that every row's components add up to its epoch time."""
    r = _load(path)
    print("\n| row | schedule | epoch s | speed-up | bubble | peak GB | d_padding | d_dp_wait | "
          "d_bubble | d_recompute | d_other | split / recomputed blocks per chunk |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in r["rows"]:
        b = row["breakdown"]
        v = f" v={row['virtual_stages']}" if row["virtual_stages"] > 1 else ""
        rc = ",".join(str(x) for x in row["recomputed_blocks"])
        print(f"| {row['name']} | {row['schedule']}{v} | {row['epoch_seconds']:.1f} | "
              f"{row['speedup']:.2f}x | {row['bubble_fraction']:.3f} | "
              f"{row['peak_memory_gb']:.1f} | {b['padding_s']:.1f} | {b['dp_wait_s']:.1f} | "
              f"{b['bubble_s']:.1f} | {b['recompute_s']:.1f} | {b['other_s']:.1f} | "
              f"{row['partition']} / [{rc}]{'' if row['fits'] else ' OVER BUDGET'} |")
        c = row["components"]
        total = sum(c[k] for k in ("useful_s", "padding_s", "recompute_s", "tp_comm_s",
                                   "bubble_s", "dp_wait_s", "comm_s"))
        assert abs(total - row["epoch_seconds"]) < 1e-6 * row["epoch_seconds"], row["name"]
    for e in r.get("schedule_errors", []):
        print(f"\nnot planned: {e}")


def ablation_tp(out):
    """ablation_tp.sh: the first four rows at TP 1, 2 and 4 (OUT/tp{1,2,4}.json)."""
    runs = {tp: _load(f"{out}/tp{tp}.json") for tp in (1, 2, 4)}
    base = runs[1]["rows"][0]["epoch_seconds"]
    print("\n| tp x dp x pp | row | epoch s | GPU days | vs tp 1 baseline | speed-up in its tp | "
          "tp_comm s | peak GB | split / recomputed blocks |")
    print("|---|---|---|---|---|---|---|---|---|")
    for tp, r in runs.items():
        c = r["config"]
        for row in r["rows"][:4]:
            rc = ",".join(str(x) for x in row["recomputed_blocks"])
            print(f"| {tp} x {c['dp']} x {c['pp']} | {row['name']} | "
                  f"{row['epoch_seconds']:.1f} | {row['gpu_days']:.2f} | "
                  f"{base / row['epoch_seconds']:.2f}x | {row['speedup']:.2f}x | "
                  f"{row['components']['tp_comm_s']:.1f} | {row['peak_memory_gb']:.1f} | "
                  f"{row['partition']} / [{rc}]{'' if row['fits'] else ' OVER BUDGET'} |")


def balance(out, reps):
    """balance_bench.sh: per input, the packing figures and the phase times in ms (median
    (min–max) over OUT/NAME.REP.json)."""
    reps = int(reps)
    print("| input | samples/pack | dist ViT | dist LLM | ISF pack ms | placement+metrics ms | "
          "search ms |")
    print("|---|---|---|---|---|---|---|")
    for name in ["shared", "1.27M", "1.27M-full-search", "Q=9"]:
        rows = [_load(f"{out}/{name}.{r}.json")["results"][0] for r in range(1, reps + 1)]

        def cell(key):
            v = [r.get(key, 0.0) for r in rows]
            if not any(v):
                return "—"
            return f"{1e3*st.median(v):.1f} ({1e3*min(v):.1f}–{1e3*max(v):.1f})"

        r0 = rows[0]
        print(f"| {name} ({r0['samples']:,}) | {r0['samples_per_pack']:.3f} | "
              f"{r0['dist_ratio_vit']:.5f} | {r0['dist_ratio_llm']:.5f} | "
              f"{cell('pack_seconds')} | {cell('place_seconds')} | {cell('search_seconds')} |")


def model_pair(timings, a, b):
    """model_bench_pair.sh: per preset and dtype, the median over rounds of each binary's median
    step time and B / A (TIMINGS: lines `WHICH PRESET DTYPE ROUND TIMING_JSON`)."""
    rows = {}
    with open(timings) as f:
        for line in f:
            which, preset, dtype, _, js = line.split(" ", 4)
            rows.setdefault((preset, dtype, which), []).append(json.loads(js)["step_s_median"])
    print(f"A = {a}\nB = {b}")
    print("| preset | dtype | A s/step (min-max) | B s/step (min-max) | B / A |")
    print("|---|---|---:|---:|---:|")
    for preset in ("tiny", "base-100m"):
        for dtype in ("fp32", "bf16"):
            ra, rb = rows[(preset, dtype, "A")], rows[(preset, dtype, "B")]
            ma, mb = st.median(ra), st.median(rb)
            print(f"| {preset} | {dtype} | {_span(ra, 3)} | {_span(rb, 3)} | {mb / ma:.2f} |")


def omnibal_vs_baseline(out, reps, warmup, omni_steps):
    """omnibal_vs_baseline.sh: samples/s (whole run, steady), steady step time and bubble per
    configuration, the ratio of the medians and per interleaved pair, and the simulator's
    prediction; writes OUT/result.json."""
    reps, warmup, omni_steps = int(reps), int(warmup), int(omni_steps)

    def run(d):
        rows = run_dir.metrics(d)
        stdy = run_dir.steady(rows, warmup)
        return {"samples": sum(r["samples"] for r in rows),
                "seconds": sum(r["step_seconds"] for r in rows),
                "sps": run_dir.samples_per_second(rows),
                "steady_sps": run_dir.samples_per_second(stdy),
                "step_s": st.median(r["step_seconds"] for r in stdy),
                "bubble": st.median(r["bubble_fraction"] for r in stdy)}

    res = {name: [run(f"{out}/{name}.{k}") for k in range(1, reps + 1)]
           for name in ("baseline", "omnibal")}
    print(f"{'config':<10} {'samples':>8} {'samples/s, whole run':>22} {'samples/s, steady':>22} "
          f"{'step s (steady)':>22} {'bubble':>6}")
    for name, runs in res.items():
        print(f"{name:<10} {runs[0]['samples']:>8} {_span([r['sps'] for r in runs]):>22} "
              f"{_span([r['steady_sps'] for r in runs]):>22} "
              f"{_span([r['step_s'] for r in runs], 3):>22} "
              f"{st.median(r['bubble'] for r in runs):>6.3f}")
    ratio = (st.median(r["sps"] for r in res["omnibal"])
             / st.median(r["sps"] for r in res["baseline"]))
    pairs = [o["sps"] / b["sps"] for o, b in zip(res["omnibal"], res["baseline"])]
    print(f"OmniBal / baseline samples/s (ratio of medians, whole runs): {ratio:.2f}x; "
          f"per interleaved pair: {_span(pairs)}")

    def predicted(name, steps):
        return run_dir.samples_per_second(_load(f"{out}/{name}.plan.json")["steps"][:steps])

    pb, po = predicted("baseline", 10**9), predicted("omnibal", omni_steps)
    print(f"simulator (profiled table alone, same packs): baseline {pb:.2f}, OmniBal {po:.2f} "
          f"samples/s, ratio {po / pb:.2f}x")
    with open(f"{out}/result.json", "w") as f:
        json.dump({"runs": res, "ratio": ratio, "pair_ratios": pairs, "predicted_ratio": po / pb},
                  f, indent=1)


def planner_startup(reps, data, *bins):
    """planner_startup.sh: `omnibal-plan data --search` on the three shared length files, REPS
    runs of each binary interleaved; per binary the median wall time (min-max) and peak RSS."""
    reps = int(reps)
    files = [f"{data}/{n}_wh_token_lengths.json" for n in
             ("ai2d_train_12k", "chartqa_train_18k", "docvqa_train_10k")]
    for f in files:
        if not os.path.isfile(f):
            sys.exit(f"planner_startup: {f} is missing (set OMNIBAL_SHARED_DATA)")
    args = ["data", "--lengths", *files, "--dp", "8", "--samples-per-pack", "4", "--search"]
    print("load average before:", " ".join(open("/proc/loadavg").read().split()[:3]))
    wall = {b: [] for b in bins}
    rss = {b: 0 for b in bins}
    for _ in range(reps):
        for b in bins:
            t0 = time.perf_counter()
            pid = os.fork()
            if pid == 0:
                fd = os.open(os.devnull, os.O_WRONLY)
                os.dup2(fd, 1)
                os.execv(b, [b, *args])
            _, status, usage = os.wait4(pid, 0)
            wall[b].append(time.perf_counter() - t0)
            if status != 0:
                sys.exit(f"planner_startup: {b} exited with status {status}")
            rss[b] = max(rss[b], usage.ru_maxrss)
    for b in bins:
        w = wall[b]
        print(f"{b}: median {1e3 * st.median(w):.1f} ms ({1e3 * min(w):.1f}-{1e3 * max(w):.1f}), "
              f"peak RSS {rss[b] / 1024:.1f} MB, {reps} runs")
    print("load average after:", " ".join(open("/proc/loadavg").read().split()[:3]))


def precision(out, reps, *precisions):
    """precision_bench.sh: per precision and ZeRO-1 setting, the median s/step (each run's first
    step left out), peak RSS, optimizer state and final loss over OUT/PREC-zero1-Z-REP."""
    reps = int(reps)
    print(f"base-100m, DP 2 x PP 1, m 2, 2 ranks on this machine; {reps} interleaved repetitions")
    print(f"{'precision':<10}{'zero1':<7}{'s/step (median)':>17}{'peak RSS MiB':>14}"
          f"{'opt. state MiB':>16}{'final loss':>12}")
    for prec in precisions:
        for z in ("false", "true"):
            secs, rss, state, loss = [], [], [], []
            for rep in range(1, reps + 1):
                d = os.path.join(out, f"{prec}-zero1-{z}-{rep}")
                secs += run_dir.step_seconds(d, skip_first=1)
                s = run_dir.summary(d)
                rss.append(s["peak_rss_mib_max_rank"])
                state.append(s["optimizer_state_mib_max_rank"])
                loss.append(s["final_loss"])
            print(f"{prec:<10}{z:<7}{st.median(secs):>17.2f}{st.median(rss):>14.0f}"
                  f"{st.median(state):>16.1f}{st.median(loss):>12.4f}")


def _sim_median(path, warmup):
    return st.median(s["step_seconds"] for s in _load(path)["steps"] if s["step"] >= warmup)


def schedules(out, warmup, reps, *names):
    """schedule_bench.sh: per schedule the median over rounds of the steady median step time,
    samples/s and both simulated step times with their error, then the rank orders; writes
    OUT/schedules.json."""
    warmup, reps = int(warmup), int(reps)
    rows = []
    for name in names:
        measured, raw, full = [], [], []
        for rep in range(1, reps + 1):
            d = f"{out}/{name}-{rep}"
            steps = run_dir.steady(run_dir.metrics(d), warmup)
            measured.append(st.median(r["step_seconds"] for r in steps))
            samples = st.mean(r["samples"] for r in steps)
            raw.append(_sim_median(f"{d}.raw.sim.json", warmup))
            full.append(_sim_median(f"{d}.sim.json", warmup))
            split = run_dir.summary(d)["partition"]
        rows.append({"schedule": name, "partition": split, "samples_per_step": samples,
                     "measured_s": st.median(measured), "measured_runs_s": measured,
                     "simulated_raw_s": st.median(raw), "simulated_s": st.median(full)})
    print(f"{'schedule':<12} {'split':<14} {'samples/step':>12} {'measured s':>10} "
          f"{'samples/s':>9} {'sim table s':>11} {'err':>6} {'sim +host s':>11} {'err':>6}  "
          "runs (s)")
    for r in rows:
        me = r["measured_s"]
        print(f"{r['schedule']:<12} {str(r['partition']):<14} {r['samples_per_step']:>12.1f} "
              f"{me:>10.3f} {r['samples_per_step'] / me:>9.1f} {r['simulated_raw_s']:>11.3f} "
              f"{100 * (r['simulated_raw_s'] / me - 1):>+5.1f}% {r['simulated_s']:>11.3f} "
              f"{100 * (r['simulated_s'] / me - 1):>+5.1f}%  "
              f"{' '.join(f'{x:.3f}' for x in r['measured_runs_s'])}")
    for key, label in (("simulated_raw_s", "profiled table alone"),
                       ("simulated_s", "with host overheads")):
        om = [r["schedule"] for r in sorted(rows, key=lambda r: r["measured_s"])]
        os_ = [r["schedule"] for r in sorted(rows, key=lambda r: r[key])]
        print(f"fastest first, measured: {' < '.join(om)}; simulated ({label}): "
              f"{' < '.join(os_)}: {'same order' if om == os_ else 'order differs'}")
    with open(f"{out}/schedules.json", "w") as f:
        json.dump(rows, f, indent=1)


def tp(out, reps, warm, lat, gbps):
    """tp_bench.sh: TP 1 vs TP 2 step time (records after the first WARM of each run), the TP
    all-reduce time, final losses, and the simulator's TP 2 prediction with and without host
    overheads."""
    reps, warm = int(reps), int(warm)
    med = st.median
    rep_range = range(1, reps + 1)
    t1 = [s for r in rep_range for s in run_dir.step_seconds(f"{out}/tp1-{r}", skip_first=warm)]
    t2 = [s for r in rep_range for s in run_dir.step_seconds(f"{out}/tp2-{r}", skip_first=warm)]
    ar = [run_dir.summary(f"{out}/tp2-{r}")["tp_all_reduce_s_per_step_max_rank"]
          for r in rep_range]
    sim, tpc, raw = [], [], []
    for r in rep_range:
        s = _load(f"{out}/tp2-{r}.raw.sim.json")
        raw += [x["step_seconds"] for x in s["steps"] if x["step"] >= warm]
        s = _load(f"{out}/tp2-{r}.sim.json")
        sim += [x["step_seconds"] for x in s["steps"] if x["step"] >= warm]
        tpc += [x["tp_comm_seconds"] for x in s["steps"] if x["step"] >= warm]
    l1 = [run_dir.summary(f"{out}/tp1-{r}")["final_loss"] for r in rep_range]
    l2 = [run_dir.summary(f"{out}/tp2-{r}")["final_loss"] for r in rep_range]
    print(f"base-100m, PP 1 x DP 1, m 2, fp32; {reps} interleaved repetitions, steps >= {warm}")
    print(f"  tp 1 (1 rank x 2 threads): {med(t1):.3f} s/step   final loss {med(l1):.5f}")
    print(f"  tp 2 (2 ranks x 1 thread): {med(t2):.3f} s/step   final loss {med(l2):.5f}"
          f"   TP all-reduces {med(ar):.3f} s/step ({100 * med(ar) / med(t2):.0f} %)")
    print(f"  tp 2 / tp 1 step time: {med(t2) / med(t1):.2f}")
    print(f"  simulator, tp 2 (profiled TP 2 table, link {gbps} GB/s + {lat} us per all-reduce, "
          f"held-out host overheads): {med(sim):.3f} s/step, "
          f"{100 * (med(sim) / med(t2) - 1):+.1f} % vs measured; its TP all-reduce time "
          f"{med(tpc):.3f} s/step")
    print(f"  simulator, tp 2, the profiled table and link alone (no host overheads): "
          f"{med(raw):.3f} s/step, {100 * (med(raw) / med(t2) - 1):+.1f} %")


COMMANDS = {
    "plan-row": plan_row, "ablation-plan": ablation_plan, "ablation-steps": ablation_steps,
    "equal-sample-steps": equal_sample_steps, "scan-meta": scan_meta,
    "ablation-measured": ablation_measured, "ablation-schedules": ablation_schedules,
    "ablation-tp": ablation_tp, "balance": balance, "model-pair": model_pair,
    "omnibal-vs-baseline": omnibal_vs_baseline, "planner-startup": planner_startup,
    "precision": precision, "schedules": schedules, "tp": tp,
}


if __name__ == "__main__":
    run_dir.run_command(COMMANDS, sys.argv[1:], "report", __doc__)
