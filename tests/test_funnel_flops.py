"""experiments/perf/funnel_flops.py runs end to end at tiny size (no timing is asserted: the lead reruns the
benchmark on an idle machine)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "perf" / "funnel_flops.py"


def test_funnel_flops_script_tiny(capsys, tmp_path):
    spec = importlib.util.spec_from_file_location("funnel_flops", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = module.main(["--tiny", "--group", "base", "small", "--steps", "1", "--warmup", "0", "--json",
                        str(tmp_path / "rows.json")])
    assert [r["model"] for r in rows] == ["L12H768", "B6-6-6H768", "B6-3x2-3x2H768", "B4-4-4H768", "L6H768",
                                          "B3-4-4H768"]
    assert all(r["counted_ratio"] == 1.0 for r in rows)  # analytic FLOPs == FlopCounterMode
    assert all(r["infer_tps"] > 0 and r["train_tps"] > 0 for r in rows)
    assert rows[0]["flops_ratio"] == 1.0 and rows[3]["flops_ratio"] < rows[1]["flops_ratio"] < 1.0
    assert "| B4-4-4H768 |" in capsys.readouterr().out and (tmp_path / "rows.json").is_file()
    decoder = module.main(["--tiny", "--group", "base", "--no-timing", "--decoder"])
    assert decoder[1]["estimator"] > 1.0 and decoder[1]["thesis"] == 1.04  # Table 5.10: B6-6-6H768D2
