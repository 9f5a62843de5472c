"""The offline real-data mini of GDAN (docs/systems/gdan.md): real Wikipedia text from the excerpt shipped in gensim,
written as SQuAD v1.1 files plus unlabelled paragraphs in GDAN's JSONL, so the full-scale reader and protocol run.

* Paragraphs of >= 20 words from the 105 articles of genlab.data.text.wiki_excerpt, each cut to its first 100
  tokens for CPU (the thesis caps paragraphs at 850 words).
* Articles are shuffled with a fixed seed: 10 become the dev file, ~45 % of the remaining paragraphs (whole
  articles) the unlabelled set U -- article-disjoint from SQuAD's train/dev/test, as the thesis' U was drawn from
  Wikipedia articles outside SQuAD -- and the rest the training file (the data module holds 10 % of its articles
  out as test).
* Answers: the offline HeuristicExtractor's dates, numbers and entity runs. Questions are rule-made, **not human**
  ("cloze-to-wh"): the answer's sentence with the answer replaced by "when" / "how many" / "what" and "?"
  appended, dropped below 5 tokens. The training file keeps one question per paragraph (so the paper's labelling
  rate 0.1 gives ~200 labelled questions, a low-resource regime); dev keeps up to 300.
  U keeps 5 chunks per paragraph, type-weighted, from the same three types.

These questions resemble the Context baseline's pseudo-questions (both are the answer's local context), so the
mini tests the data path, the tags and "unlabelled data helps at a low labelling rate", not the thesis' effect
sizes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from genlab.data.qa.answers import (
    ENTITY,
    Answer,
    HeuristicExtractor,
    UnlabeledParagraph,
    sample_answers,
    write_unlabeled,
)
from genlab.data.sources.tiers import DatasetSpec
from genlab.data.text.sentences import split_sentences
from genlab.data.text.wiki_excerpt import excerpt_articles

MIN_WORDS, MAX_TOKENS = 20, 100
DEV_ARTICLES, DEV_QUESTIONS, UNLABELED_SHARE = 10, 300, 0.45
QUESTION_TYPES = ("Date", "Other Numeric", ENTITY)
WH = {"Date": "when", "Other Numeric": "how many", ENTITY: "what"}
_TOKEN = re.compile(r"\w+|[^\w\s]")


def cut_paragraph(text: str, max_tokens: int = MAX_TOKENS) -> str:
    """The paragraph up to the end of its ``max_tokens``-th token (an original prefix, so offsets stay valid)."""
    tokens = list(_TOKEN.finditer(text))
    return text if len(tokens) <= max_tokens else text[:tokens[max_tokens - 1].end()]


def cloze_to_wh(context: str, answer: Answer) -> str | None:
    """The answer's sentence with the answer replaced by its wh-word and "?" appended (None below 5 tokens)."""
    pos = 0
    for sentence in split_sentences(context):
        start = context.find(sentence, pos)
        pos = start + len(sentence)
        if start <= answer.start and answer.start + len(answer.text) <= pos:
            a = answer.start - start
            q = sentence[:a] + WH[answer.type] + sentence[a + len(answer.text):]
            q = q.rstrip(" .!?;:,") + " ?"
            return q if len(_TOKEN.findall(q)) >= 5 else None
    return None


def _questions(context: str, extractor: HeuristicExtractor) -> list[tuple[str, Answer]]:
    out = []
    for a in extractor(context):
        q = cloze_to_wh(context, a)
        if q is not None:
            out.append((q, a))
    return out


def _squad(articles: list[tuple[str, list[tuple[str, list[tuple[str, Answer]]]]]], name: str) -> dict:
    data = []
    for title, paras in articles:
        entries = [{"context": ctx, "qas": [{"id": f"{name}-{title}-{p}-{k}", "question": q,
                                             "answers": [{"text": a.text, "answer_start": a.start}]}
                                            for k, (q, a) in enumerate(qs)]}
                   for p, (ctx, qs) in enumerate(paras) if qs]
        if entries:
            data.append({"title": title, "paragraphs": entries})
    return {"version": "1.1", "data": data}


def build_wiki_mini(root: Path, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    extractor = HeuristicExtractor(QUESTION_TYPES)
    articles = []
    for art in excerpt_articles():
        paras = [cut_paragraph(p) for p in art.paragraphs() if len(p.split()) >= MIN_WORDS]
        if paras:
            articles.append((art.title, paras))
    order = rng.permutation(len(articles)).tolist()
    dev = [articles[i] for i in order[:DEV_ARTICLES]]
    rest = [articles[i] for i in order[DEV_ARTICLES:]]
    target, unl, train, covered = UNLABELED_SHARE * sum(len(p) for _, p in rest), [], [], 0
    for title, paras in rest:
        if covered < target:
            unl.append((title, paras))
            covered += len(paras)
        else:
            train.append((title, paras))

    train_out = []
    for title, paras in train:  # one question per paragraph
        chosen = []
        for ctx in paras:
            qs = _questions(ctx, extractor)
            chosen.append((ctx, [qs[int(rng.integers(len(qs)))]] if qs else []))
        train_out.append((title, chosen))
    dev_all = [(title, [(ctx, _questions(ctx, extractor)) for ctx in paras]) for title, paras in dev]
    flat = [(a, p, k) for a, (_, paras) in enumerate(dev_all) for p, (_, qs) in enumerate(paras)
            for k in range(len(qs))]
    keep = {flat[i] for i in rng.choice(len(flat), size=min(DEV_QUESTIONS, len(flat)), replace=False).tolist()}
    dev_out = [(title, [(ctx, [qa for k, qa in enumerate(qs) if (a, p, k) in keep]) for p, (ctx, qs) in
                        enumerate(paras)]) for a, (title, paras) in enumerate(dev_all)]

    (root / "train-v1.1.json").write_text(json.dumps(_squad(train_out, "train")), encoding="utf-8")
    (root / "dev-v1.1.json").write_text(json.dumps(_squad(dev_out, "dev")), encoding="utf-8")
    rows = []
    for title, paras in unl:
        for p, ctx in enumerate(paras):
            chosen = sample_answers(extractor(ctx), 5, rng)
            if chosen:
                rows.append(UnlabeledParagraph(f"{title}-{p}", ctx, chosen))
    write_unlabeled(root / "unlabeled.jsonl", rows)


GDAN_WIKI_MINI = DatasetSpec("gdan_wiki_mini", ("train-v1.1.json", "dev-v1.1.json", "unlabeled.jsonl"),
                             build_mini=build_wiki_mini, mini_version="1",
                             notes="SQuAD v1.1 layout + GDAN unlabelled JSONL from the gensim Wikipedia excerpt; "
                                   "questions GENERATED by rule (cloze-to-wh), not human")
