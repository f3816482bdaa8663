"""Per-rank batches: the shard lives on the device (default) or goes through a DataLoader.

    batches = make_batches("device", train_ds, rank=r, world=w, micro_batch=64,
                           img_size=224, device=dev, seed=0)
    for epoch in range(epochs):
        for x, y in batches.epoch(epoch):   # x float (B, 3, 224, 224) on dev, y int64
            ...

Sharding. A seeded permutation of the dataset (the same on every rank: it
depends on `seed` only) is cut first to the kept `fraction` (the study's
--dataset-fraction), then dealt out rank::world. Each rank keeps its shard
for the whole run and reshuffles it every epoch; unlike DistributedSampler,
samples never move between ranks, which is what lets the shard stay
resident on the device. Train shards are cut to floor(kept / world) so every
rank runs the same number of steps (a rank with one step more would hang the
others in the gradient all-reduce).

Augmentation (train only): pad 4 with zeros, random 32x32 crop, horizontal
flip, then /255, CIFAR mean/std, and bilinear upsampling to img_size. The
crop offsets and flips of an epoch are drawn once, with the permutation, from
one torch.Generator seeded from (seed, epoch, rank), so the device path and
the DataLoader path yield identical batches for the same seed.

Eval (train=False): no augmentation, dataset order, every kept sample once
(drop_last ignored). Shards are padded to ceil(kept / world) with label
PAD_LABEL (-100, torch's default cross_entropy ignore_index) so every rank
runs the same number of forward passes (ZeRO-3 gathers parameters in each);
count accuracy with `eval_counts`, which skips the padding.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from bench.core.datasets import ArrayDataset
from bench.core.errors import BadInput

KINDS = ("device", "dataloader")
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)
PAD = 4
PAD_LABEL = -100


def _kept(n: int, fraction: float) -> int:
    return max(1, round(n * fraction))


def shard_indices(n: int, *, rank: int, world: int, seed: int, train: bool, fraction: float = 1.0) -> np.ndarray:
    """Dataset indices that `rank` keeps (before eval padding)."""
    order = np.random.default_rng([seed, 0xDA7A]).permutation(n)[: _kept(n, fraction)]
    if not train:
        order = np.sort(order)
    shard = order[rank::world]
    return shard[: len(order) // world] if train else shard


def epoch_plan(seed: int, epoch: int, rank: int, n: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(order, crop row offsets, crop column offsets, flips) of one train epoch, on CPU."""
    state = np.random.SeedSequence([seed, epoch, rank]).generate_state(1, np.uint64)[0]
    g = torch.Generator().manual_seed(int(state >> np.uint64(1)))
    order = torch.randperm(n, generator=g)
    offsets = torch.randint(0, 2 * PAD + 1, (n, 2), generator=g)
    flips = torch.randint(0, 2, (n,), generator=g).bool()
    return order, offsets[:, 0].contiguous(), offsets[:, 1].contiguous(), flips


def crop_flip(padded: Tensor, idx: Tensor, oy: Tensor, ox: Tensor, flip: Tensor) -> Tensor:
    """One gather: images idx of the zero-padded (N, 3, 40, 40) uint8 stack, cropped and flipped."""
    ar = torch.arange(32, device=padded.device)
    rows = oy[:, None] + ar
    cols = torch.where(flip[:, None], ox[:, None] + 31 - ar, ox[:, None] + ar)
    chan = torch.arange(padded.shape[1], device=padded.device)
    return padded[idx[:, None, None, None], chan[None, :, None, None], rows[:, None, :, None], cols[:, None, None, :]]


def normalise(x: Tensor, img_size: int, dtype: torch.dtype, mean: Tensor, std: Tensor) -> Tensor:
    """uint8 (B, 3, 32, 32) -> normalised float (B, 3, img_size, img_size) of dtype."""
    out = x.float().div_(255).sub_(mean).div_(std)
    if img_size != out.shape[-1]:
        out = F.interpolate(out, size=(img_size, img_size), mode="bilinear", align_corners=False)
    return out.to(dtype)


