"""SQuAD and RACE finetuning from a published-layout BERT checkpoint, end to end through the CLI: a tiny random HF
BERT folder (WordPiece vocab.txt of the minis' frequent words + characters) ->
``python train.py experiment=bert_{squad2,race}_mini task.init_from=<folder> data.tokenizer=<folder>`` trains a few
steps and writes official-format SQuAD prediction files / RACE test accuracies; a vocabulary other than the
checkpoint's is refused (exit 2, naming data.tokenizer)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from genlab.data.finetune.minis import squad_cloze_data

transformers = pytest.importorskip("transformers", reason="transformers (test dependency) is not installed")
tokenizers = pytest.importorskip("tokenizers", reason="WordPiece tokenisation needs the tokenizers package")

ROOT = Path(__file__).resolve().parents[2]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CHARS = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [str(d) for d in range(10)] + list(".,;:!?'\"()-%$&/")
BERT_SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
              "max_position_embeddings": 64}
MODEL = ["model.n_layer=2", "model.d_model=32", "model.n_head=2", "model.d_inner=64", "data.max_seq_len=64"]
SHORT = ["trainer.max_steps=3", "trainer.enable_progress_bar=false", "logger=csv", "data.batch_size=8"]


def vocabulary(n_words: int = 600) -> list[str]:
    """Specials, the minis' most frequent words (BERT-normalised and pre-tokenised), characters and ## forms."""
    norm, pre = tokenizers.normalizers.BertNormalizer(lowercase=True), tokenizers.pre_tokenizers.BertPreTokenizer()
    train, _ = squad_cloze_data()
    counts = Counter(w for art in train for p in art["paragraphs"]
                     for w, _ in pre.pre_tokenize_str(norm.normalize_str(p["context"])))
    words = [w for w, _ in counts.most_common(n_words) if w not in CHARS]
    return SPECIALS + CHARS + words + ["##" + c for c in CHARS[:36]]


def write_bert_folder(folder: Path, tokens: list[str]) -> Path:
    """A random HF BertForPreTraining saved with save_pretrained, with its vocab.txt and tokenizer config."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    torch.manual_seed(0)
    transformers.BertForPreTraining(transformers.BertConfig(vocab_size=len(tokens), **BERT_SIZES)).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    return write_bert_folder(tmp_path_factory.mktemp("bert") / "tiny-bert-uncased", vocabulary())


def run_train(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "GENLAB_OFFLINE": "1", "WANDB_MODE": "disabled", "GENLAB_LOGS": str(tmp_path / "outputs"),
           "GENLAB_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(ROOT / "train.py"), *args], check=False, cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)


def test_bert_folder_finetunes_squad2_and_writes_official_prediction_files(tmp_path, bert_dir):
    preds_dir = tmp_path / "preds"
    ok = run_train("experiment=bert_squad2_mini", f"task.init_from={bert_dir}", f"data.tokenizer={bert_dir}",
                   *MODEL, "data.doc_stride=24", "data.max_query_length=24", f"task.prediction_dir={preds_dir}",
                   *SHORT, tmp_path=tmp_path)
    assert ok.returncode == 0, ok.stderr[-3000:]
    dev = json.loads((tmp_path / "cache").glob("**/dev-v2.0.json").__next__().read_text(encoding="utf-8"))["data"]
    contexts = {qa["id"]: p["context"] for art in dev for p in art["paragraphs"] for qa in p["qas"]}
    preds = json.loads((preds_dir / "predictions.json").read_text())
    null = json.loads((preds_dir / "null_odds.json").read_text())
    nbest = json.loads((preds_dir / "nbest_predictions.json").read_text())
    scores = json.loads((preds_dir / "eval.json").read_text())
    assert set(preds) == set(null) == set(nbest) == set(contexts)
    # every answer is a span of its own paragraph's raw text (the WordPiece offsets map back exactly)
    assert all(isinstance(t, str) and t in contexts[q] for q, t in preds.items())
    assert any(preds.values()) and all(isinstance(v, float) for v in null.values())
    assert all(b["text"] in contexts[q] and 0 <= b["probability"] <= 1 for q, bs in nbest.items() for b in bs)
    assert {"exact", "f1", "HasAns_f1", "NoAns_f1", "best_f1"} <= set(scores) and 0 <= scores["f1"] <= 100
    assert "test/best_f1" in ok.stdout


def test_bert_folder_finetunes_race_and_a_different_vocab_is_refused(tmp_path, bert_dir):
    ok = run_train("experiment=bert_race_mini", f"task.init_from={bert_dir}", f"data.tokenizer={bert_dir}", *MODEL,
                   "data.max_qa_length=24", *SHORT, tmp_path=tmp_path)
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert "test/acc" in ok.stdout
    # by default prediction files go to <run dir>/predictions, next to config.yaml, whatever the loggers
    (config,) = [p for p in (tmp_path / "outputs").glob("**/config.yaml") if ".hydra" not in p.parts]
    assert (config.parent / "predictions" / "race_test.json").is_file()

    # same size, different token order: shapes fit but the text would map to the wrong embeddings
    tokens = (bert_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
    foreign = tmp_path / "other-vocab"
    foreign.mkdir()
    (foreign / "vocab.txt").write_text("\n".join(tokens[:5] + tokens[5:][::-1]) + "\n", encoding="utf-8")
    bad = run_train("experiment=bert_race_mini", f"task.init_from={bert_dir}", f"data.tokenizer={foreign}", *MODEL,
                    "data.max_qa_length=24", *SHORT, tmp_path=tmp_path)
    assert bad.returncode == 2, bad.stderr[-3000:]
    assert "trained with tokenizer=" in bad.stderr and f"data.tokenizer={bert_dir}" in bad.stderr


@pytest.mark.parametrize("experiment", ["bert_squad1", "bert_squad2", "bert_race"])
def test_full_presets_take_the_tokenizer_of_the_published_folder(experiment, monkeypatch):
    """``experiment=bert_squad2 model=bert_base task.init_from=/models/bert-base-uncased`` needs no data.tokenizer."""
    from hydra import compose, initialize_config_dir

    monkeypatch.delenv("GENLAB_BERT_SPIECE", raising=False)
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=[f"experiment={experiment}", "model=bert_base",
                                          "task.init_from=/models/bert-base-uncased"])
        assert cfg.data.tokenizer == "/models/bert-base-uncased" and cfg.data.layout == "bert"
        assert (cfg.model.n_layer, cfg.model.d_model, cfg.model.max_position) == (12, 768, 512)
        monkeypatch.setenv("GENLAB_BERT_SPIECE", "/models/other/vocab.txt")  # an explicit choice still wins
        cfg = compose("train", overrides=[f"experiment={experiment}", "task.init_from=/models/bert-base-uncased"])
        assert cfg.data.tokenizer == "/models/other/vocab.txt"
