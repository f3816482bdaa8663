#!/usr/bin/env python3
"""The GPU architectures a CUDA library really carries kernels for, read without a GPU and without cuobjdump.

    python3 scripts/fatbin_arches.py .venv/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so
    python3 scripts/fatbin_arches.py torch-2.7.1-cp312-cp312-manylinux_2_28_x86_64.whl   # reads torch/lib/libtorch_cuda.so
    -> sm: 50 60 70 75 80 86 90
       ptx: 90
       (N fatbin containers, M entries)

Why: the lock of an image variant says in its header which GPUs its torch
wheel can run on. torch.cuda.get_arch_list() gives the list torch was told to
build for; this reads what the shared library actually holds, from its ELF
.nv_fatbin section: a run of fat binary containers (magic 0xBA55ED50, a
16-byte header whose last field is the size of the entries after it), each
a run of entries (u16 kind: 1 PTX, 2 cubin ELF; u32 header size at +4; u64
payload size at +8; u32 target sm at +28). The layout is NVIDIA's
fatbinary.h header as published with the CUDA toolkit; the payloads (maybe
compressed) are not read. Standard library only, so it runs anywhere.
"""

from __future__ import annotations

import struct
import sys
import zipfile
from collections import Counter

FATBIN_MAGIC = 0xBA55ED50
KINDS = {1: "ptx", 2: "sm"}


def section(data: bytes, name: str) -> bytes:
    """The bytes of an ELF64 little-endian section by name."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def header(i: int) -> tuple[int, int, int]:
        base = shoff + i * shentsize
        name_off, = struct.unpack_from("<I", data, base)
        offset, size = struct.unpack_from("<QQ", data, base + 0x18)
        return name_off, offset, size

    _, str_off, _ = header(shstrndx)
    for i in range(shnum):
        name_off, offset, size = header(i)
        end = data.index(b"\0", str_off + name_off)
        if data[str_off + name_off:end].decode() == name:
            return data[offset:offset + size]
    raise ValueError(f"no {name} section (not a CUDA library?)")


def entries(fatbin: bytes):
    """(kind, sm) of every entry of every container in a .nv_fatbin section."""
    pos, containers = 0, 0
    while pos + 16 <= len(fatbin):
        magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", fatbin, pos)
        if magic != FATBIN_MAGIC:
            pos += 8  # containers are 8-byte aligned; padding between them is skipped
            continue
        containers += 1
        entry, end = pos + header_size, pos + header_size + fat_size
        while entry + 32 <= end:
            kind, _ver, entry_header = struct.unpack_from("<HHI", fatbin, entry)
            payload, = struct.unpack_from("<Q", fatbin, entry + 8)
            sm, = struct.unpack_from("<I", fatbin, entry + 28)
            yield KINDS.get(kind, f"kind{kind}"), sm
            if entry_header == 0:
                break
            entry += entry_header + payload
        pos = end
    if not containers:
        raise ValueError("no fat binary container in .nv_fatbin")


def library_bytes(path: str) -> bytes:
    if path.endswith(".whl"):
        with zipfile.ZipFile(path) as z:
            return z.read("torch/lib/libtorch_cuda.so")
    with open(path, "rb") as f:
        return f.read()


def arches(path: str) -> dict[str, list[int]]:
    """{"sm": [cubin targets], "ptx": [PTX targets]}, sorted, each counted once."""
    found = Counter(entries(section(library_bytes(path), ".nv_fatbin")))
    out: dict[str, list[int]] = {"sm": [], "ptx": []}
    for (kind, sm), _n in sorted(found.items()):
        out.setdefault(kind, []).append(sm)
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        found = arches(argv[0])
    except (OSError, KeyError, ValueError) as e:
        print(f"fatbin_arches: {argv[0]}: {e}", file=sys.stderr)
        return 2
    for kind, sms in found.items():
        print(f"{kind}: {' '.join(map(str, sms))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
