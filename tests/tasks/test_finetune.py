"""Finetuning tasks: the IMDB-format mini beats the majority class, STS-B regression, GLUE submission files, config
and checkpoint errors, layer-wise learning rates, loading a pretraining checkpoint."""

from __future__ import annotations

import functools
import warnings

import pytest
import pytorch_lightning as pl
import torch

from genlab.data.finetune.datamodule import ClassificationDataModule
from genlab.errors import CheckpointError, ConfigError
from genlab.models.bert import BertForPretraining
from genlab.models.xlnet import XLNetLMHeadModel
from genlab.tasks.finetune_classification import SequenceClassificationTask
from genlab.tasks.layerwise_lr import AdamWeightDecay
from genlab.tasks.optim import warmup_linear

warnings.filterwarnings("ignore", category=UserWarning)


def xlnet(vocab):
    return XLNetLMHeadModel(vocab, n_layer=2, d_model=64, n_head=4, d_head=16, d_inner=128)


def make_task(model, steps=10, lr=5e-4, **kw):
    return SequenceClassificationTask(model, functools.partial(AdamWeightDecay, lr=lr),
                                      functools.partial(warmup_linear, warmup_steps=steps // 10, max_steps=steps), **kw)


def trainer(steps, **kw):
    return pl.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, accelerator="cpu",
                      enable_progress_bar=False, enable_model_summary=False, gradient_clip_val=1.0,
                      num_sanity_val_steps=0, **kw)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cache"))


def test_imdb_mini_trains_and_beats_majority_class(cache):
    pl.seed_everything(0)
    dm = ClassificationDataModule("imdb", source="mini", cache_dir=cache, vocab_size=2000, max_seq_len=96,
                                  batch_size=16, eval_batch_size=60)
    dm.setup("fit")
    test = dm.splits["test"]
    majority = max((test.labels == c).mean() for c in (0, 1))
    task = make_task(xlnet(dm.model_overrides()["vocab_size"]), steps=100, n_labels=2, metric="error",
                     monitor="valid/error", monitor_mode="min", weight_decay=0.01)
    tr = trainer(100, check_val_every_n_epoch=100)
    tr.fit(task, dm)
    err = tr.test(task, dm, verbose=False)[0]["test/error"]
    assert err < 100 * (1 - majority) - 10, f"error {err:.1f}% vs majority-class error {100 * (1 - majority):.1f}%"


def write_stsb(root):
    head = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    rows = [("a man plays a guitar", "a man plays guitar", 4.8), ("a cat sleeps", "stocks fell sharply", 0.2),
            ("a woman is cooking", "a woman cooks food", 4.2), ("kids play football", "the senate voted", 0.0),
            ("a dog runs", "a dog is running", 4.6), ("rain in spain", "a man eats bread", 0.4)]
    body = "".join(f"{i}\tg\tf\ty\t{i}\tn\tn\t{a}\t{b}\t{s}\n" for i, (a, b, s) in enumerate(rows))
    (root / "train.tsv").write_text(head + body)
    (root / "dev.tsv").write_text(head + body)
    test_head = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\n"
    (root / "test.tsv").write_text(test_head + "".join(f"{i}\tg\tf\ty\t{i}\tn\tn\t{a}\t{b}\n"
                                                       for i, (a, b, _) in enumerate(rows[:3])))


@pytest.mark.parametrize("arch", ["xlnet", "bert"])
def test_stsb_regression_head_pearson_and_submission_file(tmp_path, cache, arch):
    write_stsb(tmp_path)
    dm = ClassificationDataModule("stsb", source="path", path=str(tmp_path), cache_dir=cache, vocab_size=60,
                                  layout=arch, max_seq_len=16, batch_size=3, eval_batch_size=6)
    dm.setup("fit")
    assert dm.n_labels == 1 and dm.splits["train"].labels.dtype.kind == "f"
    V = dm.model_overrides()["vocab_size"]
    model = xlnet(V) if arch == "xlnet" else BertForPretraining(V, n_layer=1, d_model=32, n_head=4, d_inner=64,
                                                                max_position=16)
    task = make_task(model, n_labels=1, metric="corr", monitor="valid/pearson", prediction_dir=str(tmp_path / "out"))
    tr = trainer(4)
    tr.fit(task, dm)
    res = tr.test(task, dm, verbose=False)[0]
    assert {"test/pearson", "test/spearman", "test/loss"} <= set(res)
    lines = (tmp_path / "out" / "STS-B.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and [ln.split("\t")[0] for ln in lines[1:]] == ["0", "1", "2"]
    float(lines[1].split("\t")[1])


def test_sst2_mini_writes_glue_submission(tmp_path, cache):
    dm = ClassificationDataModule("sst2", source="mini", cache_dir=cache, vocab_size=1000, max_seq_len=32,
                                  batch_size=16, eval_batch_size=40)
    dm.setup("fit")
    task = make_task(xlnet(dm.model_overrides()["vocab_size"]), prediction_dir=str(tmp_path))
    tr = trainer(3)
    tr.fit(task, dm)
    res = tr.test(task, dm, verbose=False)
    assert "test/acc" in res[0]
    lines = (tmp_path / "SST-2.tsv").read_text().splitlines()
    assert len(lines) == 21 and all(ln.split("\t")[1] in ("0", "1") for ln in lines[1:])


def test_label_count_mismatch_is_a_config_error(cache):
    dm = ClassificationDataModule("sst2", source="mini", cache_dir=cache, vocab_size=1000, max_seq_len=32)
    dm.setup("fit")
    task = make_task(xlnet(dm.model_overrides()["vocab_size"]), n_labels=3)
    with pytest.raises(ConfigError, match="task.n_labels=2"):
        trainer(1).fit(task, dm)


def test_require_pretrained_and_missing_checkpoint():
    with pytest.raises(ConfigError, match="task.init_from"):
        make_task(xlnet(50), require_pretrained=True)
    with pytest.raises(CheckpointError, match="no such file"):
        make_task(xlnet(50), init_from="/nonexistent/xlnet")


def test_init_from_genlab_checkpoint_and_tokenizer_mismatch(tmp_path, cache):
    dm = ClassificationDataModule("sst2", source="mini", cache_dir=cache, vocab_size=1000, max_seq_len=32)
    dm.setup("fit")
    V = dm.model_overrides()["vocab_size"]
    pre = xlnet(V)
    state = {f"model.{k}": v for k, v in pre.state_dict().items()}
    good = tmp_path / "good.ckpt"
    torch.save({"state_dict": state, "genlab": {"data_identity": {"tokenizer": dm.identity()["tokenizer"]}}}, good)
    task = make_task(xlnet(V), init_from=str(good))
    torch.testing.assert_close(task.backbone.transformer.word_embedding.weight, pre.transformer.word_embedding.weight)
    trainer(1).fit(task, dm)  # same tokenizer: fine
    bad = tmp_path / "bad.ckpt"
    torch.save({"state_dict": state, "genlab": {"data_identity": {"tokenizer": "0123456789abcdef"}}}, bad)
    with pytest.raises(CheckpointError, match="data.tokenizer"):
        trainer(1).fit(make_task(xlnet(V), init_from=str(bad)), dm)
    with pytest.raises(CheckpointError, match="does not match the model config"):
        make_task(xlnet(V + 1), init_from=str(good))


@pytest.mark.parametrize("pretrained_transform", [True, False])
def test_init_from_bert_checkpoint_with_or_without_the_mlm_transform(tmp_path, pretrained_transform):
    """Finetuning never reads BERT's MLM head, so its optional transform (model.mlm_transform) may differ; any other
    missing weight is still an error."""
    kw = dict(vocab_size=50, n_layer=1, d_model=32, n_head=2, d_inner=64, max_position=16)
    pre = BertForPretraining(**kw, mlm_transform=pretrained_transform)
    state = {f"model.{k}": v for k, v in pre.state_dict().items()}
    ckpt = tmp_path / "bert.ckpt"
    torch.save({"state_dict": state}, ckpt)
    task = make_task(BertForPretraining(**kw, mlm_transform=not pretrained_transform), init_from=str(ckpt))
    torch.testing.assert_close(task.backbone.bert.encoder.state_dict(), pre.bert.encoder.state_dict())
    del state["model.bert.pooler.dense.bias"]
    torch.save({"state_dict": state}, ckpt)
    with pytest.raises(CheckpointError, match="pooler.dense.bias"):
        make_task(BertForPretraining(**kw), init_from=str(ckpt))


def test_layerwise_learning_rate_decay_groups():
    task = make_task(xlnet(50), lr=1e-3, layer_decay=0.5)
    opt = task.configure_optimizers()["optimizer"]
    lr_of = {id(p): g["initial_lr"] for g in opt.param_groups for p in g["params"]}
    b = task.backbone.transformer
    assert lr_of[id(b.layer[1].ff.layer_1.weight)] == pytest.approx(1e-3)
    assert lr_of[id(b.layer[0].ff.layer_1.weight)] == pytest.approx(5e-4)
    assert lr_of[id(task.head.proj.weight)] == pytest.approx(1e-3)
    decay_of = {id(p): g["weight_decay"] for g in opt.param_groups for p in g["params"]}
    assert decay_of[id(b.layer[0].ff.layer_norm.weight)] == 0.0


def test_init_from_hf_folder_checks_architecture(tmp_path):
    from genlab.interop.hf_xlnet import save_hf_checkpoint

    pre = XLNetLMHeadModel(50, n_layer=2, d_model=64, n_head=4, d_head=16, d_inner=128, ff_activation="gelu")
    save_hf_checkpoint(pre, tmp_path)
    task = make_task(XLNetLMHeadModel(50, n_layer=2, d_model=64, n_head=4, d_head=16, d_inner=128,
                                      ff_activation="gelu"), init_from=str(tmp_path))
    torch.testing.assert_close(task.backbone.transformer.layer[1].ff.layer_2.weight, pre.transformer.layer[1].ff.layer_2.weight)
    with pytest.raises(CheckpointError, match=r"ff_activation: checkpoint 'gelu', config 'gelu_tanh'.*: model.ff_activation=gelu$"):
        make_task(xlnet(50), init_from=str(tmp_path))  # gelu_tanh model vs an erf-GELU checkpoint
