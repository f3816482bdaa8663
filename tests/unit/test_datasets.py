"""bench.core.datasets and bench.core.synthetic: real-format CIFAR files, their failure modes, and synthetic data."""

from __future__ import annotations

import dataclasses
import os
import pickle
import shutil
import subprocess
import sys

import numpy as np
import pytest

from bench.core import datasets
from bench.core.datasets import check_data_dir, load
from bench.core.synthetic import synthetic, write_cifar
from bench.core.errors import BadInput

N_TRAIN, N_TEST = 500, 100


@pytest.fixture(scope="module")
def cifar_root(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("cifar"))
    write_cifar(root, "cifar10", N_TRAIN, N_TEST, seed=1)
    write_cifar(root, "cifar100", N_TRAIN, N_TEST, seed=2)
    return root


@pytest.fixture
def cifar10_copy(cifar_root, tmp_path) -> tuple[str, str]:
    """A private copy to damage: (data_dir, cifar-10-batches-py folder)."""
    folder = shutil.copytree(os.path.join(cifar_root, "cifar-10-batches-py"), tmp_path / "cifar-10-batches-py")
    return str(tmp_path), str(folder)


def bad_input(fn, *args) -> str:
    with pytest.raises(BadInput) as e:
        fn(*args)
    msg = str(e.value)
    assert "\n" not in msg and "Traceback" not in msg
    return msg


def truncate(path: str, keep: float = 0.5) -> None:
    with open(path, "r+b") as f:
        f.truncate(int(os.path.getsize(path) * keep))


@pytest.mark.parametrize("name,classes,seed", [("cifar10", 10, 1), ("cifar100", 100, 2)])
def test_write_then_load_round_trip(cifar_root, name, classes, seed):
    for split, n in (("train", N_TRAIN), ("test", N_TEST)):
        ds = load(name, cifar_root, split)
        ref = synthetic(n, classes, seed, split)
        assert ds.name == name and ds.num_classes == classes and len(ds) == n
        assert ds.images.dtype == np.uint8 and ds.images.shape == (n, 3, 32, 32)
        assert ds.labels.dtype == np.int64
        np.testing.assert_array_equal(ds.images, ref.images)
        np.testing.assert_array_equal(ds.labels, ref.labels)
    check_data_dir(name, cifar_root)


def test_write_with_fewer_classes_stays_loadable(tmp_path):
    write_cifar(str(tmp_path), "cifar100", 60, 20, num_classes=3)
    ds = load("cifar100", str(tmp_path), "test")
    assert ds.num_classes == 100 and set(ds.labels.tolist()) == {0, 1, 2}


