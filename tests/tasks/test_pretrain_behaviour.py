"""Small-scale behaviour of the permutation LM task (XLNet v1 §2.2), trained with plain loops on CPU."""

import functools

import torch
import torch.nn.functional as F

from genlab.data.pretrain.permutation import local_perm, prediction_slots, sample_ranks
from genlab.models.xlnet import XLNetLMHeadModel
from genlab.tasks.pretrain import PermutationLMTask

V, SEP = 20, 4


def _model(mem_len=0, attn_type="bi", seed=0):
    torch.manual_seed(seed)
    return XLNetLMHeadModel(V, n_layer=2, d_model=32, n_head=2, d_head=16, d_inner=64, dropout=0.0, dropatt=0.0,
                            mem_len=mem_len, attn_type=attn_type)


def _plm_batch(ids, is_masked, n_predict, g):
    ranks = sample_ranks(ids.shape[1], ids.shape[1], (ids.shape[0],), generator=g)
    pm = local_perm(ids, is_masked, ranks)
    slots = prediction_slots(ids, pm.is_target, n_predict)
    return {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "perm_mask": pm.perm_mask,
            "target_mapping": slots.target_mapping, "target": slots.target, "target_mask": slots.target_mask}


def _train(task, batches, steps, lr=3e-3):
    opt = torch.optim.Adam(task.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        loss, _ = task._objective(batches(step), train=True)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return sum(losses[-20:]) / 20


def test_c26_memory_helps_when_segments_copy_the_previous_one():
    """Each segment starts with the last C tokens of the previous segment (the targets): only memory can help."""
    B, T, C = 8, 12, 4
    is_masked = torch.zeros(B, T, dtype=torch.bool)
    is_masked[:, :C] = True
    final = {}
    for mem_len in (T, 0):
        g = torch.Generator().manual_seed(0)
        prev = [torch.randint(9, V, (B, T), generator=g)]

        def batches(step, g=g, prev=prev):
            cur = torch.randint(9, V, (B, T), generator=g)
            cur[:, :C] = prev[0][:, -C:]
            prev[0] = cur
            return _plm_batch(cur, is_masked, C, g)

        task = PermutationLMTask(_model(mem_len), functools.partial(torch.optim.Adam), reuse_len=T, mem_init="none")
        final[mem_len] = _train(task, batches, 150)
    assert final[T] < 0.5 < 2.0 < final[0], final  # log(11) = 2.40 without memory


def test_c25_permutation_lm_uses_right_context_a_left_to_right_lm_cannot():
    """Sequences [a_1..a_n <sep> a_1..a_n]: the first half is predictable only from the right."""
    B, n = 16, 8
    T = 2 * n + 1
    g = torch.Generator().manual_seed(0)

    def sequences():
        a = torch.randint(9, V, (B, n), generator=g)
        return torch.cat([a, torch.full((B, 1), SEP), a], 1)

    def plm_batches(step):  # K ≈ 2: a random half of the positions are targets
        ids = sequences()
        return _plm_batch(ids, torch.rand(B, T, generator=g) < 0.5, T, g)

    plm = PermutationLMTask(_model(), functools.partial(torch.optim.Adam), reuse_len=None, mem_init="none")
    _train(plm, plm_batches, 250)

    l2r = _model(attn_type="uni")  # left-to-right LM of the same size: position i predicts x_{i+1}
    opt = torch.optim.Adam(l2r.parameters(), lr=3e-3)
    for _ in range(100):
        ids = sequences()
        logits = l2r(ids, torch.zeros_like(ids)).logits
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()

    with torch.no_grad():
        ids = sequences()
        first_half = torch.zeros(B, T, dtype=torch.bool)
        first_half[:, :n] = True
        plm.model.eval()
        plm_ce, _ = plm._objective(_plm_batch(ids, first_half, n, g), train=False)
        logits = l2r.eval()(ids, torch.zeros_like(ids)).logits
        l2r_ce = F.cross_entropy(logits[:, : n - 1].reshape(-1, V), ids[:, 1:n].reshape(-1))
    assert plm_ce < 0.3, plm_ce
    assert l2r_ce > 2.0, l2r_ce  # ≈ log(11) = 2.40: random tokens with no right context
