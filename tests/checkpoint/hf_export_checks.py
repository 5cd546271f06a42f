#!/usr/bin/env python3
"""`omnibal-plan export` checked by the independent reader (hf_export_reader.py), for one preset
in every LLM style (ctest checkpoint.hf_reader.<preset>):

  1. a training checkpoint of the randomly initialised preset, saved by omnibal's store with
     data.min_tiles=2, data.max_tiles=9 (hf_export_fixture_tool, under mpiexec -n 1);
  2. for internlm2, llama and llama-fused: omnibal-plan export, then the reader: every tensor the
     Hugging Face classes create is there with the right shape and dtype, nothing else, the index
     matches the shards, pad_token_id valid, tiling keys = the training config, template = the
     trained format, a tied head present and equal to the embedding;
  3. every exported value equals the checkpoint's parameter it holds, mapped here from omnibal's
     names by the HF conventions (InternLM2 wqkv read as modeling_internlm2.py rearranges it,
     Phi-3 qkv_proj / gate_up_proj split as modeling_phi3.py does); bf16 exports against the
     round-to-nearest-even of the fp32 values;
  4. (tiny) the pad id of a real SentencePiece model given with --tokenizer, and the reader
     itself: it must refuse Phi-3's default pad id, missing tiling keys, phi3-chat, no head.
Presets too large to instantiate on a CPU (the planning-only 6B presets, > 1e9 parameters) get
their config.json checked only: the reader's parameter count from config.json alone must equal
omnibal's count for the preset.

  hf_export_checks.py --preset NAME|PATH --plan omnibal-plan --tool hf_export_fixture_tool
                      --mpiexec mpiexec --work DIR
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_export_reader as reader  # noqa: E402

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
STYLES = ("internlm2", "llama", "llama-fused")
TILES = (2, 9)
MAX_INSTANTIATED = 1_000_000_000  # parameters; the planning-only presets are 26B and 40B


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(args, what):
    p = subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        print(p.stdout[-3000:], p.stderr[-3000:])
        fail(f"{what}: exit {p.returncode}")
    return p.stdout


def bf16_bits(a):
    """fp32 -> bf16 bits, round to nearest even (what LibTorch's cast does for finite values)."""
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def hf_values(omni, style, lc, tied):
    """{hf name: array} the export must hold, from the omnibal checkpoint tensors `omni`."""
    heads, kv, H = lc["num_attention_heads"], lc["num_key_value_heads"], lc["hidden_size"]
    hd, groups = H // heads, heads // kv
    internlm2 = style == "internlm2"
    emb = "language_model.model." + ("tok_embeddings.weight" if internlm2 else "embed_tokens.weight")
    head = "language_model." + ("output.weight" if internlm2 else "lm_head.weight")
    out = {}
    for name, a in omni.items():
        unit, _, local = name.partition(".")
        if unit == "vit_embed":
            out["vision_model.embeddings." + local] = a
        elif unit.startswith("vit_block_"):
            out[f"vision_model.encoder.layers.{unit[len('vit_block_'):]}.{local}"] = a
        elif unit == "projector":
            layer, _, param = local.partition(".")
            out[f"mlp1.{ {'norm': 0, 'fc1': 1, 'fc2': 3}[layer] }.{param}"] = a
        elif name == "llm_embed.tok_embeddings.weight":
            out[emb] = a
            if tied:
                out[head] = a
        elif name == "llm_head.norm.weight":
            out["language_model.model.norm.weight"] = a
        elif name == "llm_head.output.weight":
            out[head] = a
    for i in range(lc["num_hidden_layers"]):
        o, h = f"llm_block_{i}.", f"language_model.model.layers.{i}."
        q, k, v = (omni[o + f"attention.{x}.weight"] for x in ("wq", "wk", "wv"))
        w1, w2, w3 = (omni[o + f"feed_forward.{x}.weight"] for x in ("w1", "w2", "w3"))
        wo, an, fn = omni[o + "attention.wo.weight"], omni[o + "attention_norm.weight"], omni[o + "ffn_norm.weight"]
        if internlm2:
            # modeling_internlm2.py: rearrange(qkv, "b q (h gs d) -> b q h gs d", gs=2+groups):
            # per KV head, its `groups` query heads, then its key, then its value.
            wqkv = np.concatenate([q.reshape(kv, groups, hd, H), k.reshape(kv, 1, hd, H), v.reshape(kv, 1, hd, H)],
                                  axis=1).reshape(-1, H)
            out.update({h + "attention.wqkv.weight": wqkv, h + "attention.wo.weight": wo,
                        h + "feed_forward.w1.weight": w1, h + "feed_forward.w2.weight": w2,
                        h + "feed_forward.w3.weight": w3, h + "attention_norm.weight": an,
                        h + "ffn_norm.weight": fn})
            continue
        out.update({h + "self_attn.o_proj.weight": wo, h + "mlp.down_proj.weight": w2,
                    h + "input_layernorm.weight": an, h + "post_attention_layernorm.weight": fn})
        if style == "llama-fused":
            # modeling_phi3.py: q = qkv[..., :heads*hd], k = next kv*hd, v = the rest;
            # gate, up = gate_up_proj(x).chunk(2), act(gate) * up.
            out[h + "self_attn.qkv_proj.weight"] = np.concatenate([q, k, v])
            out[h + "mlp.gate_up_proj.weight"] = np.concatenate([w1, w3])
        else:
            out.update({h + "self_attn.q_proj.weight": q, h + "self_attn.k_proj.weight": k,
                        h + "self_attn.v_proj.weight": v, h + "mlp.gate_proj.weight": w1,
                        h + "mlp.up_proj.weight": w3})
    return out


def check_values(tensors, omni, style, config, tied):
    want = hf_values(omni, style, config["llm_config"], tied)
    if set(want) != set(tensors):
        fail(f"{style}: the values map names {sorted(set(want) ^ set(tensors))[:6]} that the export lacks or adds")
    for name, a in want.items():
        dtype, shape, got = tensors[name]
        expect = bf16_bits(a) if dtype == "BF16" else a.astype(got.dtype)
        if list(a.shape) != shape or not np.array_equal(got, expect.reshape(shape)):
            fail(f"{style}: {name} does not hold the trained values")


def write_safetensors(path, tensors):
    """A plain safetensors writer ({name: (dtype, shape, array)}) for the reader's negative checks."""
    header, blobs, pos = {}, [], 0
    for name, (dtype, shape, a) in sorted(tensors.items()):
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [pos, pos + len(b)]}
        blobs.append(b)
        pos += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def reader_refuses(src, work, tied):
    """The reader finds the known export faults, on damaged copies of a good llama-fused export."""
    def broken(tag, edit_config=None, drop=None):
        d = os.path.join(work, "broken-" + tag)
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(src, d)
        if edit_config:
            with open(os.path.join(d, "config.json")) as f:
                c = json.load(f)
            edit_config(c)
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(c, f)
        if drop:
            _, tensors, _ = reader.read_checkpoint(d)
            for x in os.listdir(d):
                if x.endswith(".safetensors") or x.endswith(".index.json"):
                    os.remove(os.path.join(d, x))
            write_safetensors(os.path.join(d, "model.safetensors"), {k: v for k, v in tensors.items() if k != drop})
        try:
            reader.check_export(d, tied=tied, tiles=TILES, pad=0)
        except reader.ReaderError as e:
            return str(e)
        fail(f"the reader accepted the broken export {tag}")

    def no_pad(c):
        del c["llm_config"]["pad_token_id"]
    msg = broken("no-pad", no_pad)
    if "pad_token_id 32000 (Phi3ForCausalLM default)" not in msg:
        fail("reader: a Phi-3 config without pad_token_id not refused for the 32000 default: " + msg)

    def no_tiling(c):
        del c["max_dynamic_patch"]
        c["use_thumbnail"] = False
    msg = broken("no-tiling", no_tiling)
    if "max_dynamic_patch missing" not in msg or "use_thumbnail" not in msg:
        fail("reader: missing max_dynamic_patch / wrong use_thumbnail not refused: " + msg)

    def phi3_template(c):
        c["template"] = "phi3-chat"
    if "template 'phi3-chat' formats turns" not in broken("template", phi3_template):
        fail("reader: the phi3-chat template not refused")
    if "missing: language_model.lm_head.weight" not in broken("no-head", drop="language_model.lm_head.weight"):
        fail("reader: an export without the LM head not refused")
    print("reader refuses: Phi-3 default pad, missing tiling keys, phi3-chat template, missing head")


