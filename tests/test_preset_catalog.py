"""docs/presets.md is the catalogue ``tests/preset_catalog.py`` builds from the presets: a stale page fails here."""

from __future__ import annotations

import preset_catalog

from presets_snapshot import load_fixture


def test_catalogue_page_is_fresh():
    expected = preset_catalog.catalogue(load_fixture())
    assert preset_catalog.CATALOGUE.read_text() == expected, (
        "docs/presets.md is stale: rewrite it with `python tests/preset_catalog.py` (or `python "
        "tests/presets_snapshot.py` after changing presets) and commit it")


def test_catalogue_row_says_what_the_preset_is():
    """One row checked against its preset: header sentence, twin, sizes, data and record."""
    row = next(line for line in preset_catalog.catalogue(load_fixture()).splitlines()
               if line.startswith("| `txl_wt103_base` |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1].startswith("WikiText-103 'Standard' 151M model, test PPL 24.0")
    assert cells[2:] == ["`txl_wt103_base_mini`", "n_layer 16, d_model 410, n_head 10, d_inner 2100",
                         "wikitext103 (download)", "`experiments/transformer_xl/`"]
