#!/usr/bin/env python3
"""Golden values for the `tiny` VLM preset, computed with PyTorch (torch 2.11 of the pinned
environment that scripts/setup.sh installs; scripts/torch_env.sh).

Written from the architecture description (docs/paper.md: InternViT blocks,
pixel shuffle v2 at 0.5 without the class token, LayerNorm-Linear-GELU-Linear projector,
LLaMA/InternLM2 decoder with RMSNorm, rotary "rotate half" positions, grouped-query attention,
SwiGLU), NOT from the C++ code. Attention here runs sample by sample on the unpacked sequences,
so the golden values also check the C++ packing.

Weights and pixels are not stored: every tensor is filled from a hash of its stable parameter
name (splitmix64 stream seeded with FNV-1a(name)), which golden_values() in
tests/models/model_test_util.h reproduces.
The fixture (torch.save dict, read in C++ with torch::pickle_load) holds the pack's ids, labels,
flags, cu_seqlens, the logits and token losses at label positions, the loss sum and label count,
and, per parameter, a sample of gradient entries (all entries of small tensors) and the norm.

The values are float32 round-off apart between torch versions and CPUs (the elementwise and
softmax kernels round differently): the 2.11 fixture differs from the 1.13 one by at most
4.6e-6 of a tensor's largest entry, inside the C++ test's 1e-5.

Usage: source scripts/torch_env.sh && "$OMNIBAL_TORCH_ENV/bin/python" \
         scripts/golden/make_tiny_golden.py [out.pt]
(default tests/models/fixtures/tiny_golden.pt). Reads models/presets/tiny.yaml for the sizes.
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMG_CONTEXT_ID = 1000          # any id below the vocabulary; C++ takes it as an option
MASK64 = (1 << 64) - 1
GOLDEN_GAMMA = 0x9E3779B97F4A7C15


def read_preset(path):
    """Tiny YAML subset reader (two-level mapping of scalars) so no yaml module is needed."""
    preset, section = {}, None
    with open(path) as f:
        lines = f.readlines()
    for raw in lines:
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        key, _, value = line.strip().partition(":")
        value = value.strip()
        if not raw.startswith(" "):
            section = key
            preset[section] = {} if value == "" else value
        elif value:
            v = value
            if v in ("true", "false"):
                v = v == "true"
            else:
                try:
                    v = float(v) if any(c in v for c in ".e") else int(v)
                except ValueError:
                    pass
            preset[section][key] = v
    return preset


def fnv1a(text):
    h = 1469598103934665603
    for c in text.encode():
        h = ((h ^ c) * 1099511628211) & MASK64
    return h


def uniform_stream(name, n):
    """n values in [0, 1): splitmix64 outputs k = 1..n from state fnv1a(name), top 53 bits."""
    with np.errstate(over="ignore"):
        k = np.arange(1, n + 1, dtype=np.uint64)
        z = np.uint64(fnv1a(name)) + k * np.uint64(GOLDEN_GAMMA)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def golden_tensor(name, shape):
    """The value rule shared with tests/models/golden_fill.h."""
    n = int(np.prod(shape))
    if name.endswith("bias"):
        base, scale = 0.0, 0.1
    elif "norm" in name and name.endswith("weight"):
        base, scale = 1.0, 0.2
    elif name.endswith(".ls1") or name.endswith(".ls2"):
        base, scale = 0.5, 0.2
    elif name == "pixel_values":
        base, scale = 0.0, 1.0
    else:
        base, scale = 0.0, math.sqrt(3.0 / (n // shape[0]))
    u = uniform_stream(name, n)
    values = base + scale * (2.0 * u - 1.0)
    return torch.tensor(values, dtype=torch.float32).reshape(shape).requires_grad_(True)


def parameter_shapes(p):
    v, l = p["vit"], p["llm"]
    dv, dl, ps = v["width"], l["width"], v["patch_size"]
    side = v["tile_size"] // ps
    hd = dl // l["heads"]
    shapes = {
        "vit_embed.patch_embedding.weight": (dv, 3, ps, ps),
        "vit_embed.patch_embedding.bias": (dv,),
        "vit_embed.class_embedding": (1, 1, dv),
        "vit_embed.position_embedding": (1, side * side + 1, dv),
    }
    for i in range(v["depth"]):
        b = f"vit_block_{i}."
        shapes.update({
            b + "norm1.weight": (dv,), b + "norm1.bias": (dv,),
            b + "attn.qkv.weight": (3 * dv, dv), b + "attn.qkv.bias": (3 * dv,),
            b + "attn.proj.weight": (dv, dv), b + "attn.proj.bias": (dv,),
            b + "ls1": (dv,),
            b + "norm2.weight": (dv,), b + "norm2.bias": (dv,),
            b + "mlp.fc1.weight": (v["mlp_dim"], dv), b + "mlp.fc1.bias": (v["mlp_dim"],),
            b + "mlp.fc2.weight": (dv, v["mlp_dim"]), b + "mlp.fc2.bias": (dv,),
            b + "ls2": (dv,),
        })
    shapes.update({
        "projector.norm.weight": (4 * dv,), "projector.norm.bias": (4 * dv,),
        "projector.fc1.weight": (dl, 4 * dv), "projector.fc1.bias": (dl,),
        "projector.fc2.weight": (dl, dl), "projector.fc2.bias": (dl,),
        "llm_embed.tok_embeddings.weight": (l["vocab_size"], dl),
    })
    for i in range(l["depth"]):
        b = f"llm_block_{i}."
        shapes.update({
            b + "attention_norm.weight": (dl,),
            b + "attention.wq.weight": (l["heads"] * hd, dl),
            b + "attention.wk.weight": (l["kv_heads"] * hd, dl),
            b + "attention.wv.weight": (l["kv_heads"] * hd, dl),
            b + "attention.wo.weight": (dl, l["heads"] * hd),
            b + "ffn_norm.weight": (dl,),
            b + "feed_forward.w1.weight": (l["mlp_dim"], dl),
            b + "feed_forward.w3.weight": (l["mlp_dim"], dl),
            b + "feed_forward.w2.weight": (dl, l["mlp_dim"]),
        })
    shapes.update({"llm_head.norm.weight": (dl,), "llm_head.output.weight": (l["vocab_size"], dl)})
    return shapes


# ---- the model, written from the spec -------------------------------------------------------

def vit_forward(P, p, pixels):
    v = p["vit"]
    x = F.conv2d(pixels, P["vit_embed.patch_embedding.weight"], P["vit_embed.patch_embedding.bias"],
                 stride=v["patch_size"])
    x = x.flatten(2).transpose(1, 2)                                   # [tiles, patches, d]
    cls = P["vit_embed.class_embedding"].expand(x.shape[0], -1, -1)
    x = torch.cat([cls, x], 1) + P["vit_embed.position_embedding"]
    heads, d = v["heads"], v["width"]
    for i in range(v["depth"]):
        b = f"vit_block_{i}."
        h = F.layer_norm(x, (d,), P[b + "norm1.weight"], P[b + "norm1.bias"], 1e-6)
        qkv = F.linear(h, P[b + "attn.qkv.weight"], P[b + "attn.qkv.bias"])
        n, t = x.shape[0], x.shape[1]
        qkv = qkv.reshape(n, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
        q, k, vv = qkv[0], qkv[1], qkv[2]                               # [n, heads, t, hd]
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // heads), -1) @ vv
        att = F.linear(att.transpose(1, 2).reshape(n, t, d), P[b + "attn.proj.weight"], P[b + "attn.proj.bias"])
        x = x + P[b + "ls1"] * att
        h = F.layer_norm(x, (d,), P[b + "norm2.weight"], P[b + "norm2.bias"], 1e-6)
        h = F.linear(F.gelu(F.linear(h, P[b + "mlp.fc1.weight"], P[b + "mlp.fc1.bias"])),
                     P[b + "mlp.fc2.weight"], P[b + "mlp.fc2.bias"])
        x = x + P[b + "ls2"] * h
    return x


def pixel_shuffle_v2(x, scale=0.5):
    n, w, h, c = x.size()
    x = x.view(n, w, int(h * scale), int(c / scale))
    x = x.permute(0, 2, 1, 3).contiguous()
    x = x.view(n, int(h * scale), int(w * scale), int(c / (scale * scale)))
    return x.permute(0, 2, 1, 3).contiguous()


def project(P, vit_out):
    x = vit_out[:, 1:, :]                                              # drop the class token
    side = int(round(x.shape[1] ** 0.5))
    x = pixel_shuffle_v2(x.reshape(x.shape[0], side, side, -1))
    x = x.reshape(x.shape[0], -1, x.shape[-1])
    x = F.layer_norm(x, (x.shape[-1],), P["projector.norm.weight"], P["projector.norm.bias"], 1e-5)
    x = F.gelu(F.linear(x, P["projector.fc1.weight"], P["projector.fc1.bias"]))
    return F.linear(x, P["projector.fc2.weight"], P["projector.fc2.bias"])


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rope(x, pos, theta):
    hd = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    ang = pos.double()[:, None] * inv[None, :]
    emb = torch.cat([ang, ang], -1).float()
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    rot = torch.cat([-x[..., hd // 2:], x[..., :hd // 2]], -1)
    return x * cos + rot * sin


def llm_sample(P, p, x, pos):
    """Decoder over ONE sample x [L, d] with positions pos [L]."""
    l = p["llm"]
    H, KV, d = l["heads"], l["kv_heads"], l["width"]
    hd = d // H
    L = x.shape[0]
    causal = torch.triu(torch.full((L, L), float("-inf")), 1)
    for i in range(l["depth"]):
        b = f"llm_block_{i}."
        h = rms_norm(x, P[b + "attention_norm.weight"], l["norm_eps"])
        q = rope((h @ P[b + "attention.wq.weight"].t()).view(L, H, hd), pos, l["rope_theta"])
        k = rope((h @ P[b + "attention.wk.weight"].t()).view(L, KV, hd), pos, l["rope_theta"])
        v = (h @ P[b + "attention.wv.weight"].t()).view(L, KV, hd)
        k = k.repeat_interleave(H // KV, 1)                              # repeat_kv
        v = v.repeat_interleave(H // KV, 1)
        s = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd) + causal
        o = torch.einsum("hqk,khd->qhd", torch.softmax(s, -1), v).reshape(L, d)
        x = x + o @ P[b + "attention.wo.weight"].t()
        h = rms_norm(x, P[b + "ffn_norm.weight"], l["norm_eps"])
        g = F.silu(h @ P[b + "feed_forward.w1.weight"].t()) * (h @ P[b + "feed_forward.w3.weight"].t())
        x = x + g @ P[b + "feed_forward.w2.weight"].t()
    h = rms_norm(x, P["llm_head.norm.weight"], l["norm_eps"])
    return h @ P["llm_head.output.weight"].t()                           # [L, vocab]


def make_pack(p):
    """3 samples: two images (2 real tiles), text only (1 dummy tile), one image (1 tile)."""
    tpt = (p["vit"]["tile_size"] // p["vit"]["patch_size"]) ** 2 // 4
    text = (uniform_stream("input_ids", 64) * IMG_CONTEXT_ID).astype(np.int64).tolist()
    def sample(n_pre, n_img, n_post, n_label, offset):
        ids = text[offset:offset + n_pre] + [IMG_CONTEXT_ID] * n_img + text[offset + n_pre:offset + n_pre + n_post]
        labels = [-100] * (len(ids) - n_label) + ids[len(ids) - n_label:]
        return ids, labels
    samples = [sample(5, 2 * tpt, 5, 5, 0), sample(9, 0, 0, 4, 10), sample(3, tpt, 5, 5, 20)]
    ids, labels, pos, cu = [], [], [], [0]
    for s_ids, s_labels in samples:
        ids += s_ids
        labels += s_labels
        pos += list(range(len(s_ids)))
        cu.append(cu[-1] + len(s_ids))
    return (torch.tensor(ids), torch.tensor(labels), torch.tensor(pos), torch.tensor(cu),
            torch.tensor([1, 1, 0, 1]))


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests/models/fixtures/tiny_golden.pt")
    p = read_preset(os.path.join(ROOT, "models/presets/tiny.yaml"))
    P = {name: golden_tensor(name, shape) for name, shape in parameter_shapes(p).items()}
    ids, labels, pos, cu, flags = make_pack(p)
    ts = p["vit"]["tile_size"]
    pixels = golden_tensor("pixel_values", (4, 3, ts, ts)).detach()

    feats = project(P, vit_forward(P, p, pixels))[flags == 1].reshape(-1, p["llm"]["width"])
    emb = P["llm_embed.tok_embeddings.weight"][ids]
    slot = ids == IMG_CONTEXT_ID
    assert int(slot.sum()) == feats.shape[0]
    emb = emb.masked_scatter(slot[:, None], feats)

    logits_at, token_loss, positions = [], [], []
    for s in range(len(cu) - 1):
        a, b = int(cu[s]), int(cu[s + 1])
        logits = llm_sample(P, p, emb[a:b], pos[a:b])
        for t in range(a, b - 1):                 # logits at t predict the label of t + 1
            if int(labels[t + 1]) != -100:
                positions.append(t)
                logits_at.append(logits[t - a])
                token_loss.append(F.cross_entropy(logits[t - a][None], labels[t + 1][None]))
    logits_at = torch.stack(logits_at)
    token_loss = torch.stack(token_loss)
    loss_sum = token_loss.sum()
    loss_sum.backward()

    fixture = {
        "img_context_id": torch.tensor(IMG_CONTEXT_ID), "input_ids": ids, "labels": labels,
        "position_ids": pos, "cu_seqlens": cu, "image_flags": flags,
        "label_positions": torch.tensor(positions), "logits": logits_at.detach(),
        "token_loss": token_loss.detach(), "loss_sum": loss_sum.detach(),
        "label_count": torch.tensor(len(positions)),
    }
    for name, t in P.items():
        g = t.grad.flatten()
        n = g.numel()
        idx = torch.arange(n) if n <= 1024 else (torch.arange(256) * n) // 256 + (n // 512)
        fixture["grad_idx/" + name] = idx.to(torch.int32)
        fixture["grad_val/" + name] = g[idx].clone()
        fixture["grad_norm/" + name] = g.norm()
    torch.save(fixture, out_path)
    print(f"wrote {out_path}: loss_sum {loss_sum.item():.6f} over {len(positions)} labels, "
          f"{len(P)} parameters, {sum(t.numel() for t in P.values())} elements, "
          f"torch {torch.__version__}")


if __name__ == "__main__":
    main()
