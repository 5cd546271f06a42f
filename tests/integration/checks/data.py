"""Data input: corrupt images under on_bad_sample skip (PP 2 as one process, empty packs),
input refused at start-up, the packer's skips under explicit budgets, repeat_time, and the token
cap on pack budgets."""
import json
import os
import shutil
import struct
import subprocess

from . import check
from .harness import ENV, HERE, fail, log_value, refusal
from .results import metrics, rel, summary


@check("on_bad_sample skip over a corrupt training and eval image: PP 2 skips, trains "
       "and evaluates as one process (1e-4)")
def check_bad_sample(r):
    """on_bad_sample: skip with an image that cannot be decoded but whose record carries its
    size (so the start-up scan does not open it): PP=2 must skip the same samples as one
    process on every stage, in training and in evaluation."""
    d = os.path.join(r.a.work, "data-bad")
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(r.a.data, d)
    for split in ("train", "eval"):
        with open(os.path.join(d, split, "single.jsonl")) as f:
            rec = json.loads(f.readline())
        if "width" not in rec:
            fail(f"{split}/single.jsonl: the first record has no width; the scan would catch it")
        with open(os.path.join(d, split, rec["image"]), "wb") as f:
            f.write(b"this is not a PNG file" * 8)
    extra = ["--set", f"data.meta={d}/train_meta.json", "--set", f"data.eval_meta={d}/eval_meta.json",
             "--set", f"data.tokenizer={d}/tokenizer.model", "--set", "data.on_bad_sample=skip",
             "--set", "train.eval_every=0"]
    runs = {}
    for name, np, pp in [("bad-pp1", 1, 1), ("bad-pp2", 2, 2)]:
        p, rd = r.run(np, name, 1, pp, 4, steps=6, extra=extra)
        with open(os.path.join(rd, "summary.json")) as f:
            runs[name] = (metrics(rd), json.load(f), p.stdout + p.stderr)
    (m1, s1, _), (m2, s2, log2) = runs["bad-pp1"], runs["bad-pp2"]
    skipped = s2["skipped_samples"]["training"]
    if skipped < 1 or s1["skipped_samples"]["training"] != skipped:
        fail(f"skipped samples: PP=1 {s1['skipped_samples']}, PP=2 {s2['skipped_samples']}")
    if "bad samples" not in log2 and "skipped" not in log2:
        fail("the PP=2 log does not report the skipped sample")
    if "eval: DP rank 0: skipped 1" not in log2:
        print(log2[-3000:])
        fail("the PP=2 log does not report the skipped evaluation sample")
    for a, b in zip(m2, m1):
        if a["label_tokens"] != b["label_tokens"] or a["samples"] != b["samples"]:
            fail(f"step {a['step']}: PP=2 trained {a['samples']} samples / {a['label_tokens']} "
                 f"label tokens, one process {b['samples']} / {b['label_tokens']}")
        if rel(a["loss"], b["loss"]) > 1e-4:
            fail(f"step {a['step']}: PP=2 loss {a['loss']:.6f} vs one process {b['loss']:.6f}")
    e1, e2 = s1["eval"]["overall"], s2["eval"]["overall"]
    if e1["samples"] != e2["samples"] or rel(e1["loss"], e2["loss"]) > 1e-4:
        fail(f"eval: PP=2 {e2['samples']} samples loss {e2['loss']:.6f}, one process "
             f"{e1['samples']} samples loss {e1['loss']:.6f}")
    print(f"one corrupt training and eval image, skip: PP=2 equals one process over 6 steps "
          f"(skipped {skipped} in training; eval {e2['samples']} samples, loss {e2['loss']:.6f} "
          f"vs {e1['loss']:.6f})")


def corrupt_copy(r, name, lines):
    """A copy of the demo data whose train/single.jsonl records `lines` (0-based) have images
    that cannot be decoded (their records carry the size, so the start-up scan passes them)."""
    d = os.path.join(r.a.work, name)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(r.a.data, d)
    with open(os.path.join(d, "train", "single.jsonl")) as f:
        recs = [json.loads(l) for l in f]
    for k in lines:
        if "width" not in recs[k]:
            fail(f"train/single.jsonl line {k + 1} has no width; the scan would catch it")
        with open(os.path.join(d, "train", recs[k]["image"]), "wb") as f:
            f.write(b"this is not a PNG file" * 8)
    return d


