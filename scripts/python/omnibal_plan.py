"""omnibal's ISF data plan from Python: a reader and a PyTorch batch sampler.

Reads the ``omnibal.data_plan.v1`` file that ``omnibal-plan data ... --plan OUT.json`` writes
(lib/balance/plan_json.h) with the standard library only, and yields one DP rank's packs step
by step as a ``torch.utils.data.Sampler`` of index lists (one pack per item), so a Hugging Face /
InternVL trainer gets omnibal's data balance without the C++ trainer. torch is imported only
for the sampler's base class; without it the reader and the sampler still work.

Which packs rank r runs (the C++ rules, in micro-batch order k = 0 .. m-1 of every step):
  * a plan written with ``--dp D --micro-batches m`` (world_size must be D): rank r's k-th pack
    of step s is ``steps[s][r][k]``, the file's own placement (PlanFile::pack,
    lib/balance/plan_json.h:58, = StepPlan::pack, lib/balance/step_plan.h:34);
  * a plan written as the trainer plans, ``--dp 1 --micro-batches D*m`` (its plan_hash is the
    "plan hash" omnibal-train logs; tests/integration/checks/data.py check_repeat_time): any
    world_size D dividing its micro-batches; rank r's k-th pack of step s is
    ``steps[s][0][k*D + (r if k % 2 == 0 else D-1-r)]``, the snake order of
    EpochPlanner::slot (lib/balance/epoch_planner.h:40), which TrainingData walks per step in
    k order (lib/train/training_data.cpp:125, :142). These are exactly the packs omnibal-train
    at parallel.dp = D, parallel.micro_batches = m gives DP rank r in epoch 0.

Epochs: a plan file holds one epoch, the trainer's epoch 0 (planned with the file's seed).
omnibal-train plans epoch e > 0 from the length table with seed + e and epoch e-1's carried
tail, which the file cannot reproduce, so ``set_epoch(e)`` accepts 0 only and refuses others.
The file's carried packs (the epoch tail the trainer runs first in epoch 1) are not yielded;
they are in ``DataPlan.carried``.

Indices: by default a sample (dataset d, element i) is yielded as the flat index
``sum(records of datasets 0..d-1) + i`` -- its position in a ConcatDataset of the plan's
datasets in file order (the trainer's global sample id); ``index="pair"`` yields (d, i).

Example (InternVL-style datasets, one per entry of the meta file, in its order)::

    import torch.distributed as dist
    from torch.utils.data import ConcatDataset, DataLoader
    from omnibal_plan import OmnibalBatchSampler

    # omnibal-plan data --meta meta.json --dp 1 --micro-batches 16 --preset P --seed 1024 \
#     --plan plan.json   (DP 8 x m 2; preset and seed as the run's model.preset, balance.seed)
    train_set = ConcatDataset([LazySupervisedDataset(...) for name in meta])
    sampler = OmnibalBatchSampler("plan.json", rank=dist.get_rank(),
                                  world_size=dist.get_world_size(), start_step=resume_step)
    loader = DataLoader(train_set, batch_sampler=sampler, num_workers=4,
                        collate_fn=concat_pad_data_collator)  # packs vary in size
    sampler.set_epoch(0)
    for k, batch in enumerate(loader):      # sampler.micro_batches packs per optimizer step
        loss = model(**batch).loss / sampler.micro_batches
        loss.backward()
        if (k + 1) % sampler.micro_batches == 0:
            optimizer.step(); optimizer.zero_grad()

Resume: ``state_dict()`` is {"epoch", "step"} with step the first step whose packs the sampler
has not all handed out. A DataLoader with workers draws up to num_workers * prefetch_factor
packs ahead of the training loop, so for an exact resume save the loop's own count of finished
optimizer steps and pass it back (``start_step=`` or ``load_state_dict({"epoch": 0, "step": n})``).
"""

import json

FORMAT = "omnibal.data_plan.v1"

_MASK = (1 << 64) - 1


class PlanFormatError(ValueError):
    """A plan file that is not a well-formed omnibal.data_plan.v1 (message names file and key)."""


def _splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & _MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def plan_hash(dp, micro_batches, slots, carried):
    """plan_hash of lib/balance/plan_json.cpp (16 lowercase hex digits): dp, m, every pack's
    (dataset, index) pairs in slot order (step, rank, micro-batch), then the carried packs."""
    h = 0x6F6D6E6962616C  # "omnibal"
    mix = lambda h, v: _splitmix64(h ^ v)  # noqa: E731
    h = mix(h, dp)
    h = mix(h, micro_batches)
    for packs in (slots, None, carried):
        if packs is None:
            h = mix(h, 0xCAFE)
            continue
        for pack in packs:
            h = mix(h, 0xFFFFFFFF)
            for d, i in pack:
                h = mix(h, (d << 32) | i)
    return format(h, "016x")


