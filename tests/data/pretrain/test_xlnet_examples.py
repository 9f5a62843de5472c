"""XLNet pretraining examples: span sampler (XLNet v1 §3.1), example layout and
streams (the released data_utils.py), bi_data rows."""

import numpy as np
import pytest
import torch

from genlab.data.pretrain.corpus import TokenStream
from genlab.data.pretrain.datamodule import PretrainBatches
from genlab.data.pretrain.mlm_examples import MaskingConfig
from genlab.data.pretrain.permutation import (
    content_mask,
    local_perm,
    plm_dense_inputs,
    prediction_slots,
    sample_ranks,
    two_half_perm_mask,
)
from genlab.data.pretrain.xlnet_examples import (
    CLS_ID,
    SEP_ID,
    SpanConfig,
    XLNetDataConfig,
    build_segments,
    example_rng,
    sample_example_targets,
    sample_spans,
    sample_targets,
    split_a_and_b,
    steps_per_pass,
    stream_rows,
)
from genlab.data.tokenizers.xlnet_pieces import word_start_table

V = 60
# ids 9..59: even ids start a word ("▁x"), odd ids continue one; a few punctuation pieces
PIECES = ["<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>"] + [
    ("▁w%d" if i % 2 == 0 else "c%d") % i for i in range(9, V)
]
PIECES[11], PIECES[13], PIECES[15] = ".", "'", "="
WORD_START = word_start_table(PIECES)


def _ids(n, seed=0, start_share=0.5):
    rng = np.random.default_rng(seed)
    starts = np.flatnonzero(WORD_START[9:]) + 9
    rest = np.flatnonzero(~WORD_START[9:]) + 9
    return np.where(rng.random(n) < start_share, rng.choice(starts, n), rng.choice(rest, n))


def _spans(mask):
    edges = np.flatnonzero(np.diff(np.r_[0, mask.astype(int), 0]))
    return list(zip(edges[::2], edges[1::2]))


def test_word_start_table_rules():
    assert WORD_START[3] and WORD_START[4]  # "<cls>", "<sep>" start with "<"
    assert WORD_START[11]  # "."
    assert not WORD_START[13] and not WORD_START[15]  # apostrophe and "=" are not word starts
    assert WORD_START[10] and not WORD_START[9]


def test_c15_exact_counts_contiguous_spans_at_word_starts():
    cfg = SpanConfig()
    ids = np.stack([_ids(256, seed) for seed in range(40)])
    for goal in (43, 42):
        mask = sample_targets(ids, WORD_START, goal, np.random.default_rng(goal), cfg)
        assert (mask.sum(1) == goal).all()
    # the batched span phase equals the one-row walk below fed the same draws, row by row
    rng = np.random.default_rng(1)
    lengths = rng.choice(np.arange(1, 6), size=(len(ids), 43), p=cfg.length_probs())
    offsets = rng.random((len(ids), 43))
    mask, count, used = sample_spans(WORD_START[ids], 43, lengths, offsets, cfg)
    for row in range(len(ids)):
        spans, n_used = _span_phase(ids[row], 43, lengths[row], offsets[row], cfg)
        want = np.zeros(256, dtype=bool)
        for beg, end in spans:
            want[beg:end] = True
            assert 1 <= end - beg <= 5 and WORD_START[ids[row, beg]] and end < 256
        np.testing.assert_array_equal(mask[row], want)
        assert count[row] == want.sum() and used[row].sum() == n_used and used[row, :n_used].all()


def _span_phase(ids, goal, lengths, offsets, cfg):
    """Independent one-row transcription of the official walk (pieces unit) on given draws: span k has length
    lengths[k] (capped), left = floor(offsets[k] * ctx). Returns the kept spans and the number of draws used."""
    starts = WORD_START[ids]
    n_len, cur, count, spans, k = len(ids), 0, 0, [], 0
    while cur < n_len and count < goal:
        n = min(int(lengths[k]), goal - count)
        ctx = n * cfg.alpha // cfg.beta
        left = int(offsets[k] * ctx)
        k += 1
        beg = cur + left
        while beg < n_len and not starts[beg]:
            beg += 1
        if beg >= n_len or beg + n >= n_len:
            break
        spans.append((beg, beg + n))
        count += n
        cur = beg + n + ctx - left
    return spans, k


