"""CEGAN reproductions on offline data: the 2-D KL table (S001 Table B.2) with energy-surface plots
(Figs. B.1-B.3), and the digit energy ranking (S001 App. B.5.2) on the 8x8 digits.

Each run composes the preset exactly as ``python train.py experiment=<name>`` would, then trains it here with
loggers off, so the numbers come from the same configs the CLI uses:

    python experiments/cegan/run.py kl --sets biased_gmm2 gmm4 --mini          # Table B.2 pattern
    python experiments/cegan/run.py rank --mini                                # ranking, Spearman vs typicality

Outputs next to this file: ``table_b2.md`` / ``table_b2.json``, ``energy_<set>_<variant>.png``,
``ranking.md`` / ``ranking_<variant>.png``.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import open_dict

HERE = Path(__file__).resolve().parent
CONF = HERE.parents[1] / "conf"
VARIANTS = {"": "egan_ent_nn", "_const": "egan_const", "_vi": "egan_ent_vi", "_gan": "gan"}


def compose_preset(name: str, overrides: list[str]):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=[f"experiment={name}", *overrides], return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg.hydra
    return cfg


def fit(name: str, overrides: list[str], seed: int):
    cfg = compose_preset(name, [f"seed={seed}", *overrides])
    pl.seed_everything(seed, workers=True, verbose=False)
    dm = instantiate(cfg.data)
    dm.prepare_data()
    dm.setup("fit")
    task = instantiate(cfg.task, model=instantiate(cfg.model))
    tr = cfg.trainer
    trainer = pl.Trainer(max_epochs=tr.max_epochs, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0)
    trainer.fit(task, datamodule=dm)
    return task, dm


def plot_energy(task, dm, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells, axes, p = task._last_grid
    n = axes.shape[1]
    fig, ax = plt.subplots(1, 3, figsize=(12, 4))
    for a, key, name in zip(ax, ("data", "disc", "gen"), ("p_data", "p_disc = softmax(-c)", "p_gen")):
        a.imshow(p[key].reshape(n, n).T, origin="lower", extent=[axes[0, 0], axes[0, -1], axes[1, 0], axes[1, -1]],
                 cmap="viridis")
        a.set_title(name)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def run_kl(args) -> None:
    out_json = HERE / "table_b2.json"
    rows = json.loads(out_json.read_text()) if out_json.exists() else []
    suffix = "_mini" if args.mini else ""
    for ds in args.sets:
        for vs, variant in VARIANTS.items():
            if variant not in args.variants:
                continue
            for seed in args.seeds:
                key = dict(set=ds, variant=variant, seed=seed, mini=args.mini)
                if any(all(r.get(k) == v for k, v in key.items()) for r in rows):
                    continue
                task, dm = fit(f"cegan_{ds}{vs}{suffix}", args.override, seed)
                report = task.grid_report(dm.x.numpy(), dm.truth)
                x = torch.from_numpy(dm.truth.means.astype(np.float32))
                energies = task.energy_on(x).cpu().numpy().tolist()
                row = dict(key, **report, mode_energies=energies, updates=dict(task.update_counts))
                rows.append(row)
                out_json.write_text(json.dumps(rows, indent=1))
                plot_energy(task, dm, HERE / f"energy_{ds}_{variant}{suffix}_s{seed}.png", f"{ds} {variant} seed {seed}")
                print(json.dumps({k: row[k] for k in ("set", "variant", "seed", "kl_disc_data", "kl_gen_emp")}), flush=True)
    cols = ["gen_emp", "emp_gen", "gen_data", "data_gen", "disc_emp", "emp_disc", "disc_data", "data_disc",
            "gen_disc", "disc_gen"]
    lines = ["# S001 Table B.2 counterpart (grid 100x100, floor 1e-10; mean over seeds)", ""]
    for ds in sorted({r["set"] for r in rows}):
        lines += [f"## {ds}", "", "| model | seeds | " + " | ".join(c.replace("_", "‖") for c in cols) + " |",
                  "|---|---|" + "---|" * len(cols)]
        for variant in VARIANTS.values():
            rs = [r for r in rows if r["set"] == ds and r["variant"] == variant]
            if rs:
                lines.append(f"| {variant}{' (mini)' if rs[0]['mini'] else ''} | {len(rs)} | "
                             + " | ".join(f"{np.mean([r['kl_' + c] for r in rs]):.4f}" for c in cols) + " |")
        if ds == "biased_gmm2":
            lines += ["", "Energy at the mode centres (light 0.1-mode (v,v), heavy 0.9-mode (-v,-v)); "
                      "calibrated difference light - heavy = log 9 = 2.20:", ""]
            for r in rows:
                if r["set"] == ds:
                    lines.append(f"- {r['variant']} seed {r['seed']}: E(light) - E(heavy) = "
                                 f"{r['mode_energies'][0] - r['mode_energies'][1]:.3f}")
        lines.append("")
    (HERE / "table_b2.md").write_text("\n".join(lines))
    print("\n".join(lines))


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def run_rank(args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    suffix = "_mini" if args.mini else ""
    lines = ["# Digit ranking (S001 App. B.5.2 counterpart): Spearman(energy, distance to the mean training image)",
             "over held-out real images; positive = low energy for typical digits.", "",
             "| variant | seed | spearman |", "|---|---|---|"]
    for vs, variant in VARIANTS.items():
        if variant not in args.variants or variant == "egan_ent_vi":
            continue
        overrides = list(args.override)
        if variant == "gan":
            overrides += ["task.variant=gan", "task.schedule=all"]
        elif variant == "egan_const":
            overrides += ["task.variant=egan_const"]
        for seed in args.seeds:
            task, dm = fit(f"cegan_nist{suffix}", overrides, seed)
            mean = dm.x_train.mean(0)
            real = dm.x_test
            e = task.energy_on(real).cpu().numpy()
            dist = (real - mean).norm(dim=1).numpy()
            rho = spearman(e, dist)
            lines.append(f"| {variant} | {seed} | {rho:.3f} |")
            order = np.argsort(e)
            side = int(round(real.shape[1] ** 0.5))
            fig, ax = plt.subplots(2, 10, figsize=(10, 2.4))
            for j in range(10):
                ax[0, j].imshow(real[order[j]].view(side, side), cmap="gray")
                ax[1, j].imshow(real[order[-1 - j]].view(side, side), cmap="gray")
                ax[0, j].axis("off")
                ax[1, j].axis("off")
            fig.suptitle(f"{variant}: lowest-energy (top) / highest-energy (bottom) held-out 1s")
            fig.savefig(HERE / f"ranking_{variant}{suffix}_s{seed}.png", dpi=80)
            plt.close(fig)
            print(lines[-1], flush=True)
    (HERE / "ranking.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["kl", "rank"])
    ap.add_argument("--sets", nargs="+", default=["biased_gmm2", "gmm4", "two_spirals"])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS.values()))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--mini", action="store_true")
    ap.add_argument("--override", nargs="*", default=[])
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.environ.setdefault("GENLAB_OFFLINE", "1")
    run_kl(args) if args.what == "kl" else run_rank(args)


if __name__ == "__main__":
    main()
