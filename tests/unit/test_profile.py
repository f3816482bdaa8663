"""A site profile (--config FILE, or $BENCH_CONFIG): what a site has, set once, under every command's options.

Every test here is a dry-run or a refusal in this process (bench.cli.main): nothing is launched, no host reached.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import assert_bad_input, cli

CONTAINER = "apptainer exec --nv /images/bench.sif"


@pytest.fixture()
def site(tmp_path):
    """A site's folder: its hostfile of two nodes and its profile, naming the hostfile relative to itself."""
    (tmp_path / "hosts").write_text("node1 slots=2\nnode2 slots=2\n")
    profile = tmp_path / "site.toml"
    profile.write_text(f'hostfile = "hosts"\nlauncher = "pdsh"\ncontainer-exec = "{CONTAINER}"\n'
                       f'master_addr = "10.0.0.1"\nout = "results"\n[run]\ndataset = "synthetic"\n'
                       f'[validate]\ntimeout = "20m"\n')
    return tmp_path


def env_with(profile) -> dict:
    import os
    return {**os.environ, "BENCH_CONFIG": str(profile)}


def test_a_profile_drives_run_and_validate_with_no_option_on_the_command_line(site, tmp_path_factory):
    away = tmp_path_factory.mktemp("elsewhere")    # started from another folder: the profile's paths are its own
    run = cli("run", "--dry-run", env=env_with(site / "site.toml"), cwd=str(away))
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    cfg, plan = doc["config"], doc["plan"]
    assert (cfg["launcher"], cfg["container_exec"], cfg["master_addr"]) == ("pdsh", CONTAINER, "10.0.0.1")
    assert cfg["out"] == str(site / "results") and plan["master_addr"] == "10.0.0.1"
    assert list(plan["resources"]) == ["node1", "node2"] and "pdsh" in doc["command"]
    assert f"--hostfile {site / 'hosts'}  ({site / 'site.toml'} ($BENCH_CONFIG))" in run.stderr

    val = cli("validate", "--dry-run", "--json", env=env_with(site / "site.toml"), cwd=str(away))
    assert val.returncode == 0, val.stderr
    launch = json.loads(val.stdout)["launch"]
    assert launch == {"launcher": "pdsh", "hosts": ["node1", "node2"], "container_exec": CONTAINER,
                      "master_addr": "10.0.0.1", "timeout_s": 1200.0}
    assert "--timeout 1200.0" in val.stderr     # [validate]'s own key, in seconds


def test_the_command_line_overrides_the_profile_and_says_so(site):
    proc = cli("run", "--config", str(site / "site.toml"), "--dry-run", "--launcher", "openmpi", "--master-addr",
               "10.9.9.9")
    assert proc.returncode == 0, proc.stderr
    cfg = json.loads(proc.stdout)["config"]
    assert (cfg["launcher"], cfg["master_addr"], cfg["container_exec"]) == ("openmpi", "10.9.9.9", CONTAINER)
    assert "--launcher openmpi  (command line)" in proc.stderr
    assert f"--container-exec {CONTAINER}  ({site / 'site.toml'})" in proc.stderr


