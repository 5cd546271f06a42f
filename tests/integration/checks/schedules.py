"""Pipeline schedules: interleaved 1F1B, ZB-H1 and ZB-V equal one process and 1F1B, resume
across schedules, the refusals, and the merged Chrome trace of runtime.trace_steps."""
import json
import os

from . import check
from .harness import HERE, fail, log_value, refusal, sched
from .results import (check_predicted, checkpoint_params, close_training, max_param_rel, metrics,
                      rel, resumed_like_straight, stage_plan, summary)


def tied_head_splits(r, label, prefix, schedule, cases):
    """The tied head (tiny-tied preset) under `schedule` at PP 2 on each manual split of `cases`,
    (split, copies), equals one process within 1e-4 over 4 steps: with `copies` the embedding and
    the head lie on different ranks and summary.json says the two copies stayed bitwise equal;
    without, they share a rank, one tensor, and summary.json has no copies entry."""
    tied = ["--set", f"model.preset={HERE}/tiny-tied.yaml"]
    _, tref = r.run(1, prefix + "-ref", 1, 1, 4, steps=4, extra=tied)
    for split, copies in cases:
        manual = ["--set", f"parallel.partition={{manual: [{split}]}}"]
        name = prefix + "-" + split.replace(", ", "")
        _, d = r.run(2, name, 1, 2, 4, steps=4, extra=tied + schedule + manual)
        worst = close_training(d, tref, 1e-4, f"tied head, {label} [{split}]")
        s = summary(d)
        if copies and s.get("tied_head_copies_equal") is not True:
            fail(f"{label} tied head [{split}]: the two copies of the tied weight differ")
        if not copies and "tied_head_copies_equal" in s:
            fail(f"{label} tied head [{split}]: embedding and head share a rank, expected one "
                 f"tensor (no copies), summary says {s.get('tied_head_copies_equal')}")
        print(f"tied head under {label}, chunks [{split}]: equal to one process ({worst:.1e}), "
              f"{'two copies bitwise equal' if copies else 'one shared tensor'}")


@check("interleaved 1F1B and ZB-H1 at PP 2 and PP 2 x DP 2 equal one process (1e-4), "
       "ZB-H1 equals 1F1B (1e-6), tied head interleaved, schedule auto", cost=52)
def check_schedules(r):
    """Interleaved 1F1B (v 2) and ZB-H1 at PP 2 and PP 2 x DP 2 equal one process within 1e-4
    over 5 steps; ZB-H1's gradients equal 1F1B's at the same split (1e-6); the tied head split
    over two stages under interleaving (the embedding on the last rank's first chunk)."""
    _, ref = r.run(1, "sch-ref", 1, 1, 4)
    _, f1b = r.run(2, "sch-1f1b-pp2", 1, 2, 4)
    for name, np, dp, pp, m, extra in [("sch-zb-pp2", 2, 1, 2, 4, sched("zb-h1")),
                                       ("sch-il2-pp2", 2, 1, 2, 4, sched("interleaved", 2)),
                                       ("sch-zb-pp2dp2", 4, 2, 2, 2, sched("zb-h1")),
                                       ("sch-il2-pp2dp2", 4, 2, 2, 2, sched("interleaved", 2))]:
        p, d = r.run(np, name, dp, pp, m, extra=extra)
        worst = close_training(d, ref, 1e-4, name)
        s = summary(d)
        want = extra[1].split("=")[1]
        if s.get("schedule") != want:
            fail(f"{name}: summary.json schedule {s.get('schedule')}, expected {want}")
        if "interleaved" in want:
            chunks = json.load(open(os.path.join(d, "stage_plan.json")))["partition"]
            if len(chunks) != 4 or sum(chunks) != 10:
                fail(f"{name}: stage plan {chunks}, expected 4 chunks (pp 2 x v 2) of 10 units")
        log_value(p.stdout + p.stderr, "schedule")
        print(f"{name}: 5 steps equal one process (max relative loss difference {worst:.1e})")
    zb = metrics(os.path.join(r.a.work, "sch-zb-pp2"))
    for a, b in zip(zb, metrics(f1b)):
        if rel(a["grad_norm"], b["grad_norm"]) > 1e-6 or rel(a["loss"], b["loss"]) > 1e-6:
            fail(f"zb-h1 step {a['step']}: loss / grad norm {a['loss']} / {a['grad_norm']} vs 1F1B "
                 f"{b['loss']} / {b['grad_norm']} at the same split")
    dp = max_param_rel(checkpoint_params(os.path.join(r.a.work, "sch-zb-pp2"), 5),
                       checkpoint_params(f1b, 5))
    if dp > 1e-6:
        fail(f"zb-h1: final parameters differ from 1F1B's by {dp:.2e} (> 1e-6)")
    print(f"zb-h1 vs 1f1b at PP 2: gradient norms within 1e-6 every step, final parameters "
          f"{dp:.1e} apart")
    # [1, 1, 3, 5]: llm_embed (unit 4) in chunk 2 on rank 0, the head on rank 1 (two copies);
    # [1, 4, 1, 4]: llm_embed in chunk 1 on rank 1, the head in chunk 3 on rank 1 (one tensor).
    tied_head_splits(r, "interleaved v 2", "sch-tied-il2", sched("interleaved", 2),
                     [("1, 1, 3, 5", True), ("1, 4, 1, 4", False)])
    # parallel.schedule auto: the start-up planner profiles, plans each schedule and keeps one.
    auto = sched("auto") + ["--set", "parallel.partition=balanced",
                            "--set", "parallel.partition_trials=0"]
    p, d = r.run(2, "sch-auto", 1, 2, 4, extra=auto)
    picked = summary(d).get("schedule")
    if picked not in ("1f1b", "zb-h1", "interleaved", "zb-v"):
        fail(f"schedule auto: summary.json schedule {picked}")
    source = log_value(p.stdout + p.stderr, "stage plan: partition from")
    for name in ("1f1b", "zb-h1", "interleaved", "zb-v"):
        if name not in source:
            fail(f"schedule auto: the plan source should name every schedule compared, got {source}")
    worst = close_training(d, ref, 1e-4, "schedule auto")
    print(f"schedule auto picked {picked} ({source}); equal to one process ({worst:.1e})")


