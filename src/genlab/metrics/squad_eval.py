"""SQuAD 1.1 / 2.0 scores with exactly the semantics of the two official evaluation scripts (the scores XLNet
paper §3.3 reports).

Both normalise answers the same way (lower-case, drop ASCII punctuation and the articles a/an/the, collapse
whitespace) and take the max over the gold answers, but they differ in ways that move reported numbers:

* v1.1 (:func:`evaluate_v1`): every question of the file counts; a question without a prediction scores 0. Every
  gold text is a candidate, also one that normalises to the empty string; F1 is 0 whenever no token is shared
  (so an empty prediction never earns F1 on an empty gold, though it earns EM).
* v2.0 (:func:`evaluate_v2`): gold texts that normalise to "" are dropped and a question left with none has the
  single gold "" (only an empty prediction scores 1). Questions without a prediction are left out of the mean.
  HasAns / NoAns split the questions by whether ``answers`` is a non-empty list, and each key is present only when
  the file has such questions. With ``null_odds`` (per question, higher = more likely unanswerable), a question
  whose odds exceed ``threshold`` is answered "no answer", and ``best_exact`` / ``best_f1`` search the threshold on
  the set itself: all questions start as "no answer" and are switched one by one in increasing odds (ties in the
  order of ``null_odds``), keeping the first strict improvement.
Scores are percentages.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterator, Mapping

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(s: str) -> str:
    s = "".join(ch for ch in s.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", s).split())


def exact(gold: str, pred: str) -> int:
    return int(normalize_answer(gold) == normalize_answer(pred))


def _overlap_f1(g: list[str], p: list[str]) -> float:
    same = sum((Counter(g) & Counter(p)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def f1_v1(gold: str, pred: str) -> float:
    """v1.1's token F1: 0 when nothing is shared, empty strings included."""
    return _overlap_f1(normalize_answer(gold).split(), normalize_answer(pred).split())


def f1(gold: str, pred: str) -> float:
    """v2.0's token F1: an empty gold or prediction scores 1 only when both are empty."""
    g, p = normalize_answer(gold).split(), normalize_answer(pred).split()
    if not g or not p:
        return float(g == p)
    return _overlap_f1(g, p)


def _questions(dataset: list[dict]) -> Iterator[dict]:
    for article in dataset:
        for para in article["paragraphs"]:
            yield from para["qas"]


def evaluate_v1(dataset: list[dict], preds: Mapping[str, str]) -> dict[str, float]:
    """The official v1.1 script: ``exact_match`` and ``f1`` over every question (missing predictions score 0)."""
    ex = f = total = 0.0
    for qa in _questions(dataset):
        total += 1
        if qa["id"] in preds:
            golds = [a["text"] for a in qa["answers"]]
            ex += max((exact(g, preds[qa["id"]]) for g in golds), default=0)
            f += max((f1_v1(g, preds[qa["id"]]) for g in golds), default=0.0)
    return {"exact": 100.0 * ex / total if total else 0.0, "f1": 100.0 * f / total if total else 0.0,
            "total": total}


def gold_answers(qa: Mapping) -> list[str]:
    """v2.0's gold texts: those non-empty after normalisation, or ``[""]`` when none is."""
    golds = [a["text"] for a in qa.get("answers", []) if normalize_answer(a["text"])]
    return golds or [""]


def raw_scores(dataset: list[dict], preds: Mapping[str, str]) -> tuple[dict, dict, dict]:
    """v2.0: (exact, f1) per question that has a prediction, and has_answer (``answers`` non-empty) per question."""
    ex, f, has = {}, {}, {}
    for qa in _questions(dataset):
        qid = qa["id"]
        has[qid] = bool(qa.get("answers"))
        if qid in preds:
            golds = gold_answers(qa)
            ex[qid] = max(exact(g, preds[qid]) for g in golds)
            f[qid] = max(f1(g, preds[qid]) for g in golds)
    return ex, f, has


def apply_threshold(scores: dict, null_odds: Mapping[str, float], has: Mapping[str, bool], thresh: float) -> dict:
    """A question whose null score exceeds ``thresh`` is answered "no answer"."""
    return {q: (float(not has[q]) if null_odds[q] > thresh else s) for q, s in scores.items()}


def _summary(ex: dict, f: dict, qids: list[str]) -> dict[str, float]:
    n = len(qids)
    return {"exact": 100.0 * sum(ex[q] for q in qids) / n if n else 0.0,
            "f1": 100.0 * sum(f[q] for q in qids) / n if n else 0.0, "total": n}


def best_threshold(preds: Mapping[str, str], scores: dict, null_odds: Mapping[str, float], has: Mapping[str, bool]
                   ) -> tuple[float, float]:
    """Start with every question "no answer", switch them in increasing null odds; the first best total wins."""
    cur = best = sum(1 for q in has if not has[q])
    thresh = 0.0
    for q in sorted(null_odds, key=lambda k: null_odds[k]):
        if q not in scores:
            continue
        if has[q]:
            cur += scores[q]
        elif preds[q]:
            cur -= 1
        if cur > best:
            best, thresh = cur, null_odds[q]
    return 100.0 * best / max(1, len(scores)), thresh


def evaluate_v2(dataset: list[dict], preds: Mapping[str, str], null_odds: Mapping[str, float] | None = None,
                threshold: float | None = None) -> dict[str, float]:
    """The official v2.0 script. ``threshold`` defaults to 0.0 (the script's 1.0 is meant for probabilities; our
    null odds are logit differences)."""
    ex, f, has = raw_scores(dataset, preds)
    if null_odds is not None:
        t = 0.0 if threshold is None else threshold
        ex_t, f_t = apply_threshold(ex, null_odds, has, t), apply_threshold(f, null_odds, has, t)
    else:
        ex_t, f_t = ex, f
    out: dict[str, float] = _summary(ex_t, f_t, list(ex))
    for name, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [q for q in has if has[q] is wanted]
        if qids:  # the official script keys each split only when the file has its questions
            out.update({f"{name}_{k}": v for k, v in _summary(ex_t, f_t, [q for q in qids if q in ex]).items()})
    if null_odds is not None:
        out["best_exact"], out["best_exact_thresh"] = best_threshold(preds, ex, null_odds, has)
        out["best_f1"], out["best_f1_thresh"] = best_threshold(preds, f, null_odds, has)
    return out
