#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""numpy_allreduce: the Python package ``arcomm`` on numpy arrays.

Under arrun every process is a rank (``arcomm.Comm.from_env()``); run alone, the
program makes two thread ranks itself (``arcomm.new_id()`` and ``arcomm.Comm``).  Each
rank sums an array with ``allreduce``, gathers every rank's row with ``allgather``,
checks both and exits 0 when all is right.

    pip install <arcomm source>/tools/python      # the package; it needs numpy
    arrun -n 4 python3 numpy_allreduce.py         # 4 process ranks
    python3 numpy_allreduce.py                    # 2 thread ranks in this process
    prints "rank R of N (shm): allreduce and allgather right" for every rank

The package finds libarcomm.so installed, or where ARCOMM_LIBRARY says.
"""
import os
import sys
import threading

import numpy as np

import arcomm

N = 100_000


def run_rank(comm):
    """One rank's work; returns True when its results are right."""
    rank, size = comm.rank, comm.size
    # allreduce in place: rank r gives (r + 1) * (i % 50); the sum is
    # (1 + 2 + ... + size) * (i % 50) on every rank, exact in float32.
    x = (rank + 1) * (np.arange(N) % 50).astype(np.float32)
    comm.allreduce(x)
    ok = np.array_equal(x, size * (size + 1) // 2 * (np.arange(N) % 50).astype(np.float32))
    # allgather: row r of the table is rank r's row, on every rank.
    table = np.empty((size, 3), np.int64)
    comm.allgather(np.array([rank, rank * rank, -rank], np.int64), table)
    ok &= all(list(table[r]) == [r, r * r, -r] for r in range(size))
    # One write per line: the ranks share arrun's stdout, and print() under
    # PYTHONUNBUFFERED writes the text and its newline apart (lines of ranks could mix).
    sys.stdout.write(f"rank {rank} of {size} ({comm.transport}): "
                     f"{'allreduce and allgather right' if ok else 'WRONG results'}\n")
    sys.stdout.flush()
    return ok


def main():
    if "ARCOMM_RANK" in os.environ:  # started by arrun: this process is one rank
        with arcomm.Comm.from_env() as comm:
            return 0 if run_rank(comm) else 1
    cid = arcomm.new_id()  # thread ranks: one id, given to every rank
    results = [False, False]

    def thread_rank(r):
        with arcomm.Comm(cid, r, 2) as comm:  # comm_init; comm_destroy on leaving
            results[r] = run_rank(comm)

    threads = [threading.Thread(target=thread_rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
