"""CIFAR-10/100 from disk (numpy only); synthetic data lives in bench.core.synthetic.

The launcher imports this module too, so it must never import torch.

    from bench.core.datasets import load
    ds = load("cifar10", "/data", "train")      # /data/cifar-10-batches-py/...

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
from dataclasses import dataclass

import numpy as np

from bench.core.errors import BadInput

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
    """Fetch the official archive, check its md5, and unpack it into data_dir (standard library only).

    Unpacked with tarfile's "data" filter: no member may land outside
    data_dir, be a device, or carry set-uid bits.
    """
    import hashlib
    import tarfile
    import tempfile
    import urllib.request

    layout = _layout(name)
    try:
        os.makedirs(data_dir, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=data_dir, suffix=".tar.gz") as tmp:
            digest = hashlib.md5()
            with urllib.request.urlopen(layout.url, timeout=60) as r:
                while chunk := r.read(1 << 20):
                    tmp.write(chunk)
                    digest.update(chunk)
            tmp.flush()
            if digest.hexdigest() != layout.md5:
                raise ValueError(f"md5 {digest.hexdigest()} != {layout.md5}")
            with tarfile.open(tmp.name, "r:gz") as tar:
                tar.extractall(data_dir, filter="data")
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