def spm_tokenizer(work, pad_id):
    """A small SentencePiece model with omnibal's special tokens and pad id `pad_id`, or None."""
    if not shutil.which("spm_train"):
        return None
    d = os.path.join(work, "spm")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "corpus.txt"), "w") as f:
        for i in range(200):
            f.write(f"a shirt and a shoe number {i} on the left of the bag\n")
    p = subprocess.run(["spm_train", "--input=corpus.txt", "--model_prefix=t", "--model_type=bpe",
                        "--vocab_size=400", "--hard_vocab_limit=false", "--byte_fallback=true", f"--pad_id={pad_id}",
                        "--unk_id=0", "--bos_id=1", "--eos_id=2", "--minloglevel=2",
                        "--user_defined_symbols=<img>,</img>,<IMG_CONTEXT>,<|im_start|>,<|im_end|>"],
                       cwd=d, capture_output=True, text=True)
    if p.returncode != 0:
        fail("spm_train: " + p.stderr[-2000:])
    return os.path.join(d, "t.model")


def config_only(a, preset, name, count):
    print(f"{name}: {count} parameters, too large to instantiate in a test: config.json checked, no tensors")
    for style in STYLES:
        out = os.path.join(a.work, "config-" + style)
        run([a.tool, "config", preset, style, out], f"config {style}")
        reader.check_export(out, config_only=True)
        with open(os.path.join(out, "config.json")) as f:
            config = json.load(f)
        hf_count = sum(int(np.prod(s)) for s in reader.expected_parameters(config).values())
        if hf_count != count:
            fail(f"{style}: the classes of config.json have {hf_count} parameters, the preset {count}")
        print(f"PASS {name} {style} (config only): {hf_count} parameters from config.json alone")


