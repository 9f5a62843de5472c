"""Has a BERT or XLNet pretraining checkpoint collapsed? The mean pairwise cosine of its last-layer hidden states.

A model stuck on the unigram plateau can have learnt to output the same vector for every input and position (the
LM head then only needs the target frequencies); a finetuning head on such an encoder sees a constant and stays at
the majority class. This script runs each checkpoint's encoder (eval mode) on random token sequences and prints the
mean cosine between all pairs of (sequence, position) hidden states: near 1 is a collapsed encoder; a fresh
initialisation gives about 0.6 (the XLNet midi).

    python experiments/xlnet_ablation/collapse_probe.py outputs/xlnet_ablation_midi/row*/pretrain/checkpoints/last.ckpt
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from genlab import checkpoints
from genlab.errors import CheckpointError
from genlab.models.bert import BertForPretraining
from genlab.models.xlnet import XLNetLMHeadModel

COLLAPSED = 0.99  # mean cosine above which every hidden state points the same way
MODELS = {"BertForPretraining": BertForPretraining, "XLNetLMHeadModel": XLNetLMHeadModel}


def load_model(ckpt: str) -> torch.nn.Module:
    """The checkpoint's pretraining model (eval mode), built from the config genlab recorded in it."""
    state = checkpoints.load(ckpt)
    cfg = dict(state.get("genlab", {}).get("config", {}).get("model", {}))
    name = cfg.pop("_target_", "").rsplit(".", 1)[-1]
    if name not in MODELS:
        raise CheckpointError(f"{ckpt}: its model is {name or 'unknown'}; this probe reads {sorted(MODELS)}.")
    weights = {k[len("model."):]: v for k, v in state["state_dict"].items() if k.startswith("model.")}
    cfg["vocab_size"] = next(v for k, v in weights.items() if k.endswith("word_embedding.weight")
                             or k.endswith("word_embeddings.weight")).shape[0]
    model = MODELS[name](**cfg)
    model.load_state_dict(weights)
    return model.eval()


@torch.no_grad()
def mean_cosine(model: torch.nn.Module, batch: int, length: int, seed: int) -> float:
    gen = torch.Generator().manual_seed(seed)
    if isinstance(model, BertForPretraining):
        vocab = model.bert.embeddings.word_embeddings.num_embeddings
        hidden = model(torch.randint(10, vocab, (batch, length), generator=gen)).hidden
    else:
        vocab = model.transformer.word_embedding.num_embeddings
        hidden = model.hidden_states(torch.randint(10, vocab, (batch, length), generator=gen)).hidden
    unit = F.normalize(hidden.reshape(-1, hidden.shape[-1]).float(), dim=-1)
    cos = unit @ unit.T
    return float(cos[~torch.eye(len(cos), dtype=torch.bool)].mean())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("checkpoints", nargs="+", help="pretraining .ckpt files (BERT or XLNet)")
    p.add_argument("--batch", type=int, default=8, help="random sequences (default 8)")
    p.add_argument("--length", type=int, default=64, help="tokens per sequence (default 64)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    for ckpt in args.checkpoints:
        cos = mean_cosine(load_model(ckpt), args.batch, args.length, args.seed)
        print(f"{ckpt}: mean pairwise cosine of the last-layer hidden states {cos:.3f}"
              + (" (collapsed)" if cos > COLLAPSED else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
