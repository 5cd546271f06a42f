"""Per-unit cost tables (lib/partition/unit_cost_table.h, omnibal.unit_costs.v1) for the bench
scripts: the mean of several profiles of one model. Python 3 standard library only."""
import copy

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