@check("one-sample packs of corrupt images (empty micro-batches): DP 2 x PP 2 equals one "
       "process, every skip is counted and named")
def check_empty_pack(r):
    """on_bad_sample: skip with packs of one sample (random packing) whose images cannot be
    decoded: those packs are empty micro-batches. DP 2 x PP 2 runs on, equals one process, counts
    every skip, names each empty pack's file:line, and both DP replicas report their skips."""
    bad = [0, 2, 3, 5, 8, 11]
    d = corrupt_copy(r, "data-empty", bad)
    ann = os.path.join(d, "train", "single.jsonl")
    with open(ann) as f:
        head = f.readlines()[:16]
    sub = os.path.join(d, "train", "single16.jsonl")
    with open(sub, "w") as f:
        f.writelines(head)
    meta = os.path.join(d, "meta16.json")
    with open(meta, "w") as f:
        json.dump({"single16": {"root": os.path.join(d, "train"), "annotation": sub,
                                "repeat_time": 1, "length": 16}}, f)
    # 16 packs of 1 sample, 4 per step: 8 steps = 2 epochs.
    extra = ["--set", f"data.meta={meta}", "--set", f"data.tokenizer={d}/tokenizer.model",
             "--set", "data.on_bad_sample=skip", "--set", "balance.method=random",
             "--set", "balance.samples_per_pack=1"]
    p1, d1 = r.run(1, "empty-1", 1, 1, 4, steps=8, extra=extra)
    p4, d4 = r.run(4, "empty-4", 2, 2, 2, steps=8, extra=extra)
    want = 2 * len(bad)
    for name, rd in (("one process", d1), ("dp 2 x pp 2", d4)):
        got = summary(rd)["skipped_samples"]["training"]
        if got != want:
            fail(f"{name}: {got} skipped samples in training, expected {want} (6 bad x 2 epochs)")
    for a, b in zip(metrics(d4), metrics(d1)):
        if a["samples"] != b["samples"] or rel(a["loss"], b["loss"]) > 1e-4:
            fail(f"step {a['step']}: dp 2 x pp 2 {a['samples']} samples loss {a['loss']:.6f}, "
                 f"one process {b['samples']} loss {b['loss']:.6f}")
    log = p4.stdout + p4.stderr
    empty = [l for l in log.splitlines() if "every sample of the pack was left out" in l]
    named = [l for l in log.splitlines() if "single16.jsonl:" in l and "corrupt_image" in l]
    if len(empty) != want or len(named) < want:
        print(log[-3000:])
        fail(f"{len(empty)} empty-pack lines and {len(named)} naming file:line and reason, "
             f"expected {want}")
    for dp in (0, 1):
        if not any(f"DP rank {dp}: skipped" in l for l in log.splitlines()):
            print(log[-3000:])
            fail(f"no skipped-sample report of DP rank {dp}")
    print(f"{len(bad)} of 16 one-sample packs empty over 2 epochs: dp 2 x pp 2 equals one process "
          f"(8 steps, {want} skips counted, each empty pack named, both DP replicas report)")


@check("samples over explicit ISF budgets are left out by the packer, counted as "
       "omnibal-plan data counts them and named by file:line")
