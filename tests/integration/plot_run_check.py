#!/usr/bin/env python3
"""ctest plot_run: scripts/plot_run.py on run directories left by the integration tests (several
stages and DP ranks, one with eval.jsonl) plus two generated trace-event files (a 1F1B step of
PP 2 x DP 2, unbalanced vs balanced) writes every PNG, each a PNG of some size; a run directory
without metrics.jsonl and a trace that is not JSON fail (exit 2) naming the file.
Exit 77 (skipped) when this interpreter has no matplotlib.

  plot_run_check.py --script scripts/plot_run.py --work DIR RUN_DIR [RUN_DIR ...]"""
import argparse
import json
import os
import shutil
import subprocess
import sys

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MIN_BYTES = 5000  # an empty 600x350 figure is ~3 KB


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def one_f_one_b(stages, m):
    """Per stage, the 1F1B order of ("F" | "B", micro-batch)."""
    orders = []
    for s in range(stages):
        warm = min(stages - 1 - s, m)
        order = [("F", i) for i in range(warm)]
        for i in range(m - warm):
            order += [("F", warm + i), ("B", i)]
        order += [("B", i) for i in range(m - warm, m)]
        orders.append(order)
    return orders


def trace(dp, stages, m, forward_us, link_us=300):
    """A trace-event document of one 1F1B step: forward_us[d][i] is the forward time of DP rank
    d's micro-batch i on every stage (backward twice it), sends and receives between stages, a
    DP reduce and the optimizer at the end (the format omnibal-train writes)."""
    events = []
    for d in range(dp):
        events.append({"ph": "M", "name": "process_name", "pid": d, "args": {"name": f"dp {d}"}})
        for s in range(stages):
            events.append({"ph": "M", "name": "thread_name", "pid": d, "tid": s,
                           "args": {"name": f"stage {s}"}})
        done, free = {}, [0.0] * stages
        orders = one_f_one_b(stages, m)
        pending = [list(o) for o in orders]
        while any(pending):
            for s in range(stages):
                if not pending[s]:
                    continue
                kind, i = pending[s][0]
                dep = ("F", s - 1, i) if kind == "F" and s > 0 else \
                      ("B", s + 1, i) if kind == "B" and s < stages - 1 else None
                if dep is not None and dep not in done:
                    continue
                pending[s].pop(0)
                ready = done[dep] + link_us if dep else 0.0
                start = max(free[s], ready)
                dur = forward_us[d][i] * (1 if kind == "F" else 2)
                load = {"micro_batch": i, "chunk": 0, "samples": 8, "tiles": 20 + i,
                        "tokens": int(forward_us[d][i] / 10)}
                events.append({"ph": "X", "name": "forward" if kind == "F" else "backward",
                               "cat": "compute", "pid": d, "tid": s, "ts": start, "dur": dur,
                               "args": load})
                if dep:
                    events.append({"ph": "X", "name": "recv", "cat": "comm", "pid": d, "tid": s,
                                   "ts": done[dep], "dur": link_us, "args": load})
                    events.append({"ph": "X", "name": "send", "cat": "comm", "pid": d,
                                   "tid": dep[1], "ts": done[dep], "dur": link_us, "args": load})
                free[s] = done[(kind, s, i)] = start + dur
        for s in range(stages):
            end = max(free)
            events.append({"ph": "X", "name": "dp_reduce", "cat": "comm", "pid": d, "tid": s,
                           "ts": end, "dur": 800, "args": {}})
            events.append({"ph": "X", "name": "optimizer", "cat": "compute", "pid": d, "tid": s,
                           "ts": end + 800, "dur": 500, "args": {}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--script", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("runs", nargs="+")
    a = p.parse_args()
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(f"SKIP: no matplotlib for {sys.executable} (bash scripts/setup.sh)")
        sys.exit(77)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)

    # The input covers what the plots are about: several stages, several DP ranks, evaluations.
    stages = dp = evals = 0
    for d in a.runs:
        with open(os.path.join(d, "metrics.jsonl")) as f:
            first = json.loads(f.readline())
        stages, dp = max(stages, len(first["stages"])), max(dp, len(first["dp_ranks"]))
        ev = os.path.join(d, "eval.jsonl")
        evals += os.path.isfile(ev) and os.path.getsize(ev) > 0
    if stages < 2 or dp < 2 or not evals:
        fail(f"input runs have at most {stages} stages and {dp} DP ranks, {evals} with "
             "evaluations; expected >= 2, >= 2 and >= 1")

    base = os.path.join(a.work, "baseline.json")
    omni = os.path.join(a.work, "omnibal.json")
    with open(base, "w") as f:  # random packs: unequal micro-batches and DP ranks
        json.dump(trace(2, 2, 4, [[3000, 9000, 2000, 6000], [8000, 2500, 7000, 3000]]), f)
    with open(omni, "w") as f:  # ISF packs: level loads
        json.dump(trace(2, 2, 4, [[5000, 5200, 4900, 5100], [5050, 5000, 5150, 4950]]), f)

    out = os.path.join(a.work, "plots")
    r = run([sys.executable, a.script, *a.runs, "--out", out, "--trace", base, "--trace", omni])
    if r.returncode != 0:
        fail(f"plot_run.py exited {r.returncode}:\n{r.stdout}{r.stderr}")
    expected = ["loss.png", "eval_exact_match.png", "samples_per_s.png", "bubble_fraction.png",
                "stages.png", "dp_load.png", "gantt.png"]
    printed = r.stdout.split()
    for name in expected:
        path = os.path.join(out, name)
        if path not in printed:
            fail(f"{path} not in plot_run.py's output: {printed}")
        if not os.path.isfile(path):
            fail(f"{path} not written")
        with open(path, "rb") as f:
            head = f.read(8)
        size = os.path.getsize(path)
        if head != PNG_MAGIC or size < MIN_BYTES:
            fail(f"{path}: {size} bytes starting {head!r}, expected a PNG of >= {MIN_BYTES}")
        print(f"{name}: {size} bytes")

    # Bad input fails with a message naming the file.
    empty = os.path.join(a.work, "not-a-run")
    os.makedirs(empty)
    r = run([sys.executable, a.script, empty, "--out", os.path.join(a.work, "bad")])
    want = os.path.join(empty, "metrics.jsonl")
    if r.returncode != 2 or want not in r.stderr or "no such file" not in r.stderr:
        fail(f"missing metrics.jsonl: exit {r.returncode}, stderr {r.stderr!r}; expected 2 and "
             f"a message naming {want}")
    print(f"missing metrics.jsonl: {r.stderr.strip()}")
    broken = os.path.join(a.work, "broken.json")
    with open(broken, "w") as f:
        f.write('{"traceEvents": [')
    r = run([sys.executable, a.script, "--trace", broken, "--out", os.path.join(a.work, "bad")])
    if r.returncode != 2 or broken not in r.stderr:
        fail(f"broken trace: exit {r.returncode}, stderr {r.stderr!r}; expected 2 naming it")
    print(f"broken trace: {r.stderr.strip()}")
    print(f"PASS: {len(expected)} PNGs from {len(a.runs)} runs and 2 traces; bad input named")


if __name__ == "__main__":
    main()
