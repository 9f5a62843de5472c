"""SQuAD answers from a span model's per-window scores: the best text of each question over its windows, the null
score that SQuAD 2.0's threshold compares (the minimum over a question's windows of the answer-class logit), and the
n-best list the prediction files hold."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from genlab.data.finetune.squad import SquadExample, SquadFeatures


def postprocess(examples: Iterable[SquadExample], feats: SquadFeatures, results: dict[str, np.ndarray],
                start_n_top: int = 5, end_n_top: int = 5, n_best: int = 5, max_answer_length: int = 64
                ) -> tuple[dict[str, str], dict[str, float], dict[str, list[dict[str, Any]]]]:
    """(best non-null text, null score = min over windows of the answer-class logit, n-best list) per question.

    ``results`` holds per-feature arrays: start_top_log_probs/start_top_index [F, k], end_top_log_probs/
    end_top_index [F, k·e] (flat i·e + j), cls_logits [F]."""
    preds, null, nbest = {}, {}, {}
    for ei, ex in enumerate(examples):  # in file order, as the windows (a stream of the file will do)
        para = feats.paragraphs[ei]
        cands, null_score = [], None
        w0 = int(feats.first_window[ei])
        for f in range(w0, w0 + int(feats.n_windows[ei])):
            win = feats.windows[f]
            c0, usable = win["ctx_start"], win["usable"]
            c = float(results["cls_logits"][f])
            null_score = c if null_score is None else min(null_score, c)
            for i in range(start_n_top):
                s = int(results["start_top_index"][f, i]) - c0  # sequence position -> window piece
                for j in range(end_n_top):
                    e = int(results["end_top_index"][f, i * end_n_top + j]) - c0
                    # only paragraph pieces; XLNet's official code also drops the window's last one (usable)
                    if s < 0 or s >= usable or e >= usable or e < s:
                        continue
                    if not win["max_context"][s] or e - s + 1 > max_answer_length:
                        continue
                    score = float(results["start_top_log_probs"][f, i]) + float(results["end_top_log_probs"][f, i * end_n_top + j])
                    a, b = win["offset"] + s, win["offset"] + e
                    cands.append((score, ex.context[para.char_start[a]:para.char_end[b]],
                                  float(results["start_top_log_probs"][f, i]),
                                  float(results["end_top_log_probs"][f, i * end_n_top + j])))
        cands.sort(key=lambda t: -t[0])
        seen, best = set(), []
        for score, text, slp, elp in cands:
            if text in seen:
                continue
            seen.add(text)
            best.append({"text": text, "score": score, "start_log_prob": slp, "end_log_prob": elp})
            if len(best) == n_best:
                break
        if best:
            z = np.exp(np.array([b["score"] for b in best]) - max(b["score"] for b in best))
            for b, pr in zip(best, z / z.sum()):
                b["probability"] = float(pr)
        preds[ex.qid] = best[0]["text"] if best else ""
        null[ex.qid] = 0.0 if null_score is None else null_score
        nbest[ex.qid] = best
    return preds, null, nbest
