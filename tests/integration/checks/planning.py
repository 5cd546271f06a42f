"""Start-up stage planning: parallel.partition balanced (cost tables, partition trials, start-up
profiling), memory.recompute adaptive, the plan in checkpoints and parallel.plan_from, bad
planning keys, SIGTERM during the trials."""
import json
import os
import shutil
import signal
import subprocess
import threading
import time

from . import check
from .harness import ENV, fail, log_value, refusal
from .results import check_predicted, metrics, same_training, stage_plan


TINY_UNITS = (["vit_embed", "vit_block.0", "vit_block.1", "projector", "llm_embed"]
              + [f"llm_block.{i}" for i in range(4)] + ["head"])
KINDS = {"vit_embed": "vit_embed", "projector": "projector", "llm_embed": "llm_embed",
         "head": "head"}


def write_table(path, heavy, model="tiny"):
    """A hand-made tiny cost table: units of kind `heavy` take 100 s forward, all others 1 s
    (backward 2x), at a load of 32 tiles / 224 tokens. The trainer scales ViT units by tiles and
    LLM units by tokens to its own pack load (46 / 498 on the test split), which moves a 10x
    table's pick; at 100x the pick is scale-proof: heavy=vit_block gives [2, 8] (one heavy block
    per stage), heavy=llm_block gives [7, 3] (two heavy blocks per stage)."""
    units = []
    for name in TINY_UNITS:
        kind = KINDS.get(name, name.split(".")[0])
        fwd = 100.0 if kind == heavy else 1.0
        units.append({"name": name, "kind": kind, "forward_s": fwd, "backward_s": 2 * fwd,
                      "activation_bytes": 1e6, "parameter_bytes": 4e5, "trainable": True,
                      "output_bytes": 0 if name == "head" else 1e5})
    with open(path, "w") as f:
        json.dump({"format": "omnibal.unit_costs.v1", "model": model, "source": "test",
                   "load": {"tiles": 32, "tokens": 224, "samples": 4}, "units": units}, f)
    return path


def planned(r, run, extra, steps=5, **kw):
    return r.run(2, run, 1, 2, 4, steps=steps, extra=["--set", "parallel.partition=balanced",
                                                      "--set", "parallel.partition_trials=0"]
                  + list(extra), **kw)


@check("partition balanced picks [2, 8] on a heavy-ViT table and trains as manual [2, 8] "
       "bitwise; trials time 4 rounds; start-up profiling plans", cost=34)
