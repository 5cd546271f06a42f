"""Reading what a run left in its directory (metrics.jsonl, summary.json, stage_plan.json,
checkpoints/step-N/*.safetensors) and comparing two runs: the tolerances of the checks are the
arguments of `rel`, `max_param_rel`, `same_training` (bitwise) and `close_training`."""
import json
import os
import struct

from .harness import fail


def metrics(run_dir):
    """The records of metrics.jsonl, one per step."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(l) for l in f if l.strip()]


def summary(run_dir):
    """summary.json of a run that finished (or stopped)."""
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)


def stage_plan(run_dir):
    """stage_plan.json: the partition, recompute and their sources the run trained under."""
    with open(os.path.join(run_dir, "stage_plan.json")) as f:
        return json.load(f)


def read_safetensors(path):
    """{name: list of floats} of the F32 tensors of one safetensors file, read by the format's
    specification (8-byte little-endian header length, JSON header, raw data)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__" or e["dtype"] != "F32":
            continue
        b, end = e["data_offsets"]
        out[name] = struct.unpack(f"<{(end - b) // 4}f", data[b:end])
    return out


def checkpoint_params(run_dir, step):
    """Parameters (not AdamW moments) of checkpoints/step-N, over every rank's shard."""
    d = os.path.join(run_dir, "checkpoints", f"step-{step}")
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            for k, v in read_safetensors(os.path.join(d, f)).items():
                if "#" not in k:
                    out.setdefault(k, v)
    return out


def checkpoint_tensors(run_dir, step):
    """Every F32 tensor (parameters and AdamW moments) of checkpoints/step-N."""
    d = os.path.join(run_dir, "checkpoints", f"step-{step}")
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            out.update(read_safetensors(os.path.join(d, f)))
    return out


def stored_names(ckpt):
    """Tensor name -> number of shards of checkpoint `ckpt` that hold it."""
    count = {}
    for f in sorted(os.listdir(ckpt)):
        if not f.endswith(".safetensors"):
            continue
        with open(os.path.join(ckpt, f), "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            for name in json.loads(fh.read(n)):
                if name != "__metadata__":
                    count[name] = count.get(name, 0) + 1
    return count


def stored_dtypes(ckpt):
    """The set of safetensors dtypes of the tensors of checkpoint `ckpt`."""
    dtypes = set()
    for f in sorted(os.listdir(ckpt)):
        if f.endswith(".safetensors"):
            with open(os.path.join(ckpt, f), "rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                dtypes |= {e["dtype"] for k, e in json.loads(fh.read(n)).items()
                           if k != "__metadata__"}
    return dtypes


def rel(a, b):
    """|a - b| / |b| (b floored at 1e-12)."""
    return abs(a - b) / max(abs(b), 1e-12)


def max_param_rel(a, b):
    """Largest per-tensor relative L2 difference ||a - b|| / ||b|| over the parameters."""
    if set(a) != set(b):
        fail(f"parameter names differ: {sorted(set(a) ^ set(b))[:5]}")
    worst = 0.0
    for k in a:
        num = sum((x - y) * (x - y) for x, y in zip(a[k], b[k]))
        den = sum(y * y for y in b[k])
        worst = max(worst, (num / max(den, 1e-30)) ** 0.5)
    return worst


def same_training(a_dir, b_dir, what):
    ma, mb = metrics(a_dir), metrics(b_dir)
    if len(ma) != len(mb):
        fail(f"{what}: {len(ma)} vs {len(mb)} steps")
    for a, b in zip(ma, mb):
        if a["loss"] != b["loss"] or a["grad_norm"] != b["grad_norm"]:
            fail(f"{what}: step {a['step']} loss {a['loss']!r} vs {b['loss']!r}")
    if summary(a_dir)["param_hash"] != summary(b_dir)["param_hash"]:
        fail(f"{what}: parameter hash differs")


def close_training(got_dir, ref_dir, tol, what, steps=None):
    """Losses and gradient norms of got_dir within tol (relative) of ref_dir's, step by step."""
    got, ref = metrics(got_dir), metrics(ref_dir)
    n = steps or len(ref)
    if len(got) < n:
        fail(f"{what}: {len(got)} steps, expected {n}")
    worst = 0.0
    for a, b in zip(got[:n], ref[:n]):
        for key in ("loss", "grad_norm"):
            if rel(a[key], b[key]) > tol:
                fail(f"{what} step {a['step']}: {key} {a[key]:.9f} vs one process {b[key]:.9f}")
        if a["samples"] != b["samples"] or a["label_tokens"] != b["label_tokens"]:
            fail(f"{what} step {a['step']}: global batch differs (samples or label tokens)")
        worst = max(worst, rel(a["loss"], b["loss"]))
    return worst


def resumed_like_straight(name, resumed_dir, straight, steps=6, resumed_at=3, tol=1e-5):
    """The resumed run's metrics.jsonl holds `steps` lines whose losses after step `resumed_at`
    are within tol (relative) of the straight run's metrics `straight`."""
    got = metrics(resumed_dir)
    if len(got) != steps:
        fail(f"{name}: {len(got)} metric lines after resume, expected {steps}")
    for a, b in zip(got[resumed_at:], straight[resumed_at:]):
        if rel(a["loss"], b["loss"]) > tol:
            fail(f"{name} step {a['step']}: loss {a['loss']:.9f} after resume vs "
                 f"{b['loss']:.9f} straight")


def dist(xs):
    """Dist Ratio of seconds: sum_j (max - t_j) / (max * n) (balance_metrics.h)."""
    top = max(xs)
    return sum(top - x for x in xs) / (top * len(xs)) if top > 0 else 0.0


def check_predicted(ms, dp, what):
    """Every step of metrics.jsonl carries the predicted seconds of each of the dp ranks' packs
    (> 0) and the step's Cost Dist Ratios; cost_dist_dp is the Dist Ratio of predicted_rank_s."""
    for m in ms:
        for key in ("predicted_rank_s", "cost_dist_dp", "cost_dist_mb"):
            if key not in m:
                fail(f"{what} step {m['step']}: metrics.jsonl has no {key}")
        ps = m["predicted_rank_s"]
        if len(ps) != dp or not all(x > 0 for x in ps):
            fail(f"{what} step {m['step']}: predicted_rank_s {ps}, expected {dp} values > 0")
        if abs(dist(ps) - m["cost_dist_dp"]) > 1e-9:
            fail(f"{what} step {m['step']}: cost_dist_dp {m['cost_dist_dp']} but the Dist Ratio "
                 f"of predicted_rank_s {ps} is {dist(ps)}")
        if not 0 <= m["cost_dist_mb"] < 1:
            fail(f"{what} step {m['step']}: cost_dist_mb {m['cost_dist_mb']} outside [0, 1)")
        if len(m["dp_ranks"]) != dp or not all(d["busy_s"] > 0 for d in m["dp_ranks"]):
            fail(f"{what} step {m['step']}: dp_ranks {m['dp_ranks']}, expected {dp} with busy_s > 0")
