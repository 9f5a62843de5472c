"""SQuAD 1.1 / 2.0 evaluation with the semantics of the official scripts (spec xlnet.md §5.4).

* Normalisation: lower-case, drop ASCII punctuation, drop the articles a/an/the, collapse whitespace.
* EM and F1 (bag of normalised tokens) take the max over the gold answers; an unanswerable question has the single
  gold answer ``""`` (only an empty prediction scores 1).
* v2.0: ``null_odds`` (per question, higher = more likely unanswerable) with a threshold turn predictions into
  "no answer"; ``best_exact``/``best_f1`` search the best threshold on the set itself (sort by null score, switch
  questions one by one from "no answer" to their text); ``HasAns_*``/``NoAns_*`` break scores down by gold type.
Scores are percentages.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Mapping

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(s: str) -> str:
    s = "".join(ch for ch in s.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", s).split())


def exact(gold: str, pred: str) -> int:
    return int(normalize_answer(gold) == normalize_answer(pred))


def f1(gold: str, pred: str) -> float:
    g, p = normalize_answer(gold).split(), normalize_answer(pred).split()
    if not g or not p:  # no-answer gold or empty prediction: right only when both are empty
        return float(g == p)
    same = sum((Counter(g) & Counter(p)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def gold_answers(qa: Mapping) -> list[str]:
    """Non-empty (after normalisation) gold texts, or ``[""]`` for an unanswerable question."""
    golds = [a["text"] for a in qa.get("answers", []) if normalize_answer(a["text"])]
    return golds or [""]


def raw_scores(dataset: list[dict], preds: Mapping[str, str]) -> tuple[dict, dict, dict]:
    """(exact, f1, has_answer) per question id of ``dataset`` (the JSON's ``data`` list) that has a prediction."""
    ex, f, has = {}, {}, {}
    for article in dataset:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                qid = qa["id"]
                golds = gold_answers(qa)
                has[qid] = golds != [""]
                if qid not in preds:
                    continue
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
    """Start with every question answered "no answer", switch them in increasing null score; best total wins."""
    cur = best = sum(1 for q in scores if not has[q])
    thresh = 0.0
    for q in sorted(scores, key=lambda k: null_odds[k]):
        if has[q]:
            cur += scores[q]
        elif preds[q]:
            cur -= 1
        if cur > best:
            best, thresh = cur, null_odds[q]
    return 100.0 * best / max(1, len(scores)), thresh


def evaluate(dataset: list[dict], preds: Mapping[str, str], null_odds: Mapping[str, float] | None = None,
             threshold: float | None = None) -> dict[str, float]:
    """Official-style scores. Without ``null_odds`` (v1.1, or a 2.0 prediction file with ""), raw EM/F1.
    With ``null_odds``: scores at ``threshold`` (default 0.0 as the official script's 1.0 on probabilities is
    meaningless for logits), plus ``best_exact``/``best_f1`` and their thresholds."""
    ex, f, has = raw_scores(dataset, preds)
    qids = list(ex)
    out: dict[str, float] = {}
    if null_odds is not None:
        t = 0.0 if threshold is None else threshold
        ex_t, f_t = apply_threshold(ex, null_odds, has, t), apply_threshold(f, null_odds, has, t)
    else:
        ex_t, f_t = ex, f
    out.update(_summary(ex_t, f_t, qids))
    has_q, no_q = [q for q in qids if has[q]], [q for q in qids if not has[q]]
    if has_q and no_q or null_odds is not None:
        out.update({f"HasAns_{k}": v for k, v in _summary(ex_t, f_t, has_q).items()})
        out.update({f"NoAns_{k}": v for k, v in _summary(ex_t, f_t, no_q).items()})
    if null_odds is not None:
        out["best_exact"], out["best_exact_thresh"] = best_threshold(preds, ex, null_odds, has)
        out["best_f1"], out["best_f1_thresh"] = best_threshold(preds, f, null_odds, has)
    return out
