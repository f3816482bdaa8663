"""Message sizes as users write them: 4096, 64K, 16M, 1G; ranges LO:HI in powers of two.

    parse_sizes("1K:4M")     # [1024, 2048, ..., 4194304] (nccl-tests' -b 1K -e 4M -f 2)
    parse_sizes("4K,64K")    # [4096, 65536]
    human_bytes(65536)       # "64K"
"""

from __future__ import annotations

import re

from bench.core.errors import BadInput

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SIZE = re.compile(r"^(\d+)([KMG]?)B?$", re.I)


def parse_size(text: str, option: str = "--sizes") -> int:
    m = _SIZE.match(text.strip())
    if not m or int(m[1]) == 0:
        raise BadInput(f"{option}: {text!r} is not a size (e.g. 4096, 64K, 16M, 1G)")
    return int(m[1]) * _UNITS[m[2].upper()]


def parse_sizes(text: str, option: str = "--sizes") -> list[int]:
    """'1K:4M' -> powers of two from 1K to 4M (nccl-tests -b/-e/-f 2); '4K,64K' -> those sizes."""
    if ":" in text:
        lo_text, _, hi_text = text.partition(":")
        lo, hi = parse_size(lo_text, option), parse_size(hi_text, option)
        if hi < lo:
            raise BadInput(f"{option}: {text!r} ends below where it starts")
        sizes = []
        while lo <= hi:
            sizes.append(lo)
            lo *= 2
        return sizes
    sizes = [parse_size(t, option) for t in text.split(",") if t.strip()]
    if not sizes:
        raise BadInput(f"{option}: no sizes in {text!r}")
    return sorted(set(sizes))


def human_bytes(n: float) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{int(n // scale)}{unit}"
    return f"{int(n)}"
