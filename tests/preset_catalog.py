"""The preset catalogue, ``docs/presets.md``: every runnable preset of ``conf/experiment/`` with what it reproduces,
its ``_mini``/``_midi`` twins, the model's key sizes, its data and the ``experiments/`` records that name it.

Built from what the presets already say, so it cannot drift from them: the configs come from the resolved-preset
snapshot (``tests/fixtures/presets_resolved.json``, which ``tests/test_presets.py`` keeps equal to what every preset
composes to), "reproduces" is the first sentence of the preset's header comment (CONTRIBUTING: every paper preset
names the table it reproduces there), and the records are the ``experiments/<table>/README.md`` files that mention
the preset. ``python tests/presets_snapshot.py`` rewrites it with the snapshot; ``python tests/preset_catalog.py``
rewrites it alone; ``tests/test_preset_catalog.py`` fails when it is stale.
"""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path

from genlab.utils import atomic_write
from presets_snapshot import EXPERIMENT_DIR, load_fixture

ROOT = EXPERIMENT_DIR.parents[1]
CATALOGUE = ROOT / "docs" / "presets.md"
TWIN_SUFFIXES = ("_mini", "_midi")
# name prefix -> the system's section and its page under docs/systems/ (PixelCNN++ is bad GAN's density model)
SYSTEMS = [
    ("Transformer-XL", ("txl_", "vanilla_"), "transformer_xl.md"),
    ("XLNet", ("xlnet_",), "xlnet.md"),
    ("BERT (XLNet's baseline)", ("bert_",), "xlnet.md"),
    ("Funnel-Transformer", ("funnel_",), "funnel.md"),
    ("GPT-1", ("gpt_",), "gpt.md"),
    ("AWD-LSTM-MoS", ("mos_",), "mos.md"),
    ("bad GAN (and its PixelCNN++ density model)", ("bad_gan_", "pixelcnn_"), "bad_gan.md"),
    ("CEGAN", ("cegan_",), "cegan.md"),
    ("GDAN", ("gdan_",), "gdan.md"),
    ("Planetoid", ("planetoid_",), "planetoid.md"),
]
# the sizes that say how big a model is, in the order shown; searched in the model node and one level below it
SIZE_KEYS = ("n_layer", "nlayers", "num_layers", "block_sizes", "d_model", "n_embd", "emsize", "nhid", "nhidlast",
             "hidden", "n_head", "d_inner", "n_inner", "n_experts", "n1", "n2", "z_dim", "n_filters", "n_resnet",
             "embedding_size", "embed_dim", "enc_hidden", "dec_hidden")
MAX_REPRODUCES = 220  # characters of the header sentence shown


