"""Every script under experiments/ runs: ``--help`` exits 0 (all scripts, found by glob, so a new one is covered),
and each analysis script does a tiny real run on real (short) training runs or minis.

A new script must also be listed in ``TINY_RUNS`` (with its test) or ``HELP_ONLY`` (with the reason), so that
whether it gets a real run is decided, not forgotten. About 90 s on one core.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "experiments").rglob("*.py"))

# script -> the test below that runs it for real
TINY_RUNS = {
    "experiments/bad_gan/ablation_directions.py": "test_ablation_directions_reads_a_bad_gan_run",
    "experiments/cegan/figures.py": "test_cegan_figures_from_a_2d_run",
    "experiments/cegan/linear_probe.py": "test_cegan_linear_probe_one_seed_one_epoch",
    "experiments/mos_rank/rank.py": "test_mos_rank_of_a_trained_run",
    "experiments/mos_rank/pairwise_kl.py": "test_mos_pairwise_kl_of_a_trained_run",
    "experiments/perf/cpu_bf16.py": "test_cpu_bf16_benchmark_runs_tiny",
    "experiments/perf/gpu_check.py": "test_gpu_check_dry_run_on_cpu",
    "experiments/mos_rank/synthetic_demo.py": "test_mos_synthetic_demo_small",
    "experiments/planetoid/baselines.py": "test_planetoid_baselines_on_the_synthetic_mini",
    "experiments/transformer_xl/recl.py": "test_txl_recl_of_a_few_step_run",
    "experiments/transformer_xl/generate.py": "test_txl_generate_from_a_few_step_run",
    "experiments/xlnet_race/baselines.py": "test_race_baselines_on_the_mini",
    "experiments/xlnet_ablation/run_table.py": "test_xlnet_ablation_table_of_two_rows",
    "experiments/xlnet_ablation/collapse_probe.py": "test_xlnet_ablation_table_of_two_rows",
    "experiments/xlnet_squad/baselines.py": "test_squad_baselines_on_the_minis",
    "experiments/gpt/runtimes.py": "test_gpt_runtimes_of_finished_runs",
    "experiments/gpt/g2_cv.py": "test_gpt_g2_cross_validation_summary",
    "experiments/gpt/transfer_probe.py": "test_gpt_transfer_probe_of_a_few_step_pretraining",
    "experiments/gpt/unigram_baseline.py": "test_gpt_unigram_baseline_on_a_small_corpus",
    "experiments/funnel/mini_table.py": "test_funnel_mini_table_and_baseline",
    "experiments/funnel/mlm_baseline.py": "test_funnel_mini_table_and_baseline",
    "experiments/gdan/table.py": "test_gdan_table_and_figure_3_8",
    "experiments/gdan/figure_3_8.py": "test_gdan_table_and_figure_3_8",
    "experiments/gdan/dev_curves.py": "test_gdan_table_and_figure_3_8",
    "experiments/gdan/answer_types.py": "test_gdan_table_and_figure_3_8",
    "experiments/perf/memory_estimate.py": "test_memory_estimate_checks_a_preset_against_this_machine",
}
BENCHMARK = "a benchmark: timings are not tests (CONTRIBUTING); run it alone and read its ratios"
HELP_ONLY = {
    "experiments/perf/attention_paths.py": BENCHMARK,
    "experiments/funnel/pair_speed.py": BENCHMARK,
    "experiments/perf/full_size.py": BENCHMARK + " (real-size models: over 12 GB for the largest presets)",
    "experiments/perf/full_size_data.py": "writes synthetic datasets at the benchmarks' real sizes (up to 300 MB)",
    "experiments/perf/vs_hf.py": BENCHMARK,
    "experiments/perf/lm_head_loss.py": BENCHMARK,
    "experiments/perf/loader_throughput.py": BENCHMARK + " (builds a 100M-token synthetic cache)",
    "experiments/perf/prep_memory.py": BENCHMARK + " (writes and tokenises corpora of 10-100 MB)",
    "experiments/perf/finetune_prep.py": BENCHMARK + " (writes and encodes SQuAD / Amazon-2 format sets of tens of MB)",
    "experiments/perf/corpus_prep.py": BENCHMARK + " (writes and prepares every benchmark's corpus at its real size)",
    "experiments/perf/tokenizer_training.py": BENCHMARK + " (trains 32k-piece tokenizers on tens of MB of text)",
    "experiments/perf/funnel_flops.py": BENCHMARK + " (its --tiny run is tests/test_funnel_flops.py)",
    "experiments/perf/gemm_rate.py": BENCHMARK,
    "experiments/perf/lm_data_load.py": BENCHMARK,
    "experiments/perf/mos_cost.py": BENCHMARK,
    "experiments/perf/scaling.py": BENCHMARK + " (spawns 2-process DDP and FSDP2 groups)",
    "experiments/perf/squad_alignment.py": BENCHMARK,
    "experiments/perf/gdan_extraction.py": BENCHMARK,
    "experiments/perf/txl_eval_speed.py": BENCHMARK,
    "experiments/perf/txl_throughput.py": BENCHMARK,
    "experiments/perf/xlnet_mfu.py": BENCHMARK,
    "experiments/perf/xlnet_throughput.py": BENCHMARK,
    "experiments/perf/xlnet_step.py": "the step xlnet_mfu.py and xlnet_throughput.py time (benchmarks); it only "
                                       "prints the step's sizes and FLOPs",
    "experiments/xlnet_text_classification/baselines.py": "rebuilds the seven minis' tokenizers in a temporary "
                                                          "cache on every run (over 20 s)",
    "experiments/gpt/zero_shot.py": "needs GPT checkpoints; its real run is tests/analysis/test_gpt_zero_shot.py::"
                                    "test_the_script_scores_every_checkpoint_of_a_pretraining_run",
}

# Runs each script as ``python <script> --help`` in one child process (sys.argv, sys.path[0] and __main__ as for a
# real start), so the imports are paid once instead of once per script.
HELP_DRIVER = """
import contextlib, io, json, runpy, sys, traceback
results = {}
for script in sys.argv[1:]:
    out, code = io.StringIO(), None
    sys.argv, sys.path[0] = [script, "--help"], str(__import__("pathlib").Path(script).resolve().parent)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        code = stop.code or 0
    except BaseException:
        code, out = "raised", io.StringIO(traceback.format_exc())
    results[script] = {"code": code, "output": out.getvalue()[:2000]}
