"""DCGM's diagnostic (`dcgmi diag -r N -j`) run under a deadline, and its JSON or saved table read as findings.

    from bench.cluster.accel.nvidia.dcgm import diag, findings, parse_json, parse_table, run, timeout_for
    text, why, expected = run(level=1, timeout=120.0)   # (stdout, None, True) or (None, "dcgmi not installed", False)
    d = diag(level=2, timeout=timeout_for(2))         # the same, with its seconds and whether it ran past them
    results, runtime_error = parse_json(text)          # [DiagResult(category, test, gpu_index, status, messages)]
    findings(results)                                  # dcgm-fail / dcgm-warn, DCGM's own message in "what"

JSON of both layouts (DCGM's nvvs/include/NvvsJsonStrings.h and dcgmi/Diag.cpp):
3.x, {"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests": [{"name",
"results": [{"gpu_ids": "0,1" or 0, "status": "PASS", "warnings": [...], "info"}]}]}],
"version"}}; 4.x, {"DCGM Diagnostic": {"test_categories": [... {"name", "results":
[{"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Pass",
"warnings": [{"warning", "error_id", ...}], "info": [...]}], "test_summary":
{"status"}}]}, "runtime_error"}. A warning is a string (older 3.x) or an object with
"warning". Statuses are matched without case. Text before the first "{" (dcgmi may
print a line first) is skipped. The saved table of both versions (3.x "Fail - GPU: 0",
"Pass - GPUs: 1, 2", "Fail - All"; 4.x "Fail" with "GPU0: Pass" lines) gives the same
records; its cells wrap at a fixed width and are joined back. A DCGM GPU id is the
NVML index unless DCGM was told otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field

from bench.cluster.findings import finding

SOURCE = "dcgm"
_STATUS = {"pass": "pass", "fail": "fail", "warn": "warn", "warning": "warn", "skip": "skip", "skipped": "skip",
           "not run": "skip", "error": "fail"}  # fmt: skip


@dataclass(slots=True)
class DiagResult:
    category: str | None
    test: str
    gpu_index: int | None        # None: the test as a whole (DCGM named no GPU)
    status: str                  # "pass", "fail", "warn", "skip"
    messages: list[str] = field(default_factory=list)


def status(word: str) -> str:
    """DCGM's status word ("PASS", "Fail", "Skip", "Warn", ...) in one spelling; unknown words read as "fail"."""
    return _STATUS.get(word.strip().lower(), "fail")


# How long each level runs, as NVIDIA's dcgmi reference says ("dcgmi diag", -r: 1 "normally lasting seconds",
# 2 "approximately two minutes", 3 "approximately 15 minutes"; docs.nvidia.com/datacenter/dcgm/latest/reference/
# command-line-reference/dcgmi/dcgmi-diag.html). Level 1's "seconds" is taken as a minute. Level 4 has no
# documented length ("extended"), so bench does not run it. A node's dcgmi may take twice this (TIMEOUT_FACTOR)
# before it is unknown: the documented lengths are typical ones, on the GPUs NVIDIA measured.
DOCUMENTED_S = {1: 60.0, 2: 120.0, 3: 900.0}
TIMEOUT_FACTOR = 2.0


def timeout_for(level: int) -> float:
    """The seconds a node's `dcgmi diag -r level` may take: twice its documented length."""
    return DOCUMENTED_S[level] * TIMEOUT_FACTOR


@dataclass(slots=True)
class Diag:
    """What one `dcgmi diag -r N -j` gave: its JSON text, or why none (expected=False: dcgmi not installed)."""

    text: str | None
    why: str | None
    expected: bool
    seconds: float
    timed_out: bool = False


