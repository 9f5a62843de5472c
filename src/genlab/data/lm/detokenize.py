"""Readable text from vocabulary symbols, one function per corpus format (the generated-text appendix of the
Transformer-XL seed prints samples as text, not as token lists).

Each function takes the symbols of ``Vocab.decode`` in order; :func:`detokenizer` picks the one of a benchmark.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from genlab.errors import DataError

# WikiText splits hyphens and separators inside numbers as " @-@ ", " @,@ ", " @.@ "
_WIKITEXT_JOINERS = re.compile(r" @([-,.])@ ")
_SPACE_BEFORE = re.compile(r" +([.,;:!?)\]}]|'s\b|'re\b|'ve\b|'m\b|'ll\b|'d\b|n't\b)")
_SPACE_AFTER = re.compile(r"([(\[{]) +")
_LINE_EDGES = re.compile(r" *\n *")


def _lines(symbols: Sequence[str], eos: str) -> str:
    """Space-joined words with ``eos`` as a newline and no spaces at the line edges."""
    text = " ".join("\n" if s == eos else s for s in symbols)
    return _LINE_EDGES.sub("\n", text)


def detokenize_wikitext(symbols: Sequence[str]) -> str:
    """WikiText: undo ``@-@`` / ``@,@`` / ``@.@`` and the spaces before punctuation and clitics; ``<eos>`` -> newline."""
    text = _WIKITEXT_JOINERS.sub(r"\1", _lines(symbols, "<eos>"))
    return _SPACE_AFTER.sub(r"\1", _SPACE_BEFORE.sub(r"\1", text))


def detokenize_word_lines(symbols: Sequence[str]) -> str:
    """Words with ``<eos>`` ending each line, kept as tokenised (PTB: lower-cased, no punctuation; the MoS 1B
    stream: lower-cased LM1B sentences): ``<eos>`` -> newline."""
    return _lines(symbols, "<eos>")


def detokenize_ptb_char(symbols: Sequence[str]) -> str:
    """PTB characters: ``_`` is the space between words, ``<eos>`` the end of a sentence."""
    return "".join("\n" if s == "<eos>" else " " if s == "_" else s for s in symbols)


def detokenize_enwik8(symbols: Sequence[str]) -> str:
    """enwik8: each symbol is a byte's decimal value; the bytes are UTF-8 (a cut multi-byte character -> U+FFFD)."""
    return bytes(int(s) for s in symbols).decode("utf-8", errors="replace")


def detokenize_text8(symbols: Sequence[str]) -> str:
    """text8: the letters a-z with ``_`` for the space."""
    return "".join(symbols).replace("_", " ")


def detokenize_lm1b(symbols: Sequence[str]) -> str:
    """One Billion Word: space-separated tokens, ``<S>`` between sentences -> one sentence per line."""
    return _lines(symbols, "<S>").strip("\n")


DETOKENIZERS: dict[str, Callable[[Sequence[str]], str]] = {
    "wikitext103": detokenize_wikitext,
    "wikitext2": detokenize_wikitext,
    "ptb": detokenize_word_lines,
    "ptb_char": detokenize_ptb_char,
    "enwik8": detokenize_enwik8,
    "text8": detokenize_text8,
    "lm1b": detokenize_lm1b,
    "lm1b_mos": detokenize_word_lines,
}


def detokenizer(dataset: str) -> Callable[[Sequence[str]], str]:
    """The detokeniser of benchmark ``dataset`` (a ``data.dataset`` name of the LM corpora)."""
    if dataset not in DETOKENIZERS:
        raise DataError(f"no detokeniser for the dataset {dataset!r}; known: {', '.join(DETOKENIZERS)}.")
    return DETOKENIZERS[dataset]
