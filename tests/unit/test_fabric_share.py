"""The fabric's cluster row reports the share pairs across leaves run at, "the fabric's oversubscription as measured".
A leaf whose uplinks are slow is named by its own row; its pairs are not the fabric's share. With three leaves of two
(tests/multihost/test_validate_leaves.py's shape, here on the scale fixtures' fabric model), four of the six pairs
across leaves cross the slow leaf, so a median over all of them is that leaf's figure: on a 1:1 fabric with leaf00's
uplinks at a tenth the row said "pairs across leaves run at 10% of those inside"."""

from __future__ import annotations

import pytest

from tests import scale_fixtures as sf


def _validate(tmp_path, fabric: sf.Fabric) -> dict:
    from bench.cluster.hostfile import HostSelection
    from bench.validate import stages
    from bench.validate.config import ValidateConfig

    cluster = sf.Cluster(6, fabric=fabric, bad={})
    cfg = ValidateConfig(level="quick", checks=("inter-node",), out=str(tmp_path / "results"),
                         topology=cluster.topology(str(tmp_path)), drain_file=str(tmp_path / "drain.txt"))
    with pytest.MonkeyPatch.context() as mp:
        cluster.install(mp.setattr)
        return stages.validate(cfg, HostSelection(hostfile=cluster.hostfile(str(tmp_path))))


def test_a_slow_leaf_is_not_the_fabrics_measured_oversubscription(tmp_path):
    rec = _validate(tmp_path, sf.Fabric(leaf_size=2, uplink={0: 0.1}))
    leaves = {c["node"]: c for c in rec["checks"] if c["check"] == "fabric" and c["host"] is None}
    assert leaves["leaf00"]["status"] == "FAIL", leaves["leaf00"]
    figs = rec["measured"]["fabric"]
    # 1:1 apart from leaf00, whose pairs its own row explains: the fabric runs its pairs across leaves at full speed.
    assert figs["across"] / figs["inside"] > 0.9, (figs, leaves["cluster"]["reason"])
