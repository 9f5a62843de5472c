"""``genlab-report --best-over eval.mem_len``: an eval.py sweep over evaluation memory reduced to "PPL best" and
"Attn Len" (Transformer-XL, Yang's thesis Tables 2.6 / 2.8), on fake evaluation run folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from genlab.report import ReportError, collect_runs
from genlab.report.__main__ import main as report_main
from genlab.report.best_of import reduce_best

# (attn_type, seed) -> {eval.mem_len: test/ppl}; rel keeps improving up to 64 (then flat: ties go to the shorter),
# shaw is best at its training length 32.
PPL = {("rel", 1): {32: 30.0, 64: 28.0, 96: 28.0}, ("rel", 2): {32: 31.0, 64: 29.5, 96: 29.0},
       ("shaw", 1): {32: 33.0, 64: 33.5, 96: 34.0}, ("shaw", 2): {32: 35.0, 64: 36.0, 96: 37.0}}


def eval_run(root: Path, n: int, attn: str, seed: int, mem: int, ppl: float | None) -> None:
    d = root / str(n)
    d.mkdir(parents=True)
    ov = [f"model.attn_type={attn}", f"seed={seed}", f"eval.mem_len={mem}"]
    (d / "run.json").write_text(json.dumps({"experiment": "txl_wt103_ablation_mini", "overrides": ov, "job": "eval"}))
    (d / "config.yaml").write_text(yaml.safe_dump({"model": {"attn_type": attn, "mem_len": 32}, "seed": seed,
                                                   "eval": {"mem_len": mem}}))
    status = "failed" if ppl is None else "finished"
    (d / "metrics.json").write_text(json.dumps({"status": status, "metrics": {} if ppl is None else {"test/ppl": ppl}}))


@pytest.fixture
def sweep(tmp_path):
    root, n = tmp_path / "evals", 0
    for (attn, seed), curve in PPL.items():
        for mem, ppl in curve.items():
            eval_run(root, n, attn, seed, mem, ppl)
            n += 1
    eval_run(root, n, "shaw", 2, 128, None)  # a failed evaluation does not count
    return root


def test_reduce_keeps_the_best_and_the_shortest_length_reaching_it(sweep):
    reduced = reduce_best(collect_runs([sweep]), "eval.mem_len", "test/ppl")
    got = {(r.overrides["model.attn_type"], r.overrides["seed"]): (r.metrics["test/ppl"], r.metrics["best/eval.mem_len"])
           for r in reduced}
    assert got == {("rel", "1"): (28.0, 64), ("rel", "2"): (29.0, 96), ("shaw", "1"): (33.0, 32),
                   ("shaw", "2"): (35.0, 32)}
    within = reduce_best(collect_runs([sweep]), "eval.mem_len", "test/ppl", tol=0.6)
    assert {r.metrics["best/eval.mem_len"] for r in within if r.overrides == {"model.attn_type": "rel", "seed": "2"}} \
        == {64}
    with pytest.raises(ReportError, match="does not set it"):
        reduce_best(collect_runs([sweep]), "eval.clamp_len", "test/ppl")


def test_report_cli_writes_ppl_best_and_attn_len(sweep, tmp_path):
    out = tmp_path / "table"
    assert report_main([str(sweep), "--rows", "model.attn_type", "--metric", "test/ppl", "--best-over",
                        "eval.mem_len", "--out", str(out), "--no-plot"]) == 0
    md = (out / "table.md").read_text()
    assert "| rel | 28.50 ± 0.71 |" in md and "| shaw | 34.00 ± 1.41 |" in md
    at = (out / "table_best_at.md").read_text()
    assert "eval.mem_len" in at and "| rel | 80 |" in at and "| shaw | 32 |" in at  # median over the seeds
    assert report_main([str(sweep), "--rows", "model.attn_type", "--best-over", "eval.mem_len", "--out",
                        str(out)]) == 2  # no metric to pick the best by