class DataPlan:
    """An omnibal.data_plan.v1 file as read back (see load_plan). Packs are lists of
    (dataset, index) tuples; ``steps[s][r][k]`` is the file's pack of rank r, micro-batch k."""

    def __init__(self, path, doc, steps, carried, skipped):
        self.path = path
        self.method = doc["method"]
        self.dp = doc["dp"]
        self.micro_batches = doc["micro_batches"]
        self.seed = doc["seed"]
        self.samples_per_pack = doc["samples_per_pack"]
        self.budgets = doc["budgets"]
        self.datasets = doc["datasets"]  # [{name, path, records, failed_stats, repeat_time}]
        self.plan_hash = doc["plan_hash"]
        self.metrics = doc.get("metrics", {})
        self.steps = steps
        self.carried = carried
        self.skipped = skipped
        self.offsets = []  # flat index of each dataset's element 0
        total = 0
        for d in self.datasets:
            self.offsets.append(total)
            total += d["records"]
        self.num_records = total

    @property
    def num_steps(self):
        return len(self.steps)

    def ranks_per_step(self, world_size):
        """Packs per rank per step when the plan runs on `world_size` DP ranks; raises
        ValueError naming the file when it cannot (see the module docstring)."""
        if not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size: expected an integer >= 1, got {world_size!r}")
        if self.dp == world_size:
            return self.micro_batches
        if self.dp == 1 and self.micro_batches % world_size == 0:
            return self.micro_batches // world_size
        if self.dp == 1:
            raise ValueError(
                f"{self.path}: planned as one rank of {self.micro_batches} packs per step, which "
                f"world_size {world_size} does not divide; write it with --micro-batches "
                f"{world_size} * m")
        raise ValueError(
            f"{self.path}: planned for dp {self.dp} (\"dp\": {self.dp}), but world_size is "
            f"{world_size}; plan again with --dp {world_size} (or --dp 1 --micro-batches "
            f"{world_size} * m for the trainer's layout)")

    def rank_packs(self, step, rank, world_size):
        """The packs DP rank `rank` of `world_size` runs at `step`, in micro-batch order."""
        m = self.ranks_per_step(world_size)
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world_size {world_size}")
        row = self.steps[step]
        if self.dp == world_size:
            return row[rank]
        return [row[0][k * world_size + (rank if k % 2 == 0 else world_size - 1 - rank)]
                for k in range(m)]

    def flat_index(self, dataset, index):
        """Position of (dataset, index) in a ConcatDataset of the plan's datasets."""
        return self.offsets[dataset] + index


def _need(doc, key, where):
    if key not in doc:
        raise PlanFormatError(f"{where}: missing key \"{key}\"")
    return doc[key]


def _int(value, where, minimum=0):
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise PlanFormatError(f"{where}: expected an integer >= {minimum}, got {value!r}")
    return value


def _pack(value, where, datasets):
    if not isinstance(value, list):
        raise PlanFormatError(f"{where}: expected an array of [dataset, index] pairs, "
                              f"got {type(value).__name__}")
    out = []
    for j, e in enumerate(value):
        if not (isinstance(e, list) and len(e) == 2 and all(
                isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in e)):
            raise PlanFormatError(f"{where}[{j}]: expected [dataset, index], got {e!r}")
        d, i = e
        if d >= len(datasets):
            raise PlanFormatError(f"{where}[{j}]: dataset {d} outside the {len(datasets)} "
                                  f"\"datasets\"")
        if i >= datasets[d]["records"]:
            raise PlanFormatError(f"{where}[{j}]: index {i} outside dataset {d} "
                                  f"({datasets[d]['records']} records)")
        out.append((d, i))
    return out


def load_plan(source, verify_hash=True):
    """Reads a plan: a path, or an already parsed JSON object (then named "<plan>" in errors).
    Raises PlanFormatError naming the file and key when the format, a key or a pack is wrong,
    or (verify_hash) when plan_hash does not match the content, as omnibal's C++ reader does."""
    if isinstance(source, dict):
        path, doc = "<plan>", source
    else:
        path = str(source)
        try:
            with open(path) as f:
                doc = json.load(f)
        except OSError as e:
            raise PlanFormatError(f"{path}: cannot open plan file: {e.strerror}") from e
        except json.JSONDecodeError as e:
            raise PlanFormatError(f"{path}: not valid JSON (plan file): {e}") from e
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise PlanFormatError(f"{path}: not a data plan (expected \"format\": \"{FORMAT}\", "
                              f"got {got!r})")
    for key in ("method", "dp", "micro_batches", "seed", "samples_per_pack", "budgets",
                "datasets", "plan_hash", "steps", "carried", "skipped"):
        _need(doc, key, path)
    dp = _int(doc["dp"], f"{path}: dp", 1)
    m = _int(doc["micro_batches"], f"{path}: micro_batches", 1)
    for key in ("q_vit", "q_tok", "q_tok_thresh", "iterations"):
        _need(doc["budgets"], key, f"{path}: budgets")
    datasets = doc["datasets"]
    if not isinstance(datasets, list):
        raise PlanFormatError(f"{path}: datasets: expected an array")
    for n, d in enumerate(datasets):
        for key in ("name", "path", "records", "failed_stats", "repeat_time"):
            _need(d, key, f"{path}: datasets[{n}]")
        _int(d["records"], f"{path}: datasets[{n}].records")
    if not isinstance(doc["steps"], list):
        raise PlanFormatError(f"{path}: steps: expected an array")
    steps = []
    for s, row in enumerate(doc["steps"]):
        where = f"{path}: steps[{s}]"
        if not isinstance(row, list) or len(row) != dp:
            raise PlanFormatError(f"{where}: expected {dp} DP ranks")
        ranks = []
        for r, micro in enumerate(row):
            if not isinstance(micro, list) or len(micro) != m:
                raise PlanFormatError(f"{where}[{r}]: expected {m} micro-batches")
            ranks.append([_pack(p, f"{where}[{r}][{k}]", datasets) for k, p in enumerate(micro)])
        steps.append(ranks)
    if not isinstance(doc["carried"], list):
        raise PlanFormatError(f"{path}: carried: expected an array of packs")
    carried = [_pack(p, f"{path}: carried[{c}]", datasets) for c, p in enumerate(doc["carried"])]
    skipped = _pack(doc["skipped"], f"{path}: skipped", datasets)
    if verify_hash:
        slots = (p for row in steps for micro in row for p in micro)
        got = plan_hash(dp, m, slots, carried)
        if got != doc["plan_hash"]:
            raise PlanFormatError(f"{path}: plan_hash {doc['plan_hash']} does not match the "
                                  f"plan's content ({got}): the file was edited or cut")
    return DataPlan(path, doc, steps, carried, skipped)


