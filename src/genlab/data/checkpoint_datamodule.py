"""Classification data tokenised with a pretrained checkpoint's own tokenizer, WordPiece included.

``ClassificationDataModule`` takes ``data.tokenizer`` as a SentencePiece model and writes XLNet's fixed special ids.
This subclass accepts anything :func:`genlab.data.checkpoint_tokenizer.load_tokenizer` does (an HF BERT or XLNet
folder, ``vocab.txt``, ``.model``) and writes the vocabulary's own ``[CLS]``/``[SEP]``/``[PAD]`` ids. It is a bridge
until ``finetune_datamodule`` calls ``load_tokenizer``/``special_ids`` itself; select it with
``data._target_=genlab.data.checkpoint_datamodule.CheckpointClassificationDataModule``.
"""

from __future__ import annotations

import numpy as np

from genlab.data import finetune_datamodule as base
from genlab.data.checkpoint_tokenizer import (
    FinetuneTokenizer,
    load_tokenizer,
    special_ids,
)
from genlab.data.glue import Example


def encode_pair(a: list[int], b: list[int] | None, max_len: int, layout: str, cls_id: int = base.CLS_ID,
                sep_id: int = base.SEP_ID, pad_id: int = base.PAD_ID) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``base.encode_pair`` (same truncation, positions, segments and padding side) with the special ids as
    arguments."""
    a, b = base.truncate_pair(a, b, max_len - (3 if b is not None else 2))
    tail = b + [sep_id] if b is not None else []
    tail_seg = [base.SEG_B] * len(tail)
    if layout == "xlnet":  # A <sep> B <sep> <cls>, left padding
        ids, seg = a + [sep_id] + tail + [cls_id], [base.SEG_A] * (len(a) + 1) + tail_seg + [base.SEG_CLS]
        pad = max_len - len(ids)
        return (np.array([pad_id] * pad + ids), np.array([base.SEG_PAD] * pad + seg),
                np.array([0] * pad + [1] * len(ids)))
    ids, seg = [cls_id] + a + [sep_id] + tail, [0] * (len(a) + 2) + [1] * len(tail)  # [CLS] A [SEP] B [SEP]
    pad = max_len - len(ids)
    return np.array(ids + [pad_id] * pad), np.array(seg + [0] * pad), np.array([1] * len(ids) + [0] * pad)


class CheckpointClassificationDataModule(base.ClassificationDataModule):
    """Same keys as ``ClassificationDataModule``; ``tokenizer`` may be any checkpoint tokenizer (see module doc)."""

    def _load_tokenizer(self, train_texts: list[str]) -> FinetuneTokenizer:
        if self.tokenizer_file is None:
            return super()._load_tokenizer(train_texts)
        return load_tokenizer(self.tokenizer_file, self.lower)

    def _encode(self, name: str, examples: list[Example], labelled: bool) -> base.EncodedSplit:
        specials = special_ids(self.tokenizer)
        if not specials:  # SentencePiece: XLNet's fixed ids are right
            return super()._encode(name, examples, labelled)
        tok, n = self.tokenizer, len(examples)
        ids = np.zeros((n, self.max_seq_len), dtype=np.int64)
        seg, mask = np.zeros_like(ids), np.zeros_like(ids)
        for i, ex in enumerate(examples):
            b = tok.encode(ex.text_b) if ex.text_b is not None else None
            ids[i], seg[i], mask[i] = encode_pair(tok.encode(ex.text_a), b, self.max_seq_len, self.layout, **specials)
        labels = None
        if labelled:
            labels = (np.array([e.label for e in examples], dtype=np.float32) if self.is_regression
                      else np.array([self.labels.index(e.label) for e in examples], dtype=np.int64))
        return base.EncodedSplit(name, [e.guid for e in examples], ids, seg, mask, labels)
