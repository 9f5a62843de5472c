"""Golden loss curves (design.md "golden loss curves catch drift"): the first training steps of one mini per family,
rerun through ``genlab.cli.train.train`` exactly as ``tests/golden/make_golden.py`` wrote them, must match the stored
per-step losses within the family's relative tolerance (``Family.rtol``: far above thread-count round-off, far below
what a 1 % learning-rate change does; the last three tests check both ends and that a rerun is bit-identical).

A failure means the numbers of a training run moved: a changed default, initialisation, data order, loss or
optimiser step. If the change is intended, regenerate the family with ``python tests/golden/make_golden.py
<family>`` and say why in the commit. About 80 s on one core.
"""

from __future__ import annotations

import json
import math

import pytest
from golden.make_golden import FAMILIES, golden_path, run_curves

CHECK_FAMILY = "finetune_sst2"  # the cheapest run, and the one whose curve a 1 % lr change moves least


def mismatches(got: dict, want: dict, rtol: float) -> list[str]:
    """Values of ``got`` that differ from ``want`` by more than ``rtol`` (relative), as readable lines."""
    out = []
    for key, expected in want.items():
        actual = got.get(key, [])
        if [s for s, _ in actual] != [s for s, _ in expected]:
            out.append(f"{key}: steps {[s for s, _ in actual]} != {[s for s, _ in expected]}")
            continue
        out += [f"{key} step {s}: {a!r} vs golden {e!r} (rel {abs(a - e) / abs(e):.2e} > {rtol:g})"
                for (s, a), (_, e) in zip(actual, expected) if not math.isclose(a, e, rel_tol=rtol)]
    return out


@pytest.fixture(scope="module")
def curves(tmp_path_factory):
    """One training run per (family, overrides, threads) for the whole module."""
    cache: dict = {}

    def _curves(family: str, extra: tuple[str, ...] = (), threads: int = 1) -> dict:
        key = (family, extra, threads)
        if key not in cache:
            cache[key] = run_curves(family, tmp_path_factory.mktemp(family), extra, threads)
        return cache[key]

    return _curves


@pytest.mark.parametrize("family", list(FAMILIES))
def test_loss_curve_matches_golden(family, curves):
    golden = json.loads(golden_path(family).read_text())
    bad = mismatches(curves(family), golden["curves"], FAMILIES[family].rtol)
    assert not bad, (f"{FAMILIES[family].preset}: the first training steps moved (golden written with torch "
                     f"{golden['torch']}):\n" + "\n".join(bad[:10]))


def test_same_run_twice_is_bit_identical(curves, tmp_path):
    again = run_curves(CHECK_FAMILY, tmp_path)
    assert again == curves(CHECK_FAMILY)


def test_two_threads_stay_within_tolerance(curves):
    """Thread-count round-off must not fail the golden test."""
    golden = json.loads(golden_path(CHECK_FAMILY).read_text())["curves"]
    assert not mismatches(curves(CHECK_FAMILY, threads=2), golden, FAMILIES[CHECK_FAMILY].rtol)


def test_tolerance_catches_a_one_percent_learning_rate_change(curves, compose_cfg):
    lr = compose_cfg([f"experiment={FAMILIES[CHECK_FAMILY].preset}"]).task.optimizer.lr
    changed = curves(CHECK_FAMILY, (f"task.optimizer.lr={lr * 1.01!r}",))
    golden = json.loads(golden_path(CHECK_FAMILY).read_text())["curves"]
    assert mismatches(changed, golden, FAMILIES[CHECK_FAMILY].rtol)
