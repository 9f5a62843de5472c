"""A sweep's boolean override ("task.init_from_pretrained=True", as Hydra renders it) groups with the same value
from a config or a reference.yaml ("true"), so an ablation switch can be a table column."""

from __future__ import annotations

from pathlib import Path

from genlab.report.collect import RunResult
from genlab.report.table import attach_reference, build_table


def run(overrides: dict[str, str], config: dict, value: float) -> RunResult:
    r = RunResult(Path("."), "gpt_sst2_mini", overrides, "finished", {"test/score": value})
    r._config = config
    return r


def test_boolean_overrides_and_config_values_share_a_cell_and_match_the_reference():
    runs = [run({"task.init_from_pretrained": "False"}, {"task.init_from_pretrained": False}, 0.5),
            run({}, {"task.init_from_pretrained": False}, 0.7),
            run({"task.init_from_pretrained": "True"}, {"task.init_from_pretrained": True}, 0.9)]
    table = build_table(runs, rows=["experiment"], cols=["task.init_from_pretrained"], metric="test/score")
    assert table.cols == [("false",), ("true",)]
    assert table.cell(("gpt_sst2_mini",), ("false",)).values == [0.5, 0.7]
    ref = {"values": [{"experiment": "gpt_sst2_mini", "task.init_from_pretrained": False, "value": 0.6}]}
    assert attach_reference(table, ref) == 1
