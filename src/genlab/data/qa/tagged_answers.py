"""Answer chunks from a real tagger's POS and NER tags (Yang thesis §3.2.5, "Answer Extraction"), mapped to the ten
SQuAD answer types (Rajpurkar et al. 2016, Table 2) that :func:`genlab.data.qa.answers.sample_answers` weights by.

The thesis tags paragraphs with the Stanford POS tagger and 7-class NER, then (a) keeps runs of one NER label as
entities -- Money and Percent become "Other Numeric", Organization "Other Entity" -- and (b) cuts noun, verb and
adjective phrases and clauses with a small constituency grammar over the POS tags. Here spaCy supplies the tags
(OntoNotes NER labels and Penn Treebank tags, the scheme of the Stanford tagger); :func:`tagged_chunks` is the
mapping and the grammar, written over plain (character span, tag) records so it does not depend on spaCy's types.

``SpacyExtractor("en_core_web_sm")`` needs ``pip install genlab[qa]`` and the English pipeline, which is not on PyPI;
the official wheel, pinned by version and hash (the hash published with the 3.8.0 release)::

    pip install "en_core_web_sm @ https://github.com/explosion/spacy-models/releases/download/en_core_web_sm-3.8.0/en_core_web_sm-3.8.0-py3-none-any.whl#sha256=1932429db727d4bff3deed6b34cfc05df17794f4a52eeb26cf8928f7c1a0fb85"

``model`` may also be the path of a pipeline directory (``nlp.to_disk``). Without it the offline
:class:`~genlab.data.qa.answers.HeuristicExtractor` stands in (``data.extractor=heuristic``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from genlab.data.qa.answers import Answer
from genlab.errors import ConfigError

# OntoNotes NER labels (spaCy's English pipelines) -> SQuAD answer types; the thesis' Stanford mapping extended to
# the labels Stanford's 7 classes lack (CARDINAL, QUANTITY, ORDINAL are numbers; NORP, EVENT, ... named things).
NER_TYPES = {
    "DATE": "Date", "TIME": "Date",
    "MONEY": "Other Numeric", "PERCENT": "Other Numeric", "QUANTITY": "Other Numeric", "CARDINAL": "Other Numeric",
    "ORDINAL": "Other Numeric",
    "PERSON": "Person",
    "GPE": "Location", "LOC": "Location", "FAC": "Location",
    "ORG": "Other Entity", "NORP": "Other Entity", "EVENT": "Other Entity", "WORK_OF_ART": "Other Entity",
    "LAW": "Other Entity", "LANGUAGE": "Other Entity", "PRODUCT": "Other Entity",
}

# One symbol per token from its Penn Treebank tag; the phrase grammar is regular expressions over the symbol string.
_SYMBOLS = {"DT": "D", "PDT": "D", "PRP$": "D", "JJ": "J", "JJR": "J", "JJS": "J", "NN": "N", "NNS": "N",
            "NNP": "P", "NNPS": "P", "VB": "V", "VBD": "V", "VBG": "V", "VBN": "V", "VBP": "V", "VBZ": "V", "MD": "M",
            "RB": "R", "RBR": "R", "RBS": "R", "CD": "C", "IN": "I", "TO": "I", "WDT": "W", "WP": "W", "WRB": "W",
            "CC": "&", "POS": "'"}
GRAMMAR = (
    ("Common Noun Phrase", re.compile(r"J*N+")),                  # adjectives + common nouns, determiner left out
    ("Adjective Phrase", re.compile(r"R?J+(?:&J+)?(?![JNP])")),   # "very large", "small and dark", not before a noun
    ("Verb Phrase", re.compile(r"V+R?(?:I?D?J*[NP]+)")),          # a verb and its object: "won the war"
    ("Clause", re.compile(r"W[^W,.:;]{2,12}")),                   # "which ...", "when ..." up to punctuation
)
MAX_PHRASE_TOKENS = 8


@dataclass(frozen=True)
class Tagged:
    """One token: character span in the paragraph and Penn Treebank tag."""
    start: int
    end: int
    tag: str


def _symbol(tag: str) -> str:
    return _SYMBOLS.get(tag, "." if tag in {",", ".", ":", "``", "''", "-LRB-", "-RRB-", "HYPH"} else "O")


def tagged_chunks(context: str, tokens: Sequence[Tagged], entities: Sequence[tuple[int, int, str]]) -> list[Answer]:
    """Candidate answers of one paragraph: every entity with a mapped NER label, then the grammar's phrases over
    the tokens outside entities, at most ``MAX_PHRASE_TOKENS`` long (spans of ``context``, sorted, distinct)."""
    found: dict[tuple[int, int], str] = {}
    in_entity = [False] * len(tokens)
    for start, end, label in entities:
        if label in NER_TYPES:
            found.setdefault((start, end), NER_TYPES[label])
        for i, t in enumerate(tokens):
            in_entity[i] |= t.start < end and start < t.end
    symbols = "".join("E" if e else _symbol(t.tag) for t, e in zip(tokens, in_entity))
    for kind, pattern in GRAMMAR:
        for m in pattern.finditer(symbols):
            if m.end() - m.start() <= MAX_PHRASE_TOKENS:
                found.setdefault((tokens[m.start()].start, tokens[m.end() - 1].end), kind)
    for m in re.finditer(r"C+", symbols):  # numbers the NER missed
        found.setdefault((tokens[m.start()].start, tokens[m.end() - 1].end), "Other Numeric")
    return [Answer(context[s:e], s, kind) for (s, e), kind in sorted(found.items()) if context[s:e].strip()]


class SpacyExtractor:
    """:func:`tagged_chunks` over a spaCy pipeline's ``Token.tag_`` and ``Doc.ents``. ``nlp`` (a loaded pipeline)
    wins over ``model`` (an installed package name or a pipeline directory)."""

    def __init__(self, model: str = "en_core_web_sm", nlp: Any = None) -> None:
        if nlp is None:
            nlp = load_pipeline(model)
        self.nlp = nlp

    def __call__(self, context: str) -> list[Answer]:
        doc = self.nlp(context)
        tokens = [Tagged(t.idx, t.idx + len(t.text), t.tag_) for t in doc]
        return tagged_chunks(context, tokens, [(e.start_char, e.end_char, e.label_) for e in doc.ents])


def load_pipeline(model: str) -> Any:
    """``spacy.load(model)``, with one message naming the key and the install command when it is missing."""
    try:
        import spacy
    except ImportError as err:
        raise ConfigError("data.extractor=spacy needs spaCy: pip install 'genlab[qa]' (or data.extractor=heuristic, "
                          "the offline fallback).") from err
    try:
        return spacy.load(model)
    except OSError as err:
        raise ConfigError(f"data.spacy_model={model}: no such spaCy pipeline is installed ({err}). Install the "
                          "official English one (not on PyPI; see genlab.data.qa.tagged_answers for the pinned, "
                          "hash-checked command), pass a pipeline directory, or use data.extractor=heuristic.") from err
