"""``python eval.py experiment=<finetuning preset> task.init_from=<HF folder>`` evaluates a published finetuned
checkpoint without training and reproduces Hugging Face's predictions: a tiny random
``BertForSequenceClassification`` (initialised with std 0.5, so that its predictions differ between sentences and
none is a near tie) on the SST-2 mini."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import laid_out

transformers = pytest.importorskip("transformers", reason="transformers (test dependency) is not installed")

ROOT = Path(__file__).resolve().parents[2]
LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)]
TOKENS = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "and", "of", "to", "is", "it", "film", "movie",
           "story", "good", "bad", ",", ".", "'", "-"] + LETTERS + ["##" + c for c in LETTERS])
MODEL = ["model.n_layer=2", "model.d_model=32", "model.n_head=2", "model.d_inner=64", "model.max_position=64"]


def finetuned_bert(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "vocab.txt").write_text("\n".join(TOKENS) + "\n", encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=len(TOKENS), hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64, max_position_embeddings=64,
                                     initializer_range=0.5)
    transformers.BertForSequenceClassification(config).save_pretrained(folder)
    return folder


def hf_predictions(folder: Path, split) -> np.ndarray:
    hf = transformers.BertForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        logits = hf(**{k: torch.as_tensor(laid_out(split, k)) for k in ("input_ids", "token_type_ids",
                                                                         "attention_mask")}).logits
    top2 = logits.topk(2, dim=-1).values
    assert (top2[:, 0] - top2[:, 1]).min() > 1e-3  # no near tie: the argmax is a fair comparison
    return logits.argmax(-1).numpy()


def test_eval_py_reproduces_a_finetuned_hf_classifier(tmp_path):
    from genlab.assemble import build_data
    from helpers import compose_config

    folder = finetuned_bert(tmp_path / "tiny-bert-sst2")
    preds = tmp_path / "preds"
    args = ["experiment=bert_sst2_mini", f"task.init_from={folder}", f"data.tokenizer={folder}", *MODEL,
            f"paths.cache_dir={tmp_path / 'cache'}"]
    env = {**os.environ, "GENLAB_OFFLINE": "1", "WANDB_MODE": "disabled", "GENLAB_LOGS": str(tmp_path / "outputs"),
           "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, str(ROOT / "eval.py"), *args, "logger=csv",
                          "trainer.enable_progress_bar=false", f"task.prediction_dir={preds}"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "0 new (freshly initialised), 0 checkpoint tensors ignored" in run.stderr + run.stdout
    (metrics_file,) = (tmp_path / "outputs").glob("bert_sst2_mini/*/metrics.json")
    metrics = json.loads(metrics_file.read_text())["metrics"]

    dm = build_data(compose_config(args, tmp_path / "in_process").data)
    dm.setup("test")
    with (preds / "SST-2.tsv").open(encoding="utf-8") as f:
        written = np.array([int(row["prediction"]) for row in csv.DictReader(f, delimiter="\t")])
    expected = hf_predictions(folder, dm.splits["SST-2"])
    assert len(set(expected)) == 2 and np.array_equal(written, expected)  # the unlabelled test split, row by row
    dev = dm.splits[dm.dev_splits[0]]
    assert metrics["valid/acc"] == pytest.approx(float((hf_predictions(folder, dev) == dev.labels).mean()))



def test_a_preset_without_init_from_is_one_message(tmp_path):
    from genlab.cli.choices import evaluates_init_from
    from genlab.cli.eval import evaluate_init_from
    from genlab.errors import ConfigError
    from helpers import compose_config

    assert evaluates_init_from(["experiment=bert_sst2_mini", "task.init_from=/m"])
    assert not evaluates_init_from(["ckpt_path=last.ckpt", "eval.mem_len=8"])
    with pytest.raises(ConfigError, match=r"set it, or pass ckpt_path="):
        evaluate_init_from(compose_config(["experiment=bert_sst2_mini"], tmp_path))
