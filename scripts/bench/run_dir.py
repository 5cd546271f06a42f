#!/usr/bin/env python3
"""The one reader of omnibal-train run directories for the bench scripts (Python 3 standard
library only). A run directory (runtime.run_dir; lib/train/run_log.h) holds:

  config.yaml        the resolved config
  metrics.jsonl      one JSON object per step (lib/train/step_metrics.h, metrics_record): step
                     (0-based), loss, lr, grad_norm, samples, tokens, label_tokens,
                     step_seconds, samples_per_s, tokens_per_s, dp_wait_s, bubble_fraction,
                     epoch, stages [{forward_s, backward_s, idle_s}] by pipeline stage,
                     dp_ranks [{tiles, tokens, busy_s}] by DP rank, ...; times in seconds
  eval.jsonl         one JSON object per evaluation (run_log.h eval_json): step, overall, tasks
  summary.json       written at the end (lib/train/trainer.cpp): steps, seconds, final_loss,
                     partition (the string "[6, 4]"), recomputed_per_stage ([1, 0]),
                     balance_method, peak_rss_mib_max_rank, optimizer_state_mib_max_rank,
                     tp_all_reduce_s_per_step_max_rank (TP runs), ...
  stage_plan.json    the start-up plan (lib/memory/stage_plan.cpp, stage_plan_json):
                     partition ([6, 4]), recompute (unit names), candidates, none_bytes,
                     full_bytes, hash, ...
  trace/step-N.json  Chrome trace events of the steps in runtime.trace_steps (step_trace.h)

The bench scripts keep the trainer's console beside it as RUN.log (its start-up line
`stage plan (...): ..., recompute {stage 0: vit_block_0, ...; stage 1: none}` and `plan hash`)
and, from bench_common.sh's bench_train, RUN.steal (percent of CPU time the hypervisor took).

As a command (one line per RUN or LOG on stdout; errors name the file and exit 1):
  run_dir.py median-step-seconds RUN... [--skip N | --warmup W]
  run_dir.py summary RUN... --key KEY      a summary.json value (lists as "1, 0")
  run_dir.py stage-plan RUN... --key KEY   a stage_plan.json value (lists as "6, 4")
  run_dir.py recompute-units LOG...        the units each trainer log recomputes ("a,b")
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys


class RunDirError(Exception):
    """A run directory lacks a file or holds one that does not parse (the message names it)."""


def _path(run, name):
    path = os.path.join(run, name)
    if not os.path.isfile(path):
        raise RunDirError(f"{path}: missing (is {run} an omnibal-train run directory that "
                          "got that far?)")
    return path


def _jsonl(path):
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise RunDirError(f"{path}:{n}: not JSON ({e})") from None
    return rows


def _json(path):
    with open(path) as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise RunDirError(f"{path}: not JSON ({e})") from None


def metrics(run):
    """The step records of metrics.jsonl in file order (blank lines skipped)."""
    return _jsonl(_path(run, "metrics.jsonl"))


def metrics_by_step(run):
    """{step: record} of metrics.jsonl (a step written twice keeps its last record)."""
    return {r["step"]: r for r in metrics(run)}


def evals(run):
    """The evaluation records of eval.jsonl ([] when the run evaluated nothing)."""
    path = os.path.join(run, "eval.jsonl")
    return _jsonl(path) if os.path.isfile(path) else []


def summary(run):
    """summary.json as a dict (RunDirError while the run has not finished)."""
    return _json(_path(run, "summary.json"))


def stage_plan(run):
    """stage_plan.json (the start-up planner's plan) as a dict."""
    return _json(_path(run, "stage_plan.json"))


def trace_files(run):
    """{step: path} of the run's trace/step-N.json files."""
    out = {}
    for p in glob.glob(os.path.join(run, "trace", "step-*.json")):
        m = re.fullmatch(r"step-(\d+)\.json", os.path.basename(p))
        if m:
            out[int(m.group(1))] = p
    return dict(sorted(out.items()))


def trace_events(path):
    """The complete events ("ph": "X") of a trace file: name, cat, pid (DP rank), tid (stage),
    ts and dur (microseconds), args."""
    doc = _json(path)
    events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    return [e for e in events if e.get("ph") == "X"]


def steady(rows, warmup, fallback=False):
    """The records of steps >= warmup; with `fallback`, all of them when none is."""
    out = [r for r in rows if r["step"] >= warmup]
    return out or (rows if fallback else [])


def step_seconds(run, skip_first=0, warmup=None):
    """step_seconds of the run's steps: the records after the first `skip_first` ones, or with
    `warmup` those of steps >= warmup."""
    rows = metrics(run)
    rows = steady(rows, warmup) if warmup is not None else rows[skip_first:]
    return [r["step_seconds"] for r in rows]


def median_step_seconds(run, skip_first=0, warmup=None):
    """The median of step_seconds(run, skip_first, warmup); RunDirError when no step is left."""
    secs = step_seconds(run, skip_first, warmup)
    if not secs:
        raise RunDirError(f"{run}: no step left after skip {skip_first} / warmup {warmup}")
    return statistics.median(secs)


def samples_per_second(rows):
    """Samples over seconds of the records: sum of samples / sum of step_seconds."""
    return sum(r["samples"] for r in rows) / sum(r["step_seconds"] for r in rows)


def steal_percent(run):
    """RUN.steal beside the run directory (percent), or None where bench_train wrote none."""
    path = run.rstrip("/") + ".steal"
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return float(f.read())


def console_log(run):
    """RUN.log beside the run directory: the trainer's console as the bench scripts keep it."""
    path = run.rstrip("/") + ".log"
    if not os.path.isfile(path):
        raise RunDirError(f"{path}: missing (the bench scripts write the trainer's console there)")
    with open(path) as f:
        return f.read()


_PLAN_LINE = re.compile(r"stage plan \(.*recompute \{")


def recompute_line(log_text):
    """The start-up line's `recompute {...}` part (`recompute {stage 0: vit_block_0, ...; stage
    1: none}`); RunDirError when the log has no stage plan line."""
    line = next((l for l in log_text.splitlines() if _PLAN_LINE.search(l)), None)
    if line is None:
        raise RunDirError("no `stage plan (...): ... recompute {...}` line in the trainer's log")
    return "recompute {" + line.split("recompute {", 1)[1]


def recomputed_units(log_text):
    """The units the trainer recomputes, from its start-up line: ["vit_block_0", ...]."""
    return re.findall(r"(?:vit|llm)_block_\d+", recompute_line(log_text))


def plan_hash(log_text):
    """The 16 hex digits of the start-up log's `plan hash`."""
    m = re.search(r"plan hash ([0-9a-f]{16})", log_text)
    if not m:
        raise RunDirError("no `plan hash` in the trainer's log")
    return m.group(1)


def format_value(value):
    """A JSON value as the scripts read it: lists as "1, 0", the rest as Python prints them."""
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return str(value)


def _key(doc, key, what):
    if key not in doc:
        raise RunDirError(f"{what}: no key '{key}' (has: {', '.join(sorted(doc))})")
    return doc[key]


def run_command(commands, argv, prog, usage):
    """The small command-line tools beside this module (report.py, sim_rounds.py): runs
    commands[argv[0]](*argv[1:]); exits with `usage` on an unknown command and with
    "<prog> <command>: <why>" on a RunDirError."""
    if not argv or argv[0] not in commands:
        sys.exit(usage)
    try:
        commands[argv[0]](*argv[1:])
    except RunDirError as e:
        sys.exit(f"{prog} {argv[0]}: {e}")


def main(argv=None):
    ap = argparse.ArgumentParser(description="Reads omnibal-train run directories: one line per "
                                 "RUN (or LOG) on stdout, in the order given.")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("median-step-seconds", help="median step_seconds of each run")
    p.add_argument("runs", nargs="+", metavar="RUN")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--skip", type=int, default=0, help="leave out the first N records")
    g.add_argument("--warmup", type=int, help="only steps >= W")
    for name, what in (("summary", "summary.json"), ("stage-plan", "stage_plan.json")):
        p = sub.add_parser(name, help=f"one value of each run's {what} (lists as '6, 4')")
        p.add_argument("runs", nargs="+", metavar="RUN")
        p.add_argument("--key", required=True)
    p = sub.add_parser("recompute-units", help="per trainer log (RUN.log), its recomputed units, "
                       "comma-separated (an empty line: none)")
    p.add_argument("logs", nargs="+", metavar="LOG")
    a = ap.parse_args(argv)
    try:
        if a.command == "recompute-units":
            for log in a.logs:
                with open(log) as f:
                    print(",".join(recomputed_units(f.read())))
            return
        for run in a.runs:
            if a.command == "median-step-seconds":
                print(median_step_seconds(run, a.skip, a.warmup))
            elif a.command == "summary":
                print(format_value(_key(summary(run), a.key, f"{run}/summary.json")))
            else:
                print(format_value(_key(stage_plan(run), a.key, f"{run}/stage_plan.json")))
    except (RunDirError, OSError) as e:
        sys.exit(f"run_dir: {e}")


if __name__ == "__main__":
    main()
