"""GPT tokenizers (Radford et al., 2018, §4.1): the trained lower-cased SentencePiece BPE, the published openai-gpt
BPE read from an HF folder (checked against transformers' OpenAIGPTTokenizer), the release's text standardisation and
how ``data.tokenizer`` is resolved."""

from __future__ import annotations

import pytest
import torch

from genlab.data.tokenizers.gpt_bpe import (
    GPTSentencePiece,
    OpenAIBPE,
    load_gpt_tokenizer,
    standardize,
    train_gpt_bpe,
)
from genlab.errors import DataError

TEXT = ["The River Town keeps an old boat house near the Green Road.",
        "A new bank finds the red boat; the town sees it, and walks on.",
        "Rivers and roads, towns and banks: everything keeps moving."] * 40


@pytest.fixture(scope="module")
def spm(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpt_bpe")
    (root / "text.txt").write_text("\n".join(TEXT), encoding="utf-8")
    return train_gpt_bpe([root / "text.txt"], root / "gpt.model", vocab_size=120)


def test_standardize_follows_the_release_rules():
    assert standardize("well\u2014so\u2026 fine") == "well - so... fine"
    assert standardize("a(b)c,  d!!\n\n e") == "a ( b ) c , d !! \n e"
    assert standardize("it\u00b4s") == "it's"


def test_trained_bpe_lower_cases_reserves_only_unk_and_is_identified_by_its_bytes(spm, tmp_path):
    assert spm.encode("The RIVER town") == spm.encode("the river town")
    assert spm.sp.id_to_piece(0) == "<unk>" and spm.sp.unk_id == 0
    assert not any(spm.sp.is_control(i) for i in range(spm.vocab_size))  # no <s>/</s>: specials are new rows
    proto = pytest.importorskip("sentencepiece.sentencepiece_model_pb2").ModelProto()
    proto.ParseFromString(spm.model_file.read_bytes())
    assert proto.trainer_spec.model_type == proto.trainer_spec.BPE and proto.normalizer_spec.name == "nmt_nfkc_cf"
    again = GPTSentencePiece(spm.model_file)
    assert again.identity == spm.identity
    assert spm.sp.decode(spm.encode("the old boat")) == "the old boat"


def test_published_bpe_matches_transformers_openai_gpt_tokenizer(tmp_path):
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>", end_of_word_suffix="</w>"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(TEXT, trainers.BpeTrainer(vocab_size=150, special_tokens=["<unk>"],
                                                      end_of_word_suffix="</w>"))
    folder = tmp_path / "openai-gpt"
    folder.mkdir()
    tok.model.save(str(folder))  # vocab.json + merges.txt, the files of an HF openai-gpt folder
    ours = load_gpt_tokenizer(folder)
    assert isinstance(ours, OpenAIBPE) and ours.vocab_size == tok.get_vocab_size()
    hf = transformers.OpenAIGPTTokenizer.from_pretrained(str(folder))
    for text in ("The river keeps the boats, and the towns walk.", "Roads and banks: green RED old."):
        assert ours.encode(text) == hf.encode(text)
    assert ours.encode("zzqx")[0] == tok.token_to_id("<unk>")


def test_data_tokenizer_resolves_model_file_folder_and_pretraining_checkpoint(spm, tmp_path):
    assert load_gpt_tokenizer(spm.model_file).identity == spm.identity
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "spiece.model").write_bytes(spm.model_file.read_bytes())  # train.py keeps the run's tokenizer there
    assert load_gpt_tokenizer(run).identity == spm.identity
    ckpt = run / "checkpoints" / "last.ckpt"
    torch.save({"genlab": {"config": {"data": {"tokenizer": None}}}}, ckpt)
    assert load_gpt_tokenizer(ckpt).identity == spm.identity
    with pytest.raises(DataError, match="no GPT tokenizer there"):
        load_gpt_tokenizer(tmp_path / "nothing")
