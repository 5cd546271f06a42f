#!/usr/bin/env bash
# End-to-end check of `omnibal-plan partition --trace` and `omnibal-plan simulate --trace` on a
# generated length file (tiny preset): the files parse as trace-event JSON, every micro-batch's
# forward precedes its backward on each (DP rank, stage) track, the simulated step's per-track
# busy time equals the --json report's forward_s + backward_s (1 %), and a bad --trace-row /
# --trace-step / --schedule is named. Usage: plan_trace_cli_test.sh OMNIBAL_PLAN REPO_ROOT
set -euo pipefail
BIN=$1
ROOT=$2
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
python3 - "$OUT" <<'PY'
import json, random, sys
rng = random.Random(5)
rows = [{"vit_num": rng.randint(1, 4), "token_num": rng.randint(100, 400), "image_flags": 1}
        for _ in range(400)]
json.dump(rows, open(sys.argv[1] + "/syn_token_lengths.json", "w"))
json.dump({"syn": {"token_lengths": sys.argv[1] + "/syn_token_lengths.json", "repeat_time": 1}},
          open(sys.argv[1] + "/meta.json", "w"))
PY
CHECK=$(cat <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
ev = [e for e in doc["traceEvents"] if e["ph"] == "X"]
assert ev, "no complete events"
names = {e["name"] for e in ev}
assert {"forward", "recv", "send", "dp_reduce", "optimizer"} <= names, names
assert names & {"backward", "backward_input"}, names
meta = {(e["pid"], e.get("tid")) for e in doc["traceEvents"] if e["ph"] == "M"}
fwd, busy = {}, {}
for e in ev:
    assert e["dur"] >= 0 and e["ts"] >= 0, e
    track = (e["pid"], e["tid"])
    assert (e["pid"], None) in meta and track in meta, ("unnamed track", track)
    key = track + (e["args"].get("micro_batch"), e["args"]["chunk"])
    if e["name"] == "forward":
        assert {"samples", "tiles", "tokens"} <= set(e["args"]), e
        fwd[key] = e["ts"] + e["dur"]
    if e["name"] in ("backward", "backward_input", "backward_weight"):
        assert key in fwd and fwd[key] <= e["ts"] + 1e-6, ("backward before forward", e)
    if e["name"] in ("forward", "backward", "backward_input", "backward_weight"):
        busy[track] = busy.get(track, 0.0) + e["dur"] * 1e-6
assert doc["otherData"]["source"] == "simulated", doc["otherData"]
if len(sys.argv) > 2:  # the simulate --json report of the same step: busy per track within 1 %
    rep = json.load(open(sys.argv[2]))
    step = [s for s in rep["steps"] if s["step"] == doc["otherData"]["step"]][0]
    for s, st in enumerate(step["stages"]):
        want = st["forward_s"] + st["backward_s"]
        got = busy[(0, s)]
        assert abs(got - want) <= 0.01 * want, ("stage", s, got, want)
print("ok", len(ev), "events")
PY
)
"$BIN" partition --model tiny --lengths "$OUT/syn_token_lengths.json" --dp 2 --pp 2 \
  --micro-batches 2 --global-batch 16 --cost-table "$OUT/tiny.json" \
  --trace "$OUT/baseline.json" --trace-row baseline > "$OUT/p1"
grep -q "trace of row 'baseline', step 0 written" "$OUT/p1"
python3 -c "$CHECK" "$OUT/baseline.json"
"$BIN" partition --model tiny --lengths "$OUT/syn_token_lengths.json" --dp 2 --pp 2 \
  --micro-batches 2 --global-batch 16 --trace "$OUT/omnibal.json" --trace-step 1 > "$OUT/p2"
grep -q "trace of row '+ adaptive recompute', step 1 written" "$OUT/p2"
python3 -c "$CHECK" "$OUT/omnibal.json"
if "$BIN" partition --model tiny --lengths "$OUT/syn_token_lengths.json" --dp 2 --pp 2 \
    --micro-batches 2 --global-batch 16 --trace "$OUT/x.json" --trace-row nope > "$OUT/p3" 2>&1; then
  echo "a bad --trace-row was accepted" >&2; exit 1
fi
grep -q "names no row; the rows are 'baseline', '+ ISF'" "$OUT/p3"
# --schedule: a repeated schedule is one row; a bad name lists the choices (with all); a
# --virtual-stages without an interleaved row to apply to is refused.
PART=("$BIN" partition --model tiny --lengths "$OUT/syn_token_lengths.json" --dp 2 --pp 2
      --micro-batches 2 --global-batch 16)
"${PART[@]}" --schedule zb-v,zb-v > "$OUT/p4"
[ "$(grep -c '^+ zb-v v=2 ' "$OUT/p4")" = 1 ]
if grep -q "what-if" "$OUT/p4"; then echo "a what-if note within the card's memory" >&2; exit 1; fi
# A budget over the card's memory plans, and says it is a what-if.
"${PART[@]}" --budget-gb 100 > "$OUT/p6"
grep -q "note: --budget-gb is over the a100-80g's 85.9 GB: a what-if" "$OUT/p6"
for bad in "--schedule zbv" "--schedule auto" "--schedule zb-v --virtual-stages 3"; do
  if "${PART[@]}" $bad > "$OUT/p5" 2>&1; then echo "accepted: $bad" >&2; exit 1; fi
  case "$bad" in
    *virtual*) grep -q -- "--virtual-stages applies to interleaved rows only" "$OUT/p5" ;;
    *) grep -q -- "--schedule: expected 1f1b | interleaved | zb-h1 | zb-v | all" "$OUT/p5" ;;
  esac
done

SIM=("$BIN" simulate --config "$ROOT/configs/demo.yaml" --set "data.meta=$OUT/meta.json"
     --set parallel.partition=uniform --set memory.recompute=none --cost-table-in "$OUT/tiny.json")
"${SIM[@]}" --steps 3 --trace "$OUT/sim.json" --trace-step 1 --json "$OUT/sim-report.json" > "$OUT/s1"
grep -q "trace of step 1 written" "$OUT/s1"
python3 -c "$CHECK" "$OUT/sim.json" "$OUT/sim-report.json"
"${SIM[@]}" --steps 2 --schedule zb-h1 --trace "$OUT/sim-zb.json" --json "$OUT/sim-zb-report.json" \
  > /dev/null
python3 -c "$CHECK" "$OUT/sim-zb.json" "$OUT/sim-zb-report.json"
if "${SIM[@]}" --steps 2 --trace "$OUT/y.json" --trace-step 5 > "$OUT/s2" 2>&1; then
  echo "a --trace-step outside the simulated steps was accepted" >&2; exit 1
fi
grep -q "trace-step 5 is not simulated (steps 0..1)" "$OUT/s2"
[ ! -e "$OUT/y.json" ]
echo PASS
