"""Zero-shot heuristics of Radford et al. (2018) §5 (Figure 2 right) over GPT checkpoints: conditional log-probabilities, the
CoLA threshold, the option argmax, checkpoint loading and the report script."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from genlab.analysis import gpt_zero_shot as zs
from genlab.data.tokenizers.gpt_bpe import train_gpt_bpe
from genlab.models.gpt import GPTLMHeadModel

ROOT = Path(__file__).resolve().parents[2]


def tiny(vocab=20, n_ctx=8):
    torch.manual_seed(0)
    return GPTLMHeadModel(vocab, 3, n_positions=n_ctx, n_embd=16, n_layer=1, n_head=2).eval()


def test_continuation_logprob_sums_the_conditional_log_probabilities_and_keeps_the_end():
    model = tiny()
    prefix, cont = [1, 2, 3], [4, 5]
    logp = F.log_softmax(model.lm_logits(model(torch.tensor([prefix + cont])).hidden[0], special_rows=False), -1)
    expected = float(logp[2, 4] + logp[3, 5])
    total, n = zs.continuation_logprob(model, prefix, cont)
    assert n == 2 and total == pytest.approx(expected, abs=1e-5)
    assert zs.average_logprob(model, prefix, cont) == pytest.approx(expected / 2, abs=1e-5)
    long_prefix = list(range(1, 19))  # 18 + 2 tokens > n_ctx 8: the prefix loses its start
    assert zs.continuation_logprob(model, long_prefix, cont)[0] == pytest.approx(
        zs.continuation_logprob(model, long_prefix[-6:], cont)[0], abs=1e-6)
    assert zs.continuation_logprob(model, [], [7])[1] == 0  # nothing to condition on


def test_mcc_matches_scikit_learn():
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    pred, gold = rng.random(200) > 0.4, rng.random(200) > 0.5
    assert zs.mcc(pred, gold) == pytest.approx(metrics.matthews_corrcoef(gold, pred))
    assert zs.mcc(np.ones(5, bool), gold[:5]) == 0.0


def test_heuristics_pick_the_likelier_option_and_threshold_on_training_sentences(monkeypatch):
    class Tok:
        def encode(self, text):
            return [len(w) for w in text.split()]

    # a fake LM: the average log-probability of a continuation is its first token's value (its first word's length)
    monkeypatch.setattr(zs, "average_logprob", lambda model, prefix, cont: float(cont[0]) if cont else -math.inf)
    acc = zs.multiple_choice(None, Tok(), ["ctx", "ctx"], [["aa", "aaaa"], ["aaa", "a"]], [1, 1])
    assert acc == 0.5
    train = (["aaaa", "aaaaa", "a", "aa"], [1, 1, 0, 0])  # long first words are "acceptable"
    assert zs.cola(None, Tok(), train, (["aaaaaa", "a"], [1, 0])) == pytest.approx(1.0)
    assert zs.normalise("race", 0.25, 0.5) == 0.0 and zs.normalise("race", 0.5, 0.5) == 1.0


def test_the_script_scores_every_checkpoint_of_a_pretraining_run(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("\n".join(["the film is very good and the story is positive ."] * 50
                              + ["the film is very bad and the story is negative ."] * 50))
    tok = train_gpt_bpe([text], tmp_path / "bpe.model", vocab_size=40)
    model = tiny(tok.vocab_size, n_ctx=64)
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "spiece.model").write_bytes(tok.model_file.read_bytes())
    config = {"model": {"_target_": "genlab.models.gpt.GPTLMHeadModel", "n_special": 3, "n_positions": 64,
                        "n_embd": 16, "n_layer": 1, "n_head": 2}, "data": {"tokenizer": None}}
    for step in (10, 20):
        state = {f"model.{k}": v for k, v in model.state_dict().items()}
        torch.save({"global_step": step, "state_dict": state,
                    "genlab": {"config": config, "data_identity": {"vocab_size": tok.vocab_size}}},
                   run / "checkpoints" / f"step{step}.ckpt")
    loaded, _, step = zs.load_lm(run / "checkpoints" / "step10.ckpt")
    assert step == 10 and torch.equal(loaded.transformer.h[0].mlp.c_fc.weight, model.transformer.h[0].mlp.c_fc.weight)

    spec = importlib.util.spec_from_file_location("zero_shot", ROOT / "experiments" / "gpt" / "zero_shot.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    rows = script.main([str(run), "--tasks", "sst2", "--cache-dir", str(tmp_path / "cache"), "--limit", "8",
                        "--out", str(tmp_path / "out")])
    assert [(r.step, r.task) for r in rows] == [(10, "sst2"), (20, "sst2")]
    assert 0.0 <= rows[0].score <= 1.0 and rows[0].score == rows[1].score  # same weights, same score
    assert (tmp_path / "out" / "zero_shot.md").read_text().count("\n| 1") == 1
