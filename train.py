"""Train any genlab experiment: ``python train.py experiment=txl_mini`` (the default). See README."""

import hydra

from genlab.cli.errors import run_hydra_main
from genlab.cli.train import main as train_main


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg):
    return train_main(cfg)


if __name__ == "__main__":
    run_hydra_main(main)
