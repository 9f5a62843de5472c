"""Wikipedia excerpt: markup stripping rules, text8 cleaning rules, and the shipped file itself."""

import importlib.util

import pytest

from genlab.data.lm.minis import ptb_tokenize, text8_clean, wikitext_tokenize
from genlab.data.text.wiki_excerpt import iter_articles, strip_markup

WIKI = """{{Infobox person|name=X|note={{nested|deep}}}}
'''Ada Lovelace''' was an [[England|English]] [[mathematician]]<ref name="a">Cite {{cite|x}}</ref> and writer.<ref>Ref.</ref> <!-- hidden
comment --> She worked on the [http://example.org Analytical Engine] design.
[[File:Ada.png|thumb|A portrait of [[Ada Lovelace|Ada]]]]
{| class="wikitable"
| cell || {{x}}
|}
* a list item that is dropped
== Early life ==
Her father was &quot;Lord&quot; [[Byron]] in [[1815]].
=== Empty ===
== References ==
Some reference prose that is skipped entirely.
[[Category:Mathematicians]]
[[de:Ada Lovelace]]"""


def test_strip_markup_keeps_prose_and_headings_only():
    blocks = strip_markup(WIKI)
    assert blocks == [
        (0, "Ada Lovelace was an English mathematician and writer. She worked on the Analytical Engine design."),
        (2, "Early life"),
        (0, 'Her father was "Lord" Byron in 1815.'),
    ]


def test_strip_markup_is_deterministic():
    assert strip_markup(WIKI) == strip_markup(WIKI)


def test_wikitext_and_ptb_tokenisers():
    text = "The 1,000 self-governed towns (in 3.5 km) weren't Ada's."
    assert wikitext_tokenize(text) == [
        "The", "1", "@,@", "000", "self", "@-@", "governed", "towns", "(", "in", "3", "@.@", "5", "km", ")",
        "were", "n't", "Ada", "'s", ".",
    ]
    assert ptb_tokenize(text) == ["the", "N", "self-governed", "towns", "in", "N", "km", "were", "n't", "ada", "'s"]


def test_text8_cleaning_rules():
    xml = (
        b"<page><title>R</title><text xml:space=\"preserve\">#REDIRECT [[Elsewhere]]</text></page>\n"
        b"<page><title>A</title>\n<text xml:space=\"preserve\">'''Anarchy''' in 1842 &amp;lt;ref&amp;gt;x&amp;lt;/ref&amp;gt;"
        b" see [[Political philosophy|politics]] [[Category:Isms]]\n"
        b"{{Template}} [http://a.org Site] [[fr:Anarchie]] caf&amp;eacute; [[Image:a.png|thumb|The caption]]</text>\n"
        b"outside text\n</page>"
    )
    assert text8_clean(xml) == (
        " anarchy in one eight four two see politics isms site caf the caption"
    )


@pytest.mark.skipif(importlib.util.find_spec("gensim") is None, reason="needs gensim's Wikipedia excerpt")
def test_shipped_excerpt_articles():
    arts = list(iter_articles())
    assert len(arts) == 105  # 106 full articles in the file; one has no prose paragraph left
    assert arts[0].title == "Anarchism" and len({a.title for a in arts}) == len(arts)
    words = sum(len(p.split()) for a in arts for p in a.paragraphs())
    assert 350_000 < words < 500_000
    text = " ".join(p for a in arts for p in a.paragraphs())
    for markup in ("{{", "}}", "[[", "]]", "<ref", "'''", "&quot;", "|}"):
        assert markup not in text
