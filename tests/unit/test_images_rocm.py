"""The AMD (ROCm) image variant, checked statically: docker/Dockerfile.rocm installs only the locks on a ROCm
PyTorch base, requirements-rocm.lock is requirements.lock's pins less what that base brings, apptainer/build.sh
makes its SIF (docker/build.sh --variant rocm's identity: tests/unit/test_variants.py, with every variant's;
hadolint on its Dockerfile: tests/unit/test_images.py, with the default's). It cannot be built here (no route to
the rocm/pytorch base or ROCm wheels): docs/images.md says so.
"""

from __future__ import annotations

import os
import re

from tests.conftest import REPO
from tests.unit.test_images import arg_defaults, instructions, unpinned_pip_installs

ROCM = os.path.join(REPO, "docker", "Dockerfile.rocm")
BASE_BRINGS = re.compile(r"^(torch|torchvision|triton|cuda-[\w-]+|nvidia-(?!ml-py)[\w-]+)$")


def _pins(path: str) -> dict[str, str]:
    with open(os.path.join(REPO, path)) as f:
        return dict(line.strip().split("==", 1) for line in f if "==" in line and not line.startswith("#"))


def test_the_rocm_lock_is_requirements_lock_less_what_the_base_brings():
    rocm, full = _pins("requirements-rocm.lock"), _pins("requirements.lock")
    assert rocm and all(full.get(name) == version for name, version in rocm.items()), \
        {n: (v, full.get(n)) for n, v in rocm.items() if full.get(n) != v}
    assert set(full) - set(rocm) == {n for n in full if BASE_BRINGS.match(n)}
    assert "deepspeed" in rocm and "timm" in rocm and "torch" not in rocm


def test_the_rocm_dockerfile_installs_only_its_locks_on_a_rocm_pytorch_base():
    with open(ROCM) as f:
        text = f.read()
    instrs = instructions(text)
    assert instrs[0] == ("ARG", instrs[0][1]) and instrs[0][1].startswith("BASE_IMAGE=")
    assert re.fullmatch(r"rocm/pytorch:rocm[\d.]+_ubuntu\d\d\.04_py3\.\d+_pytorch_release_[\d.]+",
                        arg_defaults(instrs)["BASE_IMAGE"])
    assert unpinned_pip_installs(text.replace("requirements-rocm.lock", "requirements.lock")) == []
    runs = " ".join(rest for word, rest in instrs if word == "RUN")
    assert "lock=requirements-rocm.lock" in runs and "--system-site-packages" in runs and "torch.version.hip" in runs
    assert "+rocm.lock.$(echo" in runs and 'if [ "${VITBENCH_IMAGE}" != "${identity}" ]' in runs
    assert ("USER", "${BENCH_UID}") in instrs and ("ENTRYPOINT", '["bench"]') in instrs
    with open(os.path.join(REPO, ".dockerignore")) as f:
        assert "!requirements-rocm.lock" in f.read().split()
    with open(os.path.join(REPO, "docs", "images.md")) as f:
        assert "Not built or run on the machine this was written on" in f.read()


def test_apptainer_build_sh_makes_the_rocm_variants_sif():
    with open(os.path.join(REPO, "apptainer", "build.sh")) as f:
        assert "rocm) image=vitbench:rocm sif=vit-rocm.sif" in f.read()

