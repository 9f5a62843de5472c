"""Presets inherit rather than copy: every `_mini` twin includes its paper preset, shared recipes live in base presets
(conf/experiment/base/), and every preset still composes to the config recorded in
tests/fixtures/presets_resolved.json (regenerate with ``python tests/presets_snapshot.py`` only for a deliberate
change, and say which presets it changes and why in the commit message)."""

from __future__ import annotations

import pytest
import torch
import yaml
from hydra.utils import instantiate
from omegaconf import OmegaConf

from presets_snapshot import EXPERIMENT_DIR, composed_preset, differences, flatten, load_fixture, preset_names

BASE_DIR = EXPERIMENT_DIR / "base"
NAMES = preset_names()
TWIN_SUFFIXES = ("_mini", "_midi")  # CPU twins of a paper preset: the mini (minutes) and the midi (a claim's size)
MINIS_WITH_PAPER = [n for n in NAMES if n.endswith(TWIN_SUFFIXES) and n[:-5] in NAMES]


@pytest.fixture(scope="module")
def fixture_configs():
    return load_fixture()


def included_presets(path) -> list[str]:
    """The experiment configs a preset's defaults list includes (``- name``, ``- base/name``,
    ``- /experiment/name@_here_`` ...), as paths relative to conf/experiment (an entry of a base preset is relative to
    base/); group overrides are not includes."""
    defaults = yaml.safe_load(path.read_text()).get("defaults", [])
    names = []
    for entry in defaults:
        if not isinstance(entry, str) or entry == "_self_":
            continue
        name = entry.split("@")[0]
        if name.startswith("/"):
            assert name.startswith("/experiment/"), f"{path.name}: {entry!r} is not an experiment config"
            name = name.removeprefix("/experiment/")
        elif path.parent == BASE_DIR:
            name = f"base/{name}"
        names.append(name)
    return names


def test_fixture_lists_every_preset(fixture_configs):
    assert sorted(fixture_configs) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_preset_composes_as_recorded(name, fixture_configs):
    if name not in fixture_configs:
        pytest.fail(f"experiment={name} is new: record it with python tests/presets_snapshot.py")
    diff = differences(fixture_configs[name], composed_preset(name))
    assert not diff, (f"experiment={name} composes differently from tests/fixtures/presets_resolved.json "
                      "(first differing keys):\n" + "\n".join(diff))


@pytest.mark.parametrize("name", MINIS_WITH_PAPER)
def test_mini_includes_its_paper_preset(name):
    assert name[:-5] in included_presets(EXPERIMENT_DIR / f"{name}.yaml")


def test_mos_midi_and_its_softmax_twin_have_equal_size(compose_cfg):
    """The softmax-bottleneck comparison holds the parameter count fixed (Dai's thesis Table A.5: MoS
    trades d for K)."""
    def size(name):
        with torch.device("meta"):
            model = instantiate(compose_cfg([f"experiment={name}"]).model, vocab_size=5000)  # the PTB-format mini
        return sum(p.numel() for p in model.parameters()), model.emsize

    (mos, d_mos), (softmax, d_softmax) = size("mos_ptb_midi"), size("mos_ptb_softmax_moshp_midi")
    assert d_mos < d_softmax and abs(mos - softmax) / softmax < 0.005


XLNET_ROW4 = "xlnet_base_bert_comparable"
XLNET_MIDI_ROWS = [n.removesuffix("_midi") for n in NAMES if n.startswith("xlnet_ablation_") and n.endswith("_midi")]


@pytest.mark.parametrize("row", XLNET_MIDI_ROWS)
def test_xlnet_ablation_midi_changes_what_its_paper_row_changes(row, fixture_configs):
    """[XLNet v1 Table 6] rows 2, 3, 5-8 each change one knob of row 4: at midi size a row changes the same keys of
    row 4's midi, and to the same values except K = 7's prediction count, which scales with T (floor(T / 7))."""
    def changed(name, base):
        a, b = flatten(fixture_configs[name]), flatten(fixture_configs[base])
        return {k: a.get(k) for k in a.keys() | b.keys() if a.get(k, "<absent>") != b.get(k, "<absent>")}

    paper, midi = changed(row, XLNET_ROW4), changed(f"{row}_midi", f"{XLNET_ROW4}_midi")
    assert sorted(midi) == sorted(paper) and paper
    seq_len = fixture_configs[f"{row}_midi"]["data"]["seq_len"]
    scaled = {"data.num_predict": seq_len // 7}
    assert {k: v for k, v in midi.items() if paper[k] != v} == {k: scaled[k] for k in midi if paper[k] != midi[k]}


def test_every_base_preset_is_used_and_is_not_runnable():
    """A base preset lives only under base/ (so tests/test_experiments.py does not run it alone) and something
    includes it."""
    bases = sorted(p.stem for p in BASE_DIR.glob("*.yaml"))
    assert bases, "no base presets found"
    used = {name for path in [*EXPERIMENT_DIR.glob("*.yaml"), *BASE_DIR.glob("*.yaml")]
            for name in included_presets(path)}
    assert [b for b in bases if f"base/{b}" not in used] == []
    assert sorted(set(bases) & set(NAMES)) == [], "a base preset must not share a runnable preset's name"


def test_command_line_overrides_win_over_an_inherited_mini(compose_cfg):
    """`experiment=<mini>` keeps the mini's values over its paper preset's, and command-line overrides change exactly
    the keys they name."""
    def flat(overrides):
        return flatten(OmegaConf.to_container(compose_cfg(["experiment=xlnet_cola_mini", *overrides]), resolve=False))

    plain, overridden = flat([]), flat(["model.n_layer=6", "trainer.max_steps=7"])
    assert plain["model.n_layer"] != 6 and plain["trainer.max_steps"] != 7
    assert {k: v for k, v in overridden.items() if plain.get(k) != v} == {"model.n_layer": 6, "trainer.max_steps": 7}
    assert plain["data.source"] == "mini" and plain["task.init_from"] is None


STREAMING_DATA = ("PretrainDataModule", "GPTPretrainDataModule", "LMDataModule", "BPTTDataModule")


def test_pretraining_presets_expose_loader_options_and_minis_stay_in_process(fixture_configs):
    """Paper presets of the pretraining / LM families load ahead of the GPU (workers, pinned, persistent; a resume
    with workers is bit-exact: tests/tasks/test_gpt_resume.py); CPU-sized minis and midis stay single-process
    (recorded compositions: no composing)."""
    checked = 0
    for name, cfg in fixture_configs.items():
        data = cfg.get("data") or {}
        if not str(data.get("_target_", "")).endswith(STREAMING_DATA) or not name.startswith(
                ("xlnet_", "bert_", "gpt_", "funnel_", "txl_", "mos_")):
            continue
        checked += 1
        if name.endswith(("_mini", "_midi")):
            assert data.get("num_workers", 0) == 0, name  # the data module default is 0
        else:
            assert data["num_workers"] >= 2 and data["pin_memory"] and data["persistent_workers"], name
    assert checked > 100