def header_sentence(path: Path) -> str:
    """The first sentence of the comment block at the top of a preset (after ``# @package _global_``)."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        if "@package" not in line:
            lines.append(line.lstrip("#").strip())
    text = " ".join(lines)
    end = re.search(r"(?<!\bal)(?<!e\.g)(?<!i\.e)(?<!\bvs)\.(\s|$)", text)  # not "et al." or "e.g."
    sentence = text[: end.start() + 1] if end else text
    if len(sentence) > MAX_REPRODUCES:
        sentence = sentence[: MAX_REPRODUCES].rsplit(" ", 1)[0] + " ..."
    # shown as written: outside `code`, no HTML tags, emphasis or link references; no cell breaks anywhere
    parts = sentence.replace("|", "/").split("`")
    for i in range(0, len(parts), 2):
        parts[i] = re.sub(r"([*\[\]_])", r"\\\1", html.escape(parts[i], quote=False))
    return "`".join(parts)


def model_size(model: dict) -> str:
    """``key value`` for each size key of the model node (and of its sub-models, prefixed with their name)."""
    def sizes(node: dict, prefix: str = "") -> list[str]:
        return [f"{prefix}{k} {_show(node[k])}" for k in SIZE_KEYS if k in node and node[k] is not None]

    shown = sizes(model)
    for name, node in model.items():
        if isinstance(node, dict):
            shown += sizes(node, f"{name}.")
    return ", ".join(shown) or "-"


def _show(value) -> str:
    return "x".join(map(str, value)) if isinstance(value, list) else str(value)


def data_of(data: dict) -> str:
    """The dataset (or finetuning task, or pretraining corpus) and its tier: ``data.source``; for pretraining corpora
    ``data.path`` (``corpus=text``: a folder you pass) or ``mini``; ``generated`` for the synthetic 2-D sets."""
    corpus = data.get("corpus")
    name = data.get("dataset") or data.get("task") or data.get("name") or (corpus and f"{corpus} corpus")
    name = name or data["_target_"].rsplit(".", 1)[-1].removesuffix("DataModule")
    source = data.get("source")
    if source is None:
        source = ("data.path" if corpus == "text" else "mini") if corpus else "generated"
    return f"{name} ({source})" if "${" not in str(source) else str(name)


def records(names: list[str]) -> dict[str, list[str]]:
    """preset -> the ``experiments/<table>/`` folders whose README.md names it."""
    words = {p.parent.name: {w.strip(".") for w in re.findall(r"[\w.]+", p.read_text())}
             for p in sorted((ROOT / "experiments").glob("*/README.md"))}
    return {name: [folder for folder, seen in words.items() if name in seen] for name in names}


def catalogue(configs: dict[str, dict]) -> str:
    names = sorted(configs)
    twins = {n for n in names if n.endswith(TWIN_SUFFIXES) and n[: -len("_mini")] in configs}
    mentioned = records(names)
    out = [
        "# Preset catalogue",
        "",
        f"Every runnable preset of `conf/experiment/` ({len(names)}, of which {len(twins)} are `_mini`/`_midi` "
        "twins), by system: `python train.py experiment=<preset>`. *Reproduces* is the first sentence of the "
        "preset's header comment; a twin includes its paper preset and changes only sizes, offline data and steps "
        "(see [Configs](platform/configs.md)). *Model* lists the key sizes of the paper preset (vocabulary sizes "
        "come from the data); *data* is the dataset and its tier (`data.source`, see [Data](platform/data.md)); "
        "*record* names the `experiments/<table>/` folders whose README runs it.",
        "",
        "Generated by `python tests/preset_catalog.py` from the resolved-preset snapshot; "
        "`tests/test_preset_catalog.py` fails when this page is stale. Do not edit it by hand.",
    ]
    for title, prefixes, page in SYSTEMS:
        rows = [n for n in names if n.startswith(prefixes) and n not in twins]
        out += ["", f"## {title}", "", f"System page: [{page.removesuffix('.md')}](systems/{page}).", "",
                "| preset | reproduces | twins | model | data | record |", "|---|---|---|---|---|---|"]
        for name in rows:
            cfg = configs[name]
            own_twins = [name + s for s in TWIN_SUFFIXES if name + s in configs]
            where = sorted({f for n in [name, *own_twins] for f in mentioned[n]})
            out.append(" | ".join([
                f"| `{name}`", header_sentence(EXPERIMENT_DIR / f"{name}.yaml"),
                ", ".join(f"`{t}`" for t in own_twins) or "-", model_size(cfg.get("model") or {}),
                data_of(cfg["data"]), ", ".join(f"`experiments/{f}/`" for f in where) or "-"]) + " |")
    listed = {n for _, prefixes, _ in SYSTEMS for n in names if n.startswith(prefixes)}
    assert listed == set(names), f"presets of no system (add their prefix to SYSTEMS): {sorted(set(names) - listed)}"
    return "\n".join(out) + "\n"


def write(configs: dict[str, dict]) -> None:
    with atomic_write(CATALOGUE, "w") as f:
        f.write(catalogue(configs))


def main() -> int:
    write(load_fixture())
    print(f"wrote {CATALOGUE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
