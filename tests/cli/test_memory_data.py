"""The memory estimate counts the images an image DataModule decodes into host memory, from the dataset's published
sizes before any file is read (``genlab.cli.memory_data``); measured against real-size files in
experiments/perf/real_scale.md."""

from __future__ import annotations

import math

import pytest
import torch

from genlab import assemble
from genlab.cli import memory, memory_data, memory_probe
from genlab.data.images.datamodule import IMAGE_SIZES, OneClassImageDataModule, SSLImageDataModule
from genlab.data.qa.datamodule import HELD_PER_JSON_BYTE, HELD_PER_UNLABELED_PAIR, SQUAD11_BYTES


def test_an_image_run_counts_its_decoded_images_before_any_file_is_read(compose_cfg, tmp_path, monkeypatch):
    cfg = compose_cfg(["experiment=bad_gan_svhn", "data.source=path", f"data.path={tmp_path / 'none'}"])
    # SVHN's 73,257 training images read as uint8 (three copies at the reader's peak), then float32: all of them,
    # the 1,000 labelled ones and the 26,032 test images (the unlabelled pool is the whole set: no copy)
    assert memory_data.dataset_bytes(cfg) == 3072 * (3 * 73_257 + 4 * (73_257 + 1_000 + 26_032))
    monkeypatch.setattr(memory_probe, "activation_bytes", lambda *a: 0)  # this test is about the data's share
    task = assemble.build_task(cfg, sizes=memory.sizes_before_data(cfg))
    on_cpu, on_gpu = memory.estimate(cfg, task), memory.estimate(cfg, task, on_cpu=False)
    assert on_cpu.dataset_bytes == memory_data.dataset_bytes(cfg) and "decoded dataset 1.78" in on_cpu.describe()
    assert on_gpu.dataset_bytes == 0  # host memory: not the device's
    assert on_cpu.total_bytes - on_gpu.total_bytes == on_cpu.dataset_bytes + on_cpu.baseline_bytes
    assert not (tmp_path / "none").exists()
    assert memory_data.dataset_bytes(compose_cfg(["experiment=txl_mini"])) == 0  # a memory-mapped token cache
    # GDAN: its SQuAD files where data.path says (the official v1.1 sizes when absent) and |U| = 50K drawn pairs
    gdan = compose_cfg(["experiment=gdan_squad_r0.1", "data.source=path", f"data.path={tmp_path / 'none'}"])
    assert memory_data.dataset_bytes(gdan) == HELD_PER_JSON_BYTE * sum(SQUAD11_BYTES.values()) \
        + HELD_PER_UNLABELED_PAIR * 50_000


def _held_bytes(dm) -> int:
    """Bytes of the distinct tensor storages the DataModule keeps after setup."""
    storages = {id(v.untyped_storage()): v.untyped_storage().nbytes() for v in vars(dm).values()
                if isinstance(v, torch.Tensor)}
    return sum(storages.values())


@pytest.mark.parametrize("kwargs", [
    {"dataset": "mnist5k", "n_labeled": 100, "n_valid": 200, "unlabeled_pool": "exclude_labeled", "flatten": True},
    {"dataset": "digits", "n_labeled": 50, "unlabeled_pool": "all", "flatten": False},
])
def test_setup_bytes_cover_what_setup_keeps_and_no_more_than_its_transients(kwargs):
    dm = SSLImageDataModule(source="mini", **kwargs)
    dm.setup()
    n_train, n_test, shape = IMAGE_SIZES[kwargs["dataset"]]  # the published sizes are the data's
    assert (len(dm.x_unl) + (kwargs["n_labeled"] if kwargs["unlabeled_pool"] == "exclude_labeled" else 0)
            + len(getattr(dm, "valid_indices", []))) == n_train
    assert len(dm.x_test) == n_test and dm.x_test[0].numel() == math.prod(shape)
    held, counted = _held_bytes(dm), dm.setup_bytes()
    # what setup kept, plus what it freed on the way: the reader's uint8 copies and the float32 copy of every image
    freed = math.prod(shape) * (3 * n_train + n_test + 4 * n_train)
    assert held < counted <= held + freed


def test_one_class_setup_bytes_cover_the_digit_kept():
    dm = OneClassImageDataModule(dataset="mnist5k", digit=3)
    dm.setup()
    n_train, n_test, shape = IMAGE_SIZES["mnist5k"]
    assert _held_bytes(dm) < dm.setup_bytes() <= math.prod(shape) * 4 * (n_train + n_test)


def test_a_pixelcnn_step_is_probed_and_grows_with_its_batch(compose_cfg):
    rows = {}
    for batch in (2, 4):
        cfg = compose_cfg(["experiment=pixelcnn_mnist_mini", f"data.batch_size={batch}"])
        task = assemble.build_task(cfg, sizes=memory.sizes_before_data(cfg) or {})
        rows[batch] = memory_probe.activation_bytes(cfg, task)
    assert rows[2] is not None and 0 < rows[2] < rows[4] <= 2.2 * rows[2]  # ~linear in the images
