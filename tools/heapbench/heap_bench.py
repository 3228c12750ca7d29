# SPDX-License-Identifier: MIT
"""The shared heap against glibc (tools/heap-bench.sh runs this): each workload with and
without libarcomm_heap.so preloaded, in alternating order, ROUNDS times; the wall time of
the whole run and its peak memory, medians with their spread, and the ratios heap/glibc.

Peak memory is the run's memory cgroup's peak (every process of the run, shared memory
included) where this process may make a cgroup (root, cgroup v1 or v2 with the memory
controller); otherwise the largest process's peak RSS (ru_maxrss, which counts RssShmem
too), as the table says."""
from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


class Cgroup:
    """A memory cgroup per run: v1 (memory.max_usage_in_bytes) or v2 (memory.peak)."""

    def __init__(self) -> None:
        self.base = None
        self.v2 = False
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            hid, ctrl, path = line.split(":", 2)
            if ctrl == "memory":
                base = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
                if self._try(base, v2=False):
                    return
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            hid, ctrl, path = line.split(":", 2)
            if hid == "0":
                for mnt in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
                    if (mnt / "cgroup.controllers").exists() and self._try(
                            mnt / path.lstrip("/"), v2=True):
                        return

    def _try(self, base: Path, v2: bool) -> bool:
        probe = base / f"heapbench-probe-{os.getpid()}"
        try:
            probe.mkdir()
        except OSError:
            return False
        ok = (probe / ("memory.peak" if v2 else "memory.max_usage_in_bytes")).exists()
        probe.rmdir()
        if ok:
            self.base, self.v2 = base, v2
        return ok

    @property
    def what(self) -> str:
        if self.base is None:
            return "the largest process's peak RSS (ru_maxrss; no memory cgroup could be made)"
        return f"the run's memory cgroup's peak (cgroup {'v2 memory.peak' if self.v2 else 'v1 memory.max_usage_in_bytes'})"

    def make(self, tag: str) -> Path | None:
        if self.base is None:
            return None
        d = self.base / f"heapbench-{os.getpid()}-{tag}"
        d.mkdir()
        return d

    def peak(self, d: Path) -> int:
        f = d / ("memory.peak" if self.v2 else "memory.max_usage_in_bytes")
        return int(f.read_text().split()[0])

    @staticmethod
    def drop(d: Path) -> None:
        for _ in range(100):
            try:
                d.rmdir()
                return
            except OSError:
                time.sleep(0.05)


def run_once(cmd: list[str], env: dict, cg: Cgroup, tag: str, cwd: str) -> tuple[float, int, str]:
    d = cg.make(tag)

    def enter() -> None:
        if d is not None:
            (d / "cgroup.procs").write_text(str(os.getpid()))

    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         preexec_fn=enter)
    out = p.stdout.read().decode(errors="replace")
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    peak = ru.ru_maxrss * 1024
    if d is not None:
        peak = cg.peak(d)
        cg.drop(d)
    if p.returncode != 0:
        sys.exit(f"heap-bench: {' '.join(cmd)} ({tag}) exited with {p.returncode}:\n{out}")
    return wall, peak, out.strip().splitlines()[-1] if out.strip() else ""


def make_inputs(tmp: Path, quick: bool) -> None:
    """A C file that takes gcc some seconds, and a file of random integers for sort."""
    rnd = random.Random(7)
    with open(tmp / "big.c", "w") as f:
        for i in range(800 if quick else 3000):
            f.write(f"int f{i}(int *a, int n) {{\n  int s = {i};\n")
            f.write("  for (int k = 0; k < n; k++) {\n    switch ((a[k] + s) % 7) {\n")
            for c in range(7):
                f.write(f"    case {c}: s = s * {rnd.randrange(3, 99)} + a[k] / {c + 1}; break;\n")
            f.write("    }\n  }\n  return s;\n}\n")
    with open(tmp / "numbers.txt", "w") as f:
        n = 1_000_000 if quick else 5_000_000
        f.write("\n".join(str(rnd.randrange(-10**12, 10**12)) for _ in range(n)))
        f.write("\n")
    # Read once, so the page cache of the inputs is not charged to the first run.
    for name in ("big.c", "numbers.txt"):
        (tmp / name).read_bytes()


