"""Finetuning from published-layout checkpoints end to end: tiny random HF BERT (WordPiece vocab.txt) and HF XLNet
(spiece.model) folders -> ``python train.py experiment=<bert|xlnet>_sst2_mini task.init_from=<folder>`` trains;
a checkpoint whose tokenizer differs from the data's is refused (exit 2, naming data.tokenizer)."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from genlab.data.finetune.datamodule import encode_pair
from genlab.data.tokenizers.xlnet_pieces import train_tokenizer
from genlab.errors import CheckpointError
from genlab.models.bert import BertForPretraining
from genlab.tasks.finetune_base import load_pretrained
from genlab.tasks.finetune_classification import SequenceClassificationTask
from genlab.tasks.layerwise_lr import AdamWeightDecay

transformers = pytest.importorskip("transformers", reason="transformers (test dependency) is not installed")

ROOT = Path(__file__).resolve().parents[2]
LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)]
WORDS = ["the", "a", "and", "of", "to", "is", "it", "film", "movie", "story", "good", "bad", "one", "##s", "##ing",
         "##ed", "##ly", ",", ".", "'", "-", "!", "?", "(", ")", ":", ";"]
BERT_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                  max_position_embeddings=64)
BERT_MODEL = ["model.n_layer=2", "model.d_model=32", "model.n_head=2", "model.d_inner=64", "model.max_position=64"]
SHORT = ["trainer.max_steps=3", "trainer.enable_progress_bar=false", "logger=csv", "data.batch_size=8"]


def write_bert_folder(folder: Path, tokens: list[str]) -> Path:
    """A random HF BertForPreTraining saved with save_pretrained, with its vocab.txt and tokenizer config."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=len(tokens), **BERT_SIZES)
    transformers.BertForPreTraining(cfg).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + LETTERS + ["##" + c for c in LETTERS]
    return write_bert_folder(tmp_path_factory.mktemp("bert") / "tiny-bert-uncased", tokens)


@pytest.fixture(scope="module")
def xlnet_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("xlnet") / "tiny-xlnet-cased"
    folder.mkdir()
    text = folder.parent / "text.txt"
    text.write_text("\n".join(f"The {w} film number {i} is a {a} story, and it's {b}." for i in range(200)
                              for w, a, b in (("first", "good", "fun"), ("second", "bad", "dull"))), encoding="utf-8")
    train_tokenizer([text], folder / "spiece", vocab_size=150)
    vocab = len((folder / "spiece.vocab").read_text(encoding="utf-8").splitlines())
    torch.manual_seed(0)
    cfg = transformers.XLNetConfig(vocab_size=vocab, d_model=64, n_layer=2, n_head=4, d_inner=128,
                                   ff_activation="gelu_new")
    transformers.XLNetLMHeadModel(cfg).save_pretrained(folder)
    return folder


