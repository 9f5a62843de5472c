"""Offline cloze RACE mini (CONTRIBUTING: mini tier) in RACE's folder/JSON layout, labels GENERATED (not human).

Article = a Wikipedia paragraph of 150-400 characters from the gensim excerpt (short enough that the presets'
192-piece window keeps it whole next to the question for 93-98 % of the questions); questions = up to
``per_article`` of its sentences, each with its longest word blanked; options = that word + 3 long words from OTHER
paragraphs (none occurring in the article), so a reader that checks the options against the article answers every
question. Several questions per file, as in real RACE.
Splits are held out by article (every 10th paragraph to dev, the next to test, with all their questions); answer
letters cycle A-D within each split, so each split is balanced; articles under ``middle_chars`` go to ``middle``,
longer ones to ``high``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from genlab.data.sources import DatasetSpec

LETTERS = "ABCD"


def _split_of(i: int) -> str:
    return "dev" if i % 10 == 0 else "test" if i % 10 == 1 else "train"


def _distractors(pool: list[str], start: int, article: str, n: int = 3) -> list[str]:
    """``n`` pool words from position ``start`` on (wrapping) that do not occur in the article."""
    lower, out = article.lower(), []
    for j in range(len(pool)):
        word = pool[(start + j) % len(pool)]
        if word.lower() not in lower:
            out.append(word)
            if len(out) == n:
                break
    return out


def race_cloze_articles(min_chars: int = 150, max_chars: int = 400, per_article: int = 3,
                        n_paragraphs: int | None = None) -> list[tuple[int, str, dict]]:
    """(paragraph index, split, RACE JSON object without ``id``) per article that yields at least one question."""
    from genlab.data.finetune_minis import cloze_questions
    from genlab.data.wiki_excerpt import excerpt_articles

    paras = [p for a in excerpt_articles() for p in a.paragraphs() if min_chars < len(p) < max_chars][:n_paragraphs]
    pool = sorted({w for p in paras for w in re.findall(r"[A-Za-z]{7,}", p)})
    asked = {"train": 0, "dev": 0, "test": 0}  # questions so far per split: the answer letter cycles A-D
    out = []
    for i, para in enumerate(paras):
        clozes = cloze_questions(para, max_words=25)[:per_article]  # RACE keeps the LAST qa pieces: long ones lose the blank
        if not clozes:
            continue
        split = _split_of(i)
        obj: dict = {"article": para, "questions": [], "options": [], "answers": []}
        for question, answer, _ in clozes:
            k = asked[split] % 4
            asked[split] += 1
            others = _distractors(pool, (37 * (i * per_article + len(obj["questions"]))) % len(pool), para)
            obj["questions"].append(question)
            obj["options"].append(others[:k] + [answer] + others[k:])
            obj["answers"].append(LETTERS[k])
        out.append((i, split, obj))
    return out


def build_race_mini(root: Path, middle_chars: int = 300, **kwargs) -> None:
    for i, split, obj in race_cloze_articles(**kwargs):
        level = "middle" if len(obj["article"]) < middle_chars else "high"
        folder = root / split / level
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i}.txt").write_text(json.dumps(obj | {"id": f"{level}{i}.txt"}), encoding="utf-8")
    (root / "README.mini").write_text("Generated cloze RACE mini from the gensim Wikipedia excerpt; labels are "
                                      "generated, not human.\n", encoding="utf-8")


RACE_MINI = DatasetSpec("race_cloze_mini", ("README.mini",), build_mini=build_race_mini, mini_version="5",
                        notes="RACE layout, cloze questions GENERATED from the gensim Wikipedia excerpt")