def test_c15_length_distribution_before_the_cap():
    drawn = []
    ids = np.stack([_ids(256, seed) for seed in range(400)])
    sample_targets(ids, WORD_START, 43, np.random.default_rng(0), SpanConfig(), drawn=drawn)
    freq = np.bincount(drawn, minlength=6)[1:] / len(drawn)
    expected = (1 / np.arange(1, 6)) / (1 / np.arange(1, 6)).sum()
    assert len(drawn) > 6000
    np.testing.assert_allclose(freq, expected, atol=0.02)


def test_c15_span_statistics_match_the_sequential_sampler():
    """Same distribution as the former one-row sampler (a fresh generator call per draw): mean targets from spans,
    spans per half and span length agree within sampling error over 400 halves of 256 pieces."""
    cfg, goal = SpanConfig(), 43
    ids = np.stack([_ids(256, seed) for seed in range(400)])
    mask, count, used = sample_spans(WORD_START[ids], goal, *_draws(np.random.default_rng(0), len(ids), goal, cfg),
                                     cfg)
    rng = np.random.default_rng(1)
    ref = [_span_phase(row, goal, *[d[0] for d in _draws(rng, 1, goal, cfg)], cfg)[0] for row in ids]
    new_spans = [_spans(m) for m in mask]
    for stat in (lambda spans: sum(e - b for b, e in spans), len):
        new, old = np.array([stat(s) for s in new_spans]), np.array([stat(s) for s in ref])
        assert abs(new.mean() - old.mean()) < 4 * np.sqrt((new.var() + old.var()) / len(ids)), stat
    np.testing.assert_array_equal(count, mask.sum(1))


def _draws(rng, n_rows, goal, cfg):
    return rng.choice(np.arange(1, cfg.max_len + 1), size=(n_rows, goal), p=cfg.length_probs()), \
        rng.random((n_rows, goal))


def test_c15_reverse_is_mirror_of_forward_on_flipped_sequence():
    ids = np.stack([_ids(128, 3), _ids(128, 4)])
    fwd = sample_targets(ids, WORD_START, 21, np.random.default_rng(5), SpanConfig())
    bwd = sample_targets(ids[:, ::-1], WORD_START, 21, np.random.default_rng(5), SpanConfig(), reverse=True)
    np.testing.assert_array_equal(bwd, fwd[:, ::-1])
    mixed = sample_targets(np.stack([ids[0], ids[1, ::-1]]), WORD_START, 21, np.random.default_rng(5), SpanConfig(),
                           reverse=np.array([False, True]))
    np.testing.assert_array_equal(mixed, np.stack([fwd[0], fwd[1, ::-1]]))


def test_c15_spans_disabled_gives_isolated_random_positions():
    ids = np.repeat(_ids(256, 1)[None], 50, axis=0)
    mask = sample_targets(ids, WORD_START, 43, np.random.default_rng(0), SpanConfig(enabled=False))
    assert (mask.sum(1) == 43).all()
    runs = [e - b for m in mask for b, e in _spans(m)]
    # uniform random positions: runs of >= 2 only by chance (far fewer than with spans)
    assert np.mean(np.array(runs) == 1) > 0.7
    # every free position equally likely: each position's share of 2000 draws is near 43/256
    share = sample_targets(np.repeat(ids[:1], 2000, axis=0), WORD_START, 43, np.random.default_rng(1),
                           SpanConfig(enabled=False)).mean(0)
    assert np.abs(share - 43 / 256).max() < 0.045


