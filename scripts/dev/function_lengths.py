#!/usr/bin/env python3
"""House rule: no long functions (issue 39, item 3; docs/style.md, practice 1).

Measures every function of the tracked C++ sources (`git ls-files '*.h' '*.cpp' '*.cu'`) with
lizard (https://github.com/terryyin/lizard; pinned as OMNIBAL_LIZARD_PIN in scripts/torch_env.sh,
installed in the torch environment by scripts/setup.sh). A function's length is lizard's: the
lines from its signature to its closing brace, blank and comment lines included; a lambda counts
towards the function that holds it; a Catch2 TEST_CASE is a function named TEST_CASE.

Prints every function over REPORT (60) lines, longest first, and fails (exit 1), listing the
offenders with file:line, when
  - a function of library or app code (lib/, models/, apps/, scripts/bench/) is over CEILING (80),
  - or a TEST_CASE in tests/ is over TEST_CEILING (120).
  - or a file of FILE_LIMITS holds a function over its own ceiling or is longer than its limit.
Everything else (helpers in tests/, scripts/gpu/, ...) is reported, never failed.
FILE_LIMITS holds lib/train/trainer.cpp: the training loop and its step, which issue 39 brought
back from 724 lines to a loop one can read (at most 350 lines, no function over 40); whatever
grows there belongs in the component that owns it (stage_runtime, run_stop, step_trace, ...).

Why these numbers. docs/style.md asks for functions under ~60 lines, so the report starts there:
it is the list to work down. The ceiling sits a third above the guideline: a function near 60
that a fix grows by a few lines does not break the build (a hard 60 would fail on natural
variation and invite splits that only move lines around), while regrowth of the kind issue 39
counted (functions of 60+ lines went from 10 to 28 between two reads of the tree, 12 of them over
80, the longest 157) fails as soon as a function passes 80. A TEST_CASE is a list of independent
checks (SECTIONs, GENERATE sweeps) read top to bottom, each a few lines, so it gets twice the
guideline.

Usage:
  function_lengths.py [--root DIR]   check the tree at DIR (default: this script's repository)
  function_lengths.py --selftest     show the check fails on a long function and a long TEST_CASE
Exit status: 0 pass, 1 a function over its ceiling (or a failed self-test), 2 lizard or git
missing.
"""
import argparse
import contextlib
import io
import os
import re
import subprocess
import sys
import tempfile

REPORT = 60  # docs/style.md: "Functions under ~60 lines."
CEILING = 80  # library and app code
TEST_CEILING = 120  # a Catch2 TEST_CASE in tests/
LIBRARY_DIRS = ("lib/", "models/", "apps/", "scripts/bench/")
# path -> (function ceiling, file lines): files held to a stricter rule than CEILING.
FILE_LIMITS = {"lib/train/trainer.cpp": (40, 350)}
SOURCES = ("*.h", "*.cpp", "*.cu")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def die(message):
    """Exit 2 (the check could not run), saying why."""
    print(f"function lengths: {message}", file=sys.stderr)
    sys.exit(2)


def load_lizard():
    """The lizard module, or exit 2 naming the interpreter and the fix."""
    try:
        import lizard  # noqa: PLC0415 (imported here so the message below can say where)
    except ImportError:
        die(f"{sys.executable} has no lizard module: run `bash scripts/setup.sh` (it installs "
            f"the pinned lizard into the torch environment, scripts/torch_env.sh) or "
            f"`pip install lizard=={pinned_lizard()}`")
    pin = pinned_lizard()
    if pin and lizard.version != pin:
        print(f"function lengths: warning: lizard {lizard.version}, but scripts/torch_env.sh pins "
              f"{pin} (lengths may differ; run `bash scripts/setup.sh`)", file=sys.stderr)
    return lizard


def pinned_lizard():
    """OMNIBAL_LIZARD_PIN of scripts/torch_env.sh, or None."""
    try:
        with open(os.path.join(REPO, "scripts", "torch_env.sh"), encoding="utf-8") as f:
            found = re.search(r"^OMNIBAL_LIZARD_PIN=(\S+)", f.read(), re.M)
    except OSError:
        return None
    return found.group(1) if found else None


