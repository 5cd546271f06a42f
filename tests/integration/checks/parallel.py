"""Parallelism equals one process: DP, PP and their grid, the tied head split over stages,
the loss reductions under repacking, tensor parallelism (TP 2 and its grids, refusals), and DP
communication overlapped with the backward (comm.overlap) equal to the blocking one."""
import json
import os
import shutil
import subprocess

from . import check
from .harness import DROPOUT, ENV, HERE, ZERO1, fail, refusal, tp
from .planning import write_table
from .results import (check_predicted, checkpoint_params, close_training, max_param_rel, metrics,
                      rel, same_training, stored_names, summary)


@check("PP 2, DP 2 and PP 2 x DP 2 equal one process over 5 steps (loss and grad norm "
       "within 1e-4, same global batch and predicted seconds)", cost=38)
def check_equivalence(r):
    _, ref_dir = r.run(1, "eq-ref", 1, 1, 4)
    ref = metrics(ref_dir)
    if len(ref) != 5:
        fail(f"reference has {len(ref)} steps, expected 5")
    spread = max(rel(m["micro_batch_mean_loss"], m["loss"]) for m in ref)
    print(f"per-micro-batch averaging would differ by up to {spread:.2e} relative")
    if spread <= 1e-3:
        fail("micro-batches have (nearly) equal label counts; the test would not detect "
             "per-micro-batch averaging")
    check_predicted(ref, 1, "eq-ref")
    for name, np, dp, pp, m in [("eq-pp2", 2, 1, 2, 4), ("eq-dp2", 2, 2, 1, 2),
                                ("eq-pp2dp2", 4, 2, 2, 2)]:
        p, d = r.run(np, name, dp, pp, m)
        got = metrics(d)
        check_predicted(got, dp, name)
        for a, b in zip(got, ref):  # the same global batch, so the same predicted seconds
            if rel(sum(a["predicted_rank_s"]), sum(b["predicted_rank_s"])) > 1e-9:
                fail(f"{name} step {a['step']}: predicted seconds of the global batch "
                     f"{sum(a['predicted_rank_s'])} vs one process {b['predicted_rank_s']}")
        if "data: cost Dist (predicted, analytic tiny on a100-80g" not in p.stdout + p.stderr:
            print((p.stdout + p.stderr)[-3000:])
            fail(f"{name}: no start-up line 'data: cost Dist (predicted, analytic tiny ...'")
        for a, b in zip(got, ref):
            for key in ("loss", "grad_norm"):
                if rel(a[key], b[key]) > 1e-4:
                    fail(f"{name} step {a['step']}: {key} {a[key]:.8f} vs one process {b[key]:.8f}")
            if a["samples"] != b["samples"] or a["label_tokens"] != b["label_tokens"]:
                fail(f"{name} step {a['step']}: global batch differs")
        worst = max(rel(a["loss"], b["loss"]) for a, b in zip(got, ref))
        print(f"{name}: 5 steps equal one process (max relative loss difference {worst:.1e}); "
              f"predicted seconds per DP rank at step 0 {got[0]['predicted_rank_s']} "
              f"(cost Dist {got[0]['cost_dist_dp']:.4f} / {got[0]['cost_dist_mb']:.4f})")


@check("a tied LM head split over PP 2 and PP 2 x DP 2 equals one process (1e-4), its "
       "copies stay equal, it is stored once and resumes at PP 1")