def test_word_unit_covers_whole_words():
    ids = np.stack([_ids(256, 2, start_share=0.3), _ids(256, 3, start_share=0.3)])
    mask = sample_targets(ids, WORD_START, 43, np.random.default_rng(0), SpanConfig(unit="word"))
    assert (mask.sum(1) == 43).all()
    cfg = SpanConfig(unit="word")
    lengths, offsets = _draws(np.random.default_rng(0), len(ids), 43, cfg)
    spans, _, _ = sample_spans(WORD_START[ids], 43, lengths, offsets, cfg)
    for row, m in zip(ids, spans):  # every span of the span phase is whole words: it starts and ends at a word start
        assert _spans(m)
        for beg, end in _spans(m):
            assert WORD_START[row[beg]] and WORD_START[row[end]]


def _stream(n_tokens, seed=0, sentence=7):
    tokens = _ids(n_tokens, seed).astype(np.int32)
    sent = ((np.arange(n_tokens) // sentence) % 2).astype(np.uint8)
    return tokens, sent


def test_split_a_and_b_label_and_length_rules():
    tok, sid = _stream(3000)
    seen = set()
    for seed in range(200):
        pair = split_a_and_b(sid, 100, 53, np.random.default_rng(seed))
        seen.add(pair.label)
        assert (pair.a_end - pair.a_begin) + (pair.b_end - pair.b_begin) == 53
        assert pair.a_begin == 100 and pair.a_end > pair.a_begin
        if pair.label == 1:  # B starts at the chosen cut point; A may have been cut from its right end
            assert pair.a_end <= pair.b_begin < 100 + 53 and sid[pair.b_begin] != sid[pair.b_begin - 1]
            assert pair.b_begin - pair.a_end <= max(0, (pair.b_begin - 100) - (pair.b_end - pair.b_begin))
    assert seen == {0, 1}
    assert split_a_and_b(sid, 3000 - 53, 53, np.random.default_rng(0)) is None
    assert all(split_a_and_b(sid, 100, 53, np.random.default_rng(s), random_b_prob=0.0).label == 1 for s in range(20))


def test_c16_example_layout_and_stream_continuity():
    cfg = XLNetDataConfig(seq_len=64, reuse_len=32, perm_size=32, num_predict=10)
    tok, sid = _stream(5000)
    prev_end = None
    for step in range(5):
        rng = example_rng(0, 0, step, 0, 0)
        ids, seg, label = build_segments(tok, sid, step, cfg, rng)
        assert ids.shape == (64,) and seg.shape == (64,)
        np.testing.assert_array_equal(ids[:32], tok[step * 32 : step * 32 + 32])
        assert ids[-1] == CLS_ID and ids[-2] == SEP_ID and (ids == SEP_ID).sum() == 2
        first_sep = int(np.flatnonzero(ids == SEP_ID)[0])
        assert (seg[: first_sep + 1] == 0).all() and (seg[first_sep + 1 : -1] == 1).all() and seg[-1] == 2
        np.testing.assert_array_equal(ids[32:first_sep], tok[64 + step * 32 - 32 : 64 + step * 32 - 32 + first_sep - 32])
        a_end = step * 32 + first_sep  # stream position after A
        if label == 1:  # B is the stream from a sentence boundary at or after A's end
            b = ids[first_sep + 1 : -2]
            starts = [x for x in range(a_end, a_end + 30) if np.array_equal(tok[x : x + len(b)], b)]
            assert starts and sid[starts[0]] != sid[starts[0] - 1]
        if prev_end is not None:
            assert step * 32 == prev_end  # the row continues where the last reuse part ended
        prev_end = step * 32 + 32
    assert steps_per_pass(5000, cfg) == (5000 - 32 - 29 - 1) // 32 + 1


def test_c16_bi_data_rows_are_time_reversed_and_batch_is_fwd_then_bwd():
    tok, sid = _stream(4000)
    rows, sids, reverse = stream_rows(tok, sid, 4, bi_data=True)
    np.testing.assert_array_equal(rows[2], rows[0][::-1])
    np.testing.assert_array_equal(sids[3], sids[1][::-1])
    assert reverse.tolist() == [False, False, True, True]
    with pytest.raises(Exception, match="even"):
        stream_rows(tok, sid, 3, bi_data=True)
    # ranks own disjoint forward rows; rank 0 of 2 with batch 2 equals rows 0 of a single process with batch 4
    r0, _, _ = stream_rows(tok, sid, 2, True, rank=0, world=2)
    np.testing.assert_array_equal(r0[0], rows[0])


def test_plm_batch_targets_masks_and_slots():
    tok, sid = _stream(6000)
    cfg = XLNetDataConfig(seq_len=64, reuse_len=32, perm_size=32, num_predict=10)
    data = PretrainBatches(TokenStream(tok, sid), "plm", 4, cfg, MaskingConfig(), WORD_START, V, seed=0)
    b = data[(0, 2)]
    assert all(not torch.is_floating_point(v) or v.dim() < 3 for v in b.values() if torch.is_tensor(v))  # no [B,T,T]
    b = {**b, **plm_dense_inputs(b)}
    assert b["input_ids"].shape == (4, 64) and b["perm_mask"].shape == (4, 64, 64)
    assert b["target_mapping"].shape == (4, 10, 64)
    # targets never SEP/CLS; real slots map to their target ids in ascending position order
    ids = b["input_ids"]
    assert not b["is_target"][(ids == SEP_ID) | (ids == CLS_ID)].any()
    pos = b["target_mapping"].argmax(-1)
    real = b["target_mask"].bool()
    torch.testing.assert_close(ids.gather(1, pos)[real], b["target"][real])
    for r in range(4):
        p = pos[r][real[r]]
        assert (p[1:] > p[:-1]).all()
    # reuse half cannot see the non-reuse half; non-reuse sees all of the reuse half (content mask)
    c = content_mask(b["perm_mask"])
    assert (b["perm_mask"][:, :32, 32:] == 1).all() and (c[:, 32:, :32][~b["is_target"][:, None, :32].expand(-1, 32, -1)] == 0).all()
    # XLNet inputs never contain <mask>
    assert not (ids == 6).any()
    # rebuilding the same (pass, step) gives the same batch; another pass gives other permutations
    again = data[(0, 2)]
    torch.testing.assert_close(again["ranks"], b["ranks"])
    other = data[(1, 2)]
    assert not torch.equal(other["ranks"], b["ranks"])


@pytest.mark.parametrize(("seq_len", "reuse_len", "perm_size", "num_predict", "bi_data", "span"), [
    (64, 32, 32, 10, True, {}),  # K = 6
    (64, 16, 16, 21, False, {"max_len": 1}),  # unequal halves, K = 3, single-piece spans
    (64, 48, 8, 9, True, {"max_len": 3, "len_dist": "uniform", "unit": "word"}),  # K = 7, chunked permutation
    (32, 16, 16, 5, True, {"enabled": False}),  # no spans
])
def test_device_masks_equal_the_host_construction(seq_len, reuse_len, perm_size, num_predict, bi_data, span):
    """perm_mask and target_mapping built from the shipped integers equal the former host construction (per-half
    local_perm on the sampled is_masked + two_half_perm_mask, prediction_slots) on the same draws."""
    from genlab.data.pretrain.datamodule import PERMUTATION, TARGETS

    tok, sid = _stream(6000)
    cfg = XLNetDataConfig(seq_len, reuse_len, perm_size, num_predict, bi_data, span=SpanConfig(**span))
    data = PretrainBatches(TokenStream(tok, sid), "plm", 4, cfg, MaskingConfig(), WORD_START, V, seed=3)
    for item in ((0, 0), (2, 5)):
        b = data[item]
        ids = b["input_ids"]
        is_masked = torch.from_numpy(sample_example_targets(ids.numpy(), data.reverse, cfg, WORD_START,
                                                            data._rng(*item, 0, TARGETS)))
        gen = torch.Generator().manual_seed(int(data._rng(*item, 0, PERMUTATION).integers(2**62)))
        halves = []
        for sl in (slice(0, reuse_len), slice(reuse_len, seq_len)):
            n = sl.stop - sl.start
            halves.append(local_perm(ids[:, sl], is_masked[:, sl], sample_ranks(n, min(perm_size, n), (4,), gen)))
        is_target = torch.cat([h.is_target for h in halves], dim=1)
        slots = prediction_slots(ids, is_target, num_predict)
        dense = plm_dense_inputs(b)
        assert torch.equal(dense["perm_mask"], two_half_perm_mask(halves[0].perm_mask, halves[1].perm_mask))
        assert torch.equal(dense["target_mapping"], slots.target_mapping)
        assert torch.equal(b["is_target"], is_target) and torch.equal(b["target"], slots.target)
        assert torch.equal(b["target_mask"], slots.target_mask)
        assert torch.equal(b["ranks"], torch.cat([h.ranks for h in halves], dim=1))


def test_offline_per_pass_repeats_targets_modulo_num_passes():
    tok, sid = _stream(6000)
    cfg = XLNetDataConfig(seq_len=64, reuse_len=32, perm_size=32, num_predict=10, targets_sampling="offline_per_pass",
                          num_passes=2)
    data = PretrainBatches(TokenStream(tok, sid), "plm", 2, cfg, MaskingConfig(), WORD_START, V, seed=0)
    torch.testing.assert_close(data[(0, 1)]["is_target"], data[(2, 1)]["is_target"])
    assert not torch.equal(data[(0, 1)]["ranks"], data[(2, 1)]["ranks"])


def test_pass_sampler_walks_passes_in_order_and_resumes_mid_pass():
    from genlab.data.pretrain.datamodule import PassSampler

    s = PassSampler(3)
    assert list(s) == [(0, 0), (0, 1), (0, 2)] and list(s) == [(1, 0), (1, 1), (1, 2)]
    s = PassSampler(3)
    s.pass_idx, s.start = 4, 2  # what PretrainDataModule.load_state_dict restores
    assert list(s) == [(4, 2)] and list(s) == [(5, 0), (5, 1), (5, 2)]


def test_truncation_closed_form_equals_the_one_token_loop():
    from genlab.data.pretrain.xlnet_examples import _truncation

    for a in range(0, 30):
        for b in range(0, 30):
            for tot in (1, 10, 25):
                ra, rb = a, b
                while ra + rb > tot:
                    if ra > rb:
                        ra -= 1
                    else:
                        rb -= 1
                assert _truncation(a, b, tot) == (a - ra, b - rb), (a, b, tot)


def test_split_scans_only_a_window_of_a_long_row():
    from genlab.data.pretrain.xlnet_examples import next_boundary

    sid = np.zeros(2_000_000, dtype=np.uint8)
    sid[1_500_000:] = 1  # one boundary far away
    assert next_boundary(sid, 10) == 1_500_000 and next_boundary(sid, 1_500_001) == 2_000_000
    pair = split_a_and_b(sid, 100, 53, np.random.default_rng(0))
    assert pair.label == 0 and (pair.a_end - pair.a_begin) + (pair.b_end - pair.b_begin) == 53


def test_sentence_edges_match_the_token_loops():
    from genlab.data.pretrain.xlnet_examples import next_boundary, sentence_start

    sid = np.repeat(np.random.default_rng(0).integers(0, 2, 60), np.random.default_rng(1).integers(1, 9, 60))
    for k in range(len(sid)):
        j = k
        while j > 0 and sid[j - 1] == sid[j]:
            j -= 1
        assert sentence_start(sid, k, chunk=5) == j
        e = max(k, 1)
        while e < len(sid) and sid[e - 1] == sid[e]:
            e += 1
        assert next_boundary(sid, max(k, 1), chunk=5) == e
