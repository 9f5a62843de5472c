"""Hub ids as ``task.init_from`` / ``data.tokenizer``, offline, against a cache laid out as huggingface_hub writes
it (``models--<owner>--<name>/{blobs, refs/<branch or tag>, snapshots/<commit>/<file> -> ../../blobs/<hash>}``)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from genlab.data.tokenizers.from_checkpoint import load_tokenizer
from genlab.errors import CheckpointError
from genlab.interop import hf_bert
from genlab.interop.hub import resolve
from genlab.models.bert import BertForPretraining
from genlab.tasks.finetune_base import load_pretrained

SHA = "0123456789abcdef0123456789abcdef01234567"
TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(35)]
DIMS = dict(n_layer=1, d_model=16, n_head=2, d_inner=32, max_position=16)


def write_hub_cache(root: Path, repo: str, files: dict[str, bytes], refs: tuple[str, ...] = ("main",)) -> Path:
    """The cache huggingface_hub's snapshot_download leaves: content-addressed blobs, symlinked snapshot files."""
    model = root / f"models--{repo.replace('/', '--')}"
    (model / "blobs").mkdir(parents=True)
    (model / "refs").mkdir()
    snapshot = model / "snapshots" / SHA
    snapshot.mkdir(parents=True)
    for name, data in files.items():
        blob = hashlib.sha256(data).hexdigest()
        (model / "blobs" / blob).write_bytes(data)
        (snapshot / name).symlink_to(Path("..", "..", "blobs", blob))
    for ref in refs:
        (model / "refs" / ref).write_text(SHA)
    return snapshot


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """An offline hub cache holding a tiny BERT (weights, config, WordPiece vocabulary)."""
    torch.manual_seed(0)
    published = BertForPretraining(len(TOKENS), **DIMS)
    folder = tmp_path / "export"
    hf_bert.save_hf_checkpoint(published, folder)
    files = {p.name: p.read_bytes() for p in folder.iterdir()}
    files["vocab.txt"] = ("\n".join(TOKENS) + "\n").encode()
    snapshot = write_hub_cache(tmp_path / "hub", "owner/tiny-bert", files, refs=("main", "v1"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("GENLAB_OFFLINE", "1")
    return published, snapshot


@pytest.mark.parametrize("switch", ["GENLAB_OFFLINE", "HF_HUB_OFFLINE"])
def test_hub_id_resolves_to_the_cached_snapshot_offline(hub, monkeypatch, switch):
    monkeypatch.delenv("GENLAB_OFFLINE")
    monkeypatch.setenv(switch, "1")
    _, snapshot = hub
    for value in ("owner/tiny-bert", "owner/tiny-bert@v1", f"owner/tiny-bert@{SHA}"):
        assert resolve(value) == snapshot
    with pytest.raises(CheckpointError, match=r"task.init_from=owner/absent: .*not in the hub cache and "
                                              r"HF_HUB_OFFLINE/GENLAB_OFFLINE forbids downloading"):
        resolve("owner/absent")
    with pytest.raises(CheckpointError, match=r"revision v2"):
        resolve("owner/tiny-bert@v2")


def test_init_from_hub_id_loads_the_weights_and_brings_the_tokenizer(hub):
    published, snapshot = hub
    model = BertForPretraining(len(TOKENS), **DIMS)
    identity, weights = load_pretrained(model, "owner/tiny-bert")
    for name, p in published.state_dict().items():
        assert torch.equal(model.state_dict()[name], p), name
    tokenizer = load_tokenizer("owner/tiny-bert")  # data.tokenizer=${task.init_from}: the same snapshot's vocabulary
    assert identity["tokenizer"] == tokenizer.identity and identity["tokenizer_source"] == str(snapshot / "vocab.txt")
    assert weights.source == str(snapshot)


def test_finetuning_presets_take_the_tokenizer_from_init_from(compose_cfg):
    for preset in ("bert_sst2_mini", "xlnet_sst2_mini", "funnel_sst2_mini", "bert_sst2"):  # the presets it changed
        cfg = compose_cfg([f"experiment={preset}", "task.init_from=owner/name@v1"])
        assert cfg.data.tokenizer == "owner/name@v1", preset
