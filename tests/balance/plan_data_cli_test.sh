#!/usr/bin/env bash
# End-to-end check of `omnibal-plan data` on the shared length files: the table, the --json
# fields the issue lists, the --plan file, and argument errors. Usage: plan_data_cli_test.sh BIN
set -euo pipefail
BIN=$1
DATA=${OMNIBAL_SHARED_DATA:-$(dirname "$0")/../../../shared/data}/internvl-chat-1.2-lengths
FILES=("$DATA/ai2d_train_12k_wh_token_lengths.json" "$DATA/chartqa_train_18k_wh_token_lengths.json"
       "$DATA/docvqa_train_10k_wh_token_lengths.json")
for f in "${FILES[@]}"; do [ -f "$f" ] || { echo "missing shared file $f" >&2; exit 1; }; done
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
"$BIN" data --lengths "${FILES[@]}" --dp 8 --samples-per-pack 4 --method all --search \
  --json "$OUT/r.json" --plan "$OUT/plan.json" > "$OUT/stdout"
grep -q "budget search: .* candidates" "$OUT/stdout"
grep -q "^isf " "$OUT/stdout"
python3 - "$OUT/r.json" "$OUT/plan.json" <<'PY'
import json, sys
res = json.load(open(sys.argv[1]))["results"]
need = ["method", "pad_ratio", "dist_ratio_vit", "dist_ratio_llm", "tile_fill", "token_fill",
        "packs", "samples", "samples_per_pack", "skipped", "seconds"]
methods = [r["method"] for r in res]
assert methods == ["isf", "isf-random-placement", "multi-source", "random", "length-group",
                   "best-fit"], methods
for r in res:
    missing = [k for k in need if k not in r]
    assert not missing, (r["method"], missing)
    assert r["samples"] + r["skipped"] == 40941, r
isf = res[0]
assert all(k in isf for k in ["q_vit", "q_tok", "q_tok_thresh"]), isf
assert isf["dist_ratio_vit"] <= 0.001 and isf["dist_ratio_llm"] <= 0.005, isf
plan = json.load(open(sys.argv[2]))
assert plan["format"] == "omnibal.data_plan.v1" and plan["dp"] == 8 and plan["method"] == "isf"
assert plan["budgets"]["q_vit"] == isf["q_vit"] and len(plan["plan_hash"]) == 16
packed = sum(len(p) for step in plan["steps"] for rank in step for p in rank)
packed += sum(len(p) for p in plan["carried"])
assert packed == 40941, packed
assert len(plan["steps"]) == isf["steps"] and all(len(s) == 8 for s in plan["steps"])
PY
# The token cap: searched budgets (5888 above) and every pack stay within --preset base-100m's
# llm.max_seq_len (4096); an explicit --q-tok over --max-seq-len is refused naming both.
"$BIN" data --lengths "${FILES[@]}" --dp 8 --samples-per-pack 4 --method all --search \
  --preset base-100m --json "$OUT/cap.json" > "$OUT/cap.stdout"
grep -q "at most 4096 tokens per pack" "$OUT/cap.stdout"
python3 - "$OUT/cap.json" "$OUT/r.json" <<'PY'
import json, sys
res = json.load(open(sys.argv[1]))["results"]
assert json.load(open(sys.argv[2]))["results"][0]["q_tok"] > 4096  # uncapped: over the cap
for r in res:  # max_tokens of padded methods is max * count; the cap is on the summed tokens
    if r["method"] not in ("random", "length-group"):
        assert r["max_tokens"] <= 4096, (r["method"], r["max_tokens"])
    assert r.get("q_tok", 0) <= 4096, r
    assert r["samples"] + r["skipped"] == 40941, r
PY
if "$BIN" data --lengths "${FILES[0]}" --q-vit 20 --q-tok 6656 --max-seq-len 4096 2> "$OUT/err"; then exit 1; fi
grep -q -- "--q-tok 6656 is over the model's llm.max_seq_len 4096 (--max-seq-len)" "$OUT/err"
# Pack time model: the analytic 6B+20B table adds the Cost Dist Ratios to the table and --json;
# --place-by time keeps the ISF packs and places them by predicted seconds.
"$BIN" data --lengths "${FILES[@]}" --dp 8 --samples-per-pack 4 --method isf --q-vit 20 \
  --q-tok 5888 --cost-preset internvl-1.5-6b-20b --place-by time --json "$OUT/time.json" \
  > "$OUT/time.stdout"
