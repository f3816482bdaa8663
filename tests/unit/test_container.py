"""bench.container and the container launches in bench.launch: detection, --container-exec, exact argv.

The argv assertions are whole-list equality (ReFrame's launcher tests): a
reordered or missing word is a different command on a cluster. The last two
tests hand the argv to DeepSpeed's own runner code (parser, OpenMPIRunner,
PDSHRunner), so a DeepSpeed upgrade that changes either shows here.
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import sys

import pytest

from bench.cluster import container
from bench.cluster.mpirun import mpirun_args
from bench.launch import plan as launch
from bench.launch.base import LaunchPlan
from bench.launch.environment import runner_exports
from bench.core.config import RunConfig
from bench.core.errors import BadInput
from tests.conftest import assert_bad_input, cli

HOSTS = {"10.0.0.1": [0, 1], "10.0.0.2": [0, 1]}
ENV = {"PATH": "/usr/bin:/bin", "GLOO_SOCKET_IFNAME": "ib0", "HOME": "/root"}
SIF = "/shared/vit.sif"
IN_IMAGE = dict(ENV, APPTAINER_CONTAINER=SIF, SINGULARITY_CONTAINER=SIF, APPTAINER_NAME="vit.sif")


# --- detection ----------------------------------------------------------------------------------------------
def test_detects_apptainer_from_its_environment(tmp_path):
    ce = container.detect(IN_IMAGE)
    assert ce == container.ContainerExec(argv=("apptainer", "exec", SIF), python=sys.executable,
                                         source="APPTAINER_CONTAINER", in_container=True)
    assert ce.prefix("/shared/results") == ["apptainer", "exec", "-B", "/shared/results", SIF]


def test_nv_is_the_nodes_choice_not_the_launching_nodes(tmp_path):
    # The login node of the openmpi recipe has no GPU and no driver bound in: the prefix it detects has no
    # --nv, but the probes enter with it (a GPU node is seen as one) and so do the ranks once the nodes'
    # inventory made the device cuda; a CPU plan stays without.
    assert container.detect(IN_IMAGE).argv == ("apptainer", "exec", SIF)
    assert container.remote_python(None, IN_IMAGE)[:3] == ["apptainer", "exec", "--nv"]
    gpu = launch.build(HOSTS, "openmpi", str(tmp_path / "r"), "cuda", master_port=29501, environ=IN_IMAGE)
    cpu = launch.build(HOSTS, "openmpi", str(tmp_path / "r"), "cpu", master_port=29501, environ=IN_IMAGE)
    assert gpu.container == ["apptainer", "exec", "-B", str(tmp_path), "--nv", SIF]
    assert cpu.container == ["apptainer", "exec", "-B", str(tmp_path), SIF]
    # A prefix written with its own driver binding is kept as written.
    own = container.resolve(f"apptainer exec --nvccli {SIF}", ENV).with_nv()
    assert own.argv == ("apptainer", "exec", "--nvccli", SIF)


def test_a_dry_run_from_a_gpu_less_node_plans_the_gpu_nodes_with_nv(tmp_path, monkeypatch, capsys):
    # Recorded T4 inventory for the nodes (tests/fixtures/gpu/nvidia-smi_t4x5.txt); this node has no GPU.
    from bench.cluster.hostfile import HostSelection
    from bench.cluster.hetero import verdict
    from bench.core.config import RunConfig
    from bench.jobs import train
    from tests.unit.test_hetero import node

    hf = tmp_path / "hf"
    hf.write_text("10.0.0.1 slots=1\n10.0.0.2 slots=1\n")
    nodes = [dict(node(h, "nvidia-smi_t4x5.txt"), slots=[0]) for h in ("10.0.0.1", "10.0.0.2")]
    for k, v in IN_IMAGE.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi here
    doc = train.dry_run(RunConfig(dataset="synthetic", launcher="openmpi", out=str(tmp_path / "out")),
                        HostSelection(hostfile=str(hf)), inspected=(nodes, verdict(nodes)))
    assert doc["plan"]["device"] == "cuda"
    assert doc["plan"]["container"] == ["apptainer", "exec", "-B", str(tmp_path / "out"), "--nv", SIF]


def test_singularity_when_only_singularity_says_so(tmp_path):
    env = dict(ENV, SINGULARITY_CONTAINER=SIF)
    ce = container.detect(env)
    assert ce.argv == ("singularity", "exec", SIF) and ce.source == "SINGULARITY_CONTAINER"


def test_no_container_no_prefix(tmp_path):
    assert container.detect(ENV) is None
    assert container.resolve(None, ENV) is None


def test_relative_image_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ce = container.detect(dict(ENV, APPTAINER_CONTAINER="vit.sif"))
    assert ce.image == str(tmp_path / "vit.sif")


def test_image_path_a_shell_would_split_is_refused(tmp_path):
    with pytest.raises(BadInput, match="APPTAINER_CONTAINER: .*--container-exec"):
        container.detect(dict(ENV, APPTAINER_CONTAINER="/my images/vit.sif"))


# --- --container-exec ---------------------------------------------------------------------------------------
def test_explicit_prefix_from_a_host_install_uses_the_images_python():
    ce = container.resolve("apptainer exec --nv /nodes/vit.sif", ENV)
    assert ce == container.ContainerExec(argv=("apptainer", "exec", "--nv", "/nodes/vit.sif"), python="python",
                                         source="--container-exec", in_container=False)


def test_explicit_prefix_inside_the_image_overrides_detection(tmp_path):
    ce = container.resolve("/usr/bin/singularity exec /nodes/vit.sif", IN_IMAGE)
    assert ce.argv == ("/usr/bin/singularity", "exec", "/nodes/vit.sif")
    assert ce.python == sys.executable and ce.in_container


def test_none_turns_detection_off(tmp_path):
    assert container.resolve("none", IN_IMAGE) is None


def test_long_bind_becomes_short():
    assert container.parse("apptainer exec --bind /a --bind=/b:/c x.sif") == (
        "apptainer", "exec", "-B", "/a", "-B", "/b:/c", "x.sif")


@pytest.mark.parametrize("text,needle", [
    ("docker exec vitbench", "docker cannot start a rank per node"),
    ("podman run vitbench", "podman cannot"),
    ("bash -c 'apptainer exec x.sif'", "first word must be apptainer or singularity"),
    ("apptainer run x.sif", 'expected "apptainer exec [OPTIONS] IMAGE"'),
    ("apptainer exec", 'expected "apptainer exec'),
    ("apptainer exec x.sif --nv", "last word must be the image"),
    ("apptainer exec $(touch /tmp/p) x.sif", "'$(touch' has characters"),
    ("apptainer exec x.sif;reboot", "has characters"),
    ("apptainer exec 'x.sif", "cannot split"),
    ("", "empty"),
])
def test_bad_container_exec_names_the_option(text, needle):
    with pytest.raises(BadInput, match=r"^--container-exec: ") as e:
        RunConfig(container_exec=text)
    assert needle in str(e.value)


def test_bad_container_exec_on_the_command_line_is_one_line_exit_2(tmp_path):
    proc = cli("--container-exec", "docker exec node1", "--dataset", "synthetic", "--dry-run",
                 "--out", str(tmp_path))
    assert_bad_input(proc, "--container-exec", "docker")


# --- launch argv with a prefix --------------------------------------------------------------------------------
def _explicit(launcher: str, run_dir: str, env: dict[str, str] = ENV, hosts=HOSTS) -> LaunchPlan:
    return launch.build(hosts, launcher, run_dir, "cpu", master_addr="10.0.0.1", master_port=29501, environ=env,
                        container_exec=f"apptainer exec --nv {SIF}")


def test_openmpi_runs_the_container_binary_as_the_script(tmp_path):
    run_dir = str(tmp_path / "run1")
    lp = _explicit("openmpi", run_dir)
    assert lp.argv == [
        "mpirun", "-n", "4", "-hostfile", f"{run_dir}/hostfile", "--mca", "btl", "^openib",
        "--bind-to", "none", "--oversubscribe", "--mca", "btl_tcp_if_include", "ib0",
        "-x", "UCX_TLS=tcp", "-x", f"PYTHONPATH={run_dir}", "-x", "OMP_NUM_THREADS=1",
        "-x", "TORCH_EXTENSIONS_DIR=/root/.cache/vitbench/torch_extensions",
        "-x", f"PATH={sys.prefix}/bin:/usr/bin:/bin", "-x", "DS_ACCELERATOR=cpu", "-x", "GLOO_SOCKET_IFNAME=ib0",
        "apptainer", "exec", "-B", str(tmp_path), "--nv", SIF,
        "python", "-u", "-m", "bench.worker", "--run-dir", run_dir,
    ]  # fmt: skip
    assert lp.container == ["apptainer", "exec", "-B", str(tmp_path), "--nv", SIF]


def test_pdsh_runs_benchs_node_launcher_inside_the_image(tmp_path):
    run_dir = str(tmp_path / "run1")
    lp = _explicit("pdsh", run_dir)
    world_info = base64.urlsafe_b64encode(json.dumps(HOSTS).encode()).decode()
    assert lp.argv == [
        "pdsh", "-S", "-f", "1024", "-w", "10.0.0.1,10.0.0.2",
        f"export PYTHONPATH={run_dir}; export OMP_NUM_THREADS=1; "
        "export TORCH_EXTENSIONS_DIR=/root/.cache/vitbench/torch_extensions; "
        f"export PATH={sys.prefix}/bin:/usr/bin:/bin; export DS_ACCELERATOR=cpu; export GLOO_SOCKET_IFNAME=ib0; "
        f"cd {run_dir}; apptainer exec -B {tmp_path} --nv {SIF} python -u -m bench.launch.node "
        f"--world-info={world_info} --node-rank=%n --master-addr=10.0.0.1 --master-port=29501 "
        f"bench.worker --run-dir {run_dir}",
    ]  # fmt: skip
    assert lp.env["PDSH_RCMD_TYPE"] == "ssh"


def test_slurm_starts_each_task_inside_the_image(tmp_path):
    run_dir = str(tmp_path / "run1")
    lp = _explicit("slurm", run_dir)
    assert lp.argv == [
        "srun", "-n", "4", "--nodes", "2", "--distribution=arbitrary", "--kill-on-bad-exit=1", "--export=ALL",
        "apptainer", "exec", "-B", str(tmp_path), "--nv", SIF, "python", "-u", "-m", "bench.worker",
        "--run-dir", run_dir,
    ]  # fmt: skip
    assert lp.env["GLOO_SOCKET_IFNAME"] == "ib0"  # in srun's own environment: no .deepspeed_env


def test_slurm_in_the_image_places_uneven_ranks_by_its_task_list(tmp_path):
    lp = _explicit("slurm", str(tmp_path / "r"), hosts={"n1": [0, 1], "n2": [0]})
    assert lp.argv[:5] == ["srun", "-n", "3", "--nodes", "2"] and "--distribution=arbitrary" in lp.argv
    assert lp.files == {str(tmp_path / "r" / "slurm-tasks"): "n1\nn1\nn2\n"}


def test_detected_image_inside_the_container(tmp_path):
    run_dir = str(tmp_path / "run1")
    lp = launch.build(HOSTS, "openmpi", run_dir, "cpu", master_port=29501, environ=IN_IMAGE)
    assert lp.argv[-11:] == ["apptainer", "exec", "-B", str(tmp_path), SIF, sys.executable, "-u", "-m",
                             "bench.worker", "--run-dir", run_dir]
    # Its PATH is the image's: the nodes' own PATH must find apptainer.
    assert "PATH" not in lp.env_file and lp.env_file["GLOO_SOCKET_IFNAME"] == "ib0"


def test_from_a_host_install_the_path_still_travels(tmp_path):
    lp = _explicit("openmpi", str(tmp_path / "run1"))
    assert lp.env_file["PATH"] == f"{sys.prefix}/bin:/usr/bin:/bin"


def test_one_node_needs_no_prefix(tmp_path):
    lp = launch.build({"localhost": [0, 1]}, "local", str(tmp_path / "r"), "cpu", environ=IN_IMAGE,
                      container_exec=f"apptainer exec {SIF}")
    assert lp.container is None and "apptainer" not in lp.argv and lp.argv[-3:-2] == ["bench.worker"]


def test_openmpi_inside_the_image_refuses_this_node(tmp_path):
    with pytest.raises(BadInput, match="--launcher openmpi: localhost is this node.*--launcher pdsh"):
        launch.build({"localhost": [0], "10.0.0.2": [0]}, "openmpi", str(tmp_path / "r"), "cpu", environ=IN_IMAGE)


# --- DeepSpeed's own runner code reads these commands as intended ------------------------------------------
def test_openmpi_command_is_deepspeeds_own(tmp_path, monkeypatch):
    """bench writes the mpirun command DeepSpeed's runner would: OpenMPIRunner.get_cmd, given the runner options
    bench passed it before (hostfile, --launcher_args, --module) and the same exports, gives the same words; in
    the image, the runner's --no_python form (the prefix as its script) gives what bench writes there."""
    from deepspeed.launcher.multinode_runner import OpenMPIRunner
    from deepspeed.launcher.runner import encode_world_info, parse_args

    run_dir = tmp_path / "run1"
    run_dir.mkdir()
    monkeypatch.chdir(run_dir)
    pool = {h: len(s) for h, s in HOSTS.items()}
    for lp, tail in ((launch.build(HOSTS, "openmpi", str(run_dir), "cpu", master_addr="10.0.0.1", master_port=29501,
                                   environ=ENV), ["--module", "bench.worker", "--run-dir", str(run_dir)]),
                     (_explicit("openmpi", str(run_dir)), ["--no_python", *_explicit("openmpi", str(run_dir)).argv[
                         -11 - 1:]])):
        args = parse_args(["--hostfile", str(run_dir / "hostfile"), "--launcher", "openmpi", "--master_addr",
                           "10.0.0.1", "--master_port", "29501", "--no_ssh_check", "--launcher_args",
                           shlex.join(mpirun_args(lp.env)), *tail])
        runner = OpenMPIRunner(args, encode_world_info(HOSTS), pool)
        for k, v in runner_exports(lp.env, lp.env_file, str(run_dir), "cpu").items():
            runner.add_export(k, v)
        assert runner.get_cmd({}, HOSTS) == lp.argv