def check_plan_balanced(r):
    table = write_table(os.path.join(r.a.work, "heavy-vit.json"), "vit_block")
    _, a = planned(r, "pb-balanced", ["--set", f"parallel.cost_table={table}"])
    p = stage_plan(a)
    if p["partition"] != [2, 8] or p["candidates"][0]["partition"] != [2, 8]:
        fail(f"balanced on the heavy-ViT table chose {p['partition']}, the search predicts [2, 8]")
    _, b = r.run(2, "pb-manual", 1, 2, 4, extra=["--set", "parallel.partition={manual: [2, 8]}"])
    same_training(a, b, "balanced vs manual [2, 8]")
    print(f"balanced picked [2, 8] ({p['partition_source'][:60]}...); 5 steps bitwise equal "
          "to manual [2, 8]")
    # Timed trials of the top 3: the rounds and steps asked for (4 rounds of 2 steps here, to keep
    # the check short); training as under the chosen split.
    proc, c = planned(r, "pb-trials", ["--set", f"parallel.cost_table={table}",
                                       "--set", "parallel.partition_trials=3",
                                       "--set", "parallel.partition_trial_steps=2",
                                       "--set", "parallel.partition_trial_rounds=4"])
    pc = stage_plan(c)
    for cand in pc["candidates"]:
        if len(cand["trial_s"]) != 4:
            fail(f"candidate {cand['partition']} has {len(cand['trial_s'])} timed rounds, not 4")
    line = next((l for l in (proc.stdout + proc.stderr).splitlines() if "partition trials" in l), "")
    if "4 rounds of 1 + 2 steps" not in line or "of 4 rounds" not in line:
        fail(f"partition trials: the log line does not report 4 rounds of 1 + 2 steps: '{line}'")
    print(line.strip()[:300])
    if pc["partition"] == [2, 8]:
        same_training(c, a, "trials vs no trials, same split")
        print("trials kept [2, 8]: training bitwise equal to partition_trials 0")
    else:
        _, d = r.run(2, "pb-trials-manual", 1, 2, 4,
                     extra=["--set", f"parallel.partition={{manual: {pc['partition']}}}"])
        same_training(c, d, f"trials' pick vs manual {pc['partition']}")
        print(f"trials chose {pc['partition']}: training bitwise equal to that manual split")
    # Without a table: profiled at start-up on rank 0, broadcast, the same plan on both ranks.
    proc, e = planned(r, "pb-profiled", [])
    pe = stage_plan(e)
    if pe["partition"] != pe["candidates"][0]["partition"] or "profiled" not in pe["partition_source"]:
        fail(f"profiled plan {pe['partition']} is not the search's pick ({pe['partition_source']})")
    line = next((l for l in (proc.stdout + proc.stderr).splitlines() if "stage plan (" in l), "")
    print(f"start-up profiling: {line.strip()[:200]}")
    # The pack time model comes from the planner's profiled table, and says so.
    line = log_value(proc.stdout + proc.stderr, "data: cost Dist (predicted, ")
    if not line.startswith("start-up profile, scaled"):
        fail(f"profiled run: cost Dist line '{line}' does not name the start-up profile")
    check_predicted(metrics(e), 1, "pb-profiled")
    print(f"cost Dist (predicted, {line}")


@check("memory.recompute adaptive recomputes nothing under 64 GiB and a mixed plan "
       "within a tight budget, training bitwise as recompute none")
def check_plan_adaptive(r):
    fixed = ["--set", "parallel.partition={manual: [5, 5]}"]
    _, none_dir = r.run(2, "pa-none", 1, 2, 4, extra=fixed)
    _, big = r.run(2, "pa-big", 1, 2, 4, extra=fixed + ["--set", "memory.recompute=adaptive",
                                                        "--set", "memory.budget_gb=64"])
    p = stage_plan(big)
    if p["recompute"]:
        fail(f"adaptive under a 64 GiB budget recomputes {p['recompute']}")
    full, none = p["full_bytes"], p["none_bytes"]
    budget = 0.5 * (max(full) + max(none))
    _, tight = r.run(2, "pa-tight", 1, 2, 4, extra=fixed + [
        "--set", "memory.recompute=adaptive", "--set", f"memory.budget_gb={budget / 2**30:.9f}"])
    q = stage_plan(tight)
    blocks = [u for u in q["units"] if "block" in u]
    if not q["recompute"] or len(q["recompute"]) == len(blocks):
        fail(f"budget {budget / 2**20:.2f} MiB gave recompute {q['recompute']}, expected a mixed plan")
    for s, b in enumerate(q["predicted_bytes"]):
        if b > budget:
            fail(f"stage {s}: predicted {b} bytes over the budget {budget}")
    same_training(tight, none_dir, "adaptive (mixed) vs recompute none")
    print(f"budget {budget / 2**20:.2f} MiB (stage peaks none {[round(x / 2**20, 2) for x in none]}, "
          f"full {[round(x / 2**20, 2) for x in full]} MiB): recompute {q['recompute']}; "
          "5 steps bitwise equal to recompute: none")


@check("a resume keeps the checkpoint's stage plan over a new cost table; an explicit "
       "parallel.partition wins over it")
