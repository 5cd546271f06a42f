"""Bitwise continuation: a resume equals the straight run (dropout on), a resume under another
split, dropout masks under recompute, train.exit_after_steps slots, and train.steps 0."""
import json
import os
import shutil
import subprocess

from . import check
from .harness import DROPOUT, ENV, fail, log_value, refusal
from .results import metrics, rel, summary


def resume_pair(r, extra_resume=(), resume_name="rs-resumed"):
    steps = 6
    _, straight = r.run(4, "rs-straight", 2, 2, 2, steps=steps, extra=DROPOUT)
    ms = metrics(straight)
    epochs = [m["epoch"] for m in ms]
    if not any(epochs[k] != epochs[k - 1] for k in range(3, 6)):
        fail(f"no epoch boundary in the last 3 steps (epochs {epochs})")
    if ms[2]["lr"] >= 2e-3:
        fail("the resume point is not inside LR warm-up")
    # 3 steps, checkpoint at the end, then resume to 6.
    _, first = r.run(4, resume_name, 2, 2, 2, steps=3, extra=DROPOUT)
    return straight, first, ms


@check("dropout 0.1, PP 2 x DP 2: 6 straight steps == 3 + resume + 3 bitwise; a fresh "
       "start over the checkpoints is refused, leaving them untouched", cost=24)
def check_resume(r):
    straight, half, ms = resume_pair(r)
    r.run(4, "rs-resumed", 2, 2, 2, steps=6, fresh=False, extra=DROPOUT + ["--resume", "auto"])
    mr = metrics(half)
    if len(mr) != 6:
        fail(f"resumed run has {len(mr)} metric lines, expected 6")
    for a, b in zip(mr, ms):
        if a["loss"] != b["loss"]:
            fail(f"step {a['step']}: loss {a['loss']!r} after resume vs {b['loss']!r} straight")
    if summary(half)["param_hash"] != summary(straight)["param_hash"]:
        fail("parameter hash differs after resume")
    print("dropout 0.1: 6 straight == 3 + resume + 3: losses and parameter hash bitwise equal "
          f"({summary(straight)['param_hash']})")
    # A fresh start (no --resume) into that run directory is refused: it would prune the
    # earlier run's checkpoints by step number and truncate its metrics.jsonl.
    before = sorted(os.listdir(os.path.join(half, "checkpoints")))
    p, _ = r.run(1, "rs-resumed", 1, 1, 1, steps=2, fresh=False, expect_ok=False)
    line = refusal(p, "already holds checkpoints of an earlier run",
                   "a fresh start in a run directory with checkpoints")
    if sorted(os.listdir(os.path.join(half, "checkpoints"))) != before or len(metrics(half)) != 6:
        fail("the refused fresh start changed the earlier run's checkpoints or metrics")
    print("a fresh start into that run directory is refused, checkpoints and metrics untouched: "
          + line[:160])


@check("a resume at another dp x m or balance.seed is refused naming the key; under "
       "another PP split and DP size it continues within 1e-4", cost=27)
def check_resume_split(r):
    straight, half, ms = resume_pair(r, resume_name="rs-split")
    ckpt = os.path.join(half, "checkpoints", "step-3")
    if not os.path.isdir(ckpt):
        fail(f"missing {ckpt}")
    # DP 1 x m 2 would be another data plan (steps of 2 packs instead of 4): refused, naming
    # the changed key and the product to keep, before anything is written.
    before = len(metrics(half))
    p, _ = r.run(2, "rs-split", 1, 2, 2, steps=6, fresh=False, expect_ok=False,
                 extra=DROPOUT + ["--resume", ckpt])
    line = refusal(p, "the data plan differs from the checkpoint's", "a resume at another dp x m")
    for needle in ("parallel.dp: 2 -> 1", "parallel.micro_batches=4 at parallel.dp=1",
                   "model.init_from"):
        if needle not in p.stderr:
            print(p.stderr[-3000:])
            fail(f"the refusal does not say '{needle}'")
    if len(metrics(half)) != before:
        fail("the refused resume wrote metrics")
    p, _ = r.run(4, "rs-split", 2, 2, 2, steps=6, fresh=False, expect_ok=False,
                 extra=DROPOUT + ["--resume", ckpt, "--set", "balance.seed=7"])
    refusal(p, "balance.seed: 1024 -> 7", "a resume with another balance.seed")
    print("resume at dp 1 x m 2 of a dp 2 x m 2 checkpoint is refused: " + line[:200])
    # The same checkpoint under another PP split (manual 3 + 7 units instead of uniform 5 + 5)
    # and another DP size with the same dp x m.
    r.run(2, "rs-split", 1, 2, 4, steps=6, fresh=False,
          extra=DROPOUT + ["--resume", ckpt, "--set", "parallel.partition={manual: [3, 7]}"])
    mr = metrics(half)
    for a, b in zip(mr[3:], ms[3:]):
        if rel(a["loss"], b["loss"]) > 1e-4:
            fail(f"step {a['step']}: loss {a['loss']} under the other split vs {b['loss']}")
    print("dropout 0.1: resume under PP split [3, 7] at dp 1 m 4 matches the straight run "
          "(dp 2 m 2, split [5, 5]) within 1e-4: masks follow the pack, not the rank")