print("RESULTS" + json.dumps(results))
"""


def env() -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled",
            "GENLAB_OFFLINE": "1", "MPLBACKEND": "Agg"}


def run(args: list[str], timeout: int = 300, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=env(), capture_output=True, text=True, check=False,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n"
                             f"{proc.stderr[-3000:]}")
    return proc


def train(tmp: Path, preset: str, *overrides: str) -> Path:
    """A short run of ``preset`` through train.py, into ``tmp``; its run directory."""
    run(["train.py", f"experiment={preset}", "seed=0", "logger=csv", "trainer.enable_progress_bar=false",
         *overrides, f"hydra.run.dir={tmp}"])
    return tmp


@pytest.fixture(scope="module")
def help_results() -> dict:
    proc = run(["-c", HELP_DRIVER, *SCRIPTS], timeout=600)
    return json.loads(proc.stdout.split("RESULTS", 1)[1])


def test_every_script_is_classified():
    unclassified = set(SCRIPTS) - set(TINY_RUNS) - set(HELP_ONLY)
    assert not unclassified, f"add {sorted(unclassified)} to TINY_RUNS (with a test) or HELP_ONLY (with a reason)"
    stale = (set(TINY_RUNS) | set(HELP_ONLY)) - set(SCRIPTS)
    assert not stale, f"{sorted(stale)} no longer exist"
    assert all(name in globals() for name in TINY_RUNS.values())


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_exits_zero(script, help_results):
    result = help_results[script]
    assert result["code"] == 0 and "usage:" in result["output"], f"{script} --help: {result}"


def test_mos_synthetic_demo_small():
    out = run(["experiments/mos_rank/synthetic_demo.py", "--vocab", "20", "--topics", "2", "--block", "5",
               "--contexts", "30", "--steps", "20", "--dims", "2"]).stdout
    assert "rank of log P" in out and "| 2 |" in out


@pytest.fixture(scope="module")
def mos_run(tmp_path_factory) -> Path:
    """A five-batch MoS PTB mini run, shared by the rank and pairwise-KL scripts."""
    return train(tmp_path_factory.mktemp("mos"), "mos_ptb_mini", "trainer.max_epochs=1",
                 "trainer.limit_train_batches=5", "trainer.limit_val_batches=2", "trainer.limit_test_batches=1")


def test_mos_rank_of_a_trained_run(mos_run):
    out = run(["experiments/mos_rank/rank.py", str(mos_run), "--split", "valid", "--max-tokens", "80"]).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert Path(result["checkpoint"]).name.startswith("best") and result["contexts"] == 80
    assert 0 < result["rank"] <= 80 and result["softmax_bound_d_plus_2"] == result["emsize"] + 2


def test_mos_pairwise_kl_of_a_trained_run(mos_run):
    args = ["experiments/mos_rank/pairwise_kl.py", str(mos_run), "--split", "test", "--max-tokens", "60"]
    result = json.loads(run([*args, "--pairs", "2000"]).stdout.strip().splitlines()[-1])
    assert result["contexts"] == 60 and result["pairs"] == 2000 and result["head"] == "mos"
    assert result["kl"] > 0 and 0 < result["stderr"] < result["kl"]
    again = json.loads(run([*args, "--pairs", "2000", "--ckpt", "last"]).stdout.strip().splitlines()[-1])
    assert Path(again["checkpoint"]).name == "last.ckpt"
    bad = run([*args, "--split", "dev"], check=False)
    assert bad.returncode == 2 and "--split 'dev'" in bad.stderr


def test_txl_recl_of_a_few_step_run(tmp_path):
    run_dir = train(tmp_path / "txl", "txl_mini", "trainer.max_steps=3", "trainer.val_check_interval=3",
                    "trainer.limit_val_batches=1", "trainer.limit_test_batches=1", "model.n_layer=2",
                    "model.d_model=32", "model.d_head=8", "model.d_inner=64")
    out = run(["experiments/transformer_xl/recl.py", "--model", f"txl={run_dir}", "--model", f"capped={run_dir}:12",
               "--split", "valid", "--tokens", "30", "--c0", "8", "--delta", "8", "--c-max", "24",
               "--out", str(tmp_path / "recl.json")]).stdout
    result = json.loads((tmp_path / "recl.json").read_text())
    assert result["contexts"] == [8, 16, 24] and result["tokens"] == 30 and "| capped |" in out
    assert set(result["recl"]) == {"txl", "capped"} and result["recl"]["capped"]["0.1"] <= 12
    assert all(v in (8, 16, 24) for v in result["recl"]["txl"].values())


def test_txl_generate_from_a_few_step_run(tmp_path):
    run_dir = train(tmp_path / "txl", "txl_mini", "trainer.max_steps=3", "trainer.val_check_interval=3",
                    "trainer.limit_val_batches=1", "trainer.limit_test_batches=1", "model.n_layer=2",
                    "model.d_model=32", "model.d_head=8", "model.d_inner=64")
    out_md = tmp_path / "samples.md"
    out = run(["experiments/transformer_xl/generate.py", str(run_dir), "--n-samples", "3", "--context-len", "40",
               "--n-tokens", "12", "--show-context", "10", "--seed", "1", "--out", str(out_md)]).stdout
    result = json.loads(out.strip().splitlines()[-1])
    text = out_md.read_text()
    assert result["samples"] == 3 and result["tokens"] == [12, 12, 12] and len(set(result["starts"])) == 3
    assert text.count("## Sample ") == 3 and text.count("**Continuation** (12 tokens)") == 3
    assert "<eos>" not in text and " @-@ " not in text  # WikiText markup was turned back into text
    again = run(["experiments/transformer_xl/generate.py", str(run_dir / "checkpoints" / "last.ckpt"),
                 "--n-samples", "3", "--context-len", "40", "--n-tokens", "12", "--show-context", "10", "--seed", "1",
                 "--out", str(tmp_path / "again.md")]).stdout
    assert json.loads(again.strip().splitlines()[-1])["starts"] == result["starts"]
    bad = run(["experiments/transformer_xl/generate.py", str(run_dir), "--context-len", "0"], check=False)
    assert bad.returncode == 2 and "--context-len" in bad.stderr


def test_cegan_linear_probe_one_seed_one_epoch(tmp_path):
    run(["experiments/cegan/linear_probe.py", "--seeds", "0", "--epochs", "1", "--variants", "egan_const",
         "--out", str(tmp_path), "--runs", str(tmp_path / "runs")])
    table = (tmp_path / "table_b3.md").read_text()
    assert "| | egan_const | random |" in table and "--variants egan_const" in table
    assert (tmp_path / "runs" / "table_b3" / "egan_const" / "0" / "checkpoints" / "last.ckpt").is_file()


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def test_cegan_figures_from_a_2d_run(tmp_path):
    """Figures go beside the runs read (or into --out), each path printed, at a readable size."""
    run_dir = train(tmp_path / "sweep" / "0", "cegan_gmm4_mini", "trainer.max_epochs=1",
                    "trainer.limit_train_batches=3", "trainer.limit_val_batches=0", "test_after_fit=false")
    beside = run(["experiments/cegan/figures.py", str(run_dir.parent)])
    figure = tmp_path / "sweep" / "figures" / "energy_cegan_gmm4_mini_s0.png"
    assert f"wrote {figure}" in beside.stdout and f"in {figure.parent}" in beside.stdout
    width, height = png_size(figure)
    assert height >= 1600 and width >= 2 * 800, (width, height)  # 2x2 panels, each at least 800 px wide

    chosen = run(["experiments/cegan/figures.py", str(run_dir), "--out", str(tmp_path / "fig")])
    assert f"wrote {tmp_path / 'fig' / figure.name}" in chosen.stdout


def test_ablation_directions_reads_a_bad_gan_run(tmp_path):
    """One short FM run compared with itself: every regulariser direction fails, so the script exits 1."""
    run_dir = train(tmp_path / "fm", "bad_gan_mnist_fm_mini", "trainer.max_steps=4", "trainer.val_check_interval=2",
                    "trainer.check_val_every_n_epoch=null", "trainer.log_every_n_steps=1", "test_after_fit=false")
    proc = run(["experiments/bad_gan/ablation_directions.py", "--fm", str(run_dir), "--pt", str(run_dir), "--ent",
                str(run_dir), "--window", "0", "10", "--out", str(tmp_path)], check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    table = (tmp_path / "ablation_directions.md").read_text()
    assert table.count("| NO |") == 2 and "logged steps 0-10" in table


def test_planetoid_baselines_on_the_synthetic_mini(tmp_path):
    train(tmp_path / "run", "planetoid_t_cora_mini", "data.steps=1", "data.warmup_label_iters=0",
          "data.warmup_graph_iters=0", "test_after_fit=false", f"paths.cache_dir={tmp_path / 'cache'}")
    folder = next((tmp_path / "cache").rglob("ind.synth.x")).parent
    out = run(["experiments/planetoid/baselines.py", "--path", str(folder), "--datasets", "synth", "--seeds", "1",
               "--graphemb-batches", "5"]).stdout
    assert "synth" in out


def test_race_baselines_on_the_mini():
    out = run(["experiments/xlnet_race/baselines.py"]).stdout
    assert "| test | in article | 1.0000 | 1.0000 | 1.0000 |" in out


def test_squad_baselines_on_the_minis():
    out = run(["experiments/xlnet_squad/baselines.py"]).stdout
    assert "SQuAD 2.0 mini dev: 992 questions, 330 unanswerable" in out and "string match EM 100.0" in out


def test_cpu_bf16_benchmark_runs_tiny():
    """A smoke run only (tiny dims, one step): the benchmark's timings are not tests."""
    out = run(["experiments/perf/cpu_bf16.py", "--tiny", "--steps", "1", "--warmup", "0", "--n-layer", "1",
               "--cases", "txl_wt103", "xlnet_base"]).stdout
    assert out.count("bf16/fp32 speed ratio:") == 2 and "bf16 GEMM rate" in out and "loss difference" in out
    assert "GEMM rates in this run" in out
    assert "ours/HF in bf16 autocast:" in out


