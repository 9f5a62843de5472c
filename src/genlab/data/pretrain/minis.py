"""Offline pretraining corpora in the plain-text pretraining format, from the Wikipedia excerpt in the gensim wheel:
``pretrain_mini``, ``pretrain_mini_heldout`` (without the cloze finetuning minis' dev/test sentences, so
pretrain-then-finetune never reads a test answer), ``race_mini_tapt`` (task-adaptive text for RACE) and
``funnel_wiki_mini`` (the Funnel-Transformer real-data mini, docs/systems/funnel.md: paragraphs of at
least 20 words, the last 10 articles held out)."""

from __future__ import annotations

from pathlib import Path

from genlab.data.finetune.minis import squad_cloze_data
from genlab.data.finetune.race_mini import race_cloze_articles
from genlab.data.sources.tiers import DatasetSpec
from genlab.data.text.sentences import split_sentences
from genlab.data.text.wiki_excerpt import iter_articles
from genlab.utils import atomic_write

MINI_TRAIN_SHARDS = 8
MINI_FILES = tuple(f"train/wiki_{k:02d}.txt" for k in range(MINI_TRAIN_SHARDS)) + ("valid/wiki_00.txt",)


def build_pretrain_mini(root: Path, drop: frozenset[str] = frozenset()) -> None:
    """Every 20th article goes to valid, the rest round-robin over the train shards; one sentence per line; the
    sentences in ``drop`` are left out."""
    docs: dict[str, list[str]] = {f: [] for f in MINI_FILES}
    for k, art in enumerate(iter_articles()):
        lines = [s for para in art.paragraphs() for s in split_sentences(para) if s not in drop]
        if not lines:
            continue
        name = MINI_FILES[-1] if k % 20 == 19 else MINI_FILES[k % MINI_TRAIN_SHARDS]
        docs[name].append("\n".join(lines) + "\n")
    for name, texts in docs.items():
        with atomic_write(root / name, "w") as f:
            f.write("\n".join(texts))


def cloze_eval_sentences() -> frozenset[str]:
    """Every sentence of the cloze RACE mini's dev and test articles and of the cloze SQuAD minis' dev paragraphs.
    Those minis blank words of these very sentences, and they come from the same excerpt as ``pretrain_mini``."""
    texts = [obj["article"] for _, split, obj in race_cloze_articles() if split != "train"]
    texts += [p["context"] for art in squad_cloze_data(with_impossible=False)[1] for p in art["paragraphs"]]
    return frozenset(s for text in texts for s in split_sentences(text))


PRETRAIN_MINI = DatasetSpec(
    name="pretrain_mini", files=MINI_FILES, build_mini=build_pretrain_mini, mini_version="1",
    notes="106 Wikipedia articles from the gensim test data, BooksCorpus/Wikipedia plain-text format",
)
# For pretrain-then-finetune on the cloze minis: a model pretrained on pretrain_mini has read their test answers.
PRETRAIN_MINI_HELDOUT = DatasetSpec(
    name="pretrain_mini_heldout", files=MINI_FILES, mini_version="1",
    build_mini=lambda root: build_pretrain_mini(root, drop=cloze_eval_sentences()),
    notes="pretrain_mini without the sentences of the cloze RACE/SQuAD minis' dev and test texts",
)
RACE_TAPT_FILE = "train/race_mini_train.txt"


def build_race_mini_tapt(root: Path) -> None:
    """``pretrain_mini_heldout`` plus one shard of the cloze RACE mini's training articles, each followed by its
    questions (blank ``_``; no options, no answers): task-adaptive pretraining text. An article holding a sentence of
    another cloze mini's dev or test text is left out, so the corpus stays held out for every cloze mini."""
    drop = cloze_eval_sentences()
    build_pretrain_mini(root, drop)
    docs = []
    for _, split, obj in race_cloze_articles():
        sentences = split_sentences(obj["article"])
        if split == "train" and drop.isdisjoint(sentences):
            docs.append("\n".join(sentences + obj["questions"]) + "\n")
    with atomic_write(root / RACE_TAPT_FILE, "w") as f:
        f.write("\n".join(docs))


RACE_MINI_TAPT = DatasetSpec(
    name="race_mini_tapt", files=(*MINI_FILES, RACE_TAPT_FILE), build_mini=build_race_mini_tapt, mini_version="1",
    notes="pretrain_mini_heldout + the cloze RACE mini's training articles with their questions (no answers)",
)
FUNNEL_MIN_WORDS, FUNNEL_HELDOUT_ARTICLES = 20, 10


def build_funnel_wiki_mini(root: Path) -> None:
    """The Funnel-Transformer real-data mini: every paragraph of >= 20 words (lists, tables and templates are already
    gone), one sentence per line, an empty line between articles; the last 10 articles in file order are the valid
    shard, the others go round-robin over the train shards."""
    articles = list(iter_articles())
    docs: dict[str, list[str]] = {f: [] for f in MINI_FILES}
    for k, art in enumerate(articles):
        lines = [s for para in art.paragraphs() if len(para.split()) >= FUNNEL_MIN_WORDS for s in split_sentences(para)]
        if not lines:
            continue
        name = MINI_FILES[-1] if k >= len(articles) - FUNNEL_HELDOUT_ARTICLES else MINI_FILES[k % MINI_TRAIN_SHARDS]
        docs[name].append("\n".join(lines) + "\n")
    for name, texts in docs.items():
        with atomic_write(root / name, "w") as f:
            f.write("\n".join(texts))


FUNNEL_WIKI_MINI = DatasetSpec(
    name="funnel_wiki_mini", files=MINI_FILES, build_mini=build_funnel_wiki_mini, mini_version="1",
    notes="the gensim Wikipedia excerpt, paragraphs of >= 20 words, last 10 articles held out (Funnel mini)",
)
MINI_CORPORA = {spec.name: spec for spec in (PRETRAIN_MINI, PRETRAIN_MINI_HELDOUT, RACE_MINI_TAPT, FUNNEL_WIKI_MINI)}
