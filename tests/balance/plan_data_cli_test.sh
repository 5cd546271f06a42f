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
# Argument errors name the flag.
if "$BIN" data --lengths "${FILES[0]}" --search --q-vit 9 --q-tok 4096 2> "$OUT/err"; then exit 1; fi
grep -q -- "--search searches the budgets" "$OUT/err"
if "$BIN" data --lengths "${FILES[0]}" --method sorted 2> "$OUT/err"; then exit 1; fi
grep -q -- "--method: expected isf" "$OUT/err"
if "$BIN" data --lengths /nonexistent.json 2> "$OUT/err"; then exit 1; fi
grep -q "/nonexistent.json: cannot open length file" "$OUT/err"
echo "plan_data_cli_test: ok"
