"""bench.worker.model_states.peak: the total is what a rank held at one instant, not a sum of maxima."""

from __future__ import annotations

from bench.worker.model_states import CATEGORIES, peak


def _m(params: int, grads: int, master: int = 0, opt: int = 0, buffers: int = 0) -> dict:
    cats = {"params": params, "grads": grads, "master_params": master, "optimizer_states": opt}
    return {**cats, "buffers": buffers, "total": sum(cats.values()), "by_device": {"cpu": sum(cats.values())},
            "how": "storages"}


def test_the_total_is_the_largest_instant_and_the_categories_stay_their_own_maxima():
    # Two micro steps of one rank: gradients held at the first, freed (moved to a partition) at the second.
    first, second = _m(100, 80, master=0, opt=10), _m(100, 20, master=60, opt=10)
    got = peak([first, second])
    # Before: 100 + 80 + 60 + 10 = 250, held at no instant; the largest instant is the first, 190.
    assert got["total"] == 190
    assert got["at_largest"] == {"params": 100, "grads": 80, "master_params": 0, "optimizer_states": 10}
    assert {c: got[c] for c in CATEGORIES} == {"params": 100, "grads": 80, "master_params": 60,
                                               "optimizer_states": 10}
    assert "each category its own largest" in got["measured_at"]


def test_one_measurement_is_its_own_peak():
    got = peak([_m(4, 4, 0, 8, buffers=3)])
    assert got["total"] == 16 and got["buffers"] == 3 and got["at_largest"]["optimizer_states"] == 8
    assert peak([]) == {}
