"""Writes <results>/summary.json from check.sh's step table (<results>/.steps.tsv: name, status
pass|fail|skipped, reason, seconds) and the figures in its logs (PEAK_TFLOPS in peak.log,
TIMING_JSON in timing.log, MEMORY in tests.log), then prints a short table.
Usage: python3 summary.py RESULTS_DIR MODE   (MODE: gpu | dry-run)"""
import json
import os
import re
import sys


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def main():
    res, mode = sys.argv[1], sys.argv[2]
    steps = []
    for line in read(os.path.join(res, ".steps.tsv")).splitlines():
        name, status, reason, seconds = (line.split("\t") + ["", "", "", "0"])[:4]
        steps.append({"name": name, "status": status, "reason": reason, "seconds": float(seconds or 0)})
    summary = {"mode": mode, "steps": steps}
    by_name = {s["name"]: s for s in steps}
    if "build" in by_name:
        summary["build_seconds"] = by_name["build"]["seconds"]
    summary["tests"] = {s["name"][len("test:"):]: {k: s[k] for k in ("status", "reason")}
                        for s in steps if s["name"].startswith("test:")}
    m = re.search(r"^PEAK_TFLOPS (\S+)", read(os.path.join(res, "peak.log")), re.M)
    peak = float(m.group(1)) if m else None
    summary["bf16_matmul_peak_tflops"] = peak
    m = re.search(r"^TIMING_JSON (\{.*\})", read(os.path.join(res, "timing.log")), re.M)
    timing = json.loads(m.group(1)) if m else None
    summary["timing"] = timing
    summary["model_tflops"] = timing["model_tflops"] if timing else None
    summary["mfu"] = (timing["model_tflops"] / peak) if (timing and peak and mode == "gpu") else None
    m = re.search(r"^MEMORY stage (\d+): predicted (\S+) B, measured (\S+) B", read(os.path.join(res, "tests.log")), re.M)
    summary["memory"] = ({"stage": int(m.group(1)), "predicted_bytes": float(m.group(2)),
                          "measured_bytes": float(m.group(3))} if m else None)
    failed = [s["name"] for s in steps if s["status"] == "fail"]
    summary["failed"] = failed
    with open(os.path.join(res, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    print(f"\n| step | status | seconds | reason |\n|---|---|---:|---|")
    for s in steps:
        print(f"| {s['name']} | {s['status']} | {s['seconds']:.0f} | {s['reason']} |")
    fmt = lambda v, spec: "n/a" if v is None else format(v, spec)
    print(f"\nmodel TFLOP/s {fmt(summary['model_tflops'], '.1f')}, bf16 matmul peak "
          f"{fmt(peak, '.1f')} TFLOP/s, MFU {fmt(summary['mfu'], '.3f')}")
    if summary["memory"]:
        mm = summary["memory"]
        print(f"memory stage {mm['stage']}: predicted {mm['predicted_bytes'] / 2**20:.2f} MiB, "
              f"measured {mm['measured_bytes'] / 2**20:.2f} MiB")
    print(f"summary: {os.path.join(res, 'summary.json')}; failed: {', '.join(failed) or 'none'}")


if __name__ == "__main__":
    main()
