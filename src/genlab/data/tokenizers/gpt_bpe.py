"""GPT-1 tokenizers (Radford et al. 2018, §4.1): a lower-cased BPE, either trained on the pretraining corpus or the
published ``openai-gpt`` vocabulary of a Hugging Face folder.

* **Trained (default): SentencePiece BPE**, ``vocab_size`` pieces (the paper: 40,000 merges = 40,478 types),
  NFKC + case folding inside the model (``nmt_nfkc_cf``), so training and encoding lower-case the same way and the
  ``.model`` file alone reproduces the tokenisation. Why SentencePiece: the platform already depends on it (XLNet,
  BERT, finetuning minis), its training is deterministic given a seed and one thread, one serialized file carries the
  vocabulary *and* the normalisation (its sha256 is the identity a checkpoint records), and it needs no
  language-specific pre-tokenizer (the release used spaCy, which the platform does not ship). Only ``<unk>`` (id 0,
  as the release) is reserved: GPT pretraining uses no separators, and the finetuning specials ``<s> $ <e>`` are new
  rows after the vocabulary (ids V, V+1, V+2), never pieces.
* **Published: the release's BPE** from an HF ``openai-gpt`` folder (``vocab.json`` + ``merges.txt``, 40,478 ids),
  through the ``tokenizers`` library as HF builds it (BERT-style lower-casing normaliser and punctuation
  pre-tokenizer, words end with ``</w>``), after the release's text standardisation (:func:`standardize`). The
  release split words with spaCy; the BERT pre-tokenizer differs on a few contractions (HF makes the same
  substitution when spaCy is absent).

Every tokenizer has ``encode(text) -> ids``, ``vocab_size``, ``identity`` (a fingerprint checkpoints record) and
``lower``; :func:`load_gpt_tokenizer` resolves ``data.tokenizer`` (a ``.model``, an HF folder, a pretraining run's
``.ckpt`` or run folder).
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from genlab import checkpoints
from genlab.data.tokenizers.sentencepiece import SentencePieceTokenizer
from genlab.errors import DataError

HF_VOCAB, HF_MERGES = "vocab.json", "merges.txt"
UNK = "<unk>"

# The release's standardisation (text_utils.text_standardize): dashes and ellipsis mapped to ASCII, a
# run of the listed punctuation set off by spaces, newlines kept as " \n ", other whitespace collapsed.
_ASCII = str.maketrans({"\u2014": "-", "\u2013": "-", "\u2015": "-", "\u00b4": "'"})
_PUNCT_RUN = re.compile(r"(-+|~+|!+|\"+|;+|\?+|\++|,+|\)+|\(+|\\+|/+|\*+|\[+|\]+|\}+|\{+|\|+|_+)")


def standardize(text: str) -> str:
    text = text.translate(_ASCII).replace("\u2026", "...")
    text = _PUNCT_RUN.sub(r" \1 ", text)
    text = re.sub(r"\s*\n\s*", " \n ", text)
    return re.sub(r"[^\S\n]+", " ", text).strip()


class GPTSentencePiece:
    """A lower-casing SentencePiece BPE model trained by :func:`train_gpt_bpe` (or any SentencePiece model)."""

    lower = True

    def __init__(self, model_file: str | os.PathLike):
        self.model_file = Path(model_file)
        if not self.model_file.is_file():
            raise DataError(f"GPT tokenizer {self.model_file} does not exist; set data.tokenizer= to a SentencePiece "
                            ".model, an HF openai-gpt folder or a GPT pretraining .ckpt, or null to train one.")
        self.sp = SentencePieceTokenizer(self.model_file)
        self.identity = self.sp.fingerprint()[:16]
        self.vocab_size = len(self.sp)

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(" ".join(text.split()))

    def decode(self, ids: list[int]) -> str:
        return self.sp.decode(ids)


class OpenAIBPE:
    """The release's BPE from an HF ``openai-gpt`` folder (``vocab.json`` + ``merges.txt``)."""

    lower = True

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        vocab, merges = self.folder / HF_VOCAB, self.folder / HF_MERGES
        try:
            from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers
            from tokenizers.models import BPE
        except ImportError as err:
            raise DataError("the published GPT vocabulary needs the 'tokenizers' package: pip install "
                            "'genlab[interop]'.") from err
        try:
            model = BPE.from_file(str(vocab), str(merges), unk_token=UNK, end_of_word_suffix="</w>")
        except Exception as err:
            raise DataError(f"{self.folder}: cannot read {HF_VOCAB} / {HF_MERGES} as a BPE vocabulary ({err}); "
                            "restore the checkpoint's files.") from err
        self.tok = Tokenizer(model)
        self.tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        self.tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        self.tok.decoder = decoders.BPEDecoder(suffix="</w>")
        self.identity = hashlib.sha256(vocab.read_bytes() + merges.read_bytes()).hexdigest()[:16]
        self.vocab_size = self.tok.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(standardize(text)).ids

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(list(ids))


GPTTokenizer = GPTSentencePiece | OpenAIBPE


def train_gpt_bpe(files: list[Path], model_file: Path, vocab_size: int, max_sentences: int = 1_000_000
                  ) -> GPTSentencePiece:
    """Train the lower-cased SentencePiece BPE on ``files`` (one sentence per line) and write ``model_file``."""
    SentencePieceTokenizer.train(
        files, model_file, vocab_size, "bpe", character_coverage=0.9999, unk_id=0, bos_id=-1, eos_id=-1, pad_id=-1,
        normalization_rule_name="nmt_nfkc_cf", input_sentence_size=max_sentences, shuffle_input_sentence=True,
        hard_vocab_limit=False,
    )
    return GPTSentencePiece(model_file)


def _in_folder(folder: Path) -> GPTTokenizer | None:
    if (folder / HF_VOCAB).is_file() and (folder / HF_MERGES).is_file():
        return OpenAIBPE(folder)
    from genlab.data.tokenizers.from_checkpoint import RUN_TOKENIZER

    models = [folder / RUN_TOKENIZER] if (folder / RUN_TOKENIZER).is_file() else sorted(folder.glob("*.model"))
    return GPTSentencePiece(models[0]) if len(models) == 1 else None


def load_gpt_tokenizer(path: str | os.PathLike) -> GPTTokenizer:
    """``data.tokenizer`` for GPT: a SentencePiece ``.model``; an HF ``openai-gpt`` folder (``vocab.json`` +
    ``merges.txt``); a genlab GPT pretraining ``.ckpt`` (the tokenizer its run recorded: its ``data.tokenizer``, else
    the ``spiece.model`` copy in its run folder); or such a run folder; or a hub id (genlab.interop.hub)."""
    from genlab.interop.hub import resolve

    p = resolve(path, key="data.tokenizer")
    if p.suffix == ".ckpt" and checkpoints.exists(p):  # a file, or a folder of FSDP2 shards
        from genlab.data.tokenizers.from_checkpoint import recorded_tokenizer

        return load_gpt_tokenizer(recorded_tokenizer(p)[0])
    if p.is_dir():
        found = _in_folder(p)
        if found is not None:
            return found
    elif p.is_file() and p.suffix == ".model":
        return GPTSentencePiece(p)
    elif p.is_file() and p.name in (HF_VOCAB, HF_MERGES):
        return OpenAIBPE(p.parent)
    raise DataError(f"data.tokenizer={path}: no GPT tokenizer there; give a SentencePiece .model, an HF openai-gpt "
                    f"folder ({HF_VOCAB} + {HF_MERGES}), or a GPT pretraining .ckpt / run folder.")
