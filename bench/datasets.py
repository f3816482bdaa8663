"""CIFAR-10/100 from disk, and learnable CIFAR-shaped synthetic data (numpy only).

The launcher imports this module too, so it must never import torch.

    from bench.datasets import load, synthetic, write_cifar
    ds = load("cifar10", "/data", "train")      # /data/cifar-10-batches-py/...
    ds = synthetic(10_000, num_classes=10)       # no files needed
    write_cifar("/tmp/d", "cifar100", 5_000, 1_000)   # real-format files for tests

`data_dir` is the folder that holds `cifar-10-batches-py/` or
`cifar-100-python/` (torchvision's `root`). We read the files ourselves:
torchvision compares md5 sums even with download=False, so it rejects every
file but the originals.

Safety: CIFAR's python version is pickle by format, and pickle can run code.
These files come from a user's directory, so `_Unpickler` resolves only the
few globals the originals use (numpy array and dtype reconstruction, latin-1
bytes); anything else (os.system, builtins.eval, ...) is refused before it is
called.
"""

from __future__ import annotations

import os
import pickle
import struct
from dataclasses import dataclass

import numpy as np

from bench.errors import BadInput

SPLITS = ("train", "test")
NUM_CLASSES = {"cifar10": 10, "cifar100": 100}
IMAGE_SHAPE = (3, 32, 32)
_PIXELS = 3 * 32 * 32


@dataclass(frozen=True)
class ArrayDataset:
    name: str
    images: np.ndarray  # uint8 (N, 3, 32, 32), CHW like CIFAR's rows
    labels: np.ndarray  # int64 (N,)
    num_classes: int

    def __len__(self) -> int:
        return int(self.labels.shape[0])


@dataclass(frozen=True)
class _Layout:
    folder: str
    files: dict[str, tuple[str, ...]]
    meta: str
    label_key: str
    names_key: str
    url: str
    md5: str


_LAYOUTS = {
    "cifar10": _Layout(
        "cifar-10-batches-py",
        {"train": tuple(f"data_batch_{i}" for i in range(1, 6)), "test": ("test_batch",)},
        "batches.meta", "labels", "label_names",
        "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
        "c58f30108f718f92721af3b95e74349a",
    ),
    "cifar100": _Layout(
        "cifar-100-python",
        {"train": ("train",), "test": ("test",)},
        "meta", "fine_labels", "fine_label_names",
        "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
        "eb9058c3a382ffc7106e4002c42a8d85",
    ),
}


def _layout(name: str) -> _Layout:
    if name not in _LAYOUTS:
        raise BadInput(f"--dataset: unknown dataset {name!r} (cifar10, cifar100, synthetic)")
    return _LAYOUTS[name]


# ---------------------------------------------------------------- safe unpickling


class _Refused(pickle.UnpicklingError):
    pass


def _latin1_encode(text: str, encoding: str = "latin1") -> bytes:
    # Python 3 pickles bytes at protocol 2 as _codecs.encode(str, 'latin1').
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str):
        raise _Refused(f"_codecs.encode with {encoding!r}")
    return text.encode("latin1")


def _allowed_globals() -> dict[tuple[str, str], object]:
    try:
        from numpy._core.multiarray import _reconstruct
        from numpy._core.numeric import _frombuffer
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _reconstruct  # type: ignore[no-redef]
        from numpy.core.numeric import _frombuffer  # type: ignore[no-redef]
    table: dict[tuple[str, str], object] = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): _latin1_encode,
    }
    for mod in ("numpy.core", "numpy._core"):
        table[(f"{mod}.multiarray", "_reconstruct")] = _reconstruct
        table[(f"{mod}.numeric", "_frombuffer")] = _frombuffer
    return table


class _Unpickler(pickle.Unpickler):
    """Builds dicts, lists, str, bytes, ints and numpy arrays; refuses any other global."""

    _table = _allowed_globals()

    def find_class(self, module: str, name: str) -> object:
        try:
            return self._table[(module, name)]
        except KeyError:
            raise _Refused(f"{module}.{name}") from None


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def _unpickle(path: str) -> dict[str, object]:
    try:
        with open(path, "rb") as f:
            obj = _Unpickler(f, encoding="latin1").load()
    except FileNotFoundError:
        raise BadInput(f"--data-dir: {path} not found") from None
    except OSError as e:
        raise BadInput(f"--data-dir: {path}: cannot read ({_first_line(e)})") from None
    except _Refused as e:
        raise BadInput(
            f"--data-dir: {path}: refusing to unpickle {e} "
            "(CIFAR files hold only dicts, lists, strings, ints and numpy arrays)"
        ) from None
    except (pickle.UnpicklingError, EOFError) as e:
        raise BadInput(f"--data-dir: {path}: truncated or not a pickle ({_first_line(e)})") from None
    except Exception as e:  # any malformed opcode stream; never a traceback for bad files
        raise BadInput(f"--data-dir: {path}: corrupt pickle ({_first_line(e)})") from None
    if not isinstance(obj, dict):
        raise BadInput(f"--data-dir: {path}: expected a dict, found {type(obj).__name__}")
    # Read with latin1 the originals give str keys; be lenient about bytes keys.
    return {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in obj.items()}


