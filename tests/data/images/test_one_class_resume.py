"""A one-class image stream (CEGAN's NIST ranking, [Dai et al. 2017, §5]) resumes mid-epoch: a checkpoint taken after
two batches continues with the third batch of the same order, not a fresh permutation."""

from types import SimpleNamespace

import torch

from genlab.data.images.datamodule import OneClassImageDataModule


def _module(tmp_path, epoch: int) -> OneClassImageDataModule:
    dm = OneClassImageDataModule(dataset="digits", source="mini", cache_dir=str(tmp_path), digit=1, batch_size=16,
                                 seed=3)
    dm.setup("fit")
    dm.trainer = SimpleNamespace(training=True, current_epoch=epoch)
    return dm


def test_one_class_stream_resumes_at_the_checkpointed_batch(tmp_path):
    dm = _module(tmp_path, 0)
    batches = iter(dm.train_dataloader())
    for _ in range(2):
        dm.on_before_batch_transfer(next(batches), 0)
    expected = next(batches)["x"]
    resumed = _module(tmp_path, 0)
    resumed.load_state_dict(dm.state_dict())
    assert torch.equal(next(iter(resumed.train_dataloader()))["x"], expected)
    assert not torch.equal(next(iter(_module(tmp_path, 0).train_dataloader()))["x"], expected)
