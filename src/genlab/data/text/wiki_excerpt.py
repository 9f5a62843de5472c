"""The real Wikipedia MediaWiki XML excerpt shipped inside the gensim wheel, read without importing gensim.

It is the same kind of file as enwik8 (106 full articles, 6,089,746 bytes of XML). :func:`iter_articles` streams
it and strips the wiki markup of every article into headings and plain-text paragraphs, deterministically, for
the offline minis of the word- and character-level benchmarks.
"""

from __future__ import annotations

import bz2
import html
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from genlab.data.sources.tiers import package_file

EXCERPT_PACKAGE = "gensim"
EXCERPT_FILE = "test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
EXCERPT_SHA256 = "a53f4648dec40467ebdcbc7a1307eddb51fe6e28e9309f6ebde81ba0d04bea2d"

# sections whose body is lists, citations and links rather than prose
SKIP_SECTIONS = frozenset(
    {"references", "external links", "see also", "further reading", "notes", "bibliography", "sources",
     "footnotes", "citations", "notes and references", "works cited", "gallery", "discography", "filmography"}
)
# links to files, categories, project pages and other languages, which are not article text
_NON_ARTICLE_LINK = re.compile(
    r"^\s*:?\s*(file|image|category|media|wikipedia|wp|template|help|portal|[a-z]{2,3}(-[a-z]+)?)\s*:", re.I
)


@dataclass(frozen=True)
class Article:
    """A main-namespace article: ``blocks`` are (level, text); level 0 is a paragraph, level k >= 2 a heading."""

    title: str
    blocks: tuple[tuple[int, str], ...]

    def paragraphs(self) -> list[str]:
        return [t for lvl, t in self.blocks if lvl == 0]


def excerpt_path() -> Path:
    """The excerpt file, located through the installed gensim package and checked against its sha256."""
    return package_file(EXCERPT_PACKAGE, EXCERPT_FILE, EXCERPT_SHA256)


def excerpt_bytes() -> bytes:
    """The decompressed XML, byte for byte (the raw input of the enwik8 and text8 minis)."""
    with bz2.open(excerpt_path(), "rb") as f:
        return f.read()


def iter_pages(path: Path | None = None) -> Iterator[tuple[str, int, str]]:
    """Stream (title, namespace, wikitext) of every page, keeping memory flat."""
    with bz2.open(path or excerpt_path(), "rb") as f:
        title, ns, text = "", 0, ""
        for _event, elem in ET.iterparse(f, events=("end",)):
            tag = elem.tag.rsplit("}", 1)[-1]
            if tag == "title":
                title = elem.text or ""
            elif tag == "ns":
                ns = int(elem.text or 0)
            elif tag == "text":
                text = elem.text or ""
            elif tag == "page":
                yield title, ns, text
                title, ns, text = "", 0, ""
                elem.clear()


def iter_articles(path: Path | None = None) -> Iterator[Article]:
    """Main-namespace, non-redirect pages with their markup stripped, in file order."""
    for title, ns, text in iter_pages(path):
        if ns != 0 or text.lstrip()[:9].upper() == "#REDIRECT":
            continue
        blocks = strip_markup(text)
        if any(lvl == 0 for lvl, _ in blocks):
            yield Article(title, tuple(blocks))


@lru_cache(maxsize=1)
def excerpt_articles() -> tuple[Article, ...]:
    """All articles of the shipped excerpt, parsed once per process (several minis read them)."""
    return tuple(iter_articles())


# ------------------------------------------------------------------------------------------------ markup
def _remove_nested(text: str, pattern: re.Pattern) -> str:
    """Remove innermost matches until none is left (templates and tables nest)."""
    while True:
        new = pattern.sub("", text)
        if new == text:
            return text
        text = new


_TEMPLATE = re.compile(r"\{\{[^{}]*\}\}")
_TABLE = re.compile(r"\{\|(?:(?!\{\|)[\s\S])*?\|\}")
_COMMENT = re.compile(r"<!--[\s\S]*?(?:-->|$)")
_REF = re.compile(r"<ref[^>/]*/>|<ref[^>]*>[\s\S]*?</ref\s*>", re.I)
_DROP_TAGS = re.compile(
    r"<(math|gallery|timeline|score|syntaxhighlight|source|pre|code|imagemap|chem|hiero)\b[^>]*>[\s\S]*?</\1\s*>", re.I
)
_TAG = re.compile(r"</?[a-zA-Z][^>]*>")
_LINK = re.compile(r"\[\[([^\[\]]*)\]\]")
_EXT_LINK = re.compile(r"\[(?:https?:|ftp:)?//[^\s\]]*\s*([^\]]*)\]")
_BARE_URL = re.compile(r"https?://\S+")
_HEADING = re.compile(r"^(={2,6})\s*(.*?)\s*\1\s*$")
_QUOTES = re.compile(r"'{2,}")
_UNBALANCED = re.compile(r"\{\{.*$|\}\}")  # a template left open by braces inside it: cut to the line end
_SPACES = re.compile(r"[ \t\u00a0]+")


def _link(match: re.Match) -> str:
    inner = match.group(1)
    if _NON_ARTICLE_LINK.match(inner):
        return ""
    return inner.rsplit("|", 1)[-1] if "|" in inner else inner


def _clean_inline(text: str) -> str:
    prev = None
    while prev != text:  # innermost links first, so file captions with links collapse before the file link goes
        prev, text = text, _LINK.sub(_link, text)
    text = _EXT_LINK.sub(lambda m: m.group(1), text)
    text = _BARE_URL.sub("", text)
    text = _TAG.sub("", text)
    text = _QUOTES.sub("", text)
    text = html.unescape(text).replace("[", "").replace("]", "")
    return _SPACES.sub(" ", text).strip()


def strip_markup(wikitext: str) -> list[tuple[int, str]]:
    """Headings (level = number of '=') and prose paragraphs of one article; lists, tables and templates dropped."""
    text = _COMMENT.sub("", wikitext)
    text = _REF.sub("", text)
    text = _DROP_TAGS.sub("", text)
    text = _remove_nested(text, _TEMPLATE)
    text = _remove_nested(text, _TABLE)
    text = _LINK.sub(lambda m: "" if _NON_ARTICLE_LINK.match(m.group(1)) else m.group(0), text)
    blocks: list[tuple[int, str]] = []
    skipping = False
    for raw in text.split("\n"):
        line = raw.strip()
        heading = _HEADING.match(line)
        if heading:
            title = _clean_inline(heading.group(2))
            skipping = title.lower() in SKIP_SECTIONS
            if title and not skipping:
                blocks.append((len(heading.group(1)), title))
            continue
        if skipping or not line or line[0] in "*#:;|!{}=" or line.startswith("__"):
            continue
        para = _clean_inline(_UNBALANCED.sub("", line))
        if len(para.split()) >= 3:  # drop leftovers such as a lone caption word
            blocks.append((0, para))
    return _drop_empty_sections(blocks)


def _drop_empty_sections(blocks: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Keep a heading only if prose follows it before the next heading of the same or a higher rank."""
    prose = [False] * 8  # prose[k]: prose seen since the next heading of level <= k (scanning backwards)
    out = []
    for lvl, text in reversed(blocks):
        if lvl == 0:
            prose = [True] * 8
            out.append((lvl, text))
            continue
        if prose[lvl]:
            out.append((lvl, text))
        prose[lvl:] = [False] * (8 - lvl)
    return out[::-1]