def _field(d: dict[str, object], key: str, path: str) -> object:
    if key not in d:
        raise BadInput(f"--data-dir: {path}: no {key!r} entry (keys: {', '.join(map(str, d))})")
    return d[key]


def _read_batch(path: str, label_key: str, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    d = _unpickle(path)
    data = _field(d, "data", path)
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != _PIXELS:
        what = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise BadInput(f"--data-dir: {path}: 'data' must be uint8 (N, {_PIXELS}), found {what}")
    try:
        labels = np.asarray(_field(d, label_key, path), dtype=np.int64)
    except (TypeError, ValueError, OverflowError) as e:
        raise BadInput(f"--data-dir: {path}: {label_key!r} is not a list of ints ({_first_line(e)})") from None
    if labels.shape != (data.shape[0],):
        raise BadInput(f"--data-dir: {path}: {data.shape[0]} images but {label_key!r} has shape {labels.shape}")
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise BadInput(
            f"--data-dir: {path}: {label_key!r} outside 0..{num_classes - 1} "
            f"(found {labels.min()}..{labels.max()})"
        )
    return data.reshape(-1, *IMAGE_SHAPE), labels


def _folder(name: str, data_dir: str) -> str:
    layout = _layout(name)
    folder = os.path.join(data_dir, layout.folder)
    if not os.path.isdir(folder):
        raise BadInput(
            f"--data-dir: {folder} not found ({name} in the CIFAR python pickle format; "
            f"pass --download, or unpack {os.path.basename(layout.url)} into {data_dir})"
        )
    return folder


def _read_meta(name: str, folder: str) -> None:
    layout, num = _LAYOUTS[name], NUM_CLASSES[name]
    path = os.path.join(folder, layout.meta)
    names = _field(_unpickle(path), layout.names_key, path)
    if not isinstance(names, list) or len(names) != num:
        count = len(names) if isinstance(names, list) else type(names).__name__
        raise BadInput(f"--data-dir: {path}: {layout.names_key!r} should list {num} classes, found {count}")


def fetch(name: str, data_dir: str) -> None:
    """Fetch and unpack the official archive with torchvision (checks its md5)."""
    layout = _layout(name)
    try:
        from torchvision.datasets.utils import download_and_extract_archive
    except ImportError as e:
        raise BadInput(f"--download: needs torchvision ({_first_line(e)})") from None
    try:
        download_and_extract_archive(layout.url, data_dir, md5=layout.md5)
    except Exception as e:  # urllib, http, md5 and tar errors all end here
        raise BadInput(f"--download: could not fetch {layout.url} into {data_dir} ({_first_line(e)})") from None


def load(name: str, data_dir: str, split: str, download: bool = False) -> ArrayDataset:
    """Read one split of CIFAR-10 or CIFAR-100 (fine labels) from `data_dir`."""
    if split not in SPLITS:
        raise BadInput(f"split {split!r}: expected one of {', '.join(SPLITS)}")
    layout = _layout(name)
    if download and not os.path.isdir(os.path.join(data_dir, layout.folder)):
        fetch(name, data_dir)
    folder = _folder(name, data_dir)
    _read_meta(name, folder)
    parts = [_read_batch(os.path.join(folder, f), layout.label_key, NUM_CLASSES[name]) for f in layout.files[split]]
    images = np.concatenate([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
    labels = np.concatenate([p[1] for p in parts]) if len(parts) > 1 else parts[0][1]
    return ArrayDataset(name, np.ascontiguousarray(images), labels, NUM_CLASSES[name])


def check_data_dir(name: str, data_dir: str) -> None:
    """The launcher's check before any rank starts: every file of both splits reads.

    A truncated pickle only shows itself when parsed to the end, so this is a
    full load (about 0.2 s for all of CIFAR-10 from the page cache; the
    arrays are dropped at once).
    """
    for split in SPLITS:
        load(name, data_dir, split)


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