RECOMPUTE_FULL = ["--set", "memory.recompute=full"]


# A balanced split searched on the start-up profile without timed trials: the run has a cost
# table, so ZB-V builds each step's lists from its packs' costs (train/step_programs.h).
STEP_LISTS = ["--set", "parallel.partition=balanced", "--set", "parallel.partition_trials=0"]


@check("ZB-V at PP 2 and PP 2 x DP 2 equals one process (1e-4) with and without recomputation, "
       "with lists built for each step's costs; tied head beside the head on stage 0 (one "
       "tensor) and on stage 1 (two copies)", cost=70)
def check_zb_v(r):
    """ZB-V (2 chunks per rank in a V: stage 0 holds the first and the last) at PP 2 and PP 2 x
    DP 2 equals one process within 1e-4 over 5 steps, under memory.recompute none and full (a
    recomputed block's W runs in its B); the tied head with llm_embed on stage 0 beside the head
    (one shared tensor) and on stage 1 (two copies, the head's end on stage 0)."""
    _, ref = r.run(1, "zbv-ref", 1, 1, 4)
    for name, np, dp, pp, m, extra in [("zbv-pp2", 2, 1, 2, 4, []),
                                       ("zbv-pp2-rc", 2, 1, 2, 4, RECOMPUTE_FULL),
                                       ("zbv-pp2dp2", 4, 2, 2, 2, []),
                                       ("zbv-pp2dp2-rc", 4, 2, 2, 2, RECOMPUTE_FULL),
                                       ("zbv-pp2dp2-step", 4, 2, 2, 2, STEP_LISTS)]:
        p, d = r.run(np, name, dp, pp, m, extra=sched("zb-v") + extra)
        worst = close_training(d, ref, 1e-4, name)
        # With a start-up cost table (balanced split) each step's lists come from its packs.
        lists = log_value(p.stdout + p.stderr, "schedule zb-v: ")
        if (extra is STEP_LISTS) != lists.startswith("lists built each step"):
            fail(f"{name}: 'schedule zb-v: {lists}'")
        s = summary(d)
        if s.get("schedule") != "zb-v" or s.get("virtual_stages") != 2:
            fail(f"{name}: summary.json schedule {s.get('schedule')} v {s.get('virtual_stages')}, "
                 f"expected zb-v v 2")
        chunks = stage_plan(d)["partition"]
        if len(chunks) != 4 or sum(chunks) != 10:  # (the step-lists run searches its own split)
            fail(f"{name}: stage plan {chunks}, expected 4 chunks (2 x pp 2) of 10 units")
        recomputed = sum(s.get("recomputed_per_stage", []))
        if (recomputed > 0) != (extra is RECOMPUTE_FULL):
            fail(f"{name}: {recomputed} units recomputed, expected {'some' if extra else 'none'}")
        print(f"{name}: 5 steps equal one process (max relative loss difference {worst:.1e}), "
              f"{recomputed} units recomputed")
    # Virtual stages 0 1 2 3 on ranks 0 1 1 0. [5, 1, 1, 3]: llm_embed (unit 4) in chunk 0 on
    # rank 0, the head in chunk 3 on rank 0 (one tensor); [3, 3, 2, 2]: llm_embed in chunk 1 on
    # rank 1, the head on rank 0 (two copies).
    tied_head_splits(r, "zb-v", "zbv-tied", sched("zb-v"),
                     [("5, 1, 1, 3", False), ("3, 3, 2, 2", True)])


