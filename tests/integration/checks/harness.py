"""Launching omnibal-train under mpiexec for the checks: the environment, the common options
of every run (tiny preset, the demo split, 5 steps, one thread), option lists shared by several
themes, and the two ways a check ends early (`fail`, an expected `refusal`)."""
import os
import shutil
import subprocess
import sys
import time

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
# tests/integration: tiny-tied.yaml, and ../../models/presets.
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Residual dropout for the resume checks (models/dropout.h): bitwise resume must hold with it on.
DROPOUT = ["--set", "model.dropout=0.1"]
ZERO1 = ["--set", "train.shard=optimizer"]
BF16 = ["--set", "train.precision=bf16"]


def fail(msg):
    """Ends the check: prints FAIL: and `msg`, exits 1."""
    print("FAIL: " + msg)
    sys.exit(1)


class Runner:
    """Launches omnibal-train under mpiexec with the arguments of train_checks.py (`a`: bin,
    mpiexec, data, work, plan); each run directory is <work>/<run>."""

    def __init__(self, a):
        self.a = a
        os.makedirs(a.work, exist_ok=True)

    def base(self, run_dir, steps=5):
        """The options of every run: tiny preset, the demo split, uniform split, no recompute."""
        d = self.a.data
        return ["--set", "model.preset=tiny", "--set", f"data.meta={d}/train_meta.json",
                "--set", f"data.tokenizer={d}/tokenizer.model", "--set", "data.max_tiles=12",
                "--set", "data.workers=1", "--set", "balance.samples_per_pack=6",
                "--set", "parallel.partition=uniform", "--set", "memory.recompute=none",
                "--set", f"train.steps={steps}", "--set", "train.lr=2e-3",
                "--set", "train.warmup_steps=5", "--set", "train.checkpoint_every=0",
                "--set", "runtime.threads=1", "--set", f"runtime.run_dir={run_dir}",
                "--set", "comm.timeout_s=60"]

    def cmd(self, np, run, dp, pp, m, extra=(), steps=5):
        """(mpiexec command line, run directory) of `np` ranks at dp x pp with m micro-batches."""
        run_dir = os.path.join(self.a.work, run)
        args = [self.a.mpiexec, "-np", str(np), "--oversubscribe", "--bind-to", "none",
                self.a.bin] + self.base(run_dir, steps) + [
                "--set", f"parallel.dp={dp}", "--set", f"parallel.pp={pp}",
                "--set", f"parallel.micro_batches={m}"] + list(extra)
        return args, run_dir

    def run(self, np, run, dp, pp, m, extra=(), steps=5, fresh=True, expect_ok=True, timeout=300):
        """Runs `cmd` to the end (the run directory emptied first when `fresh`): (the completed
        process with its .seconds, run directory); fails on a non-zero exit when `expect_ok`."""
        args, run_dir = self.cmd(np, run, dp, pp, m, extra, steps)
        if fresh:
            shutil.rmtree(run_dir, ignore_errors=True)
        t0 = time.time()
        p = subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=timeout)
        p.seconds = time.time() - t0
        if expect_ok and p.returncode != 0:
            print(p.stdout[-4000:], p.stderr[-4000:])
            fail(f"{run}: exit {p.returncode}")
        return p, run_dir


def refusal(p, needle, what):
    """The stripped stderr line naming `needle` of a job that had to be refused; fails the
    check, printing the end of stderr, when the job exited 0 or stderr does not name it."""
    if p.returncode == 0 or needle not in p.stderr:
        print(p.stderr[-3000:])
        fail(f"{what}: expected a non-zero exit naming '{needle}'")
    return next(l for l in p.stderr.splitlines() if needle in l).strip()


def log_value(text, prefix):
    """The rest of the first log line containing `prefix`, or fail."""
    for line in text.splitlines():
        if prefix in line:
            return line[line.index(prefix) + len(prefix):].strip()
    print(text[-3000:])
    fail(f"no log line with '{prefix}'")


def tp(n):
    """Options of tensor parallelism n."""
    return ["--set", f"parallel.tp={n}"]


def sched(kind, v=1):
    """Options of pipeline schedule `kind` with v virtual stages per rank."""
    out = ["--set", f"parallel.schedule={kind}"]
    return out + (["--set", f"parallel.virtual_stages={v}"] if v > 1 else [])
