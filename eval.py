"""Evaluate a checkpoint: ``python eval.py ckpt_path=path/to.ckpt eval.mem_len=1600``. See README."""

import sys
from pathlib import Path

import hydra

from genlab.cli.choices import check_group_choices, null_choices_to_none
from genlab.cli.errors import run_hydra_main
from genlab.cli.eval import main as eval_main
from genlab.cli.quiet import quiet_third_party

CONF = Path(__file__).resolve().parent / "conf"


@hydra.main(version_base="1.3", config_path="conf", config_name="eval")
def main(cfg):
    quiet_third_party()
    eval_main(cfg)


if __name__ == "__main__":
    quiet_third_party()
    sys.argv[1:] = null_choices_to_none(sys.argv[1:], CONF)
    check_group_choices(sys.argv[1:], CONF)
    run_hydra_main(main)
