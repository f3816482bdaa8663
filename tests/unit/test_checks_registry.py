"""bench validate's checks are one registry (issue 54 item 1): the stages, --checks' choices and help, each level's
checks, --dcgm auto's levels, --soak's rounds, the per-GPU launch's phases, the plan's stages and docs/validate.md's
table of checks are all made from bench.validate.checks. Pure: no launch, no rank, well under a second."""

from __future__ import annotations

import configparser
import dataclasses
import os

from bench.validate import checks
from bench.validate.checks import docs, launches
from bench.validate.checks.base import FULL_AND_QUICK, NODES_AND_CLUSTER, Check, Phase

ROOT = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir)


def test_the_docs_table_of_checks_is_the_registrys():
    with open(docs.DOC) as f:
        text = f.read()
    got = docs.in_doc(text)
    assert got is not None, f"docs/validate.md lost its markers {docs.BEGIN!r} ... {docs.END!r}"
    assert got == docs.table(), ("docs/validate.md's table of checks differs from bench/validate/checks: run "
                                 "python -m bench.validate.checks.docs --write")
    # Every check has its row, and the rows that are not --checks choices say whose rows they are.
    for name in checks.names():
        assert f"\n| {name} | " in got
    assert "| matmul (rows of numerics) |" in got and "| fabric (rows of inter-node) |" in got


def test_stages_config_levels_soak_and_help_are_made_from_the_registry():
    from bench.validate import soak, stages
    from bench.validate.config import CHECKS, DCGM_AUTO, LEVELS, ValidateConfig

    assert checks.problems() == []
    assert [n for n, _ in stages.STAGES] == list(checks.names())
    assert [f for _, f in stages.STAGES] == [c.runner() for c in checks.REGISTRY]
    assert stages.ALWAYS == ("preflight", "inventory") == checks.always()
    assert CHECKS == checks.choices() and not set(CHECKS) & set(stages.ALWAYS)
    for level, lv in LEVELS.items():
        assert lv.checks == checks.of_level(level), level
    assert set(LEVELS) == {lv for c in checks.REGISTRY for lv in c.levels}
    assert DCGM_AUTO is checks.get("dcgm").by_level and ValidateConfig(level="full").dcgm_level() == 3
    assert [n for n, _ in soak.ROUND] == [c.name for c in checks.soak_round()]
    said = next(f.metadata["help"] for f in dataclasses.fields(ValidateConfig) if f.name == "checks")
    assert all(c in said for c in CHECKS) and "preflight and inventory always run" in said


def test_the_drain_reasons_words_are_each_checks_action():
    from bench.validate.verdicts import CHECK_ACTION

    assert CHECK_ACTION["throughput"] == checks.get("throughput").action and CHECK_ACTION["matmul"].startswith(
        "drain: the GPU's matmul")
    assert set(CHECK_ACTION) == {c.name for c in checks.REGISTRY if c.action} | {"matmul", "baseline"}


def test_the_per_gpu_launchs_phases_are_those_its_wanted_checks_ride():
    from bench.validate.config import ValidateConfig

    def phases(**kw) -> list[str]:
        return [p.name for p in checks.phases(ValidateConfig(**kw).wanted, launches.PER_GPU.name)]

    assert phases(level="full") == ["numerics", "copies", "burn"]
    assert phases(level="quick", checks=("memory",)) == ["copies"]  # memory rides the copies' phase
    assert phases(level="quick", checks=("throughput",)) == []
    spec = launches.COPIES.spec(ValidateConfig(), "cuda")
    assert spec == {"host_mb": 256, "memory_mb": 1024, "iters": 10, "lock": launches.LOCK_STEM}
    assert launches.BURN.spec(ValidateConfig(level="quick"), "cpu") is None  # no burn at quick without --burn


# A check of its own: one declaration, seen by every list made from a registry (here a registry given, since the
# module's is read once at import).
NEW = Check(name="nvlink-domain",
            phase=Phase(name="nvlink-domain", launch=launches.PER_GPU, spec=lambda cfg, device: {"gpus": "all"},
                        cost=lambda p: 1.0, words=lambda p: ", the NVLink domain"),
            runs="bench.validate.copies:copies", skip=NODES_AND_CLUSTER,
            what="every GPU of the domain at once", judged="the domain's peers")


