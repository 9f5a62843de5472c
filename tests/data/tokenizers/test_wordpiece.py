"""WordPiece of a BERT checkpoint equals Hugging Face's tokenizers (fast and the pure-Python legacy one); the
checkpoint-tokenizer loader picks SentencePiece or WordPiece from a path and reads the checkpoint's settings."""

from __future__ import annotations

import json
import sys

import pytest

from genlab.data.tokenizers.from_checkpoint import (
    load_tokenizer,
    recorded_tokenizer,
    special_ids,
    tokenizer_file,
)
from genlab.data.tokenizers.wordpiece import WordPieceTokenizer
from genlab.data.tokenizers.xlnet_pieces import PieceTokenizer, train_tokenizer
from genlab.errors import DataError

transformers = pytest.importorskip("transformers", reason="transformers (test dependency) is not installed")

SPECIAL = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["the", "The", "hello", "Hello", "world", "cafe", "café", "naive", "naïve", "un", "##believ", "##able",
         "play", "##ing", "##s", "'", ",", ".", "!", "?", "@", "-", "don", "t", "stop", "now", "中", "文",
         "ceo", "CEO", "ang", "##strom", "Å", "##ng", "##str", "##öm", "x", "##y", "##z", "foo", "1", "##9", "##0"]
SENTENCES = [
    "Hello, world! The café's naïve CEO.",
    "unbelievable playing... plays?",
    "Ångström 中文字 ☃ xyz@foo",
    "Don't stop [MASK] now -- 1990!",
    "  tabs\tand\nnew\u00a0lines\u200b ",
    "CAFÉ NAÏVE Hello " + "x" * 120,
]


@pytest.fixture(scope="module")
def vocab_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bert_vocab")
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    tokens = SPECIAL + WORDS + letters + ["##" + c for c in letters]
    (folder / "vocab.txt").write_text("\n".join(dict.fromkeys(tokens)) + "\n", encoding="utf-8")
    return folder


@pytest.mark.parametrize("settings", [dict(do_lower_case=True), dict(do_lower_case=False),
                                      dict(do_lower_case=True, strip_accents=False)],
                         ids=["uncased", "cased", "lower-keep-accents"])
def test_equals_hf_bert_tokenizers(tmp_path, vocab_dir, settings):
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

    vocab = tmp_path / "vocab.txt"  # a checkpoint folder: vocab.txt + tokenizer_config.json
    vocab.write_bytes((vocab_dir / "vocab.txt").read_bytes())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer", **settings}))
    ours = load_tokenizer(tmp_path)
    assert isinstance(ours, WordPieceTokenizer)
    fast = transformers.BertTokenizerFast.from_pretrained(tmp_path, local_files_only=True)
    slow = BertTokenizerLegacy(vocab_file=str(vocab), **settings)  # the pure-Python reference implementation
    for text in SENTENCES:
        ids = ours.encode(text)
        assert ids == fast(text, add_special_tokens=False)["input_ids"], text
        assert ids == slow(text, add_special_tokens=False)["input_ids"], text
    assert ours.unk_id in ours.encode(SENTENCES[2])  # ☃ is not in the vocabulary
    assert ours.encode("[MASK]") == [ours.mask_id]
    assert (ours.cls_id, ours.sep_id, ours.pad_id) == (3, 4, 0)
    assert ours.vocab_size == len(vocab.read_text(encoding="utf-8").splitlines())


def test_settings_come_from_tokenizer_config(tmp_path, vocab_dir):
    (tmp_path / "vocab.txt").write_bytes((vocab_dir / "vocab.txt").read_bytes())
    uncased = WordPieceTokenizer(tmp_path / "vocab.txt")  # no config: Hugging Face's default lower-cases
    assert uncased.lower and uncased.encode_pieces("Hello") == ["hello"]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False,
                                                                "cls_token": {"content": "[CLS]"}}))
    cased = WordPieceTokenizer(tmp_path / "vocab.txt")
    assert not cased.lower and cased.encode_pieces("Hello") == ["Hello"]
    assert cased.identity != uncased.identity  # same vocab, different normalisation: a different tokenizer
    assert load_tokenizer(tmp_path).identity == cased.identity


