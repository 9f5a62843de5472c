"""Relative effective context length (Yang's thesis §2.1.4, Table 2.9) of a group of trained runs.

    python experiments/transformer_xl/recl.py --model txl=RUN_DIR --model vanilla=RUN_DIR:128 \\
        [--split test] [--tokens 2000] [--c0 100 --delta 100 --c-max 1000] [--r 0.1,0.5,1.0] \\
        [--mode strict|attn_len] [--tgt-len 128] [--out recl.json]

Every model of a group shares one baseline, so pass the models Table 2.9 compares together (e.g. TXL, QRNN and
LSTM; or the four 128M ablations). ``NAME=RUN_DIR:CAP`` caps a model's context at CAP tokens (the vanilla
Transformer's training length). The last ``--tokens`` positions of the split are scored; each sees ``c`` previous
tokens for c = c0, c0 + delta, ..., c-max (strict: a sliding window without memory, the default for small-scale
replication; attn_len: evaluation memory c with same_length, cheap but leaky). Prints Markdown and one JSON line.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from genlab.analysis.recl import memory_losses, recl_table, window_losses
from genlab.cli.errors import run_script
from genlab.errors import UserError
from genlab.runs import load_run


def parse_model(text: str) -> tuple[str, Path, int | None]:
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest:
        raise UserError(f"--model {text!r}: use NAME=RUN_DIR or NAME=RUN_DIR:CAP")
    path, _, cap = rest.rpartition(":") if rest.rsplit(":", 1)[-1].isdigit() else (rest, "", "")
    return name, Path(path), int(cap) if cap else None


def run_corpus(run):
    """The tokenised corpus (vocabulary and splits) a language-modelling run trained on."""
    from genlab import assemble

    dm = assemble.build_data(run.config.data)
    dm.prepare_data()
    dm.setup("test")
    if not hasattr(dm, "corpus"):
        raise UserError(f"{run.dir}: needs a language-modelling run (a token stream)")
    return dm.corpus


def split_tokens(run, split: str, corpus=None) -> torch.Tensor:
    corpus = corpus or run_corpus(run)
    if split not in corpus.splits:
        raise UserError(f"--split {split!r}: choose one of {', '.join(corpus.splits)}")
    return torch.as_tensor(corpus.splits[split].astype("int64"))


def model_losses(run_dir: Path, cap: int | None, contexts: list[int], args) -> dict[int, object]:
    run = load_run(run_dir)
    model = run.load_task().model.eval()
    tokens = split_tokens(run, args.split)
    if tokens.numel() <= contexts[-1] + 1:
        raise UserError(f"the {args.split} split has {tokens.numel()} tokens, fewer than c-max={contexts[-1]} + 1")
    n = min(args.tokens, tokens.numel() - contexts[-1] - 1)
    positions = torch.arange(tokens.numel() - n, tokens.numel())
    out = {}
    for c in contexts:
        seen = min(c, cap) if cap else c
        if args.mode == "strict":
            out[c] = window_losses(model, tokens, seen, positions, args.batch_size)
        else:
            out[c] = memory_losses(model, tokens, seen, positions, args.tgt_len)
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", required=True, help="NAME=RUN_DIR[:CAP], once per model of the group")
    ap.add_argument("--split", default="test")
    ap.add_argument("--tokens", type=int, default=2000, help="scored positions (the split's last ones)")
    ap.add_argument("--c0", type=int, default=100)
    ap.add_argument("--delta", type=int, default=100)
    ap.add_argument("--c-max", type=int, default=1000)
    ap.add_argument("--r", default="0.1,0.5,1.0", help="comma-separated hard-position ratios")
    ap.add_argument("--threshold", type=float, default=0.01)
    ap.add_argument("--mode", choices=("strict", "attn_len"), default="strict")
    ap.add_argument("--tgt-len", type=int, default=128, help="attn_len mode: the evaluation segment length")
    ap.add_argument("--batch-size", type=int, default=64, help="strict mode: windows per forward pass")
    ap.add_argument("--out", type=Path, help="also write the result as JSON here")
    args = ap.parse_args(argv)
    contexts = list(range(args.c0, args.c_max + 1, args.delta))
    rs = [float(r) for r in args.r.split(",")]
    models = [parse_model(m) for m in args.model]
    group = {name: model_losses(path, cap, contexts, args) for name, path, cap in models}
    caps = {name: cap for name, _, cap in models if cap}
    table = recl_table(group, rs, args.c0, args.delta, args.threshold, caps)
    print("| model | " + " | ".join(f"r = {r}" for r in rs) + " |")
    print("|---|" + "---|" * len(rs))
    for name, row in table.items():
        print(f"| {name} | " + " | ".join(str(row[r]) for r in rs) + " |")
    result = {"mode": args.mode, "contexts": contexts, "tokens": int(next(iter(group.values()))[contexts[0]].size),
              "threshold": args.threshold, "recl": {name: {str(r): v for r, v in row.items()}
                                                    for name, row in table.items()}}
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    run_script(main)
