"""``task.init_from=<openai-gpt folder>`` finetunes a published-format checkpoint (HF ``OpenAIGPTLMHeadModel`` +
``vocab.json``/``merges.txt``) through the presets: the data reads the folder's BPE (``data.tokenizer`` follows
``task.init_from``), the weights load through genlab.interop.hf_gpt, and ``init_from_pretrained=false`` keeps the
tokenizer but not the weights (Table 5 "w/o pre-training")."""

from __future__ import annotations

import pytest
import torch

from genlab.assemble import build_data, build_task
from genlab.data.finetune.gpt_transforms import SpecialTokens

transformers = pytest.importorskip("transformers")
SIZES = ["model.n_layer=2", "model.n_embd=32", "model.n_head=4", "model.n_inner=128", "model.n_positions=64",
         "data.max_seq_len=64"]


@pytest.fixture
def openai_gpt_folder(tmp_path):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    text = [f"the film number {i} is a {w} story and it is {w} ." for i in range(100) for w in ("good", "bad")]
    tok = Tokenizer(models.BPE(unk_token="<unk>", end_of_word_suffix="</w>"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=120, special_tokens=["<unk>"],
                                                      end_of_word_suffix="</w>"))
    folder = tmp_path / "openai-gpt"
    folder.mkdir()
    tok.model.save(str(folder))
    torch.manual_seed(0)
    cfg = transformers.OpenAIGPTConfig(vocab_size=tok.get_vocab_size(), n_positions=64, n_embd=32, n_layer=2,
                                       n_head=4)
    transformers.OpenAIGPTLMHeadModel(cfg).save_pretrained(folder)
    return folder


def build(compose_cfg, tmp_path, *overrides):
    cfg = compose_cfg(["experiment=gpt_sst2_mini", f"paths.cache_dir={tmp_path / 'cache'}", *SIZES, *overrides])
    dm = build_data(cfg.data)
    return dm, build_task(cfg, dm)


def test_published_checkpoint_finetunes_with_its_own_bpe_and_weights(compose_cfg, tmp_path, openai_gpt_folder):
    dm, task = build(compose_cfg, tmp_path, f"task.init_from={openai_gpt_folder}")
    hf = transformers.OpenAIGPTLMHeadModel.from_pretrained(openai_gpt_folder)
    assert dm.tokenizer.vocab_size == hf.config.vocab_size
    sp = SpecialTokens.after_vocab(hf.config.vocab_size)
    assert task.model.special_ids == [sp.start, sp.delimiter, sp.extract]
    ours = task.model.transformer
    assert torch.equal(ours.tokens_embed.weight[: hf.config.vocab_size], hf.transformer.tokens_embed.weight)
    assert torch.equal(ours.h[1].mlp.c_fc.weight, hf.transformer.h[1].mlp.c_fc.weight.T)  # Conv1D (in, out)
    first = dm.splits["train"][0]["tokens"]
    assert first[0] == sp.start and first[-1] == sp.extract and max(first[1:-1]) < hf.config.vocab_size

    _, scratch = build(compose_cfg, tmp_path, f"task.init_from={openai_gpt_folder}", "task.init_from_pretrained=false")
    assert not torch.equal(scratch.model.transformer.h[1].mlp.c_fc.weight, hf.transformer.h[1].mlp.c_fc.weight.T)
    assert scratch.model.vocab_size == hf.config.vocab_size  # same tokenizer, random weights
