#!/usr/bin/env python3
"""End-to-end checks of omnibal-train on a small generated demo split (ctest label
`integration`, one test train_<check> per check). Each check launches real mpirun jobs of the
tiny preset and reads the run directories (metrics.jsonl, summary.json, checkpoints/). The checks
live in checks/<theme>.py; checks/__init__.py holds their one list.

  train_checks.py CHECK --bin omnibal-train --mpiexec mpiexec --data DIR --work DIR [--plan omnibal-plan]
  train_checks.py --list     every check: name, theme and what it asserts
  train_checks.py --cmake    "name cost" lines that tests/integration/CMakeLists.txt registers

Some checks (init_from, packer_skip, repeat_time, ...) also run omnibal-plan (--plan). A check
prints PASS at the end, or FAIL: and the reason with exit status 1.
"""
import argparse
import sys

import checks
from checks.harness import Runner


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("check", nargs="?", help="the check to run (see --list)")
    ap.add_argument("--list", action="store_true", help="print every check and what it asserts")
    ap.add_argument("--cmake", action="store_true",
                    help="print 'name cost' per check (cost 0: no hint) for CMake")
    ap.add_argument("--bin", help="omnibal-train")
    ap.add_argument("--mpiexec", help="mpiexec")
    ap.add_argument("--data", help="the demo split of scripts/make_demo_data.sh")
    ap.add_argument("--work", help="a folder for the check's run directories")
    ap.add_argument("--plan", help="omnibal-plan (init_from, packer_skip, repeat_time, ...)")
    a = ap.parse_args()
    registry = checks.load()
    if a.list:
        width = max(map(len, registry))
        for c in registry.values():
            print(f"{c.name:<{width}}  {c.theme:<11}  {c.spec}")
        return
    if a.cmake:
        for c in registry.values():
            print(f"{c.name} {c.cost or 0}")
        return
    if a.check is None:
        ap.error("name a check to run, or --list")
    if a.check not in registry:
        ap.error(f"unknown check {a.check!r}; train_checks.py --list names them")
    missing = [f"--{k}" for k in ("bin", "mpiexec", "data", "work") if not getattr(a, k)]
    if missing:
        ap.error(f"running a check needs {' '.join(missing)}")
    registry[a.check].run(Runner(a))
    print("PASS")


if __name__ == "__main__":
    sys.exit(main())