def test_gpu_check_dry_run_on_cpu():
    """gpu_check.sh --cpu: every family's bf16 steps agree with fp32 within the check's tolerance, and the FSDP2
    step runs; the same code as on a GPU, so the GPU check cannot rot unnoticed."""
    proc = subprocess.run(["bash", "experiments/perf/gpu_check.sh", "--cpu"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**env(), "PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[-1] == "gpu_check: OK"
    for family in ("txl", "xlnet", "bert", "gpt", "funnel", "awd_mos"):
        assert any(line.startswith(family + " ") and "tokens/s" in line and "MFU" in line for line in lines), family
    assert any(line.startswith("fsdp2 ") for line in lines)


def test_memory_estimate_checks_a_preset_against_this_machine():
    """README's check before a long run: the estimate of a preset at its real depth and batch against this machine's
    available memory, without measuring (a mini: a few seconds)."""
    proc = subprocess.run([sys.executable, "experiments/perf/memory_estimate.py", "--presets", "txl_mini",
                           "--estimate-only"], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = proc.stdout.strip().splitlines()[-1]
    assert line.startswith("txl_mini: n_layer=4 batch=16 ") and "params=2.4M" in line and line.endswith(": fits")


def test_gpt_runtimes_of_finished_runs(tmp_path):
    run_dir = tmp_path / "sweep" / "0"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"experiment": "gpt_cola_mini", "start_time": "2026-01-01T00:00:00",
                                                  "overrides": ["seed=0", "task.lm_coef=0"]}))
    (run_dir / "metrics.json").write_text(json.dumps({"status": "finished", "end_time": "2026-01-01T00:01:30"}))
    out = run(["experiments/gpt/runtimes.py", str(tmp_path / "sweep")]).stdout
    assert "| gpt_cola_mini task.lm_coef=0 | 1 | 90 ± 0 |" in out