def check_plan_resume(r):
    vit = write_table(os.path.join(r.a.work, "heavy-vit.json"), "vit_block")
    llm = write_table(os.path.join(r.a.work, "heavy-llm.json"), "llm_block")
    _, fresh = planned(r, "pr-llm", ["--set", f"parallel.cost_table={llm}"], steps=2)
    if stage_plan(fresh)["partition"] != [7, 3]:
        fail(f"the heavy-LLM table picks {stage_plan(fresh)['partition']}, expected [7, 3]")
    _, d = planned(r, "pr-run", ["--set", f"parallel.cost_table={vit}"], steps=3)
    if stage_plan(d)["partition"] != [2, 8]:
        fail(f"first run chose {stage_plan(d)['partition']}")
    proc, _ = planned(r, "pr-run", ["--set", f"parallel.cost_table={llm}", "--resume", "auto"],
                      steps=5, fresh=False)
    p = stage_plan(d)
    if p["partition"] != [2, 8] or not p["partition_source"].startswith("checkpoint"):
        fail(f"resume re-planned: {p['partition']} from {p['partition_source']}")
    print(f"resume kept [2, 8] although the new table picks [7, 3] ({p['partition_source'][:70]}...)")
    proc, _ = planned(r, "pr-run", ["--set", "parallel.partition={manual: [3, 7]}",
                                    "--resume", "auto"], steps=6, fresh=False)
    out = proc.stdout + proc.stderr
    if stage_plan(d)["partition"] != [3, 7] or "wins over" not in out:
        print(out[-2000:])
        fail("an explicit parallel.partition on resume did not win over the stored plan")
    line = next(l for l in out.splitlines() if "wins over" in l)
    print(line.strip()[:200])


@check("a missing or other-model cost table, a budget below every plan and "
       "partition_trials -2 are refused naming the key")
def check_plan_bad_config(r):
    other = write_table(os.path.join(r.a.work, "other-model.json"), "vit_block", model="base-100m")
    cases = [(["--set", "parallel.cost_table=/nonexistent/costs.json"], "parallel.cost_table"),
             (["--set", f"parallel.cost_table={other}"], "model.preset"),
             (["--set", "parallel.partition={manual: [5, 5]}", "--set", "memory.recompute=adaptive",
               "--set", "memory.budget_gb=0.0001"], "memory.budget_gb"),
             (["--set", "parallel.partition_trials=-2"], "partition_trials")]
    for extra, needle in cases:
        args, _ = r.cmd(2, "bad-plan", 1, 2, 4)
        args += ["--set", "parallel.partition=balanced"] + extra
        p = subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=120)
        print(f"{' '.join(extra)}: refused ({refusal(p, needle, extra)[:200]})")


@check("SIGTERM to one rank during the partition trials ends every rank with exit 0 "
       "within 10 s, writing nothing")
