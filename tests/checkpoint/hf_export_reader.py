#!/usr/bin/env python3
"""An independent reader of a Hugging Face InternVL-Chat checkpoint directory, written from the
safetensors format and from the parameter names and shapes that InternVL's modeling code
(internvl_chat/internvl/model: modeling_intern_vit.py, modeling_internvl_chat.py,
internlm2/modeling_internlm2.py, phi3/modeling_phi3.py) and transformers' LlamaForCausalLM
create from config.json. It shares no code with omnibal's C++ loader (lib/checkpoint), so an
export that passes here is one those classes would load without missing, unexpected or
mis-shaped tensors and without a default that breaks them.

  hf_export_reader.py DIR [--tied] [--tiles MIN MAX] [--pad N] [--config-only]

Library use: read_checkpoint(dir) -> (config, {name: numpy array}); check_export(dir, ...)
raises ReaderError listing every problem.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

# safetensors dtype -> numpy (BF16 is read as its raw 16 bits).
DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16,
          "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8,
          "BOOL": np.bool_}
TORCH_DTYPE = {"float32": "F32", "bfloat16": "BF16", "float16": "F16", "float64": "F64"}

# The prompt format omnibal trains with (lib/data/chat_template.h): InternVL's MPT style.
OMNIBAL_FORMAT = {"user": "<|im_start|>user\n", "assistant": "<|im_start|>assistant\n",
                  "sep": "<|im_end|>", "system": "<|im_start|>system\n{system_message}"}
# InternVL's conversation templates (internvl_chat/internvl/conversation.py), as written there.
INTERNVL_TEMPLATES = {
    "Hermes-2": {"user": "<|im_start|>user\n", "assistant": "<|im_start|>assistant\n",
                 "sep": "<|im_end|>", "system": "<|im_start|>system\n{system_message}"},
    "internlm2-chat": {"user": "<|im_start|>user\n", "assistant": "<|im_start|>assistant\n",
                       "sep": "<|im_end|>", "system": "<|im_start|>system\n{system_message}"},
    "phi3-chat": {"user": "<|user|>\n", "assistant": "<|assistant|>\n", "sep": "<|end|>",
                  "system": "<|system|>\n{system_message}"},
    "internvl2_5": {"user": "<|im_start|>user\n", "assistant": "<|im_start|>assistant\n",
                    "sep": "<|im_end|>\n", "system": "<|im_start|>system\n{system_message}"},
}
# pad_token_id each LLM config class applies when config.json has none (configuration_*.py).
DEFAULT_PAD = {"InternLM2ForCausalLM": 0, "LlamaForCausalLM": None, "Phi3ForCausalLM": 32000}


class ReaderError(Exception):
    pass


def read_safetensors(path):
    """{name: (dtype, shape, numpy array)} of one file, checking the header against the data."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ReaderError(f"{path}: shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise ReaderError(f"{path}: header length {n} beyond the file")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = memoryview(blob)[8 + n:]
    out, spans = {}, []
    for name, e in header.items():
        if name == "__metadata__":
            continue
        dtype, shape, (begin, end) = e["dtype"], e["shape"], e["data_offsets"]
        if dtype not in DTYPES:
            raise ReaderError(f"{path}: {name}: unknown dtype {dtype}")
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if end - begin != count * np.dtype(DTYPES[dtype]).itemsize or not 0 <= begin <= end <= len(data):
            raise ReaderError(f"{path}: {name}: offsets [{begin}, {end}) do not hold {dtype} {shape}")
        spans.append((begin, end))
        arr = np.frombuffer(data[begin:end], dtype=np.dtype(DTYPES[dtype]).newbyteorder("<"), count=count)
        out[name] = (dtype, list(shape), arr.reshape(shape))
    spans.sort()
    pos = 0
    for begin, end in spans:
        if begin != pos:
            raise ReaderError(f"{path}: data not contiguous at byte {pos}")
        pos = end
    if pos != len(data):
        raise ReaderError(f"{path}: {len(data) - pos} trailing bytes")
    return out