def diag(level: int, timeout: float) -> Diag:
    """Run `dcgmi diag -r level -j` for at most timeout seconds; past it, dcgmi and its children are killed."""
    exe = shutil.which("dcgmi")
    if exe is None:
        return Diag(None, "dcgmi not installed", False, 0.0)
    argv = [exe, "diag", "-r", str(level), "-j"]
    t0 = time.monotonic()
    try:
        # Its own process group: a timeout kills what it started too, not only dcgmi.
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as e:
        return Diag(None, f"dcgmi: {e.strerror or e}", True, 0.0)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        return Diag(None, f"DCGM level {level} did not finish in {timeout:g} s", True, time.monotonic() - t0,
                    timed_out=True)
    took = time.monotonic() - t0
    # dcgmi exits non-zero when a test fails: its JSON is the answer all the same.
    if "{" in out:
        return Diag(out, None, True, took)
    first = ((err or out).strip().splitlines() or ["no output"])[0]
    return Diag(None, f"dcgmi diag exited {p.returncode}: {first}", True, took)


def run(level: int, timeout: float) -> tuple[str | None, str | None, bool]:
    """(JSON text, None, True) or (None, why, expected): expected=False only where dcgmi is not installed."""
    d = diag(level, timeout)
    return d.text, d.why, d.expected


def report_into(r, level: int, text: str | None, why: str | None, expected: bool) -> None:
    """What one dcgmi run gave, into a health report (bench.cluster.health.report.Report): its findings and what
    was read, else why nothing was."""
    if text is None:
        r.not_read(SOURCE, why, expected)
        return
    try:
        results, runtime_error = parse_json(text)
    except (ValueError, AttributeError) as e:
        r.not_read(SOURCE, f"dcgmi diag -r {level} -j printed no diagnostic JSON ({e})", True)
        return
    if runtime_error:
        r.not_read(SOURCE, f"DCGM's runtime error: {runtime_error}", True)
    r.add(findings(results))
    r.read_ok(SOURCE, f"dcgmi diag -r {level}: {len(results)} test result(s)")


def _messages(items) -> list[str]:
    if isinstance(items, str):
        return [items]
    return [i.get("warning", "") if isinstance(i, dict) else str(i) for i in items or ()]


def _gpus(result: dict) -> list[int | None]:
    if "entity_id" in result:
        return [int(result["entity_id"])] if result.get("entity_group", "GPU") == "GPU" else []
    ids = result.get("gpu_ids")
    if ids is None:
        return [None]
    return [int(x) for x in str(ids).split(",") if x.strip().isdigit()] or [None]


def parse_test(test: dict, category: str | None = None) -> list[DiagResult]:
    """One test object of either layout as records (per GPU, and one for the whole test if it says more)."""
    out = []
    for r in test.get("results") or ():
        if not isinstance(r, dict):
            continue
        for gpu in _gpus(r):
            out.append(DiagResult(category, test.get("name", "?"), gpu, status(r.get("status", "")),
                                  _messages(r.get("warnings"))))  # fmt: skip
    summary = test.get("test_summary") or {}
    if summary.get("status") and (status(summary["status"]) in ("fail", "warn") or summary.get("warnings")):
        out.append(DiagResult(category, test.get("name", "?"), None, status(summary["status"]),
                              _messages(summary.get("warnings"))))  # fmt: skip
    return out


def parse_json(text: str) -> tuple[list[DiagResult], str | None]:
    """(records, DCGM's runtime error or None). Raises ValueError when the text holds no DCGM diagnostic JSON."""
    doc = json.loads(text[text.index("{"):] if "{" in text else text)
    root = doc.get("DCGM Diagnostic") or doc.get("DCGM GPU Diagnostic")
    if not isinstance(root, dict):
        raise ValueError("no 'DCGM Diagnostic' or 'DCGM GPU Diagnostic' object")
    out = [res for cat in root.get("test_categories") or () if isinstance(cat, dict)
           for test in cat.get("tests") or () if isinstance(test, dict)
           for res in parse_test(test, cat.get("category"))]  # fmt: skip
    return out, root.get("runtime_error") or doc.get("runtime_error")


def _cell(line: str) -> tuple[str, str] | None:
    """(name, content) of a table row; the content keeps its own spaces, less the cell's one-space margins."""
    parts = line.split("|")
    if len(parts) < 3 or not line.startswith("|") or parts[1].startswith("-"):
        return None
    body = parts[2][1:]
    return parts[1].strip(), (body[:-2] if line.rstrip().endswith("|") and body.endswith("  ") else body.rstrip())