@check("a 1F1B checkpoint resumes under ZB-V and a ZB-V checkpoint under 1F1B (PP 2) within "
       "1e-4 of a straight 1F1B run; a ZB-V resume keeps its per-step lists", cost=40)
def check_zb_v_resume(r):
    """3 steps under 1F1B, then 3 under ZB-V from its checkpoint, and the reverse, at PP 2: steps
    4-6 within 1e-4 of a straight 6-step 1F1B run (the checkpoint is by parameter name, so the
    V's chunks load it as any split does); ZB-V to ZB-V on a searched split keeps building each
    step's lists after the resume (the checkpoint stores the start-up cost table)."""
    _, straight = r.run(2, "zbvr-straight", 1, 2, 4, steps=6)
    ms = metrics(straight)
    for name, first, then in [("zbvr-1f1b-to-zbv", [], sched("zb-v")),
                              ("zbvr-zbv-to-1f1b", sched("zb-v"), [])]:
        r.run(2, name, 1, 2, 4, steps=3, extra=first)
        _, d = r.run(2, name, 1, 2, 4, steps=6, fresh=False, extra=then + ["--resume", "auto"])
        resumed_like_straight(name, d, ms, tol=1e-4)
        want = "zb-v" if then else "1f1b"
        if summary(d).get("schedule") != want:
            fail(f"{name}: the resumed run trained under {summary(d).get('schedule')}, "
                 f"expected {want}")
        print(f"{name}: resumed at step 3 under {want}, steps 4-6 within 1e-4 of the straight "
              f"1F1B run")
    # ZB-V to ZB-V on a searched split, the resumed launch recomputing every block: it keeps
    # the checkpoint's split and the cost table stored with it (it profiles nothing), so it
    # still builds each step's lists for its packs.
    name = "zbvr-zbv-to-zbv"
    r.run(2, name, 1, 2, 4, steps=3, extra=sched("zb-v") + STEP_LISTS)
    p, d = r.run(2, name, 1, 2, 4, steps=6, fresh=False,
                 extra=sched("zb-v") + STEP_LISTS + RECOMPUTE_FULL + ["--resume", "auto"])
    resumed_like_straight(name, d, ms, tol=1e-4)
    out = p.stdout + p.stderr
    if not log_value(out, "schedule zb-v: ").startswith("lists built each step"):
        fail(f"{name}: the resumed launch runs '{log_value(out, 'schedule zb-v: ')}'")
    if "reusing the plan of" not in out:
        fail(f"{name}: the resumed launch did not keep its checkpoint's plan")
    print(f"{name}: the resumed launch kept its plan and table: lists built each step")


@check("a 1F1B checkpoint resumes under ZB-H1 and interleaved v 2 (and back to 1F1B at "
       "PP 1) within 1e-5 of a straight run", cost=58)
