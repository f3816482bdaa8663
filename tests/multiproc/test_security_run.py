"""A real 2-rank run with secrets in its environment writes none of them anywhere (the run dir, stdout, stderr)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import FAST, bench
from tests.unit.test_security import SECRETS, _grep_tree


@pytest.mark.slow
def test_real_run_writes_no_secret_anywhere(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = dict(os.environ, **SECRETS)
    proc = bench("--gpus", "2", "--dataset", "synthetic", *FAST, "--steps", "6", "--timing-warmup", "2",
                 "--no-eval", "--timeout", "120", "--out", str(out), "--json", env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads(proc.stdout)
    assert rec["status"] == "ok"
    files = [p for p in out.rglob("*") if p.is_file()]
    assert any(p.name == "results.jsonl" for p in files) and any(p.name.startswith("rank") for p in files)
    # NCCL_* secrets included: DeepSpeed's launch.py logs every NCCL_* variable the ranks
    # inherit into logs/launcher.log, so bench does not forward secret-named ones.
    plain = list(SECRETS.values())
    assert _grep_tree(out, plain) == []
    assert not [v for v in plain if v in proc.stdout + proc.stderr]
