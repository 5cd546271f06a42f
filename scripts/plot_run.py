#!/usr/bin/env python3
"""Plots of omnibal-train run directories and a Gantt chart of trace-event files (PNG, Agg).

  scripts/plot_run.py RUN_DIR [RUN_DIR ...] --out DIR [--trace TRACE.json ...]

Reads each run directory's metrics.jsonl (one record per step, lib/train/step_metrics.h),
eval.jsonl (one record per evaluation, lib/train/run_log.cpp) and summary.json (absent while a
run is unfinished), overlays the runs (a sweep), labelled by their directory names, and writes
one PNG per plot into DIR, printing each path:

  loss.png              training loss per step
  eval_exact_match.png  held-out exact match (eval.jsonl "overall"; per task too for one run);
                        only when a run has evaluations
  samples_per_s.png     samples trained per second of step wall time
  bubble_fraction.png   the idle share of the pipeline, as metrics.jsonl defines it:
                        bubble = sum over stages s of idle_s / (stages x step_seconds),
                        idle_s being the time stage s (its DP rank 0) waited for activations
                        and gradients
  stages.png            per pipeline stage: forward_s, backward_s and idle_s stacked, mean
                        seconds per step over the steady steps (after the first 10 %, as
                        sweep_table.py); the black tick is the mean step time, written over it the
                        mean bubble of those steps
  dp_load.png           tiles and tokens per step of every DP rank (ISF keeps them level)
  gantt.png             with --trace: one subplot per file, one above the other (e.g. baseline
                        vs OmniBal), on a shared time axis starting at each file's first event

The x axis of the per-step plots is steps done (metrics "step" + 1, eval "step"). Loss,
samples/s and bubble are drawn raw (faint) and as a running median over n/40 steps once a run
has more than 40 steps.

Traces are Chrome trace-event JSON ({"traceEvents": [...]} or a bare list), as omnibal-train
(runtime.trace_steps) and omnibal-plan simulate --trace write them: complete events
{"ph": "X", "name", "cat", "pid": DP rank, "tid": pipeline stage, "ts"/"dur": microseconds,
"args": {"micro_batch", "chunk", ...}} and metadata events ("ph": "M", process_name /
thread_name). One row per (pid, tid); compute events fill the row, comm events (cat "comm")
a thin strip at its foot; the micro-batch index is written in a bar when it fits; later model
chunks (interleaved 1F1B) are drawn lighter.

Needs matplotlib (the environment of scripts/setup.sh has it); only the standard library
besides. Bad input (a missing file, a line that is not JSON, a record without a field) is an
error naming the file and line; exit status 2.
"""
import argparse
import json
import os
import statistics
import sys

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgb
    from matplotlib.patches import Patch
except ImportError as e:
    sys.exit(f"plot_run.py: matplotlib is missing for {sys.executable} ({e}); run "
             "bash scripts/setup.sh and use its environment's python "
             "(~/.cache/omnibal/torch-*/bin/python scripts/plot_run.py)")

FIGSIZE = (6, 3.5)
DPI = 100
TRACE_COLOURS = {"forward": "#4c72b0", "backward": "#dd8452", "backward_input": "#ccb974",
                 "backward_weight": "#c44e52", "recompute": "#8172b3", "send": "#55a868",
                 "recv": "#64b5cd", "send_wait": "#aaaaaa",
                 "dp_reduce": "#937860", "optimizer": "#da8bc3"}


class InputError(Exception):
    """Bad input; the message names the file (and line)."""


# ---------------------------------------------------------------------------------------------
# Reading run directories

def read_jsonl(path, need, required):
    """The records of a JSON-lines file; each must hold the keys in `need`."""
    if not os.path.isfile(path):
        if required:
            raise InputError(f"{path}: no such file (not an omnibal-train run directory, or the "
                             "run has not logged a step yet)")
        return []
    records = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except ValueError as e:
                raise InputError(f"{path}:{n}: not JSON ({e})") from None
            missing = [k for k in need if k not in r]
            if missing:
                raise InputError(f"{path}:{n}: no field {', '.join(map(repr, missing))}")
            records.append(r)
    if required and not records:
        raise InputError(f"{path}: no step records")
    return records