def workloads(build: Path, tmp: Path, quick: bool, threads: list[int]) -> list[tuple[str, list[str]]]:
    b = build / "tools" / "heapbench"
    py = sys.executable
    w = [
        ("malloc+write+free of 1 MiB (x20000)", [str(b / "heapbench-cycle"), str(1 << 20), "20000"]),
        ("numpy temporaries (16 and 64 MiB arrays)", [py, str(HERE / "numpy_temps.py"),
                                                     "15" if quick else "60"]),
    ]
    for n in threads:
        w.append((f"{n} threads allocating 64 KiB-1 MiB", [str(b / "heapbench-threads"), str(n),
                                                           "5000" if quick else "20000"]))
    w += [
        ("gcc -O2 of a big C file", ["gcc", "-O2", "-c", "-o", os.devnull, str(tmp / "big.c")]),
        ("sort -n of 5M integers", ["sort", "-n", "-o", os.devnull, str(tmp / "numbers.txt")]),
        ("fork: 2 GiB live, 3 children read it", [str(b / "heapbench-forkread"),
                                                  str((512 if quick else 2048) << 20), "3"]),
        ("fork: 2 GiB live, 512 MiB of it used by collectives, 3 children read it",
         [str(b / "heapbench-forkread"), str((512 if quick else 2048) << 20), "3",
          str((128 if quick else 512) << 20)]),
        ("multiprocessing.Pool(4) over a 1.5 GiB array", [py, str(HERE / "pool.py"),
                                                           str((384 if quick else 1536) << 20)]),
    ]
    return w


def fmt(values: list[float], scale: float, unit: str) -> str:
    med = statistics.median(values)
    return f"{med * scale:.3g} {unit} ({min(values) * scale:.3g}-{max(values) * scale:.3g})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build", default="build", help="the meson build directory")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="", help="workloads whose name holds one of these words (comma-separated)")
    ap.add_argument("--threads", default="2,4,8,16", help="thread counts of the threads workload")
    ap.add_argument("--quick", action="store_true", help="smaller inputs (a smoke run)")
    a = ap.parse_args()
    build = Path(a.build).resolve()
    heap = build / "libarcomm_heap.so"
    if not heap.exists():
        sys.exit(f"heap-bench: no {heap}: build first (ninja -C {a.build})")
    cg = Cgroup()
    tmp = Path(tempfile.mkdtemp(prefix="heapbench-"))
    try:
        make_inputs(tmp, a.quick)
        ws = workloads(build, tmp, a.quick, [int(x) for x in a.threads.split(",") if x])
        if a.only:
            words = [x.strip() for x in a.only.split(",")]
            ws = [w for w in ws if any(x in w[0] for x in words)]
        base = {k: v for k, v in os.environ.items()
                if k not in ("LD_PRELOAD", "ARCOMM_HEAP_MIN", "ARCOMM_HEAP_BYTES")}
        envs = {"glibc": dict(base), "heap": dict(base, LD_PRELOAD=str(heap))}
        print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.uname().nodename}, "
              f"{os.cpu_count()} CPUs, {a.rounds} rounds (alternating which goes first)")
        print(f"# peak memory: {cg.what}")
        notes = {name: [] for name, _ in ws}
        print("| workload | glibc time | heap time | time ratio | glibc peak | heap peak | peak ratio |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for name, cmd in ws:
            res = {"glibc": ([], [], []), "heap": ([], [], [])}
            last = ""
            for r in range(a.rounds):
                order = ("glibc", "heap") if r % 2 == 0 else ("heap", "glibc")
                for mode in order:
                    wall, peak, last = run_once(cmd, envs[mode], cg, f"{mode}{r}", str(tmp))
                    res[mode][0].append(wall)
                    res[mode][1].append(peak)
                    res[mode][2].append(last)
            g, h = res["glibc"], res["heap"]
            tr = statistics.median(h[0]) / statistics.median(g[0])
            pr = statistics.median(h[1]) / statistics.median(g[1])
            print(f"| {name} | {fmt(g[0], 1, 's')} | {fmt(h[0], 1, 's')} | {tr:.2f} | "
                  f"{fmt(g[1], 1 / 2**20, 'MiB')} | {fmt(h[1], 1 / 2**20, 'MiB')} | {pr:.2f} |",
                  flush=True)
            for mode in ("glibc", "heap"):
                notes[name].append(f"{mode}: " + "; ".join(res[mode][2]))
            if "WRONG" in last or "A CHILD SAW" in last:
                sys.exit(f"heap-bench: {name}: {last}")
        print("\nWhat the workloads print (each round):")
        for name, lines in notes.items():
            for line in lines:
                if line.split(": ", 1)[1].strip(" ;"):
                    print(f"# {name}: {line}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
