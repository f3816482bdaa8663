"""bench.render.metrics_file: records as Prometheus text, read back by prometheus_client's parser.

Real runs write and parse it too (tests/multiproc/test_run.py, test_comm.py,
tests/multihost/test_validate.py).
"""

from __future__ import annotations

import os

from bench.core import results
from bench.render import metrics_file
from tests.conftest import cli
from tests.metrics_check import parse, values


def _validate_record() -> dict:
    return results.make_record(
        "validate", "ok", run_id="validate-1", result="WARN", level="quick", hosts=["n1", "n2"],
        checks=[{"check": "throughput", "node": "n1", "status": "PASS"},
                {"check": "throughput", "node": "n2", "status": "WARN"},
                {"check": "scaling", "node": "cluster", "status": "SKIP"}],
        measured={"node_images_per_s": {"n1": 100.0, "n2": 80.0}, "node_busbw": {"n1": 5e8, "n2": 4e8},
                  "gpu_model": {"n1": "NVIDIA H200", "n2": 'odd "name"\\'}, "dp": {"world_size": 2,
                                                                                  "images_per_s": 170.0}})


def test_validate_checks_are_0_1_gauges_and_skips_are_left_out(tmp_path):
    rec = _validate_record()
    path = tmp_path / "v.prom"
    metrics_file.write(str(path), rec)
    got = parse(path.read_text())
    assert values(got, "vitbench_validate_check", node="n1") == [1.0]
    assert values(got, "vitbench_validate_check", node="n2", status="WARN") == [0.0]
    assert values(got, "vitbench_validate_check", check="scaling") == []
    assert values(got, "vitbench_node_images_per_second", host="n1", gpu_model="NVIDIA H200") == [100.0]
    assert values(got, "vitbench_node_images_per_second", gpu_model='odd "name"\\') == [80.0]  # escaped, read back
    assert values(got, "vitbench_cluster_images_per_second", world_size="2") == [170.0]
    (stamp,) = values(got, "vitbench_record_timestamp_seconds")
    assert abs(stamp - os.path.getmtime(path)) < 120
    assert os.listdir(tmp_path) == ["v.prom"]  # no temporary left


def test_a_run_record_per_rank(tmp_path):
    from tests.unit.test_compare import run

    rec = run(250.0)
    rec["provenance"]["devices"] = [{"rank": 0, "host": "n1", "device": "NVIDIA H200"},
                                    {"rank": 1, "host": "n2", "device": "NVIDIA H200"}]
    got = parse(metrics_file.text(rec))
    assert values(got, "vitbench_images_per_second") == [rec["figures"]["images_per_s"]]
    assert values(got, "vitbench_rank_images_per_second", host="n2", rank="1", gpu_model="NVIDIA H200") == \
        [rec["figures"]["images_per_s_per_rank"][1]]
    assert sorted(values(got, "vitbench_step_seconds")) == sorted(
        rec["figures"]["step_s"][k] for k in ("mean", "median", "p90"))


def test_a_metrics_file_in_a_missing_folder_is_bad_input(tmp_path):
    proc = cli("--gpus", "2", "--dataset", "synthetic", "--metrics-file", str(tmp_path / "no" / "x.prom"),
               "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and proc.stderr.startswith(f"bench run: error: --metrics-file: {tmp_path / 'no'} is not")
    assert not (tmp_path / "out").exists()