def test_bad_vocab_and_missing_library(tmp_path, monkeypatch):
    (tmp_path / "vocab.txt").write_text("a\nb\n")
    with pytest.raises(DataError, match=r"lacks the special tokens \['\[UNK\]'"):
        WordPieceTokenizer(tmp_path / "vocab.txt")
    with pytest.raises(DataError, match="does not exist"):
        WordPieceTokenizer(tmp_path / "nope.txt")
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(DataError, match="pip install 'tokenizers"):
        WordPieceTokenizer(tmp_path / "vocab.txt")


def test_load_tokenizer_dispatches_on_the_checkpoint_files(tmp_path, vocab_dir):
    text = tmp_path / "text.txt"
    text.write_text("\n".join(f"sentence number {i} about the {w} of the world." for i in range(300)
                              for w in ("cat", "dog", "city")), encoding="utf-8")
    xl = tmp_path / "xlnet"
    xl.mkdir()
    train_tokenizer([text], xl / "spiece", vocab_size=120)
    sp = load_tokenizer(xl)
    assert isinstance(sp, PieceTokenizer) and special_ids(sp) == {}
    assert sp.identity == load_tokenizer(xl / "spiece.model").identity and tokenizer_file(xl) == xl / "spiece.model"
    (xl / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    assert not sp.lower and load_tokenizer(xl).lower and load_tokenizer(xl / "spiece.model").lower  # config decides

    wp = load_tokenizer(vocab_dir)
    assert isinstance(wp, WordPieceTokenizer)
    assert special_ids(wp) == {"cls_id": 3, "sep_id": 4, "pad_id": 0}
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="no tokenizer there"):
        load_tokenizer(empty)
    assert tokenizer_file(empty) is None


def test_tokenizer_json_saved_by_transformers_gives_the_same_tokenizer(tmp_path, vocab_dir):
    """transformers >= 5 saves tokenizer.json (no vocab.txt): same ids, same identity as the vocab.txt folder."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "vocab.txt").write_bytes((vocab_dir / "vocab.txt").read_bytes())
    (src / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    saved = tmp_path / "saved"
    transformers.BertTokenizerFast.from_pretrained(src, local_files_only=True).save_pretrained(saved)
    (saved / "vocab.txt").unlink(missing_ok=True)
    from_json, from_txt = load_tokenizer(saved), load_tokenizer(src)
    assert from_json.vocab_file.name == "tokenizer.json"
    assert from_json.identity == from_txt.identity and not from_json.lower
    for text in SENTENCES:
        assert from_json.encode(text) == from_txt.encode(text)
    (saved / "tokenizer_config.json").unlink()  # settings then come from the tokenizer.json normaliser
    assert load_tokenizer(saved).identity == from_txt.identity

    unigram = tmp_path / "unigram"
    unigram.mkdir()
    (unigram / "tokenizer.json").write_text(json.dumps({"model": {"type": "Unigram", "vocab": []}}))
    with pytest.raises(DataError, match="holds a Unigram tokenizer"):
        load_tokenizer(unigram)


def test_genlab_checkpoint_stands_for_the_tokenizer_its_run_recorded(tmp_path, vocab_dir):
    import torch

    ckpt = tmp_path / "pretrain.ckpt"
    torch.save({"genlab": {"config": {"data": {"tokenizer": str(vocab_dir), "lower": False}}}}, ckpt)
    assert load_tokenizer(ckpt).identity == load_tokenizer(vocab_dir).identity
    torch.save({"genlab": {"config": {"data": {"tokenizer": None}}}}, ckpt)
    with pytest.raises(DataError, match="trained its own SentencePiece"):
        load_tokenizer(ckpt)
    # a run that trained its own SentencePiece keeps a copy in its folder (<run>/checkpoints/x.ckpt)
    (tmp_path / "checkpoints").mkdir()
    ckpt = ckpt.rename(tmp_path / "checkpoints" / "last.ckpt")
    (tmp_path / "spiece.model").write_bytes(b"")
    assert recorded_tokenizer(ckpt) == (str(tmp_path / "spiece.model"), False)