def check_packer_skip(r):
    """Explicit ISF budgets under skip: the samples over them are left out by the packer; the
    trainer counts and names them as omnibal-plan data does."""
    scan = os.path.join(r.a.work, "ps-scan")
    shutil.rmtree(scan, ignore_errors=True)
    d = r.a.data
    p = subprocess.run([r.a.plan, "scan", "--meta", f"{d}/train_meta.json", "--out", scan,
                        "--preset", "tiny", "--tokenizer", f"{d}/tokenizer.model", "--threads", "1",
                        "--set", "data.max_tiles=12"],
                       env=ENV, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        print(p.stdout, p.stderr)
        fail("omnibal-plan scan failed")
    tokens = []
    for f in sorted(os.listdir(scan)):
        if f.endswith(".json") and f != "meta.json":
            with open(os.path.join(scan, f)) as g:
                tokens += [e["token_num"] for e in json.load(g)]
    q_tok = sorted(tokens)[-3]  # the two longest samples are over it (ties aside)
    over = sum(1 for t in tokens if t > q_tok)
    if over < 1:
        fail("no sample over the chosen budget")
    thresh = q_tok // 2  # the default Q_t - 128 can be below 0 for these short samples
    budgets = ["--set", "balance.q_vit=64", "--set", f"balance.q_tok={q_tok}",
               "--set", f"balance.q_tok_thresh={thresh}", "--set", "data.on_bad_sample=skip"]
    p, rd = r.run(1, "ps-train", 1, 1, 2, steps=2, extra=budgets)
    got = summary(rd)["skipped_samples"]["packer"]
    line = log_value(p.stdout + p.stderr, "the packer left out")
    q = subprocess.run([r.a.plan, "data", "--meta", os.path.join(scan, "meta.json"), "--dp", "1",
                        "--method", "isf", "--q-vit", "64", "--q-tok", str(q_tok), "--q-tok-thresh", str(thresh),
                        "--on-bad-sample", "skip", "--json", os.path.join(r.a.work, "ps.json")],
                       env=ENV, capture_output=True, text=True, timeout=120)
    if q.returncode != 0:
        print(q.stdout, q.stderr)
        fail("omnibal-plan data failed")
    with open(os.path.join(r.a.work, "ps.json")) as f:
        planned = json.load(f)["results"][0]["skipped"]
    if got != over or planned != over:
        fail(f"samples over Q_t {q_tok}: {over}; the trainer counts {got}, omnibal-plan data {planned}")
    if "train/" not in line or ".jsonl:" not in line:
        fail(f"the packer's log line names no file:line: '{line}'")
    print(f"Q_t {q_tok}: {over} samples left out by the packer, counted by the trainer "
          f"(summary skipped_samples.packer {got}) as by omnibal-plan data ({planned}); "
          f"log: ...{line[:120]}")


def write_png_header_only(path, width, height):
    """A grey PNG whose header claims width x height over 4 rows of 64 pixels of data."""
    import zlib

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    rows = b"".join(b"\x00" + bytes([128]) * 64 for _ in range(4))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0,
                                                                   0, 0)) +
                chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


@check("an image over data.max_image_pixels, a tokenizer over the vocabulary and an "
       "empty dataset are refused at start-up (or warned when allowed)")
