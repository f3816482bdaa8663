"""bench.worker.data on CPU: sharding, equal batches on both paths, eval coverage, learnability."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bench.core.datasets import ArrayDataset
from bench.core.synthetic import synthetic
from bench.core.errors import BadInput
from bench.worker import data as wd

CPU = torch.device("cpu")


def common(**over) -> dict:
    kw = dict(rank=0, world=1, micro_batch=16, img_size=32, device=CPU, seed=7)
    kw.update(over)
    return kw


def id_dataset(n: int) -> ArrayDataset:
    """Labels are sample ids, so a batch says exactly which samples it holds."""
    ds = synthetic(n, 10, seed=3)
    return ArrayDataset("ids", ds.images, np.arange(n, dtype=np.int64), n)


def labels_of(batches, epoch: int = 0) -> list[int]:
    return [int(v) for _, y in batches.epoch(epoch) for v in y]


@pytest.fixture(scope="module")
def small() -> ArrayDataset:
    return synthetic(203, 10, seed=1)


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("fraction", [1.0, 0.3])
def test_train_shards_are_disjoint_equal_and_from_one_subset(world, fraction):
    n = 1001
    shards = [wd.shard_indices(n, rank=r, world=world, seed=5, train=True, fraction=fraction) for r in range(world)]
    kept = round(n * fraction)
    assert {len(s) for s in shards} == {kept // world}  # same step count on every rank
    union = np.concatenate(shards)
    assert len(np.unique(union)) == len(union) == kept // world * world
    subset = np.random.default_rng([5, 0xDA7A]).permutation(n)[:kept]
    assert set(union) <= set(subset)


def test_eval_shards_cover_every_sample_once():
    n = 1001
    for world in (1, 2, 3, 8):
        shards = [wd.shard_indices(n, rank=r, world=world, seed=5, train=False) for r in range(world)]
        assert sorted(np.concatenate(shards).tolist()) == list(range(n))


@pytest.mark.parametrize("kind", wd.KINDS)
def test_train_epoch_visits_the_shard_once_in_a_new_order(kind):
    ds = id_dataset(100)
    seen = {}
    for rank in (0, 1):
        b = wd.make_batches(kind, ds, num_workers=0, **common(rank=rank, world=2, micro_batch=8))
        assert b.steps_per_epoch == 50 // 8 and b.num_samples == 48
        e0, e1 = labels_of(b, 0), labels_of(b, 1)
        assert len(e0) == 48 and len(set(e0)) == 48 and e0 != e1
        assert set(e0) <= set(wd.shard_indices(100, rank=rank, world=2, seed=7, train=True).tolist())
        seen[rank] = set(e0) | set(e1)
    assert not seen[0] & seen[1]


def test_eval_over_two_ranks_counts_each_test_image_once():
    n, world, mb = 101, 2, 10
    ds = id_dataset(n)
    got, steps = [], set()
    for rank in range(world):
        b = wd.DeviceBatches(ds, **common(rank=rank, world=world, micro_batch=mb), train=False)
        batches = list(b.epoch(0))
        assert len(batches) == b.steps_per_epoch
        steps.add(b.steps_per_epoch)
        labels = torch.cat([y for _, y in batches])
        real = labels[labels != wd.PAD_LABEL]
        assert len(real) == b.num_samples
        # A perfect classifier scores exactly its real samples; padding counts for nothing.
        logits = F.one_hot(labels.clamp(min=0), n).float()
        correct, counted = wd.eval_counts(logits, labels)
        assert int(correct) == int(counted) == b.num_samples
        got += real.tolist()
    assert steps == {6}  # 51 and 50 samples: both ranks run ceil(51 / 10) forward passes
    assert sorted(got) == list(range(n))


def test_eval_batches_are_not_augmented(small):
    b = wd.DeviceBatches(small, **common(micro_batch=50), train=False)
    x = torch.cat([x for x, _ in b.epoch(0)])[: len(small)]
    expected = wd.normalise(torch.from_numpy(small.images), 32, torch.float32, *wd._stats("cpu"))
    assert torch.equal(x, expected)


def test_crop_flip_matches_numpy_pad_slice_flip(small):
    imgs = torch.from_numpy(small.images[:40])
    padded = F.pad(imgs, (4, 4, 4, 4))
    order, oy, ox, flip = wd.epoch_plan(0, 0, 0, 40)
    assert flip.any() and not flip.all() and oy.min() >= 0 and ox.max() <= 8
    out = wd.crop_flip(padded, order, oy, ox, flip).numpy()
    ref_pad = np.pad(small.images[:40], ((0, 0), (0, 0), (4, 4), (4, 4)))
    for i in range(40):
        ref = ref_pad[order[i], :, oy[i] : oy[i] + 32, ox[i] : ox[i] + 32]
        np.testing.assert_array_equal(out[i], ref[:, :, ::-1] if flip[i] else ref)


@pytest.mark.process
@pytest.mark.parametrize("img_size", [32, 48])
@pytest.mark.parametrize("train", [True, False])
def test_device_and_dataloader_give_identical_batches(small, img_size, train):
    kw = common(rank=1, world=2, micro_batch=16, img_size=img_size, train=train)
    dev = wd.make_batches("device", small, **kw)
    assert dev.steps_per_epoch == (6 if train else 7)  # 101 // 16 train; ceil(102 / 16) eval
    for workers in (0, 2):
        loader = wd.make_batches("dataloader", small, num_workers=workers, **kw)
        assert loader.steps_per_epoch == dev.steps_per_epoch and loader.num_samples == dev.num_samples
        for epoch in (0, 3):
            a, b = list(dev.epoch(epoch)), list(loader.epoch(epoch))
            assert len(a) == len(b) == dev.steps_per_epoch
            for (xa, ya), (xb, yb) in zip(a, b):
                assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_same_seed_same_batches_other_seed_or_rank_differs(small):
    def first(**over):
        return next(wd.DeviceBatches(small, **common(world=2, **over)).epoch(0))[0]

    assert torch.equal(first(), first())
    assert not torch.equal(first(), first(seed=8))
    assert not torch.equal(first(), first(rank=1))


def test_upsampling_layout_and_dtype(small):
    b = wd.DeviceBatches(small, **common(micro_batch=4, img_size=224, channels_last=True), dtype=torch.bfloat16)
    x, y = next(b.epoch(0))
    assert x.shape == (4, 3, 224, 224) and x.dtype == torch.bfloat16 and y.dtype == torch.int64
    assert x.is_contiguous(memory_format=torch.channels_last)
    # Bilinear upsampling keeps the range of the normalised image.
    small_x, _ = next(wd.DeviceBatches(small, **common(micro_batch=4)).epoch(0))
    assert abs(float(x.float().mean()) - float(small_x.mean())) < 0.05


def test_drop_last_false_keeps_the_short_batch(small):
    b = wd.DeviceBatches(small, **common(micro_batch=16), drop_last=False)
    sizes = [len(y) for _, y in b.epoch(0)]
    assert sizes == [16] * 12 + [11] and b.num_samples == 203 == b.steps_per_epoch * 16 - 5


def test_too_small_a_fraction_is_bad_input(small):
    with pytest.raises(BadInput, match=r"^--dataset-fraction 0.1: synthetic 203 samples leave 10 per rank"):
        wd.DeviceBatches(small, **common(world=2, micro_batch=16), fraction=0.1)
    with pytest.raises(BadInput, match=r"^--dataset-fraction: 1.5 is outside"):
        wd.DeviceBatches(small, **common(), fraction=1.5)
    with pytest.raises(BadInput, match=r"^--data-path: unknown 'disk'"):
        wd.make_batches("disk", small, **common())


def test_tiny_vit_learns_synthetic_data_through_the_device_path():
    timm_vit = pytest.importorskip("timm.models.vision_transformer")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the machine is shared; one thread also fixes the float sums
    try:
        torch.manual_seed(0)
        model = timm_vit.VisionTransformer(img_size=32, patch_size=4, embed_dim=192, depth=2, num_heads=3, num_classes=10)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        train = wd.DeviceBatches(synthetic(10_000, 10, seed=0), **common(micro_batch=32, seed=0))
        losses = []
        for _, (x, y) in zip(range(30), train.epoch(0)):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        test = wd.DeviceBatches(synthetic(1000, 10, seed=0, split="test"), **common(micro_batch=250), train=False)
        model.eval()
        with torch.no_grad():
            counts = [wd.eval_counts(model(x), y) for x, y in test.epoch(0)]
        accuracy = sum(int(c) for c, _ in counts) / sum(int(n) for _, n in counts)
    finally:
        torch.set_num_threads(threads)
    assert np.mean(losses[-5:]) < 0.6 * np.mean(losses[:5]), losses
    assert accuracy > 0.5, accuracy  # chance is 0.1; measured 0.83 after these 30 steps


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_device_path_on_cuda_matches_the_cpu_loader(small):
    # CUDA's bilinear kernel may round differently from the CPU's: close, not bitwise.
    kw = common(rank=0, world=2, micro_batch=16, img_size=224)
    dev = wd.DeviceBatches(small, **{**kw, "device": torch.device("cuda")})
    cpu = wd.LoaderBatches(small, num_workers=0, **kw)
    for (xa, ya), (xb, yb) in zip(dev.epoch(2), cpu.epoch(2)):
        assert xa.is_cuda and ya.is_cuda
        assert torch.equal(ya.cpu(), yb)
        torch.testing.assert_close(xa.cpu(), xb, rtol=0, atol=1e-5)