@check("dropout 0.1 changes the loss and recompute full equals none bitwise at PP 2; "
       "each rank logs its thread plan once")
def check_dropout(r):
    # Dropout on changes the loss (so the checks with dropout on can fail) ...
    p, off = r.run(2, "do-off", 1, 2, 2, steps=3)
    # Start-up log: each rank states its own thread plan once, under its own rank.
    for rank in (0, 1):
        lines = [l for l in p.stderr.splitlines() if l.startswith(f"[rank {rank}] threads ")]
        if len(lines) != 1:
            print(p.stderr[:2000])
            fail(f"expected one '[rank {rank}] threads ...' line at start-up, got {len(lines)}")
    _, on = r.run(2, "do-none", 1, 2, 2, steps=3, extra=DROPOUT)
    a, b = metrics(off), metrics(on)
    if rel(a[0]["loss"], b[0]["loss"]) < 1e-4:
        fail(f"step 0 loss {b[0]['loss']} with dropout 0.1 vs {a[0]['loss']} without: no effect")
    print(f"dropout 0.1 changes the step-0 loss: {a[0]['loss']:.6f} -> {b[0]['loss']:.6f}")
    # ... and activation recomputation regenerates the same masks: full == none, bitwise.
    _, full = r.run(2, "do-full", 1, 2, 2, steps=3,
                    extra=DROPOUT + ["--set", "memory.recompute=full"])
    c = metrics(full)
    for x, y in zip(c, b):
        for key in ("loss", "grad_norm"):
            if x[key] != y[key]:
                fail(f"step {x['step']}: {key} {x[key]!r} with recompute full vs {y[key]!r} none")
    if summary(full)["param_hash"] != summary(on)["param_hash"]:
        fail("parameter hash differs between recompute full and none with dropout on")
    print("dropout 0.1 at PP 2: recompute full == none, losses, gradient norms and parameter "
          f"hash bitwise ({summary(on)['param_hash']})")


@check("train.exit_after_steps 2: 3 launches == 6 straight steps bitwise, a relaunch "
       "trains nothing; exit_duration_min stops after step 1")
