"""Checkpoints as files: damaged ones passed over or refused, an export started from with
model.init_from, and checkpoints crossing TP sizes."""
import json
import os
import shutil
import subprocess

from . import check
from .harness import ENV, fail, log_value, refusal, tp
from .results import close_training, metrics, rel, resumed_like_straight, summary


@check("--resume auto passes over a truncated newest checkpoint to step-2 and refuses "
       "when every checkpoint is damaged, metrics untouched")
def check_truncated(r):
    _, d = r.run(2, "trunc", 1, 2, 2, steps=4, extra=["--set", "train.checkpoint_every=2"])
    newest = os.path.join(d, "checkpoints", "step-4")
    files = [f for f in sorted(os.listdir(newest)) if f.endswith(".safetensors")]
    if not files:
        fail(f"{newest} holds no shard files")
    victim = os.path.join(newest, files[0])
    size = os.path.getsize(victim)
    with open(victim, "r+b") as f:
        f.truncate(size // 2)
    p, _ = r.run(2, "trunc", 1, 2, 2, steps=5, fresh=False, extra=["--resume", "auto"])
    out = p.stdout + p.stderr
    if "step-2" not in out or "resumed from" not in out:
        print(out[-3000:])
        fail("--resume auto did not fall back to step-2")
    print(f"truncated {os.path.basename(victim)} of step-4 ({size} -> {size // 2} bytes): "
          "--resume auto took step-2")
    # Every checkpoint damaged: --resume auto refuses rather than restart from step 0 over them.
    before = len(metrics(d))
    for step in os.listdir(os.path.join(d, "checkpoints")):
        manifest = os.path.join(d, "checkpoints", step, "manifest.json")
        if os.path.exists(manifest):
            with open(manifest) as f:
                m = json.load(f)
            m["step"] += 100  # an edit the manifest's own checksum catches
            with open(manifest, "w") as f:
                json.dump(m, f)
    p, _ = r.run(2, "trunc", 1, 2, 2, steps=6, fresh=False, expect_ok=False,
                 extra=["--resume", "auto"])
    line = refusal(p, "--resume auto: none of the checkpoints", "--resume auto over damaged checkpoints")
    if len(metrics(d)) != before:
        fail("the refused --resume auto changed metrics.jsonl")
    print("every checkpoint damaged: --resume auto refuses, metrics untouched: " + line[:160])


def subset_meta(r, n):
    """A meta file with the first n single-image training samples (one step = all of them)."""
    src = os.path.join(r.a.data, "train", "single.jsonl")
    ann = os.path.join(r.a.work, f"single_{n}.jsonl")
    with open(src) as f, open(ann, "w") as g:
        g.writelines(f.readlines()[:n])
    meta = os.path.join(r.a.work, f"meta_{n}.json")
    with open(meta, "w") as f:
        json.dump({"single_subset": {"root": os.path.join(r.a.data, "train"), "annotation": ann,
                                     "repeat_time": 1, "length": n}}, f)
    return meta


@check("init_from an export under another PP split has the checkpoint's parameter hash "
       "and loss; a missing tensor is refused or allowed; ignored on resume")
def check_init_from(r):
    """Export after 3 steps (LLaMA naming), start a new run from it under another PP split:
    the parameters are bitwise the checkpoint's and the first loss equals the resumed run's.
    A tensor missing from the export is refused by name, allowed by model.allow_missing, and
    init_from is ignored on --resume."""
    # 16 samples = 2 packs of 8 = one step per epoch: every step sees the same global batch, so
    # a fresh run's first step and step 3 of the resumed run compute the same loss.
    data = ["--set", f"data.meta={subset_meta(r, 16)}", "--set", "balance.method=random",
            "--set", "balance.samples_per_pack=8"]
    _, base = r.run(2, "if-base", 1, 2, 2, steps=3, extra=data + ["--set", "model.hf_style=llama"])
    base_hash = summary(base)["param_hash"]
    ckpt = os.path.join(base, "checkpoints", "step-3")
    out = os.path.join(r.a.work, "if-export")
    shutil.rmtree(out, ignore_errors=True)
    p = subprocess.run([r.a.plan, "export", "--checkpoint", ckpt, "--out", out, "--dtype", "fp32"],
                       env=ENV, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        print(p.stdout, p.stderr)
        fail("omnibal-plan export failed")
    with open(os.path.join(out, "config.json")) as f:
        arch = json.load(f)["llm_config"]["architectures"][0]
    with open(os.path.join(out, "model.safetensors.index.json")) as f:
        index = json.load(f)
    q_proj = "language_model.model.layers.0.self_attn.q_proj.weight"
    if arch != "LlamaForCausalLM" or q_proj not in index["weight_map"]:
        fail(f"export of a model.hf_style=llama run: architecture {arch}, q_proj present "
             f"{q_proj in index['weight_map']} (expected LlamaForCausalLM and q_proj)")
    # A copy of the export whose index lacks the projector's first linear weight.
    broken = os.path.join(r.a.work, "if-broken")
    shutil.rmtree(broken, ignore_errors=True)
    shutil.copytree(out, broken)
    del index["weight_map"]["mlp1.1.weight"]
    with open(os.path.join(broken, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f)

    # Continue the base run by one step; init_from (even a broken one) is ignored on --resume.
    p, _ = r.run(2, "if-base", 1, 2, 2, steps=4, fresh=False,
                 extra=data + ["--resume", ckpt, "--set", f"model.init_from={broken}"])
    log_value(p.stdout + p.stderr, f"model.init_from {broken} ignored")
    resumed_loss = metrics(base)[3]["loss"]

    # A fresh run from the export under PP split [3, 7] instead of uniform [5, 5].
    p, fresh = r.run(2, "if-init", 1, 2, 2, steps=1,
                     extra=data + ["--set", f"model.init_from={out}", "--set", "parallel.partition={manual: [3, 7]}"])
    line = log_value(p.stdout + p.stderr, f"model.init_from {out}:")
    if line != f"llama layout, parameter hash {base_hash}":
        fail(f"init_from: '{line}', expected 'llama layout, parameter hash {base_hash}' (the checkpoint's)")
    first_loss = metrics(fresh)[0]["loss"]
    diff = rel(first_loss, resumed_loss)
    if diff > 1e-5:
        fail(f"first loss after init_from {first_loss:.8f} vs resumed {resumed_loss:.8f}")
    print(f"init_from under split [3, 7]: parameter hash {base_hash} == the step-3 checkpoint's, "
          f"first loss {first_loss:.6f} vs resumed {resumed_loss:.6f} ({diff:.1e} relative)")

    # The broken export: refused naming the tensor, accepted with allow_missing.
    p, _ = r.run(1, "if-missing", 1, 1, 1, steps=1, expect_ok=False,
                 extra=data + ["--set", f"model.init_from={broken}"])
    line = refusal(p, "projector.fc1.weight (mlp1.1.weight)", "a missing mlp1.1.weight")
    print(f"missing tensor refused: {line}")
    p, _ = r.run(1, "if-allowed", 1, 1, 1, steps=1,
                 extra=data + ["--set", f"model.init_from={broken}", "--set", "model.allow_missing=[projector.fc1.*]"])
    allowed = log_value(p.stdout + p.stderr, "allowed:")
    if not allowed.startswith("1 missing"):
        fail(f"allow_missing: log says 'allowed: {allowed}', expected 1 missing")
    print(f"allow_missing [projector.fc1.*]: started (allowed: {allowed})")


@check("checkpoints cross TP sizes (2 -> 1, 1 -> 2 at PP 2) within 1e-5 of a straight "
       "run; a TP 2 export starts TP 2 as it starts TP 1", cost=40)
def check_tp_resume(r):
    """Checkpoints cross TP sizes: TP 2 -> TP 1 and TP 1 -> TP 2 (at another PP) continue with
    the losses of a straight run (1e-5); `omnibal-plan export` of the TP 2 checkpoint equals the
    export of the TP 1 checkpoint's run within float rounding and starts a TP 2 run."""
    _, straight = r.run(1, "tpr-straight", 1, 1, 4, steps=6)
    ms = metrics(straight)
    for name, first, then in [("tpr-2to1", (2, 1, 1, tp(2)), (1, 1, 1, [])),
                              ("tpr-1to2", (1, 1, 1, []), (4, 1, 2, tp(2)))]:
        np1, dp1, pp1, x1 = first
        r.run(np1, name, dp1, pp1, 4 // dp1, steps=3, extra=x1)
        np2, dp2, pp2, x2 = then
        _, d = r.run(np2, name, dp2, pp2, 4 // dp2, steps=6, fresh=False,
                     extra=x2 + ["--resume", "auto"])
        resumed_like_straight(name, d, ms)
        print(f"{name}: resumed at step 3, steps 4-6 within 1e-5 of the straight run")
    out = os.path.join(r.a.work, "tpr-export")
    shutil.rmtree(out, ignore_errors=True)
    ckpt = os.path.join(r.a.work, "tpr-2to1", "checkpoints", "step-3")
    p = subprocess.run([r.a.plan, "export", "--checkpoint", ckpt, "--out", out, "--dtype", "fp32"],
                       env=ENV, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        print(p.stdout, p.stderr)
        fail("omnibal-plan export of a TP 2 checkpoint failed")
    _, a = r.run(2, "tpr-init-tp2", 1, 1, 4, steps=1, extra=tp(2) + ["--set", f"model.init_from={out}"])
    _, b = r.run(1, "tpr-init-tp1", 1, 1, 4, steps=1, extra=["--set", f"model.init_from={out}"])
    w = close_training(a, b, 1e-5, "init_from the TP 2 export at tp 2")
    print(f"omnibal-plan export of the TP 2 checkpoint; a TP 2 run initialised from it equals a "
          f"TP 1 run from it ({w:.1e})")