def test_files_have_the_original_layout_and_keys(cifar_root):
    folder = os.path.join(cifar_root, "cifar-10-batches-py")
    assert sorted(os.listdir(folder)) == sorted(
        ["batches.meta", "test_batch"] + [f"data_batch_{i}" for i in range(1, 6)]
    )
    # The CIFAR page's own snippet reads with encoding='bytes': Python 2 str keys come back as bytes.
    with open(os.path.join(folder, "data_batch_2"), "rb") as f:
        d = pickle.load(f, encoding="bytes")
    assert set(d) == {b"batch_label", b"labels", b"data", b"filenames"}
    assert d[b"batch_label"] == b"training batch 2 of 5"
    assert d[b"data"].shape == (N_TRAIN // 5, 3072) and d[b"data"].dtype == np.uint8
    with open(os.path.join(cifar_root, "cifar-100-python", "train"), "rb") as f:
        d = pickle.load(f, encoding="latin1")
    assert set(d) == {"batch_label", "fine_labels", "coarse_labels", "data", "filenames"}
    assert max(d["fine_labels"]) == 99 and max(d["coarse_labels"]) == 19


@pytest.mark.parametrize("name,cls", [("cifar10", "CIFAR10"), ("cifar100", "CIFAR100")])
def test_torchvision_reads_our_files_the_same(cifar_root, monkeypatch, name, cls):
    tv = pytest.importorskip("torchvision.datasets.cifar")
    # Only the md5 comparison stands between torchvision and generated files.
    monkeypatch.setattr(tv, "check_integrity", lambda *a, **k: True)
    monkeypatch.setattr(getattr(tv, cls), "_check_integrity", lambda self: True)
    ref = getattr(tv, cls)(cifar_root, train=True, download=False)
    ds = load(name, cifar_root, "train")
    np.testing.assert_array_equal(ref.data, ds.images.transpose(0, 2, 3, 1))
    assert ref.targets == ds.labels.tolist()
    assert len(ref.classes) == ds.num_classes


def test_missing_dir_names_the_folder_and_the_way_out(tmp_path):
    msg = bad_input(load, "cifar10", str(tmp_path), "train")
    assert msg.startswith(f"--data-dir: {tmp_path}/cifar-10-batches-py not found")
    assert "--download" in msg
    msg = bad_input(check_data_dir, "cifar100", str(tmp_path))
    assert f"{tmp_path}/cifar-100-python not found" in msg


def test_unknown_dataset_and_split(cifar_root):
    assert "--dataset" in bad_input(load, "mnist", cifar_root, "train")
    assert "'val'" in bad_input(load, "cifar10", cifar_root, "val")


def test_missing_file(cifar10_copy):
    root, folder = cifar10_copy
    os.remove(os.path.join(folder, "data_batch_3"))
    load("cifar10", root, "test")  # the other split is still whole
    msg = bad_input(load, "cifar10", root, "train")
    assert msg == f"--data-dir: {folder}/data_batch_3 not found"
    assert bad_input(check_data_dir, "cifar10", root) == msg


@pytest.mark.parametrize("victim", ["data_batch_4", "test_batch", "batches.meta"])
def test_truncated_file_is_caught_by_the_launcher_check(cifar10_copy, victim):
    root, folder = cifar10_copy
    truncate(os.path.join(folder, victim))
    msg = bad_input(check_data_dir, "cifar10", root)
    assert msg.startswith(f"--data-dir: {folder}/{victim}: truncated or not a pickle")


def test_empty_and_garbage_files(cifar10_copy):
    root, folder = cifar10_copy
    path = os.path.join(folder, "test_batch")
    open(path, "wb").close()
    assert path in bad_input(load, "cifar10", root, "test")
    with open(path, "wb") as f:
        f.write(np.random.default_rng(0).bytes(5000))
    msg = bad_input(load, "cifar10", root, "test")
    assert msg.startswith(f"--data-dir: {path}: ")
    with open(path, "w") as f:
        f.write("<html>404 Not Found</html>\n")
    msg = bad_input(load, "cifar10", root, "test")
    assert msg.startswith(f"--data-dir: {path}: ")


class _System:
    def __init__(self, cmd: str) -> None:
        self.cmd = cmd

    def __reduce__(self):
        return (os.system, (self.cmd,))


class _Eval:
    def __init__(self, code: str) -> None:
        self.code = code

    def __reduce__(self):
        return (eval, (self.code,))


@pytest.mark.parametrize("protocol", [2, 5])
def test_malicious_pickle_is_refused_without_running(cifar10_copy, tmp_path, protocol):
    root, folder = cifar10_copy
    marker = tmp_path / "pwned"
    path = os.path.join(folder, "test_batch")
    for payload, refused in (
        (_System(f"touch {marker}"), "posix.system"),
        # protocol 2 spells builtins the Python 2 way
        (_Eval(f"open({str(marker)!r}, 'w')"), "__builtin__.eval" if protocol == 2 else "builtins.eval"),
    ):
        with open(path, "wb") as f:
            pickle.dump({"data": payload, "labels": [0]}, f, protocol=protocol)
        msg = bad_input(load, "cifar10", root, "test")
        assert msg.startswith(f"--data-dir: {path}: refusing to unpickle {refused}")
        assert not marker.exists()
    # The same payload really does run under an unrestricted pickle.load.
    with open(path, "rb") as f:
        pickle.load(f)
    assert marker.exists()


def _write(path: str, obj: object, protocol: int = 5) -> None:
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=protocol)


