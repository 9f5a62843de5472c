"""Evaluate a checkpoint: ``python eval.py ckpt_path=path/to.ckpt eval.mem_len=1600``. See README."""

import hydra

from genlab.cli.errors import run_hydra_main
from genlab.cli.eval import main as eval_main


@hydra.main(version_base="1.3", config_path="conf", config_name="eval")
def main(cfg):
    eval_main(cfg)


if __name__ == "__main__":
    run_hydra_main(main)