def read_checkpoint(d):
    """(config, {name: (dtype, shape, array)}, problems) of an export directory: the shards of
    model.safetensors.index.json, or model.safetensors."""
    problems = []
    with open(os.path.join(d, "config.json")) as f:
        config = json.load(f)
    index_path = os.path.join(d, "model.safetensors.index.json")
    tensors = {}
    if os.path.exists(index_path):
        with open(index_path) as f:
            index = json.load(f)
        weight_map = index["weight_map"]
        files = sorted(set(weight_map.values()))
        on_disk = sorted(x for x in os.listdir(d) if x.endswith(".safetensors"))
        if files != on_disk:
            problems.append(f"index names files {files}, the directory holds {on_disk}")
        total = 0
        for file in files:
            for name, t in read_safetensors(os.path.join(d, file)).items():
                if name in tensors:
                    problems.append(f"{name} in more than one shard")
                if weight_map.get(name) != file:
                    problems.append(f"{name} is in {file}, the index says {weight_map.get(name)}")
                tensors[name] = t
                total += t[2].nbytes
        for name in weight_map:
            if name not in tensors:
                problems.append(f"index lists {name}, no shard holds it")
        if index.get("metadata", {}).get("total_size") != total:
            problems.append(f"index total_size {index.get('metadata', {}).get('total_size')}, tensors hold {total} bytes")
    else:
        tensors = read_safetensors(os.path.join(d, "model.safetensors"))
    return config, tensors, problems