def check_tied(r):
    tied = ["--set", f"model.preset={HERE}/tiny-tied.yaml"]
    _, ref_dir = r.run(1, "tied-ref", 1, 1, 4, steps=5, extra=tied)
    ref = metrics(ref_dir)
    for name, np, dp, pp, m in [("tied-pp2", 2, 1, 2, 4), ("tied-pp2dp2", 4, 2, 2, 2)]:
        _, d = r.run(np, name, dp, pp, m, steps=4, extra=tied)
        got = metrics(d)
        for a, b in zip(got, ref):
            for key in ("loss", "grad_norm"):
                if rel(a[key], b[key]) > 1e-4:
                    fail(f"{name} step {a['step']}: {key} {a[key]:.8f} vs one process {b[key]:.8f}")
        if summary(d).get("tied_head_copies_equal") is not True:
            fail(f"{name}: the embedding's and the head's copies of the tied weight differ")
        worst = max(rel(a["loss"], b["loss"]) for a, b in zip(got, ref))
        names = stored_names(os.path.join(d, "checkpoints", "step-4"))
        if names.get("llm_embed.tok_embeddings.weight") != 1 or "llm_head.output.weight" in names:
            fail(f"{name}: checkpoint should hold the tied weight once as "
                 f"llm_embed.tok_embeddings.weight, holds "
                 f"{ {k: v for k, v in names.items() if 'tok_emb' in k or 'output' in k} }")
        print(f"{name}: tied head split over 2 stages, 4 steps equal one process (max relative "
              f"loss difference {worst:.1e}); copies bitwise equal; stored once")
    # The PP=2 x DP=2 checkpoint (weight stored once) resumes in one process.
    _, d = r.run(1, "tied-pp2dp2", 1, 1, 4, steps=5, fresh=False, extra=tied + ["--resume", "auto"])
    last = metrics(d)[-1]
    if last["step"] != 4 or rel(last["loss"], ref[4]["loss"]) > 1e-4:
        fail(f"resumed at PP=1: step {last['step']} loss {last['loss']} vs straight {ref[4]['loss']}")
    print(f"the tied PP=2 x DP=2 checkpoint resumes at PP=1: step 4 loss {last['loss']:.6f} vs "
          f"{ref[4]['loss']:.6f} straight")


@check("loss.reduction token / sample / square: a pack of 4 in one process equals 4 "
       "one-sample packs over PP 2 x DP 2 (1e-4)")
def check_reduction(r):
    """loss.reduction token | sample | square: the same 4 samples per step as one pack of 4 in
    one process (m 1) and as 4 one-sample packs over PP 2 x DP 2 (m 2) give the same losses,
    gradient norms and parameters; sample and square differ from token."""
    steps = 3
    # balance.method random cuts one shuffled order (seed, epoch) into packs of B and runs
    # them in order, so both runs see the same samples in each step.
    one = ["--set", "balance.method=random", "--set", "balance.samples_per_pack=4"]
    four = ["--set", "balance.method=random", "--set", "balance.samples_per_pack=1"]
    losses = {}
    for red in ("token", "sample", "square"):
        key = ["--set", f"loss.reduction={red}"]
        _, ref_dir = r.run(1, f"red-{red}-one", 1, 1, 1, extra=one + key, steps=steps)
        _, got_dir = r.run(4, f"red-{red}-pp2dp2", 2, 2, 2, extra=four + key, steps=steps)
        ref, got = metrics(ref_dir), metrics(got_dir)
        if len(ref) != steps or len(got) != steps:
            fail(f"{red}: {len(ref)} and {len(got)} metric lines, expected {steps}")
        for a, b in zip(got, ref):
            if a["samples"] != b["samples"] or a["label_tokens"] != b["label_tokens"]:
                fail(f"{red} step {a['step']}: global batch differs ({a['samples']} vs {b['samples']} samples)")
            for k in ("loss", "grad_norm"):
                if rel(a[k], b[k]) > 1e-4:
                    fail(f"{red} step {a['step']}: {k} {a[k]:.8f} unpacked over pp2 dp2 vs "
                         f"{b[k]:.8f} packed 4 in one process")
        worst_loss = max(rel(a["loss"], b["loss"]) for a, b in zip(got, ref))
        worst_param = max_param_rel(checkpoint_params(got_dir, steps), checkpoint_params(ref_dir, steps))
        if worst_param > 1e-4:
            fail(f"{red}: parameters after {steps} steps differ by {worst_param:.2e} (relative L2)")
        losses[red] = [m["loss"] for m in ref]
        print(f"{red}: {steps} steps, 1 process x 1 pack of 4 == pp2 dp2 x 4 one-sample packs (loss within "
              f"{worst_loss:.1e}, parameters within {worst_param:.1e} relative)")
    for red in ("sample", "square"):
        diff = max(rel(a, b) for a, b in zip(losses[red], losses["token"]))
        print(f"{red} vs token: losses differ by up to {diff:.2e} relative")
        if diff <= 1e-3:
            fail(f"{red} and token losses differ by only {diff:.2e}: the check could not fail")


@check("TP 2 equals one process over 5 steps (1e-5, parameters too), replicas bitwise "
       "equal, tensors stored whole; dropout resume at TP 2 bitwise", cost=53)
