#!/usr/bin/env python3
"""scripts/bench/run_dir.py, the bench scripts' one reader of run directories, and the
report.py steps built on it.

    run_dir_test.py                      a handcrafted run directory with known values
    run_dir_test.py --bin omnibal-train --mpiexec mpiexec --data DEMO --work DIR
                                         a real 3-step PP 2 run of the tiny preset, read back

Handcrafted: every reader function and CLI command against values worked out by hand
(medians, samples/s, skips, the console log's recomputed units), the errors naming the file,
and report.py's plan-row, equal-sample-steps, ablation-plan and precision table. Real: what the
trainer writes parses and agrees with itself (metrics steps vs summary.json, summed samples,
the split in summary.json vs stage_plan.json, the recomputed units of the console line vs
stage_plan.json, a trace file with forward and backward spans). Prints PASS; Python 3 standard
library only.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "scripts", "bench")
sys.path.insert(0, BENCH)
import run_dir  # noqa: E402  (scripts/bench, above)


def check(cond, what):
    if not cond:
        sys.exit(f"FAIL: {what}")


def close(a, b, what):
    check(abs(a - b) <= 1e-12 * max(1.0, abs(b)), f"{what}: {a!r}, expected {b!r}")


def cli(script, *args, ok=True):
    p = subprocess.run([sys.executable, os.path.join(BENCH, script), *args],
                       capture_output=True, text=True)
    check((p.returncode == 0) == ok, f"{script} {' '.join(args)}: exit {p.returncode} "
          f"({p.stderr.strip()})")
    return p.stdout if ok else p.stderr


def step(n, seconds, samples, busy):
    return {"step": n, "loss": 5.0 - n, "samples": samples, "step_seconds": seconds,
            "bubble_fraction": 0.1 * (n + 1), "dp_wait_s": 0.01 * n,
            "stages": [{"forward_s": seconds / 3, "backward_s": seconds / 2, "idle_s": 0.0}],
            "dp_ranks": [{"tiles": 10, "tokens": 100, "busy_s": b} for b in busy]}


# Step seconds 2.0, 1.0, 1.5, 0.7 with 8, 10, 12, 10 samples.
STEPS = [step(0, 2.0, 8, [1.0, 1.5]), step(1, 1.0, 10, [0.8, 0.9]),
         step(2, 1.5, 12, [1.2, 1.2]), step(3, 0.7, 10, [0.5, 0.6])]
LOG = ("[omnibal] data: 40 packs, budgets Q_v 61 Q_t 1024, plan hash 0123456789abcdef\n"
       "[omnibal] stage plan (0.01 s): split [6, 4], recompute {stage 0: vit_block_0, "
       "vit_block_1 (1.0 MiB predicted); stage 1: llm_block_3 (2.0 MiB predicted)}\n")


def write_fixture(root):
    run = os.path.join(root, "run")
    os.makedirs(os.path.join(run, "trace"))
    with open(os.path.join(run, "metrics.jsonl"), "w") as f:
        f.write(json.dumps(STEPS[0]) + "\n\n" + "".join(json.dumps(s) + "\n" for s in STEPS[1:]))
    with open(os.path.join(run, "eval.jsonl"), "w") as f:
        f.write(json.dumps({"step": 4, "overall": {"exact_match": 0.25}, "tasks": {}}) + "\n")
    with open(os.path.join(run, "summary.json"), "w") as f:
        json.dump({"steps": 4, "partition": "[6, 4]", "recomputed_per_stage": [2, 1],
                   "final_loss": 2.0, "peak_rss_mib_max_rank": 512.0,
                   "optimizer_state_mib_max_rank": 3.5}, f)
    with open(os.path.join(run, "stage_plan.json"), "w") as f:
        json.dump({"partition": [6, 4], "recompute": ["vit_block_0", "vit_block_1", "llm_block_3"],
                   "candidates": [{"partition": [6, 4]}, {"partition": [5, 5]}],
                   "full_bytes": [2 * 2**30, 2**30], "none_bytes": [4 * 2**30, 2**30]}, f)
    with open(os.path.join(run, "trace", "step-2.json"), "w") as f:
        json.dump({"traceEvents": [{"ph": "M", "name": "process_name"},
                                   {"ph": "X", "name": "forward", "pid": 0, "tid": 0, "ts": 0,
                                    "dur": 5}]}, f)
    with open(run + ".log", "w") as f:
        f.write(LOG)
    with open(run + ".steal", "w") as f:
        f.write("0.75\n")
    return run


def handcrafted():
    with tempfile.TemporaryDirectory() as root:
        run = write_fixture(root)
        rows = run_dir.metrics(run)
        check([r["step"] for r in rows] == [0, 1, 2, 3], f"metrics steps {rows}")
        check(sorted(run_dir.metrics_by_step(run)) == [0, 1, 2, 3], "metrics_by_step")
        check([r["step"] for r in run_dir.steady(rows, 2)] == [2, 3], "steady(2)")
        check(run_dir.steady(rows, 9) == [], "steady past the end is empty")
        check(len(run_dir.steady(rows, 9, fallback=True)) == 4, "steady fallback: all rows")
        check(run_dir.step_seconds(run) == [2.0, 1.0, 1.5, 0.7], "step_seconds")
        check(run_dir.step_seconds(run, skip_first=1) == [1.0, 1.5, 0.7], "skip_first 1")
        close(run_dir.median_step_seconds(run), 1.25, "median of all steps")
        close(run_dir.median_step_seconds(run, skip_first=1), 1.0, "median after skip 1")
        close(run_dir.median_step_seconds(run, warmup=2), 1.1, "median of steps >= 2")
        close(run_dir.samples_per_second(rows), 40 / 5.2, "samples/s")
        check(run_dir.summary(run)["partition"] == "[6, 4]", "summary partition")
        check(run_dir.stage_plan(run)["partition"] == [6, 4], "stage plan partition")
        check(run_dir.evals(run)[0]["overall"]["exact_match"] == 0.25, "eval.jsonl")
        traces = run_dir.trace_files(run)
        check(list(traces) == [2], f"trace files {traces}")
        check([e["name"] for e in run_dir.trace_events(traces[2])] == ["forward"], "trace events")
        close(run_dir.steal_percent(run), 0.75, "RUN.steal")
        check(run_dir.steal_percent(os.path.join(root, "none")) is None, "no RUN.steal: None")
        log = run_dir.console_log(run)
        check(run_dir.plan_hash(log) == "0123456789abcdef", "plan hash")
        check(run_dir.recomputed_units(log) == ["vit_block_0", "vit_block_1", "llm_block_3"],
              "recomputed units")
        check(run_dir.recompute_line(log).startswith("recompute {stage 0: vit_block_0"),
              "recompute line")
        check(run_dir.format_value([2, 1]) == "2, 1" and run_dir.format_value(4) == "4",
              "format_value")
        errors(root, run)
        commands(root, run)


def errors(root, run):
    """A missing file and a broken line are named."""
    try:
        run_dir.summary(root)
        check(False, "summary of a folder without summary.json must fail")
    except run_dir.RunDirError as e:
        check("summary.json: missing" in str(e), f"missing summary message: {e}")
    bad = os.path.join(root, "bad")
    os.makedirs(bad)
    with open(os.path.join(bad, "metrics.jsonl"), "w") as f:
        f.write(json.dumps(STEPS[0]) + "\n{not json\n")
    try:
        run_dir.metrics(bad)
        check(False, "a broken metrics line must fail")
    except run_dir.RunDirError as e:
        check("metrics.jsonl:2: not JSON" in str(e), f"broken line message: {e}")
    err = cli("run_dir.py", "median-step-seconds", bad, ok=False)
    check("metrics.jsonl:2" in err, f"CLI error names the line: {err}")


def commands(root, run):
    """The CLI the shell scripts call, and report.py on the fixture."""
    out = cli("run_dir.py", "median-step-seconds", run, run, "--skip", "1").split()
    check(out == ["1.0", "1.0"], f"median-step-seconds --skip 1: {out}")
    close(float(cli("run_dir.py", "median-step-seconds", run, "--warmup", "2")), 1.1,
          "median-step-seconds --warmup 2")
    check(cli("run_dir.py", "summary", run, "--key", "recomputed_per_stage") == "2, 1\n",
          "summary --key recomputed_per_stage")
    check(cli("run_dir.py", "summary", run, "--key", "partition") == "[6, 4]\n",
          "summary --key partition")
    check(cli("run_dir.py", "stage-plan", run, "--key", "partition") == "6, 4\n",
          "stage-plan --key partition")
    check("no key 'nope'" in cli("run_dir.py", "summary", run, "--key", "nope", ok=False),
          "an unknown key is named")
    check(cli("run_dir.py", "recompute-units", run + ".log", run + ".log") ==
          "vit_block_0,vit_block_1,llm_block_3\n" * 2, "recompute-units")
    plan = os.path.join(root, "plan.json")
    with open(plan, "w") as f:
        json.dump({"rows": [{}, {}, {"partition": [6, 4]},
                            {"partition": [5, 5], "recomputed_blocks": [0, 0]}]}, f)
    check(cli("report.py", "plan-row", plan, "3", "recomputed_blocks") == "0, 0\n", "plan-row")
    sim = os.path.join(root, "sim.json")
    with open(sim, "w") as f:
        json.dump({"steps": [{"samples": s} for s in (30, 30, 10)]}, f)
    check(cli("report.py", "equal-sample-steps", sim, "2") == "3\n", "64 samples: 3 steps")
    check(cli("report.py", "equal-sample-steps", sim, "1") == "2\n", "32 samples: 2 steps")
    check(cli("report.py", "equal-sample-steps", sim, "9") == "3\n", "never reached: all")
    # Budget halfway between full (2 GiB) and none (4 GiB) of the larger stage: 3 GiB.
    check(cli("report.py", "ablation-plan", run) == "6,4 6,4;5,5 3.000000\n", "ablation-plan")
    precision_table(root)


def precision_table(root):
    """report.py precision: medians over runs, each run's first step left out."""
    for rep, secs in ((1, [9.0, 1.0, 2.0]), (2, [9.0, 3.0, 4.0])):
        d = os.path.join(root, "prec", f"fp32-zero1-false-{rep}")
        d2 = os.path.join(root, "prec", f"fp32-zero1-true-{rep}")
        for path in (d, d2):
            os.makedirs(path)
            with open(os.path.join(path, "metrics.jsonl"), "w") as f:
                f.writelines(json.dumps(step(i, s, 4, [s])) + "\n" for i, s in enumerate(secs))
            with open(os.path.join(path, "summary.json"), "w") as f:
                json.dump({"peak_rss_mib_max_rank": 100.0 * rep,
                           "optimizer_state_mib_max_rank": 2.0, "final_loss": 1.5 + rep}, f)
    lines = cli("report.py", "precision", os.path.join(root, "prec"), "2", "fp32").splitlines()
    check(lines[2].split() == ["fp32", "false", "2.50", "150", "2.0", "3.0000"],
          f"precision row: {lines}")


