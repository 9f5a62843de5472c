"""Detokenisers of the LM benchmarks on hand-written symbol lists."""

import pytest

from genlab.data.lm import detokenize as D
from genlab.errors import DataError


def test_wikitext_joins_numbers_hyphens_and_punctuation():
    symbols = ("The 1 @,@ 000 @-@ year old ( see 3 @.@ 5 ) ship 's bow , he said : it is n't ok . <eos> "
               "= Title = <eos>").split()
    assert D.detokenize_wikitext(symbols) == "The 1,000-year old (see 3.5) ship's bow, he said: it isn't ok.\n= Title =\n"


def test_word_lines_and_ptb_characters():
    assert D.detokenize_word_lines("the n cents <eos> a".split()) == "the n cents\na"
    assert D.detokenize_ptb_char("a _ b c <eos> d".split()) == "a bc\nd"


def test_enwik8_bytes_are_utf8_and_a_cut_character_is_replaced():
    euro = [str(b) for b in "€".encode()]  # three bytes
    assert D.detokenize_enwik8(["72", "105", "10", *euro]) == "Hi\n€"
    assert D.detokenize_enwik8(["65", *euro[:2]]) == "A\ufffd"


def test_text8_underscore_is_a_space():
    assert D.detokenize_text8(list("the_cat_sat")) == "the cat sat"


def test_lm1b_one_sentence_per_line():
    assert D.detokenize_lm1b("<S> the cat sat . <S> a dog <S>".split()) == "the cat sat .\na dog"


def test_every_lm_benchmark_has_one_and_an_unknown_name_is_an_error():
    from genlab.data.lm.corpora import DATASETS

    assert set(DATASETS) <= set(D.DETOKENIZERS)
    with pytest.raises(DataError, match="no detokeniser"):
        D.detokenizer("imagenet")
