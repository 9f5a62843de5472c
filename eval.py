"""Evaluate a checkpoint: ``python eval.py ckpt_path=path/to.ckpt eval.mem_len=1600``, or a finetuning preset with the
weights of its ``task.init_from`` (e.g. a published finetuned HF model): ``python eval.py experiment=<preset>
task.init_from=<folder>``. See README."""

import sys
from pathlib import Path

import hydra

from genlab.cli.choices import check_group_choices, evaluates_init_from, null_choices_to_none
from genlab.cli.errors import run_hydra_main
from genlab.cli.quiet import quiet_third_party

CONF = Path(__file__).resolve().parent / "conf"


@hydra.main(version_base="1.3", config_path="conf", config_name="eval")
def main(cfg):
    # imported once the config composed: a mistyped key is reported before torch and Lightning load (as train.py)
    from genlab.cli.eval import main as eval_main

    quiet_third_party()  # again: Lightning's import sets its loggers to INFO
    eval_main(cfg)


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main_preset(cfg):
    from genlab.cli.eval import main_init_from

    quiet_third_party()
    main_init_from(cfg)


if __name__ == "__main__":
    quiet_third_party()
    sys.argv[1:] = null_choices_to_none(sys.argv[1:], CONF)
    check_group_choices(sys.argv[1:], CONF)
    run_hydra_main(main_preset if evaluates_init_from(sys.argv[1:]) else main)