def vision_parameters(vc):
    """InternVisionModel's parameters (modeling_intern_vit.py) under vision_model."""
    D, I, p = vc["hidden_size"], vc["intermediate_size"], vc["patch_size"]
    positions = (vc["image_size"] // p) ** 2 + 1
    e = "vision_model.embeddings."
    want = {e + "class_embedding": [1, 1, D], e + "patch_embedding.weight": [D, 3, p, p],
            e + "patch_embedding.bias": [D], e + "position_embedding": [1, positions, D]}
    layer_norm = vc.get("norm_type", "rms_norm") == "layer_norm"
    for i in range(vc["num_hidden_layers"]):
        l = f"vision_model.encoder.layers.{i}."
        want.update({l + "attn.qkv.weight": [3 * D, D], l + "attn.proj.weight": [D, D],
                     l + "attn.proj.bias": [D], l + "mlp.fc1.weight": [I, D], l + "mlp.fc1.bias": [I],
                     l + "mlp.fc2.weight": [D, I], l + "mlp.fc2.bias": [D], l + "ls1": [D], l + "ls2": [D],
                     l + "norm1.weight": [D], l + "norm2.weight": [D]})
        if vc.get("qkv_bias", False):
            want[l + "attn.qkv.bias"] = [3 * D]
        if vc.get("qk_normalization", True):
            want[l + "attn.q_norm.weight"] = [D]
            want[l + "attn.k_norm.weight"] = [D]
        if layer_norm:
            want[l + "norm1.bias"] = [D]
            want[l + "norm2.bias"] = [D]
    return want


def projector_parameters(config):
    """InternVLChatModel.mlp1: LayerNorm, Linear, GELU, Linear (modeling_internvl_chat.py)."""
    vit_in = config["vision_config"]["hidden_size"] * int(1 / config["downsample_ratio"]) ** 2
    H = config["llm_config"]["hidden_size"]
    return {"mlp1.0.weight": [vit_in], "mlp1.0.bias": [vit_in], "mlp1.1.weight": [H, vit_in],
            "mlp1.1.bias": [H], "mlp1.3.weight": [H, H], "mlp1.3.bias": [H]}


def llm_parameters(lc):
    """The LLM's parameters under language_model, by llm_config.architectures[0]."""
    arch = lc["architectures"][0]
    H, I, V = lc["hidden_size"], lc["intermediate_size"], lc["vocab_size"]
    heads = lc["num_attention_heads"]
    kv = lc.get("num_key_value_heads") or heads
    hd = lc.get("head_dim") or H // heads
    m = "language_model.model."
    want = {m + "norm.weight": [H]}
    if arch == "InternLM2ForCausalLM":  # modeling_internlm2.py
        want[m + "tok_embeddings.weight"] = [V, H]
        want["language_model.output.weight"] = [V, H]
        for i in range(lc["num_hidden_layers"]):
            l = f"{m}layers.{i}."
            want.update({l + "attention.wqkv.weight": [(heads + 2 * kv) * hd, H],
                         l + "attention.wo.weight": [H, heads * hd], l + "feed_forward.w1.weight": [I, H],
                         l + "feed_forward.w3.weight": [I, H], l + "feed_forward.w2.weight": [H, I],
                         l + "attention_norm.weight": [H], l + "ffn_norm.weight": [H]})
            if lc.get("bias", True):
                want[l + "attention.wqkv.bias"] = [(heads + 2 * kv) * hd]
                want[l + "attention.wo.bias"] = [H]
    elif arch in ("LlamaForCausalLM", "Phi3ForCausalLM"):  # transformers llama, InternVL phi3
        want[m + "embed_tokens.weight"] = [V, H]
        want["language_model.lm_head.weight"] = [V, H]
        for i in range(lc["num_hidden_layers"]):
            l = f"{m}layers.{i}."
            want.update({l + "self_attn.o_proj.weight": [H, heads * hd], l + "mlp.down_proj.weight": [H, I],
                         l + "input_layernorm.weight": [H], l + "post_attention_layernorm.weight": [H]})
            if arch == "Phi3ForCausalLM":
                want[l + "self_attn.qkv_proj.weight"] = [heads * hd + 2 * kv * hd, H]
                want[l + "mlp.gate_up_proj.weight"] = [2 * I, H]
                continue
            want.update({l + "self_attn.q_proj.weight": [heads * hd, H], l + "self_attn.k_proj.weight": [kv * hd, H],
                         l + "self_attn.v_proj.weight": [kv * hd, H], l + "mlp.gate_proj.weight": [I, H],
                         l + "mlp.up_proj.weight": [I, H]})
            if lc.get("attention_bias", False):
                for x, rows in (("q", heads * hd), ("k", kv * hd), ("v", kv * hd), ("o", H)):
                    want[f"{l}self_attn.{x}_proj.bias"] = [rows]
            if lc.get("mlp_bias", False):
                want.update({l + "mlp.gate_proj.bias": [I], l + "mlp.up_proj.bias": [I], l + "mlp.down_proj.bias": [H]})
    else:
        raise ReaderError(f"llm_config.architectures[0] {arch!r} is not one InternVLChatModel builds")
    return want


def expected_parameters(config):
    """Every parameter InternVLChatModel(config) creates, with its shape, from config.json alone."""
    want = vision_parameters(config["vision_config"])
    want.update(projector_parameters(config))
    want.update(llm_parameters(config["llm_config"]))
    return want


def config_problems(config, tiles=None, pad=None):
    """What in config.json would make InternVL build or run the model unlike training."""
    p = []
    lc = config["llm_config"]
    arch = lc["architectures"][0]
    V = lc["vocab_size"]
    eff_pad = lc.get("pad_token_id", DEFAULT_PAD.get(arch))
    if eff_pad is not None and not (isinstance(eff_pad, int) and 0 <= eff_pad < V):
        p.append(f"pad_token_id {eff_pad} ({'written' if 'pad_token_id' in lc else arch + ' default'}) "
                 f"is not a token of a {V}-token vocabulary: nn.Embedding(padding_idx) fails")
    if pad is not None and eff_pad != pad:
        p.append(f"pad_token_id {eff_pad}, the tokenizer's pad is {pad}")
    for key in ("dynamic_image_size", "use_thumbnail", "min_dynamic_patch", "max_dynamic_patch", "template"):
        if key not in config:
            p.append(f"{key} missing (InternVLChatConfig would default it)")
    if tiles is not None:
        got = (config.get("dynamic_image_size"), config.get("use_thumbnail"), config.get("min_dynamic_patch"),
               config.get("max_dynamic_patch"))
        if got != (True, True, tiles[0], tiles[1]):
            p.append(f"dynamic_image_size / use_thumbnail / min / max_dynamic_patch {got}, "
                     f"training tiled with (True, True, {tiles[0]}, {tiles[1]})")
    template = config.get("template")
    if template not in INTERNVL_TEMPLATES:
        p.append(f"template {template!r} is not an InternVL conversation template")
    elif INTERNVL_TEMPLATES[template] != OMNIBAL_FORMAT:
        p.append(f"template {template!r} formats turns as {INTERNVL_TEMPLATES[template]}, training used {OMNIBAL_FORMAT}")
    if config.get("system_message", None) != "":
        p.append("system_message is not \"\": InternVL would prepend its default system turn, never trained on")
    if config.get("model_type") != "internvl_chat" or config.get("architectures") != ["InternVLChatModel"]:
        p.append("not an InternVLChatModel config")
    if config.get("ps_version") != "v2":
        p.append(f"ps_version {config.get('ps_version')!r}: v1 leaves pixel-shuffled features transposed")
    return p


def check_export(d, tied=False, tiles=None, pad=None, config_only=False):
    """Raises ReaderError listing every problem of export `d`; returns (config, tensors)."""
    if config_only:
        with open(os.path.join(d, "config.json")) as f:
            config = json.load(f)
        problems, tensors = config_problems(config, tiles, pad), {}
        expected_parameters(config)
    else:
        config, tensors, problems = read_checkpoint(d)
        problems += config_problems(config, tiles, pad)
        want = expected_parameters(config)
        for name, shape in sorted(want.items()):
            if name not in tensors:
                problems.append(f"missing: {name} {shape} (the model would initialise it at random)")
            elif tensors[name][1] != shape:
                problems.append(f"shape: {name} is {tensors[name][1]}, the model has {shape}")
        for name in sorted(set(tensors) - set(want)):
            problems.append(f"unexpected: {name} {tensors[name][1]}")
        dtype = TORCH_DTYPE.get(config.get("torch_dtype"))
        for name, (dt, _, _) in sorted(tensors.items()):
            if dt != dtype:
                problems.append(f"dtype: {name} is {dt}, config.json says {config.get('torch_dtype')}")
                break
        lc = config["llm_config"]
        internlm2 = lc["architectures"][0] == "InternLM2ForCausalLM"
        emb = "language_model.model." + ("tok_embeddings.weight" if internlm2 else "embed_tokens.weight")
        head = "language_model." + ("output.weight" if internlm2 else "lm_head.weight")
        if tied and emb in tensors and head in tensors and not np.array_equal(tensors[emb][2], tensors[head][2]):
            problems.append(f"tied preset: {head} differs from {emb}")
    if problems:
        raise ReaderError(f"{d}: {len(problems)} problem(s):\n  - " + "\n  - ".join(problems))
    return config, tensors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--tied", action="store_true", help="the head must equal the embedding")
    ap.add_argument("--tiles", type=int, nargs=2, metavar=("MIN", "MAX"), help="training's data.min/max_tiles")
    ap.add_argument("--pad", type=int, help="the tokenizer's pad id")
    ap.add_argument("--config-only", action="store_true", help="check config.json only (no tensors)")
    a = ap.parse_args()
    try:
        config, tensors = check_export(a.dir, a.tied, a.tiles, a.pad, a.config_only)
    except ReaderError as e:
        print("FAIL: " + str(e))
        return 1
    print(f"PASS: {a.dir}: {len(tensors)} tensors, {config['llm_config']['architectures'][0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