grep -q "pack time (analytic:internvl-1.5-6b-20b:a100-80g)" "$OUT/time.stdout"
grep -q "cdist_dp cdist_mb" "$OUT/time.stdout"
grep -q "^  placement by time: " "$OUT/time.stdout"
python3 - "$OUT/time.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
r = doc["results"][0]
assert r["place_by"] == "time" and r["placement"].startswith("time: "), r
assert r["cost_dist_ratio_dp"] <= 0.002 and r["cost_dist_ratio_mb"] == 0, r
assert r["step_seconds"] > 0, r
tm = doc["time_model"]
assert tm["source"] == "analytic:internvl-1.5-6b-20b:a100-80g" and tm["per_tile_s"] > 0, tm
assert tm["fit"]["loads"] == 64 and tm["fit"]["max_rel_residual"] < 1e-9, tm
PY
# Profiled tables: one table gives the scaled model; several are fitted (no attention term
# without load.token_sq_sum); loads with one tile count cannot identify the per-tile term.
python3 - "$OUT" <<'PY'
import json, sys
def table(path, tiles, tokens):
    unit = lambda name, kind, f, b: {"name": name, "kind": kind, "forward_s": f, "backward_s": b,
        "activation_bytes": 0, "parameter_bytes": 0, "trainable": True, "output_bytes": 0}
    # 0.03 s per tile, 3e-5 s per token, 0.003 s per pack (in the head)
    units = [unit("vit_block.0", "vit_block", 0.01 * tiles, 0.02 * tiles),
             unit("llm_block.0", "llm_block", 1e-5 * tokens, 2e-5 * tokens),
             unit("head", "head", 0.001, 0.002)]
    json.dump({"format": "omnibal.unit_costs.v1", "model": "m", "source": "profiled:cpu",
               "load": {"tiles": tiles, "tokens": tokens, "samples": 4}, "units": units},
              open(path, "w"))
d = sys.argv[1]
for name, tiles, tokens in [("a", 10, 3000), ("b", 20, 3000), ("c", 20, 6000), ("d", 15, 4000)]:
    table(f"{d}/{name}.json", tiles, tokens)
PY
"$BIN" data --lengths "${FILES[0]}" --cost-table-in "$OUT/a.json" > "$OUT/one.stdout"
grep -q "one table at one load identifies no fixed or attention term: scaled model" "$OUT/one.stdout"
"$BIN" data --lengths "${FILES[0]}" --cost-table-in "$OUT/a.json" "$OUT/b.json" "$OUT/c.json" \
  "$OUT/d.json" --place-by time --json "$OUT/fit.json" > "$OUT/fit.stdout"
grep -q "least squares over 4 loads.*(no attention term: the tables lack load.token_sq_sum)" \
  "$OUT/fit.stdout"
python3 - "$OUT/fit.json" <<'PY'
import json, sys
tm = json.load(open(sys.argv[1]))["time_model"]
assert abs(tm["per_tile_s"] - 0.03) < 1e-9 and abs(tm["per_token_s"] - 3e-5) < 1e-12, tm
assert abs(tm["fixed_s"] - 0.003) < 1e-9 and tm["per_token_sq_s"] == 0, tm
PY
if "$BIN" data --lengths "${FILES[0]}" --cost-table-in "$OUT/b.json" "$OUT/c.json" \
  "$OUT/c.json" 2> "$OUT/err"; then exit 1; fi
grep -q "the loads do not identify the per-tile term (every load has 20 tiles)" "$OUT/err"
if "$BIN" data --lengths "${FILES[0]}" --place-by time 2> "$OUT/err"; then exit 1; fi
grep -q -- "--place-by time needs a pack time model: give --cost-preset NAME or --cost-table-in" \
  "$OUT/err"
if "$BIN" data --lengths "${FILES[0]}" --place-by size 2> "$OUT/err"; then exit 1; fi
grep -q -- "--place-by: expected count | time, got 'size'" "$OUT/err"
if "$BIN" data --lengths "${FILES[0]}" --cost-preset tiny --cost-device a200 2> "$OUT/err"; then
  exit 1
fi
grep -q -- "--cost-device: a200 not in {a100-80g,h100,h200}" "$OUT/err"
# Argument errors name the flag.
if "$BIN" data --lengths "${FILES[0]}" --search --q-vit 9 --q-tok 4096 2> "$OUT/err"; then exit 1; fi
grep -q -- "--search searches the budgets" "$OUT/err"
if "$BIN" data --lengths "${FILES[0]}" --method sorted 2> "$OUT/err"; then exit 1; fi
grep -q -- "--method: expected isf" "$OUT/err"
if "$BIN" data --lengths /nonexistent.json 2> "$OUT/err"; then exit 1; fi
grep -q "/nonexistent.json: cannot open length file" "$OUT/err"
# A misspelt command is named with the list of commands (not CLI11's "A subcommand is required").
if "$BIN" dta --lengths "${FILES[0]}" 2> "$OUT/err"; then exit 1; fi
grep -q "unknown command 'dta'; the commands are data, .*partition" "$OUT/err"
echo "plan_data_cli_test: ok"
