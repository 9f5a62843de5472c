"""Zero-shot behaviours of a pretrained GPT LM (Radford et al. 2018, §5 "Zero-shot Behaviors",
Figure 2 right):
heuristic task solvers that read only the LM's next-token probabilities, applied to checkpoints taken during
pretraining, to see whether the generative objective learns task-relevant functionality as it trains.

* **SST-2**: append the token "very" to the sentence and compare the LM's probability of " positive" and
  " negative" next (a word of several pieces scores the sum of their log-probabilities).
* **CoLA**: the sentence's average token log-probability; "acceptable" above a threshold, chosen to maximise the
  Matthews correlation on training sentences (the paper does not say how it thresholds; our choice), scored on dev.
* **RACE** / **Story Cloze**: the option / ending with the highest average token log-probability conditioned on
  the document and question / the story.
* DPRD (Winograd-style pronouns) is not run: no offline copy of the data.

Scores are the task metric (accuracy, MCC) and, as in the figure, normalised between random guessing (0) and a
reference score (1; the paper's single-model state of the art at full scale, given by the caller). The LM softmax
is over the ordinary tokens only (no finetuning specials). Inputs longer than the context keep their end.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from genlab import checkpoints
from genlab.data.tokenizers.gpt_bpe import GPTTokenizer, load_gpt_tokenizer
from genlab.errors import CheckpointError
from genlab.models.gpt import GPTLMHeadModel

CHANCE = {"sst2": 0.5, "cola": 0.0, "race": 0.25, "story_cloze": 0.5}


def load_lm(ckpt: str | Path) -> tuple[GPTLMHeadModel, GPTTokenizer, int]:
    """(model in eval mode, its tokenizer, the checkpoint's global step) from a genlab GPT pretraining ``.ckpt``."""
    state = checkpoints.load(ckpt)
    record = state.get("genlab", {})
    cfg = dict(record.get("config", {}).get("model", {}))
    if cfg.pop("_target_", "").rsplit(".", 1)[-1] != "GPTLMHeadModel":
        raise CheckpointError(f"{ckpt} is not a GPT pretraining checkpoint (its model is {cfg or 'unknown'}).")
    vocab = record.get("data_identity", {}).get("vocab_size") or cfg.pop("vocab_size")
    cfg.pop("vocab_size", None)
    model = GPTLMHeadModel(vocab_size=vocab, **cfg)
    model.load_state_dict({k[len("model."):]: v for k, v in state["state_dict"].items() if k.startswith("model.")})
    return model.eval(), load_gpt_tokenizer(ckpt), int(state.get("global_step", 0))


@torch.no_grad()
def continuation_logprob(model: GPTLMHeadModel, prefix: Sequence[int], continuation: Sequence[int]) -> tuple[float, int]:
    """(sum of log p(continuation tokens | prefix, earlier continuation tokens), number of those tokens). The
    prefix loses its start when the whole does not fit the context; an empty prefix scores from the 2nd token."""
    n_ctx = model.transformer.n_positions
    ids = [*prefix, *continuation][-n_ctx:]
    n_cont = min(len(continuation), len(ids) - 1)
    if n_cont <= 0:
        return 0.0, 0
    x = torch.tensor(ids)[None]
    hidden = model(x).hidden[0, -n_cont - 1:-1]
    logp = F.log_softmax(model.lm_logits(hidden, special_rows=False).float(), -1)
    return float(logp.gather(1, x[0, -n_cont:, None]).sum()), n_cont


def average_logprob(model: GPTLMHeadModel, prefix: Sequence[int], continuation: Sequence[int]) -> float:
    total, n = continuation_logprob(model, prefix, continuation)
    return total / n if n else -math.inf


def mcc(pred: np.ndarray, gold: np.ndarray) -> float:
    tp, tn = float(np.sum(pred & gold)), float(np.sum(~pred & ~gold))
    fp, fn = float(np.sum(pred & ~gold)), float(np.sum(~pred & gold))
    den = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return (tp * tn - fp * fn) / den if den else 0.0


# ------------------------------------------------------------------------------------------------ heuristics
def sst2(model: GPTLMHeadModel, tok: GPTTokenizer, texts: Sequence[str], labels: Sequence[int]) -> float:
    """Accuracy of "<sentence> very" -> p(positive) vs p(negative); labels 1 = positive."""
    pos, neg = tok.encode("x positive")[len(tok.encode("x")):], tok.encode("x negative")[len(tok.encode("x")):]
    correct = 0
    for text, y in zip(texts, labels):
        prefix = tok.encode(f"{text} very")
        correct += int((continuation_logprob(model, prefix, pos)[0] > continuation_logprob(model, prefix, neg)[0])
                       == bool(y))
    return correct / len(texts)


def cola(model: GPTLMHeadModel, tok: GPTTokenizer, train: tuple[Sequence[str], Sequence[int]],
         dev: tuple[Sequence[str], Sequence[int]]) -> float:
    """MCC on dev of "average log-probability above a threshold" (threshold fitted on ``train``)."""
    def scores(texts):
        return np.array([average_logprob(model, [], tok.encode(t)) for t in texts])

    s_train, y_train = scores(train[0]), np.asarray(train[1], dtype=bool)
    candidates = np.unique(s_train)
    best = max(candidates, key=lambda c: mcc(s_train >= c, y_train))
    return mcc(scores(dev[0]) >= best, np.asarray(dev[1], dtype=bool))


def multiple_choice(model: GPTLMHeadModel, tok: GPTTokenizer, contexts: Sequence[str],
                    options: Sequence[Sequence[str]], labels: Sequence[int]) -> float:
    """Accuracy of argmax over options of the average log-probability of the option given the context."""
    correct = 0
    for ctx, opts, y in zip(contexts, options, labels):
        prefix = tok.encode(ctx)
        scores = [average_logprob(model, prefix, tok.encode(o)) for o in opts]
        correct += int(int(np.argmax(scores)) == y)
    return correct / len(contexts)


@dataclass
class ZeroShotRow:
    checkpoint: str
    step: int
    task: str
    metric: str
    score: float
    normalised: float | None  # (score − chance) / (reference − chance) when a reference is given


def normalise(task: str, score: float, reference: float | None) -> float | None:
    if reference is None:
        return None
    return (score - CHANCE[task]) / (reference - CHANCE[task])
