"""Bad-GAN spec §7 items 18/20 on offline data: FM bad GAN vs supervised-only D (same D, noise, optimiser and
iterations) on MNIST-5k (10 labels per class, exact MNIST D/G), several seeds = different labelled subsets.

    python experiments/bad_gan/ssl_gain.py --dataset mnist5k --iters 1400 --seeds 0 1 2 --out experiments/bad_gan

Writes ``ssl_gain_<dataset>.json`` (per-seed numbers) and ``ssl_gain_<dataset>.md`` (mean ± std table).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from functools import partial
from pathlib import Path

import pytorch_lightning as pl
import torch

from genlab.data.image_datamodule import SSLImageDataModule
from genlab.models.bad_gan import BadGAN, MLPDiscriminator, MLPGenerator
from genlab.tasks.bad_gan import BadGANTask

NETS = {
    "mnist5k": lambda: BadGAN(MLPDiscriminator(), MLPGenerator()),
    "digits": lambda: BadGAN(MLPDiscriminator(in_dim=64, hidden=(256, 128, 64)),
                             MLPGenerator(z_dim=32, hidden=(128, 128), out_dim=64)),
}


def run(dataset: str, mode: str, seed: int, iters: int, eval_every: int, cache: str | None, extra: dict) -> dict:
    pl.seed_everything(seed, workers=True)
    dm = SSLImageDataModule(dataset=dataset, source="mini", cache_dir=cache, n_labeled=100, seed=seed,
                            batch_size=100, labeled_batch_size=100)
    task = BadGANTask(NETS[dataset](), optimizer=partial(torch.optim.Adam, lr=3e-3, betas=(0.5, 0.9999)),
                      g_optimizer=partial(torch.optim.Adam, lr=1e-3, betas=(0.0, 0.9999)),
                      supervised_only=(mode == "supervised"), **extra)
    trainer = pl.Trainer(max_steps=iters, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, val_check_interval=eval_every,
                         check_val_every_n_epoch=None, num_sanity_val_steps=0)
    t0 = time.time()
    trainer.fit(task, datamodule=dm)
    out = {k.split("/", 1)[1]: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("valid/")}
    out.update(seed=seed, mode=mode, seconds=round(time.time() - t0, 1), labeled_digest=dm.labeled_digest)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="mnist5k", choices=sorted(NETS))
    ap.add_argument("--iters", type=int, default=1400)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--modes", nargs="+", default=["fm", "supervised"])
    ap.add_argument("--cache", default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(Path(__file__).parent))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    path = out / f"ssl_gain_{args.dataset}.json"
    rows = json.loads(path.read_text()) if path.exists() else []
    for seed in args.seeds:
        for mode in args.modes:
            if any(r["seed"] == seed and r["mode"] == mode and r.get("iters") == args.iters for r in rows):
                continue
            r = run(args.dataset, mode, seed, args.iters, args.eval_every, args.cache, {})
            r["iters"] = args.iters
            rows.append(r)
            path.write_text(json.dumps(rows, indent=1))
            print(json.dumps(r), flush=True)
    lines = [f"# SSL gain on {args.dataset} (100 labels, {args.iters} iterations, final eval-mode test error)", "",
             "| mode | seeds | test err % (mean ± std) | per seed | unl_acc | gen_acc | (A3) max_unl_acc | (A2) 1-max_gen_acc |",
             "|---|---|---|---|---|---|---|---|"]
    for mode in args.modes:
        rs = [r for r in rows if r["mode"] == mode and r.get("iters") == args.iters]
        if not rs:
            continue
        errs = [r["err"] for r in rs]
        sd = statistics.stdev(errs) if len(errs) > 1 else float("nan")
        mean = lambda k: statistics.mean(r[k] for r in rs)  # noqa: E731
        spread = f"± {sd:.2f}" if len(errs) > 1 else "(1 seed)"
        lines.append(f"| {mode} | {len(rs)} | {statistics.mean(errs):.2f} {spread} | "
                     f"{' / '.join(f'{e:.1f}' for e in errs)} | {mean('unl_acc'):.3f} | {mean('gen_acc'):.3f} | "
                     f"{mean('max_unl_acc'):.3f} | {1 - mean('max_gen_acc'):.3f} |")
    (out / f"ssl_gain_{args.dataset}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
