#!/usr/bin/env bash
# Builds the embedded demo dataset (deterministic, < 1 min) from Debian's dataset-fashion-mnist:
# PNG images, JSONL/JSON annotations, train_meta.json / eval_meta.json, and a SentencePiece
# tokenizer (spm_train) with the chat and image special tokens as single pieces.
#   bash scripts/make_demo_data.sh [--out DIR (default data/demo)] [--train N] [--eval M]
set -euo pipefail
# The pinned environment's python (numpy; scripts/torch_env.sh): a python3 on PATH may lack it.
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/torch_env.sh"
OUT="$ROOT/data/demo"
ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
for f in /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz /usr/bin/spm_train; do
  [ -e "$f" ] || { echo "make_demo_data: $f missing; run scripts/setup.sh" >&2; exit 1; }
done
rm -rf "$OUT/train" "$OUT/eval"
mkdir -p "$OUT"
"${OMNIBAL_PYTHON:-$OMNIBAL_TORCH_ENV/bin/python}" "$ROOT/scripts/demo_data/make_demo_data.py" --out "$OUT" "${ARGS[@]+"${ARGS[@]}"}"
# BPE keeps the corpus's words whole (unigram splits this small corpus into characters). Byte
# fallback encodes characters outside the corpus (and the template's "\n") as single byte pieces;
# identity normalisation keeps text as written. Vocab <= 1000 fits the tiny preset (1024).
# Relative paths: the model stores its trainer flags, so it is byte-identical wherever it is built.
cd "$OUT"
spm_train --input=corpus.txt --model_prefix=tokenizer --model_type=bpe --random_seed=2025 \
  --vocab_size=1000 --hard_vocab_limit=false --character_coverage=1.0 --byte_fallback=true \
  --normalization_rule_name=identity --remove_extra_whitespaces=false --add_dummy_prefix=false \
  --user_defined_symbols='<img>,</img>,<IMG_CONTEXT>,<|im_start|>,<|im_end|>' \
  --num_threads=1 --minloglevel=2 > spm_train.log 2>&1 || { cat spm_train.log >&2; exit 1; }
echo "make_demo_data: wrote $OUT (train_meta.json, eval_meta.json, tokenizer.model)"
