"""A corpus of malformed inputs: each is exit 2, one stderr line, no traceback, nothing launched.

Every case runs `python -m bench ...` as a real process, as a user would,
with its own --out under tmp_path, and then checks that nothing was
started: no record, no plan, no rank log, no marker file from an injected
command. The inputs cover hostfiles, include/exclude specs, environment
values that would reach `.deepspeed_env`, user DeepSpeed JSON, run options,
CIFAR data dirs and result files.
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bench.core import results, synthetic
from bench.core.config import RunConfig
from tests.conftest import assert_bad_input, cli


@dataclass
class Case:
    """args/env may hold {d} (the case's tmp dir); setup(d) writes the bad input."""

    id: str
    args: list[str]
    needle: str                      # what the one line must name: file:line or --option
    setup: Callable[[Path], None] | None = None
    env: dict[str, str] = field(default_factory=dict)
    known_bug: str = ""              # an open bug elsewhere: the case runs as a strict xfail


def _write(name: str, data: str | bytes) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        (d / name).write_bytes(data if isinstance(data, bytes) else data.encode())
    return setup


def _hostfile(text: str | bytes) -> Callable[[Path], None]:
    return _write("hf", text)


GOOD_HOSTS = "node1 slots=2\nnode2 slots=2\n"


def _hosts_case(id: str, text: str | bytes, needle: str = "{d}/hf:1") -> Case:
    return Case(id, ["hosts", "--hostfile", "{d}/hf"], needle, _hostfile(text))


def _spec_case(id: str, extra: list[str], needle: str) -> Case:
    # Through `bench run`: the filters are checked before any host is contacted.
    return Case(id, ["run", "--hostfile", "{d}/hf", "--dataset", "synthetic", *extra], needle, _hostfile(GOOD_HOSTS))


def _env_case(id: str, key: str, value: str) -> Case:
    # A forwarded variable ends up in .deepspeed_env, which a remote shell reads: --dry-run
    # resolves the launch without reaching any host.
    return Case(id, ["run", "--hostfile", "{d}/hf", "--dataset", "synthetic", "--dry-run"],
                f"environment: {key}", _hostfile(GOOD_HOSTS), env={key: value})


def _topology_case(id: str, text: str | bytes, needle: str) -> Case:
    # Refused when validate prepares, before any node is reached (a hostfile of hosts nobody could reach).
    def setup(d: Path) -> None:
        _hostfile(GOOD_HOSTS)(d)
        _write("topology.conf", text)(d)
    return Case(id, ["validate", "--hostfile", "{d}/hf", "--topology", "{d}/topology.conf", "--out", "{d}/out"],
                needle, setup)


def _ds_case(id: str, text: str, needle: str = "{d}/ds.json") -> Case:
    return Case(id, ["--gpus", "2", "--dataset", "synthetic", "--deepspeed-config", "{d}/ds.json"], needle,
                _write("ds.json", text))


def _cifar(corrupt: Callable[[Path], None]) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        folder = Path(synthetic.write_cifar(str(d / "data"), "cifar10", n_train=50, n_test=10))
        corrupt(folder)
    return setup


def _pickle_to(name: str, obj: object) -> Callable[[Path], None]:
    def corrupt(folder: Path) -> None:
        (folder / name).write_bytes(pickle.dumps(obj, protocol=2))
    return corrupt


class _Evil:
    """Unpickling this runs `touch marker`: the loader must refuse before calling anything."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _evil_pickle(folder: Path) -> None:
    marker = folder.parent.parent / "marker"
    (folder / "data_batch_1").write_bytes(pickle.dumps({"data": _Evil(str(marker))}, protocol=2))


def _truncate(name: str) -> Callable[[Path], None]:
    def corrupt(folder: Path) -> None:
        p = folder / name
        p.write_bytes(p.read_bytes()[:100])
    return corrupt


def _data_case(id: str, corrupt: Callable[[Path], None], needle: str = "--data-dir") -> Case:
    return Case(id, ["--gpus", "2", "--dataset", "cifar10", "--data-dir", "{d}/data"], needle, _cifar(corrupt))


# A whole record of a failed run, as the schema wants it (read() skips one that does not match).
_RECORD = json.dumps(results.make_record(
    "run", "failed", run_id="x", config=RunConfig().to_dict(), duration_s=1.0,
    plan={"world_size": 2, "nodes": 1, "resources": {"localhost": [0, 1]}, "launcher": "local", "device": "cpu",
          "command": ["python"]},
    provenance={"bench_version": "0.1.0", "git_revision": None, "hosts": ["localhost"], "devices": [],
                "versions": {"torch": None, "deepspeed": None, "timm": None}, "env": {}},
    error={"where": "launcher", "reason": "a test record"}))

CASES: list[Case] = [
    # --- hostfiles ------------------------------------------------------------------
    _hosts_case("host-proxycommand", "-oProxyCommand=touch${IFS}{d}/marker slots=1\n"),
    _hosts_case("host-semicolon", "node1;touch${IFS}{d}/marker slots=1\n"),
    _hosts_case("host-command-substitution", "$(touch {d}/marker) slots=1\n"),
    _hosts_case("host-backtick", "`touch {d}/marker` slots=1\n"),
    _hosts_case("host-user-at", "root@node1 slots=1\n"),
    _hosts_case("host-ipv6-zone-injection", "fe80::1%$(reboot) slots=1\n"),
    _hosts_case("host-numeric-not-quad", "010.0.0.1 slots=1\n"),
    _hosts_case("slots-zero", "node1 slots=0\n"),
    _hosts_case("slots-trailing-junk", "node1 slots=4x\n"),
    _hosts_case("slots-huge", "node1 slots=99999999\n"),
    _hosts_case("slots-missing", "node1\n"),
    _hosts_case("slots-misspelt", "node1 gpus=2\n"),
    _hosts_case("extra-word", "node1 slots=2 node2\n"),
    _hosts_case("duplicate-host", "node1 slots=1\n# two entries for one machine\nNODE1 slots=1\n", "{d}/hf:3"),
    _hosts_case("only-comments", "# nothing here\n\n", "{d}/hf"),
    _hosts_case("not-utf8", b"node1 slots=1\nn\xffde2 slots=1\n", "{d}/hf:2"),
    _hosts_case("binary-too-big", b"x" * ((1 << 20) + 10), "--hostfile"),
    Case("hostfile-missing", ["hosts", "--hostfile", "{d}/nope"], "--hostfile"),
    Case("hostfile-is-dir", ["hosts", "--hostfile", "{d}"], "--hostfile"),
    # The same hostfile through `bench run` and `bench probe`: refused before ssh.
    Case("run-hostfile-proxycommand", ["run", "--hostfile", "{d}/hf", "--dataset", "synthetic"], "{d}/hf:1",
         _hostfile("-oProxyCommand=touch${IFS}{d}/marker slots=1\n")),
    Case("probe-hostfile-proxycommand", ["probe", "--hostfile", "{d}/hf"], "{d}/hf:1",
         _hostfile("-oProxyCommand=touch${IFS}{d}/marker slots=1\n")),
    # --- include / exclude / counts ---------------------------------------------------
    _spec_case("include-unknown-host", ["--include", "node9"], "--include"),
    _spec_case("include-missing-slot", ["--include", "node1:7"], "--include"),
    _spec_case("include-bad-slot", ["--include", "node1:a"], "--include"),
    _spec_case("include-proxycommand", ["--include", "node1@-oProxyCommand=touch${IFS}{d}/marker"], "--include"),
    _spec_case("include-shell", ["--include", "node1;touch {d}/marker"], "--include"),
    _spec_case("include-and-exclude", ["--include", "node1", "--exclude", "node2"], "--exclude"),
    _spec_case("exclude-everything", ["--exclude", "node1@node2"], "--exclude"),
    _spec_case("num-nodes-zero", ["--num-nodes", "0"], "--num-nodes"),
    _spec_case("num-nodes-too-many", ["--num-nodes", "3"], "--num-nodes"),
    _spec_case("launcher-local-many-hosts", ["--launcher", "local"], "--launcher local"),
    Case("exclude-without-hostfile", ["run", "--exclude", "node1", "--dataset", "synthetic"], "--exclude"),
    # --- environment values that would reach .deepspeed_env ----------------------------
    _env_case("env-command-substitution", "NCCL_SOCKET_IFNAME", "$(touch {d}/marker)"),
    _env_case("env-backtick", "GLOO_SOCKET_IFNAME", "`touch {d}/marker`"),
    _env_case("env-semicolon", "NCCL_DEBUG", "WARN;touch {d}/marker"),
    _env_case("env-space", "NCCL_IB_HCA", "mlx5_0 mlx5_1"),
    _env_case("env-newline", "NCCL_DEBUG", "INFO\nLD_PRELOAD=/tmp/evil.so"),
    _env_case("env-dollar", "OMP_NUM_THREADS", "${HOME}"),
    # --- user DeepSpeed JSON ------------------------------------------------------------
    _ds_case("ds-not-json", '{"zero_optimization": {"stage": 1},\n "train_batch_size": }', "{d}/ds.json:2"),
    _ds_case("ds-array", "[1, 2, 3]"),
    _ds_case("ds-batch-string", '{"train_batch_size": "32"}'),
    _ds_case("ds-batch-bool", '{"train_micro_batch_size_per_gpu": true}'),
    _ds_case("ds-batch-negative", '{"gradient_accumulation_steps": -1}'),
    _ds_case("ds-zero-not-object", '{"zero_optimization": 3}'),
    _ds_case("ds-batch-inconsistent", '{"train_batch_size": 7}', "{d}/ds.json: train_batch_size is 7 but"),
    _ds_case("ds-precision-disagrees", '{"bf16": {"enabled": true}}', "{d}/ds.json: bf16.enabled is True but"),
    _ds_case("ds-accum-disagrees", '{"gradient_accumulation_steps": 2}', "{d}/ds.json: gradient_accumulation_steps is 2"),
    _ds_case("ds-empty-file", "", "{d}/ds.json:1"),
    # --- run options ----------------------------------------------------------------------
    Case("opt-micro-batch-zero", ["--micro-batch", "0"], "--micro-batch"),
    Case("opt-micro-batch-text", ["--micro-batch", "lots"], "--micro-batch"),
    Case("opt-steps-negative", ["--steps", "-1"], "--steps"),
    Case("opt-steps-and-epochs", ["--steps", "5", "--epochs", "1"], "--steps"),
    Case("opt-zero-stage-4", ["--zero-stage", "4"], "--zero-stage"),
    Case("opt-offload-stage-0", ["--offload"], "--offload"),
    Case("opt-offload-unknown", ["--zero-stage", "2", "--offload", "disk"], "--offload"),
    Case("opt-nvme-stage-2", ["--zero-stage", "2", "--offload", "nvme", "--nvme-path", "/tmp"], "--zero-stage 3"),
    Case("opt-nvme-no-path", ["--zero-stage", "3", "--offload", "nvme"], "--nvme-path"),
    Case("opt-fsdp2-zero", ["--engine", "fsdp2", "--zero-stage", "2"], "fsdp2 has no ZeRO"),
    Case("opt-fsdp2-fp16", ["--engine", "fsdp2", "--precision", "fp16"], "fsdp2 runs fp32 or bf16"),
    Case("opt-pipeline-zero-3", ["--pipeline-stages", "2", "--zero-stage", "3"], "--pipeline-stages"),
    Case("opt-pipeline-fsdp2", ["--pipeline-stages", "2", "--engine", "fsdp2"], "--pipeline-stages"),
    Case("opt-pipeline-zero", ["--pipeline-stages", "0"], "--pipeline-stages"),
    Case("opt-fp16-on-cpu", ["--dataset", "synthetic", "--precision", "fp16", "--device", "cpu"], "--precision fp16"),
    Case("opt-master-port", ["--master-port", "70000"], "--master-port"),
    Case("opt-timeout-zero", ["--timeout", "0"], "--timeout"),
    Case("opt-timeout-nan", ["--timeout", "nan"], "--timeout"),
    Case("opt-epochs-inf", ["--dataset", "synthetic", "--epochs", "inf", "--dry-run"], "--epochs"),
    Case("opt-lr-inf", ["--dataset", "synthetic", "--lr", "inf", "--dry-run"], "--lr"),
    Case("opt-fraction", ["--dataset-fraction", "1.5"], "--dataset-fraction"),
    Case("opt-ddp-zero", ["--engine", "ddp", "--zero-stage", "2"], "--engine"),
    Case("opt-unknown", ["--frobnicate"], "unrecognized"),
    Case("opt-launcher-no-hostfile", ["--launcher", "openmpi"], "--launcher"),
    Case("opt-out-not-writable", ["--dataset", "synthetic", "--out", "/proc/version/x"], "--out"),
    # --- bench validate: refused before any node is reached or any check runs ------------------
    Case("validate-threshold-word", ["validate", "--hostfile", "{d}/hf", "--threshold", "abc", "--out", "{d}/out"],
         "--threshold", _hostfile(GOOD_HOSTS)),
    Case("validate-threshold-over-100", ["validate", "--hostfile", "{d}/hf", "--threshold", "150%", "--out",
                                         "{d}/out"], "--threshold", _hostfile(GOOD_HOSTS)),
    Case("validate-prolog-threshold", ["validate", "--level", "prolog", "--threshold", "abc", "--out", "{d}/out"],
         "--threshold"),
    Case("validate-prolog-binary-reference", ["validate", "--level", "prolog", "--numerics-reference", "{d}/ref",
                                              "--out", "{d}/out"], "--numerics-reference",
         _write("ref", b"\x7fELF\x02\x01\x01\x00\xff\xfe")),
    Case("validate-launcher-outside-an-allocation", ["validate", "--launcher", "slurm", "--out", "{d}/out"],
         "--launcher slurm"),
    Case("validate-prolog-launcher", ["validate", "--level", "prolog", "--launcher", "openmpi", "--out", "{d}/out"],
         "--launcher"),
    Case("validate-health-from-missing", ["validate", "--health-from", "{d}/none", "--out", "{d}/out"], "{d}/none"),
    Case("validate-health-from-empty", ["validate", "--health-from", "{d}", "--out", "{d}/out"],
         "none of the files"),
    Case("validate-dcgm-level", ["validate", "--level", "health", "--dcgm", "4", "--out", "{d}/out"], "--dcgm"),
    # Issue 47: rails no interface or HCA can be called, a flag the level ignores, a dry run of a refused run.
    Case("validate-rails-empty-name", ["validate", "--hostfile", "{d}/hf", "--rails", "mlx5_0,,mlx5_1", "--out",
                                       "{d}/out"], "--rails: an empty name", _hostfile(GOOD_HOSTS)),
    Case("validate-rails-shell-word", ["validate", "--hostfile", "{d}/hf", "--rails", "mlx5_0;x", "--out",
                                       "{d}/out"], "--rails: 'mlx5_0;x'", _hostfile(GOOD_HOSTS)),
    Case("validate-rails-nccl-syntax", ["validate", "--hostfile", "{d}/hf", "--rails", "mlx5_0:1,^mlx5_1", "--out",
                                        "{d}/out"], "--rails: 'mlx5_0:1'", _hostfile(GOOD_HOSTS)),
    Case("validate-health-burn", ["validate", "--level", "health", "--burn", "3m", "--out", "{d}/out"],
         "--burn: nothing would use it"),
    Case("validate-health-rails", ["validate", "--level", "health", "--rails", "eth0,eth1", "--out", "{d}/out"],
         "--rails: nothing would use it"),
    Case("validate-dcgm-left-out-by-checks", ["validate", "--hostfile", "{d}/hf", "--dcgm", "2", "--checks",
                                              "throughput", "--out", "{d}/out"], "--dcgm: nothing would use it",
         _hostfile(GOOD_HOSTS)),
    Case("validate-dcgm-timeout-without-dcgm", ["validate", "--level", "health", "--dcgm-timeout", "60", "--out",
                                                "{d}/out"], "--dcgm-timeout"),
    Case("validate-dry-run-undrain-outside-slurm", ["validate", "--hostfile", "{d}/hf", "--undrain", "--dry-run",
                                                   "--out", "{d}/out"], "--undrain", _hostfile(GOOD_HOSTS)),
    Case("validate-since-job-outside-a-job", ["validate", "--level", "health", "--since-job", "--out", "{d}/out"],
         "--since-job"),
    Case("validate-since-not-a-time", ["validate", "--level", "health", "--since", "yesterday", "--out",
                                       "{d}/out"], "--since"),
    _topology_case("validate-topology-random-bytes", bytes(range(256)) * 3, "{d}/topology.conf:1: not text"),
    _topology_case("validate-topology-switch-twice", "SwitchName=s1 Nodes=node1\nSwitchName=s1 Nodes=node2\n",
                   "{d}/topology.conf:2: switch s1 is defined already"),
    _topology_case("validate-topology-switches-not-numbers",
                   "SwitchName=leafa Nodes=node1\nSwitchName=leafb Nodes=node2\nSwitchName=spine Switches=leaf[a-b]\n",
                   "{d}/topology.conf:3: Switches=leaf[a-b]"),
    # --- CIFAR data dirs ---------------------------------------------------------------------
    Case("data-missing", ["--gpus", "2", "--dataset", "cifar100", "--data-dir", "{d}/none"], "--data-dir"),
    _data_case("data-truncated", _truncate("data_batch_3")),
    _data_case("data-truncated-meta", _truncate("batches.meta")),
    _data_case("data-evil-pickle", _evil_pickle),
    _data_case("data-wrong-shape", _pickle_to("test_batch", {"data": b"\0" * 10, "labels": [0]})),
    _data_case("data-labels-out-of-range", _pickle_to("data_batch_2", {
        "data": __import__("numpy").zeros((2, 3072), "uint8"), "labels": [0, 10]})),
    _data_case("data-meta-wrong-classes", _pickle_to("batches.meta", {"label_names": ["a", "b"]})),
    _data_case("data-not-a-dict", _pickle_to("data_batch_1", [1, 2, 3])),
    _data_case("data-missing-file", lambda f: (f / "data_batch_5").unlink()),
]


def _fill(text: str, d: Path) -> str:
    return text.replace("{d}", str(d))


def _nothing_launched(d: Path, out: Path) -> None:
    assert not (d / "marker").exists(), "an injected command ran"
    # No run ran: no record, plan, config or log under --out (see test_no_run_dir_for_late_bad_input).
    left = [p for p in out.rglob("*") if p.is_file()] if out.exists() else []
    assert left == [], left


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=c.known_bug))
                                  if c.known_bug else c for c in CASES], ids=[c.id for c in CASES])
def test_bad_input(case: Case, tmp_path: Path) -> None:
    d = tmp_path
    if case.setup is not None:
        # Markers in hostfile text are written with the real path.
        orig = case.setup
        orig(d)
        hf = d / "hf"
        if hf.is_file() and hf.stat().st_size < 4096:
            hf.write_bytes(hf.read_bytes().replace(b"{d}", str(d).encode()))
    out = d / "out"
    args = [_fill(a, d) for a in case.args]
    if (args[0] == "run" or args[0].startswith("--")) and "--out" not in args:
        args += ["--out", str(out)]
    env = dict(os.environ, **{k: _fill(v, d) for k, v in case.env.items()})
    proc = cli(*args, env=env, timeout=120)
    assert_bad_input(proc, _fill(case.needle, d))
    assert proc.stdout == ""
    _nothing_launched(d, out)


def test_corpus_is_large():
    assert len(CASES) >= 40


@pytest.mark.parametrize("case", [c for c in CASES if c.id in ("ds-not-json", "ds-batch-inconsistent")],
                         ids=lambda c: c.id)
def test_no_run_dir_for_late_bad_input(case: Case, tmp_path: Path) -> None:
    case.setup(tmp_path)  # type: ignore[misc]
    out = tmp_path / "out"
    proc = cli(*[_fill(a, tmp_path) for a in case.args], "--out", str(out), timeout=120)
    assert proc.returncode == 2
    assert not out.exists() or not any(out.iterdir()), list(out.iterdir())


# --- result files -----------------------------------------------------------------------------

def test_torn_last_line_is_reported_and_skipped(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(_RECORD + "\n" + _RECORD[: len(_RECORD) // 2])
    got = results.read(str(path))
    assert len(got.records) == 1
    assert len(got.skipped) == 1 and got.skipped[0].startswith(f"{path}:2: ")


def test_unknown_schema_version_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    future = dict(json.loads(_RECORD), schema_version=99)
    path.write_text(_RECORD + "\n" + json.dumps(future) + "\n")
    with pytest.raises(Exception) as e:
        results.read(str(path))
    assert type(e.value).__name__ == "BadInput"
    msg = str(e.value)
    assert msg.startswith(f"{path}:2: ") and "99" in msg and "\n" not in msg


def _has_report() -> bool:
    from bench.cli import SUBCOMMANDS
    return "report" in SUBCOMMANDS


@pytest.mark.skipif(not _has_report(), reason="bench report (bench/report.py) does not exist yet")
@pytest.mark.parametrize("what", ["schema-99", "no-such-file"])
def test_bench_report_refuses_bad_result_files(what: str, tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    if what == "schema-99":
        path.write_text(json.dumps(dict(json.loads(_RECORD), schema_version=99)) + "\n")
        needle = f"{path}:1"
    else:
        path = tmp_path / "nope"
        needle = str(path)
    assert_bad_input(cli("report", str(path), timeout=120), needle)


@pytest.mark.skipif(not _has_report(), reason="bench report (bench/report.py) does not exist yet")
def test_bench_report_names_and_skips_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(_RECORD + "\n" + _RECORD[:40])
    proc = cli("report", str(path), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"{path}:2" in proc.stderr and "Traceback" not in proc.stderr


def test_a_record_that_does_not_match_the_schema_is_named_and_skipped(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    broken = dict(json.loads(_RECORD), status="ok")  # an ok run must carry its figures
    path.write_text(_RECORD + "\n" + json.dumps(broken) + "\n")
    got = results.read(str(path))
    assert [r["status"] for r in got.records] == ["failed"]
    assert got.skipped == [f"{path}:2: record does not match the schema, skipped (the record: "
                           "'figures' is a required property)"]
    proc = cli("report", str(path))
    assert proc.returncode == 0 and f"{path}:2: record does not match the schema" in proc.stderr
