"""The CPU heap model: best-fit holes that do not merge, a top that grows, large blocks mmapped and returned."""

from __future__ import annotations

from genlab.cli.memory_heap import HEADER, MMAP_WITH_SETTING, high_water

MB = 2**20


def test_a_hole_is_filled_best_fit_and_the_heap_does_not_grow():
    # A(100) B(300) C(1) alive; free A and B; D(90) fits A's hole, the smaller one: the heap stays at A+B+C
    spans = [[1, 3, 100 * MB], [1, 3, 300 * MB], [1, -1, MB], [4, 5, 90 * MB], [5, 6, 250 * MB]]
    assert high_water(spans, MMAP_WITH_SETTING, steps=1) == 401 * MB + 3 * HEADER


def test_neighbouring_holes_do_not_merge_so_a_larger_block_extends_the_heap():
    # A(100) B(100) freed side by side, C(1) above them; D(150) fits no single hole: the heap is 351 MB for 151 MB live
    spans = [[1, 3, 100 * MB], [1, 3, 100 * MB], [1, -1, MB], [4, 5, 150 * MB]]
    assert high_water(spans, MMAP_WITH_SETTING, steps=1) == 351 * MB + 4 * HEADER


def test_blocks_above_the_mmap_threshold_leave_no_hole_and_a_second_step_reuses_the_first_ones():
    spans = [[1, 3, 100 * MB], [1, 3, 100 * MB], [1, -1, MB], [4, 5, 150 * MB]]
    assert high_water(spans, 64 * MB, steps=1) == 201 * MB + 3 * HEADER  # 100 + 100 mapped at once, C in the heap
    one, two = high_water(spans, MMAP_WITH_SETTING, steps=1), high_water(spans, MMAP_WITH_SETTING, steps=2)
    assert two == one  # the second step's blocks fill the first one's holes