def check_tp(r):
    """TP 2 equals one process over 5 steps (losses, gradient norms, final parameters within
    1e-5 relative), replicated parameters stay bitwise equal on both TP ranks, the checkpoint
    holds whole tensors; with dropout on, TP 2 equals TP 2 resumed bitwise."""
    _, ref = r.run(1, "tp-ref", 1, 1, 4)
    _, d = r.run(2, "tp-tp2", 1, 1, 4, extra=tp(2))
    worst = close_training(d, ref, 1e-5, "tp 2")
    pa, pb = checkpoint_params(d, 5), checkpoint_params(ref, 5)
    for k in ("llm_embed.tok_embeddings.weight", "llm_block_0.attention.wk.weight",
              "vit_block_0.attn.qkv.weight", "vit_block_1.mlp.fc2.weight"):
        if len(pa[k]) != len(pb[k]):
            fail(f"tp 2 checkpoint: {k} holds {len(pa[k])} values, one process {len(pb[k])}")
    dp = max_param_rel(pa, pb)
    if dp > 1e-5:
        fail(f"tp 2: final parameters differ from one process by {dp:.2e} relative (> 1e-5)")
    s = summary(d)
    if s.get("tp_replicated_equal") is not True:
        fail("tp 2: a replicated parameter (norm, bias, layer scale, projector) differs between "
             "the TP ranks after training")
    if s.get("tp") != 2 or not s.get("tp_all_reduce_s_per_step_max_rank", 0) > 0:
        fail(f"tp 2: summary.json should report tp 2 and the TP all-reduce time, got {s.get('tp')}"
             f" and {s.get('tp_all_reduce_s_per_step_max_rank')}")
    print(f"tp 2: 5 steps equal one process (max relative loss difference {worst:.1e}, final "
          f"parameters {dp:.1e}); replicated parameters bitwise equal on both TP ranks; "
          f"checkpoint tensors whole")
    # Dropout on: TP 2 straight == TP 2 for 3 steps + resume to 6.
    _, straight = r.run(2, "tp-do-straight", 1, 1, 4, steps=6, extra=tp(2) + DROPOUT)
    r.run(2, "tp-do-resumed", 1, 1, 4, steps=3, extra=tp(2) + DROPOUT)
    _, resumed = r.run(2, "tp-do-resumed", 1, 1, 4, steps=6, fresh=False,
                       extra=tp(2) + DROPOUT + ["--resume", "auto"])
    same_training(resumed, straight, "tp 2 dropout 0.1 resumed")
    _, do_ref = r.run(1, "tp-do-ref", 1, 1, 4, steps=6, extra=DROPOUT)
    w = close_training(straight, do_ref, 1e-5, "tp 2 dropout 0.1")
    print(f"tp 2, dropout 0.1: 6 straight == 3 + resume + 3 bitwise (parameter hash "
          f"{summary(straight)['param_hash']}); equal to one process with dropout within {w:.1e} "
          f"(the masks do not depend on the TP rank)")


@check("TP 2 x PP 2, TP 2 x DP 2, TP 2 x PP 2 x DP 2 and a tied head at TP 2 x PP 2 "
       "equal one process (1e-4); the tied checkpoint resumes", cost=48)
