"""Snapshot of what every experiment preset composes to, so refactoring the presets (inheritance, base presets) can
be checked to change nothing.

``python tests/presets_snapshot.py`` composes each ``conf/experiment/*.yaml`` through the tests' own path
(``helpers.compose_config``, as ``train.py`` would see it) and writes ``tests/fixtures/presets_resolved.json``:
canonical JSON ``{preset: config}`` with interpolations left unresolved (so environment variables and the checkout's
location do not leak in) and keys sorted. The output is deterministic: same configs, same bytes.
``tests/test_presets.py`` compares the current composition with it. The same command rewrites the preset catalogue,
``docs/presets.md`` (``tests/preset_catalog.py``).
"""

from __future__ import annotations

import json
import sys
from fnmatch import fnmatch
from pathlib import Path

from omegaconf import OmegaConf

from helpers import CONF, compose_config

EXPERIMENT_DIR = CONF / "experiment"
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "presets_resolved.json"  # ~0.8 MB: plain text, diffable
RUN_DIR = Path("<run_dir>")  # a placeholder, never created: compose_config only writes it into paths.*


def preset_names() -> list[str]:
    """The runnable presets, as tests/test_experiments.py enumerates them (base presets live in a subfolder)."""
    return sorted(p.stem for p in EXPERIMENT_DIR.glob("*.yaml"))


def composed_preset(name: str) -> dict:
    """``experiment=<name>`` composed as a plain dict, interpolations unresolved; through JSON, so it compares equal
    to what the fixture stores (string keys)."""
    cfg = compose_config([f"experiment={name}"], RUN_DIR)
    return json.loads(json.dumps(OmegaConf.to_container(cfg, resolve=False)))


def snapshot(names: list[str] | None = None) -> dict[str, dict]:
    return {name: composed_preset(name) for name in (names or preset_names())}


def to_text(configs: dict[str, dict]) -> str:
    """Canonical, diff-friendly JSON: equal configs give equal bytes."""
    return json.dumps(configs, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def load_fixture(path: Path = FIXTURE) -> dict[str, dict]:
    return json.loads(path.read_text())


def flatten(node, prefix: str = "") -> dict[str, object]:
    """Dotted key -> leaf value; empty dicts and lists are kept as leaves so their appearance is a difference."""
    if isinstance(node, dict) and node:
        items = node.items()
    elif isinstance(node, list) and node:
        items = ((f"[{i}]", v) for i, v in enumerate(node))
    else:
        return {prefix: node}
    out: dict[str, object] = {}
    for key, value in items:
        out.update(flatten(value, f"{prefix}{key}" if key.startswith("[") or not prefix else f"{prefix}.{key}"))
    return out


def differences(expected: dict, actual: dict, limit: int = 20) -> list[str]:
    """Readable lines for the first ``limit`` keys whose values differ (``<absent>`` where a side lacks the key)."""
    want, got = flatten(expected), flatten(actual)
    absent = "<absent>"
    keys = [k for k in sorted(want.keys() | got.keys()) if want.get(k, absent) != got.get(k, absent)
            or (k in want) != (k in got)]
    lines = [f"  {k}: expected {want.get(k, absent)!r}, got {got.get(k, absent)!r}" for k in keys[:limit]]
    if len(keys) > limit:
        lines.append(f"  ... and {len(keys) - limit} more")
    return lines


def main(argv: list[str]) -> int:
    """Write the fixture (default), or with ``--check [PATTERN ...]`` report every preset (matching a shell-style
    pattern, e.g. ``'bert_*'``) that differs from it."""
    if argv[1:2] == ["--check"]:
        fixture = load_fixture()
        patterns = argv[2:] or ["*"]
        names = sorted(n for n in fixture.keys() | set(preset_names()) if any(fnmatch(n, p) for p in patterns))
        bad = 0
        for name in names:
            if name not in fixture or name not in preset_names():
                print(f"{name}: {'new preset' if name not in fixture else 'preset removed'}")
                bad += 1
                continue
            try:
                diff = differences(fixture[name], composed_preset(name))
            except Exception as err:  # noqa: BLE001 - report every broken preset, not just the first
                diff = [f"  does not compose: {type(err).__name__}: {err}"]
            if diff:
                print(f"{name}:", *diff, sep="\n")
                bad += 1
        print(f"{bad} of {len(names)} preset(s) differ")
        return 1 if bad else 0
    if argv[1:]:  # anything else (``--help``, a typo) must not rewrite the fixture
        print(f"usage: python {Path(argv[0]).name} [--check [PATTERN ...]]", file=sys.stderr)
        return 2
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    configs = snapshot()
    FIXTURE.write_text(to_text(configs))
    print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size:,} bytes)")
    import preset_catalog  # the catalogue page is built from this snapshot, read back as the test reads it (key order)

    preset_catalog.write(load_fixture())
    print(f"wrote {preset_catalog.CATALOGUE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
