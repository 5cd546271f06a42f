#!/usr/bin/env python3
"""Statistics of a scanned demo split: samples, tiles and tokens per sample, image-token share.

usage: demo_stats.py META.json SCAN_DIR [tokens_per_tile]   (SCAN_DIR from omnibal-plan scan)
Image tokens of a sample = tokens_per_tile * vit_num + 2 per image (<img>, </img>).
"""
import json
import os
import sys


def main():
    meta_path, scan_dir = sys.argv[1], sys.argv[2]
    tpt = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    meta = json.load(open(meta_path))
    base = os.path.dirname(meta_path)
    rows, tot = [], {"n": 0, "tiles": 0, "tok": 0, "img": 0}
    print("| dataset | samples | tiles/sample mean (min-max) | tokens/sample mean (min-max) | image-token share |")
    print("|---|---|---|---|---|")
    for name, d in meta.items():
        lengths = json.load(open(os.path.join(scan_dir, f"{name}_token_lengths.json")))
        ann = os.path.join(base, d["annotation"])
        text = open(ann).read()
        recs = json.loads(text) if text.lstrip().startswith("[") else [json.loads(l) for l in text.splitlines() if l.strip()]
        img = 0
        for r, l in zip(recs, lengths):
            n_img = 0 if "image" not in r else (len(r["image"]) if isinstance(r["image"], list) else 1)
            if n_img:
                img += tpt * l["vit_num"] + 2 * n_img
        tiles = [l["vit_num"] for l in lengths]
        toks = [l["token_num"] for l in lengths]
        print(f"| {name} | {len(lengths)} | {sum(tiles)/len(tiles):.2f} ({min(tiles)}-{max(tiles)}) | "
              f"{sum(toks)/len(toks):.1f} ({min(toks)}-{max(toks)}) | {img/sum(toks):.1%} |")
        tot["n"] += len(lengths); tot["tiles"] += sum(tiles); tot["tok"] += sum(toks); tot["img"] += img
    print(f"| all | {tot['n']} | {tot['tiles']/tot['n']:.2f} | {tot['tok']/tot['n']:.1f} | {tot['img']/tot['tok']:.1%} |")


if __name__ == "__main__":
    main()