def test_a_declaration_states_only_what_differs_from_the_defaults():
    # NEW names no levels, launch or soak: quick and full, its phase's launch, and a --soak round (that launch's).
    assert NEW.levels == FULL_AND_QUICK and NEW.launch is launches.PER_GPU and NEW.soak
    bare = Check(name="scaling", launch=launches.NONE, what="w", judged="j", plan="judged from what was measured")
    assert bare.runs == "bench.validate.scaling:scaling" and bare.skip == (("", "nodes"),) and not bare.soak
    from bench.analysis import references
    from bench.validate import budget, tree
    from bench.validate.config import ValidateConfig

    p = budget.Planner(ValidateConfig(level="quick"), {"a": [0, 1]}, "pdsh", references.load(), tree.Found(None))
    bare.planned(p)  # a plan of words: one stage launching nothing
    assert [(s["stage"], s["launches"], s["how"]) for s in p.stages] == [
        ("scaling", 0, "judged from what was measured")]
    try:
        Check(name="orphan", what="w", judged="j")
    except TypeError as e:
        assert "neither a launch nor a phase" in str(e)
    else:
        raise AssertionError("a check with no launch and no phase was accepted")


def test_a_new_check_is_one_declaration_in_every_list():
    reg = checks.REGISTRY + (NEW,)
    assert checks.names(reg)[-1] == "nvlink-domain" and "nvlink-domain" in checks.choices(reg)
    assert "nvlink-domain" in checks.of_level("full", reg) and "nvlink-domain" not in checks.of_level("prolog", reg)
    assert [p.name for p in checks.phases(lambda n: True, "per-gpu", reg)][-1] == "nvlink-domain"
    assert ("| nvlink-domain | quick, full | the per-GPU launch (throughput's), its nvlink-domain phase | every GPU "
            "of the domain at once | the domain's peers | the row's reason |") in docs.table(reg)
    assert checks.problems(reg + (dataclasses.replace(NEW, levels=("nightly",)),)) == [
        "nvlink-domain: registered twice", "nvlink-domain: no level 'nightly'"]


def test_the_plan_is_each_checks_plan_in_the_registrys_order(monkeypatch):
    from bench.analysis import references
    from bench.validate import budget
    from bench.validate.config import ValidateConfig

    def plan(p) -> None:
        p.none("nvlink-domain", "judged from the inventory", looks=1)

    monkeypatch.setattr(checks, "REGISTRY", checks.REGISTRY[:2] + (
        dataclasses.replace(NEW, always=True, plan=plan),) + checks.REGISTRY[2:])
    got = budget.plan(ValidateConfig(level="quick"), {"a": [0, 1], "b": [0, 1]}, "pdsh", references.load())
    names = [s["stage"] for s in got["stages"]]
    assert names[:4] == ["preflight", "inventory", "nvlink-domain", "health"], names
    assert got["stages"][2]["timeout_s"] > 0 and got["second_looks"]["launches"] >= 1


def test_skip_rows_follow_each_checks_declaration():
    from bench.analysis import references
    from bench.cluster.hostfile import HostSelection
    from bench.validate.config import ValidateConfig
    from bench.validate.stages import skip
    from bench.validate.state import Validation

    def rows(name: str) -> list[tuple[str, str]]:
        v = Validation(ValidateConfig(), HostSelection(), {"a": [0], "b": [0]}, references.load(), "/nonexistent")
        skip(v, name, "not asked for")
        return [(c.check, c.node) for c in v.checks]

    assert rows("inventory") == [("inventory", "a"), ("inventory", "b"), ("heterogeneity", "cluster")]
    assert rows("inter-node") == [("inter-node", "a"), ("inter-node", "b"), ("inter-node", "cluster")]
    assert rows("memory") == [("memory", "a"), ("memory", "b")] and rows("copies") == [("copies", "a"), ("copies", "b")]
    assert rows("training") == [("training", "cluster")] and rows("rails") == rows("dcgm") == []


def test_the_registry_imports_no_other_validate_module_the_contract_says_so():
    """.importlinter's checks-registry contract forbids every module of bench/validate but pairing and pair_kind (pure;
    pairing imports it): a new module there is forbidden too, or config, made from the registry, could import itself in
    a cycle."""
    ini = configparser.ConfigParser()
    ini.read(os.path.join(ROOT, ".importlinter"))
    forbidden = set(ini["importlinter:contract:checks-registry"]["forbidden_modules"].split())
    here = {f"bench.validate.{f[:-3]}" for f in os.listdir(os.path.join(ROOT, "bench", "validate"))
            if f.endswith(".py") and f not in ("__init__.py", "pairing.py", "pair_kind.py")}
    assert here == forbidden, sorted(here ^ forbidden)