def eval_counts(logits: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """(correct, counted) of an eval batch as device tensors, padding excluded; sum, then all-reduce."""
    real = labels != PAD_LABEL
    return ((logits.argmax(-1) == labels) & real).sum(), real.sum()


def _stats(device: torch.device | str) -> tuple[Tensor, Tensor]:
    mean = torch.tensor(CIFAR_MEAN, device=device).view(1, 3, 1, 1)
    return mean, torch.tensor(CIFAR_STD, device=device).view(1, 3, 1, 1)


class _Shard:
    """What both paths share: the shard, its step count, and the per-epoch plan."""

    def __init__(
        self, ds: ArrayDataset, *, rank: int, world: int, micro_batch: int, img_size: int,
        device: torch.device, seed: int, train: bool = True, fraction: float = 1.0,
        drop_last: bool = True, channels_last: bool = False, dtype: torch.dtype = torch.float32,
    ) -> None:
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} outside world {world}")
        if micro_batch < 1 or img_size < 1:
            raise ValueError(f"micro_batch {micro_batch} and img_size {img_size} must be >= 1")
        if not 0.0 < fraction <= 1.0:
            raise BadInput(f"--dataset-fraction: {fraction} is outside (0, 1]")
        self.rank, self.world, self.micro_batch, self.img_size = rank, world, micro_batch, img_size
        self.device, self.seed, self.train, self.dtype = torch.device(device), seed, train, dtype
        self.channels_last = channels_last
        self.drop_last = drop_last and train
        idx = shard_indices(len(ds.labels), rank=rank, world=world, seed=seed, train=train, fraction=fraction)
        images, labels = torch.from_numpy(ds.images[idx]), torch.from_numpy(ds.labels[idx]).long()
        if train:
            if len(idx) < (micro_batch if drop_last else 1):
                raise BadInput(
                    f"--dataset-fraction {fraction}: {ds.name} {len(ds.labels)} samples leave {len(idx)} "
                    f"per rank over {world} ranks, fewer than --micro-batch {micro_batch}"
                )
            # Stored zero-padded (40x40, 1.56x the bytes) so a crop is one gather per batch.
            images = F.pad(images, (PAD, PAD, PAD, PAD))
        else:
            self.num_real = len(idx)
            short = -(-_kept(len(ds.labels), fraction) // world) - len(idx)
            if short:
                filler = torch.from_numpy(ds.images[:1]).expand(short, -1, -1, -1)
                images = torch.cat([images, filler])
                labels = torch.cat([labels, torch.full((short,), PAD_LABEL, dtype=torch.long)])
        self._images, self._labels = images, labels
        size = len(labels)
        self.steps_per_epoch = size // micro_batch if self.drop_last else math.ceil(size / micro_batch)
        if train:
            self.num_samples = self.steps_per_epoch * micro_batch if self.drop_last else size
        else:
            self.num_samples = self.num_real

    def _plan(self, epoch: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        n = len(self._labels)
        if self.train:
            return epoch_plan(self.seed, epoch, self.rank, n)
        zeros = torch.zeros(n, dtype=torch.long)
        return torch.arange(n), zeros, zeros, zeros.bool()

    def _layout(self, x: Tensor) -> Tensor:
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last else x


class DeviceBatches(_Shard):
    """The shard as a uint8 tensor on the device; batches gathered there, no loader workers."""

    def __init__(self, ds: ArrayDataset, **kwargs) -> None:
        super().__init__(ds, **kwargs)
        self._images = self._images.to(self.device)
        self._labels = self._labels.to(self.device)
        self._mean, self._std = _stats(self.device)

    def epoch(self, epoch: int) -> Iterator[tuple[Tensor, Tensor]]:
        order, oy, ox, flip = (t.to(self.device) for t in self._plan(epoch))
        mb = self.micro_batch
        for s in range(self.steps_per_epoch):
            sl = slice(s * mb, (s + 1) * mb)
            idx = order[sl]
            x = crop_flip(self._images, idx, oy[sl], ox[sl], flip[sl]) if self.train else self._images[idx]
            yield self._layout(normalise(x, self.img_size, self.dtype, self._mean, self._std)), self._labels[idx]


class _EpochDataset(torch.utils.data.Dataset):
    """One epoch of the shard in plan order; each item is augmented and normalised in a worker."""

    def __init__(self, shard: _Shard, plan: tuple[Tensor, Tensor, Tensor, Tensor]) -> None:
        self.images, self.labels, self.train = shard._images, shard._labels, shard.train
        self.img_size, self.dtype = shard.img_size, shard.dtype
        self.order, self.oy, self.ox, self.flip = plan
        self.mean, self.std = _stats("cpu")

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        j = self.order[i : i + 1]
        if self.train:
            x = crop_flip(self.images, j, self.oy[i : i + 1], self.ox[i : i + 1], self.flip[i : i + 1])
        else:
            x = self.images[j]
        return normalise(x, self.img_size, self.dtype, self.mean, self.std)[0], self.labels[j[0]]


class LoaderBatches(_Shard):
    """The same batches through a torch DataLoader: the classic CPU-worker input pipeline."""

    def __init__(self, ds: ArrayDataset, *, num_workers: int = 2, **kwargs) -> None:
        super().__init__(ds, **kwargs)
        self.num_workers = num_workers

    def epoch(self, epoch: int) -> Iterator[tuple[Tensor, Tensor]]:
        loader = torch.utils.data.DataLoader(
            _EpochDataset(self, self._plan(epoch)),
            batch_size=self.micro_batch,
            shuffle=False,  # the plan already holds this epoch's order
            drop_last=self.drop_last,
            num_workers=self.num_workers,
            pin_memory=self.device.type == "cuda",
        )
        for x, y in loader:
            yield self._layout(x.to(self.device, non_blocking=True)), y.to(self.device, non_blocking=True)


def make_batches(kind: str, ds: ArrayDataset, *, num_workers: int = 2, **kwargs) -> DeviceBatches | LoaderBatches:
    """`kind` "device" (shard resident on the device) or "dataloader" (CPU workers)."""
    if kind == "device":
        return DeviceBatches(ds, **kwargs)
    if kind == "dataloader":
        return LoaderBatches(ds, num_workers=num_workers, **kwargs)
    raise BadInput(f"--data-path: unknown {kind!r} (choose from {', '.join(KINDS)})")
