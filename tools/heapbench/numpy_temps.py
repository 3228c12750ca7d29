# SPDX-License-Identifier: MIT
"""numpy temporaries (tools/heap-bench.sh): element-wise expressions over arrays of
16 MiB and 64 MiB, whose intermediate results are allocated and freed at every
operation, and lists of 160 KiB arrays made and dropped."""
import sys
import time

import numpy as np

iters = int(sys.argv[1]) if len(sys.argv) > 1 else 60
rng = np.random.default_rng(1)
start = time.perf_counter()
acc = 0.0
for n in (2_000_000, 8_000_000):
    a, b, c = (rng.random(n) for _ in range(3))
    for i in range(iters):
        d = a * b + c - a / (b + 1.0)
        e = np.sqrt(d * d + 1.0)
        acc += float(np.sort(e[: n // 8])[-1]) + float(e.sum())
        small = [np.ones(20_000 + i) for _ in range(20)]
        acc += float(sum(s[0] for s in small))
print(f"numpy temporaries: {time.perf_counter() - start:.3f} s ({acc:.6g})")
