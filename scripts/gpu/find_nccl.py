"""Prints "<include dir>\t<library>" of the NCCL that the torch wheel's nvidia-nccl-* package
ships (nvidia/nccl/{include,lib} in site-packages), or nothing with exit 1 when none is found.
The library may exist only as libnccl.so.2, so the file itself is printed, not a -lnccl name."""
import glob
import os
import site
import sys

candidates = []
try:
    import nvidia.nccl as nccl_pkg  # a namespace package in the nvidia-nccl-cu* wheels

    candidates += list(getattr(nccl_pkg, "__path__", []))
except Exception:
    pass
roots = list(site.getsitepackages()) + [site.getusersitepackages()] + sys.path
candidates += [os.path.join(r, "nvidia", "nccl") for r in roots if r]
for c in candidates:
    header = os.path.join(c, "include", "nccl.h")
    libs = sorted(glob.glob(os.path.join(c, "lib", "libnccl.so*")), key=len)
    if os.path.isfile(header) and libs:
        print(f"{os.path.dirname(header)}\t{libs[0]}")
        sys.exit(0)
sys.exit(1)
