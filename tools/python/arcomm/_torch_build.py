# SPDX-License-Identifier: MIT
"""arcomm.torch's native backend: csrc/torch_backend.cpp compiled against the torch in use
at first import (torch.utils.cpp_extension), cached per source, torch and interpreter,
then loaded from the cache.  arcomm.torch asks ``load()``; docs/python.md says where the
cache lies and how ARCOMM_TORCH_NATIVE turns it off."""
from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import warnings
from typing import Any

import torch

_mod: Any = None
#: Why the build failed ("" where it did not).
why = ""
_tried = False


def off() -> bool:
    """ARCOMM_TORCH_NATIVE=0 (or off, no, false): every call takes the Python path."""
    return os.environ.get("ARCOMM_TORCH_NATIVE", "1").strip().lower() in ("0", "off", "no",
                                                                          "false")


def module() -> Any:
    """The extension loaded so far (None before ``load()`` or where it failed)."""
    return _mod


def _cache_dir() -> str:
    """Where built extensions are kept: $TORCH_EXTENSIONS_DIR/arcomm-torch-native (torch's
    own variable for its extensions' builds), else $XDG_CACHE_HOME/arcomm/torch-native
    (~/.cache/...), else the temporary directory."""
    env = os.environ.get("TORCH_EXTENSIONS_DIR")
    if env:
        return os.path.join(env, "arcomm-torch-native")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    d = os.path.join(base, "arcomm", "torch-native")
    try:
        os.makedirs(d, exist_ok=True)
        if os.access(d, os.W_OK):
            return d
    except OSError:
        pass
    return os.path.join(tempfile.gettempdir(), f"arcomm-torch-native-{os.getuid()}")


def load() -> Any:
    """The compiled extension (built on first use, then loaded from the cache), or None
    where ARCOMM_TORCH_NATIVE=0 or the build failed (one warning says why)."""
    global _mod, why, _tried
    if off():
        return None
    if _tried:
        return _mod
    _tried = True
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc", "torch_backend.cpp")
    try:
        with open(src, "rb") as f:
            text = f.read()
        # One build per source, torch and interpreter: a new torch gets a fresh build,
        # never one compiled against another torch's headers and C++ ABI.
        key = hashlib.sha256(b"\0".join([
            text, torch.__version__.encode(), sys.version.encode(),
            str(torch._C._GLIBCXX_USE_CXX11_ABI).encode()])).hexdigest()[:16]
        build = os.path.join(_cache_dir(), f"torch-{torch.__version__}-"
                             f"{sys.implementation.cache_tag}-{key}")
        os.makedirs(build, exist_ok=True)
        name = f"arcomm_torch_native_{key}"
        so = os.path.join(build, name + ".so")
        done = os.path.join(build, "built")
        if os.path.isfile(done) and os.path.isfile(so):
            # Built before (the marker is written once the build succeeded): loaded
            # straight away, without cpp_extension's import, lock and ninja run.
            import importlib.util

            spec = importlib.util.spec_from_file_location(name, so)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            _mod = mod
            return _mod
        import logging

        # cpp_extension logs its guesses about CUDA as it is imported: this build is for
        # the host and needs none of it.
        logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
        from torch.utils import cpp_extension

        # load() takes a lock in the build directory: ranks importing together wait
        # for the one that builds, then load its result.
        _mod = cpp_extension.load(
            name=name, sources=[src], build_directory=build, extra_cflags=["-O2"],
            verbose=False)
        tmp = f"{done}.{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(f"{torch.__version__}\n")
        os.replace(tmp, done)
    except Exception as e:  # noqa: BLE001 - any failure leaves the Python path
        lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
        why = f"{type(e).__name__}: " + (" / ".join(lines[-3:]) if lines else "")
        warnings.warn(
            f"arcomm.torch: the native path is off: building {src} failed ({why}); "
            "every call takes the Python path (slower per call).  Set ARCOMM_TORCH_NATIVE=0 "
            "to skip the build.", RuntimeWarning, stacklevel=4)
        _mod = None
    return _mod