def check_tp_grid(r):
    """TP 2 x PP 2, TP 2 x DP 2 (4 ranks) and TP 2 x PP 2 x DP 2 (8 ranks, 3 steps) equal one
    process within 1e-4; the tied head under TP 2 x PP 2 too (copies equal, stored once)."""
    _, ref = r.run(1, "tpg-ref", 1, 1, 4)
    for name, np, dp, pp, m, steps in [("tpg-tp2pp2", 4, 1, 2, 4, 5), ("tpg-tp2dp2", 4, 2, 1, 2, 5),
                                       ("tpg-tp2pp2dp2", 8, 2, 2, 2, 3)]:
        _, d = r.run(np, name, dp, pp, m, steps=steps, extra=tp(2), timeout=600)
        w = close_training(d, ref, 1e-4, name, steps=steps)
        if summary(d).get("tp_replicated_equal") is not True:
            fail(f"{name}: replicated parameters differ between TP ranks")
        print(f"{name}: {steps} steps equal one process (max relative loss difference {w:.1e})")
    tied = ["--set", f"model.preset={HERE}/tiny-tied.yaml"]
    _, tref = r.run(1, "tpg-tied-ref", 1, 1, 4, steps=4, extra=tied)
    _, d = r.run(4, "tpg-tied-tp2pp2", 1, 2, 4, steps=4, extra=tied + tp(2))
    w = close_training(d, tref, 1e-4, "tied tp 2 x pp 2")
    s = summary(d)
    if s.get("tied_head_copies_equal") is not True or s.get("tp_replicated_equal") is not True:
        fail(f"tied tp 2 x pp 2: tied copies equal {s.get('tied_head_copies_equal')}, "
             f"replicas equal {s.get('tp_replicated_equal')}")
    names = stored_names(os.path.join(d, "checkpoints", "step-4"))
    if names.get("llm_embed.tok_embeddings.weight") != 1 or "llm_head.output.weight" in names:
        fail("tied tp 2 x pp 2: the tied weight should be stored once, whole")
    print(f"tied head at tp 2 x pp 2: 4 steps equal one process ({w:.1e}); copies bitwise equal; "
          f"stored once")
    # Resumed at tp 2 x pp 2 (the head's copy takes its shard of the stored embedding) and at
    # tp 1 x pp 1 from the same 2-step checkpoint: both continue as the straight run.
    r.run(4, "tpg-tied-rs", 1, 2, 4, steps=2, extra=tied + tp(2))
    shutil.copytree(os.path.join(r.a.work, "tpg-tied-rs"), os.path.join(r.a.work, "tpg-tied-rs1"),
                    dirs_exist_ok=True)
    _, d2 = r.run(4, "tpg-tied-rs", 1, 2, 4, steps=4, fresh=False,
                  extra=tied + tp(2) + ["--resume", "auto"])
    _, d1 = r.run(1, "tpg-tied-rs1", 1, 1, 4, steps=4, fresh=False,
                  extra=tied + ["--resume", "auto"])
    for d, what in ((d2, "tp 2 x pp 2"), (d1, "tp 1")):
        got = metrics(d)
        for a, b in zip(got[2:], metrics(tref)[2:4]):
            if rel(a["loss"], b["loss"]) > 1e-4:
                fail(f"tied, resumed at {what}: step {a['step']} loss {a['loss']:.8f} vs "
                     f"{b['loss']:.8f} straight")
    print("the tied tp 2 x pp 2 checkpoint resumes at tp 2 x pp 2 and at tp 1: steps 3-4 as the "
          "straight run")


@check("a tp the preset cannot split, -np != tp x dp x pp, tp 0, a tp 1 cost table and "
       "an edited preset on resume are refused by name")
def check_tp_refusals(r):
    """parallel.tp that the preset cannot split, -np that is not tp x dp x pp."""
    p, _ = r.run(4, "tpf-heads", 1, 1, 4, extra=tp(4), expect_ok=False)
    line = refusal(p, "llm.kv_heads = 2 is not divisible by 4", "tp 4 with kv_heads 2")
    print("tp 4 on tiny (2 KV heads) refused: " + line[:150])
    args, _ = r.cmd(3, "tpf-np", 1, 1, 4, extra=tp(2))
    p = subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=120)
    line = refusal(p, "parallel.tp * parallel.dp * parallel.pp = 2 * 1 * 1 = 2 but mpirun started 3",
                   "-np 3 at tp 2")
    print("-np 3 at tp 2 refused: " + line[:150])
    p, _ = r.run(2, "tpf-zero", 1, 1, 4, extra=["--set", "parallel.tp=0"], expect_ok=False)
    line = refusal(p, "parallel.tp: expected a positive value, got 0", "parallel.tp 0")
    print("parallel.tp 0 refused: " + line[:150])
    # A cost table profiled at another tp than the run's.
    table = os.path.join(r.a.work, "tpf-table.json")
    write_table(table, heavy=0)
    p, _ = r.run(2, "tpf-table", 1, 1, 4, expect_ok=False,
                 extra=tp(2) + ["--set", f"parallel.cost_table={table}",
                                "--set", "memory.recompute=adaptive"])
    line = refusal(p, "holds the costs of one rank at tp 1 but parallel.tp is 2",
                   "a tp 1 cost table at tp 2")
    print("a tp 1 cost table at tp 2 refused: " + line[:150])
    # The preset file edited between launches (the head tied since): the resume is refused
    # naming the key, instead of loading the names that still match.
    with open(os.path.join(HERE, "..", "..", "models", "presets", "tiny.yaml")) as f:
        text = f.read()
    preset = os.path.join(r.a.work, "tpf-tiny.yaml")
    with open(preset, "w") as f:
        f.write(text)
    arch = ["--set", f"model.preset={preset}"]
    r.run(2, "tpf-arch", 1, 1, 4, steps=2, extra=tp(2) + arch)
    with open(preset, "w") as f:
        f.write(text.replace("tie_embeddings: false", "tie_embeddings: true"))
    p, _ = r.run(2, "tpf-arch", 1, 1, 4, steps=4, fresh=False, expect_ok=False,
                 extra=tp(2) + arch + ["--resume", "auto"])
    line = refusal(p, "llm.tie_embeddings: false -> true", "a resume after the preset changed")
    print("a resume after the preset file changed refused: " + line[:150])