def check_bad_input(r):
    """Input refused at start-up, before step 0, naming what is wrong: an image whose header is
    over data.max_image_pixels (file:line and size), a tokenizer with more pieces than the
    preset's llm.vocab_size, a dataset of the meta file with no samples (or, allowed, a
    warning and a run without it)."""
    d = os.path.join(r.a.work, "data-input")
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(r.a.data, d)
    ann = os.path.join(d, "train", "single.jsonl")
    with open(ann) as f:
        lines = f.read().splitlines()
    rec = json.loads(lines[16])
    rec.pop("width", None)  # the scan reads the header
    rec.pop("height", None)
    rec["image"] = "big.png"
    write_png_header_only(os.path.join(d, "train", "big.png"), 30000, 30000)
    lines[16] = json.dumps(rec)
    with open(ann, "w") as f:
        f.write("\n".join(lines) + "\n")
    data = ["--set", f"data.meta={d}/train_meta.json", "--set", f"data.tokenizer={d}/tokenizer.model"]
    p, rd = r.run(1, "in-big", 1, 1, 2, steps=2, extra=data, expect_ok=False, timeout=120)
    line = refusal(p, "single.jsonl:17: bad sample (image_too_large)", "a 30000 x 30000 image")
    if "is 30000 x 30000 = 900000000 pixels, over data.max_image_pixels 89478485" not in line:
        fail(f"the refusal lacks the size and the limit: {line}")
    if os.path.exists(os.path.join(rd, "metrics.jsonl")):
        fail("a step ran before the too-large image was refused")
    print("image over data.max_image_pixels refused at start-up: " + line[:200])

    # The preset with fewer embedding rows than the tokenizer's pieces.
    with open(os.path.join(HERE, "..", "..", "models", "presets", "tiny.yaml")) as f:
        text = f.read()
    preset = os.path.join(r.a.work, "in-small-vocab.yaml")
    with open(preset, "w") as f:
        f.write(text.replace("vocab_size: 1024", "vocab_size: 512"))
    p, rd = r.run(1, "in-vocab", 1, 1, 2, steps=2, expect_ok=False, timeout=120,
                  extra=["--set", f"model.preset={preset}"])
    line = refusal(p, "pieces, more than llm.vocab_size 512 of model.preset", "a small vocabulary")
    if "tokenizer.model' has " not in line or os.path.exists(os.path.join(rd, "metrics.jsonl")):
        fail(f"the refusal does not name the tokenizer file, or a step ran: {line}")
    print("tokenizer larger than the preset's vocabulary refused at start-up: " + line[:200])

    # A dataset with no samples next to real ones: an error, or a warning when allowed.
    with open(os.path.join(r.a.data, "train_meta.json")) as f:
        meta = json.load(f)
    for m in meta.values():
        for key in ("root", "annotation"):
            m[key] = os.path.join(r.a.data, m[key])
    empty = os.path.join(d, "empty.jsonl")
    open(empty, "w").close()
    meta["nothing"] = {"root": d, "annotation": empty}
    meta_path = os.path.join(d, "meta_empty.json")
    with open(meta_path, "w") as f:
        json.dump(meta, f)
    extra = ["--set", f"data.meta={meta_path}"]
    p, _ = r.run(1, "in-empty", 1, 1, 2, steps=2, extra=extra, expect_ok=False, timeout=120)
    line = refusal(p, "dataset 'nothing' (annotation", "an empty dataset")
    if "has no samples" not in line or meta_path not in p.stderr:
        fail(f"the refusal does not name the meta file and the empty dataset: {line}")
    p, _ = r.run(1, "in-empty", 1, 1, 2, steps=2, timeout=120,
                 extra=extra + ["--set", "data.allow_empty_datasets=true"])
    if "warning: meta file" not in p.stderr or "'nothing'" not in p.stderr:
        print(p.stderr[-3000:])
        fail("data.allow_empty_datasets: true did not warn about the empty dataset")
    print("empty dataset refused at start-up naming it; with allow_empty_datasets a warning")


def data_line(text):
    """The trainer's start-up 'data: N samples, ... plan hash H' line as (N, H)."""
    line = next((l for l in text.splitlines() if "data: " in l and "plan hash" in l), None)
    if line is None:
        fail("the trainer log has no 'data: N samples ... plan hash' line")
    return (int(line.split("data: ")[1].split()[0].rstrip(",")),
            line.split("plan hash ")[1].split()[0])


@check("repeat_time 1 / 2 / 0.5 plans 48 / 96 / 24 samples with omnibal-plan data's plan "
       "hash, which changes with repeat_time")
