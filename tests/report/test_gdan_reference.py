"""experiments/gdan/reference.yaml holds Table 3.4 as the seed prints it (44 rows) and its keys select the cells of
runs of the GDAN presets (experiment, data.label_rate, data.unlabeled_size)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from genlab.report import attach_reference, build_table, collect_runs, load_reference

ROOT = Path(__file__).resolve().parents[2]
REF = ROOT / "experiments" / "gdan" / "reference.yaml"
METHODS = ["sl", "context", "context_domain", "gen", "gen_gan", "gen_dual", "gen_domain", "gen_domain_adv"]


def test_table_3_4_rows_and_the_headline_cell():
    ref = load_reference(REF)
    cells = {(e["experiment"], e["data.label_rate"], e["data.unlabeled_size"]): e for e in ref["values"]}
    assert len(cells) == 44  # 8 methods x 4 rates at 50K, 6 methods x 2 rates at 5M
    assert all((f"gdan_squad_{m}", rate, 50000) in cells for m in METHODS for rate in (0.1, 0.2, 0.5, 0.9))
    gdan = cells[("gdan_squad_gen_domain_adv", 0.1, 50000)]
    assert (gdan["dev_f1"], gdan["value"], gdan["test_em"]) == (0.5313, 0.4802, 0.3218)
    assert cells[("gdan_squad_sl", 0.1, None)]["value"] == cells[("gdan_squad_sl", 0.1, 50000)]["value"]


def test_reference_matches_runs_of_the_presets(tmp_path):
    for i, (m, rate, size) in enumerate([("sl", 0.1, 50000), ("gen_domain_adv", 0.1, 50000),
                                         ("gen_domain_adv", 0.1, None)]):
        d = tmp_path / str(i)
        d.mkdir()
        overrides = [f"data.label_rate={rate}", f"data.unlabeled_size={'null' if size is None else size}", "seed=1"]
        (d / "run.json").write_text(json.dumps({"experiment": f"gdan_squad_{m}", "overrides": overrides,
                                                "monitor": "valid/f1"}))
        (d / "config.yaml").write_text(yaml.safe_dump({"data": {"label_rate": rate, "unlabeled_size": size}}))
        (d / "metrics.json").write_text(json.dumps({"status": "finished", "metrics": {"test/f1": 0.4}}))
    ref = load_reference(REF)
    table = build_table(collect_runs([tmp_path]), rows=ref["rows"], cols=ref["cols"], metric=ref["metric"])
    assert attach_reference(table, ref) == 3