try:  # torch only gives the sampler its base class (isinstance checks, DataLoader typing)
    from torch.utils.data import Sampler as _SamplerBase
except ImportError:  # the reader and the sampler work without torch
    _SamplerBase = object


class OmnibalBatchSampler(_SamplerBase):
    """Yields DP rank `rank`'s packs of an omnibal plan, step by step: per step its
    `micro_batches` packs in micro-batch order, each as a list of sample indices (pass it as a
    DataLoader's batch_sampler). len() is the number of packs one pass yields.

    plan: a path, a parsed JSON object or a DataPlan. world_size: the plan's dp, or any divisor
    of its micro-batches for a --dp 1 plan (the trainer's layout); anything else is refused.
    start_step: the first step of the first pass (resume); later passes start at step 0.
    index: "flat" (ConcatDataset position, default) or "pair" ((dataset, index) tuples)."""

    def __init__(self, plan, rank, world_size, start_step=0, index="flat"):
        self.plan = plan if isinstance(plan, DataPlan) else load_plan(plan)
        self.micro_batches = self.plan.ranks_per_step(world_size)
        if not isinstance(rank, int) or not 0 <= rank < world_size:
            raise ValueError(f"rank: expected 0 <= rank < world_size {world_size}, got {rank!r}")
        if index not in ("flat", "pair"):
            raise ValueError(f"index: expected \"flat\" or \"pair\", got {index!r}")
        self.rank, self.world_size, self.index = rank, world_size, index
        self.epoch = 0
        self._start = self._check_step(start_step, "start_step")
        self._step = self._start

    def _check_step(self, step, what):
        n = self.plan.num_steps
        if not isinstance(step, int) or not 0 <= step <= n:
            raise ValueError(f"{what}: expected a step in [0, {n}] ({self.plan.path} holds {n} "
                             f"steps), got {step!r}")
        return step

    def set_epoch(self, epoch):
        """Like DistributedSampler.set_epoch. The file holds the trainer's epoch 0 only, so any
        other epoch is refused (module docstring: later epochs need the length table)."""
        if epoch != 0:
            raise ValueError(
                f"epoch {epoch}: {self.plan.path} holds one epoch (epoch 0, seed "
                f"{self.plan.seed}); omnibal plans epoch e > 0 from the length table with seed "
                f"+ e and the previous epoch's carried packs, which the plan file cannot "
                f"reproduce")
        self.epoch = epoch

    def __len__(self):
        return (self.plan.num_steps - self._start) * self.micro_batches

    def __iter__(self):
        start, m = self._start, self.micro_batches
        self._step = start
        for step in range(start, self.plan.num_steps):
            packs = self.plan.rank_packs(step, self.rank, self.world_size)
            for k, pack in enumerate(packs):
                if k == m - 1:
                    self._step = step + 1  # every pack of the step handed out
                if self.index == "pair":
                    yield list(pack)
                else:
                    yield [self.plan.offsets[d] + i for d, i in pack]
        self._start = 0  # the next pass runs the whole epoch

    def state_dict(self):
        """{"epoch", "step"}: step = the first step not yet fully handed out this pass."""
        return {"epoch": self.epoch, "step": self._step}

    def load_state_dict(self, state):
        """Resumes at state["step"] of state["epoch"] (the next pass starts there)."""
        for key in ("epoch", "step"):
            if key not in state:
                raise KeyError(f"OmnibalBatchSampler.load_state_dict: missing key \"{key}\"")
        self.set_epoch(state["epoch"])
        self._start = self._step = self._check_step(state["step"], "state[\"step\"]")
