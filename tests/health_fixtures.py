"""Where the health tests' recorded outputs are (tests/fixtures/health/SOURCES.md says where each came from)."""

from __future__ import annotations

from pathlib import Path

FIX = Path(__file__).resolve().parent / "fixtures"
HEALTH, GPU, NET = FIX / "health", FIX / "gpu", FIX / "net"


def text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def codes(findings: list[dict]) -> list[tuple]:
    """(code, severity, action, gpu_index) of each finding, in order."""
    return [(f["code"], f["severity"], f["action"], f["gpu_index"]) for f in findings]
