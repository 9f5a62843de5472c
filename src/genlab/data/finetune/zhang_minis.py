"""Offline minis of the six Zhang et al. (2015) CSV sets, each in its real archive's layout: headerless
``train.csv`` / ``test.csv`` with every field quoted, newlines written as a literal backslash-n, 1-based classes,
the real column sets (Yelp ``class,text``; Amazon ``class,title,text``; DBpedia ``class,title,content``; AG News
``class,title,description``), ``classes.txt`` where the real archive has one (DBpedia, AG News) and a
``readme.txt`` that says where the mini's text and labels come from. Classes are balanced in both splits.

* ``yelp2`` / ``amazon2`` — the 200 real 20-Newsgroups posts of the IMDB mini with their **human** labels (the
  newsgroup: alt.atheism -> 1, sci.space -> 2, as negative/positive), headers and newsgroup names removed. Each mini
  holds out a different 30 % of every group (IMDB mini: posts 0-2 of every 10 per group, Yelp-2: 3-5, Amazon-2:
  6-8), 140 train / 60 test. Amazon's title is the post's ``Subject:`` line (empty if it names a newsgroup).
* ``dbpedia`` — GENERATED labels, class = article of origin: the 14 excerpt articles with the most prose paragraphs
  under a section heading; an example is such a paragraph (its leading sentences, up to 60 words) titled with its
  section heading; 50 per class (every 5th to test): 560 train / 140 test.
* ``ag_news`` — GENERATED labels, class = a hand-made topic group of four to six articles (:data:`AG_GROUPS`:
  countries, United States, science, thought), as AG's classes are news topics; description = up to 2 leading
  sentences (45 words) of a paragraph, title = its section heading; 150 per class, round-robin over the group's
  articles, every 5th to test: 480 train / 120 test.
* ``yelp5`` / ``amazon5`` — GENERATED ordinal labels, a stand-in for star ratings: a "review" is 4 sentences of
  6-18 words drawn from two articles (:data:`STAR_ARTICLES`), shuffled; stars = 1 + how many come from the first
  article. Each article's sentences are split 80/20 before drawing, so no test sentence is seen in training.
  Amazon's title is the review's first sentence. 100 train / 20 test per class: 500 / 100.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from genlab.data.finetune.glue_minis import wiki_sentences
from genlab.data.finetune.minis import newsgroup_posts, newsgroup_subjects
from genlab.data.sources.tiers import DatasetSpec
from genlab.data.text.sentences import split_sentences
from genlab.data.text.wiki_excerpt import excerpt_articles

N_STARS_SENTENCES = 4
DBPEDIA_PER_CLASS, AG_PER_CLASS, STARS_TRAIN, STARS_TEST = 50, 150, 100, 20
# AG News class index -> (name written to classes.txt, articles of the excerpt). AG's own classes are World, Sports,
# Business, Sci/Tech; the excerpt has no sports or business articles, so the groups are the four topics it covers.
AG_GROUPS = {
    1: ("Countries", ("Albania", "Algeria", "Azerbaijan", "Afghanistan", "Angola", "Andorra")),
    2: ("United States", ("Alabama", "Alaska", "Abraham Lincoln", "American Revolutionary War")),
    3: ("Science", ("Amphibian", "Alkali metal", "Alkane", "Analysis of variance", "Algorithm")),
    4: ("Thought", ("Aristotle", "Anthropology", "Anarchism", "Alchemy", "Arthur Schopenhauer")),
}
STAR_ARTICLES = {"yelp5": ("Amphibian", "Albania"), "amazon5": ("Aristotle", "Alaska")}
HOLDOUT_TENTHS = {"yelp2": (3, 4, 5), "amazon2": (6, 7, 8)}  # the IMDB mini holds out 0, 1, 2


def write_zhang_csv(path: Path, rows: Iterable[tuple]) -> None:
    """Rows (class, field, ...) as the real files store them: all fields quoted, no header, \\n escaped."""
    with open(path, "w", encoding="utf-8", newline="") as f:
        out = csv.writer(f, quoting=csv.QUOTE_ALL, lineterminator="\n")
        for cls, *fields in rows:
            out.writerow([str(cls)] + [x.replace("\n", "\\n") for x in fields])


def _write_mini(root: Path, train: list[tuple], test: list[tuple], readme: str,
                classes: list[str] | None = None) -> None:
    write_zhang_csv(root / "train.csv", train)
    write_zhang_csv(root / "test.csv", test)
    (root / "readme.txt").write_text(readme, encoding="utf-8")
    if classes is not None:
        (root / "classes.txt").write_text("".join(c + "\n" for c in classes), encoding="utf-8")


# ------------------------------------------------------------------------------------------------ human labels
def build_newsgroup_csv(root: Path, name: str) -> None:
    """Yelp-2 (class,text) or Amazon-2 (class,title,text) from the newsgroup posts, human labels."""
    bodies, labels, names = newsgroup_posts()
    subjects = newsgroup_subjects()
    count = {0: 0, 1: 0}
    train, test = [], []
    for body, subject, y in zip(bodies, subjects, labels):
        held_out = count[y] % 10 in HOLDOUT_TENTHS[name]
        count[y] += 1
        title = "" if any(n in subject for n in names) else subject
        row = (y + 1, body) if name == "yelp2" else (y + 1, title, body)
        (test if held_out else train).append(row)
    _write_mini(root, train, test, f"{name} mini in the Zhang et al. CSV layout: real 20-Newsgroups posts (gensim "
                f"mini_newsgroup), HUMAN labels = the newsgroup: 1 = {names[0]}, 2 = {names[1]}.\n")


# ------------------------------------------------------------------------------------------------ generated labels
def section_paragraphs(max_words: int, max_sentences: int) -> dict[str, list[tuple[str, str]]]:
    """Article title -> (section heading, leading sentences of a paragraph) for every prose paragraph under a
    heading: whole sentences while they fit in ``max_words`` (at least one), at most ``max_sentences``."""
    out: dict[str, list[tuple[str, str]]] = {}
    for art in excerpt_articles():
        heading, items = None, []
        for level, text in art.blocks:
            if level:
                heading = text
                continue
            if heading is None or len(text.split()) < 20:  # the lead has no heading; skip stubs
                continue
            kept: list[str] = []
            for s in split_sentences(text)[:max_sentences]:
                if kept and len(" ".join(kept + [s]).split()) > max_words:
                    break
                kept.append(s)
            items.append((heading, " ".join(kept)))
        out[art.title] = items
    return out


def dbpedia_classes() -> list[str]:
    """The 14 articles with the most headed prose paragraphs (ties: file order)."""
    paras = section_paragraphs(60, 10)
    return sorted(paras, key=lambda t: -len(paras[t]))[:14]


def build_dbpedia(root: Path) -> None:
    paras = section_paragraphs(60, 10)
    classes = dbpedia_classes()
    train, test = [], []
    for c, title in enumerate(classes, start=1):
        for i, (heading, text) in enumerate(paras[title][:DBPEDIA_PER_CLASS]):
            (test if i % 5 == 4 else train).append((c, heading, text))
    _write_mini(root, train, test, "dbpedia mini in the Zhang et al. CSV layout: paragraphs of the gensim Wikipedia "
                "excerpt, GENERATED labels = article of origin (classes.txt); title = section heading.\n", classes)


def build_ag_news(root: Path) -> None:
    paras = section_paragraphs(45, 2)
    train, test = [], []
    for c, (_, articles) in AG_GROUPS.items():
        pools = [paras[a] for a in articles]
        picked = [p[i] for i in range(max(map(len, pools))) for p in pools if i < len(p)][:AG_PER_CLASS]
        if len(picked) < AG_PER_CLASS:
            raise RuntimeError(f"AG mini group {c} has only {len(picked)} paragraphs")
        for i, (heading, text) in enumerate(picked):
            (test if i % 5 == 4 else train).append((c, heading, text))
    names = [n for n, _ in AG_GROUPS.values()]
    _write_mini(root, train, test, "ag_news mini in the Zhang et al. CSV layout: paragraphs of the gensim Wikipedia "
                "excerpt, GENERATED labels = group of the article of origin (classes.txt; groups in "
                "genlab.data.finetune.zhang_minis.AG_GROUPS); title = section heading.\n", names)


def _article_sentences(title: str) -> list[str]:

    sentences, by_article = wiki_sentences()
    k = next(i for i, a in enumerate(excerpt_articles()) if a.title == title)
    return [sentences[i][1] for i in by_article[k]]


def star_reviews(first: str, second: str, per_class: int, split: str, seed: int) -> list[tuple[int, list[str]]]:
    """(stars, sentences): ``stars - 1`` sentences of ``first`` and the rest of the 4 from ``second``, shuffled.
    ``split`` picks each article's held-out fifth of sentences (test) or the rest (train)."""
    rng = np.random.default_rng(seed)
    pools = [[s for i, s in enumerate(_article_sentences(a)) if (i % 5 == 0) == (split == "test")]
             for a in (first, second)]
    out = []
    for stars in range(1, 6):
        for _ in range(per_class):
            n_first = stars - 1
            chosen = ([pools[0][i] for i in rng.choice(len(pools[0]), n_first, replace=False)]
                      + [pools[1][i] for i in rng.choice(len(pools[1]), N_STARS_SENTENCES - n_first, replace=False)])
            out.append((stars, [chosen[i] for i in rng.permutation(len(chosen))]))
    return out


