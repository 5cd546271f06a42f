#!/usr/bin/env python3
"""Builds omnibal's embedded demo dataset from Debian's dataset-fashion-mnist.

Deterministic (numpy's legacy RandomState, seeded), numpy + the standard library only (PNG
files are written by hand: grey 8-bit, zlib). Writes, under --out:
  {train,eval}/images/<kind>/<n>.png      Fashion-MNIST items, upscaled items and catalog pages
  {train,eval}/<kind>.jsonl               LLaVA/InternVL records (text-only as one JSON array)
  train_meta.json, eval_meta.json         InternVL-style meta files mixing the four kinds
  corpus.txt                              every text of the training split, for spm_train
Kinds: single-image questions, multi-image comparisons (2-4 images), catalog pages (grids of
items of several aspect ratios and zooms, so tile counts span 1 .. max_tiles + 1), text-only.
Answers are exact labels, counts or lists, so accuracy can be measured.
"""
import argparse
import gzip
import json
import os
import struct
import zlib

import numpy as np

LABELS = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
          "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
PLURALS = ["T-shirts/tops", "trousers", "pullovers", "dresses", "coats",
           "sandals", "shirts", "sneakers", "bags", "ankle boots"]
CATEGORY = ["top", "bottom", "top", "dress", "top", "footwear", "top", "footwear", "accessory",
            "footwear"]
CATEGORIES = ["top", "bottom", "dress", "footwear", "accessory"]
FMNIST = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, n = struct.unpack(">II", data[:8])
    if magic == 2051:
        rows, cols = struct.unpack(">II", data[8:16])
        return np.frombuffer(data, np.uint8, offset=16).reshape(n, rows, cols)
    return np.frombuffer(data, np.uint8, offset=8)


def write_png(path, grey):
    h, w = grey.shape
    raw = b"".join(b"\x00" + grey[y].tobytes() for y in range(h))

    def chunk(tag, body):
        return (struct.pack(">I", len(body)) + tag + body +
                struct.pack(">I", zlib.crc32(tag + body) & 0xFFFFFFFF))
    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)) +
           chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))
    with open(path, "wb") as f:
        f.write(png)


