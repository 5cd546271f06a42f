"""scripts/python/omnibal_plan.py against real plans of `omnibal-plan data --plan`.

Plans the shared ai2d + docvqa length files twice (ISF, Q_v 20, Q_t 6656): as DP 4 x m 2
(the file's placement) and as the trainer plans, DP 1 x m 4 (dealt to ranks in snake order).
Expected packs come from reading the JSON here, not from the module. Checks, through a torch
DataLoader(batch_sampler=...): every rank yields exactly its packs in step and micro-batch
order; the ranks' packs cover each step's packs exactly once; start_step / load_state_dict
resume at a step; state_dict counts steps; refusals (world_size, rank, epoch, start_step) and
reader errors name the file and key; plan_hash equals the C++ one.
Usage: omnibal_plan_test.py --bin omnibal-plan --work DIR [--data SHARED_DATA]
"""
import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "python"))


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def refused(fn, exc, needle, what):
    try:
        fn()
    except exc as e:
        check(needle in str(e), f"{what}: message {str(e)!r} lacks {needle!r}")
        return str(e)
    fail(f"{what}: not refused")


def run_plan(args, files, out, dp, m):
    p = subprocess.run([args.bin, "data", "--lengths", *files, "--dp", str(dp),
                        "--micro-batches", str(m), "--samples-per-pack", "4", "--method", "isf",
                        "--q-vit", "20", "--q-tok", "6656", "--seed", "1024", "--plan", out],
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        fail(f"omnibal-plan data --dp {dp}: exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p.stdout.split("hash ")[-1].split(")")[0].strip()


def expected_packs(raw, rank, world):
    """This rank's packs as flat ConcatDataset indices, read from the raw JSON: steps[s][rank]
    for a plan of dp = world; for a dp-1 plan the trainer's snake slot k*D + (r | D-1-r)."""
    offsets, total = [], 0
    for d in raw["datasets"]:
        offsets.append(total)
        total += d["records"]
    flat = lambda pack: [offsets[d] + i for d, i in pack]  # noqa: E731
    out = []
    for step in raw["steps"]:
        if raw["dp"] == world:
            out.append([flat(p) for p in step[rank]])
        else:
            m = raw["micro_batches"] // world
            out.append([flat(step[0][k * world + (rank if k % 2 == 0 else world - 1 - rank)])
                        for k in range(m)])
    return out  # [step][micro] -> indices


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--data", default=os.environ.get(
        "OMNIBAL_SHARED_DATA", os.path.join(HERE, "..", "..", "..", "shared", "data")))
    args = ap.parse_args()
    try:
        import torch
        from torch.utils.data import DataLoader, Dataset, Sampler
    except ImportError:
        fail(f"{sys.executable} has no torch: run scripts/setup.sh (its environment "
             f"has torch) or set OMNIBAL_TEST_PYTHON to a python3 with torch")
    import omnibal_plan as op

    t0 = time.time()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    lengths = os.path.join(args.data, "internvl-chat-1.2-lengths")
    files = [os.path.join(lengths, f"{n}_token_lengths.json")
             for n in ("ai2d_train_12k_wh", "docvqa_train_10k_wh")]
    for f in files:
        check(os.path.isfile(f), f"missing shared file {f} (set OMNIBAL_SHARED_DATA)")
    usable = sum(sum(1 for r in json.load(open(f)) if r["vit_num"] != -1) for f in files)
    check(usable == 12413 + 10211, f"{usable} usable records in the shared files, expected 22624")

    class Dummy(Dataset):  # item i is its own index, as a tensor
        def __len__(self):
            return 12413 + 10211

        def __getitem__(self, i):
            return torch.tensor(i)

    def through_loader(sampler, workers=0):
        dl = DataLoader(Dummy(), batch_sampler=sampler, num_workers=workers,
                        collate_fn=lambda items: [int(t) for t in items])
        return list(dl)

    for dp, m, world in [(4, 2, 4), (1, 4, 2)]:
        path = os.path.join(args.work, f"plan_dp{dp}_m{m}.json")
        cpp_hash = run_plan(args, files, path, dp, m)
        raw = json.load(open(path))
        layout = "file" if dp == world else "trainer"
        steps, per_rank = len(raw["steps"]), m * dp // world
        check(raw["dp"] == dp and raw["micro_batches"] == m and steps >= 100,
              f"{path}: dp {raw['dp']} m {raw['micro_batches']} steps {steps}")
        placed = [s for step in raw["steps"] for r in step for p in r for s in p]
        in_tail = [s for p in raw["carried"] for s in p] + raw["skipped"]
        check(len(placed) + len(in_tail) == usable and
              len({tuple(s) for s in placed + in_tail}) == usable,
              f"{path}: {len(placed)} placed + {len(in_tail)} carried/skipped samples, "
              f"expected each of {usable} once")
        plan = op.load_plan(path)
        check(plan.plan_hash == cpp_hash and
              op.plan_hash(dp, m, (p for st in plan.steps for r in st for p in r),
                           plan.carried) == cpp_hash,
              f"{path}: Python plan_hash differs from omnibal-plan's {cpp_hash}")

        # Every rank yields exactly its packs, in step then micro-batch order.
        per_step = collections.defaultdict(collections.Counter)
        for rank in range(world):
            want = expected_packs(raw, rank, world)
            sampler = op.OmnibalBatchSampler(path, rank=rank, world_size=world)
            check(isinstance(sampler, Sampler), "OmnibalBatchSampler is not a torch Sampler")
            check(sampler.micro_batches == per_rank and len(sampler) == steps * per_rank,
                  f"{layout} rank {rank}: len {len(sampler)}, expected {steps * per_rank}")
            got = through_loader(sampler)
            flat_want = [p for st in want for p in st]
            check(got == flat_want, f"{layout} rank {rank}: the DataLoader's packs differ from "
                  f"the plan's (first: {got[:1]} vs {flat_want[:1]})")
            check(sampler.state_dict() == {"epoch": 0, "step": steps},
                  f"{layout} rank {rank}: state after a pass {sampler.state_dict()}")
            for s, packs in enumerate(want):
                for p in packs:
                    per_step[s][tuple(sorted(p))] += 1
        offsets = plan.offsets
        for s, step in enumerate(raw["steps"]):
            plan_packs = collections.Counter(tuple(sorted(offsets[d] + i for d, i in p))
                                             for r in step for p in r)
            check(per_step[s] == plan_packs and max(plan_packs.values()) == 1,
                  f"{layout}: step {s}: the ranks' packs do not cover the step's "
                  f"{dp * m} packs exactly once")

        # Resume at a step: start_step, load_state_dict, and state_dict during a pass.
        k, rank = steps // 2 + 3, world - 1
        tail = [p for st in expected_packs(raw, rank, world)[k:] for p in st]
        s1 = op.OmnibalBatchSampler(path, rank=rank, world_size=world, start_step=k)
        check(len(s1) == (steps - k) * per_rank and through_loader(s1) == tail,
              f"{layout}: start_step={k} does not yield the tail from step {k}")
        check(len(s1) == steps * per_rank and len(through_loader(s1)) == steps * per_rank,
              f"{layout}: the pass after a resumed one does not run the whole epoch")
        s2 = op.OmnibalBatchSampler(plan, rank=rank, world_size=world)
        it = iter(s2)
        for _ in range(5 * per_rank):
            next(it)
        check(s2.state_dict() == {"epoch": 0, "step": 5}, f"{layout}: state after 5 steps: "
              f"{s2.state_dict()}")
        s3 = op.OmnibalBatchSampler(path, rank=rank, world_size=world)
        s3.load_state_dict({"epoch": 0, "step": k})
        check(through_loader(s3, workers=2) == tail,
              f"{layout}: load_state_dict step {k} (2 workers) does not yield the tail")
        s2.load_state_dict(s2.state_dict())
        check(through_loader(s2) == [p for st in expected_packs(raw, rank, world)[5:] for p in st],
              f"{layout}: resuming from state_dict() after 5 steps")
        pairs = list(op.OmnibalBatchSampler(raw, rank=0, world_size=world, index="pair"))
        # rank 0, micro-batch 0 is steps[0][0][0] in both layouts (slot 0 of the snake)
        check(pairs[0] == [tuple(e) for e in raw["steps"][0][0][0]],
              f"{layout}: index='pair' first pack {pairs[0]}")

        # Refusals.
        bad_world = 3
        needle = "planned for dp 4" if dp == world else "does not divide"
        msg = refused(lambda: op.OmnibalBatchSampler(path, 0, bad_world), ValueError, needle,
                      f"{layout}: world_size {bad_world}")
        check(path in msg, f"world_size refusal does not name {path}: {msg}")
        refused(lambda: op.OmnibalBatchSampler(path, world, world), ValueError,
                "rank: expected 0 <= rank < world_size", f"{layout}: rank {world}")
        refused(lambda: s1.set_epoch(1), ValueError, "holds one epoch", "set_epoch(1)")
        refused(lambda: op.OmnibalBatchSampler(path, 0, world, start_step=steps + 1),
                ValueError, f"holds {steps} steps", "start_step past the end")
        print(f"{layout} layout (dp {dp} x m {m}, world_size {world}): {steps} steps, "
              f"{per_rank} packs per rank per step, hash {cpp_hash}: ok")
    refused(lambda: op.OmnibalBatchSampler(os.path.join(args.work, "plan_dp4_m2.json"), 0, 8),
            ValueError, 'planned for dp 4 ("dp": 4)', "world_size 8 on a dp-4 plan")

    # Reader errors name the file and key.
    src = os.path.join(args.work, "plan_dp4_m2.json")
    raw = json.load(open(src))

    def write(name, doc):
        p = os.path.join(args.work, name)
        with open(p, "w") as f:
            json.dump(doc, f)
        return p

    cases = []
    d = dict(raw)
    del d["steps"]
    cases.append(("nosteps.json", d, 'missing key "steps"'))
    cases.append(("format.json", dict(raw, format="omnibal.data_plan.v0"), "not a data plan"))
    d = json.loads(json.dumps(raw))
    d["steps"][2][1][0].pop()
    cases.append(("cut.json", d, "does not match the plan's content"))
    d = json.loads(json.dumps(raw))
    d["steps"][3][0][1][0] = [0]
    cases.append(("pair.json", d, "steps[3][0][1][0]: expected [dataset, index]"))
    d = json.loads(json.dumps(raw))
    d["steps"][0] = d["steps"][0][:3]
    cases.append(("ranks.json", d, "steps[0]: expected 4 DP ranks"))
    d = json.loads(json.dumps(raw))
    del d["datasets"][1]["records"]
    cases.append(("records.json", d, 'datasets[1]: missing key "records"'))
    for name, doc, needle in cases:
        p = write(name, doc)
        msg = refused(lambda: op.load_plan(p), op.PlanFormatError, needle, name)
        check(msg.startswith(p + ":"), f"{name}: error does not start with the file: {msg}")
    refused(lambda: op.load_plan(os.path.join(args.work, "absent.json")), op.PlanFormatError,
            "cannot open plan file", "absent file")
    print(f"reader errors: {len(cases) + 1} refused naming the file and key")
    print(f"PASS ({time.time() - t0:.1f} s)")


if __name__ == "__main__":
    main()