def _status_line(text: str, count: int | None) -> list[tuple[int | None, str]]:
    """"Fail - GPU: 0", "Pass - GPUs: 1, 2", "Skip - All", "GPU0: Pass", "Pass" -> [(gpu, status)]."""
    text = text.strip()
    if m := re.match(r"^GPU ?(\d+): (\w+)", text):
        return [(int(m.group(1)), status(m.group(2)))]
    word, _, rest = text.partition(" - ")
    if rest.strip() == "All":
        return [(i, status(word)) for i in range(count)] if count else [(None, status(word))]
    ids = [int(x) for x in re.findall(r"\d+", rest)]
    return [(i, status(word)) for i in ids] or [(None, status(word))]


def parse_table(text: str) -> list[DiagResult]:
    """The table `dcgmi diag` prints (DCGM 3.x or 4.x) as records, with each warning joined back from its cells."""
    count = None
    rows: list[list] = []   # [name, content] with continuation cells appended to the row they continue
    category = last_test = None
    for line in text.splitlines():
        if m := re.match(r"^[+|]-+\s+(\w[\w ]*?)\s+-+[+|]", line):
            category = m.group(1)
            continue
        cell = _cell(line)
        if cell is None:
            continue
        name, content = cell
        if name == "GPU Device IDs Detected":
            count = len([x for x in content.split(",") if x.strip()])
        if name:
            rows.append([category, name, content])
            last_test = rows[-1] if name not in ("Warning", "Error", "Info") else last_test
        elif last_test is not None and rows[-1] is not last_test and re.match(r"^GPU ?\d+: \w+", content.strip()):
            last_test.append(content)  # 4.x: the per-GPU status lines come after the test's warnings
        elif rows:
            rows[-1].append(content)
    out: list[DiagResult] = []
    test = None
    for category, name, *cells in rows:
        if category == "Metadata" or name in ("Diagnostic", "Info"):
            continue
        if name in ("Warning", "Error"):
            msg = " ".join("".join(cells).split())
            m = re.match(r"^GPU ?(\d+)\b", msg)
            gpu = int(m.group(1)) if m else None
            target = next((r for r in reversed(out) if r.test == (test or name) and r.gpu_index == gpu), None)
            if target is None:  # an Error row with no test row above it (the deployment checks)
                target = DiagResult(category, test or category or name, gpu, "fail" if name == "Error" else "warn")
                out.append(target)
            target.messages.append(msg)
            continue
        test = name
        # A test's status cell, then one cell per further status line ("Fail - GPU: 0", "GPU0: Pass").
        for gpu, st in [s for c in cells for s in _status_line(c, count)]:
            out.append(DiagResult(category, name, gpu, st))
    return out


def findings(results: list[DiagResult], source: str = SOURCE) -> list[dict]:
    """dcgm-fail per (test, GPU) that failed, dcgm-warn per warning; a test's messages for all GPUs go with each."""
    out = []
    for r in results:
        shared = [m for x in results if x.test == r.test and x.gpu_index is None and x is not r for m in x.messages]
        if r.status == "fail" or (r.status == "pass" and r.messages and r.gpu_index is not None):
            code = "dcgm-fail" if r.status == "fail" else "dcgm-warn"
        elif r.status == "warn":
            code = "dcgm-warn"
        else:
            continue
        if r.status == "fail" and r.gpu_index is None and any(x.test == r.test and x.gpu_index is not None and
                                                                x.status == "fail" for x in results):  # fmt: skip
            continue  # the test's own line; its failing GPUs are reported one by one
        where = f"GPU {r.gpu_index}" if r.gpu_index is not None else "the node"
        msgs = "; ".join(r.messages + shared) or "DCGM gave no message"
        out.append(finding(code, source, f"dcgmi diag {r.category or ''}/{r.test}: {r.status} on {where}: {msgs}",
                           gpu_index=r.gpu_index))  # fmt: skip
    return out
