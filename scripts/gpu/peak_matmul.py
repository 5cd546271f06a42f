"""Measured bf16 matmul peak of CUDA device 0 through torch: the median TFLOP/s of 20 timed
[n x n] @ [n x n] bf16 matmuls (CUDA events, after 5 warm-up), for the MFU of check.sh.
Prints "PEAK_TFLOPS <value>" and the device name; exit 3 without a CUDA device.
Usage: python3 peak_matmul.py [n=8192]"""
import statistics
import sys

import torch

if not torch.cuda.is_available():
    print(f"no CUDA device (torch {torch.__version__}, CUDA {torch.version.cuda})")
    sys.exit(3)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
for _ in range(5):
    a @ b
torch.cuda.synchronize()
times = []
for _ in range(20):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    a @ b
    end.record()
    end.synchronize()
    times.append(start.elapsed_time(end) / 1e3)
tflops = 2.0 * n**3 / statistics.median(times) / 1e12
print(f"device {torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}")
print(f"bf16 matmul {n}x{n}x{n}: median {statistics.median(times) * 1e3:.3f} ms of 20")
print(f"PEAK_TFLOPS {tflops:.2f}")
