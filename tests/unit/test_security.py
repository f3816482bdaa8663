"""Security: no host name or spec reaches a shell, no command is a shell string,
no secret from the environment lands in a result, and the image runs as non-root
with no private key inside.

DeepSpeed 0.19.8 accepts `-oProxyCommand=touch${IFS}marker slots=1` as a host,
and its ssh check then runs the command (MISSION.md): every entry point of
bench that reads hosts must refuse such names before ssh, pdsh or mpirun.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

from bench.launch import plan as launch
from bench.core import provenance
from tests.conftest import assert_bad_input, cli

REPO = Path(__file__).resolve().parents[2]

EVIL_HOSTS = [
    "-oProxyCommand=touch${IFS}MARKER",
    "-oProxyCommand=sh${IFS}-c${IFS}'touch${IFS}MARKER'",
    "node1;touch${IFS}MARKER",
    "node1&&touch${IFS}MARKER",
    "$(touch${IFS}MARKER)",
    "`touch${IFS}MARKER`",
    "node1|touch${IFS}MARKER",
    "node1>MARKER",
]
COMMANDS = {
    "run": ["run", "--dataset", "synthetic", "--steps", "6", "--timing-warmup", "1"],
    "probe": ["probe"],
    "hosts": ["hosts"],
}


@pytest.mark.parametrize("evil", EVIL_HOSTS)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_evil_host_in_hostfile_never_runs(command: str, evil: str, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    hf = tmp_path / "hf"
    hf.write_text(f"node1 slots=1\n{evil.replace('MARKER', str(marker))} slots=1\n")
    proc = cli(*COMMANDS[command], "--hostfile", str(hf), *(["--out", str(tmp_path / "out")]
                                                              if command == "run" else []), cwd=str(tmp_path))
    assert_bad_input(proc, f"{hf}:2")
    assert not marker.exists() and not (tmp_path / "MARKER").exists()


@pytest.mark.parametrize("option", ["--include", "--exclude"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_evil_host_in_spec_never_runs(command: str, option: str, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    hf = tmp_path / "hf"
    hf.write_text("node1 slots=1\nnode2 slots=1\n")
    evil = f"node1@-oProxyCommand=touch${{IFS}}{marker}"
    proc = cli(*COMMANDS[command], "--hostfile", str(hf), option, evil,
                 *(["--out", str(tmp_path / "out")] if command == "run" else []), cwd=str(tmp_path))
    assert_bad_input(proc, option)
    assert not marker.exists()


def test_remote_layer_refuses_option_hosts_on_its_own() -> None:
    """Defence in depth: even a caller that skipped the hostfile parser cannot hand ssh an option."""
    from bench.cluster.remote import run_on_hosts, ssh_argv

    for evil in ("-oProxyCommand=touch /tmp/x", "node1 -oProxyCommand=x", "a;b"):
        with pytest.raises(ValueError):
            ssh_argv(evil, ["true"])
        with pytest.raises(ValueError):
            run_on_hosts([evil], ["true"])


# --- commands are argument lists -------------------------------------------------------------

def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield node


def _name(func: ast.expr) -> str:
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    return ".".join(reversed(parts))


def test_no_shell_strings_in_the_package() -> None:
    """No shell=True, os.system, os.popen, or subprocess call with a string command."""
    found = []
    for path in sorted((REPO / "bench").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for call in _calls(tree):
            name = _name(call.func)
            where = f"{path.relative_to(REPO)}:{call.lineno}"
            if name in ("os.system", "os.popen", "system", "popen", "commands.getoutput",
                        "subprocess.getoutput", "subprocess.getstatusoutput"):
                found.append(f"{where}: {name}")
            for kw in call.keywords:
                if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                    found.append(f"{where}: shell=")
            if name.split(".")[-1] in ("run", "Popen", "call", "check_call", "check_output") \
                    and name.startswith(("subprocess", "sp")) and call.args \
                    and isinstance(call.args[0], (ast.Constant, ast.JoinedStr)):
                found.append(f"{where}: {name} with a string command")
    assert found == []


# --- secrets never reach a result or a run dir ---------------------------------------------------

SECRETS = {
    "VITBENCH_FAKE_API_TOKEN": "fake-token-4b1d9e",
    "AWS_SECRET_ACCESS_KEY": "fake-aws-key-77c2a0",
    "DB_PASSWORD": "fake-password-0e5f31",
    "HF_TOKEN": "hf_fakefakefake123456",
    "SSH_PRIVATE_KEY": "fake-private-key-a9a9",
    # Allowlisted prefixes must not let a secret-looking name through either.
    "NCCL_FAKE_AUTH_TOKEN": "fake-nccl-token-3c3c",
}


def _grep_tree(root: Path, needles: list[str]) -> list[str]:
    hits = []
    for p in root.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            hits += [f"{p.relative_to(root)}: {n}" for n in needles if n.encode() in data]
    return hits


def test_recorded_env_is_an_allowlist() -> None:
    env = dict(SECRETS, NCCL_DEBUG="WARN", GLOO_SOCKET_IFNAME="vb0", PATH="/usr/bin", HOME="/root")
    got = provenance.allowed_env(env)
    assert got == {"GLOO_SOCKET_IFNAME": "vb0", "NCCL_DEBUG": "WARN"}


def test_deepspeed_env_file_holds_no_secret(tmp_path: Path) -> None:
    """The .deepspeed_env of a multi-host launch carries rank settings, not the caller's secrets."""
    environ = dict(os.environ, **{k: v for k, v in SECRETS.items() if not k.startswith("NCCL_")},
                   NCCL_DEBUG="WARN")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    resources = {"node1": [0], "node2": [0]}
    lp = launch.build(resources, "pdsh", str(run_dir), "cpu", environ=environ)
    launch.write_files(lp, resources, None)
    text = (run_dir / ".deepspeed_env").read_text()
    assert "NCCL_DEBUG=WARN" in text
    assert _grep_tree(run_dir, [v for k, v in SECRETS.items() if not k.startswith("NCCL_")]) == []


