"""GLUE averages as the Funnel-Transformer tables compute them (Dai thesis Tables 5.1-5.3), from per-task scores in
percent where MRPC / QQP (dev) or several test tasks carry two numbers.

* ``dev`` (Tables 5.1/5.2 "GLUE-AVG" and Table 5.3 dev "AVG"): the mean over CoLA, SST-2, MRPC, STS-B, QQP, MNLI,
  QNLI and RTE, a pair ("F1/acc") contributing its **second** number. The thesis averaged unrounded scores, so a
  recomputation from the printed entries agrees within ±0.05, not exactly (ties such as 86.65 round either way).
* ``test`` (Table 5.3 leaderboard "AVG"): the mean over those 8 tasks and WNLI, a pair contributing the **mean**
  of its two numbers.

A pair is a 2-tuple, or a string ``"a/b"`` as printed (``"-/90.9"`` has only its second number).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

GLUE_DEV_TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte")
GLUE_TEST_TASKS = (*GLUE_DEV_TASKS, "wnli")
Score = float | int | str | Sequence[float | None]


def _pair(score: Score) -> tuple[float | None, float]:
    """(first or None, second) of a score; a single number is its own second."""
    if isinstance(score, str):
        parts = score.split("/")
        if len(parts) == 1:
            return None, float(parts[0])
        first, second = parts
        return (None if first.strip() in ("-", "") else float(first)), float(second)
    if isinstance(score, (int, float)):
        return None, float(score)
    first, second = score
    return (None if first is None else float(first)), float(second)


def task_value(score: Score, rule: str) -> float:
    """The number a task contributes: ``second`` (dev rule) or ``mean`` of a pair (test rule)."""
    first, second = _pair(score)
    if rule == "second" or first is None:
        return second
    if rule == "mean":
        return (first + second) / 2
    raise ValueError(f"rule={rule!r} must be 'second' or 'mean'")


def glue_average(scores: Mapping[str, Score], split: str = "dev") -> float:
    """The thesis' GLUE average of ``scores`` (task name -> score) for ``split`` ``dev`` or ``test``."""
    if split not in ("dev", "test"):
        raise ValueError(f"split={split!r} must be 'dev' or 'test'")
    tasks, rule = (GLUE_DEV_TASKS, "second") if split == "dev" else (GLUE_TEST_TASKS, "mean")
    missing = [t for t in tasks if t not in scores]
    if missing:
        raise KeyError(f"GLUE {split} average needs {list(tasks)}; missing {missing}")
    return sum(task_value(scores[t], rule) for t in tasks) / len(tasks)