def build_stars(root: Path, name: str) -> None:
    first, second = STAR_ARTICLES[name]
    rows = {}
    for split, n, seed in (("train", STARS_TRAIN, 0), ("test", STARS_TEST, 1)):
        reviews = star_reviews(first, second, n, split, seed)
        rows[split] = [(s, " ".join(sents)) if name == "yelp5" else (s, sents[0], " ".join(sents[1:]))
                       for s, sents in reviews]
    _write_mini(root, rows["train"], rows["test"], f"{name} mini in the Zhang et al. CSV layout: sentences of the "
                f"gensim Wikipedia excerpt, GENERATED ordinal labels: a review is {N_STARS_SENTENCES} shuffled "
                f"sentences, class = 1 + the number taken from '{first}' (the rest from '{second}').\n")


def _spec(name: str, build, files: tuple[str, ...], notes: str) -> DatasetSpec:
    return DatasetSpec(f"{name}_mini", files, build_mini=build, notes=f"Zhang et al. CSV layout; {notes}")


CSV = ("train.csv", "test.csv", "readme.txt")
ZHANG_MINIS = {
    "yelp2": _spec("yelp2", lambda r: build_newsgroup_csv(r, "yelp2"), CSV, "newsgroup posts, human labels"),
    "amazon2": _spec("amazon2", lambda r: build_newsgroup_csv(r, "amazon2"), CSV, "newsgroup posts, human labels"),
    "dbpedia": _spec("dbpedia", build_dbpedia, CSV + ("classes.txt",), "GENERATED: article of origin"),
    "ag_news": _spec("ag_news", build_ag_news, CSV + ("classes.txt",), "GENERATED: group of the article of origin"),
    "yelp5": _spec("yelp5", lambda r: build_stars(r, "yelp5"), CSV, "GENERATED: 1 + sentences from one article"),
    "amazon5": _spec("amazon5", lambda r: build_stars(r, "amazon5"), CSV, "GENERATED: 1 + sentences from one article"),
}