# --- the image ------------------------------------------------------------------------------------

DOCKERFILE = REPO / "docker" / "Dockerfile"


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#")))
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


@pytest.mark.skipif(not DOCKERFILE.is_file(), reason="docker/Dockerfile does not exist yet")
def test_image_runs_as_non_root() -> None:
    ins = _instructions(DOCKERFILE.read_text())
    users = [arg for word, arg in ins if word == "USER"]
    assert users, "no USER: the image would run as root"
    user = users[-1]
    args = dict(re.match(r"(\w+)(?:=(.*))?", a).groups() for w, a in ins if w == "ARG")  # type: ignore[union-attr]
    user = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1)) or "", user)
    assert user not in ("", "0", "root") and not user.startswith(("0:", "root:")), user


@pytest.mark.skipif(not DOCKERFILE.is_file(), reason="docker/Dockerfile does not exist yet")
def test_image_bakes_in_no_private_key() -> None:
    ins = _instructions(DOCKERFILE.read_text())
    for word, arg in ins:
        if word in ("COPY", "ADD"):
            assert not re.search(r"(id_(rsa|ed25519|ecdsa|dsa)|\.ssh|\.pem\b|\.key\b|ssh_host)", arg), arg
        if word == "RUN":
            # Host keys are made when a container starts (docker/node-sshd.sh), never at build time.
            assert "ssh-keygen" not in arg, arg
            # openssh-server's package scripts generate host keys: they must go in the same layer.
            if "openssh-server" in arg:
                assert re.search(r"rm -f /etc/ssh/ssh_host_\*", arg), arg
    # Nothing key-like can enter the build context.
    ignore = (REPO / ".dockerignore").read_text().splitlines() if (REPO / ".dockerignore").is_file() else []
    assert "*" in [ln.strip() for ln in ignore], ".dockerignore must start from nothing (*) and allow by name"
    allowed = [ln.strip()[1:].rstrip("/") for ln in ignore if ln.strip().startswith("!")]
    for entry in allowed:
        for p in ([REPO / entry] if (REPO / entry).is_file() else (REPO / entry).rglob("*")):
            if p.is_file() and p.stat().st_size < (1 << 20):
                assert b"PRIVATE KEY-----" not in p.read_bytes(), p
