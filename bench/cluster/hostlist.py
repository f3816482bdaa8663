"""Slurm's hostlist expressions, read as Slurm reads them (src/common/hostlist.c).

    expand("gpu[01-03,7]-ib,login1")   # ["gpu01-ib", "gpu02-ib", "gpu03-ib", "gpu7-ib", "login1"]
    expand("r[1-2]n[1-2]")             # ["r1n1", "r1n2", "r2n1", "r2n2"]
    expand("leaf[a-c]")                # ValueError: 'a' is not a number or a range of numbers

Items are split on commas, spaces and tabs outside brackets. A bracket holds
numbers and ranges "lo-hi", comma-separated; each is zero-padded to the
width of its "lo" as written (n[08-10]: n08 n09 n10), every bracket of an
item multiplies (the last one varies fastest). What Slurm refuses is a
ValueError: a word in a bracket (slurmd's "Invalid switches" for
`Switches=leaf[a-c]`), lo > hi, a negative number, an empty bracket, a
bracket that does not close, more than 65,536 names from one range. A stray
"]" or a "[" inside a bracket, which Slurm would take as part of a name no
host can have, is refused too. Pure.
"""

from __future__ import annotations

import re

# Slurm's MAX_RANGE and MAX_PREFIX_CNT (src/common/hostlist.h): past them hostlist_create gives up.
MAX_RANGE = 64 * 1024
_TOKEN = re.compile(r"\[([^\[\]]*)\]|([^\[\]]+)|(.)")


def split_items(text: str) -> list[str]:
    """The items of a hostlist: split on commas, spaces and tabs outside brackets (Slurm's _next_tok)."""
    items, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if ch in ", \t" and depth <= 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    return [x for x in [*items, cur] if x]


def _numbers(inner: str, item: str) -> list[str]:
    """The numbers of one bracket's inside, as strings of their width: "08-10,3" -> ["08", "09", "10", "3"]."""
    if not inner:
        raise ValueError(f"an empty bracket in {item!r}")
    out: list[str] = []
    for part in inner.split(","):
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise ValueError(f"{part!r} in {item!r} is not a number or a range of numbers")
        first, last = int(lo), int(hi) if dash else int(lo)
        if first > last:
            raise ValueError(f"{part!r} in {item!r} runs backwards")
        if last - first + 1 > MAX_RANGE:
            raise ValueError(f"{part!r} in {item!r} names more than {MAX_RANGE} hosts")
        out += [f"{k:0{len(lo)}d}" for k in range(first, last + 1)]
    return out


def expand_item(item: str) -> list[str]:
    """One item (no separator outside brackets) as names, in Slurm's order."""
    names = [""]
    for m in _TOKEN.finditer(item):
        inner, text, stray = m.groups()
        if stray is not None:
            raise ValueError(f"unbalanced brackets in {item!r}")
        if text is not None:
            names = [n + text for n in names]
            continue
        nums = _numbers(inner, item)
        if len(names) * len(nums) > MAX_RANGE:
            raise ValueError(f"{item!r} names more than {MAX_RANGE} hosts")
        names = [n + k for n in names for k in nums]
    return names


def expand(hostlist: str) -> list[str]:
    """A Slurm hostlist expression as names, in order; ValueError (saying why) for one Slurm would refuse."""
    out: list[str] = []
    for item in split_items(hostlist):
        out += expand_item(item)
    return out