class Run:
    """One run directory: its step and evaluation records and its summary (or None)."""

    def __init__(self, path):
        if not os.path.isdir(path):
            raise InputError(f"{path}: no such run directory")
        self.path = path
        self.metrics = read_jsonl(os.path.join(path, "metrics.jsonl"),
                                  ("step", "loss", "samples_per_s", "step_seconds", "stages",
                                   "dp_ranks"), required=True)
        self.evals = read_jsonl(os.path.join(path, "eval.jsonl"), ("step", "overall"),
                                required=False)
        summary = os.path.join(path, "summary.json")
        self.summary = None
        if os.path.isfile(summary):
            try:
                with open(summary) as f:
                    self.summary = json.load(f)
            except ValueError as e:
                raise InputError(f"{summary}: not JSON ({e})") from None
        self.label = path

    def steps(self):
        return [r["step"] + 1 for r in self.metrics]

    def bubble(self):
        out = []
        for r in self.metrics:
            if "bubble_fraction" in r:
                out.append(r["bubble_fraction"])
            else:  # the same formula as metrics_record()
                idle = sum(s["idle_s"] for s in r["stages"])
                out.append(idle / len(r["stages"]) / r["step_seconds"] if r["stages"] else 0.0)
        return out

    def steady(self):
        return self.metrics[len(self.metrics) // 10:] or self.metrics


def unique_labels(paths):
    """Shortest trailing path components that tell the paths apart (directory names first)."""
    parts = [os.path.normpath(os.path.abspath(p)).split(os.sep) for p in paths]
    for k in range(1, max((len(p) for p in parts), default=0) + 1):
        labels = [os.sep.join(p[-k:]) for p in parts]
        if len(set(labels)) == len(labels):
            return labels
    return [str(p) for p in paths]


# ---------------------------------------------------------------------------------------------
# Per-step plots

def finite(ys):
    """Values as floats, None (a NaN or inf that nlohmann::json wrote as null) as NaN."""
    return [float("nan") if y is None else float(y) for y in ys]


def running_median(ys, w):
    h = w // 2
    out = []
    for i in range(len(ys)):
        win = [y for y in ys[max(0, i - h):i + h + 1] if y == y]  # NaN != NaN
        out.append(statistics.median(win) if win else float("nan"))
    return out


def colour(i):
    return plt.get_cmap("tab10")(i % 10)


def save(fig, out, name, written):
    path = os.path.join(out, name)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    written.append(path)


def plot_series(runs, out, name, title, ylabel, values, written):
    fig, ax = plt.subplots(figsize=FIGSIZE)
    for i, run in enumerate(runs):
        xs, ys = run.steps(), finite(values(run))
        w = len(ys) // 40
        if w > 1:
            ax.plot(xs, ys, color=colour(i), alpha=0.25, lw=0.8)
            ax.plot(xs, running_median(ys, w), color=colour(i), lw=1.4, label=run.label)
        else:
            ax.plot(xs, ys, color=colour(i), lw=1.4, marker="." if len(ys) < 40 else None,
                    label=run.label)
    ax.set(title=title, xlabel="step", ylabel=ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save(fig, out, name, written)


def plot_eval(runs, out, written):
    with_eval = [(i, r) for i, r in enumerate(runs) if r.evals]
    if not with_eval:
        return
    fig, ax = plt.subplots(figsize=FIGSIZE)
    for i, run in with_eval:
        xs = [e["step"] for e in run.evals]
        ax.plot(xs, [100 * e["overall"]["exact_match"] for e in run.evals], color=colour(i),
                marker="o", lw=1.4, label=f"{run.label} overall" if len(runs) == 1 else run.label)
        if len(runs) == 1:  # one run: its tasks too
            tasks = sorted({t for e in run.evals for t in e.get("tasks", {})})
            for k, t in enumerate(tasks):
                ys = finite(100 * e["tasks"][t]["exact_match"] if t in e.get("tasks", {})
                            else None for e in run.evals)
                ax.plot(xs, ys, color=colour(k + 1), ls="--", lw=1, marker=".", label=t)
    ax.set_ylim(0, max(1.0, ax.get_ylim()[1]))
    ax.set(title="held-out exact match", xlabel="step", ylabel="exact match (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save(fig, out, "eval_exact_match.png", written)


def plot_stages(runs, out, written):
    fig, ax = plt.subplots(figsize=FIGSIZE)
    parts = (("forward_s", "forward", "#4c72b0"), ("backward_s", "backward", "#dd8452"),
             ("idle_s", "idle", "#c8c8c8"))
    x, ticks, tick_labels = 0.0, [], []
    for run in runs:
        steady = run.steady()
        n_stages = max(len(r["stages"]) for r in steady)
        first = x
        for s in range(n_stages):
            bottom = 0.0
            for key, _, c in parts:
                v = statistics.mean(r["stages"][s].get(key, 0.0) if s < len(r["stages"]) else 0.0
                                    for r in steady)
                ax.bar(x, v, bottom=bottom, color=c, width=0.8, edgecolor="white", lw=0.5)
                bottom += v
            ticks.append(x)
            tick_labels.append(f"s{s}")
            x += 1
        step_s = statistics.mean(r["step_seconds"] for r in steady)
        ax.hlines(step_s, first - 0.45, x - 0.55, color="black", lw=1.5)
        bubble = statistics.mean(run.bubble()[len(run.metrics) - len(steady):])
        ax.text((first + x - 1) / 2, step_s, f"bubble {bubble:.2f}", ha="center", va="bottom",
                fontsize=7)
        if len(runs) > 1:
            ax.text((first + x - 1) / 2, -0.16, run.label, transform=ax.get_xaxis_transform(),
                    ha="center", va="top", fontsize=7)
        x += 0.6
    ax.set_xticks(ticks)
    ax.set_xticklabels(tick_labels, fontsize=8)
    ax.set(ylabel="seconds per step",
           title="per-stage busy / idle" + ("" if len(runs) > 1 else f": {runs[0].label}"))
    ax.legend(handles=[Patch(color=c, label=l) for _, l, c in parts] +
              [Patch(color="black", label="step time")], fontsize=7, loc="upper center", ncol=4)
    ax.set_ylim(0, ax.get_ylim()[1] * 1.3)  # room for the legend
    ax.grid(axis="y", alpha=0.3)
    save(fig, out, "stages.png", written)


def plot_dp_load(runs, out, written):
    fig, axes = plt.subplots(1, 2, figsize=FIGSIZE)
    styles = ["-", "--", ":", "-."]
    for ax, key in zip(axes, ("tiles", "tokens")):
        for i, run in enumerate(runs):
            n_dp = max(len(r["dp_ranks"]) for r in run.metrics)
            for d in range(n_dp):
                ys = finite(r["dp_ranks"][d][key] if d < len(r["dp_ranks"]) else None
                            for r in run.metrics)
                ax.plot(run.steps(), ys, color=colour(i), ls=styles[d % len(styles)], lw=1,
                        marker="." if len(ys) < 40 else None,
                        label=f"{run.label} dp {d}" if n_dp > 1 else run.label)
        ax.set(title=f"{key} per DP rank", xlabel="step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=6)
    save(fig, out, "dp_load.png", written)


# ---------------------------------------------------------------------------------------------
# Gantt chart of trace-event files

def read_trace(path):
    """(rows, events): rows {(pid, tid): label}, events [(pid, tid, name, cat, ts, dur, args)]."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror})") from None
    except ValueError as e:
        raise InputError(f"{path}: not JSON ({e})") from None
    evs = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(evs, list):
        raise InputError(f"{path}: no 'traceEvents' list (Chrome trace-event JSON expected)")
    procs, threads, events = {}, {}, []
    for n, e in enumerate(evs):
        ph = e.get("ph") if isinstance(e, dict) else None
        if ph == "M":
            name = e.get("args", {}).get("name")
            if e.get("name") == "process_name":
                procs[e.get("pid")] = name
            elif e.get("name") == "thread_name":
                threads[(e.get("pid"), e.get("tid"))] = name
        elif ph == "X":
            missing = [k for k in ("name", "pid", "tid", "ts", "dur") if k not in e]
            if missing:
                raise InputError(f"{path}: traceEvents[{n}]: no field "
                                 f"{', '.join(map(repr, missing))}")
            events.append((e["pid"], e["tid"], e["name"], e.get("cat", ""), float(e["ts"]),
                           float(e["dur"]), e.get("args", {})))
    if not events:
        raise InputError(f"{path}: no complete events (\"ph\": \"X\")")
    rows = {}
    for pid, tid in sorted({(e[0], e[1]) for e in events}):
        rows[(pid, tid)] = (f"{procs.get(pid) or f'dp {pid}'} / "
                            f"{threads.get((pid, tid)) or f'stage {tid}'}")
    return rows, events


def lighter(c, k, n):
    """Colour `c` mixed with white for model chunk k of n (chunk 0 unchanged)."""
    f = 0.45 * k / max(1, n - 1)
    return tuple(x + (1 - x) * f for x in to_rgb(c))


def plot_gantt(paths, out, written):
    traces = [read_trace(p) for p in paths]
    labels = unique_labels(paths)
    n_rows = [len(rows) for rows, _ in traces]
    fig, axes = plt.subplots(len(traces), 1, sharex=True, squeeze=False,
                             figsize=(FIGSIZE[0] * 1.5, 0.6 + sum(0.35 * n + 0.6 for n in n_rows)),
                             gridspec_kw={"height_ratios": [n + 0.8 for n in n_rows]})
    names = set()
    span_max = max(max(e[4] + e[5] for e in evs) - min(e[4] for e in evs) for _, evs in traces)
    px_per_us = FIGSIZE[0] * 1.5 * DPI * 0.8 / span_max  # about 80 % of the width is data
    for ax, label, (rows, evs) in zip(axes[:, 0], labels, traces):
        t0 = min(e[4] for e in evs)
        y_of = {key: i for i, key in enumerate(rows)}
        n_chunks = 1 + max(int(e[6].get("chunk", 0) or 0) for e in evs)
        for pid, tid, name, cat, ts, dur, args in evs:
            names.add(name)
            y = y_of[(pid, tid)]
            comm = cat == "comm" or name in ("send", "recv")
            c = TRACE_COLOURS.get(name, "#999999")
            chunk = int(args.get("chunk", 0) or 0)
            c = lighter(c, chunk, n_chunks)
            y0, h = (y + 0.22, 0.16) if comm else (y - 0.4, 0.62)
            ax.broken_barh([((ts - t0) / 1e3, dur / 1e3)], (y0, h), facecolors=c,
                           edgecolor="white", lw=0.3)
            mb = args.get("micro_batch")
            if mb is not None and not comm and dur * px_per_us >= 6 * len(str(mb)) + 2:
                ax.text((ts - t0 + dur / 2) / 1e3, y - 0.09, str(mb), ha="center",
                        va="center", fontsize=6, color="black" if chunk else "white")
        span = (max(e[4] + e[5] for e in evs) - t0) / 1e3
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels(rows.values(), fontsize=7)
        ax.set_ylim(len(rows) - 0.5, -0.6)
        chunks = f", {n_chunks} model chunks (later ones lighter)" if n_chunks > 1 else ""
        ax.set_title(f"{label}: {span:.1f} ms{chunks}", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("ms from the first event")
    order = [n for n in TRACE_COLOURS if n in names] + sorted(names - set(TRACE_COLOURS))
    fig.legend(handles=[Patch(color=TRACE_COLOURS.get(n, "#999999"), label=n) for n in order],
               loc="lower center", ncol=min(len(order), 5), fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.06 + 0.02 * (len(order) > 5), 1, 1))
    path = os.path.join(out, "gantt.png")
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    written.append(path)


# ---------------------------------------------------------------------------------------------

def main(argv=None):
    p = argparse.ArgumentParser(
        description="PNG plots of omnibal-train run directories (overlaid) and a Gantt chart of "
                    "trace-event files.")
    p.add_argument("runs", nargs="*", metavar="RUN_DIR", help="omnibal-train run directories")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the PNGs (created)")
    p.add_argument("--trace", action="append", default=[], metavar="TRACE.json",
                   help="a Chrome trace-event file for gantt.png (repeat: one subplot each)")
    a = p.parse_args(argv)
    if not a.runs and not a.trace:
        p.error("give at least one RUN_DIR or --trace")
    written = []
    try:
        runs = [Run(d) for d in a.runs]
        for run, label in zip(runs, unique_labels(a.runs)):
            run.label = label if run.summary is not None else f"{label} (unfinished)"
        os.makedirs(a.out, exist_ok=True)
        if runs:
            plot_series(runs, a.out, "loss.png", "training loss", "loss",
                        lambda r: [m["loss"] for m in r.metrics], written)
            plot_eval(runs, a.out, written)
            plot_series(runs, a.out, "samples_per_s.png", "throughput", "samples / s",
                        lambda r: [m["samples_per_s"] for m in r.metrics], written)
            plot_series(runs, a.out, "bubble_fraction.png",
                        "bubble: idle share of the stages", "bubble fraction",
                        lambda r: r.bubble(), written)
            plot_stages(runs, a.out, written)
            plot_dp_load(runs, a.out, written)
        if a.trace:
            plot_gantt(a.trace, a.out, written)
    except InputError as e:
        print(f"plot_run.py: {e}", file=sys.stderr)
        sys.exit(2)
    for path in written:
        print(path)


if __name__ == "__main__":
    main()
