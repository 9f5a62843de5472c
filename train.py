"""Train any genlab experiment: ``python train.py experiment=txl_mini`` (the default). See README."""

import sys
from pathlib import Path

import hydra

from genlab.cli.choices import check_group_choices, null_choices_to_none
from genlab.cli.errors import run_hydra_main
from genlab.cli.quiet import quiet_third_party
from genlab.cli.run_dir import continue_in_run_dir

CONF = Path(__file__).resolve().parent / "conf"


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg):
    # imported once the config composed: a mistyped key is reported before torch and Lightning load (~8 CPU s)
    from genlab.cli.train import main as train_main

    quiet_third_party()  # again: Lightning's import sets its loggers to INFO, and a multirun's launcher resets logging
    return train_main(cfg)


if __name__ == "__main__":
    quiet_third_party()
    sys.argv[1:] = null_choices_to_none(sys.argv[1:], CONF)
    check_group_choices(sys.argv[1:], CONF)
    sys.argv[1:] = continue_in_run_dir(sys.argv[1:])  # ckpt_path=<run>/checkpoints/x.ckpt extends <run> in place
    run_hydra_main(main)