def check_exit_after(r):
    """train.exit_after_steps 2: three launches of --resume auto equal one straight run of 6
    steps bitwise, each exiting 0 with a checkpoint; train.exit_duration_min stops after the
    first step past it."""
    _, straight = r.run(2, "ex-straight", 1, 2, 2, steps=6, extra=DROPOUT)
    run = os.path.join(r.a.work, "ex-slots")
    shutil.rmtree(run, ignore_errors=True)
    evals = ["--set", f"data.eval_meta={r.a.data}/eval_meta.json", "--set", "train.eval_every=2",
             "--set", "train.checkpoint_every=2"]
    for k in range(3):
        p, _ = r.run(2, "ex-slots", 1, 2, 2, steps=6, fresh=False,
                     extra=DROPOUT + evals + ["--resume", "auto", "--set", "train.exit_after_steps=2"])
        saves = [l for l in (p.stdout + p.stderr).splitlines() if "checkpoint: saved step" in l]
        if len(saves) != 1:
            fail(f"launch {k + 1}: {len(saves)} checkpoint writes, expected 1: {saves}")
        s = summary(run)
        if s["steps"] != 2 * (k + 1) or s["steps_this_run"] != 2:
            fail(f"launch {k + 1}: {s['steps']} steps, {s['steps_this_run']} this run")
        want = "train.exit_after_steps 2" if k < 2 else ""
        if s["stop_reason"] != want or s["stopped"] != (k < 2):
            fail(f"launch {k + 1}: stop_reason '{s['stop_reason']}', expected '{want}'")
    for a, b in zip(metrics(run), metrics(straight)):
        if a["loss"] != b["loss"]:
            fail(f"step {a['step']}: loss {a['loss']!r} over 3 slots vs {b['loss']!r} straight")
    if summary(run)["param_hash"] != summary(straight)["param_hash"]:
        fail("parameter hash after 3 slots differs from the straight run")
    with open(os.path.join(run, "eval.jsonl")) as f:
        eval_steps = [json.loads(l)["step"] for l in f if l.strip()]
    if eval_steps != [2, 4, 6]:
        fail(f"eval.jsonl steps after 3 slots: {eval_steps}, expected [2, 4, 6]")
    # Relaunching the finished run trains nothing and leaves its summary as it is.
    done = summary(run)
    p, _ = r.run(2, "ex-slots", 1, 2, 2, steps=6, fresh=False,
                 extra=DROPOUT + evals + ["--resume", "auto"])
    if summary(run) != done or "nothing to train" not in p.stdout + p.stderr:
        fail("relaunching a finished run changed summary.json or did not say so")
    p, rd = r.run(1, "ex-duration", 1, 1, 4, steps=6,
                  extra=["--set", "train.exit_duration_min=0.0001"])
    s = summary(rd)
    if s["steps"] != 1 or s["stop_reason"] != "train.exit_duration_min 0.0001":
        fail(f"exit_duration_min: {s['steps']} steps, stop_reason '{s['stop_reason']}'")
    if not os.path.isdir(os.path.join(rd, "checkpoints", "step-1")):
        fail("exit_duration_min: no checkpoint at step 1")
    print("exit_after_steps 2: 3 launches (exit 0 each) == 6 straight steps, losses and parameter "
          f"hash bitwise ({summary(run)['param_hash']}); exit_duration_min: 1 step, checkpoint")


@check("train.steps 0 saves step-0 and summary.json, export takes it, and 2 steps "
       "resumed from it equal 2 fresh steps bitwise")
def check_steps_zero(r):
    """train.steps 0 saves the initial weights as step-0 with summary.json and says so;
    omnibal-plan export takes it, and a run resumed from it equals a fresh one bitwise."""
    p, d = r.run(1, "steps0", 1, 1, 2, steps=0)
    line = log_value(p.stdout + p.stderr, "train.steps 0: ")
    if not line.startswith("saved the initial weights as step-0"):
        fail(f"steps 0: unexpected message: {line}")
    if not os.path.exists(os.path.join(d, "checkpoints", "step-0", "manifest.json")):
        fail("steps 0: no checkpoints/step-0")
    s = summary(d)
    if s["steps"] != 0 or s["final_loss"] is not None or metrics(d):
        fail(f"steps 0: summary steps {s['steps']}, final_loss {s['final_loss']}, "
             f"{len(metrics(d))} metrics lines")
    out = os.path.join(r.a.work, "steps0-export")
    shutil.rmtree(out, ignore_errors=True)
    p = subprocess.run([r.a.plan, "export", "--checkpoint",
                        os.path.join(d, "checkpoints", "step-0"), "--out", out],
                       env=ENV, capture_output=True, text=True, timeout=120)
    if p.returncode != 0 or not os.path.exists(os.path.join(out, "config.json")):
        print(p.stdout[-2000:], p.stderr[-2000:])
        fail("steps 0: omnibal-plan export of step-0 failed")
    p, _ = r.run(1, "steps0", 1, 1, 2, steps=2, fresh=False, extra=["--resume", "auto"])
    if "step-0" not in log_value(p.stdout + p.stderr, "resumed from"):
        fail("--resume auto did not continue from step-0")
    _, fresh = r.run(1, "steps0-fresh", 1, 1, 2, steps=2)
    if summary(d)["param_hash"] != summary(fresh)["param_hash"]:
        fail("2 steps from the step-0 checkpoint differ from 2 fresh steps")
    print(f"steps 0: step-0 and summary.json written ('train.steps 0: {line[:80]}...'), "
          f"exported; 2 steps from it == 2 fresh steps (param hash "
          f"{summary(fresh)['param_hash']})")