def test_gpt_g2_cross_validation_summary(tmp_path):
    """Seeds average their folds, settings average their seeds, across sweep directories; the gate pairs pretrained
    with random init; a seed short of a fold is reported and left out."""
    scores = {("True", "0"): [0.8, 0.9], ("True", "1"): [0.7, 0.8], ("False", "0"): [0.5, 0.4], ("False", "1"): [0.6, 0.5],
              ("False", "2"): [0.9]}  # seed 2 of random init has one of its two folds
    for n, ((pre, seed), folds) in enumerate(scores.items()):
        for fold, score in enumerate(folds):  # pretrained seed 1's second fold comes from another sweep
            run_dir = tmp_path / ("sweep2" if (pre, seed, fold) == ("True", "1", 1) else "sweep") / f"{n}_{fold}"
            run_dir.mkdir(parents=True)
            (run_dir / "run.json").write_text(json.dumps({"overrides": [
                "experiment=gpt_sst2_mini", "data.n_folds=2", f"data.fold={fold}", f"seed={seed}",
                f"task.init_from_pretrained={pre}", "task.lm_coef=0"]}))
            (run_dir / "metrics.json").write_text(json.dumps({"status": "finished", "metrics": {"test/score": score}}))
    for fold, score in enumerate([0.6, 0.7]):  # another checkpoint, pretrained only: pairs with the same random init
        run_dir = tmp_path / "sweep" / f"other_{fold}"
        run_dir.mkdir(parents=True)
        (run_dir / "run.json").write_text(json.dumps({"overrides": [
            "data.n_folds=2", f"data.fold={fold}", "seed=0", "task.init_from=other.ckpt", "task.lm_coef=0"]}))
        (run_dir / "metrics.json").write_text(json.dumps({"status": "finished", "metrics": {"test/score": score}}))
    (tmp_path / "sweep" / "broken").mkdir()
    (tmp_path / "sweep" / "broken" / "run.json").write_text(json.dumps({"overrides": ["seed=3"]}))
    out = run(["experiments/gpt/g2_cv.py", str(tmp_path / "sweep"), str(tmp_path / "sweep2"), "--n-folds", "2"]).stdout
    assert "| data.n_folds=2 task.init_from_pretrained=true task.lm_coef=0 | 2 | 0.850, 0.750 | 0.800 ± 0.071 |" in out
    assert "| data.n_folds=2 task.init_from_pretrained=false task.lm_coef=0 | 2 | 0.450, 0.550 | 0.500 ± 0.071 |" in out
    assert "G2 data.n_folds=2 task.lm_coef=0: pretrained 0.800 vs random 0.500: gap +0.300, spread 0.071 -> gap > spread: yes; G2 bars (>= 0.75, >= +0.2): yes" in out
    assert "G2 data.n_folds=2 task.init_from=other.ckpt task.lm_coef=0: pretrained 0.650 vs random 0.500: gap +0.150, spread 0.071 -> gap > spread: yes; G2 bars (>= 0.75, >= +0.2): NO" in out
    assert "incomplete seed 2: folds [0]" in out and "unfinished:" in out and "broken" in out


