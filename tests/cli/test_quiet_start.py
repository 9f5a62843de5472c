"""A new user's first run prints genlab's own lines, the progress bar and the summary, nothing else, even without
the optional sweep extra; a misspelt preset gets one line with the closest names."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Installed as sitecustomize in a subprocess: the sweep extra's modules cannot be imported, as after
# `pip install -e '.[data]'` (this test environment has them).
BLOCK_SWEEP_EXTRA = '''
import importlib.abc, sys
BLOCKED = ("hydra_plugins.hydra_optuna_sweeper", "optuna")
class _Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == BLOCKED[1] or name.startswith(BLOCKED[1] + ".") or name.startswith(BLOCKED[0]):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _Block())
'''

# genlab's own console lines (README "What a run prints"):
GENLAB_LOG = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+\]\[genlab(\.[\w.]+)?\]\[(INFO|WARNING)\] ")  # logger "genlab"
BAR = re.compile(r"^(Training|Steps|Validation|Validation DataLoader \d+|Testing|Testing DataLoader \d+):")
SUMMARY_HEAD = re.compile(r"^(\w+ finished|evaluated \S+ \(.*\))$")  # train's / eval's title, then "key = value"
SUMMARY_LINE = re.compile(r"^\s*[\w/. -]+ = \S|^ {19}\S")  # "key = value", or a file the run wrote

TINY = ["model.n_layer=1", "model.d_model=32", "model.n_head=2", "model.d_head=16", "model.d_inner=64",
        "model.mem_len=16", "data.batch_size=4", "data.tgt_len=16", "data.eval_batch_size=4",
        "trainer.limit_val_batches=2", "trainer.limit_test_batches=2", "trainer.val_check_interval=2"]


def _env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "site").mkdir(exist_ok=True)
    (tmp_path / "site" / "sitecustomize.py").write_text(BLOCK_SWEEP_EXTRA)
    path = os.pathsep.join([str(tmp_path / "site"), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "GENLAB_OFFLINE": "1", "GENLAB_LOGS": str(tmp_path / "outputs"),
            "OMP_NUM_THREADS": "1"}


def _run(tmp_path: Path, *args: str, script: str = "train.py") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / script), *args], cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=600)


def foreign_lines(output: str) -> list[str]:
    """Lines that are not genlab's: not its logger's, not a progress bar's, not the final summary's."""
    foreign, in_summary = [], False
    for raw in re.split(r"[\r\n]", output):
        line = raw.replace("\x1b[A", "").strip("\x1b").rstrip()
        if not line.strip():
            continue
        if SUMMARY_HEAD.match(line):
            in_summary = True
            continue
        if GENLAB_LOG.match(line) or BAR.match(line.lstrip()) or (in_summary and SUMMARY_LINE.match(line)):
            continue
        foreign.append(line)
    return foreign


def test_foreign_lines_are_caught():
    out = "[2026-01-01 00:00:00,000][genlab][INFO] model X\nSteps: 100%|##| 3/3\nGPU available: False\n"
    assert foreign_lines(out) == ["GPU available: False"]


def test_sweep_plugin_imports_cleanly_without_the_sweep_extra(tmp_path):
    probe = ("from hydra.core.plugins import Plugins; from hydra.plugins.sweeper import Sweeper; "
             "names = [p.__name__ for p in Plugins.instance().discover(Sweeper)]; print(names)")
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=_env(tmp_path), capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "Error importing" not in result.stderr + result.stdout
    assert "ResumableOptunaSweeper" in result.stdout  # the stand-in, which names the extra when a sweep asks


def test_hydra_start_up_leaves_optuna_to_a_sweep(tmp_path):
    """Hydra imports every plugin module at every start-up (train.py, eval.py, compose): the sweeper is found
    there, but optuna (~3 CPU s to import) is imported only when a sweep sets the sweeper up."""
    probe = ("import sys; from hydra.core.plugins import Plugins; from hydra.plugins.sweeper import Sweeper; "
             "names = [p.__name__ for p in Plugins.instance().discover(Sweeper)]; "
             "print('ResumableOptunaSweeper' in names, 'optuna' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.stdout.split() == ["True", "False"], result.stderr[-3000:]


def test_quickstart_prints_only_genlab_lines_bar_and_summary(tmp_path):
    run_dir = tmp_path / "run"
    result = _run(tmp_path, "trainer.max_steps=3", *TINY, f"hydra.run.dir={run_dir}")
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    assert foreign_lines(output) == []
    assert "Steps: 100%" in output and "3/3" in output  # steps of max_steps, not "Epoch 0/-2"
    assert "Epoch" not in output
    assert "txl_mini finished" in result.stdout and "test/ppl" in result.stdout


def test_misspelt_preset_names_the_closest_in_a_short_error(tmp_path):
    result = _run(tmp_path, "experiment=txl_mni")
    assert result.returncode == 2
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert len(lines) <= 3, lines
    assert "did you mean txl_mini" in result.stderr
    assert not (tmp_path / "outputs").exists()


def test_sweep_without_the_extra_names_the_install_command(tmp_path):
    probe = ("import sys\nfrom hydra_plugins.genlab_sweeper.resumable_optuna import ResumableOptunaSweeper\n"
             "try:\n    ResumableOptunaSweeper()\nexcept Exception as err:\n    print(type(err).__name__, err)\n")
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=_env(tmp_path), capture_output=True,
                            text=True, timeout=300)
    assert "ConfigError" in result.stdout and "pip install -e '.[sweep]'" in result.stdout
