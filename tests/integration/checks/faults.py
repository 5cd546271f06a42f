"""Faults and stops: an injected failure, bad configurations, SIGTERM, non-finite steps
(train.on_nonfinite stop / skip), and one launch per run directory."""
import glob
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import time

from . import check
from .harness import ENV, fail, refusal
from .results import checkpoint_tensors, metrics, read_safetensors, summary


@check("a failure injected on rank 1 (backward, loader) ends the job non-zero within 30 "
       "s, naming [rank 1]")
def check_failure(r):
    for where in ("backward", "loader"):
        t0 = time.time()
        p, _ = r.run(2, f"fail-{where}", 1, 2, 4, steps=50, expect_ok=False, timeout=120,
                     extra=["--set", f"debug.fail_at={{rank: 1, step: 1, where: {where}}}"])
        took = time.time() - t0
        if p.returncode == 0:
            fail(f"{where}: the job exited 0")
        if "[rank 1]" not in p.stderr or "injected" not in p.stderr:
            print(p.stderr[-3000:])
            fail(f"{where}: stderr lacks '[rank 1] ... injected'")
        if took > 30:
            fail(f"{where}: the job took {took:.1f} s to end (limit 30 s)")
        print(f"fail_at {where}: exit {p.returncode} after {took:.1f} s with [rank 1] on stderr")


@check("a wrong rank count, an unknown key, a bad manual split, an unknown "
       "balance.method (and cuda without a GPU) are refused by name")
def check_bad_config(r):
    cases = [(2, ["--set", "parallel.pp=3"], "mpirun started 2 ranks"),
             (1, ["--set", "train.nonsense=1"], "nonsense"),
             (2, ["--set", "parallel.partition={manual: [3, 3]}", "--set", "parallel.pp=2"],
              "manual"),
             (1, ["--set", "balance.method=shuffle"], "balance.method")]
    # runtime.device cuda is refused at start-up on a host without a GPU (train/run_device.h).
    if not glob.glob("/dev/nvidia[0-9]*"):
        cases.append((1, ["--set", "runtime.device=cuda"], "runtime.device is cuda"))
    for np, extra, needle in cases:
        args, _ = r.cmd(np, "bad", 1, 1, 1)
        p = subprocess.run(args + extra, env=ENV, capture_output=True, text=True, timeout=60)
        print(f"{' '.join(extra)}: refused ({refusal(p, needle, extra)[:160]})")


@check("SIGTERM to one rank stops the job at a step boundary: exit 0, summary.json "
       "stopped, a checkpoint of the last step")