def toy_corpus(root: Path, words: list[str]) -> None:
    """train/ and valid/ text shards (300 / 30 lines of 8 of ``words``), the plain-text pretraining layout."""
    for split, n in (("train", 300), ("valid", 30)):
        (root / split).mkdir(parents=True)
        lines = [" ".join(words[(i * 7 + k) % len(words)] for k in range(8)) + "." for i in range(n)]
        (root / split / "a.txt").write_text("\n".join(lines))


def test_gpt_transfer_probe_of_a_few_step_pretraining(tmp_path):
    """A 3-step 1 x 32 pretraining run on a toy corpus, probed on the newsgroups posts (2 folds, 16 pieces)."""
    toy_corpus(tmp_path / "corpus", ["the", "space", "god", "shuttle", "belief", "orbit", "church", "moon", "bible",
                                      "launch", "faith", "nasa"])
    pre = tmp_path / "pre"
    train(pre, "gpt_books_mini", "data=gpt_pretrain_text", f"data.path={tmp_path / 'corpus'}", "data.vocab_size=60",
          "data.seq_len=16", "data.batch_size=4", "model.n_positions=16", "model.n_layer=1", "model.n_embd=32",
          "model.n_head=2", "model.n_inner=64", "trainer.max_steps=3", "task.scheduler.warmup_steps=1",
          "trainer.val_check_interval=3", f"paths.cache_dir={tmp_path / 'cache'}")
    out = run(["experiments/gpt/transfer_probe.py", str(pre / "checkpoints" / "last.ckpt"), "--max-len", "16",
               "--n-folds", "2"]).stdout
    assert "on 200 posts: unknown pieces" in out and "longer than 16 pieces" in out
    nll = {m[0]: float(m[1]) for m in re.findall(r"^  (pretrained|random init): ([0-9.]+)$", out, re.M)}
    assert set(nll) == {"pretrained", "random init"} and all(0 < v < 20 for v in nll.values())
    probes = re.findall(r"^  ((?:pretrained|random init) [a-z -]+|bag of pieces): ([0-9.]+)$", out, re.M)
    assert len(probes) == 7 and all(0 <= float(a) <= 1 for _, a in probes), out