def main():
    ap = argparse.ArgumentParser()
    for opt in ("--preset", "--plan", "--tool", "--mpiexec", "--work"):
        ap.add_argument(opt, required=True)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    name = os.path.splitext(os.path.basename(a.preset))[0]
    probe = os.path.join(a.work, "probe")
    count = int(run([a.tool, "config", a.preset, "internlm2", probe], "parameter count").split()[-1])
    if count > MAX_INSTANTIATED:
        config_only(a, a.preset, name, count)
        print("PASS")
        return
    root = os.path.join(a.work, "run")
    run([a.mpiexec, "-n", "1", a.tool, "checkpoint", a.preset, root, f"data.min_tiles={TILES[0]}",
         f"data.max_tiles={TILES[1]}", "data.tokenizer=" + os.path.join(a.work, "no-tokenizer.model")],
        "training checkpoint")
    omni = {k: v[2] for k, v in reader.read_safetensors(os.path.join(root, "step-1", "rank-0.safetensors")).items()}
    tied = "llm_head.output.weight" not in omni
    small = count < 10_000_000
    for style in STYLES:
        out = os.path.join(a.work, style)
        # Small models: fp32 (exact values) in many shards; base-100m: the default bf16.
        args = [a.plan, "export", "--checkpoint", root, "--out", out, "--style", style]
        args += ["--dtype", "keep", "--max-shard-gb", "0.001"] if small else ["--max-shard-gb", "0.1"]
        log = run(args, f"export {style}")
        if "pad_token_id 0" not in log or "tiles 2..9 + thumbnail" not in log:
            fail(f"export {style}: log does not report the training settings:\n{log}")
        try:
            config, tensors = reader.check_export(out, tied=tied, tiles=TILES, pad=0)
        except reader.ReaderError as e:
            fail(str(e))
        check_values(tensors, omni, style, config, tied)
        shards = len({v for v in json.load(open(os.path.join(out, "model.safetensors.index.json")))["weight_map"].values()})
        print(f"PASS {name} {style}: {len(tensors)} tensors in {shards} shards, values as trained"
              + (", head = embedding" if tied else ""))
    if name == "tiny":
        reader_refuses(os.path.join(a.work, "llama-fused"), a.work, tied)
        tok = spm_tokenizer(a.work, pad_id=3)
        if tok is None:
            print("spm_train not found: the --tokenizer pad check is skipped")
        else:
            out = os.path.join(a.work, "with-tokenizer")
            run([a.plan, "export", "--checkpoint", root, "--out", out, "--style", "llama-fused", "--tokenizer", tok],
                "export --tokenizer")
            try:
                reader.check_export(out, tied=tied, tiles=TILES, pad=3)
            except reader.ReaderError as e:
                fail(str(e))
            print("PASS tiny llama-fused --tokenizer: pad_token_id 3, the SentencePiece model's pad")
    print("PASS")


if __name__ == "__main__":
    main()