def check_repeat_time(r):
    """48 samples at repeat_time 1, 2 and 0.5: the trainer plans 48, 96 and 24 samples, as many
    as `omnibal-plan data` reads from the scanned meta, with the same plan hash (the planner run
    as the trainer plans: dp 1 x m 2, balance.seed, the tiny preset's max_seq_len); the hash
    changes with repeat_time."""
    n = 48
    src = os.path.join(r.a.data, "train", "catalog.jsonl")
    with open(src) as f:
        lines = f.readlines()[:n]
    if len(lines) < n:
        fail(f"{src} holds {len(lines)} records, fewer than {n}")
    ann = os.path.join(r.a.work, f"catalog_{n}.jsonl")
    with open(ann, "w") as g:
        g.writelines(lines)
    hashes = {}
    for rt, want in [(1, 48), (2, 96), (0.5, 24)]:
        meta = os.path.join(r.a.work, f"meta_rt{rt}.json")
        with open(meta, "w") as f:
            json.dump({"catalog48": {"root": os.path.join(r.a.data, "train"), "annotation": ann,
                                    "repeat_time": rt}}, f)
        scan_dir = os.path.join(r.a.work, f"scan_rt{rt}")
        subprocess.run([r.a.plan, "scan", "--meta", meta, "--preset", "tiny", "--tokenizer",
                        os.path.join(r.a.data, "tokenizer.model"), "--set", "data.max_tiles=12",
                        "--threads", "1", "--out", scan_dir], check=True, capture_output=True)
        plan = subprocess.run([r.a.plan, "data", "--meta", os.path.join(scan_dir, "meta.json"),
                               "--dp", "1", "--micro-batches", "2", "--samples-per-pack", "6",
                               "--seed", "1024", "--preset", "tiny", "--method", "isf",
                               "--plan", os.path.join(r.a.work, f"plan_rt{rt}.json")],
                              capture_output=True, text=True)
        if plan.returncode != 0:
            print(plan.stdout[-2000:], plan.stderr[-2000:])
            fail(f"omnibal-plan data at repeat_time {rt}: exit {plan.returncode}")
        plan_n = int(plan.stdout.split("data: ")[1].split()[0])
        plan_hash = plan.stdout.split("hash ")[-1].split(")")[0].strip()
        p, _ = r.run(1, f"rt{rt}", 1, 1, 2, steps=1, extra=["--set", f"data.meta={meta}"])
        train_n, train_hash = data_line(p.stdout + p.stderr)
        print(f"repeat_time {rt}: trainer {train_n} samples, hash {train_hash}; "
              f"omnibal-plan data {plan_n} samples, hash {plan_hash}")
        if train_n != want or plan_n != want:
            fail(f"repeat_time {rt}: expected {want} samples, trainer {train_n}, planner {plan_n}")
        if train_hash != plan_hash:
            fail(f"repeat_time {rt}: trainer plan hash {train_hash} != omnibal-plan's {plan_hash}")
        hashes[rt] = train_hash
    if len(set(hashes.values())) != 3:
        fail(f"the plan hash does not change with repeat_time: {hashes}")


@check("balance.q_tok over llm.max_seq_len is refused naming both keys; random and ISF "
       "packs capped at it train")
def check_token_cap(r):
    """The tiny preset runs packs of at most llm.max_seq_len = 1024 tokens: a balance.q_tok over
    it is refused at start-up naming both keys; random packs of 24 samples and a searched ISF
    with 16 samples per pack train (uncapped, both build packs over 1024 tokens on this split:
    random 24-sample packs, and ISF's searched Q_t 1280 with packs of up to 1078 tokens)."""
    args, _ = r.cmd(1, "cap-bad", 1, 1, 1)
    p = subprocess.run(args + ["--set", "balance.q_vit=40", "--set", "balance.q_tok=2048"],
                       env=ENV, capture_output=True, text=True, timeout=120)
    needle = "balance.q_tok 2048 is over the model's llm.max_seq_len 1024 (preset tiny)"
    print(f"balance.q_tok=2048: refused ({refusal(p, needle, 'balance.q_tok=2048')[:160]})")
    for name, extra in [("cap-random24", ["--set", "balance.method=random",
                                          "--set", "balance.samples_per_pack=24"]),
                        ("cap-isf16", ["--set", "balance.samples_per_pack=16"])]:
        p, rd = r.run(1, name, 1, 1, 1, steps=3, extra=extra)
        data_line(p.stdout + p.stderr)  # the start-up plan line is there
        if len(metrics(rd)) != 3:
            fail(f"{name}: {len(metrics(rd))} steps in metrics.jsonl, expected 3")
        line = next(l for l in (p.stdout + p.stderr).splitlines() if "plan hash" in l)
        print(f"{' '.join(extra[1::2])}: 3 steps trained ({line.strip()[:200]})")
