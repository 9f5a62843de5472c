"""The GPT minis' offline acceptance run (checks G1-G4, experiments/gpt/README.md), through train.py's code path. G4
(the Story Cloze pipeline: one answer per test row) runs in CI; G1 (pretraining beats the unigram model by 0.5 nats)
and G2 (finetuning the pretrained checkpoint beats the same recipe from random init on the human-labelled newsgroups
mini, 5-fold CV, by more than the spread over 3 seeds) take minutes and are marked slow; the measured numbers are in
experiments/gpt/README.md."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pytest

from genlab.cli.train import train

ROOT = Path(__file__).resolve().parents[2]


def metrics_of(run: Path) -> dict[str, float]:
    return json.loads((run / "metrics.json").read_text())["metrics"]


def test_g4_story_cloze_mini_runs_and_answers_every_test_story(compose_cfg, tmp_path):
    from genlab.data.finetune import story_cloze as sc
    from genlab.data.sources.tiers import locate

    cfg = compose_cfg(["experiment=gpt_story_cloze_mini", f"paths.cache_dir={tmp_path / 'cache'}",
                       "trainer.max_steps=4", "trainer.check_val_every_n_epoch=100", "data.vocab_size=300"])
    train(cfg)
    answers = json.loads((tmp_path / "predictions" / "story_cloze_test.json").read_text())
    stories = sc.read_stories(locate(sc.STORY_CLOZE_MINI, "mini", cache_dir=tmp_path / "cache") / sc.TEST_FILE)
    assert [a["id"] for a in answers] == [s.story_id for s in stories]
    assert {a["answer"] for a in answers} <= {1, 2} and all(len(a["probs"]) == 2 for a in answers)
    acc = np.mean([a["answer"] - 1 == s.label for a, s in zip(answers, stories)])
    assert acc == pytest.approx(metrics_of(tmp_path)["test/score"])


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """G1: gpt_books_mini as the preset says, seed 0."""
    from helpers import compose_config

    run = tmp_path_factory.mktemp("gpt_books_mini")
    cache = run / "cache"
    train(compose_config(["experiment=gpt_books_mini", "seed=0", f"paths.cache_dir={cache}"], run))
    return run, cache


@pytest.mark.slow
def test_g1_pretraining_mini_beats_the_unigram_model_by_half_a_nat(pretrained):
    import importlib.util

    run, cache = pretrained
    spec = importlib.util.spec_from_file_location("unigram", ROOT / "experiments" / "gpt" / "unigram_baseline.py")
    unigram = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(unigram)
    assert metrics_of(run)["test/loss"] <= unigram.main([f"data.cache_dir={cache}"]) - 0.5


@pytest.mark.slow
def test_g2_pretraining_beats_random_init_on_newsgroups_by_more_than_the_seed_spread(pretrained, tmp_path):
    """The G2 protocol (gpt_newsgroups_mini): 5-fold CV over the 200 posts, 8 epochs of 160 posts at batch 16
    (80 steps), the preset's λ 0.5, final weights; issue #25's criterion on the 3 seeds' 5-fold accuracies (the
    stricter acceptance bars, >= 0.75 and 0.2 above, are reported in experiments/gpt/README.md, not met at this size)."""
    from helpers import compose_config

    run, cache = pretrained
    scores: dict[bool, list[float]] = {True: [], False: []}
    for init in (True, False):
        for seed in (0, 1, 2):
            folds = []
            for fold in range(5):
                out = tmp_path / f"{init}_{seed}_{fold}"
                train(compose_config(["experiment=gpt_newsgroups_mini", f"data.fold={fold}", f"seed={seed}",
                                      f"task.init_from={run / 'checkpoints' / 'last.ckpt'}",
                                      f"task.init_from_pretrained={str(init).lower()}",
                                      f"paths.cache_dir={cache}"], out))
                folds.append(metrics_of(out)["test/score"])
            scores[init].append(statistics.fmean(folds))
    gap = statistics.fmean(scores[True]) - statistics.fmean(scores[False])
    assert gap > max(statistics.stdev(scores[True]), statistics.stdev(scores[False])), scores
