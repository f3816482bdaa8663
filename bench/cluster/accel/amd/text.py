"""amd-smi's text output read into one dict per GPU: each "KEY: value" line under the sections above it.

    from bench.cluster.accel.amd.text import blocks
    gpus = blocks(open("amd-smi-static.txt").read())     # {0: {("ASIC", "MARKET_NAME"): "MI300A", ...}, 1: ...}

amd-smi prints "GPU: N" at column 0 and each level 4 spaces further in
(static, metric, list, monitor -h's blocks); "CPU: N" blocks (an APU's host
sockets) are not GPUs and are skipped. A paste of several commands keeps its
shell prompts: a prompt running `amd-smi ... -g N` opens GPU N for the lines
that follow (a `grep -A` of one section, without its "GPU:" line), another
command's prompt closes it (gpuctl's or curl's output is not amd-smi's).
"""

from __future__ import annotations

import re

_OPEN = re.compile(r"^(GPU|CPU):\s*(\d+)\s*$")
_PROMPT = re.compile(r"^(?:\[[^\]]+\]|[\w.@:~/-]+)\s?[#$]\s+(?P<cmd>.*)$")  # "[root@host ~]# cmd", "user@h:~$ cmd"
_NA = {"", "n/a", "na", "none", "<redacted>", "not supported"}


def value(v: str | None) -> str | None:
    """A reading, None for N/A, a redaction and the like."""
    return None if v is None or v.strip().lower() in _NA else v.strip()


def number(v: str | None) -> float | None:
    m = re.match(r"\s*(-?\d+(?:\.\d+)?)", v or "")
    return float(m.group(1)) if m else None


def blocks(text: str) -> dict[int, dict[tuple[str, ...], str]]:
    """{GPU index: {(section, ..., key): value}} in the order printed."""
    out: dict[int, dict[tuple[str, ...], str]] = {}
    current: dict | None = None
    stack: list[tuple[int, str]] = []
    for line in text.splitlines():
        if m := _PROMPT.match(line):
            g = re.search(r"(?:-g|--gpu)\s+(\d+)", m.group("cmd"))
            current = out.setdefault(int(g.group(1)) if g else 0, {}) if "amd-smi" in m.group("cmd") else None
            stack = []
            continue
        if m := _OPEN.match(line):
            current = out.setdefault(int(m.group(2)), {}) if m.group(1) == "GPU" else None
            stack = []
            continue
        if not line.strip() or ":" not in line:
            continue
        if current is None:
            if stack or out or not line.startswith(" "):
                continue
            current = out.setdefault(0, {})   # an excerpt of one GPU's sections, without its "GPU:" line
        indent = len(line) - len(line.lstrip(" "))
        key, _, v = (p.strip() for p in line.strip().partition(":"))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = tuple(k for _, k in stack) + (key,)
        if v:
            current[path] = v
        else:
            stack.append((indent, key))
    return out


def section(d: dict[tuple[str, ...], str], name: str) -> dict[str, dict[str, str]]:
    """Every sub-block of section `name` (ECC_BLOCKS' UMC, SDMA, ...), wherever it sits: {block: {key: value}}.
    A grep excerpt that cut the section's own line still gives its blocks (keys under any name)."""
    out: dict[str, dict[str, str]] = {}
    for path, v in d.items():
        if len(path) >= 2 and (name in path[:-2] or len(path) == 2):
            out.setdefault(path[-2], {})[path[-1]] = v
    return out


def get(d: dict[tuple[str, ...], str], *path: str) -> str | None:
    """The value at the path's end, under whatever sections precede it (an excerpt may lack the top ones)."""
    for p, v in d.items():
        if p[-len(path):] == path:
            return value(v)
    return None
