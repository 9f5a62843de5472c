"""What tasks may read from a DataModule besides its batches: small documented protocols, one per task family.

Tasks get the DataModule only through :func:`datamodule_of` and read only the members listed here (a test scans the
task and callback sources to keep it so). The DataModules under ``genlab.data`` provide them; a new DataModule for an
existing task provides the members of that task's protocol.

* AWD-LSTM (``tasks.awd_lm``): :class:`StreamData` (``identity()``, ``corpus``);
* every finetuning task (``tasks.finetune_base``): :class:`IdentifiedData` (``identity()``), and
  sequence classification :class:`ClassificationData`, span extraction :class:`SpanData`, multiple choice
  :class:`MultipleChoiceData`; GPT finetuning (``tasks.gpt``): ``ClassificationData`` when the data has dev
  splits (GLUE, SNLI, SciTail, documents), else ``MultipleChoiceData`` (RACE, Story Cloze);
* bad GAN (``tasks.bad_gan`` and its pictures, ``callbacks.gan_images``): :class:`SSLImageData` (the 2-D toys of
  ``data.synthetic.ssl_toy2d`` too; ``reference_images`` only with a density model; with
  ``task.fake_source=data`` each training batch carries ``x_fake``);
* CEGAN (``tasks.cegan``): :class:`Toy2DData` (grid KLs) and/or :class:`OneClassImageData` (energy ranking);
* LM, pretraining (PLM / DAE / MLM), Planetoid, PixelCNN++: nothing, batches only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from torch import Tensor


class IdentifiedData(Protocol):
    def identity(self) -> dict[str, Any]:
        """What checkpoints record and check (dataset, vocabulary / tokenizer fingerprints; genlab.checkpoints)."""
        ...


class StreamData(IdentifiedData, Protocol):
    corpus: Any  # the tokenised corpus; None before setup (identity is recorded only once it exists)


class ClassificationData(IdentifiedData, Protocol):
    task: str  # e.g. "sst2", named in messages
    n_labels: int  # 1 = regression
    labels: Sequence[str]
    dev_splits: Sequence[str]  # labelled evaluation splits, in dataloader order

    def test_split_names(self) -> list[str]:
        """Splits of the test dataloaders, in order (labelled dev splits, then unlabelled prediction splits)."""
        ...

    def write_predictions(self, split: str, predictions: list, out_dir: Path) -> Path | None:
        """Write predictions of an unlabelled split in the benchmark's submission format."""
        ...


class SpanData(IdentifiedData, Protocol):
    features: Mapping[str, Any]  # "dev": the windows of the evaluation split (one per dataloader item, in order)
    dev_examples: Any  # the questions those windows come from
    dev_data: Any  # the evaluation split in the official JSON layout (for the official scorer)
    dev_version: str  # optional: "1.1" / "2.0" of the evaluation split (default: the task's version)


class MultipleChoiceData(IdentifiedData, Protocol):
    test_split: str  # optional: the name prediction files carry (default "test")


class SSLImageData(Protocol):
    x_unl: Tensor  # every unlabelled training image (density pretraining on the minis)
    iters_per_epoch: int  # optimiser steps in one pass over the unlabelled stream

    def train_dataloader(self) -> Iterable[dict[str, Tensor]]: ...

    def reference_images(self, which: str) -> Tensor:
        """Real images of the named set (``test`` / ``train_unlabeled``) for the low-density threshold."""
        ...


class Toy2DData(Protocol):
    x: Tensor  # the training points [N, 2]
    truth: Any  # the true density: log_density(cells), means, weights


class OneClassImageData(Protocol):
    x_train: Tensor
    x_test: Tensor


PROTOCOLS = (IdentifiedData, StreamData, ClassificationData, SpanData, MultipleChoiceData, SSLImageData, Toy2DData,
             OneClassImageData)


def members(protocol: type) -> set[str]:
    """Attribute and method names a protocol declares (with those of the protocols it extends)."""
    names: set[str] = set()
    for cls in protocol.__mro__:
        if cls in (object, Protocol) or cls.__name__ == "Generic":
            continue
        names |= {n for n in vars(cls) if not n.startswith("_")} | set(getattr(cls, "__annotations__", {}))
    return names


def datamodule_of(module: Any) -> Any | None:
    """The DataModule of the Trainer a LightningModule is attached to; None outside a Trainer or without one."""
    trainer = getattr(module, "_trainer", None)
    return getattr(trainer, "datamodule", None) if trainer is not None else None
