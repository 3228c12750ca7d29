# SPDX-License-Identifier: MIT
"""Finding and loading libarcomm.so, and the ctypes prototypes of the public C API.

The library is looked for, in this order; the first that loads and has every function
the package calls is used (a sanitizer build does not load into a plain interpreter, and
a stale build of an older arcomm lacks functions: both are passed over):

1. ``ARCOMM_LIBRARY``: the path of ``libarcomm.so`` (an error if it does not load);
2. next to the package: ``libarcomm.so.0`` or ``libarcomm.so`` in this package's
   directory, its ``lib/``, or ``.arcomm.mesonpy.libs`` beside it (where the wheel that
   ``pip install .`` builds from the source tree carries the library);
3. the build tree: from this file's directory upwards, ``build/libarcomm.so``, then any
   other ``build*/libarcomm.so`` (newest first);
4. pkg-config: the ``libdir`` of ``arcomm.pc`` (``PKG_CONFIG_PATH`` names an installed
   prefix's ``lib/pkgconfig``);
5. the loader's path: each directory of ``LD_LIBRARY_PATH``, then
   ``ctypes.util.find_library("arcomm")`` (ldconfig's cache);
6. ``/usr/local/lib``, ``/usr/local/lib64``, ``/usr/lib`` and ``/usr/lib64`` (also their
   multiarch subdirectory).

When none does, the OSError names every place looked in and why each candidate found
was passed over.

``libarcomm_mpi.so`` (for :meth:`arcomm.Comm.from_mpi`) is ``ARCOMM_MPI_LIBRARY`` when set,
else the file of that name next to the ``libarcomm.so`` that was loaded, else
``find_library("arcomm_mpi")``.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import subprocess
import sysconfig
import threading
from ctypes import POINTER, c_char_p, c_int, c_size_t, c_void_p
from pathlib import Path
from typing import Iterator

COMM_ID_BYTES = 64


class CommId(ctypes.Structure):
    """comm_id_t."""

    _fields_ = [("str", ctypes.c_char * COMM_ID_BYTES)]


class CommConfig(ctypes.Structure):
    """comm_config_t (its size field is set by comm_config_init)."""

    _fields_ = [
        ("size", c_size_t),
        ("nranks", c_int),
        ("rank", c_int),
        ("id", CommId),
        ("device", c_int),
        ("device_index", c_int),
        ("transport", c_char_p),
        ("timeout_ms", c_int),
        ("knob_defaults", c_char_p),
        ("abort_flag", ctypes.POINTER(c_int)),
    ]


_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_lib_path: str | None = None
_mpi_lib: ctypes.CDLL | None = None


def _try_load(path: str) -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(path)
    except OSError:
        return None


_NAMES = ("libarcomm.so.0", "libarcomm.so")


def _in_dir(d: str | Path) -> list[str]:
    """libarcomm's files in directory d: libarcomm.so.0, libarcomm.so, then any other
    libarcomm.so.* (a wheel holds libarcomm.so.X.Y.Z alone: it has no symbolic links)."""
    found = [str(Path(d) / n) for n in _NAMES if (Path(d) / n).is_file()]
    if Path(d).is_dir():
        found += sorted(str(p) for p in Path(d).glob("libarcomm.so.*")
                        if p.name not in _NAMES and p.is_file())
    return found


def _package_candidates() -> list[str]:
    here = Path(__file__).resolve().parent
    # .arcomm.mesonpy.libs: where meson-python puts libarcomm in a wheel (pip install .)
    return _in_dir(here) + _in_dir(here / "lib") + _in_dir(here.parent / ".arcomm.mesonpy.libs")


def _build_tree_candidates() -> list[Path]:
    found: list[Path] = []
    for d in Path(__file__).resolve().parents:
        first = d / "build" / "libarcomm.so"
        if first.is_file():
            found.append(first)
        others = [p for p in d.glob("build*/libarcomm.so") if p != first and p.is_file()]
        others.sort(key=lambda p: p.stat().st_mtime, reverse=True)
        found.extend(others)
    return found


def _pkg_config_libdir() -> tuple[str | None, str]:
    """arcomm.pc's libdir, and what the lookup said (for the error message)."""
    exe = shutil.which("pkg-config") or shutil.which("pkgconf")
    if exe is None:
        return None, "pkg-config (not installed)"
    try:
        p = subprocess.run([exe, "--variable=libdir", "arcomm"], capture_output=True,
                           text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"pkg-config ({e})"
    libdir = p.stdout.strip()
    if p.returncode != 0 or not libdir:
        where = os.environ.get("PKG_CONFIG_PATH", "")
        return None, ("pkg-config (no arcomm.pc; PKG_CONFIG_PATH="
                      + (where if where else "unset") + ")")
    libdir = os.path.normpath(libdir)  # a relocatable .pc's is .../lib/pkgconfig/..
    return libdir, f"pkg-config's libdir {libdir}"


def _system_dirs() -> list[str]:
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    dirs = []
    for d in ("/usr/local/lib", "/usr/local/lib64", "/usr/lib", "/usr/lib64"):
        for sub in ([multiarch] if multiarch else []) + [""]:
            dirs.append(os.path.join(d, sub) if sub else d)
    return dirs


def _installed_candidates() -> list[str]:
    """The installed libraries steps 4-6 find (what the build tree does not hold)."""
    return [p for _, paths in _installed_steps() for p in paths]


def _installed_steps() -> Iterator[tuple[str, list[str]]]:
    """(where looked, what was found there) for steps 4-6 of the module's docstring."""
    libdir, said = _pkg_config_libdir()
    yield said, _in_dir(libdir) if libdir else []
    ld = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    yield ("LD_LIBRARY_PATH" + (f" ({':'.join(ld)})" if ld else " (unset)"),
           [p for d in ld for p in _in_dir(d)])
    name = ctypes.util.find_library("arcomm")
    yield "ctypes.util.find_library('arcomm')", [name] if name else []
    yield ("/usr/local/lib*, /usr/lib*", [p for d in _system_dirs() for p in _in_dir(d)])


def _steps() -> Iterator[tuple[str, list[str]]]:
    """(where looked, what was found there) for steps 2-6, each looked at only when the
    ones before it found nothing usable."""
    here = Path(__file__).resolve().parent
    yield (f"next to the package ({here}, {here / 'lib'}, {here.parent / '.arcomm.mesonpy.libs'})",
           _package_candidates())
    yield (f"build*/ directories above {here}", [str(p) for p in _build_tree_candidates()])
    yield from _installed_steps()


def _locate() -> tuple[ctypes.CDLL, str]:
    env = os.environ.get("ARCOMM_LIBRARY")
    if env:
        try:
            return ctypes.CDLL(env), env
        except OSError as e:
            raise OSError(f"arcomm: ARCOMM_LIBRARY={env} does not load: {e}") from e
    looked: list[str] = ["ARCOMM_LIBRARY (unset)"]
    passed: list[str] = []
    seen: set[str] = set()
    for where, paths in _steps():
        looked.append(where + ("" if paths else ": none"))
        for p in paths:
            if p in seen:
                continue
            seen.add(p)
            lib = _try_load(p)
            if lib is not None and _has_api(lib):
                return lib, p
            if lib is None:
                passed.append(f"{p} (does not load into this interpreter: a sanitizer build?)")
            else:
                missing = [n for n in _signatures() if not hasattr(lib, n)]
                passed.append(f"{p} (an older arcomm: lacks {', '.join(missing[:3])})")
    raise OSError(
        "arcomm: no usable libarcomm.so: install arcomm (meson install -C build) and put "
        "its lib/pkgconfig on PKG_CONFIG_PATH, build it in the checkout that holds this "
        "package (meson setup build && ninja -C build), or set ARCOMM_LIBRARY to the "
        "library's path.  Looked in: " + "; ".join(looked) + "; "
        + ("candidates passed over: " + "; ".join(passed) if passed else "found none")
    )


def _has_api(lib: ctypes.CDLL) -> bool:
    """Does lib define every function the package calls (a stale build does not)?"""
    return all(hasattr(lib, name) for name in _signatures())


def _prototype(lib: ctypes.CDLL) -> None:
    for name, (res, args) in _signatures().items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    for name, (res, args) in _optional_signatures().items():
        if hasattr(lib, name):
            f = getattr(lib, name)
            f.restype = res
            f.argtypes = args


def _optional_signatures() -> dict:
    """Functions newer libraries add (point-to-point, group calls, non-blocking
    collectives): prototyped where the loaded library has them; ``has(name)`` says
    which.  The package works without them (arcomm.torch says what needs them)."""
    p_comm = c_void_p
    st = c_int
    p_req = POINTER(c_void_p)  # comm_request_t **
    return {
        "comm_send": (st, [p_comm, c_void_p, c_size_t, c_int, c_int, c_void_p]),
        "comm_recv": (st, [p_comm, c_void_p, c_size_t, c_int, c_int, c_void_p]),
        "comm_isend": (st, [p_comm, c_void_p, c_size_t, c_int, c_int, p_req]),
        "comm_irecv": (st, [p_comm, c_void_p, c_size_t, c_int, c_int, p_req]),
        "comm_group_start": (st, []),
        "comm_group_end": (st, []),
        "comm_iallreduce": (st, [p_comm, c_void_p, c_void_p, c_size_t, c_int, c_int, p_req]),
        "comm_ibroadcast": (st, [p_comm, c_void_p, c_void_p, c_size_t, c_int, c_int, p_req]),
        "comm_ireduce": (
            st, [p_comm, c_void_p, c_void_p, c_size_t, c_int, c_int, c_int, p_req]
        ),
        "comm_iallgather": (st, [p_comm, c_void_p, c_void_p, c_size_t, c_int, p_req]),
        "comm_ireduce_scatter": (
            st, [p_comm, c_void_p, c_void_p, c_size_t, c_int, c_int, p_req]
        ),
        "comm_ialltoall": (st, [p_comm, c_void_p, c_void_p, c_size_t, c_int, p_req]),
        "comm_ibarrier": (st, [p_comm, p_req]),
        "comm_test": (st, [p_req, POINTER(c_int)]),
        "comm_wait": (st, [p_req]),
        "comm_wait_all": (st, [c_int, p_req]),
    }


def has(name: str) -> bool:
    """Whether the loaded library has the optional function ``name``."""
    return hasattr(lib(), name) and name in _optional_signatures()


def _signatures() -> dict:
    """The C API's functions the package calls: name -> (restype, argtypes)."""
    p_comm = c_void_p
    pp_comm = POINTER(c_void_p)
    st = c_int
    sigs = {
        "comm_config_init": (None, [POINTER(CommConfig)]),
        "comm_id_new": (st, [POINTER(CommId)]),
        "comm_init": (st, [pp_comm, POINTER(CommConfig)]),
        "comm_init_env": (st, [pp_comm]),
        "comm_allreduce": (st, [p_comm, c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p]),
        "comm_allreduce_add": (
            st,
            [p_comm, c_void_p, c_void_p, c_void_p, c_size_t, c_size_t, c_int, c_void_p],
        ),
        "comm_barrier": (st, [p_comm]),
        "comm_broadcast": (st, [p_comm, c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p]),
        "comm_reduce": (
            st,
            [p_comm, c_void_p, c_void_p, c_size_t, c_int, c_int, c_int, c_void_p],
        ),
        "comm_allgather": (st, [p_comm, c_void_p, c_void_p, c_size_t, c_int, c_void_p]),
        "comm_reduce_scatter": (
            st,
            [p_comm, c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p],
        ),
        "comm_alltoall": (st, [p_comm, c_void_p, c_void_p, c_size_t, c_int, c_void_p]),
        "comm_split": (st, [p_comm, c_int, c_int, pp_comm]),
        "comm_dup": (st, [p_comm, pp_comm]),
        "comm_init_all": (st, [pp_comm, c_int, POINTER(c_int), POINTER(CommConfig)]),
        "comm_abort": (st, [p_comm]),
        "comm_destroy": (st, [p_comm]),
        "comm_rank": (c_int, [p_comm]),
        "comm_size": (c_int, [p_comm]),
        "comm_transport_name": (c_char_p, [p_comm]),
        "comm_status_string": (c_char_p, [c_int]),
        "comm_last_error": (c_char_p, [p_comm]),
        "comm_dtype_size": (c_size_t, [c_int]),
        "comm_get_version": (None, [POINTER(c_int), POINTER(c_int), POINTER(c_int)]),
        "comm_set_wait_hook": (st, [p_comm, c_void_p, c_void_p, ctypes.c_uint]),
    }
    return sigs


def lib() -> ctypes.CDLL:
    """The loaded libarcomm (loaded and prototyped on first use)."""
    global _lib, _lib_path
    if _lib is None:
        with _lock:
            if _lib is None:
                loaded, path = _locate()
                _prototype(loaded)
                _lib_path = path
                _lib = loaded
    return _lib


def lib_path() -> str:
    """The path libarcomm was loaded from."""
    lib()
    assert _lib_path is not None
    return _lib_path


def mpi_lib() -> ctypes.CDLL:
    """libarcomm_mpi (for comm_init_mpi), loaded on first use."""
    global _mpi_lib
    if _mpi_lib is not None:
        return _mpi_lib
    base = lib_path()
    with _lock:
        if _mpi_lib is not None:
            return _mpi_lib
        candidates: list[str] = []
        env = os.environ.get("ARCOMM_MPI_LIBRARY")
        if env:
            candidates.append(env)
        else:
            d = os.path.dirname(os.path.abspath(base))
            for n in ("libarcomm_mpi.so", "libarcomm_mpi.so.0"):
                if os.path.isfile(os.path.join(d, n)):
                    candidates.append(os.path.join(d, n))
            name = ctypes.util.find_library("arcomm_mpi")
            if name:
                candidates.append(name)
        errors = []
        for c in candidates:
            try:
                m = ctypes.CDLL(c, mode=ctypes.RTLD_GLOBAL)
            except OSError as e:
                errors.append(f"{c}: {e}")
                continue
            m.comm_init_mpi.restype = c_int
            _mpi_lib = m
            return m
        raise OSError(
            "arcomm: libarcomm_mpi.so not found (arcomm built without MPI? set "
            "ARCOMM_MPI_LIBRARY); " + ("; ".join(errors) if errors else "no candidate")
        )
