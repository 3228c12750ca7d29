# SPDX-License-Identifier: MIT
"""Where the package finds libarcomm.so (arcomm/_lib.py's docstring gives the order):
next to the package, pkg-config's libdir, LD_LIBRARY_PATH, in that order, and an error
that names every place looked in and every candidate passed over.  Each case runs the
package copied into a temporary directory (no build tree above it), in a fresh
interpreter with only the variables the case sets."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import build_dir

PYTHON = sys.executable
PKG = Path(__file__).resolve().parents[2] / "tools" / "python" / "arcomm"
WHERE = "import arcomm; print(arcomm.library_path())"


def _library() -> Path:
    lib = (build_dir() / "libarcomm.so").resolve()
    if not lib.is_file():
        pytest.skip(f"no libarcomm.so in {build_dir()}")
    return lib


def _site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    shutil.copytree(PKG, site / "arcomm", ignore=shutil.ignore_patterns("__pycache__"))
    return site


def _run(site: Path, code: str, **env: str) -> subprocess.CompletedProcess:
    keep = {k: v for k, v in os.environ.items()
            if k not in ("ARCOMM_LIBRARY", "LD_LIBRARY_PATH", "PKG_CONFIG_PATH",
                         "PKG_CONFIG_LIBDIR", "PYTHONPATH")}
    keep.update(PYTHONPATH=str(site), PYTHONDONTWRITEBYTECODE="1", **env)
    return subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=60,
                          env=keep, cwd=site)


def _no_other_library(site: Path) -> None:
    """Skips where a library the case does not place would be found first or instead (a
    build tree above the temporary directory, an installed arcomm)."""
    p = _run(site, "import arcomm._lib as l; "
             "print(len(l._build_tree_candidates()) + len(l._installed_candidates()))")
    assert p.returncode == 0, p.stderr
    if p.stdout.strip() != "0":
        pytest.skip("a libarcomm.so outside the test's directory would be found")


def _libdir(tmp_path: Path, name: str) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "libarcomm.so.0").symlink_to(_library())
    return d


def _pc(tmp_path: Path, libdir: Path) -> Path:
    pc = tmp_path / "pkgconfig"
    pc.mkdir()
    (pc / "arcomm.pc").write_text(
        f"libdir={libdir}\nName: arcomm\nDescription: test\nVersion: 0\nLibs: -L${{libdir}}\n")
    return pc


def test_next_to_the_package(tmp_path):
    site = _site(tmp_path)
    (site / "arcomm" / "lib").mkdir()
    shutil.copy(_library(), site / "arcomm" / "lib" / "libarcomm.so.0")
    other = _libdir(tmp_path, "ld")
    p = _run(site, WHERE, LD_LIBRARY_PATH=str(other))
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == str(site / "arcomm" / "lib" / "libarcomm.so.0"), p.stdout


def test_pkg_config_then_ld_library_path(tmp_path):
    if shutil.which("pkg-config") is None:
        pytest.skip("no pkg-config")
    site = _site(tmp_path)
    _no_other_library(site)
    by_pc, by_ld = _libdir(tmp_path, "pc-lib"), _libdir(tmp_path, "ld-lib")
    pc = _pc(tmp_path, by_pc)
    p = _run(site, WHERE, PKG_CONFIG_PATH=str(pc), LD_LIBRARY_PATH=str(by_ld))
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == str(by_pc / "libarcomm.so.0"), p.stdout
    p = _run(site, WHERE, LD_LIBRARY_PATH=f"{tmp_path / 'none'}:{by_ld}")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == str(by_ld / "libarcomm.so.0"), p.stdout


def test_the_error_names_every_place(tmp_path):
    site = _site(tmp_path)
    _no_other_library(site)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "libarcomm.so.0").write_bytes(b"not a library")
    p = _run(site, "import arcomm; arcomm.new_id()", LD_LIBRARY_PATH=str(broken))
    assert p.returncode != 0, p.stdout
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("OSError: arcomm: no usable libarcomm.so"), last
    for where in ("ARCOMM_LIBRARY (unset)", f"next to the package ({site / 'arcomm'}",
                  "build*/ directories above", "pkg-config (no arcomm.pc; PKG_CONFIG_PATH=unset)",
                  f"LD_LIBRARY_PATH ({broken})", "find_library('arcomm')", "/usr/local/lib*",
                  f"candidates passed over: {broken / 'libarcomm.so.0'} (does not load"):
        assert where in last, f"{where!r} not in: {last}"


def test_arcomm_library_first(tmp_path):
    site = _site(tmp_path)
    (site / "arcomm" / "libarcomm.so.0").symlink_to(_library())
    mine = _libdir(tmp_path, "mine") / "libarcomm.so.0"
    p = _run(site, WHERE, ARCOMM_LIBRARY=str(mine))
    assert p.returncode == 0 and p.stdout.strip() == str(mine), p.stdout + p.stderr
    p = _run(site, "import arcomm; arcomm.new_id()", ARCOMM_LIBRARY=str(tmp_path / "nothing.so"))
    assert p.returncode != 0
    assert f"ARCOMM_LIBRARY={tmp_path / 'nothing.so'} does not load" in p.stderr, p.stderr