def check_plan_sigterm(r):
    """SIGTERM to one rank during the start-up partition trials (what Slurm sends before its
    SIGKILL, 30 s later by default) ends the job within seconds: the ranks agree at the next
    trial repeat, every rank exits 0 with the start-up message, and nothing is written (no
    checkpoint, no metrics). The trials asked for would run for minutes."""
    table = write_table(os.path.join(r.a.work, "heavy-vit.json"), "vit_block")
    args, d = r.cmd(2, "ps-sigterm", 1, 2, 4, extra=[
        "--set", "parallel.partition=balanced", "--set", f"parallel.cost_table={table}",
        "--set", "parallel.partition_trials=3", "--set", "parallel.partition_trial_steps=4",
        "--set", "parallel.partition_trial_rounds=200"])
    shutil.rmtree(d, ignore_errors=True)
    p = subprocess.Popen(args, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    lines, planning = [], threading.Event()

    def read():
        for line in p.stdout:
            lines.append(line)
            if "stage plan: stage times at the mean" in line:  # the trials start next
                planning.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if not planning.wait(120):
        p.kill()
        fail("start-up planning did not begin within 120 s:\n" + "".join(lines)[-3000:])
    time.sleep(3)  # well into the trials
    ranks = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True,
                           text=True).stdout.split()
    if len(ranks) != 2:
        p.kill()
        fail(f"found {len(ranks)} rank processes under mpirun, expected 2")
    os.kill(int(ranks[-1]), signal.SIGTERM)  # one rank: the ranks agree on it
    t0 = time.time()
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        fail("the job still ran 60 s after SIGTERM during the partition trials")
    took = time.time() - t0
    reader.join(10)
    out = "".join(lines)
    want = "stopped by a signal during start-up planning (partition trials)"
    if p.returncode != 0 or want not in out:
        print(out[-3000:])
        fail(f"exit {p.returncode}; expected 0 and '{want}'")
    if took > 10:
        fail(f"the job took {took:.1f} s to end after SIGTERM (limit 10 s)")
    if "partition trials (m 4" in out:
        fail("a trial round finished after the signal: the trials did not stop")
    written = [f for f in ("metrics.jsonl", "summary.json", "stage_plan.json")
               if os.path.exists(os.path.join(d, f))]
    ckpts = os.path.join(d, "checkpoints")
    if written or (os.path.isdir(ckpts) and os.listdir(ckpts)):
        fail(f"a stop during start-up wrote {written} / checkpoints")
    print(f"SIGTERM to rank pid {ranks[-1]} during the trials: every rank exited 0 after "
          f"{took:.1f} s, nothing written: "
          + next(l for l in out.splitlines() if want in l).strip()[:200])


@check("under parallel.schedule auto a resume reuses the checkpoint's plan without "
       "profiling or comparing schedules again")
def check_plan_auto_resume(r):
    """parallel.schedule auto: a resume reuses the checkpoint's plan (split and the schedule auto
    picked) without profiling or comparing schedules again, and says so."""
    auto = ["--set", "parallel.schedule=auto"]
    _, d = planned(r, "par-auto", auto, steps=2)
    first = stage_plan(d)
    proc, _ = planned(r, "par-auto", auto + ["--resume", "auto"], steps=4, fresh=False)
    out = proc.stdout + proc.stderr
    line = next((l for l in out.splitlines() if "stage plan: reusing the plan of checkpoint" in l),
                "")
    if not line or "does not fit" in out:
        print(out[-3000:])
        fail("the resume under schedule auto did not reuse the checkpoint's plan")
    if "stage times at the mean" in out or "stage plan: pick margin" in out:
        print(out[-3000:])
        fail("the resume under schedule auto profiled and searched again")
    p = stage_plan(d)
    for key in ("partition", "schedule", "virtual_stages", "recompute"):
        if p[key] != first[key]:
            fail(f"the resumed plan's {key} {p[key]} differs from the first launch's {first[key]}")
    if len(metrics(d)) != 4:
        fail(f"{len(metrics(d))} metric lines after the resume, expected 4")
    print(f"{line.strip()[:220]}; no profile")


@check("parallel.plan_from (a run directory or its file) is reused without profiling or "
       "trials, and by omnibal-plan simulate; a plan of another stage count is refused")
