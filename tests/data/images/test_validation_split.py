"""Model selection never reads the test images: the semi-supervised image minis validate on training images held
out of both pools (bad-GAN minis' ``data.n_valid``), while ``n_valid=0`` keeps the reference code's pools."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from genlab.data.images.datamodule import SSLImageDataModule
from genlab.errors import ConfigError

pytest.importorskip("sklearn", reason="the digits mini reads scikit-learn's 8x8 digits")


def _rows(x: torch.Tensor) -> set[bytes]:
    return {r.numpy().tobytes() for r in x}


@pytest.mark.parametrize("preset", ["bad_gan_mnist_fm_mini", "bad_gan_svhn_fm_mini"])
def test_bad_gan_minis_validate_on_held_out_training_images(preset, compose_cfg, tmp_path):
    cfg = compose_cfg([f"experiment={preset}", f"paths.cache_dir={tmp_path}"])
    assert cfg.data.n_valid > 0
    from genlab.assemble import build_data

    dm = build_data(cfg.data)
    dm.prepare_data()
    dm.setup("fit")
    valid = _rows(dm.x_valid)
    assert len(dm.x_valid) == cfg.data.n_valid
    assert valid.isdisjoint(_rows(dm.x_test)) or len(valid & _rows(dm.x_test)) < 3  # duplicate digits only
    assert valid.isdisjoint(_rows(dm.x_lab)) and valid.isdisjoint(_rows(dm.x_unl))
    val_x = torch.cat([b["x"] for b in dm.val_dataloader()])
    test_x = torch.cat([b["x"] for b in dm.test_dataloader()])
    assert torch.equal(val_x, dm.x_valid) and torch.equal(test_x, dm.x_test)


def test_without_n_valid_the_pools_are_the_reference_codes(tmp_path):
    held = SSLImageDataModule("digits", cache_dir=str(tmp_path), n_labeled=100, seed=3, n_valid=200)
    plain = SSLImageDataModule("digits", cache_dir=str(tmp_path), n_labeled=100, seed=3)
    held.setup(), plain.setup()
    assert len(plain.x_unl) + len(plain.x_lab) == len(held.x_unl) + len(held.x_lab) + 200
    assert torch.equal(plain.x_valid, plain.x_test)  # n_valid=0: the paper's protocol, no validation set
    # the validation images are the same for every seed, so a seed sweep selects on one split
    other = SSLImageDataModule("digits", cache_dir=str(tmp_path), n_labeled=100, seed=4, n_valid=200)
    other.setup()
    assert np.array_equal(held.valid_indices, other.valid_indices)
    with pytest.raises(ConfigError, match="data.n_valid"):
        SSLImageDataModule("digits", cache_dir=str(tmp_path), n_valid=-1)
