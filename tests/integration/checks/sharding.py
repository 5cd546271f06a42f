"""ZeRO-3 (train.shard full): equal to plain data parallelism, 1/DP of the model state per rank,
bitwise resume, and checkpoints that resume across shard modes and DP sizes."""
import os
import shutil
import subprocess

from . import check
from .checkpoints import subset_meta
from .harness import BF16, DROPOUT, ENV, HERE, ZERO1, fail, log_value, tp
from .results import (checkpoint_params, max_param_rel, metrics, rel, resumed_like_straight,
                      same_training, stored_names, summary)

FULL = ["--set", "train.shard=full"]


def close(name, got, ref, tol):
    """Largest relative difference of loss and grad norm over the steps; fails above `tol`."""
    worst = 0.0
    if len(metrics(got)) != len(metrics(ref)):
        fail(f"{name}: {len(metrics(got))} vs {len(metrics(ref))} metric lines")
    for a, b in zip(metrics(got), metrics(ref)):
        for key in ("loss", "grad_norm"):
            d = rel(a[key], b[key])
            worst = max(worst, d)
            if d > tol:
                fail(f"{name} step {a['step']}: {key} {a[key]!r} under ZeRO-3 vs {b[key]!r}")
    return worst


def state_fractions(name, got, ref, dp):
    """Per-rank parameter, gradient and optimizer MiB of ZeRO-3 over plain DP's (summary.json);
    each must be 1/dp within 2 % (each unit's buffer is padded to a multiple of dp)."""
    out = {}
    for key in ("parameter_mib_max_rank", "gradient_mib_max_rank", "optimizer_state_mib_max_rank"):
        a, b = summary(got)[key], summary(ref)[key]
        if b <= 0 or abs(a * dp / b - 1) > 0.02:
            fail(f"{name}: {key} {a:.3f} MiB under ZeRO-3 vs {b:.3f} plain: expected 1/{dp}")
        out[key.split("_")[0]] = a / b
    return out


@check("ZeRO-3 equals plain DP within 1e-6 over 5 steps (DP 2, DP 4, TP 2 x DP 2, tied head, "
       "frozen ViT with recompute), bf16 within 1e-3, evaluation at DP 3; model state per rank "
       "1/DP", cost=110)
def check_zero3(r):
    """train.shard full against train.shard none at the same layout, 5 steps: losses, gradient
    norms and final parameters within 1e-6 relative (at m 2 each micro-batch's gradient is
    reduce-scattered on its own, as FSDP and DeepSpeed do: the sums are reordered); per-rank
    parameters, gradients and optimizer state 1/DP of plain DP's, counted from the tensors."""
    tied = ["--set", f"model.preset={HERE}/tiny-tied.yaml"]
    frozen = ["--set", "train.freeze=[vit]", "--set", "memory.recompute=full"]
    off = ["--set", "comm.overlap=false"]  # no prefetch: every gather blocking
    for name, np, dp, m, extra in [("z3-dp2", 2, 2, 1, []), ("z3-dp4", 4, 4, 1, []),
                                   ("z3-dp2-m2", 2, 2, 2, []), ("z3-dp2-m2-blocking", 2, 2, 2, off),
                                   ("z3-tp2dp2", 4, 2, 1, tp(2)),
                                   ("z3-tied", 2, 2, 1, tied), ("z3-frozen-vit", 2, 2, 1, frozen)]:
        _, plain = r.run(np, name + "-plain", dp, 1, m, extra=extra)
        _, zero3 = r.run(np, name, dp, 1, m, extra=extra + FULL)
        worst = close(name, zero3, plain, 1e-6)
        params = max_param_rel(checkpoint_params(zero3, 5), checkpoint_params(plain, 5))
        if params > 1e-6:
            fail(f"{name}: parameters after 5 steps differ by {params:.2e} relative")
        if summary(zero3).get("shard") != "full":
            fail(f"{name}: summary.json says shard {summary(zero3).get('shard')!r}")
        frac = state_fractions(name, zero3, plain, dp)
        print(f"{name}: ZeRO-3 == plain DP over 5 steps (loss / grad norm within {worst:.1e}, "
              f"parameters {params:.1e}); per rank of plain DP's: " +
              ", ".join(f"{k} {v:.3f}" for k, v in frac.items()))
    # Evaluation at DP 3: the demo's eval packs do not split evenly over 3 ranks; ZeRO-3 pads
    # the short ranks with unscored copies (its gathers pair over DP by order) and scores alike.
    ev = ["--set", f"data.eval_meta={r.a.data}/eval_meta.json"]
    _, plain = r.run(3, "z3-eval-plain", 3, 1, 1, steps=2, extra=ev)
    _, zero3 = r.run(3, "z3-eval", 3, 1, 1, steps=2, extra=ev + FULL, timeout=240)
    a, b = summary(zero3)["eval"]["overall"], summary(plain)["eval"]["overall"]
    if a["samples"] != b["samples"] or a["correct"] != b["correct"] or rel(a["loss"],
                                                                           b["loss"]) > 1e-6:
        fail(f"z3-eval: evaluation under ZeRO-3 {a} vs plain DP {b}")
    print(f"z3-eval: DP 3 evaluation of {a['samples']} samples equals plain DP's "
          f"(exact match {a['exact_match']:.3f}, loss {a['loss']:.6f})")
    _, plain = r.run(2, "z3-bf16-plain", 2, 1, 2, extra=BF16)
    _, zero3 = r.run(2, "z3-bf16", 2, 1, 2, extra=BF16 + FULL)
    worst = close("z3-bf16", zero3, plain, 1e-3)
    print(f"z3-bf16: ZeRO-3 in bf16 within {worst:.1e} of plain DP in bf16")


