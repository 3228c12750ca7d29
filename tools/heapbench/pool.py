# SPDX-License-Identifier: MIT
"""multiprocessing.Pool(4) over a large numpy array made before the pool forks its
workers (tools/heap-bench.sh): each worker sums slices of the array it inherited."""
import multiprocessing as mp
import sys
import time

import numpy as np

ARR = None


def work(i: int) -> float:
    k = len(ARR) // 16
    return float(ARR[i * k:(i + 1) * k].sum())


if __name__ == "__main__":
    nbytes = int(float(sys.argv[1])) if len(sys.argv) > 1 else 1536 << 20
    mp.set_start_method("fork")
    ARR = np.arange(nbytes // 8, dtype=np.float64)
    start = time.perf_counter()
    with mp.Pool(4) as p:
        total = sum(p.map(work, range(16)))
    want = float(ARR.sum())
    print(f"Pool(4) over {nbytes >> 20} MiB: {time.perf_counter() - start:.3f} s"
          f"{'' if abs(total - want) <= 1e-6 * want else ' (WRONG SUM)'}")
