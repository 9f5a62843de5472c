"""GDAN through ``train.py`` as a user runs it: bad input is one clear message and exit 2 (a SQuAD file without a
usable answer, an unlabelled file without answers, a labelling rate outside (0, 0.9]); a run killed with SIGKILL after
its first checkpoint resumes with ``ckpt_path=`` to exactly the weights of an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from genlab.data.qa.synthetic import build_synthetic

ROOT = Path(__file__).resolve().parents[2]
TINY = ["data.mini=synthetic", "model.reader.embed_dim=8", "model.reader.hidden=4", "model.generator.embed_dim=8",
        "model.generator.enc_hidden=4", "model.generator.dec_hidden=8", "model.generator.max_question_len=6",
        "data.batch_size=4", "data.unlabeled_batch_size=4", "data.eval_batch_size=64", "logger=csv",
        "trainer.enable_progress_bar=false"]


def env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "GENLAB_OFFLINE": "1", "WANDB_MODE": "disabled", "GENLAB_LOGS": str(tmp_path / "outputs"),
            "GENLAB_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}


def train(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "train.py"), *args], cwd=tmp_path, env=env(tmp_path),
                          capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture(scope="module")
def squad_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("squad")
    build_synthetic(root, train_articles=10, dev_articles=2, unlabeled_paragraphs=20)
    return root


def copy_squad(src: Path, dst: Path, break_answers: bool = False, unlabeled: list[dict] | None = None) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    train = json.loads((src / "train-v1.1.json").read_text())
    if break_answers:
        for art in train["data"]:
            for para in art["paragraphs"]:
                for qa in para["qas"]:
                    qa["answers"][0]["answer_start"] += 1
    (dst / "train-v1.1.json").write_text(json.dumps(train))
    (dst / "dev-v1.1.json").write_text((src / "dev-v1.1.json").read_text())
    if unlabeled is not None:
        (dst / "unlabeled.jsonl").write_text("".join(json.dumps(r) + "\n" for r in unlabeled))
    return dst


def test_squad_file_without_a_usable_answer_exits_2(tmp_path, squad_dir):
    data = copy_squad(squad_dir, tmp_path / "bad", break_answers=True)
    result = train(tmp_path, "experiment=gdan_squad_sl_mini", "data.source=path", f"data.path={data}")
    assert result.returncode == 2, result.stderr[-2000:]
    assert "no usable answers" in result.stderr and "train-v1.1.json" in result.stderr
    assert "Traceback" not in result.stderr


def test_unlabeled_file_without_answers_exits_2(tmp_path, squad_dir):
    rows = [{"id": "p0", "context": "Anna Berg was born in Oslo in 1850 .", "answers": []}]
    data = copy_squad(squad_dir, tmp_path / "unl", unlabeled=rows)
    result = train(tmp_path, "experiment=gdan_squad_context_mini", "data.source=path", f"data.path={data}")
    assert result.returncode == 2, result.stderr[-2000:]
    assert "unlabeled.jsonl has no usable answers" in result.stderr and "answer_start" in result.stderr


def test_labelling_rate_outside_the_protocol_exits_2(tmp_path):
    result = train(tmp_path, "experiment=gdan_squad_sl_mini", "data.label_rate=0.95")  # 0 and 1: test_qa_data.py
    assert result.returncode == 2, result.stderr[-2000:]
    assert "data.label_rate=0.95" in result.stderr and "(0, 0.9]" in result.stderr


def weights(ckpt: Path) -> dict[str, torch.Tensor]:
    return torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]


def test_sigkill_after_the_first_checkpoint_then_resume_equals_an_uninterrupted_run(tmp_path):
    run = ["experiment=gdan_squad_gen_domain_adv_mini", *TINY, "task.mle_steps=6", "trainer.max_steps=50",
           "trainer.val_check_interval=10", "test_after_fit=false"]
    full = train(tmp_path, *run, f"hydra.run.dir={tmp_path / 'full'}")
    assert full.returncode == 0, full.stderr[-3000:]

    killed_dir = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *run, f"hydra.run.dir={killed_dir}"],
                            cwd=tmp_path, env=env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    last = killed_dir / "checkpoints" / "last.ckpt"
    deadline = time.time() + 300
    while not last.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    step = torch.load(last, map_location="cpu", weights_only=True)["global_step"]
    assert 0 < step < 50

    resumed = train(tmp_path, *run, f"ckpt_path={last}", f"hydra.run.dir={tmp_path / 'resumed'}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a = torch.load(tmp_path / "full" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    b = torch.load(tmp_path / "resumed" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert a["global_step"] == b["global_step"] == 50
    assert a["state_dict"].keys() == b["state_dict"].keys()
    for name, tensor in a["state_dict"].items():
        assert torch.equal(tensor, b["state_dict"][name]), name
    assert a["gdan"]["counts"] == b["gdan"]["counts"] and a["gdan"]["counts"]["g"] > 0
