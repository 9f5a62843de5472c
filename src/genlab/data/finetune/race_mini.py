"""Offline cloze RACE mini (CONTRIBUTING: mini tier) in RACE's folder/JSON layout, labels GENERATED (not human).

Article = a Wikipedia paragraph of 150-400 characters from the gensim excerpt (short enough that the presets'
192-piece window keeps it whole next to the question for most questions). Questions, two kinds of RACE cloze item:

* word: up to ``per_article`` of its sentences, each with its longest word blanked; options = that word + 3 answers of
  other word questions of the same split with the same capitalisation;
* completion: its last sentence of 8-25 words cut in half, ``first half _``; options = that second half + 3 second
  halves of other articles' sentences of the same split.

Distractors never occur in the article and are drawn from the split's own answers, so an option's form (length,
pieces, frequency, capitalisation) says nothing about whether it is right (v5 drew them from all long words, and
"the option with the fewest pieces" answered 42 % of its test questions); a reader that checks the filled-in
sentence against the article answers every question. Several questions per file, as in real RACE.
Splits are held out by article (every 10th paragraph to dev, the next to test, with all their questions); answer
letters cycle A-D within each split, so each split is balanced; articles under ``middle_chars`` go to ``middle``,
longer ones to ``high``.
"""

from __future__ import annotations

import json
from pathlib import Path

from genlab.data.finetune.minis import cloze_questions
from genlab.data.sources.tiers import DatasetSpec
from genlab.data.text.sentences import split_sentences
from genlab.data.text.wiki_excerpt import excerpt_articles

LETTERS = "ABCD"


def _split_of(i: int) -> str:
    return "dev" if i % 10 == 0 else "test" if i % 10 == 1 else "train"


def _distractors(pools: list[list[str]], start: int, article: str, n: int = 3) -> list[str]:
    """``n`` distinct words that do not occur in the article, taken from each pool in turn (from position ``start`` on,
    wrapping) until there are ``n``: the later pools only fill in when the first is too small (tiny builds)."""
    lower, out = article.lower(), []
    for pool in pools:
        for j in range(len(pool)):
            word = pool[(start + j) % len(pool)]
            if word.lower() not in lower and word.lower() not in (o.lower() for o in out):
                out.append(word)
                if len(out) == n:
                    return out
    return out


def completion_cloze(paragraph: str, max_words: int = 25) -> tuple[str, str] | None:
    """(question, answer) for the paragraph's last sentence of 8-``max_words`` words: its first half followed by
    ``_``, answer = the second half (RACE's "complete the sentence" items)."""
    for sentence in reversed(split_sentences(paragraph)):
        words = sentence.split()
        if 8 <= len(words) <= max_words:
            half = len(words) // 2
            return " ".join(words[:half]) + " _", " ".join(words[half:])
    return None


def _kind(answer: str) -> str | bool:
    """Distractor pool of an answer: completions apart, words by capitalisation."""
    return "completion" if " " in answer else answer[0].isupper()


def race_cloze_articles(min_chars: int = 150, max_chars: int = 400, per_article: int = 3,
                        n_paragraphs: int | None = None) -> list[tuple[int, str, dict]]:
    """(paragraph index, split, RACE JSON object without ``id``) per article that yields at least one question."""
    paras = [p for a in excerpt_articles() for p in a.paragraphs() if min_chars < len(p) < max_chars][:n_paragraphs]
    # word clozes (RACE keeps the LAST qa pieces, so long questions would lose the blank) + one completion each
    questions = {i: [(q, a) for q, a, _ in cloze_questions(p, max_words=25)[:per_article]]
                    + [c for c in [completion_cloze(p)] if c] for i, p in enumerate(paras)}
    # distractor pools: the split's answers by kind (word: by capitalisation, which must not give the answer away)
    pools: dict = {}
    for i, qs in questions.items():
        for _, a in qs:
            pools.setdefault((_split_of(i), _kind(a)), set()).add(a)
    pools = {key: sorted(words) for key, words in pools.items()}
    asked = {"train": 0, "dev": 0, "test": 0}  # questions so far per split: the answer letter cycles A-D
    out = []
    for i, para in enumerate(paras):
        if not questions[i]:
            continue
        split = _split_of(i)
        obj: dict = {"article": para, "questions": [], "options": [], "answers": []}
        for question, answer in questions[i]:
            k = asked[split] % 4
            asked[split] += 1
            first = pools[split, _kind(answer)]  # a word answer falls back on the other capitalisation
            rest = [] if _kind(answer) == "completion" else [pools.get((split, not _kind(answer)), [])]
            others = _distractors([first, *rest], 37 * (i * (per_article + 1) + len(obj["questions"])), para)
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


RACE_MINI = DatasetSpec("race_cloze_mini", ("README.mini",), build_mini=build_race_mini, mini_version="6",
                        notes="RACE layout, cloze questions GENERATED from the gensim Wikipedia excerpt")