def check_sigterm(r):
    args, d = r.cmd(2, "sigterm", 1, 2, 2, steps=10000)
    shutil.rmtree(d, ignore_errors=True)
    p = subprocess.Popen(args, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics_path = os.path.join(d, "metrics.jsonl")
    t0 = time.time()
    while time.time() - t0 < 120:
        if os.path.exists(metrics_path) and os.path.getsize(metrics_path) > 0:
            break
        time.sleep(0.2)
    else:
        p.kill()
        fail("no step finished within 120 s")
    ranks = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
    if not ranks:
        p.kill()
        fail("found no rank processes under mpirun")
    os.kill(int(ranks[0]), signal.SIGTERM)  # one rank is enough: ranks agree at the boundary
    out, err = p.communicate(timeout=120)
    s = summary(d)
    if p.returncode != 0 or not s["stopped"]:
        print(err[-3000:])
        fail(f"exit {p.returncode}, stopped {s['stopped']}")
    ckpt = os.path.join(d, "checkpoints", f"step-{s['steps']}")
    if not os.path.isdir(ckpt):
        fail(f"no checkpoint {ckpt}")
    print(f"SIGTERM to rank pid {ranks[0]}: stopped after step {s['steps']}, exit 0, {ckpt}")


# Diverges within a few steps: the updates of lr 1e4 make the tiny model's loss NaN / Inf.
DIVERGE = ["--set", "train.lr=1e4", "--set", "train.warmup_steps=0"]
NONFINITE_RE = re.compile(r"step (\d+) \(progress line \d+/\d+\): the (loss|gradient norm) is "
                          r"(nan|inf|-inf)")


def finite_checkpoints(run_dir):
    """Steps of checkpoints/step-N; fails naming the tensor when one holds a NaN / Inf."""
    root = os.path.join(run_dir, "checkpoints")
    steps = []
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        if not name.startswith("step-") or not name[5:].isdigit():
            continue
        for f in sorted(os.listdir(os.path.join(root, name))):
            if f.endswith(".safetensors"):
                for k, v in read_safetensors(os.path.join(root, name, f)).items():
                    if not all(math.isfinite(x) for x in v):
                        fail(f"{name}/{f}: tensor {k} is not finite")
        steps.append(int(name[5:]))
    return sorted(steps)


def nonfinite_stop(p, what):
    """(step, quantity, the message after '[rank r] file:line: ') of a job the guard stopped."""
    line = refusal(p, "nothing of the step was applied", what)
    m = NONFINITE_RE.search(line)
    if not m:
        fail(f"{what}: the message does not name the step and the quantity: {line[:300]}")
    return int(m.group(1)), m.group(2), line[m.start():]


@check("on_nonfinite stop ends at the non-finite step naming it (checkpoints finite); "
       "skip leaves steps out up to the limit; PP 2 ranks agree")
def check_nonfinite(r):
    """train.on_nonfinite: lr 1e4 makes the loss or gradient norm NaN / Inf within a few steps.
    stop (default) ends the job non-zero at that step, naming it, the quantity and the rank, with
    no checkpoint of it or after it and every checkpoint finite; skip leaves such steps out
    (parameters and AdamW moments unchanged over them, marked in metrics.jsonl, counted in
    summary.json) up to train.max_nonfinite_skips in a row; at PP 2 both ranks stop at the same
    step with the same message."""
    every = ["--set", "train.checkpoint_every=1", "--set", "train.keep_checkpoints=20"]
    p, d = r.run(1, "nf-stop", 1, 1, 2, steps=8, expect_ok=False, timeout=120,
                 extra=DIVERGE + every)
    k, what, msg = nonfinite_stop(p, "lr 1e4 under train.on_nonfinite stop")
    ms = metrics(d)
    if [x["step"] for x in ms] != list(range(k)) or any(x["loss"] is None for x in ms):
        fail(f"metrics.jsonl should hold the finite steps 0..{k - 1}: {[x['loss'] for x in ms]}")
    steps = finite_checkpoints(d)
    if not steps or max(steps) != k:
        fail(f"checkpoints {steps}: expected step-1 .. step-{k}, none of step {k} or later")
    if os.path.exists(os.path.join(d, "summary.json")):
        fail("a stopped run wrote summary.json")
    print(f"stop: exit {p.returncode} at step {k} ({what}), checkpoints {steps} all finite: "
          f"{msg[:200]}")

    # skip, 2 at most in a row: steps k and k + 1 skipped, the run ends normally.
    skip = DIVERGE + every + ["--set", "train.on_nonfinite=skip",
                              "--set", "train.max_nonfinite_skips=2"]
    _, d = r.run(1, "nf-skip", 1, 1, 2, steps=k + 2, extra=skip)
    s, ms = summary(d), metrics(d)
    marked = [x["step"] for x in ms if x.get("nonfinite_skipped")]
    if s["nonfinite_skipped_steps"] != 2 or marked != [k, k + 1]:
        fail(f"skip: summary counts {s['nonfinite_skipped_steps']}, metrics mark {marked}; "
             f"expected 2 and [{k}, {k + 1}]")
    finite_checkpoints(d)
    before, after = checkpoint_tensors(d, k), checkpoint_tensors(d, k + 2)
    if before != after:
        fail(f"skip: the parameters or moments changed over the skipped steps {k}, {k + 1}")
    print(f"skip: steps {k}, {k + 1} skipped (metrics marked, summary 2), step-{k + 2} == "
          f"step-{k} bitwise ({len(after)} tensors)")

    # A third non-finite step in a row is one too many.
    p, d = r.run(1, "nf-limit", 1, 1, 2, steps=k + 3, expect_ok=False, timeout=120, extra=skip)
    line = refusal(p, "train.max_nonfinite_skips is 2: stopping", "a third skip in a row")
    marked = [x["step"] for x in metrics(d) if x.get("nonfinite_skipped")]
    if f"step {k + 2} " not in line or marked != [k, k + 1]:
        fail(f"limit: expected the stop at step {k + 2} after skips {k}, {k + 1}: {marked}, "
             f"{line[:300]}")
    print(f"skip limit: exit {p.returncode} at step {k + 2}: {line[line.index('step'):][:160]}")

    # PP 2: the last stage holds the loss, every rank the norm; both stop at one step.
    p, d = r.run(2, "nf-pp2", 1, 2, 2, steps=8, expect_ok=False, timeout=120, extra=DIVERGE)
    k2, _, _ = nonfinite_stop(p, "PP 2 under train.on_nonfinite stop")
    by_rank = {}
    for l in p.stderr.splitlines():
        m = NONFINITE_RE.search(l)
        if l.startswith("[rank ") and m:
            by_rank[l[6:l.index("]")]] = l[m.start():]
    if sorted(by_rank) != ["0", "1"] or len(set(by_rank.values())) != 1:
        print(p.stderr[-3000:])
        fail(f"PP 2: expected one message from both ranks, got {by_rank}")
    if finite_checkpoints(d):
        fail("PP 2: a checkpoint was written (checkpoint_every 0)")
    print(f"PP 2: both ranks stopped at step {k2} with: {by_rank['0'][:200]}")


def lock_holder(path):
    """{key: value} of a run directory's lock file (core/run_dir_lock.h), {} while absent or
    empty."""
    try:
        with open(path) as f:
            return dict(l.split(" ", 1) for l in f.read().splitlines() if " " in l)
    except FileNotFoundError:
        return {}


@check("a second launch on a run directory in use is refused at once naming the holder; "
       "a stale lock is taken over with a warning")
def check_run_dir_lock(r):
    """One launch per runtime.run_dir: a second launch on a run directory in use (PP 2, so rank
    1 learns rank 0's refusal) exits non-zero at once naming the holder's pid and host, the first
    finishes with one metrics line per step and releases the lock; a lock file left by a dead
    process is taken over with a warning naming it."""
    steps = 20
    args, d = r.cmd(1, "lock", 1, 1, 2, steps=steps)
    shutil.rmtree(d, ignore_errors=True)
    lock = os.path.join(d, ".omnibal.lock")
    first = subprocess.Popen(args, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    t0 = time.time()
    while "pid" not in lock_holder(lock) and first.poll() is None and time.time() - t0 < 120:
        time.sleep(0.05)
    holder = lock_holder(lock)
    if "pid" not in holder:
        first.kill()
        fail(f"the first launch wrote no lock file {lock} naming a pid")
    t1 = time.time()
    p, _ = r.run(2, "lock", 1, 2, 2, steps=steps, fresh=False, expect_ok=False, timeout=60)
    took = time.time() - t1
    out, err = first.communicate(timeout=300)
    needle = f"is in use by omnibal-train pid {holder['pid']} on host {socket.gethostname()}"
    line = refusal(p, needle, "a second launch on a run directory in use")
    if "[rank 1]" not in p.stderr or "locking runtime.run_dir failed on rank 0" not in p.stderr:
        print(p.stderr[-3000:])
        fail("rank 1 of the refused launch did not end with rank 0's refusal")
    if took > 20:
        fail(f"the refused launch took {took:.1f} s to end (limit 20 s)")
    if first.returncode != 0:
        print(err[-3000:])
        fail(f"the first launch exited {first.returncode}")
    ms = [m["step"] for m in metrics(d)]
    if ms != list(range(steps)):
        fail(f"metrics.jsonl of the first launch holds steps {ms}, expected 0..{steps - 1} once")
    if os.path.exists(lock):
        fail(f"{lock} is left after the first launch finished")
    print(f"second launch refused after {took:.1f} s: {line[:320]}; the first finished with "
          f"{steps} metrics lines and removed its lock file")
    # A lock file whose holder is gone (killed: the kernel dropped its flock) is taken over.
    stale_dir = os.path.join(r.a.work, "lock-stale")
    shutil.rmtree(stale_dir, ignore_errors=True)
    os.makedirs(stale_dir)
    with open(os.path.join(stale_dir, ".omnibal.lock"), "w") as f:
        f.write("program omnibal-train\npid 4194301\nhost node-17\nsince 2026-12-06T05:01:02Z\n")
    p, _ = r.run(1, "lock-stale", 1, 1, 2, steps=2, fresh=False)
    want = "taking over the lock left by pid 4194301 on host node-17 (not running"
    if want not in p.stderr + p.stdout:
        print((p.stdout + p.stderr)[-3000:])
        fail(f"no warning '{want}' when taking over a stale lock")
    if len(metrics(stale_dir)) != 2:
        fail("the run that took over a stale lock did not train its 2 steps")
    print(f"stale lock of pid 4194301 on node-17 taken over with a warning")
