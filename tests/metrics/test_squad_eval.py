"""SQuAD EM/F1 and threshold search against hand-computed cases and the two official scripts'
semantics where they differ (missing predictions, empty golds, HasAns/NoAns, threshold ties)."""

from __future__ import annotations

import pytest

from genlab.metrics.squad_eval import best_threshold, evaluate_v1, evaluate_v2, exact, f1, f1_v1, normalize_answer


def test_normalisation_articles_punctuation_whitespace():
    assert normalize_answer("  The  Eiffel-Tower, in Paris! ") == "eiffeltower in paris"
    assert normalize_answer("An apple a day") == "apple day"
    assert normalize_answer("theory") == "theory"  # 'the' only as a word


def test_exact_and_f1_hand_computed():
    assert exact("the Denver Broncos", "Denver Broncos.") == 1
    # gold: denver broncos win ; pred: broncos win super -> same 2, P=2/3, R=2/3
    assert f1("Denver Broncos win", "Broncos win super") == pytest.approx(2 / 3)
    assert f1("a b", "c d") == 0.0


def test_empty_gold_means_no_answer():
    assert f1("", "") == 1.0 and exact("", "") == 1
    assert f1("", "something") == 0.0 and f1("Paris", "") == 0.0


def dataset():
    qas = [{"id": "q1", "question": "?", "answers": [{"text": "Paris", "answer_start": 0},
                                                     {"text": "the city of Paris", "answer_start": 0}]},
           {"id": "q2", "question": "?", "answers": [], "is_impossible": True},
           {"id": "q3", "question": "?", "answers": [{"text": "big red dog", "answer_start": 0}]}]
    return [{"title": "t", "paragraphs": [{"context": "x", "qas": qas}]}]


def without_q2():
    data = dataset()
    data[0]["paragraphs"][0]["qas"].pop(1)
    return data


def test_v1_scores_max_over_golds():
    out = evaluate_v1(without_q2(), {"q1": "city of Paris", "q3": "red dog"})
    # q1: EM 1 (matches 2nd gold after article removal), F1 1; q3: EM 0, F1 2*(1*2/3)/(1+2/3) = 0.8
    assert out["exact"] == pytest.approx(50.0) and out["f1"] == pytest.approx(90.0) and out["total"] == 2


def test_v2_hasans_noans_breakdown_at_threshold():
    preds = {"q1": "Paris", "q2": "foo", "q3": "big dog"}
    null = {"q1": -2.0, "q2": 3.0, "q3": 1.0}
    out = evaluate_v2(dataset(), preds, null, threshold=0.0)
    # q1 answered correctly; q2 and q3 switched to no answer -> q2 right, q3 wrong
    assert out["exact"] == pytest.approx(200 / 3) and out["HasAns_exact"] == pytest.approx(50.0)
    assert out["NoAns_exact"] == pytest.approx(100.0) and out["HasAns_total"] == 2 and out["NoAns_total"] == 1


def test_c22_threshold_search_three_questions():
    preds = {"q1": "Paris", "q2": "foo", "q3": "big dog"}
    null = {"q1": 0.1, "q2": 0.5, "q3": 0.9}
    scores_f1 = {"q1": 1.0, "q2": 0.0, "q3": f1("big red dog", "big dog")}  # q3 F1 = 0.8
    has = {"q1": True, "q2": False, "q3": True}
    # all null: 1 (q2); +q1 -> 2 (t=0.1); +q2 -> 1; +q3 -> 1.8  => best 2/3 at 0.1
    best, t = best_threshold(preds, scores_f1, null, has)
    assert best == pytest.approx(200 / 3) and t == pytest.approx(0.1)
    null["q2"] = 0.95  # now q3 before q2: 1 -> 2 -> 2.8 (t=0.9) -> 1.8
    best, t = best_threshold(preds, scores_f1, null, has)
    assert best == pytest.approx(280 / 3) and t == pytest.approx(0.9)
    out = evaluate_v2(dataset(), preds, null)
    assert out["best_f1"] == pytest.approx(280 / 3) and out["best_f1_thresh"] == pytest.approx(0.9)


def test_v1_missing_prediction_scores_zero_and_counts():
    """evaluate-v1.1.py: 'Unanswered question ... will receive score 0' and the total is every question."""
    out = evaluate_v1(without_q2(), {"q1": "Paris"})
    assert out["total"] == 2 and out["exact"] == pytest.approx(50.0) and out["f1"] == pytest.approx(50.0)


def test_v2_missing_prediction_is_left_out_of_the_mean():
    out = evaluate_v2(without_q2(), {"q1": "Paris"})
    assert out["total"] == 1 and out["exact"] == pytest.approx(100.0)


def test_v1_keeps_golds_that_normalise_to_empty():
    """v1.1 scores every gold text: a gold "The" matches an empty prediction for EM, never for F1 (no shared token);
    v2.0 drops that gold, so the question counts as unanswerable for scoring."""
    data = [{"title": "t", "paragraphs": [{"context": "x", "qas": [
        {"id": "a", "question": "?", "answers": [{"text": "The", "answer_start": 0}]}]}]}]
    assert f1_v1("The", "") == 0.0 and f1("The", "") == 1.0
    v1 = evaluate_v1(data, {"a": ""})
    assert v1["exact"] == 100.0 and v1["f1"] == 0.0
    v2 = evaluate_v2(data, {"a": ""})
    assert v2["exact"] == 100.0 and v2["f1"] == 100.0
    # HasAns is decided by the answers list, not by the normalised text: this question is HasAns, and no NoAns key
    assert v2["HasAns_total"] == 1 and "NoAns_total" not in v2


def test_v2_omits_the_split_a_file_does_not_have():
    out = evaluate_v2(without_q2(), {"q1": "Paris", "q3": "big red dog"}, {"q1": -1.0, "q3": -1.0})
    assert out["HasAns_total"] == 2 and not any(k.startswith("NoAns") for k in out)


def test_v2_threshold_ties_follow_the_order_of_null_odds():
    """The official search walks questions sorted by odds (a stable sort of the odds file's order) and keeps the
    first strict improvement, so inside a tie the order of ``null_odds`` decides the reported best."""
    preds = {"q1": "Paris", "q2": "foo", "q3": "wrong"}
    scores = {"q1": 1.0, "q2": 0.0, "q3": 0.0}
    has = {"q1": True, "q2": False, "q3": True}
    # all null: 1. q2 first: 0, then q1: 1 (not > 1) -> best stays 1 at threshold 0.0
    assert best_threshold(preds, scores, {"q2": 0.5, "q1": 0.5, "q3": 0.9}, has) == (pytest.approx(100 / 3), 0.0)
    # q1 first: 2 (t=0.5), then q2: 1 -> best 2 at 0.5
    assert best_threshold(preds, scores, {"q1": 0.5, "q2": 0.5, "q3": 0.9}, has) == (pytest.approx(200 / 3), 0.5)
