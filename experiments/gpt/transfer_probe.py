"""What a GPT pretraining checkpoint brings to the newsgroups mini (acceptance check G2), without finetuning: the
evidence behind the G2 reading in experiments/gpt/README.md.

* the tokenizer on the posts (through the finetuning data's own encoding): unknown-piece rate, pieces per word,
  posts longer than the ``max_len`` kept;
* LM NLL per token of the pretrained and of a randomly initialised model (same architecture) on the posts' first
  ``max_len`` pieces, beside the unigram NLL of the pretraining stream's counts (compare with the held-out NLL of
  the pretraining run: how far its corpus is from Usenet);
* 5-fold linear probes (the CV folds of ``data.n_folds=5``) on frozen features of both models — the mean final
  state, the last token's final state, the mean token embedding — and on a bag of pieces (the surface cue a model
  from scratch can learn).

    python experiments/gpt/transfer_probe.py outputs/gpt_books_mini/checkpoints/last.ckpt
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from genlab import checkpoints
from genlab.data.finetune.folds import fold_split
from genlab.data.finetune.minis import newsgroup_posts
from genlab.data.pretrain.gpt_windows import GPTPretrainDataModule
from genlab.data.tokenizers.gpt_bpe import load_gpt_tokenizer
from genlab.models.gpt import GPTLMHeadModel


def unigram_nll(train: np.ndarray, targets: np.ndarray, vocab_size: int) -> float:
    """NLL per token of ``targets`` under the add-one unigram of ``train`` (unigram_baseline.py's bar)."""
    counts = np.bincount(train, minlength=vocab_size).astype(np.float64) + 1.0
    return float(-np.log(counts[targets] / counts.sum()).mean())


def probe_accuracy(x: np.ndarray, y: np.ndarray, n_folds: int, scale: bool = True) -> float:
    """Mean accuracy over the ``n_folds`` stratified folds of a logistic regression on ``x``."""
    accs = []
    for k in range(n_folds):
        train, test = fold_split(y.tolist(), n_folds, k)
        clf = LogisticRegression(max_iter=5000)
        clf = make_pipeline(StandardScaler(), clf) if scale else clf
        accs.append(clf.fit(x[train], y[train]).score(x[test], y[test]))
    return float(np.mean(accs))


@torch.no_grad()
def features(model: GPTLMHeadModel, posts: list[list[int]]) -> tuple[float, dict[str, np.ndarray]]:
    """(LM NLL per predicted token over all posts, frozen features per post)."""
    model.eval()
    nll, out = [], {"mean final state": [], "last-token final state": [], "mean token embedding": []}
    for ids in posts:
        x = torch.tensor([ids])
        res = model(x)
        h = res.hidden[0]
        if len(ids) > 1:
            nll.append(F.cross_entropy(model.lm_logits(h[:-1], res, special_rows=False), x[0, 1:], reduction="none"))
        out["mean final state"].append(h.mean(0).numpy())
        out["last-token final state"].append(h[-1].numpy())
        out["mean token embedding"].append(model.transformer.tokens_embed.weight[x[0]].mean(0).numpy())
    return float(torch.cat(nll).mean()), {k: np.stack(v) for k, v in out.items()}


def main(argv: list[str]) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="a GPT pretraining .ckpt (gpt_books_mini's last.ckpt)")
    parser.add_argument("--max-len", type=int, default=126, help="pieces kept per post (the G2 protocol: 126)")
    parser.add_argument("--n-folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0, help="initialisation of the random model")
    args = parser.parse_args(argv)
    ckpt = checkpoints.load(args.checkpoint, key="checkpoint")
    config = checkpoints.run_config(ckpt, args.checkpoint)
    arch = {k: v for k, v in config["model"].items() if k != "_target_"}
    arch["vocab_size"] = checkpoints.data_identity(ckpt)["vocab_size"]
    tok = load_gpt_tokenizer(args.checkpoint)
    bodies, labels, _ = newsgroup_posts()
    y = np.array(labels)
    full = [tok.encode(b) for b in bodies]
    posts = [ids[: args.max_len] for ids in full]
    pieces = np.concatenate([np.array(ids) for ids in full])
    res = {"unk_rate": float((pieces == 0).mean()), "pieces_per_word": len(pieces) / sum(len(b.split()) for b in bodies),
           "longer_than_max_len": float(np.mean([len(ids) > args.max_len for ids in full]))}
    print(f"tokenizer {tok.identity} on {len(bodies)} posts: unknown pieces {res['unk_rate']:.2%}, "
          f"{res['pieces_per_word']:.2f} pieces per word, {res['longer_than_max_len']:.0%} of posts longer than "
          f"{args.max_len} pieces")
    data = {k: v for k, v in config["data"].items() if k not in ("_target_", "tokenizer")}
    stream = GPTPretrainDataModule(**data, tokenizer=args.checkpoint)
    stream.setup()
    targets = np.concatenate([np.array(ids[1:]) for ids in posts])
    res["unigram nll"] = unigram_nll(np.asarray(stream.streams["train"]), targets, tok.vocab_size)
    torch.manual_seed(args.seed)
    random_model = GPTLMHeadModel(**arch)
    pretrained = GPTLMHeadModel(**arch)
    pretrained.load_state_dict(checkpoints.submodule_weights(ckpt))
    print(f"LM NLL per piece on the posts' first {args.max_len} pieces (unigram of the pretraining stream, as G1's "
          f"bar: {res['unigram nll']:.3f})")
    for name, model in (("pretrained", pretrained), ("random init", random_model)):
        nll, feats = features(model, posts)
        res[f"{name} nll"] = nll
        print(f"  {name}: {nll:.3f}")
        for what, x in feats.items():
            res[f"{name} {what}"] = probe_accuracy(x, y, args.n_folds)
    bag = np.zeros((len(posts), tok.vocab_size))
    for r, ids in enumerate(posts):
        bag[r, ids] = 1.0
    res["bag of pieces"] = probe_accuracy(bag, y, args.n_folds, scale=False)
    print(f"{args.n_folds}-fold linear probes (logistic regression, frozen features):")
    for key in [k for k in res if k.startswith(("pretrained ", "random init ", "bag"))]:
        if not key.endswith(" nll"):
            print(f"  {key}: {res[key]:.3f}")
    return res


if __name__ == "__main__":
    main(sys.argv[1:])
