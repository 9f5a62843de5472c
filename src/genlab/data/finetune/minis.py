"""Offline finetuning minis written in the benchmarks' own formats (CONTRIBUTING: mini tier). The GLUE minis with
generated labels (CoLA, MRPC, QQP, STS-B, MNLI + AX, QNLI, RTE, WNLI) are in ``genlab.data.finetune.glue_minis``, the cloze
RACE mini in ``genlab.data.finetune.race_mini``.

* ``sst2_mini`` — SST-2 TSV layout from gensim's ``pang_lee_polarity.cor``: 200 real movie-review sentences with
  their **human** polarity labels (100 neg / 100 pos). Split deterministically (every 5th sentence of each class
  to dev, every 10th remaining one to the unlabelled test file).
* ``imdb_mini`` — IMDB ``aclImdb`` folder layout from gensim's ``mini_newsgroup`` (200 20-Newsgroups posts,
  alt.atheism vs sci.space). Labels are **human** (the newsgroup a post was sent to), mapped atheism -> ``neg``,
  space -> ``pos``; the header block (which names the newsgroup) is stripped so the label does not leak. The file
  is a zlib-compressed Python-2 pickle and is read with an allow-list unpickler (no arbitrary code).
"""

from __future__ import annotations

import copyreg
import json
import re
import zlib
from pathlib import Path
from typing import Any

from genlab.data.sources.tiers import DatasetSpec, package_file
from genlab.data.text.sentences import split_sentences
from genlab.data.text.wiki_excerpt import excerpt_articles
from genlab.errors import DataError

POLARITY = ("test/test_data/pang_lee_polarity.cor",
            "662c1b7c3bd0612eaaaf3f0c694cbd3897e30c0d87d2940b46c9fd0d15ed70c1")
NEWSGROUP = ("test/test_data/mini_newsgroup", "be0084ee9aded5eeefabea86bd23f0e5e3a743d9c1875aa1e47bc0728d6a5311")


def polarity_sentences() -> list[tuple[str, int]]:
    path = package_file("gensim", *POLARITY)  # the corpus is Windows-1252 (0x97 = em dash)
    out = []
    for line in path.read_text(encoding="cp1252", errors="replace").splitlines():
        tag, _, text = line.partition(" ")
        if tag not in ("__label__neg", "__label__pos"):
            raise DataError(f"{path}: unexpected label {tag!r}.")
        out.append((text.strip(), int(tag == "__label__pos")))
    return out


