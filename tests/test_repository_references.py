"""Everything a reader gets from a clone is checkable by them: tracked files cite the papers (section, equation,
table) or the docs pages, never the internal implementation notes the platform was first written from, and name no
folder outside the repository or on the development machine (data comes through an option or an environment
variable, with a generic placeholder such as ``/path/to/planetoid`` in the commands)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SYSTEMS = r"(?:TXL|Transformer-XL|XLNet|Funnel(?:-Transformer)?|GPT|MoS|bad[-_ ]GAN|CEGAN|GDAN|Planetoid)"
FORBIDDEN = {
    "internal spec reference": re.compile(
        "|".join(
            (
                r"\bspec(?:s|'s)?\s*§",  # "spec §3.3", "the spec's §4.2"
                r"\bspecs?\s+`?\w+\.md",  # "spec xlnet.md §5"
                r"`?\b(?:transformer_xl|xlnet|funnel_transformer|gpt|mos|bad_gan|cegan|gdan|planetoid)\.md`?\s*§",
                r"\bspec(?:'s)?\s+(?:checks?|items?|pitfalls?|C\d+|P\d+|rules?|bars?|figures?|measured|recipe|review)\b",
                rf"\b{SYSTEMS}\s+spec\b",  # "TXL spec", "the bad-GAN spec"
                r"(?<![\w.])\(spec[:;,)]",  # "(spec: 0.57 vs 0.65)", not "module_from_spec(spec)"
                r"\bspecs/",
            )
        ),
        re.IGNORECASE,
    ),
    "path outside the repository": re.compile(r"\.\./shared\b|\bshared/(?:specs|seeds|data|design|style)\b"),
    "absolute path of a machine": re.compile(r"(?<![\w.])/(?:work|Users)/|(?<![\w.])/home/(?!user\b)[a-z]"),
}
KEYS = ("spec", "§", "shared", "/work/", "/home/", "/users/")  # every rule needs one of these (lower case)
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()


def offending_lines(paths: list[str]) -> list[str]:
    """``path:line: kind: text`` for each line of a text file in ``paths`` (relative to the root) that breaks a rule."""
    found = []
    for rel in paths:
        if rel == THIS:
            continue
        data = (ROOT / rel).read_bytes()
        if b"\0" in data:
            continue  # binary (images, safetensors)
        text = data.decode("utf-8", "replace")
        if not any(key in text.lower() for key in KEYS):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if any(key in line.lower() for key in KEYS):
                found += [
                    f"{rel}:{number}: {kind}: {line.strip()[:160]}" for kind, p in FORBIDDEN.items() if p.search(line)
                ]
    return found


GENERATED = {"outputs", "multirun", "site", "wandb", "__pycache__"}  # run and build products, never committed


def tracked_files() -> list[str]:
    """The files git tracks; outside a git checkout (a source archive) every file but hidden and generated folders."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        return [p for p in out.decode().split("\0") if p and (ROOT / p).is_file()]
    except (OSError, subprocess.CalledProcessError):
        return [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*") if p.is_file()
                and not any(part.startswith(".") or part in GENERATED or part.endswith(".egg-info")
                            for part in p.relative_to(ROOT).parts[:-1])]


@pytest.mark.parametrize(
    "line",
    [
        "Relative attention (spec §3.3).",
        "the TXL spec's C19 parity",
        "see spec `xlnet.md` §5.2 for recipes",
        "read gdan.md §5.5",
        "Spec check 23: the GLUE averages",
        "Checks of the bad-GAN spec (§7)",
        "passes the bar (spec: 0.57 vs 0.65)",
        "Spec: `../shared/specs/gpt.md`",
        "data.path=/work/shared/data/planetoid",
        "cache in /home/alice/.cache",
        "open('/Users/bob/x')",
    ],
)
def test_the_rules_catch_internal_references(line):
    assert any(p.search(line) for p in FORBIDDEN.values()), line


@pytest.mark.parametrize(
    "line",
    [
        "for r in spec.downloads:",
        "root = locate(spec, source, path, cache_dir); str(spec)",
        "spec = importlib.util.spec_from_file_location(name, path)",
        '"""The spec with its URLs pointed at files in ``server``."""',
        "XLNet (Yang et al., 2019) Table 6; Yang's thesis §3.3.4",
        "python train.py data.source=path data.path=/path/to/planetoid",
        "HOME=/home/user pytest",
        "see docs/systems/gpt.md",
        "a shared/ folder of the run",
    ],
)
def test_the_rules_leave_ordinary_text_alone(line):
    assert not any(p.search(line) for p in FORBIDDEN.values()), line


def test_tracked_files_cite_papers_and_stay_inside_the_repository():
    bad = offending_lines(tracked_files())
    assert not bad, (
        f"{len(bad)} line(s) point at something a reader of the repository cannot check; cite the paper (section, "
        "equation, table) or docs/, and find data through an option or an environment variable:\n" + "\n".join(bad)
    )