def real(a):
    """One 3-step PP 2 run (full recomputation, step 1 traced), read back."""
    work = os.path.abspath(a.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    run = os.path.join(work, "pp2")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    sets = {"model.preset": "tiny", "data.meta": f"{a.data}/train_meta.json",
            "data.tokenizer": f"{a.data}/tokenizer.model", "data.eval_meta": "",
            "data.max_tiles": "12", "data.workers": "1", "balance.samples_per_pack": "6",
            "parallel.dp": "1", "parallel.pp": "2", "parallel.micro_batches": "2",
            "parallel.partition": "uniform", "memory.recompute": "full", "train.steps": "3",
            "train.eval_every": "0", "train.checkpoint_every": "0", "runtime.threads": "1",
            "runtime.trace_steps": "[1]", "runtime.run_dir": run, "comm.timeout_s": "60"}
    cmd = [a.mpiexec, "-np", "2", "--oversubscribe", "--bind-to", "none", a.bin,
           "--config", os.path.join(ROOT, "configs", "demo.yaml")]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    with open(run + ".log", "w") as log:
        p = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=300)
    check(p.returncode == 0, f"omnibal-train exited {p.returncode}; see {run}.log")
    rows = run_dir.metrics(run)
    s = run_dir.summary(run)
    plan = run_dir.stage_plan(run)
    check([r["step"] for r in rows] == [0, 1, 2], f"metrics steps {[r['step'] for r in rows]}")
    check(s["steps"] == 3, f"summary steps {s['steps']}")
    check(sum(r["samples"] for r in rows) == s["samples"],
          f"summed samples {sum(r['samples'] for r in rows)} vs summary {s['samples']}")
    check(all(len(r["stages"]) == 2 and len(r["dp_ranks"]) == 1 for r in rows), "2 stages, 1 DP")
    close(run_dir.median_step_seconds(run, skip_first=1),
          statistics.median(r["step_seconds"] for r in rows[1:]), "median step seconds")
    check(s["partition"] == "[" + run_dir.format_value(plan["partition"]) + "]",
          f"split: summary {s['partition']}, stage plan {plan['partition']}")
    log = run_dir.console_log(run)
    units = run_dir.recomputed_units(log)
    check(units and units == [u for u in plan["recompute"] if re.fullmatch(r"\w+_block_\d+", u)],
          f"recomputed units: log {units}, stage plan {plan['recompute']}")
    check(re.fullmatch(r"[0-9a-f]{16}", run_dir.plan_hash(log)), "plan hash")
    traces = run_dir.trace_files(run)
    check(list(traces) == [1], f"trace files {traces}")
    names = {e["name"] for e in run_dir.trace_events(traces[1])}
    check({"forward", "backward"} <= names, f"trace span names {sorted(names)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", help="omnibal-train (with --mpiexec, --data, --work: a real run)")
    ap.add_argument("--mpiexec")
    ap.add_argument("--data", help="a demo set (scripts/make_demo_data.sh)")
    ap.add_argument("--work", help="where the real run goes (emptied first)")
    a = ap.parse_args()
    if a.bin:
        missing = [f"--{k}" for k in ("mpiexec", "data", "work") if not getattr(a, k)]
        check(not missing, f"--bin needs {', '.join(missing)}")
        real(a)
    else:
        handcrafted()
    print("PASS")


if __name__ == "__main__":
    main()