def check_schedule_resume(r):
    """A 1F1B checkpoint (PP 2, step 3) resumes under ZB-H1 and under interleaved v 2 and
    continues within 1e-5 of a straight 1F1B run; and back: interleaved -> 1F1B at PP 1."""
    _, straight = r.run(2, "schr-straight", 1, 2, 4, steps=6)
    ms = metrics(straight)
    for name, extra, then in [("schr-zb", [], sched("zb-h1")),
                              ("schr-il2", [], sched("interleaved", 2)),
                              ("schr-il2-to-1f1b", sched("interleaved", 2), [])]:
        r.run(2, name, 1, 2, 4, steps=3, extra=extra)
        pp2 = 1 if name.endswith("1f1b") else 2
        p, d = r.run(pp2, name, 1, pp2, 4, steps=6, fresh=False, extra=then + ["--resume", "auto"])
        resumed_like_straight(name, d, ms)
        want = "1f1b" if not then else then[1].split("=")[1]
        s = summary(d)
        if s.get("schedule") != want:
            fail(f"{name}: the resumed run trained under {s.get('schedule')}, expected {want}")
        if want == "interleaved" and (s.get("virtual_stages") != 2 or
                                      len(json.load(open(os.path.join(d, "stage_plan.json")))
                                          ["partition"]) != 4):
            fail(f"{name}: the resumed interleaved run should plan 4 chunks (pp 2 x v 2)")
        print(f"{name}: resumed at step 3 under {want}, steps 4-6 within 1e-5 of the straight "
              f"1F1B run")


@check("schedule keys that cannot run (micro-batches, virtual_stages, an unknown "
       "schedule) are refused naming the key")
def check_schedule_refusals(r):
    """Schedule keys that cannot run are refused before any work, naming the key."""
    for extra, pp, m, needle in [
            (sched("interleaved", 2), 2, 3, "parallel.micro_batches"),
            (["--set", "parallel.virtual_stages=2"], 2, 4, "parallel.virtual_stages"),
            (sched("zb-h1") + ["--set", "parallel.virtual_stages=2"], 2, 4,
             "parallel.virtual_stages"),
            (sched("interleaved"), 2, 4, "parallel.virtual_stages"),
            (sched("interleaved", 6), 2, 4, "parallel.virtual_stages"),
            (["--set", "parallel.schedule=zb"], 2, 4, "parallel.schedule"),
            (sched("zb-v") + ["--set", "parallel.virtual_stages=3"], 2, 4,
             "parallel.virtual_stages"),
            (sched("zb-v") + ["--set", "parallel.partition={manual: [5, 5]}"], 2, 4,
             "parallel.partition.manual"),
            (sched("zb-v") + ["--set", "train.shard=full"], 1, 4, "train.shard")]:
        p, _ = r.run(pp, "schx", 1, pp, m, extra=extra, expect_ok=False)
        print("refused:", refusal(p, needle, " ".join(extra)))


def comm_inside(track, events):
    """Microseconds of the track's dp_reduce spans that start inside one of `events` (comm.overlap
    launches a bucket's reduction during a backward; metrics.jsonl's backward_s leaves it out,
    the backward span holds it)."""
    spans = [(e["ts"], e["ts"] + e["dur"]) for e in events]
    return sum(d["dur"] for d in track if d["name"] == "dp_reduce"
               and any(a <= d["ts"] < b for a, b in spans))


def busy_tolerance_s(want_s, n_events):
    """How far a trace's busy sum may sit from metrics.jsonl: 1 % plus 0.25 ms per event. The
    trace events and the step timers read the clock at slightly different points around each
    operation, and on a loaded 2-core machine that gap alone reached 1.3 % (1.5 ms in 0.11 s)."""
    return 0.01 * want_s + 0.00025 * n_events


@check("runtime.trace_steps writes a merged Chrome trace per step whose busy times match "
       "metrics.jsonl (1 %); train.log_every prints every N steps", cost=20)
