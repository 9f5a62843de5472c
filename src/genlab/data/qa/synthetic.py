"""Synthetic SQuAD-format fixture for GDAN's unit tests: deterministic facts about invented
people, cities, organisations, years and occupations, rendered as sentences; questions ask for one slot; the
unlabelled paragraphs carry the slot spans as gold answers (with their SQuAD types). Years exercise the digits->0
normalisation and the offset mapping back to the original text. Written in the same files as the real data
(``train-v1.1.json``, ``dev-v1.1.json``, ``unlabeled.jsonl``), so the same reader and protocol run on it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from genlab.data.qa.answers import Answer, UnlabeledParagraph, write_unlabeled
from genlab.data.sources.tiers import DatasetSpec

FIRST = [
    "Anna", "Boris", "Carla", "Dmitri", "Elena", "Farid", "Greta", "Hugo", "Irene", "Jonas", "Kira", "Lars", "Mona",
    "Nils", "Olga", "Pavel", "Rosa", "Sven", "Tara", "Umar", "Vera", "Walt", "Xenia", "Yuri", "Zora"
]
LAST = [
    "Berg", "Costa", "Dahl", "Eriksen", "Falk", "Gruber", "Holm", "Ivanov", "Jensen", "Kovac", "Lund", "Moreau",
    "Novak", "Orlov", "Petit"
]
CITIES = [
    "Oslo", "Lyon", "Porto", "Graz", "Turku", "Brno", "Cork", "Split", "Bergen", "Aarhus", "Ghent", "Malmo",
    "Lille", "Basel", "Krakow", "Tartu", "Riga", "Lodz", "Varna", "Pisa", "Bari", "Nice", "Tours", "Leiden",
    "Delft", "Uppsala", "Odense", "Salzburg", "Linz", "Bremen"
]
ORGS = [f"{a} {b}" for a in ("Nordic", "Alpine", "Baltic", "Iberian", "Danube", "Atlantic") for b in
        ("Mining", "Press", "Textiles", "Railways", "Bank")]
JOBS = [
    "painter", "baker", "sailor", "teacher", "engineer", "architect", "surgeon", "lawyer", "chemist", "farmer",
    "pilot", "composer", "printer", "weaver", "jeweller", "astronomer", "botanist", "glassblower", "miller",
    "tailor"
]
FILLER = ["The weather that year was unusually mild .", "Many records from the period were later lost .",
          "Local newspapers reported the story at length .", "Little else is known about the early years ."]


def _fact(rng: np.random.Generator) -> tuple[str, list[tuple[str, str, str]], list[tuple[str, str]]]:
    """(sentence, [(question, answer, type)], [(slot text, type)]) for one random fact."""
    person = f"{FIRST[rng.integers(len(FIRST))]} {LAST[rng.integers(len(LAST))]}"
    city, org = CITIES[rng.integers(len(CITIES))], ORGS[rng.integers(len(ORGS))]
    year, job = str(int(rng.integers(1800, 2001))), JOBS[rng.integers(len(JOBS))]
    kind = int(rng.integers(4))
    if kind == 0:
        return (f"{person} was born in {city} in {year} .",
                [(f"Where was {person} born ?", city, "Location"), (f"When was {person} born ?", year, "Date")],
                [(city, "Location"), (year, "Date")])
    if kind == 1:
        return (f"{person} founded {org} in {city} .",
                [(f"Who founded {org} ?", person, "Person"), (f"Where did {person} found {org} ?", city, "Location")],
                [(person, "Person"), (city, "Location")])
    if kind == 2:
        return (f"{org} is headquartered in {city} .", [(f"Where is {org} headquartered ?", city, "Location")],
                [(city, "Location")])
    return (f"{person} worked as a {job} .", [(f"What did {person} work as ?", job, "Common Noun Phrase")],
            [(job, "Common Noun Phrase")])


def synthetic_paragraph(rng: np.random.Generator) -> tuple[str, list[tuple[str, Answer]], list[Answer]]:
    """(context, [(question, answer)], gold chunks) with 3-6 facts and an optional filler sentence."""
    sentences, questions, chunks, pos = [], [], [], 0
    n_facts = int(rng.integers(3, 7))
    filler_at = int(rng.integers(n_facts + 1)) if rng.random() < 0.5 else -1
    for i in range(n_facts + 1):
        if i == filler_at:
            sentence, qs, slots = FILLER[rng.integers(len(FILLER))], [], []
        elif i == n_facts:
            continue
        else:
            sentence, qs, slots = _fact(rng)
        for question, text, kind in qs:
            questions.append((question, Answer(text, pos + sentence.index(text), kind)))
        chunks += [Answer(text, pos + sentence.index(text), kind) for text, kind in slots]
        sentences.append(sentence)
        pos += len(sentence) + 1
    return " ".join(sentences), questions, chunks


def _squad_file(rng: np.random.Generator, n_articles: int, name: str, paras_per_article: int = 4) -> dict:
    data = []
    for a in range(n_articles):
        paragraphs = []
        for p in range(paras_per_article):
            context, qs, _ = synthetic_paragraph(rng)
            paragraphs.append({"context": context, "qas": [
                {"id": f"{name}{a}-{p}-{k}", "question": q, "answers": [{"text": ans.text, "answer_start": ans.start}]}
                for k, (q, ans) in enumerate(qs)]})
        data.append({"title": f"{name}-article-{a}", "paragraphs": paragraphs})
    return {"version": "1.1", "data": data}


def build_synthetic(root: Path, seed: int = 0, train_articles: int = 60, dev_articles: int = 10,
                    unlabeled_paragraphs: int = 600) -> None:
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    (root / "train-v1.1.json").write_text(json.dumps(_squad_file(rng, train_articles, "train")), encoding="utf-8")
    (root / "dev-v1.1.json").write_text(json.dumps(_squad_file(rng, dev_articles, "dev")), encoding="utf-8")
    rows = []
    for i in range(unlabeled_paragraphs):
        context, _, chunks = synthetic_paragraph(rng)
        rows.append(UnlabeledParagraph(f"u{i}", context, chunks))
    write_unlabeled(root / "unlabeled.jsonl", rows)


GDAN_SYNTHETIC_MINI = DatasetSpec("gdan_synthetic_mini", ("train-v1.1.json", "dev-v1.1.json", "unlabeled.jsonl"),
                                  build_mini=build_synthetic, mini_version="1",
                                  notes="synthetic facts and template questions (unit-test fixture)")
