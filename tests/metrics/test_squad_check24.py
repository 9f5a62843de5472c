"""The SQuAD EM/F1 used for Dai's thesis Table 5.6 behave as the official scripts on
hand-made cases (articles and punctuation ignored, max over golds, an unanswerable question needs the empty
answer), computed by hand here."""

from __future__ import annotations

import pytest

from genlab.metrics.squad_eval import evaluate_v1, evaluate_v2


def _data(questions: list[tuple[str, list[str]]]) -> list[dict]:
    qas = [{"id": qid, "question": "?", "answers": [{"text": t, "answer_start": 0} for t in golds],
            "is_impossible": not golds} for qid, golds in questions]
    return [{"title": "t", "paragraphs": [{"context": "c", "qas": qas}]}]


CASES = [("q1", ["The Eiffel Tower"]), ("q2", ["an apple pie", "apple"]), ("q3", []), ("q4", [])]
PREDS = {"q1": "eiffel tower!", "q2": "the apple tart", "q3": "", "q4": "something"}


def test_check24_v2_hand_made_cases():
    out = evaluate_v2(_data(CASES), PREDS)
    # q1: EM 1 F1 1 (article, case, punctuation); q2: EM 0, F1 max(1/2, 2/3); q3: empty = right; q4: wrong
    assert out["exact"] == pytest.approx(100 * 2 / 4) and out["f1"] == pytest.approx(100 * (1 + 2 / 3 + 1) / 4)
    assert out["HasAns_exact"] == 50.0 and out["HasAns_f1"] == pytest.approx(100 * (1 + 2 / 3) / 2)
    assert out["NoAns_exact"] == out["NoAns_f1"] == 50.0


def test_check24_v1_hand_made_cases():
    out = evaluate_v1(_data(CASES[:2]), PREDS)
    assert out["exact"] == 50.0 and out["f1"] == pytest.approx(100 * (1 + 2 / 3) / 2)
