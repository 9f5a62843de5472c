"""Every experiments/*/reference.yaml is readable by the report, and its entries can match the cells of runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from genlab.report import ReportError, attach_reference, build_table, collect_runs, load_reference

ROOT = Path(__file__).resolve().parents[2]
REFERENCES = sorted((ROOT / "experiments").glob("*/reference.yaml"))


def test_there_are_reference_files():
    assert len(REFERENCES) >= 5


@pytest.mark.parametrize("path", REFERENCES, ids=[p.parent.name for p in REFERENCES])
def test_reference_yaml_has_the_layout_the_report_reads(path):
    ref = load_reference(path)  # raises ReportError naming the file on a layout it cannot read
    keys = list(ref.get("rows", [])) + list(ref.get("cols", []))
    cells = [tuple(str(e[k]) for k in keys) for e in ref["values"]]
    assert len(cells) == len(set(cells)), f"{path}: two `values` entries select the same cell {keys}"


def _transcribed(table: dict, dataset: str, method: str) -> float:
    block = "inductive" if method in table["inductive"] else "transductive"
    return table[block][method][dataset]


def test_planetoid_values_agree_with_the_transcribed_table():
    ref = load_reference(ROOT / "experiments" / "planetoid" / "reference.yaml")
    assert len(ref["values"]) == 9  # three methods x three data sets
    for e in ref["values"]:
        dataset = e["experiment"].rsplit("_", 1)[1]
        assert e["value"] == _transcribed(ref["table_3_6"], dataset, e["method"])


def test_mos_values_agree_with_the_ablation_block():
    ref = load_reference(ROOT / "experiments" / "mos_ptb_wt2" / "reference.yaml")
    cells = {(e["experiment"], e["task.stage"]): e for e in ref["values"]}
    for row in ref["ablation_table_A5"]:
        for data in ("ptb", "wt2"):
            e = cells[(row[data], "train")]
            assert (e["value"], e["valid"]) == (row[f"{data}_test"], row[f"{data}_valid"])


def _run(d: Path, experiment: str, overrides: list[str], config: dict, acc: float):
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"experiment": experiment, "overrides": overrides, "monitor": "valid/acc"}))
    (d / "config.yaml").write_text(yaml.safe_dump(config))
    (d / "metrics.json").write_text(json.dumps({"status": "finished", "metrics": {"test/acc": acc, "valid/acc": acc}}))


def test_planetoid_reference_matches_t_g_and_i_runs(tmp_path):
    """A key a run's config lacks (PlanetoidI has no use_feature) matches the entry that sets it null."""
    _run(tmp_path / "t", "planetoid_t_cora", ["seed=1"], {"model": {"use_feature": True}}, 0.75)
    _run(tmp_path / "g", "planetoid_t_cora", ["model.use_feature=false", "seed=1"], {"model": {"use_feature": False}},
         0.69)
    _run(tmp_path / "i", "planetoid_i_cora", ["seed=1"], {"model": {"share_embedding_bias": False}}, 0.61)
    ref = load_reference(ROOT / "experiments" / "planetoid" / "reference.yaml")
    table = build_table(collect_runs([tmp_path]), rows=ref["rows"], cols=ref["cols"], metric=ref["metric"])
    assert attach_reference(table, ref) == 3
    refs = {row: table.cell(row, ()).reference for row in table.rows}
    assert refs == {("planetoid_i_cora", "null"): 0.612, ("planetoid_t_cora", "false"): 0.691,
                    ("planetoid_t_cora", "true"): 0.757}


@pytest.mark.parametrize(
    "text,message",
    [
        ("table_3_6: {cora: 0.7}\n", "no `values:` list"),
        ("rows: [experiment]\nvalues: [{experiment: a, value: high}]\n", r"values\[0\] needs a numeric `value:`"),
        ("rows: [experiment, model.x]\nvalues: [{experiment: a, value: 1.0}]\n", r"does not name \['model.x'\]"),
        ("rows: experiment\nvalues: []\n", "must be a list of config keys"),
        ("values: [{experiment: a, value: 1.0}]\n", "set `rows:`"),
        ("rows: [a]\naggregate: best\nvalues: []\n", "aggregate 'best'"),
        ("rows: [a]\nvalues: [1.0]\n", r"values\[0\] is 1.0"),
    ],
)
def test_unreadable_layouts_are_named(tmp_path, text, message):
    path = tmp_path / "reference.yaml"
    path.write_text(text)
    with pytest.raises(ReportError, match=message) as err:
        load_reference(path)
    assert str(path) in str(err.value)


@pytest.mark.parametrize("name, column", [("reference_mini.yaml", "value"), ("reference_mini_best.yaml", "ppl_best")])
def test_txl_ablation_mini_references_carry_the_seed_numbers(name, column):
    """The mini's rows (M = 32, half loss ext_len 16) carry the thesis' numbers of the WT103 rows (M = 128, 64)."""
    folder = ROOT / "experiments" / "txl_wt103_ablation"
    seed = {(e["model.mem_len"], e["model.attn_type"], e["data.ext_len"]): e[column]
            for e in load_reference(folder / "reference.yaml")["values"] if e["model.mem_len"] in (0, 128)}
    mini = load_reference(folder / name)["values"]
    assert len(mini) == len(seed)  # every 128M row (the 151M row is another model, not an ablation of the mini)
    for e in mini:
        key = (128 if e["model.mem_len"] else 0, e["model.attn_type"], 64 if e["data.ext_len"] else 0)
        assert e["value"] == seed[key], e


@pytest.mark.parametrize("name, column", [("reference_midi.yaml", "value"), ("reference_midi_best.yaml", "ppl_best")])
def test_txl_ablation_midi_references_carry_the_seed_numbers(name, column):
    """The midi pair is the paper's full-loss rows with our encoding: recurrence (M = 128 there) and none."""
    folder = ROOT / "experiments" / "txl_wt103_ablation"
    seed = {e["model.mem_len"]: e[column] for e in load_reference(folder / "reference.yaml")["values"]
            if e["model.attn_type"] == "rel" and e["data.ext_len"] == 0}
    midi = {e["experiment"]: e["value"] for e in load_reference(folder / name)["values"]}
    assert midi == {"txl_wt103_ablation_midi": seed[128], "txl_wt103_ablation_norec_midi": seed[0]}


@pytest.mark.parametrize("twin, rows", [("mini", 4), ("midi", 2)])
def test_mos_twin_references_carry_the_ptb_ablation_numbers(twin, rows):
    folder = ROOT / "experiments" / "mos_ptb_wt2"
    seed = {f"{row['ptb']}_{twin}": (row["ptb_test"], row["ptb_valid"])
            for row in load_reference(folder / "reference.yaml")["ablation_table_A5"]}
    ours = {e["experiment"]: (e["value"], e["valid"]) for e in load_reference(folder / f"reference_{twin}.yaml")["values"]}
    assert len(ours) == rows and ours.items() <= seed.items()


def test_txl_main_mini_reference_carries_the_enwik8_numbers():
    folder = ROOT / "experiments" / "transformer_xl"
    seed = {e["experiment"]: e["value"] for e in load_reference(folder / "reference.yaml")["values"]}
    for e in load_reference(folder / "reference_mini.yaml")["values"]:
        assert e["value"] == seed[e["experiment"].removesuffix("_mini")]
