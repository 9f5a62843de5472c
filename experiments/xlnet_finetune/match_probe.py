"""Can a tiny backbone trained from scratch learn to find a token of one segment in the other? A synthetic probe of the
skill the cloze SQuAD 2.0 null decision and the cloze RACE options need (is this sentence / option in the passage?).

Input: A = ``--passage`` random ids, B = 5 random ids, in the backbone's own finetuning layout (XLNet:
``A <sep> B <sep> <cls>``; BERT: ``[CLS] A [SEP] B [SEP]``), summarised and scored by ``Linear(d, 2)``. Label:

* ``identity`` (control): whether B's middle id lies in the lower half of the vocabulary, a lookup at a fixed place;
* ``membership``: whether B's middle id occurs in A (half the examples copy it from a random place of A, the other
  half draw an id that A does not hold).

Labels are balanced; AdamW at a constant learning rate, batch ``--batch``; accuracy on one fixed set of 512
held-out examples every ``--eval-every`` steps (0.5 = chance; a model stuck on one class scores that set's share of
the class). One process, ``OMP_NUM_THREADS=1`` for comparable timings:

    python experiments/xlnet_finetune/match_probe.py --model xlnet --task membership --vocab 200
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from torch import nn

from genlab.data.finetune.datamodule import encode_pair
from genlab.models.backbones import adapt
from genlab.models.bert import BertForPretraining
from genlab.models.xlnet import XLNetLMHeadModel

FIRST_ID = 10  # ids below are specials (<cls> 3, <sep> 4, padding 0)


def make_backbone(kind: str, vocab: int, layers: int, d_model: int, init_std: float = 0.02) -> nn.Module:
    heads = 4
    if kind == "bert":
        return adapt(BertForPretraining(vocab_size=vocab, n_layer=layers, d_model=d_model, n_head=heads,
                                        d_inner=2 * d_model, init_std=init_std))
    if kind == "torch":
        return TorchEncoder(vocab, layers, d_model, heads)
    return adapt(XLNetLMHeadModel(vocab_size=vocab, n_layer=layers, d_model=d_model, n_head=heads,
                                  d_head=d_model // heads, d_inner=2 * d_model, init_std=init_std))


class TorchEncoder(nn.Module):
    """Control outside genlab: a stock post-LN ``nn.TransformerEncoder`` with learned positions and segments, read
    at the first token (BERT layout). If it fails the probe too, the probe is hard, not our models wrong."""

    def __init__(self, vocab: int, layers: int, d_model: int, heads: int, max_len: int = 512):
        super().__init__()
        self.word, self.pos = nn.Embedding(vocab, d_model), nn.Embedding(max_len, d_model)
        self.seg = nn.Embedding(2, d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, 2 * d_model, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def encode(self, ids: torch.Tensor, seg: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.word(ids) + self.pos.weight[: ids.shape[1]] + self.seg(seg)
        return self.encoder(x, src_key_padding_mask=~mask.bool())

    def summary(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden[:, 0]


def make_batch(rng: np.random.Generator, n: int, task: str, vocab: int, passage: int, layout: str):
    rows, labels = [], []
    for _ in range(n):
        a = rng.integers(FIRST_ID, vocab, passage).tolist()
        b = rng.integers(FIRST_ID, vocab, 5).tolist()
        label = int(rng.integers(2))
        if task == "identity":
            half = (FIRST_ID + vocab) // 2
            b[2] = int(rng.integers(FIRST_ID, half) if label else rng.integers(half, vocab))
        elif label:
            b[2] = a[int(rng.integers(passage))]
        else:
            while b[2] in a:
                b[2] = int(rng.integers(FIRST_ID, vocab))
        rows.append(encode_pair(a, b, passage + 8, layout))
        labels.append(label)
    ids, seg, mask = (torch.from_numpy(np.stack(x)) for x in zip(*rows))
    return ids, seg, mask, torch.tensor(labels)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=("xlnet", "bert", "torch"), default="xlnet",
                   help="torch = a stock nn.TransformerEncoder in the BERT layout (control)")
    p.add_argument("--task", choices=("identity", "membership"), default="membership")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--vocab", type=int, default=2000)
    p.add_argument("--passage", type=int, default=100)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--init-std", type=float, default=0.02, help="the backbone's init std (0.02 = BERT/XLNet-Base)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    layout = "xlnet" if args.model == "xlnet" else "bert"
    backbone = make_backbone(args.model, args.vocab, args.layers, args.d_model, args.init_std)
    head = nn.Linear(args.d_model, 2)
    opt = torch.optim.AdamW([*backbone.parameters(), *head.parameters()], lr=args.lr)
    held_out = make_batch(np.random.default_rng(args.seed + 1), 512, args.task, args.vocab, args.passage, layout)

    def logits(ids, seg, mask):
        return head(backbone.summary(backbone.encode(ids, seg, mask)))

    print(f"{args.model} {args.layers}x{args.d_model}, init std {args.init_std}, vocab {args.vocab}, passage {args.passage}, task {args.task}")
    print("step  train_loss  held_out_acc  seconds")
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        *inputs, labels = make_batch(rng, args.batch, args.task, args.vocab, args.passage, layout)
        loss = nn.functional.cross_entropy(logits(*inputs), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % args.eval_every == 0:
            backbone.eval()
            with torch.no_grad():
                acc = (logits(*held_out[:3]).argmax(-1) == held_out[3]).float().mean().item()
            backbone.train()
            print(f"{step:5d}  {loss.item():10.3f}  {acc:12.3f}  {time.perf_counter() - start:7.0f}", flush=True)


if __name__ == "__main__":
    main()
