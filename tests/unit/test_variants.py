"""The image variants: the Pascal lock's kernel list, the gate's verdict on the study's Tesla cluster on
each variant, and the build scripts' --variant (docker/build.sh's every variant, ROCm's too, and apptainer/build.sh).

No Docker here: `make docker-test` builds both variants and reads each image's torch arch list again.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess

import pytest

from bench.cluster import variants
from bench.cluster.hetero import verdict
from tests.conftest import REPO
from tests.unit.test_hetero import codes, finding, node, tesla


def _header_arch_list(lock: str) -> list[str]:
    text = open(os.path.join(REPO, lock)).read()
    m = re.search(r"^#\s+arch list: (.+?)\s{2,}\(", text, re.M)
    assert m, f"{lock}: no '# arch list:' line in its header"
    return m.group(1).split()


def _variant_torch(name: str) -> dict:
    v = next(x for x in variants.variants() if x.name == name)
    return {"version": v.torch, "arch_list": list(v.arch_list)}


def test_each_lock_header_holds_the_kernel_list_the_variant_data_says():
    assert [v.name for v in variants.variants()] == ["default", "pascal"]
    for v in variants.variants():
        assert _header_arch_list(v.lock) == list(v.arch_list), v.lock
        pins = dict(line.strip().split("==") for line in open(os.path.join(REPO, v.lock))
                    if "==" in line and not line.startswith("#"))
        assert pins["torch"] == v.torch.split("+")[0], v.lock
    # The default's list is the recorded one (tests/fixtures/gpu/torch-arch-list_pt2.14.1-cu130.txt).
    assert list(variants.variants()[0].arch_list) == ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]


def test_the_pascal_lock_pins_a_cuda_12_stack_and_keeps_every_other_pin():
    def pins(lock):
        return dict(line.strip().split("==") for line in open(os.path.join(REPO, lock))
                    if "==" in line and not line.startswith("#"))
    default, pascal = pins("requirements.lock"), pins("requirements-pascal.lock")
    assert (pascal["torch"], pascal["torchvision"], pascal["triton"]) == ("2.7.1", "0.22.1", "3.3.1")
    assert pascal["nvidia-nccl-cu12"] == "2.26.2" and not any(k.endswith("-cu13") for k in pascal)
    cuda = re.compile(r"^(nvidia-|cuda-|torch$|torchvision$|triton$)")
    assert {k: v for k, v in pascal.items() if not cuda.match(k) or k == "nvidia-ml-py"} == \
           {k: v for k, v in default.items() if not cuda.match(k) or k == "nvidia-ml-py"}
    text = open(os.path.join(REPO, "requirements-pascal.lock")).read()
    assert "fatbin sm: 50 60 70 75 80 86 89 90" in text  # scripts/fatbin_arches.py on the wheel


def test_tesla_fails_the_arch_check_on_the_default_variant_naming_the_pascal_one():
    v = verdict(tesla(torch=_variant_torch("default")))
    arch = finding(v, "arch-not-built")
    assert v["level"] == "fail" and [f["hosts"] for f in arch] == [["tesla-node4"], ["tesla-node5"]]
    assert all("`docker/build.sh --variant pascal`" in f["message"] for f in arch)
    (note,) = finding(v, "image-variant")
    assert "image variant pascal (torch 2.7.1+cu126" in note["message"] and "the nodes run default" in note["message"]
    assert "default (torch 2.14.1+cu130) has no kernels for sm_61" in note["message"]


def test_tesla_passes_the_arch_check_on_the_pascal_variant_with_the_no_tensor_core_note():
    v = verdict(tesla(torch=_variant_torch("pascal")))
    assert "arch-not-built" not in codes(v) and v["level"] == "warn"
    (note,) = finding(v, "image-variant")
    assert "image variant pascal" in note["message"] and "the nodes run pascal" in note["message"]
    # fp16 and bf16: the GTX 1070 and the P4 have no tensor cores, a warning naming them, not a refusal.
    partial = {f["message"].split()[0]: f for f in finding(v, "precision-partial")}
    assert set(partial) == {"fp16", "bf16"}
    assert all(f["hosts"] == ["tesla-node4", "tesla-node5"] for f in partial.values())
    assert "tensor cores" in partial["fp16"]["message"] and "no tensor cores" in partial["bf16"]["message"]
    assert v["precisions"] == ["fp32"]


def test_a_blackwell_gpu_on_the_pascal_variant_is_told_to_use_the_default_one():
    inv = node("blackwell", "nvidia-smi_mixed_rtx5090-rtx3090ti_partial.txt", torch=_variant_torch("pascal"))
    arch = finding(verdict([inv]), "arch-not-built")
    assert [f["hosts"] for f in arch] == [["blackwell"]]
    assert "sm_120" in arch[0]["message"] and "`docker/build.sh`)" in arch[0]["message"]


# Each variant's image: its Dockerfile, tag, lock and base (docker/build.sh's table), and the arguments after
# --variant going to `docker build` as they are, before the context.
BUILDS = [
    ("default", ["--network", "host"], "docker/Dockerfile", "vitbench:latest", "requirements.lock",
     "nvidia/cuda:13.0.3-cudnn-devel-ubuntu24.04"),
    ("pascal", [], "docker/Dockerfile", "vitbench:pascal", "requirements-pascal.lock",
     "nvidia/cuda:12.6.3-cudnn-devel-ubuntu24.04"),
    ("rocm", [], "docker/Dockerfile.rocm", "vitbench:rocm", "requirements-rocm.lock",
     "rocm/pytorch:rocm6.4.1_ubuntu24.04_py3.12_pytorch_release_2.6.0")]


def _build_sh(tmp_path, *argv: str) -> subprocess.CompletedProcess:
    """docker/build.sh with a `docker` on PATH that prints its arguments, one a line."""
    fake = tmp_path / "docker"
    fake.write_text("#!/bin/sh\nprintf '%s\\n' \"$@\"\n")
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(["sh", os.path.join(REPO, "docker", "build.sh"), *argv], capture_output=True, text=True,
                          env=env, timeout=60)


@pytest.mark.process
@pytest.mark.parametrize("variant,extra,dockerfile,tag,lock,base", BUILDS, ids=[b[0] for b in BUILDS])
def test_build_sh_variant_picks_the_dockerfile_lock_base_and_identity(tmp_path, variant, extra, dockerfile, tag,
                                                                       lock, base):
    flag = [] if variant == "default" else ["--variant", variant]
    proc = _build_sh(tmp_path, *flag, *extra)
    assert proc.returncode == 0, proc.stderr
    import bench

    with open(os.path.join(REPO, lock), "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    args = proc.stdout.splitlines()
    assert args[:5] == ["build", "-f", dockerfile, "-t", tag]
    assert f"VARIANT={variant}" in args and f"BASE_IMAGE={base}" in args and f"LOCK_SHA256={sha}" in args
    mark = "lock" if variant == "default" else f"{variant}.lock"
    assert f"VITBENCH_IMAGE=vitbench-{bench.__version__}+{mark}.{sha[:12]}" in args
    assert args[-len(extra) - 1:] == [*extra, "."]


@pytest.mark.process
def test_build_sh_refuses_an_unknown_variant(tmp_path):
    bad = _build_sh(tmp_path, "--variant", "volta")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "docker/build.sh: --variant: unknown 'volta' (default, pascal, rocm)"]


@pytest.mark.process
def test_apptainer_build_sh_variant_builds_from_the_variants_image(tmp_path):
    fake = tmp_path / "apptainer"  # prints its arguments and the definition file it was given
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\ncat "$3"\n')
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(["sh", os.path.join(REPO, "apptainer", "build.sh"), "--variant", "pascal"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["build", "vit-pascal.sif"]
    assert "From: vitbench:pascal" in lines and "From: vitbench:latest" not in lines
    # Everything else is vit.def's own.
    body = [ln for ln in open(os.path.join(REPO, "apptainer", "vit.def")).read().splitlines()
            if not ln.startswith(("From:", "    io.vitbench.source"))]
    assert all(ln in lines for ln in body)