def test_gpt_unigram_baseline_on_a_small_corpus(tmp_path):
    toy_corpus(tmp_path / "corpus", ["the", "a", "river", "town", "old", "new", "road", "bank", "boat", "house",
                                      "green", "red"])
    out = run(["experiments/gpt/unigram_baseline.py", "data.corpus=text", f"data.path={tmp_path / 'corpus'}",
               "data.vocab_size=40", f"data.cache_dir={tmp_path / 'cache'}"]).stdout
    assert "unigram held-out NLL" in out


def test_funnel_mini_table_and_baseline(tmp_path):
    train(tmp_path / "runs" / "b333_s0", "funnel_wiki_b3_3_3_mlm_mini", "trainer.max_steps=4", "trainer.log_every_n_steps=1",
          "trainer.val_check_interval=2")
    out = run(["experiments/funnel/mini_table.py", str(tmp_path / "runs")]).stdout
    assert "| b333_s0 | finished | " in out and "| funnel_wiki_b3_3_3_mlm_mini | [0] | " in out
    out = run(["experiments/funnel/mlm_baseline.py", "experiment=funnel_wiki_b1_1_1_mlm_mini", "--train-batches",
               "5"]).stdout
    assert "most frequent training target" in out and "held-out majority share" in out
    assert 0 < float(re.search(r"unigram held-out loss .*: ([0-9.]+) nats", out).group(1)) < math.log(8000) + 1