def run_train(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "GENLAB_OFFLINE": "1", "WANDB_MODE": "disabled", "GENLAB_LOGS": str(tmp_path / "outputs"),
           "GENLAB_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(ROOT / "train.py"), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)


def test_bert_folder_finetunes_through_the_cli_and_a_different_vocab_is_refused(tmp_path, bert_dir):
    data = ["data.tokenizer=${task.init_from}"]  # the data inherits the checkpoint's tokenizer
    ok = run_train("experiment=bert_sst2_mini", f"task.init_from={bert_dir}", *data, *BERT_MODEL, *SHORT,
                   tmp_path=tmp_path)
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert "test/acc" in ok.stdout

    # same size, different tokens -> same shapes, but text would map to the wrong embeddings
    other = [t for t in (bert_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()]
    other = other[:5] + other[5:][::-1]
    foreign = write_bert_folder(tmp_path / "other-vocab", other)
    bad = run_train("experiment=bert_sst2_mini", f"task.init_from={bert_dir}",
                    f"data.tokenizer={foreign}", *BERT_MODEL, *SHORT, tmp_path=tmp_path)
    assert bad.returncode == 2
    assert "trained with tokenizer=" in bad.stderr and f"data.tokenizer={bert_dir}" in bad.stderr


def test_xlnet_folder_finetunes_through_the_cli_and_a_new_sentencepiece_is_refused(tmp_path, xlnet_dir):
    ok = run_train("experiment=xlnet_sst2_mini", f"task.init_from={xlnet_dir}",
                   f"data.tokenizer={xlnet_dir / 'spiece.model'}", *SHORT, tmp_path=tmp_path)
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert "test/acc" in ok.stdout

    bad = run_train("experiment=xlnet_sst2_mini", f"task.init_from={xlnet_dir}", "data.tokenizer=null", *SHORT,
                    tmp_path=tmp_path)
    assert bad.returncode == 2  # data.tokenizer=null trains a fresh SentencePiece on the mini
    assert "its vocabulary has" in bad.stderr and f"data.tokenizer={xlnet_dir}" in bad.stderr


def make_task(model, init_from):
    return SequenceClassificationTask(model, functools.partial(AdamWeightDecay, lr=1e-4), None, n_labels=2,
                                      init_from=str(init_from))


def test_bert_import_through_init_from_checks_architecture(bert_dir):
    V = len((bert_dir / "vocab.txt").read_text(encoding="utf-8").splitlines())
    dims = dict(n_layer=2, d_model=32, n_head=2, d_inner=64, max_position=64)
    task = make_task(BertForPretraining(V, **dims), bert_dir)
    ref = transformers.BertForPreTraining.from_pretrained(bert_dir)
    torch.testing.assert_close(task.backbone.bert.encoder.layer[1].output.dense.weight,
                               ref.bert.encoder.layer[1].output.dense.weight)
    assert task.pretrained_identity["tokenizer"].startswith("wordpiece-")
    with pytest.raises(CheckpointError, match=r"n_head: checkpoint 2, config 4\).*: model.n_head=2$"):
        make_task(BertForPretraining(V, **{**dims, "n_head": 4}), bert_dir)
    with pytest.raises(CheckpointError, match=r"max_position: checkpoint 64, config 48\).*: model.max_position=64$"):
        make_task(BertForPretraining(V, **{**dims, "max_position": 48}), bert_dir)
    with pytest.raises(CheckpointError, match=f"data.tokenizer={bert_dir}"):
        make_task(BertForPretraining(V + 7, **dims), bert_dir)


def test_hf_folder_of_the_other_architecture_is_named(bert_dir, xlnet_dir):
    with pytest.raises(CheckpointError, match="model_type='xlnet'"):
        load_pretrained(BertForPretraining(100, n_layer=2, d_model=32, n_head=2, d_inner=64), str(xlnet_dir))


@pytest.mark.parametrize("layout", ["bert", "xlnet"])
def test_encode_pair_with_checkpoint_ids_only_swaps_the_special_ids(layout):
    a, b = [11, 12, 13, 14, 15], [21, 22, 23]
    for pair in ((a, b), (a, None)):
        for n in (6, 16):
            ids, seg, mask = encode_pair(*pair, n, layout, cls_id=101, sep_id=102, pad_id=0)
            base_ids, base_seg, base_mask = encode_pair(*pair, n, layout)  # XLNet's SentencePiece ids
            np.testing.assert_array_equal(seg, base_seg)
            np.testing.assert_array_equal(mask, base_mask)
            mapped = np.select([base_ids == 3, base_ids == 4, base_mask == 0], [101, 102, 0], base_ids)
            np.testing.assert_array_equal(ids, mapped)


# The architecture part of the published config.json files (Hugging Face hub: bert-base-uncased, bert-large-uncased,
# xlnet-base-cased, xlnet-large-cased); token ids, task heads and generation settings left out.
PUBLISHED = {
    "bert-base-uncased": dict(model_type="bert", hidden_act="gelu", hidden_size=768, num_hidden_layers=12,
                              num_attention_heads=12, intermediate_size=3072, max_position_embeddings=512,
                              type_vocab_size=2, layer_norm_eps=1e-12, vocab_size=30522),
    "bert-large-uncased": dict(model_type="bert", hidden_act="gelu", hidden_size=1024, num_hidden_layers=24,
                               num_attention_heads=16, intermediate_size=4096, max_position_embeddings=512,
                               type_vocab_size=2, layer_norm_eps=1e-12, vocab_size=30522),
    "xlnet-base-cased": dict(model_type="xlnet", d_model=768, n_layer=12, n_head=12, d_head=64, d_inner=3072,
                             ff_activation="gelu", untie_r=True, layer_norm_eps=1e-12, vocab_size=32000),
    "xlnet-large-cased": dict(model_type="xlnet", d_model=1024, n_layer=24, n_head=16, d_head=64, d_inner=4096,
                              ff_activation="gelu", untie_r=True, layer_norm_eps=1e-12, vocab_size=32000),
}


@pytest.mark.parametrize("name, preset, overrides", [
    ("bert-base-uncased", "bert_sst2", ["model=bert_base"]),
    ("bert-large-uncased", "bert_sst2", []),
    ("xlnet-base-cased", "xlnet_sst2", ["model=xlnet_base", "model.ff_activation=gelu"]),
    ("xlnet-large-cased", "xlnet_sst2", ["model.ff_activation=gelu"]),
])
def test_presets_fit_the_published_checkpoints(tmp_path, name, preset, overrides):
    """The README's commands: each preset, with the overrides it documents, passes the architecture check (HF's
    XLNet configs say erf "gelu", so the tanh-GELU preset default is refused until model.ff_activation=gelu)."""
    from hydra.utils import instantiate

    from genlab.interop import hf_bert, hf_xlnet
    from genlab.tasks.finetune_base import _check_hf_architecture
    from helpers import compose_config

    folder = tmp_path / name
    folder.mkdir()
    config = PUBLISHED[name]
    (folder / "config.json").write_text(json.dumps(config))
    model_cfg = compose_config([f"experiment={preset}", *overrides], tmp_path).model
    interop = hf_bert if config["model_type"] == "bert" else hf_xlnet
    with torch.device("meta"):  # sizes only, no memory
        _check_hf_architecture(instantiate(model_cfg, vocab_size=config["vocab_size"]), folder, interop)
        if config["model_type"] == "xlnet":
            tanh = instantiate(model_cfg, vocab_size=config["vocab_size"], ff_activation="gelu_tanh")
            with pytest.raises(CheckpointError, match="checkpoint's model: model.ff_activation=gelu$"):
                _check_hf_architecture(tanh, folder, interop)


def test_own_pretraining_run_finetunes_with_its_checkpoint_as_tokenizer(tmp_path):
    """``experiment=xlnet_base_mini`` trains its own SentencePiece into the cache; the run keeps a copy in its folder,
    so ``task.init_from=<run>/checkpoints/last.ckpt data.tokenizer=${task.init_from}`` finetunes on it, and a
    finetuning run on another tokenizer is refused naming that override."""
    pytest.importorskip("gensim", reason="pretrain_mini reads the Wikipedia excerpt inside the gensim wheel")
    tiny = ["model.n_layer=1", "model.d_model=32", "model.n_head=2", "model.d_head=16", "model.d_inner=64"]
    pre = run_train("experiment=xlnet_base_mini", *tiny, "trainer.max_steps=2", "trainer.limit_val_batches=1",
                    "trainer.val_check_interval=2", "trainer.enable_progress_bar=false", "logger=csv",
                    f"paths.output_dir={tmp_path / 'pre'}", tmp_path=tmp_path)
    assert pre.returncode == 0, pre.stderr[-3000:]
    ckpt = tmp_path / "pre" / "checkpoints" / "last.ckpt"
    spm = tmp_path / "pre" / "spiece.model"
    trained = list((tmp_path / "cache").rglob("*.model"))  # the SentencePiece the run trained into the cache
    assert len(trained) == 1 and spm.read_bytes() == trained[0].read_bytes()

    ok = run_train("experiment=xlnet_sst2_mini", f"task.init_from={ckpt}", "data.tokenizer=${task.init_from}",
                   *tiny, *SHORT, tmp_path=tmp_path)
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert "test/acc" in ok.stdout

    bad = run_train("experiment=xlnet_sst2_mini", f"task.init_from={ckpt}", "data.tokenizer=null", *tiny, *SHORT,
                    tmp_path=tmp_path)
    assert bad.returncode == 2  # data.tokenizer=null trains the mini's own SentencePiece (another vocabulary)
    assert "trained with vocab_size=" in bad.stderr and f"data.tokenizer={ckpt}" in bad.stderr