@check("under ZeRO-3, 6 straight == 3 + resume + 3 bitwise (fp32; bf16 with a frozen ViT); "
       "checkpoints resume across shard modes and DP sizes within 1e-5", cost=70)
def check_zero3_resume(r):
    """Bitwise resume under ZeRO-3 at DP 2 (fp32 with dropout; bf16 with the ViT frozen), the
    checkpoint holding the same names as plain DP's and exported by omnibal-plan; then 3 steps in one shard mode and DP size
    and 3 more in another (dp x m stays 2: the same data plan) against 6 straight steps."""
    frozen = ["--set", "train.freeze=[vit]"]
    for name, extra in [("z3r-fp32", DROPOUT), ("z3r-bf16-frozen", BF16 + frozen)]:
        _, straight = r.run(2, name + "-straight", 2, 1, 1, steps=6, extra=extra + FULL)
        _, half = r.run(2, name, 2, 1, 1, steps=3, extra=extra + FULL)
        _, plain = r.run(2, name + "-plain", 2, 1, 1, steps=3, extra=extra)
        ckpt = lambda d: os.path.join(d, "checkpoints", "step-3")
        if set(stored_names(ckpt(half))) != set(stored_names(ckpt(plain))):
            fail(f"{name}: the ZeRO-3 checkpoint holds other tensors than plain DP's")
        out = os.path.join(r.a.work, name + "-export")
        shutil.rmtree(out, ignore_errors=True)
        p = subprocess.run([r.a.plan, "export", "--checkpoint", ckpt(half), "--out", out],
                           env=ENV, capture_output=True, text=True, timeout=120)
        if p.returncode != 0 or not os.path.exists(os.path.join(out, "config.json")):
            print(p.stdout[-2000:], p.stderr[-2000:])
            fail(f"{name}: omnibal-plan export of the ZeRO-3 checkpoint failed")
        r.run(2, name, 2, 1, 1, steps=6, fresh=False, extra=extra + FULL + ["--resume", "auto"])
        same_training(half, straight, f"{name}: ZeRO-3 3 + resume + 3 vs 6 straight")
        print(f"{name}: 6 straight == 3 + resume + 3 bitwise ({summary(straight)['param_hash']})")
    _, straight = r.run(1, "z3x-straight", 1, 1, 2, steps=6)
    ref = metrics(straight)
    for name, first, second in [("z3x-full2-to-none1", (2, 2, 1, FULL), (1, 1, 2, [])),
                                ("z3x-none1-to-full2", (1, 1, 2, []), (2, 2, 1, FULL)),
                                ("z3x-opt2-to-full2", (2, 2, 1, ZERO1), (2, 2, 1, FULL))]:
        np, dp, m, extra = first
        r.run(np, name, dp, 1, m, steps=3, extra=extra)
        np, dp, m, extra = second
        r.run(np, name, dp, 1, m, steps=6, fresh=False, extra=extra + ["--resume", "auto"])
        resumed_like_straight(name, os.path.join(r.a.work, name), ref)
        print(f"{name}: resumed and continued within 1e-5 of one process straight")


@check("ZeRO-3 init_from (DP 2; TP 2 x DP 2) loads unit by unit to the checkpoint's parameter "
       "hash", cost=40)
def check_zero3_init_from(r):
    """An export of a 3-step run loaded by model.init_from under train.shard full, each unit
    gathered, loaded and sharded in turn: the parameter hash after loading is the checkpoint's,
    at DP 2 and at TP 2 x DP 2 (each TP rank's slice of a whole copy of one unit)."""
    data = ["--set", f"data.meta={subset_meta(r, 16)}", "--set", "balance.method=random",
            "--set", "balance.samples_per_pack=8"]
    _, base = r.run(1, "z3if-base", 1, 1, 2, steps=3, extra=data)
    base_hash = summary(base)["param_hash"]
    out = os.path.join(r.a.work, "z3if-export")
    shutil.rmtree(out, ignore_errors=True)
    p = subprocess.run([r.a.plan, "export", "--checkpoint",
                        os.path.join(base, "checkpoints", "step-3"), "--out", out, "--dtype",
                        "fp32"], env=ENV, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        print(p.stdout, p.stderr)
        fail("omnibal-plan export failed")
    for name, np, extra in [("z3if-dp2", 2, []), ("z3if-tp2dp2", 4, tp(2))]:
        p, _ = r.run(np, name, 2, 1, 1, steps=1,
                     extra=data + extra + FULL + ["--set", f"model.init_from={out}"])
        line = log_value(p.stdout + p.stderr, f"model.init_from {out}:")
        if not line.endswith(f"parameter hash {base_hash}"):
            fail(f"{name}: '{line}', expected the checkpoint's parameter hash {base_hash}")
        print(f"{name}: init_from under ZeRO-3 has the checkpoint's parameter hash {base_hash}")
