"""The system pages (docs/systems/*.md) name real code, presets and records, so a rename breaks CI, not the docs.

Checked: every `genlab.<dotted.name>` in code font resolves (the longest importable module prefix, then getattr
for the rest); every bare name in code font under a "Presets" heading is a file of conf/experiment/ (or base/) and,
unless it is a `_mini`/`_midi` twin itself, has a `_mini` twin; every `experiments/...` or `conf/...` path in code
font exists; every `experiment=` of a command in a fenced block names a preset.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs" / "systems").glob("*.md"))
CODE = re.compile(r"`([^`\n]+)`")
DOTTED = re.compile(r"^genlab(\.[A-Za-z_][A-Za-z0-9_]*)+$")
BARE = re.compile(r"^[a-z][a-z0-9_]*$")
PATH = re.compile(r"^(experiments|conf)/[A-Za-z0-9_./-]+$")
EXPERIMENT = re.compile(r"\bexperiment=([A-Za-z0-9_.,]+)")


def resolve(dotted: str) -> object:
    """The object a dotted name names: import the longest module prefix, getattr the remaining parts."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ModuleNotFoundError(dotted)


def fenced_experiments(page: Path) -> list[str]:
    """Every preset named by ``experiment=`` (comma lists split) in the page's fenced code blocks."""
    names, fenced = [], False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif fenced:
            names += [n for m in EXPERIMENT.findall(line) for n in m.split(",")]
    return names


def code_spans(page: Path) -> list[tuple[str, str]]:
    """(span, heading of the section it is in) for every span in code font outside fenced blocks."""
    spans, heading, fenced = [], "", False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        spans += [(s, heading) for s in CODE.findall(line)]
    return spans


def test_every_system_page_exists():
    names = {p.stem for p in PAGES}
    assert names >= {"transformer_xl", "xlnet", "funnel", "gpt", "mos", "bad_gan", "cegan", "gdan", "planetoid"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_code_names_presets_and_paths_resolve(page: Path):
    presets = {p.stem for p in (ROOT / "conf" / "experiment").rglob("*.yaml")}
    missing, dotted_seen = [], 0
    for span, heading in code_spans(page):
        if DOTTED.match(span):
            dotted_seen += 1
            try:
                resolve(span)
            except (ImportError, AttributeError) as err:
                missing.append(f"{span}: {err}")
        elif "preset" in heading.lower() and BARE.match(span) and span not in presets:
            missing.append(f"{span}: no conf/experiment/{span}.yaml")
        elif PATH.match(span) and not (ROOT / span).exists():
            missing.append(f"{span}: no such file")
    missing += [f"experiment={name}: no such preset" for name in fenced_experiments(page) if name not in presets]
    # the pages promise a CPU twin for every paper preset they list
    listed = {s for s, heading in code_spans(page) if "preset" in heading.lower() and s in presets}
    missing += [f"{name}: no {name}_mini twin" for name in sorted(listed)
                if not name.endswith(("_mini", "_midi")) and f"{name}_mini" not in presets]
    assert dotted_seen >= 5, f"{page.name} maps no code: expected `genlab.module.Name` entries"
    assert not missing, f"{page.relative_to(ROOT)} names what does not exist:\n" + "\n".join(missing)


def test_resolve_fails_on_a_renamed_name():
    assert resolve("genlab.nn.positional.sinusoid_table") is not None
    with pytest.raises(AttributeError):
        resolve("genlab.nn.positional.no_such_function")


PLATFORM_PAGES = [ROOT / "docs" / "index.md", *sorted((ROOT / "docs" / "platform").glob("*.md"))]


@pytest.mark.parametrize("page", PLATFORM_PAGES, ids=lambda p: p.stem)
def test_platform_pages_name_what_exists(page: Path):
    """The home and platform pages: every `genlab.<name>`, `experiments/...` or `conf/...` path in code font and every
    `experiment=` of a fenced command exists."""
    presets = {p.stem for p in (ROOT / "conf" / "experiment").rglob("*.yaml")}
    missing = []
    for span, _ in code_spans(page):
        if DOTTED.match(span):
            try:
                resolve(span)
            except (ImportError, AttributeError) as err:
                missing.append(f"{span}: {err}")
        elif PATH.match(span) and not (ROOT / span).exists():
            missing.append(f"{span}: no such file")
    missing += [f"experiment={name}: no such preset" for name in fenced_experiments(page) if name not in presets]
    assert not missing, f"{page.relative_to(ROOT)} names what does not exist:\n" + "\n".join(missing)