def reductions_in_last_backward(path):
    """{(dp rank, stage): whether a dp_reduce span of the trace at `path` starts inside the
    track's last backward span} (a bucket launched while the backward still runs)."""
    xs = [e for e in json.load(open(path))["traceEvents"] if e["ph"] == "X"]
    out = {}
    for track in sorted({(e["pid"], e["tid"]) for e in xs}):
        mine = [e for e in xs if (e["pid"], e["tid"]) == track]
        backs = [e for e in mine if e["name"] in ("backward", "backward_input", "backward_weight")]
        last = max(backs, key=lambda e: e["ts"] + e["dur"])
        out[track] = any(last["ts"] <= e["ts"] < last["ts"] + last["dur"]
                         for e in mine if e["name"] == "dp_reduce")
    return out


@check("comm.overlap on equals off within 1e-6 over 5 steps (DP 2, PP 2 x DP 2; shard none "
       "and optimizer) and the trace shows a bucket's dp_reduce inside each last backward",
       cost=40)
def check_overlap(r):
    """comm.overlap true (the default: each gradient bucket reduced as soon as its last
    gradient of the step exists, ZeRO-1's all-gather waited for before the next forward) equals
    comm.overlap false (every bucket reduced at ReduceGrads) within 1e-6 relative in fp32 over 5
    steps (losses, gradient norms, final parameters), at DP 2 and PP 2 x DP 2, with train.shard
    none and optimizer; in the traced step every (DP rank, stage) track has a dp_reduce span
    (a bucket's launch) that starts inside its last backward span."""
    off = ["--set", "comm.overlap=false"]
    trace = ["--set", "runtime.trace_steps=[3]"]
    for name, np, dp, pp, m in [("ov-dp2", 2, 2, 1, 2), ("ov-pp2dp2", 4, 2, 2, 2)]:
        for shard, extra in [("none", []), ("optimizer", ZERO1)]:
            what = f"{name} shard {shard}"
            _, blocking = r.run(np, f"{name}-{shard}-off", dp, pp, m, extra=extra + off)
            _, overlap = r.run(np, f"{name}-{shard}-on", dp, pp, m, extra=extra + trace)
            got, ref = metrics(overlap), metrics(blocking)
            if len(got) != 5 or len(ref) != 5:
                fail(f"{what}: {len(got)} and {len(ref)} metric lines, expected 5")
            worst = 0.0
            for a, b in zip(got, ref):
                for key in ("loss", "grad_norm"):
                    worst = max(worst, rel(a[key], b[key]))
                    if rel(a[key], b[key]) > 1e-6:
                        fail(f"{what} step {a['step']}: {key} {a[key]!r} with comm.overlap vs "
                             f"{b[key]!r} without")
            params = max_param_rel(checkpoint_params(overlap, 5), checkpoint_params(blocking, 5))
            if params > 1e-6:
                fail(f"{what}: parameters after 5 steps differ by {params:.2e} relative")
            inside = reductions_in_last_backward(os.path.join(overlap, "trace", "step-3.json"))
            if len(inside) != dp * pp or not all(inside.values()):
                fail(f"{what}: trace/step-3.json: (dp rank, stage) tracks with a dp_reduce span "
                     f"starting inside their last backward: {inside}")
            print(f"{what}: comm.overlap == blocking over 5 steps (loss / grad norm within "
                  f"{worst:.1e}, parameters within {params:.1e}); a bucket's reduction starts "
                  f"inside the last backward on all {len(inside)} tracks")
