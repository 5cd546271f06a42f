#!/usr/bin/env python3
"""Summary table of omnibal-train run directories (summary.json + metrics.jsonl):
  python3 scripts/sweep_table.py runs/sweep/*/"""
import json
import os
import statistics
import sys


def row(d):
    with open(os.path.join(d, "summary.json")) as f:
        s = json.load(f)
    with open(os.path.join(d, "metrics.jsonl")) as f:
        m = [json.loads(l) for l in f if l.strip()]
    steady = m[len(m) // 10:] or m  # skip start-up steps
    ev = s.get("eval", {})
    tasks = ev.get("tasks", {})
    single = next((v for k, v in tasks.items() if "single" in k), None)
    return [os.path.basename(d.rstrip("/")), s.get("balance_method", "?"), s.get("partition", "?"),
            str(s["steps"]), f"{statistics.median(x['step_seconds'] for x in steady):.3f}",
            f"{statistics.median(x['tokens_per_s'] for x in steady):.0f}",
            f"{statistics.mean(x['bubble_fraction'] for x in steady):.2f}",
            f"{s['final_loss']:.3f}",
            f"{100 * ev['overall']['exact_match']:.1f}" if ev else "-",
            f"{100 * single['exact_match']:.1f}" if single else "-",
            f"{s['seconds']:.0f}"]


def main():
    head = ["run", "method", "partition", "steps", "s/step", "tok/s", "bubble", "loss",
            "EM all %", "EM single %", "wall s"]
    rows = [head] + [row(d) for d in sys.argv[1:]]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for r in rows:
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))


if __name__ == "__main__":
    main()