def tracked_sources(root):
    """Paths (relative to root) of the C++ sources git tracks there."""
    try:
        out = subprocess.run(["git", "ls-files", "--", *SOURCES], cwd=root, check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        die(f"git ls-files failed in {root}: {e}")
    return sorted(p for p in out.splitlines() if p)


def ceiling_of(path, name):
    """The most lines a function may have (None: reported only)."""
    if path in FILE_LIMITS:
        return FILE_LIMITS[path][0]
    if path.startswith(LIBRARY_DIRS):
        return CEILING
    if path.startswith("tests/") and name == "TEST_CASE":
        return TEST_CEILING
    return None


def display_name(name, lines, start_line):
    """The function's name; a TEST_CASE also shows its title ("TEST_CASE \"...\"")."""
    if name != "TEST_CASE":
        return name
    head = "\n".join(lines[start_line - 1:start_line + 2])  # the title may wrap
    title = re.search(r'TEST_CASE\s*\(\s*"((?:[^"\\]|\\.)*)"', head)
    return f'TEST_CASE "{title.group(1)}"' if title else name


def measure(root, lizard):
    """(files, functions, long, too_long_files) for the tree at root: long holds (length, ceiling
    or None, path, line, name) for every function over REPORT lines or its ceiling, longest
    first; too_long_files (lines, limit, path) for each FILE_LIMITS file over its line limit."""
    paths = tracked_sources(root)
    functions, long, too_long_files = 0, [], []
    for path in paths:
        with open(os.path.join(root, path), encoding="utf-8") as f:
            text = f.read()
        info = lizard.analyze_file.analyze_source_code(path, text)
        lines = text.splitlines()
        if path in FILE_LIMITS and len(lines) > FILE_LIMITS[path][1]:
            too_long_files.append((len(lines), FILE_LIMITS[path][1], path))
        for fn in info.function_list:
            functions += 1
            ceiling = ceiling_of(path, fn.name)
            if fn.length > REPORT or (ceiling is not None and fn.length > ceiling):
                long.append((fn.length, ceiling_of(path, fn.name), path, fn.start_line,
                             display_name(fn.name, lines, fn.start_line)))
    long.sort(key=lambda row: (-row[0], row[2], row[3]))
    return len(paths), functions, long, too_long_files


def check(root, lizard):
    """Prints the report for the tree at root; returns the offenders (rows over their ceiling)."""
    files, functions, long, too_long_files = measure(root, lizard)
    print(f"function lengths (lizard {lizard.version}): {files} files, {functions} functions, "
          f"{len(long)} over {REPORT} lines; ceilings: {CEILING} in "
          f"{' '.join(LIBRARY_DIRS)}, {TEST_CEILING} for a TEST_CASE in tests/")
    for length, ceiling, path, line, name in long:
        mark = "" if ceiling is None else f"/{ceiling}"
        over = "  OVER" if ceiling is not None and length > ceiling else ""
        print(f"  {length:>4}{mark:<4}  {path}:{line}  {name}{over}")
    offenders = [row for row in long if row[1] is not None and row[0] > row[1]]
    for lines, limit, path in too_long_files:
        offenders.append((lines, limit, path, 0, "the file"))
    if offenders:
        print(f"FAIL: {len(offenders)} functions over their ceiling:")
        for length, ceiling, path, line, name in offenders:
            print(f"  {path}:{line}: {name} has {length} lines (ceiling {ceiling})")
        print("split them into named helpers (docs/style.md: functions under ~60 lines; "
              "scripts/dev/function_lengths.py says why the ceilings are where they are)")
    else:
        print("PASS: no function over its ceiling")
    return offenders


def fixture_function(name, lines):
    """C++ text of a function `name` that is exactly `lines` lines long (lines >= 4)."""
    return f"int {name}() {{\n  int x = 0;\n" + "  x += 1;\n" * (lines - 4) + "  return x;\n}\n"


def fixture_test_case(title, lines):
    """C++ text of a TEST_CASE that is exactly `lines` lines long (lines >= 2)."""
    return f'TEST_CASE("{title}", "[fixture]") {{\n' + "  CHECK(1 == 1);\n" * (lines - 2) + "}\n"


def write_fixture(root, files, tracked=True):
    """Writes {path: text} under root, `git add`ing them when tracked."""
    for path, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
        with open(os.path.join(root, path), "w", encoding="utf-8") as f:
            f.write(text)
    if tracked:
        subprocess.run(["git", "add", "--", *files], cwd=root, check=True)


def selftest(lizard):
    """A tree with a function one line over the ceiling in lib/ and a TEST_CASE one over in
    tests/ must fail naming exactly those two; the functions at their ceilings, the ones only
    reported and an untracked long file must not count; without the two the tree passes."""
    bad = {"lib/long.cpp": fixture_function("too_long", CEILING + 1),
           "tests/core/long_test.cpp": fixture_test_case("too many checks", TEST_CEILING + 1)}
    trainer_ceiling, trainer_lines = FILE_LIMITS["lib/train/trainer.cpp"]
    # One function over the file's own ceiling, and the file one line over its limit.
    trainer = fixture_function("loop_step", trainer_ceiling + 1)
    trainer += "\n" * (trainer_lines + 1 - len(trainer.splitlines()))
    bad["lib/train/trainer.cpp"] = trainer
    fine = {"lib/edge.cpp": fixture_function("at_ceiling", CEILING),
            "apps/tool/cmd.cpp": fixture_function("reported", REPORT + 1),
            "scripts/bench/bench.cpp": fixture_function("short", 10),
            "tests/core/edge_test.cpp": fixture_test_case("at the ceiling", TEST_CEILING) +
            fixture_function("test_helper", CEILING + 20),
            "scripts/gpu/probe.h": fixture_function("elsewhere", CEILING + 20)}
    failures = []
    with tempfile.TemporaryDirectory(prefix="function-lengths-selftest-") as root:
        subprocess.run(["git", "init", "-q", root], check=True)
        write_fixture(root, fine)
        write_fixture(root, {"lib/untracked.cpp": fixture_function("untracked", 200)}, False)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            passed = not check(root, lizard)
            write_fixture(root, bad)
            offenders = check(root, lizard)
        text = out.getvalue()
        want = {("lib/long.cpp", 1, "too_long", CEILING + 1),
                ("lib/train/trainer.cpp", 1, "loop_step", trainer_ceiling + 1),
                ("lib/train/trainer.cpp", 0, "the file", trainer_lines + 1),
                ("tests/core/long_test.cpp", 1, 'TEST_CASE "too many checks"', TEST_CEILING + 1)}
        got = {(path, line, name, length) for length, _, path, line, name in offenders}
        if not passed:
            failures.append("the tree without the two long functions failed")
        if got != want:
            failures.append(f"offenders {sorted(got)}, expected {sorted(want)}")
        for line in ("lib/long.cpp:1: too_long has 81 lines (ceiling 80)",
                     "apps/tool/cmd.cpp:1  reported", "scripts/gpu/probe.h:1  elsewhere"):
            if line not in text:
                failures.append(f"the report lacks '{line}'")
        if "untracked" in text:
            failures.append("an untracked file was measured")
    if failures:
        print("function lengths self-test FAILED:\n  " + "\n  ".join(failures) + "\n" + text)
        return 1
    print("function lengths self-test: PASS (a function and a TEST_CASE one line over their "
          "ceilings fail with file:line; at the ceilings, outside the checked folders or "
          "untracked they do not)")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=REPO, help="repository to check (default: this one)")
    parser.add_argument("--selftest", action="store_true", help="check the check on fixtures")
    args = parser.parse_args(argv)
    lizard = load_lizard()
    if args.selftest:
        return selftest(lizard)
    return 1 if check(args.root, lizard) else 0


if __name__ == "__main__":
    sys.exit(main())