# the GDAN test's tiny model on the synthetic SQuAD mini (tests/cli/test_gdan_cli.py): seconds per run
GDAN_TINY = ["data.mini=synthetic", "model.reader.embed_dim=8", "model.reader.hidden=4", "model.generator.embed_dim=8",
             "model.generator.enc_hidden=4", "model.generator.dec_hidden=8", "model.generator.max_question_len=6",
             "data.batch_size=4", "data.unlabeled_batch_size=4", "data.eval_batch_size=64", "trainer.max_steps=12",
             "trainer.val_check_interval=6",
             "task.mle_steps=4", "trainer.log_every_n_steps=1"]


def test_gdan_table_and_figure_3_8(tmp_path):
    for method in ("gen_domain", "gen_domain_adv"):
        train(tmp_path / "sweep" / method, f"gdan_squad_{method}_mini", *GDAN_TINY)
    run(["experiments/gdan/table.py", str(tmp_path / "sweep"), "--out", str(tmp_path)])
    table = (tmp_path / "table.md").read_text()
    assert "| gen_domain (" in table and "| gen_domain_adv (Gen + domain + adv) | 1 |" in table
    assert set(json.loads((tmp_path / "table.json").read_text())) == {"gen_domain", "gen_domain_adv"}
    out = run(["experiments/gdan/figure_3_8.py", str(tmp_path / "sweep"), "--out", str(tmp_path / "f.png")]).stdout
    assert (tmp_path / "f.png").stat().st_size > 10_000 and "gen_domain_adv: mean d_loss_gen" in out
    out = run(["experiments/gdan/dev_curves.py", str(tmp_path / "sweep"), "--out", str(tmp_path / "c.png")]).stdout
    assert (tmp_path / "c.png").stat().st_size > 10_000 and "gen_domain_adv seed 0: selected step" in out
    out = run(["experiments/gdan/answer_types.py", "--mini", "synthetic"]).stdout
    assert "heuristic on" in out and "SQuAD: Date 8.9" in out


# Ablation rows 1 (BERT) and 2 (DAE: an XLNet head on a non-PLM checkpoint), 2 pretraining and 2 finetuning steps;
# the validation is left out (SQuAD's needs a whole dev pass), the test splits are scored in full.
ABLATION_SMOKE = ["--rows", "1,2", "--seeds", "1", "--pretrain-steps", "2", "--pretrain-overrides", "logger=csv",
                  "--finetune-overrides", "logger=csv trainer.max_steps=2 trainer.val_check_interval=null "
                  "trainer.check_val_every_n_epoch=null"]


