"""GDAN's tagger-based answer extraction (Yang's thesis §3.2.5 "Answer Extraction"): the NER-label and POS-grammar mapping
to the SQuAD answer types, on hand-made tags and through a real spaCy pipeline (a blank English one whose tags and
entities come from rulers configured here: the trained English pipeline is not on PyPI)."""

from __future__ import annotations

import pytest
import spacy

from genlab.data.qa.answers import SQUAD_TYPE_PERCENT, Answer
from genlab.data.qa.tagged_answers import NER_TYPES, SpacyExtractor, Tagged, tagged_chunks
from genlab.errors import ConfigError

TEXT = "Anna Berg , who founded the small firm , won the war in 1850 and was very happy ."
TAGS = ["NNP", "NNP", ",", "WP", "VBD", "DT", "JJ", "NN", ",", "VBD", "DT", "NN", "IN", "CD", "CC", "VBD", "RB", "JJ",
        "."]
WANT = {("Anna Berg", "Person"), ("1850", "Date"), ("small firm", "Common Noun Phrase"), ("war", "Common Noun Phrase"),
        ("won the war", "Verb Phrase"), ("very happy", "Adjective Phrase"), ("who founded the small firm", "Clause"),
        ("founded the small firm", "Verb Phrase")}


def tokens(text: str, tags: list[str]) -> list[Tagged]:
    out, pos = [], 0
    for word, tag in zip(text.split(" "), tags, strict=True):
        out.append(Tagged(pos, pos + len(word), tag))
        pos += len(word) + 1
    return out


def test_ner_labels_and_phrase_grammar_map_to_squad_answer_types():
    assert set(NER_TYPES.values()) <= set(SQUAD_TYPE_PERCENT)
    ents = [(0, 9, "PERSON"), (TEXT.index("1850"), TEXT.index("1850") + 4, "DATE"), (0, 4, "NOT_A_LABEL")]
    got = tagged_chunks(TEXT, tokens(TEXT, TAGS), ents)
    assert all(TEXT[a.start:a.start + len(a.text)] == a.text for a in got)
    assert {(a.text, a.type) for a in got} == WANT
    # a number the NER missed is still "Other Numeric"; entity tokens never enter a phrase
    got = tagged_chunks(TEXT, tokens(TEXT, TAGS), [])
    assert Answer("1850", TEXT.index("1850"), "Other Numeric") in got and ("Anna Berg", "Person") not in got


def test_spacy_extractor_reads_a_real_pipeline_and_names_a_missing_model():
    nlp = spacy.blank("en")
    ruler = nlp.add_pipe("attribute_ruler")
    for word, tag in zip(TEXT.split(" "), TAGS, strict=True):
        ruler.add([[{"ORTH": word}]], {"TAG": tag})
    nlp.add_pipe("entity_ruler").add_patterns([{"label": "PERSON", "pattern": "Anna Berg"},
                                               {"label": "DATE", "pattern": "1850"}])
    got = SpacyExtractor(nlp=nlp)(TEXT)
    assert {(a.text, a.type) for a in got} == WANT
    with pytest.raises(ConfigError, match="data.spacy_model=no_such_pipeline"):
        SpacyExtractor("no_such_pipeline")