def test_wrong_shapes_dtypes_and_labels(cifar10_copy):
    root, folder = cifar10_copy
    path = os.path.join(folder, "test_batch")
    good = np.zeros((4, 3072), np.uint8)
    cases = [
        ([1, 2], "not a dict", "expected a dict, found list"),
        ({"labels": [0] * 4}, "no data", "no 'data' entry"),
        ({"data": good.astype(np.float32), "labels": [0] * 4}, "float", "'data' must be uint8 (N, 3072), found float32"),
        ({"data": good[:, :100], "labels": [0] * 4}, "narrow", "found uint8 (4, 100)"),
        ({"data": good, "labels": [0] * 3}, "count", "4 images but 'labels' has shape (3,)"),
        ({"data": good, "labels": [0, 1, 2, 10]}, "range", "'labels' outside 0..9 (found 0..10)"),
        ({"data": good, "labels": ["cat"] * 4}, "type", "'labels' is not a list of ints"),
    ]
    for obj, _, expected in cases:
        _write(path, obj)
        msg = bad_input(load, "cifar10", root, "test")
        assert msg.startswith(f"--data-dir: {path}: ") and expected in msg, msg
    # Arrays pickled by Python 3 at protocol 5 (numpy's _frombuffer path) are fine.
    _write(path, {"data": good, "labels": [0, 1, 2, 9]})
    assert load("cifar10", root, "test").labels.tolist() == [0, 1, 2, 9]


def test_meta_with_wrong_class_count(cifar10_copy):
    root, folder = cifar10_copy
    path = os.path.join(folder, "batches.meta")
    _write(path, {"label_names": ["a", "b"]}, protocol=2)
    assert bad_input(load, "cifar10", root, "train") == (
        f"--data-dir: {path}: 'label_names' should list 10 classes, found 2"
    )


def test_failed_download_is_one_line(tmp_path, monkeypatch):
    pytest.importorskip("torchvision")
    # Port 9 (discard) on loopback refuses at once: a real failed fetch, no network needed.
    url = "http://127.0.0.1:9/cifar-10-python.tar.gz"
    monkeypatch.setitem(datasets._LAYOUTS, "cifar10", dataclasses.replace(datasets._LAYOUTS["cifar10"], url=url))
    msg = bad_input(load, "cifar10", str(tmp_path), "train", True)
    assert msg.startswith(f"--download: could not fetch {url} into {tmp_path}")


def test_synthetic_is_deterministic_and_splits_differ():
    a, b = synthetic(300, 10, seed=5), synthetic(300, 10, seed=5)
    np.testing.assert_array_equal(a.images, b.images)
    np.testing.assert_array_equal(a.labels, b.labels)
    assert not np.array_equal(a.images, synthetic(300, 10, seed=6).images)
    assert not np.array_equal(a.images, synthetic(300, 10, seed=5, split="test").images)
    assert a.images.dtype == np.uint8 and a.images.shape == (300, 3, 32, 32)
    assert np.bincount(a.labels).tolist() == [30] * 10  # balanced
    assert 10 < a.images.std() and 0 < a.images.mean() < 255


@pytest.mark.parametrize("classes", [10, 100])
def test_synthetic_classes_are_separable_and_shared_across_splits(classes):
    train, test = synthetic(5000, classes, seed=0), synthetic(1000, classes, seed=0, split="test")
    x = train.images.reshape(len(train), -1).astype(np.float32)
    means = np.stack([x[train.labels == c].mean(0) for c in range(classes)])
    t = test.images.reshape(len(test), -1).astype(np.float32)
    dist = (means**2).sum(1)[None] - 2 * t @ means.T
    accuracy = (dist.argmin(1) == test.labels).mean()
    assert accuracy > 0.9, accuracy  # nearest class mean from train, on test; chance is 1/classes
    # Test samples drawn with other templates (another seed) are not recognised.
    other = synthetic(1000, classes, seed=1, split="test")
    o = other.images.reshape(len(other), -1).astype(np.float32)
    wrong = ((means**2).sum(1)[None] - 2 * o @ means.T).argmin(1)
    assert (wrong == other.labels).mean() < 0.3


@pytest.mark.process
def test_datasets_module_does_not_import_torch():
    code = "import sys, bench.core.datasets, bench.core.synthetic; assert 'torch' not in sys.modules, 'torch imported'"
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    subprocess.run([sys.executable, "-c", code], check=True, cwd=repo)