class Split:
    """Draws items of one Fashion-MNIST split and writes one split of the demo set."""

    def __init__(self, name, images, labels, out, rng):
        self.name, self.images, self.labels, self.out, self.rng = name, images, labels, out, rng
        self.counter = {}

    def item(self):
        i = int(self.rng.randint(len(self.labels)))
        return self.images[i], int(self.labels[i])

    def save(self, kind, grey):
        n = self.counter.get(kind, 0)
        self.counter[kind] = n + 1
        rel = f"images/{kind}/{n:05d}.png"
        path = os.path.join(self.out, self.name, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_png(path, grey)
        return rel

    def turns(self, most=2):
        """Question-answer rounds: one in 80% of samples, else 2 .. most (real data is mostly short)."""
        return 1 if self.rng.rand() < 0.8 else 2 + int(self.rng.randint(most - 1))

    def choice(self, options):
        return options[int(self.rng.randint(len(options)))]


def conv(turns):
    out = []
    for q, a in turns:
        out += [{"from": "human", "value": q}, {"from": "gpt", "value": a}]
    return out


def single_sample(s, idx):
    grey, y = s.item()
    scale = s.choice([1, 3, 4, 6, 6, 6, 6, 6])
    big = np.kron(grey, np.ones((scale, scale), np.uint8))
    rel = s.save("single", big)
    other = s.choice([k for k in range(10) if k != y])
    asks = [("What item is shown?", LABELS[y]),
            ("Which category does this item belong to?", CATEGORY[y]),
            (f"Is this a {LABELS[other].lower()}?", f"No, it is a {LABELS[y].lower()}."),
            (f"Is this a {LABELS[y].lower()}?", "Yes."),
            ("Describe the item in one sentence.",
             f"The picture shows one {LABELS[y].lower()}, a {CATEGORY[y]} item, in grey on black.")]
    turns = [asks[k] for k in s.rng.permutation(len(asks))[: s.turns()]]
    turns[0] = ("<image>\n" + turns[0][0], turns[0][1])
    h, w = big.shape
    return {"id": f"single_{idx}", "image": rel, "width": w, "height": h,
            "conversations": conv(turns)}


def multi_sample(s, idx):
    n = s.choice([2, 2, 3, 3, 4])
    items = [s.item() for _ in range(n)]
    rels = []
    for grey, _ in items:
        scale = s.choice([1, 3, 3])
        rels.append(s.save("multi", np.kron(grey, np.ones((scale, scale), np.uint8))))
    ys = [y for _, y in items]
    head = "".join(f"Image {k + 1}: <image>\n" for k in range(n))
    target = s.choice(ys)
    which = ", ".join(f"image {k + 1}" for k in range(n) if ys[k] == target)
    asks = [("What are the items in these images?",
             " ".join(f"Image {k + 1}: {LABELS[y]}." for k, y in enumerate(ys))),
            (f"Which images show a {LABELS[target].lower()}?", which[0].upper() + which[1:] + "."),
            ("How many of these images show footwear?",
             str(sum(CATEGORY[y] == "footwear" for y in ys))),
            ("Do all images show the same kind of item?",
             "Yes." if len(set(ys)) == 1 else "No.")]
    turns = [asks[k] for k in s.rng.permutation(len(asks))[: s.turns()]]
    turns[0] = (head + turns[0][0], turns[0][1])
    return {"id": f"multi_{idx}", "image": rels, "conversations": conv(turns)}


# (rows, cols) of catalog pages: aspect ratios from 1:4 to 6:1; larger pages are drawn more
# often so that image tokens are most of a sequence, as in real VLM data.
GRIDS = [(1, 2), (1, 3), (1, 4), (1, 6), (2, 1), (2, 2), (2, 3), (2, 4), (2, 6), (3, 1), (3, 2),
         (3, 3), (3, 4), (4, 1), (4, 2), (4, 4), (4, 6),
         (2, 4), (2, 6), (3, 3), (3, 4), (4, 4), (4, 6), (2, 3), (3, 2)]


def catalog_sample(s, idx):
    rows, cols = s.choice(GRIDS)
    cell = s.choice([28, 56, 56, 56])
    page = np.zeros((rows * cell, cols * cell), np.uint8)
    ys = []
    for r in range(rows):
        for c in range(cols):
            grey, y = s.item()
            ys.append(y)
            page[r * cell:(r + 1) * cell, c * cell:(c + 1) * cell] = np.kron(
                grey, np.ones((cell // 28, cell // 28), np.uint8))
    rel = s.save("catalog", page)
    r0, c0 = int(s.rng.randint(rows)), int(s.rng.randint(cols))
    target = s.choice(ys)
    asks = [(f"What item is in row {r0 + 1}, column {c0 + 1}?", LABELS[ys[r0 * cols + c0]]),
            (f"How many {PLURALS[target]} are on this page?", str(ys.count(target))),
            (f"List the items in row {r0 + 1}.",
             ", ".join(LABELS[y] for y in ys[r0 * cols:(r0 + 1) * cols])),
            ("How many items are on this page?", str(rows * cols))]
    if rows * cols <= 8:
        asks.append(("List all items on this page, row by row.",
                     " ".join(f"Row {r + 1}: " + ", ".join(LABELS[y] for y in ys[r * cols:(r + 1) * cols]) + "."
                              for r in range(rows))))
    turns = [asks[k] for k in s.rng.permutation(len(asks))[: s.turns(3)]]
    turns[0] = ("<image>\n" + turns[0][0], turns[0][1])
    return {"id": f"catalog_{idx}", "image": rel, "width": cols * cell, "height": rows * cell,
            "conversations": conv(turns)}


def text_sample(s, idx):
    y = int(s.rng.randint(10))
    cat = s.choice(CATEGORIES)
    members = [LABELS[k] for k in range(10) if CATEGORY[k] == cat]
    asks = [(f"Which category does a {LABELS[y].lower()} belong to?", CATEGORY[y]),
            (f"Is a {LABELS[y].lower()} worn on the feet?",
             "Yes." if CATEGORY[y] == "footwear" else "No."),
            (f"Which catalog items are in the category {cat}?", ", ".join(members)),
            ("How many item classes does the catalog have?", "10")]
    order = s.rng.permutation(len(asks))[: 1 + int(s.rng.randint(2))]
    return {"id": f"text_{idx}", "conversations": conv([asks[k] for k in order])}


KINDS = [("single", single_sample, 0.30), ("multi", multi_sample, 0.20),
         ("catalog", catalog_sample, 0.40), ("text", text_sample, 0.10)]


def write_split(split, total, corpus):
    meta = {}
    for kind, make, share in KINDS:
        n = max(1, int(round(total * share)))
        records = [make(split, i) for i in range(n)]
        ext = "json" if kind == "text" else "jsonl"  # both annotation formats are exercised
        path = os.path.join(split.out, split.name, f"{kind}.{ext}")
        with open(path, "w") as f:
            if ext == "json":
                json.dump(records, f, indent=1)
            else:
                for r in records:
                    f.write(json.dumps(r) + "\n")
        if corpus is not None:
            for r in records:
                for t in r["conversations"]:
                    for line in t["value"].replace("<image>", "").split("\n"):
                        if line.strip():
                            corpus.append(line.strip())
        meta[f"fmnist_{kind}_{split.name}"] = {
            "root": f"{split.name}", "annotation": f"{split.name}/{kind}.{ext}",
            "repeat_time": 1, "length": n}
    with open(os.path.join(split.out, f"{split.name}_meta.json"), "w") as f:
        json.dump(meta, f, indent=2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--train", type=int, default=16000, help="training samples")
    ap.add_argument("--eval", type=int, default=2000, help="held-out samples")
    ap.add_argument("--seed", type=int, default=2025)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    corpus = []
    for name, prefix, total, seed in [("train", "train", a.train, a.seed),
                                      ("eval", "t10k", a.eval, a.seed + 1)]:
        images = read_idx(f"{FMNIST}/{prefix}-images-idx3-ubyte.gz")
        labels = read_idx(f"{FMNIST}/{prefix}-labels-idx1-ubyte.gz")
        split = Split(name, images, labels, a.out, np.random.RandomState(seed))
        os.makedirs(os.path.join(a.out, name), exist_ok=True)
        write_split(split, total, corpus if name == "train" else None)
    corpus += ["user", "assistant", "system"] + LABELS + [l.lower() for l in LABELS] + PLURALS
    with open(os.path.join(a.out, "corpus.txt"), "w") as f:
        f.write("\n".join(corpus) + "\n")


if __name__ == "__main__":
    main()