def test_pdsh_command_is_deepspeeds_own_but_for_the_node_launcher(tmp_path, monkeypatch):
    """bench writes the pdsh command DeepSpeed's runner would: PDSHRunner.get_cmd, given the runner options bench
    passed it before (hostfile, --include, --module) and the same exports, gives the same exports, `cd` and world,
    with launch.py where bench has its node launcher and a venv `source` bench does not need (the interpreter is
    named by path, PATH exported); in the image, the interpreter is the image's."""
    from deepspeed.launcher.multinode_runner import PDSHRunner
    from deepspeed.launcher.runner import encode_world_info, parse_args

    run_dir = tmp_path / "run1"
    run_dir.mkdir()
    monkeypatch.chdir(run_dir)  # DeepSpeed's `cd` is its own working directory: execute() starts it in the run dir
    plain = launch.build(HOSTS, "pdsh", str(run_dir), "cpu", master_addr="10.0.0.1", master_port=29501,
                         environ=ENV)
    ours = _explicit("pdsh", str(run_dir))
    activate = os.path.join(os.path.dirname(sys.executable), "activate")
    args = parse_args(["--hostfile", str(run_dir / "hostfile"), "--launcher", "pdsh", "--master_addr", "10.0.0.1",
                       "--master_port", "29501", "--include", "10.0.0.1:0,1@10.0.0.2:0,1", "--no_ssh_check",
                       "--venv_script", activate, "--module", "bench.worker", "--run-dir", str(run_dir)])
    runner = PDSHRunner(args, encode_world_info(HOSTS))
    for k, v in runner_exports(plain.env, plain.env_file, str(run_dir), "cpu").items():
        runner.add_export(k, v)
    env: dict[str, str] = {}
    cmd, _, _ = runner.get_cmd(env, HOSTS)
    assert env == {"PDSH_RCMD_TYPE": "ssh"} and plain.env["PDSH_RCMD_TYPE"] == "ssh"
    assert plain.argv[:6] == ours.argv[:6] == cmd[:6] == ["pdsh", "-S", "-f", "1024", "-w", "10.0.0.1,10.0.0.2"]
    theirs = shlex.split(" ".join(cmd[6:]))
    assert theirs[:2] == ["source", f"{activate};"]
    at = theirs.index(sys.executable)
    mine = shlex.split(plain.argv[6])
    assert mine[:at - 2] == theirs[2:at]  # the exports and the `cd`, word for word
    node = {"--world_info": "--world-info", "--node_rank": "--node-rank", "--master_addr": "--master-addr",
            "--master_port": "--master-port"}
    their_node = [node[w.split("=")[0]] + "=" + w.split("=", 1)[1] for w in theirs[at + 4:at + 8]]
    assert mine[at - 2:] == [sys.executable, "-u", "-m", "bench.launch.node", *their_node, *theirs[at + 10:]]
    assert theirs[at:at + 4] == [sys.executable, "-u", "-m", "deepspeed.launcher.launch"]
    assert theirs[at + 8:at + 10] == ["--module", "--enable_each_rank_log=None"]
    inside = shlex.split(ours.argv[6])
    image = [*ours.container, "python", "-u", "-m", "bench.launch.node"]
    assert inside[at - 2:at - 2 + len(image)] == image


def test_remote_python_for_other_remote_commands():
    assert container.remote_python(None, ENV) == [sys.executable]
    inside = container.remote_python(None, IN_IMAGE)
    assert inside[:3] == ["apptainer", "exec", "--nv"] and inside[-2:] == [SIF, sys.executable]
    assert container.remote_python(f"singularity exec {SIF}", ENV) == ["singularity", "exec", "--nv", SIF, "python"]
    assert container.remote_python("none", IN_IMAGE) == [sys.executable]
