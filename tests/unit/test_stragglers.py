"""Straggler statistics say what they come from: how many GPUs, ranks or nodes were compared, of how many steps."""

from __future__ import annotations

from bench.analysis import stragglers


def test_each_straggler_names_how_many_it_was_compared_with_and_of_how_many_steps():
    ranks = {("n1", 0): 0.10, ("n1", 1): 0.11, ("n2", 0): 0.30}
    g = stragglers.from_slots("rank", ranks, steps=7)
    assert (g.compared, g.steps) == (3, 7)
    assert g.reason.endswith("(3 ranks compared, each of 7 step(s))")
    alone = stragglers.from_slots("gpu", {("a", 0): 0.2, ("c", 0): 0.5})
    assert (alone.compared, alone.steps) == (2, None) and alone.reason.endswith("(2 GPUs compared)")
    found = stragglers.find(rank_compute_s=ranks, gpu_step_s={("a", 0): 0.2, ("b", 0): 0.2, ("c", 0): 0.2},
                            node_busbw={"a": 1e9, "b": 1e9, "c": 1e5}, grad_bytes=1e6, n=3, rank_steps=20,
                            gpu_steps=10)
    assert {s.kind: (s.compared, s.steps) for s in found} == {"rank": (3, 20), "gpu": (3, 10), "link": (3, None)}
    assert all("compared" in s.to_dict()["reason"] for s in found)
