"""Per-unit cost tables (lib/partition/unit_cost_table.h, omnibal.unit_costs.v1) for the bench
scripts: the mean of several profiles of one model. Python 3 standard library only.

    python3 scripts/bench/cost_tables.py profile-mean CORE0.json CORE1.json OUT.json
"""
import copy
import json
import sys

# Every per-unit figure that is a measured time (the ones a profile's repeats move).
TIME_KEYS = ("forward_s", "backward_s", "backward_weight_s", "checkpointed_forward_s",
             "checkpointed_backward_s")


def mean_cost_table(tables):
    """A copy of tables[0] whose per-unit times are the mean over `tables` (each key that every
    table has for that unit); names, kinds, bytes and load from tables[0]. Raises ValueError
    when the tables do not list the same units."""
    out = copy.deepcopy(tables[0])
    for t in tables[1:]:
        if [u["name"] for u in t["units"]] != [u["name"] for u in out["units"]]:
            raise ValueError("cost tables of different units cannot be averaged")
    for i, u in enumerate(out["units"]):
        for k in TIME_KEYS:
            if all(k in t["units"][i] for t in tables):
                u[k] = sum(t["units"][i][k] for t in tables) / len(tables)
    return out


def profile_mean(core0, core1, out):
    """profile_costs.sh: OUT = the mean of the two concurrent 1-thread profiles; prints the whole
    model's forward and backward time per pack."""
    tables = []
    for p in (core0, core1):
        with open(p) as f:
            tables.append(json.load(f))
    a = mean_cost_table(tables)
    a["source"] += " (mean of two concurrent 1-thread profilers, one per core)"
    with open(out, "w") as f:
        json.dump(a, f, indent=1)
    f = sum(u["forward_s"] for u in a["units"])
    g = sum(u["backward_s"] for u in a["units"])
    print(f"profile: whole model {1e3*f:.1f} ms forward, {1e3*g:.1f} ms backward per pack "
          f"({a['load']['tiles']} tiles, {a['load']['tokens']} tokens)")


if __name__ == "__main__":
    if len(sys.argv) != 5 or sys.argv[1] != "profile-mean":
        sys.exit("usage: cost_tables.py profile-mean CORE0.json CORE1.json OUT.json")
    profile_mean(*sys.argv[2:])
