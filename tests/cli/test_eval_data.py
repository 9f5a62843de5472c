"""`eval.py data=<config>`: a data config of the run's own kind keeps where the run's data lives."""

from __future__ import annotations

from omegaconf import OmegaConf

from genlab.cli import eval as eval_cli

RUN = OmegaConf.create({"_target_": "genlab.data.finetune.squad.SquadDataModule", "source": "path", "path": "/data/squad",
                        "tokenizer": "/models/spiece.model", "version": "2.0", "eval_version": None})


def test_same_kind_keeps_the_runs_location_and_takes_the_new_settings(monkeypatch):
    monkeypatch.setattr(eval_cli, "_command_line_overrides", lambda: [])
    new = OmegaConf.create({"_target_": "genlab.data.finetune.squad.SquadDataModule", "source": "download", "path": None,
                            "tokenizer": None, "version": "2.0", "eval_version": "1.1"})
    out = eval_cli._new_data(RUN, new)
    assert (out.source, out.path, out.tokenizer, out.eval_version) == ("path", "/data/squad", "/models/spiece.model", "1.1")


def test_location_set_on_the_command_line_wins(monkeypatch):
    monkeypatch.setattr(eval_cli, "_command_line_overrides", lambda: ["data=squad2_eval11", "data.path=/other"])
    new = OmegaConf.create({"_target_": "genlab.data.finetune.squad.SquadDataModule", "source": "path", "path": "/other",
                            "tokenizer": None, "version": "2.0", "eval_version": "1.1"})
    out = eval_cli._new_data(RUN, new)
    assert (out.path, out.tokenizer) == ("/other", "/models/spiece.model")


def test_other_kind_replaces_the_data():
    new = OmegaConf.create({"_target_": "genlab.data.lm.datamodule.LMDataModule", "source": "mini"})
    assert eval_cli._new_data(RUN, new) == new