def build_sst2_mini(root: Path) -> None:
    train, dev, test = [], [], []
    count = {0: 0, 1: 0}
    for text, label in polarity_sentences():
        k = count[label]
        count[label] += 1
        (dev if k % 5 == 0 else test if k % 10 == 3 else train).append((text, label))
    with open(root / "train.tsv", "w", encoding="utf-8") as f:
        f.write("sentence\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in train))
    with open(root / "dev.tsv", "w", encoding="utf-8") as f:
        f.write("sentence\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in dev))
    with open(root / "test.tsv", "w", encoding="utf-8") as f:
        f.write("index\tsentence\n" + "".join(f"{i}\t{t}\n" for i, (t, _) in enumerate(test)))


_HEADER = re.compile(r"^(From|To|Subject|Newsgroups|Path|Message-ID|Organization|Date|Lines|Sender|References|"
                     r"Reply-To|Distribution|Keywords|Summary|Followup-To|Nntp-Posting-Host|Article-I\.D\.):")


class _Bunch(dict):
    """Stand-in for sklearn's Bunch (a dict subclass) while unpickling."""


NEWSGROUP_GLOBALS = {("copy_reg", "_reconstructor"): copyreg._reconstructor, ("sklearn.datasets.base", "Bunch"): _Bunch,
                     ("__builtin__", "dict"): dict}


def _newsgroup_bunch() -> dict:
    from genlab.safe_pickle import RefusedGlobal, loads, numpy_arrays, refusal

    path = package_file("gensim", *NEWSGROUP)
    try:
        return loads(zlib.decompress(path.read_bytes()), {**numpy_arrays(), **NEWSGROUP_GLOBALS}, encoding="latin1")
    except RefusedGlobal as err:
        raise DataError(refusal(err, path, "gensim's mini_newsgroup", "Reinstall gensim.")) from err


def newsgroup_posts() -> tuple[list[str], list[int], list[str]]:
    """(bodies, labels, target names) of the 200 posts, headers removed."""
    bunch = _newsgroup_bunch()
    names = list(bunch["target_names"])
    return [_body(post, names) for post in bunch["data"]], [int(t) for t in bunch["target"]], names


def newsgroup_subjects() -> list[str]:
    """The ``Subject:`` line of each post (same order as :func:`newsgroup_posts`), empty if it has none."""
    return [next((ln[8:].strip() for ln in post.split("\n\n", 1)[0].splitlines() if ln.startswith("Subject:")), "")
            for post in _newsgroup_bunch()["data"]]


def _body(post: str, names: list[str]) -> str:
    """Drop the header block and any other line naming a newsgroup (forwarded headers), so labels do not leak."""
    body = post.split("\n\n", 1)[1] if "\n\n" in post else post
    lines = [ln for ln in body.splitlines() if not any(n in ln for n in names) and not _HEADER.match(ln)]
    return "\n".join(lines).strip()


def build_imdb_mini(root: Path) -> None:
    bodies, labels, _ = newsgroup_posts()
    count = {0: 0, 1: 0}
    for i, (text, y) in enumerate(zip(bodies, labels)):
        split = "test" if count[y] % 10 < 3 else "train"
        count[y] += 1
        folder = root / split / ("pos" if y else "neg")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i}_0.txt").write_text(text.replace("\n", " "), encoding="utf-8")


SST2_MINI = DatasetSpec("glue_sst2_mini", ("train.tsv", "dev.tsv", "test.tsv"), build_mini=build_sst2_mini,
                        notes="SST-2 layout from gensim pang_lee_polarity.cor (human labels)")
IMDB_MINI = DatasetSpec("imdb_mini", ("train/pos/", "train/neg/", "test/pos/", "test/neg/"),
                        build_mini=build_imdb_mini, notes="aclImdb layout from gensim mini_newsgroup (human newsgroup labels)")


# ------------------------------------------------------------------------------------------------ SQuAD cloze
def cloze_questions(paragraph: str, max_words: int | None = None) -> list[tuple[str, str, int]]:
    """(question, answer, answer_start) for every sentence of the paragraph with >= 8 words (at most ``max_words``,
    so that a truncated question keeps its blank): the sentence with its longest word blanked as ``_``."""
    out = []
    for sentence in split_sentences(paragraph):
        words = [w for w in re.findall(r"[A-Za-z]{5,}", sentence)]
        n_words = len(sentence.split())
        if n_words < 8 or (max_words is not None and n_words > max_words) or not words:
            continue
        answer = max(words, key=len)
        at = re.search(rf"\b{answer}\b", sentence)
        if at is None:
            continue
        start = paragraph.find(sentence) + at.start()
        out.append((sentence[:at.start()] + "_" + sentence[at.end():], answer, start))
    return out


def squad_cloze_data(n_paragraphs: int | None = None, with_impossible: bool = True,
                     dev_every: int = 10) -> tuple[list[dict], list[dict]]:
    """(train ``data``, dev ``data``) in the SQuAD JSON layout. Labels are GENERATED (cloze): every qualifying
    sentence of a Wikipedia paragraph (150-700 characters, the first ``n_paragraphs`` or all of the excerpt) gives one
    question, that sentence with its longest word blanked; the answer is that word at its offset. Every
    ``dev_every``-th paragraph goes to dev with all its questions (no dev paragraph in train). With
    ``with_impossible`` every third question of a split is attached to another paragraph of the same split instead
    (``is_impossible``, the word as ``plausible_answers`` at its offset in its own paragraph). Question ids are the
    same with and without it, so the 1.1 and 2.0 minis hold the same questions."""
    paras = [p for a in excerpt_articles() for p in a.paragraphs() if 150 < len(p) < 700][:n_paragraphs]
    splits = ([p for j, p in enumerate(paras) if j % dev_every != 0], paras[::dev_every])
    out = []
    for name, split in zip(("train", "dev"), splits):
        qas: list[list[dict]] = [[] for _ in split]
        questions = [(j, c) for j, para in enumerate(split) for c in cloze_questions(para)]
        for k, (j, (question, answer, start)) in enumerate(questions):
            qa: dict[str, Any] = {"id": f"cloze-{name}{k:05d}", "question": question}
            if with_impossible and k % 3 == 2:
                j = (j + len(split) // 2) % len(split)  # a paragraph of the same split, far from the source
                qa.update(answers=[], is_impossible=True, plausible_answers=[{"text": answer, "answer_start": start}])
            else:
                qa.update(answers=[{"text": answer, "answer_start": start}])
                if with_impossible:
                    qa["is_impossible"] = False
            qas[j].append(qa)
        out.append([{"title": f"cloze-{name}{j}", "paragraphs": [{"context": para, "qas": q}]}
                    for j, (para, q) in enumerate(zip(split, qas)) if q])
    return out[0], out[1]


def build_squad_mini(root: Path, version: str) -> None:
    train, dev = squad_cloze_data(with_impossible=version == "2.0")
    for name, data in (("train", train), ("dev", dev)):
        (root / f"{name}-v{version}.json").write_text(json.dumps({"version": version, "data": data}), encoding="utf-8")


SQUAD1_MINI = DatasetSpec("squad1_cloze_mini", ("train-v1.1.json", "dev-v1.1.json"),
                          build_mini=lambda root: build_squad_mini(root, "1.1"), mini_version="2",
                          notes="SQuAD 1.1 layout, cloze questions GENERATED from the gensim Wikipedia excerpt")
SQUAD2_MINI = DatasetSpec("squad2_cloze_mini", ("train-v2.0.json", "dev-v2.0.json"),
                          build_mini=lambda root: build_squad_mini(root, "2.0"), mini_version="2",
                          notes="SQuAD 2.0 layout, cloze questions GENERATED; every third unanswerable")
