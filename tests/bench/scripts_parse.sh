#!/usr/bin/env bash
# Every bench script parses: `bash -n` on scripts/bench/*.sh, Python's parser on
# scripts/bench/*.py (nothing written: no __pycache__). Names each file that does not.
#   bash tests/bench/scripts_parse.sh [PYTHON]
set -uo pipefail
DIR="$(cd "$(dirname "$0")/../../scripts/bench" && pwd)"
PY=${1:-python3}
status=0
for f in "$DIR"/*.sh; do
  bash -n "$f" || { echo "FAIL: $f does not parse (bash -n)"; status=1; }
done
"$PY" - "$DIR"/*.py <<'PY' || status=1
import ast, sys
for path in sys.argv[1:]:
    with open(path) as f:
        try:
            ast.parse(f.read(), path)
        except SyntaxError as e:
            print(f"FAIL: {path}:{e.lineno}: {e.msg}")
            sys.exit(1)
PY
[ "$status" = 0 ] && echo "PASS: $(ls "$DIR"/*.sh "$DIR"/*.py | wc -l) bench scripts parse"
exit "$status"
