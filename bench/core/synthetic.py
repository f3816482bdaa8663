"""Learnable CIFAR-shaped synthetic data, and real-format CIFAR files written from it (numpy only).

    from bench.core.synthetic import synthetic, write_cifar
    ds = synthetic(10_000, num_classes=10)            # no files needed
    write_cifar("/tmp/d", "cifar100", 5_000, 1_000)    # real-format files for tests

`--dataset synthetic` trains on `synthetic`: class templates (smooth random
colour fields), shifted, plus noise, so a model's loss falls as on CIFAR.
`write_cifar` pickles such images the way the CIFAR originals were written,
so the tests read them through the same loader as the real data set.
"""

from __future__ import annotations

import os
import pickle
import struct

import numpy as np

from bench.core.datasets import _PIXELS, NUM_CLASSES, SPLITS, ArrayDataset, _layout
from bench.core.errors import BadInput

# ---------------------------------------------------------------- synthetic data

_SYN_GRID = 5  # low-frequency template: a 5x5 grid of colours, smoothly interpolated
_SYN_SHIFT = 4  # each sample is the template shifted by up to +-4 pixels
_SYN_AMPLITUDE = 60.0
_SYN_NOISE = 40.0  # standard deviation of the (uniform) pixel noise


def _interp_matrix(n_out: int, n_in: int) -> np.ndarray:
    pos = np.linspace(0, n_in - 1, n_out)
    lo = np.minimum(np.floor(pos).astype(int), n_in - 2)
    w = pos - lo
    m = np.zeros((n_out, n_in), np.float32)
    m[np.arange(n_out), lo] = 1 - w
    m[np.arange(n_out), lo + 1] = w
    return m


def _templates(num_classes: int, seed: int) -> np.ndarray:
    """(C, 3, 40, 40) float32 smooth random colour fields, shared by both splits."""
    rng = np.random.default_rng([seed, 0x7E3A])
    coarse = rng.standard_normal((num_classes, 3, _SYN_GRID, _SYN_GRID), dtype=np.float32)
    m = _interp_matrix(32 + 2 * _SYN_SHIFT, _SYN_GRID)
    return 128.0 + _SYN_AMPLITUDE * np.einsum("hi,ncij,wj->nchw", m, coarse, m)


def synthetic(n: int, num_classes: int = 10, seed: int = 0, split: str = "train") -> ArrayDataset:
    """CIFAR-shaped data a model can learn: class templates, shifted, plus noise.

    Train and test share the templates (from `seed`) but draw different
    samples; the same arguments give the same bytes. Labels are balanced.
    """
    if split not in SPLITS:
        raise BadInput(f"split {split!r}: expected one of {', '.join(SPLITS)}")
    templates = _templates(num_classes, seed)
    rng = np.random.default_rng([seed, SPLITS.index(split) + 1])
    labels = rng.permutation(np.arange(n, dtype=np.int64) % num_classes)
    span = 2 * _SYN_SHIFT + 1
    dy, dx = rng.integers(0, span, n), rng.integers(0, span, n)
    windows = np.lib.stride_tricks.sliding_window_view(templates, (32, 32), axis=(2, 3))
    img = windows[labels, :, dy, dx]  # (n, 3, 32, 32), a copy
    # Uniform noise from raw bytes: a fifth of the time of a gaussian draw.
    noise = rng.integers(0, 256, img.shape, dtype=np.uint8)
    img += noise.astype(np.float32) * np.float32(_SYN_NOISE / 73.9) - np.float32(127.5 * _SYN_NOISE / 73.9)
    images = np.clip(img, 0, 255, out=img).astype(np.uint8)
    return ArrayDataset("synthetic", images, labels, num_classes)


# ---------------------------------------------------------------- real-format files


class _Py2Pickler(pickle._Pickler):  # type: ignore[name-defined]
    """Writes pickles the way the originals were written (Python 2 cPickle, protocol 2).

    bytes become Python 2 str (BINSTRING): read with encoding='latin1' they
    come back as str, as torchvision expects; with encoding='bytes' as bytes,
    as the CIFAR web page's snippet expects. numpy is named `numpy.core`,
    which numpy 1 and 2 both resolve.
    """

    dispatch = pickle._Pickler.dispatch.copy()  # type: ignore[attr-defined]

    def _save_py2_str(self, obj: bytes) -> None:
        n = len(obj)
        head = pickle.SHORT_BINSTRING + bytes([n]) if n < 256 else pickle.BINSTRING + struct.pack("<i", n)
        self.write(head + obj)
        self.memoize(obj)

    dispatch[bytes] = _save_py2_str

    def save_global(self, obj: object, name: str | None = None) -> None:
        module = getattr(obj, "__module__", "")
        if module.startswith("numpy._core"):
            module = "numpy.core" + module[len("numpy._core"):]
            self.write(pickle.GLOBAL + f"{module}\n{name or obj.__name__}\n".encode())  # type: ignore[attr-defined]
            self.memoize(obj)
        else:
            super().save_global(obj, name)


def _py2(obj: object) -> object:
    if isinstance(obj, str):
        return obj.encode("latin1")
    if isinstance(obj, dict):
        return {_py2(k): _py2(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_py2(v) for v in obj]
    return obj


def _dump(path: str, obj: dict[str, object]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        _Py2Pickler(f, protocol=2).dump(_py2(obj))
    os.replace(tmp, path)


def write_cifar(root: str, name: str, n_train: int, n_test: int, seed: int = 0, num_classes: int | None = None) -> str:
    """Write synthetic images as real-format CIFAR files under `root`; returns the folder.

    CIFAR-10: data_batch_1..5 (the train set split in 5), test_batch,
    batches.meta. CIFAR-100: train, test, meta, with coarse label = fine // 5.
    Class names are `class_<i>`: the pictures are not airplanes. The meta
    always lists all 10 or 100 classes; `num_classes` only limits the labels
    that occur.
    """
    layout = _layout(name)
    classes = NUM_CLASSES[name]
    used = num_classes or classes
    if not 1 <= used <= classes:
        raise ValueError(f"num_classes {used}: {name} has {classes}")
    folder = os.path.join(root, layout.folder)
    os.makedirs(folder, exist_ok=True)
    names = [f"class_{i}" for i in range(classes)]
    for split, n in (("train", n_train), ("test", n_test)):
        ds = synthetic(n, used, seed, split)
        files = layout.files[split]
        for i, (fname, idx) in enumerate(zip(files, np.array_split(np.arange(n), len(files)))):
            label = f"{'training' if split == 'train' else 'testing'} batch {i + 1} of {len(files)}"
            batch: dict[str, object] = {
                "batch_label": label,
                layout.label_key: ds.labels[idx].tolist(),
                "data": ds.images[idx].reshape(len(idx), _PIXELS),
                "filenames": [f"synthetic_{split}_{j:06d}.png" for j in idx],
            }
            if name == "cifar100":
                batch["coarse_labels"] = (ds.labels[idx] // 5).tolist()
            _dump(os.path.join(folder, fname), batch)
    if name == "cifar10":
        meta: dict[str, object] = {"num_cases_per_batch": -(-n_train // 5), "label_names": names, "num_vis": _PIXELS}
    else:
        meta = {"fine_label_names": names, "coarse_label_names": [f"superclass_{i}" for i in range(classes // 5)]}
    _dump(os.path.join(folder, layout.meta), meta)
    return folder
