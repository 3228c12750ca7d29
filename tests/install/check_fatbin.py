#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The CUDA code a built library carries: every fat binary this build compiled into it
holds machine code (ELF) for exactly the architectures gpu_arch asks for, and PTX for
the newest of them.

    check_fatbin.py NVCC GPU_ARCH LIBRARY=N...

GPU_ARCH is meson's gpu_arch option: 'all' means every sm_N from sm_75 to sm_120 that
`NVCC --list-gpu-code` lists, 'auto' the lowest of each major version among them, else a
comma list (sm_86,sm_90).  N is the number of CUDA sources compiled into LIBRARY: it
must hold that many fat binaries with PTX (nvcc adds PTX to each one this build makes;
the static CUDA runtime's own fat binary has none, and is passed over).

The fat binaries are read from the library's .nv_fatbin section (cuobjdump, which would
list them, is not part of every CUDA install): a container's header is the magic
0xba55ed50, a version, the header's size and the size of its entries; each entry starts
with its kind (1 PTX, 2 ELF), the size of its header and of its payload, and carries
the architecture as a number (90 for sm_90).  Exit 0 when every library is right, 1
when one is not, 77 without nvcc.
"""
import os
import re
import shutil
import struct
import subprocess
import sys

FATBIN_MAGIC = 0xBA55ED50


def expected(nvcc, gpu_arch):
    out = subprocess.run([nvcc, "--list-gpu-code"], capture_output=True, text=True,
                         check=True).stdout.split()
    listed = sorted({int(c[3:]) for c in out if re.fullmatch(r"sm_\d+", c)
                     and 75 <= int(c[3:]) <= 120})
    if gpu_arch == "all":
        sms = listed
    elif gpu_arch == "auto":  # the lowest of each major version
        sms = [s for s in listed if not any(t // 10 == s // 10 and t < s for t in listed)]
    else:
        sms = sorted({int(a.strip()[3:]) for a in gpu_arch.split(",")})
    return set(sms), {max(sms)}


def section(path, name):
    """The bytes of ELF64 little-endian section `name` of path (None when absent)."""
    data = open(path, "rb").read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path}: not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
               for i in range(shnum)]
    strtab = headers[shstrndx]
    for h in headers:
        start = strtab[4] + h[0]
        if data[start:data.index(b"\0", start)].decode() == name:
            return data[h[4]:h[4] + h[5]]
    return None


def containers(path):
    """[(elf archs, ptx archs)] per fat binary container in path's .nv_fatbin."""
    sec = section(path, ".nv_fatbin")
    if sec is None:
        return []
    found = []
    off = 0
    while off + 16 <= len(sec):
        magic, _version, hdr, size = struct.unpack_from("<IHHQ", sec, off)
        if magic != FATBIN_MAGIC:
            off += 8  # padding between the containers of several objects
            continue
        elf, ptx = set(), set()
        entry, end = off + hdr, off + hdr + size
        while entry < end:
            kind, _flags, ehdr, esize = struct.unpack_from("<HHIQ", sec, entry)
            arch, = struct.unpack_from("<I", sec, entry + 28)
            if kind == 1:
                ptx.add(arch)
            elif kind == 2:
                elf.add(arch)
            else:
                raise ValueError(f"{path}: fat binary entry of kind {kind} at {entry:#x}")
            entry += ehdr + esize
        found.append((elf, ptx))
        off = (end + 7) & ~7
    return found


def names(archs, prefix):
    return " ".join(f"{prefix}_{a}" for a in sorted(archs)) or "none"


def main():
    nvcc, gpu_arch, libs = sys.argv[1], sys.argv[2], sys.argv[3:]
    if not shutil.which(nvcc):
        print(f"{nvcc} not found: skipped")
        return 77
    want_elf, want_ptx = expected(nvcc, gpu_arch)
    print(f"gpu_arch={gpu_arch}: want machine code {names(want_elf, 'sm')}, "
          f"PTX {names(want_ptx, 'compute')}")
    bad = 0
    for arg in libs:
        lib, count = arg.rsplit("=", 1)
        ours = 0
        for i, (elf, ptx) in enumerate(containers(lib)):
            what = f"{os.path.basename(lib)} fat binary {i}: {names(elf, 'sm')}; PTX {names(ptx, 'compute')}"
            if not ptx:
                print(f"passed over: {what} (no PTX: not one this build compiled)")
                continue
            ours += 1
            ok = elf == want_elf and ptx == want_ptx
            print(f"{'ok' if ok else 'FAIL'}: {what}")
            bad |= not ok
        if ours != int(count):
            print(f"FAIL: {lib} holds {ours} fat binaries with PTX, not {count}")
            bad = 1
    return bad


if __name__ == "__main__":
    sys.exit(main())