def check_plan_from(r):
    """parallel.plan_from: a run directory's (or a file's) plan is reused as it is, without
    profiling or trials, whatever this run's cost table would pick, and the log names it; a plan
    of another stage count is refused naming the file, its stages and parallel.pp."""
    llm = write_table(os.path.join(r.a.work, "heavy-llm.json"), "llm_block")  # picks [7, 3]
    vit = write_table(os.path.join(r.a.work, "heavy-vit.json"), "vit_block")  # picks [2, 8]
    _, a = planned(r, "pf-source", ["--set", f"parallel.cost_table={llm}"], steps=1)
    if stage_plan(a)["partition"] != [7, 3]:
        fail(f"the heavy-LLM table picks {stage_plan(a)['partition']}, expected [7, 3]")
    trials = ["--set", "parallel.partition_trials=3", "--set", "parallel.partition_trial_steps=1",
              "--set", "parallel.partition_trial_rounds=3"]
    for name, source in [("pf-dir", a), ("pf-file", os.path.join(a, "stage_plan.json"))]:
        proc, b = planned(r, name, ["--set", f"parallel.cost_table={vit}",
                                    "--set", f"parallel.plan_from={source}"] + trials, steps=1)
        out = proc.stdout + proc.stderr
        p = stage_plan(b)
        if p["partition"] != [7, 3] or not p["partition_source"].startswith("parallel.plan_from"):
            fail(f"plan_from {source}: trained on {p['partition']} ({p['partition_source']})")
        if "stage times at the mean" in out or "partition trials (" in out:
            fail(f"plan_from {source}: profiled or ran trials although the plan was given")
        line = log_value(out, "stage plan: reusing the plan of ")
        if "stage_plan.json" not in line:
            fail(f"plan_from {source}: the log does not name the plan's file: '{line}'")
        print(f"plan_from {source}: [7, 3] reused (the run's table would pick [2, 8]): {line[:160]}")
    # omnibal-plan simulate replays the run from its own config.yaml and plan (the data scanned
    # for its lengths), where the balanced split alone is refused naming plan_from.
    d, scan, rep = r.a.data, os.path.join(r.a.work, "pf-scan"), os.path.join(r.a.work, "pf-sim.json")
    shutil.rmtree(scan, ignore_errors=True)
    subprocess.run([r.a.plan, "scan", "--meta", f"{d}/train_meta.json", "--out", scan,
                    "--config", os.path.join(a, "config.yaml"), "--threads", "1"],
                   env=ENV, capture_output=True, text=True, timeout=300, check=True)
    # The run wrote the table it planned with beside its plan: the simulation's cost table.
    table = os.path.join(a, "cost_table.json")
    if not os.path.exists(table):
        fail(f"the run wrote no {table}")
    sim = [r.a.plan, "simulate", "--config", os.path.join(a, "config.yaml"), "--set",
           f"data.meta={scan}/meta.json", "--cost-table-in", table, "--steps", "2"]
    q = subprocess.run(sim, env=ENV, capture_output=True, text=True, timeout=300)
    if q.returncode == 0 or "--set parallel.plan_from=RUN_DIR" not in q.stderr:
        fail(f"simulate of a balanced run without its plan: exit {q.returncode}, {q.stderr[-300:]}")
    q = subprocess.run(sim + ["--set", f"parallel.plan_from={a}", "--json", rep], env=ENV,
                       capture_output=True, text=True, timeout=300)
    if q.returncode != 0:
        fail(f"simulate with the run's plan: exit {q.returncode}: {q.stderr[-500:]}")
    q = subprocess.run(sim + ["--set", f"parallel.plan_from={a}", "--set", "parallel.schedule=zb-v"],
                       env=ENV, capture_output=True, text=True, timeout=300)
    if q.returncode == 0 or "schedule 1f1b vs parallel.schedule zb-v" not in q.stderr:
        fail(f"simulate of a 1f1b plan under parallel.schedule zb-v: exit {q.returncode}, "
             f"{q.stderr[-300:]}")
    with open(rep) as f:
        simulated = json.load(f)
    if simulated["partition"] != "[7, 3]" or len(simulated["steps"]) != 2:
        fail(f"simulate with the run's plan simulated {simulated['partition']}")
    print(f"simulate on the run's config.yaml and plan: [7, 3], median "
          f"{simulated['median_step_seconds']:.4f} s a step")
    p, _ = r.run(1, "pf-pp1", 1, 1, 4, expect_ok=False,
                 extra=["--set", "parallel.partition=balanced", "--set", f"parallel.plan_from={a}"])
    line = refusal(p, "does not fit this run: 2 pipeline stages vs parallel.pp 1",
                   "plan_from of a pp 2 run at pp 1")
    if os.path.join(a, "stage_plan.json") not in line:
        fail(f"the refusal does not name the plan's file: {line}")
    print("refused: " + line[:240])
