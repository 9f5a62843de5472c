"""The final summary names everything the run dir holds and never claims "(none saved)" beside a checkpoint."""

from __future__ import annotations

from genlab.cli.summary import SUMMARY_FILE, format_summary, print_summary


def _run_dir(tmp_path):
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "last.ckpt").write_bytes(b"x")
    (out / "predictions").mkdir()
    (out / "predictions" / "SST-2.tsv").write_text("index\tprediction\n")
    (out / "images").mkdir()
    for i in range(6):
        (out / "images" / f"samples_step{i}.png").write_bytes(b"png")
    (out / "metrics.json").write_text("{}")
    (out / "train.log").write_text("")  # empty: not worth naming
    return out


def test_summary_names_predictions_images_and_last_checkpoint(tmp_path):
    out = _run_dir(tmp_path)
    text = format_summary("cegan_mini finished", {"test/acc": 0.5, "train/loss": 1.0}, out, best="")
    assert "(none saved)" not in text and "last.ckpt" in text
    assert "predictions/: predictions: SST-2.tsv" in text
    assert "images/: sample grids: " in text and "and 2 more" in text
    assert "test/acc = 0.5000" in text and "train/loss" not in text
    assert "train.log" not in text and "metrics.json" in text


def test_print_summary_keeps_summary_txt(tmp_path, capsys):
    out = _run_dir(tmp_path)
    print_summary("x finished", {"valid/ppl": 3.0}, out)
    kept = (out / SUMMARY_FILE).read_text()
    assert "valid/ppl = 3.0000" in kept and kept.strip() in capsys.readouterr().out


def test_no_checkpoint_is_said_so(tmp_path):
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    assert "checkpoints/: (none saved)" in format_summary("x finished", {}, out)
