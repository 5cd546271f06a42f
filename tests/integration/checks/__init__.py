"""The one list of the integration checks. Each theme module registers its checks with
`@check("one-line specification", cost=seconds)` on a `check_<name>(runner)` function; the name
is the function's without `check_`, and ctest runs it as `train_<name>`. train_checks.py runs one
check by name, prints the list (`--list`), and gives it to CMake at configure time (`--cmake`), so
adding a check here is all it takes to register it.

`cost` is a scheduling hint for a first ctest run (ctest's COST property; later runs use ctest's
own timings): the longest checks start first, so `ctest -j` does not end on one long check
running alone. Seconds measured on the 2-core machine under ctest -j2; only the order matters."""
import importlib
from typing import Callable, NamedTuple, Optional

# The theme modules, in the order their checks are listed and registered.
THEMES = ("parallel", "schedules", "precision", "sharding", "resume", "checkpoints", "planning",
          "data", "faults")


class Check(NamedTuple):
    name: str             # ctest runs it as train_<name>
    spec: str             # what it asserts, one line
    run: Callable         # run(runner): returns on success, exits through harness.fail otherwise
    theme: str            # its module under checks/
    cost: Optional[int]   # ctest COST hint in seconds, None when the check is short


CHECKS = {}  # name -> Check, in registration order


def check(spec, cost=None):
    """Registers the decorated `check_<name>(runner)` under <name> with its one-line
    specification (a ValueError for a name taken twice, a missing prefix or a multi-line spec)."""
    def register(fn):
        if not fn.__name__.startswith("check_"):
            raise ValueError(f"{fn.__name__}: a check's function is named check_<name>")
        name = fn.__name__[len("check_"):]
        if name in CHECKS:
            raise ValueError(f"check {name} is registered twice ({CHECKS[name].theme}, "
                             f"{fn.__module__})")
        if not spec or "\n" in spec:
            raise ValueError(f"check {name}: the specification is one non-empty line")
        CHECKS[name] = Check(name, spec, fn, fn.__module__.rsplit(".", 1)[-1], cost)
        return fn
    return register


def load():
    """Every check of every theme, by name, in THEMES order."""
    for theme in THEMES:
        importlib.import_module(f"{__name__}.{theme}")
    # A theme may import another's helpers (and so register that one's checks first).
    ordered = sorted(CHECKS.values(), key=lambda c: THEMES.index(c.theme))
    CHECKS.clear()
    CHECKS.update((c.name, c) for c in ordered)
    return CHECKS