def check_trace(r):
    """runtime.trace_steps writes Chrome trace-event JSON merged from all ranks: metadata per
    (DP rank, stage), every micro-batch's forward before its backward on each track, busy time
    per track equal to the metrics' forward_s + backward_s (1 %), pack loads in the args; under
    ZB-H1 the B / W events. train.log_every prints the progress line every N steps plus the first
    and the last."""
    for name, extra in [("trace-1f1b", []), ("trace-zb", sched("zb-h1"))]:
        p, d = r.run(4, name, 2, 2, 2, extra=extra + ["--set", "runtime.trace_steps=[2, 3]",
                                                      "--set", "train.log_every=2"])
        lines = [l for l in p.stdout.splitlines() if l.lstrip().startswith("step ")]
        shown = [int(l.split()[1].split("/")[0]) for l in lines]
        if shown != [1, 2, 4, 5]:
            fail(f"{name}: train.log_every 2 over 5 steps should print steps 1, 2, 4, 5, got {shown}")
        ms = {m["step"]: m for m in metrics(d)}
        for step in (2, 3):
            path = os.path.join(d, "trace", f"step-{step}.json")
            t = json.load(open(path))
            ev = t["traceEvents"]
            meta = {(e["pid"], e.get("tid")) for e in ev if e["ph"] == "M"}
            want = {(dp, None) for dp in (0, 1)} | {(dp, s) for dp in (0, 1) for s in (0, 1)}
            if meta != want:
                fail(f"{path}: metadata tracks {sorted(meta, key=str)}, expected {sorted(want, key=str)}")
            xs = [e for e in ev if e["ph"] == "X"]
            for e in xs:
                if e["dur"] < 0 or e["ts"] < 0:
                    fail(f"{path}: event with negative time {e}")
            names = {e["name"] for e in xs}
            need = {"forward", "recv", "send", "dp_reduce", "optimizer"} | (
                {"backward_input", "backward_weight"} if extra else {"backward"})
            if not need <= names:
                fail(f"{path}: events {sorted(names)} lack {sorted(need - names)}")
            compute = ("forward", "backward", "backward_input", "backward_weight")
            for dp in (0, 1):
                for stage in (0, 1):
                    track = [e for e in xs if e["pid"] == dp and e["tid"] == stage]
                    for mb in (0, 1):
                        f = [e["ts"] for e in track if e["name"] == "forward"
                             and e["args"]["micro_batch"] == mb]
                        b = [e["ts"] for e in track if e["name"] in compute[1:]
                             and e["args"]["micro_batch"] == mb]
                        if len(f) != 1 or not b or min(b) < f[0]:
                            fail(f"{path}: dp {dp} stage {stage} mb {mb}: forward at {f}, "
                                 f"backward at {b}")
                        if any("samples" not in e["args"] for e in track if e["name"] == "forward"):
                            fail(f"{path}: a forward event without the pack's samples")
                    if dp == 0:  # metrics hold DP rank 0's stage times
                        events = [e for e in track if e["name"] in compute]
                        busy = (sum(e["dur"] for e in events)
                                - comm_inside(track, events)) / 1e6
                        st = ms[step]["stages"][stage]
                        want_s = st["forward_s"] + st["backward_s"]
                        if abs(busy - want_s) > busy_tolerance_s(want_s, len(events)):
                            fail(f"{path}: stage {stage} busy {busy:.5f} s in the trace vs "
                                 f"{want_s:.5f} s in metrics.jsonl")
            for dp in (0, 1):  # busy_s: the DP rank's forward + backward over both stages
                events = [e for e in xs if e["pid"] == dp and e["name"] in compute]
                inside = sum(comm_inside([e for e in xs if e["pid"] == dp and e["tid"] == t],
                                         [e for e in events if e["tid"] == t]) for t in (0, 1))
                busy = (sum(e["dur"] for e in events) - inside) / 1e6
                got_s = ms[step]["dp_ranks"][dp]["busy_s"]
                if abs(busy - got_s) > busy_tolerance_s(got_s, len(events)):
                    fail(f"{path}: DP rank {dp} busy {busy:.5f} s in the trace vs busy_s "
                         f"{got_s:.5f} s in metrics.jsonl")
            samples = sum(e["args"]["samples"] for e in xs
                          if e["name"] == "forward" and e["tid"] == 0)
            if samples != ms[step]["samples"]:
                fail(f"{path}: {samples} samples in the forwards of stage 0, metrics say "
                     f"{ms[step]['samples']}")
        check_predicted(list(ms.values()), 2, name)
        print(f"{name}: trace/step-2.json and step-3.json: 2 DP ranks x 2 stages, forward before "
              f"backward per micro-batch, busy time within 1 % of metrics.jsonl (per stage and "
              f"per DP rank), {len(xs)} events; progress lines at steps {shown}; step 2 predicted "
              f"{ms[2]['predicted_rank_s']} s vs busy "
              f"{[round(d['busy_s'], 4) for d in ms[2]['dp_ranks']]} s")
