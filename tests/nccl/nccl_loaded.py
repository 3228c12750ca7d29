# SPDX-License-Identifier: MIT
"""Which libnccl.so.2 serves this process: the version that ncclGetVersion answers
through the global symbol scope (the definition every library's unversioned ncclXxx
reference binds to, LD_PRELOAD first), and every libnccl file mapped (a program may
map a second one, e.g. a wheel's, whose symbols then go unused)."""
import ctypes


def served_version():
    """ncclGetVersion of the global scope (0 when no libnccl is loaded)."""
    try:
        fn = ctypes.CDLL(None).ncclGetVersion
    except (OSError, AttributeError):
        return 0
    v = ctypes.c_int(0)
    fn.argtypes = [ctypes.POINTER(ctypes.c_int)]
    return v.value if fn(ctypes.byref(v)) == 0 else 0


def mapped():
    """The libnccl files this process maps, in load order."""
    seen = []
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if "/libnccl.so" in path and path not in seen:
                seen.append(path)
    return seen


def describe():
    """'libnccl version V (arcomm|real NCCL), mapped: ...' for the header line."""
    v = served_version()
    who = "arcomm" if v == 21903 else "real NCCL"
    return f"libnccl version {v} ({who}); mapped: {', '.join(mapped()) or 'none'}"
