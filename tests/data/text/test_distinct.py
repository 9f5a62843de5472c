from genlab.data.text.distinct import first_occurrences, text_digest


def test_each_distinct_text_once_in_first_occurrence_order_surrogates_included():
    texts = ["b", "a", "b", "\ud800x", "a", "c", "\ud800x"]
    assert list(first_occurrences(iter(texts))) == list(dict.fromkeys(texts))
    assert len(text_digest("a")) == 16 and text_digest("a") != text_digest("b")