def test_config_before_the_command_is_the_commands(site):
    proc = cli("--config", str(site / "site.toml"), "validate", "--dry-run", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["launch"]["master_addr"] == "10.0.0.1"
    assert_bad_input(cli("--config", str(site / "site.toml"), "valdate"), "'valdate' is not a command")


def test_a_this_node_level_leaves_the_profiles_cluster_out(site):
    proc = cli("validate", "--level", "prolog", "--dry-run", env=env_with(site / "site.toml"))
    assert proc.returncode == 0, proc.stderr
    assert "--level prolog checks this node: --hostfile of" in proc.stderr
    assert_bad_input(cli("validate", "--level", "prolog", "--hostfile", str(site / "hosts"), "--dry-run"),
                     "--level prolog: checks this node only")


@pytest.mark.parametrize("text,needles", [
    ('launcher = "ssh2"\n', ["site.toml: launcher", "'ssh2' is not one of local, pdsh, openmpi, slurm"]),
    ('frobnicate = 1\n', ["site.toml: frobnicate: no bench command has --frobnicate"]),
    ('num-gpus = 1\n', ["site.toml: num-gpus: --num-gpus is now --gpus: a profile uses the current name"]),
    ('[run]\nlevel = "full"\n', ["site.toml: [run] level: bench run has no --level"]),
    ('[runn]\nsteps = 3\n', ["site.toml: [runn]: not a command"]),
    ('steps = "many"\n', ["site.toml: steps", "'many'"]),
    ('eval = "yes"\n', ["site.toml: eval: a flag takes true or false"]),
    ('launcher = \n', ["site.toml: not a TOML profile", "line 1"]),
    ('timeout = "-5"\n', ["site.toml: timeout: '-5' is not a time span"]),
    ('timeout = 0\n', ["--timeout: must be > 0", "(from ", "site.toml"]),
    # Misspelled: said with the name meant; under another command's table too, found by any command.
    ('lancher = "pdsh"\n', ["site.toml: lancher: no bench command has --lancher (did you mean launcher?)"]),
    ('[validate]\nlevl = "full"\n', ["site.toml: [validate] levl: bench validate has no --levl (did you mean level?)"]),
    # Of the wrong type: a table, a number or an array for a path, a date.
    ('master-addr = {host = "a"}\n', ["site.toml: master-addr: takes a value as on the command line"]),
    ('hostfile = 3\n', ["site.toml: hostfile: takes a path (a TOML string), got 3"]),
    ('out = ["a", "b"]\n', ["site.toml: out: takes a path (a TOML string)"]),
    ('[run]\ntimeout = 2026-01-01\n', ["site.toml: [run] timeout: takes a value as on the command line, got the "
                                        "TOML date 2026-01-01"]),
])
def test_a_bad_profile_is_one_line_naming_the_file_and_the_key(tmp_path, text, needles):
    (tmp_path / "site.toml").write_text(text)
    assert_bad_input(cli("run", "--config", str(tmp_path / "site.toml"), "--dataset", "synthetic", "--dry-run"),
                     *needles)


def test_a_missing_profile_is_named(tmp_path):
    assert_bad_input(cli("hosts", env=env_with(tmp_path / "nope.toml")), "--config", "nope.toml")


def test_keys_of_other_commands_are_theirs_and_lists_are_arrays(site):
    (site / "site.toml").write_text('hostfile = "hosts"\nzero-stage = 2\nlevel = "full"\n'
                                    '[sweep]\nmicro-batches = [16, 32]\n')
    hosts = cli("hosts", "--json", "--config", str(site / "site.toml"))   # has --hostfile, not --zero-stage
    assert hosts.returncode == 0, hosts.stderr
    assert json.loads(hosts.stdout)["nodes"] == 2
    sweep = cli("sweep", "batch", "--dry-run", "--json", "--dataset", "synthetic", "--config", str(site / "site.toml"))
    assert sweep.returncode == 0, sweep.stderr
    assert "--micro-batches 16,32" in sweep.stderr and "--zero-stage 2" in sweep.stderr


def test_the_operator_pages_profile_drives_validate_and_run(tmp_path):
    """docs/operator.md's profile, as written, in a site folder with the project's hostfiles: both commands take
    the hostfile, launcher, container and master address from it, with no option but --dry-run."""
    import os
    import shutil

    from tests.unit.test_docs import REPO, code_blocks

    with open(os.path.join(REPO, "docs", "operator.md")) as f:
        block = next(b for b in code_blocks(f.read()) if any(line.strip().startswith("hostfile =") for _, line in b))
    (tmp_path / "site.toml").write_text("\n".join(line[4:] for _, line in block) + "\n")
    shutil.copytree(os.path.join(REPO, "hostfiles"), tmp_path / "hostfiles")
    from bench.cluster.hostfile import parse_hostfile

    hosts = list(parse_hostfile(str(tmp_path / "hostfiles" / "vector")))
    env = env_with(tmp_path / "site.toml")
    val = cli("validate", "--dry-run", "--json", env=env, cwd=str(tmp_path))
    assert val.returncode == 0, val.stderr
    launch = json.loads(val.stdout)["launch"]
    assert (launch["launcher"], launch["hosts"], launch["master_addr"]) == ("pdsh", hosts, "10.0.0.1")
    assert launch["container_exec"].startswith("apptainer exec")
    run = cli("run", "--dry-run", env=env, cwd=str(tmp_path))
    assert run.returncode == 0, run.stderr
    plan = json.loads(run.stdout)["plan"]
    assert (list(plan["resources"]), plan["launcher"], plan["master_addr"]) == (hosts, "pdsh", "10.0.0.1")


def test_validates_master_address_is_where_the_first_node_leads_and_other_launches_meet_at_their_own(tmp_path):
    """A site's --master-addr names its first node (rank 0 of `bench run`): validate's launches that node leads
    meet there; a pair launch of the second and third nodes meets at the second, as without a master address
    (on main every launch got it, and the pair's ranks would dial an address where none of them listens)."""
    from bench.cluster.hostfile import HostSelection
    from bench.launch.plan import build
    from bench.validate.config import ValidateConfig
    from bench.validate.state import Validation

    v = Validation(ValidateConfig(master_addr="10.0.0.9"), HostSelection(),
                   {"n1": [0, 1], "n2": [0, 1], "n3": [0, 1]}, None, str(tmp_path), launcher="pdsh")
    assert v.run_config(["n1", "n2", "n3"], 5).master_addr == "10.0.0.9"
    assert v.run_config(["n2", "n3"], 5).master_addr is None
    pair = {"n2": [0], "n3": [0]}
    lp = build(pair, "pdsh", str(tmp_path / "run"), "cpu", master_addr=v.master_addr_for(list(pair)),
               environ={"PATH": "/usr/bin"}, container_exec="none")
    assert lp.master_addr == "n2"
    led = build({"n1": [0], "n3": [0]}, "pdsh", str(tmp_path / "run2"), "cpu",
                master_addr=v.master_addr_for(["n1", "n3"]), environ={"PATH": "/usr/bin"}, container_exec="none")
    assert led.master_addr == "10.0.0.9"


def test_the_record_keeps_where_each_value_came_from(tmp_path):
    """A real `bench validate` with nothing on its command line (--health-from: one node's saved counters, a
    real ROCm 6.0.2 rocm-smi JSON from tests/fixtures/amd, no launch): the record says which options the
    profile set, in the record printed and in results.jsonl (on main neither had "sources")."""
    import shutil
    from pathlib import Path

    from bench.core import results

    amd = Path(__file__).resolve().parents[1] / "fixtures" / "amd"

    node = tmp_path / "site" / "node7"
    node.mkdir(parents=True)
    shutil.copyfile(amd / "rocm-smi-json_mi100-x4_rocm6.0.2.json", node / "rocm-smi.json")
    profile = tmp_path / "site" / "site.toml"
    profile.write_text('[validate]\nhealth-from = "node7"\nout = "results"\njson = true\n')
    got = cli("validate", env=env_with(profile), cwd=str(tmp_path))
    assert got.returncode == 0, got.stderr
    rec = json.loads(got.stdout)
    where = f"{profile} ($BENCH_CONFIG)"
    assert rec["sources"] == {"health_from": where, "out": where, "json": where}
    (kept,) = results.read(f"{rec['run_dir']}/results.jsonl").records
    results.validate(kept)
    assert kept["sources"] == rec["sources"] and rec["run_dir"].startswith(str(tmp_path / "site" / "results"))