def test_xlnet_ablation_table_of_two_rows(tmp_path):
    script = "experiments/xlnet_ablation/run_table.py"
    out = run([script, "--out", str(tmp_path), *ABLATION_SMOKE]).stdout
    assert out.count("python train.py") == 4  # per row: one pretraining, one sweep over the four finetuning presets
    assert "model.max_position=192" in out  # BERT's position table covers RACE's 192 pieces, pretrained and finetuned
    lines = (tmp_path / "table.md").read_text().splitlines()
    header = next(line for line in lines if line.startswith("| row |"))
    assert header.count("|") == 8  # row + RACE, SQuAD2.0 F1 / EM, MNLI m / mm, SST-2
    for label in ("1 BERT-Base", "2 DAE + Transformer-XL"):
        cells = next(line for line in lines if line.startswith(f"| {label} |")).strip("| ").split(" | ")[1:]
        assert len(cells) == 6 and all(re.fullmatch(r"\d+\.\d\d \(\d+\.\d\d\)", c) for c in cells), cells
    assert "(64.30)" in lines[lines.index(next(line for line in lines if line.startswith("| 1 BERT")))]
    with open(tmp_path / "table.csv") as f:
        assert {row["n"] for row in csv.DictReader(f)} == {"1"}
    again = run([script, "--out", str(tmp_path), *ABLATION_SMOKE]).stdout  # resumes: every stage is done
    assert "python train.py" not in again and again.count("skipped") == 4
    ckpts = sorted(str(c) for c in tmp_path.glob("row*/pretrain/checkpoints/last.ckpt"))  # BERT and XLNet
    probe = run(["experiments/xlnet_ablation/collapse_probe.py", *ckpts]).stdout
    cosines = [float(c) for c in re.findall(r"hidden states (-?[0-9.]+)", probe)]
    assert len(cosines) == 2 and all(c < 0.99 for c in cosines) and "collapsed" not in probe, probe  # 2 steps in
    ckpt = next(tmp_path.glob("row2_*/pretrain/checkpoints/last.ckpt"))
    later = time.time() + 60  # newer than every finetuning result, however long they took
    os.utime(ckpt, (later, later))  # a re-run pretraining: its finetuning is stale
    stale = run([script, "--out", str(tmp_path), *ABLATION_SMOKE, "--rows", "2", "--dry-run"]).stdout
    assert stale.count("python train.py -m experiment=xlnet_race_mini,xlnet_squad2_mini,xlnet_mnli_mini,"
                       "xlnet_sst2_mini seed=1 ") == 1 and "pretraining finished" in stale
    bad = run([script, "--out", str(tmp_path), "--rows", "9"], check=False)
    assert bad.returncode == 2 and "no ablation row [9]" in bad.stderr
    empty = run([script, "--out", str(tmp_path / "none"), "--rows", "4", "--table-only"], check=False)
    table = (tmp_path / "none" / "table.md").read_text()
    assert empty.returncode == 1 and "| 4 XLNet-Base (K = 6) | failed (66.66) |" in table
    assert "row 4 RACE: no xlnet_race_mini run in " in table and "(pretraining did not finish: see " in table
    midi = ["--scale", "midi", "--rows", "1,4", "--tasks", "mnli,sst2", "--seeds", "1,2"]
    plan = run([script, "--out", str(tmp_path / "midi"), *midi, "--dry-run"]).stdout
    assert "experiment=bert_mnli_midi,bert_sst2_midi seed=1,2 " in plan and "xlnet_race_midi" not in plan
    assert "model.max_position=128" in plan  # BERT's table covers its T=128 pretraining, longer than MNLI's 64
    run([script, "--out", str(tmp_path / "midi"), *midi, "--table-only"], check=False)
    header = next(line for line in (tmp_path / "midi" / "table.md").read_text().splitlines() if "| row |" in line)
    assert header.count("|") == 5  # row + MNLI m / mm, SST-2
    bad = run([script, "--out", str(tmp_path), "--tasks", "mnli,cola"], check=False)
    assert bad.returncode == 2 and "--tasks 'mnli,cola': name one or more of race,squad2,mnli,sst2" in bad.stderr


def test_full_size_covers_every_paper_preset_of_the_memory_table(monkeypatch):
    """full_size.py steps every paper preset memory_estimate.py checks (its list is the benchmark's, not a test's)."""
    monkeypatch.syspath_prepend(str(ROOT / "experiments" / "perf"))
    import full_size
    import memory_estimate

    assert set(memory_estimate.PAPER_PRESETS) <= set(full_size.PRESETS)
    assert all((ROOT / "conf" / "experiment" / f"{name}.yaml").is_file() for name in [*full_size.PRESETS,
                                                                                        *full_size.TRAINED])


def test_full_size_gdan_data_reads_as_squad_and_unlabeled(monkeypatch, tmp_path):
    """The synthetic SQuAD v1.1 + unlabelled files GDAN's full-size run reads, at a few paragraphs: the counts asked
    for, every answer at its offset."""
    monkeypatch.syspath_prepend(str(ROOT / "experiments" / "perf"))
    import full_size_data

    from genlab.data.qa.answers import UnlabeledCounts, iter_unlabeled
    from genlab.data.qa.protocol import read_articles

    monkeypatch.setattr(full_size_data, "SQUAD", {"train": (3, 7, 33), "dev": (2, 4, 21)})
    monkeypatch.setattr(full_size_data, "UNLABELED_PARAGRAPHS", 6)
    root = full_size_data.dataset_dir("squad-gdan", tmp_path)
    for split, (n_articles, n_paragraphs, n_questions) in full_size_data.SQUAD.items():
        articles = read_articles(root / f"{split}-v1.1.json")
        questions = [q for _, qs in articles for q in qs]
        assert (len(articles), len({q.context for q in questions}), len(questions)) == (
            n_articles, n_paragraphs, n_questions)
        assert all(q.context[a["answer_start"]:].startswith(a["text"]) for q in questions for a in q.answers)
    counts = UnlabeledCounts()
    rows = list(iter_unlabeled(root / "unlabeled.jsonl", counts=counts))
    assert len(rows) == 6 and all(len(r.answers) == 5 for r in rows) and counts == UnlabeledCounts()
