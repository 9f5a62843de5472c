"""GDAN's models (Yang's thesis §3.2.4): the gated-attention reader D, the copy generator G, the domain tags, the
G -> D hand-over, and parameter counts / shapes at the platform's default sizes (the thesis gives few)."""

import pytest
import torch

from genlab.models.gdan import (
    GDAN,
    TAG_GEN,
    TAG_TRUE,
    DomainClassifier,
    GAReader,
    Generated,
    QuestionGenerator,
    copy_mixture,
    gated_attention,
)
from genlab.models.gdan.features import answer_indicator, answer_type_indicator, append_tag, question_overlap
from genlab.nn.packed_rnn import PackedRNN
from genlab.tasks.gdan_objectives import best_span

V = 30


def tiny_reader(**kw):
    args = {"vocab_size": V, "embed_dim": 8, "hidden": 6, "num_layers": 3, "dropout": 0.0}
    return GAReader(**{**args, **kw}).double().eval()


def tiny_generator(**kw):
    args = {"vocab_size": 20, "embed_dim": 8, "enc_hidden": 6, "dec_hidden": 10, "max_question_len": 6}
    return QuestionGenerator(**{**args, **kw}).double()


def prefix_mask(lengths, width):
    return torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]


def random_ids(lengths, width, low=4, high=V, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = prefix_mask(lengths, width)
    return torch.randint(low, high, (len(lengths), width), generator=g) * mask, mask


# ------------------------------------------------------------------------------------------------ sizes (platform defaults)
def gru(inp, h, directions):
    return directions * 3 * h * (inp + h + 2)  # W_ih, W_hh and both biases per direction


def test_reader_parameter_count_and_shapes_at_spec_sizes():
    """K = 3, 128 hidden per direction, 100-d embeddings (+2 tag rows), qe_comm 2x2, linear scorers (platform defaults)."""
    vocab = 30004
    with torch.device("meta"):
        d = GAReader(vocab)
    want = ((vocab + 2) * 100                              # words + d_true, d_gen
            + gru(100, 128, 2) + gru(256, 128, 2)          # paragraph BiGRUs of the two gated layers
            + 2 * gru(100, 128, 2)                         # their question BiGRUs (over the question embeddings)
            + gru(256 + 2, 128, 2)                         # output BiGRU over [gated states ; qe_comm feature]
            + 2 * 2                                        # qe_comm lookup
            + 2 * (256 + 1))                               # start and end scorers
    assert sum(p.numel() for p in d.parameters()) == want
    reader = tiny_reader()
    p, pm = random_ids([7, 5], 7)
    q, qm = random_ids([4, 2], 4)
    out = reader(p, pm, q, qm, torch.tensor([TAG_TRUE, TAG_GEN]))
    assert out.start_log_probs.shape == out.end_log_probs.shape == (2, 7)
    assert out.hidden.shape == (2, 7, 12)


def test_generator_parameter_count_and_shapes_at_spec_sizes():
    """100-d embeddings, bidirectional 2x128 encoder (+1 answer channel), 256 decoder with input feeding, additive
    attention, output softmax over [h_t ; c_t], bilinear copy scores, gate w_g without bias (§3.3, §4.2)."""
    vocab = 30004
    with torch.device("meta"):
        g = QuestionGenerator(vocab)
    want = (vocab * 100 + gru(101, 128, 2)
            + 256 * 256 + 256                              # W_init
            + gru(100 + 256, 256, 1)                       # decoder GRU fed [embedding ; previous context]
            + 256 * 256 + (256 * 256 + 256) + 256          # W_h, W_s (+ bias), v
            + (256 + 256) * vocab + vocab                  # W_o, b_o
            + 256 * 256                                    # W_c
            + 256)                                         # w_g
    assert sum(p.numel() for p in g.parameters()) == want
    gen = tiny_generator()
    p, pm = random_ids([6, 4], 6, high=20)
    enc = gen.encode(p, p, pm, torch.tensor([1, 0]), torch.tensor([2, 0]))
    assert enc.memory.shape == (2, 6, 12)
    sample = gen.sample(enc)
    assert sample.tokens.shape[0] == 2 and sample.tokens.shape[1] <= 6
    assert sample.log_probs.shape == sample.mask.shape == sample.tokens.shape


# ------------------------------------------------------------------------------------- GA attention masks
def test_ga_attention_masks_padded_question_positions():
    torch.manual_seed(0)
    doc, qry = torch.randn(3, 5, 12, dtype=torch.float64), torch.randn(3, 4, 12, dtype=torch.float64)
    q_mask = prefix_mask([4, 2, 1], 4)
    out, alpha = gated_attention(doc, qry, q_mask)
    assert out.shape == (3, 5, 12)
    assert torch.allclose(alpha.sum(-1), torch.ones(3, 5, dtype=torch.float64))
    assert (alpha.masked_select(~q_mask[:, None, :].expand_as(alpha)) == 0).all()
    qry2 = qry.clone()
    qry2[~q_mask] = 99.0  # content of padded question positions
    assert torch.equal(gated_attention(doc, qry2, q_mask)[0], out)


@pytest.mark.parametrize("kw", [{}, {"gating": "matrix_attn"}, {"reencode_per_layer": False},
                                {"span_scorer": "bilinear"}, {"gating_fn": "concat"}])
def test_reader_ignores_padded_question_content(kw):
    torch.manual_seed(0)
    reader = tiny_reader(**kw)
    p, pm = random_ids([7, 5], 7)
    q, qm = random_ids([4, 2], 4)
    q2 = q.clone()
    q2[~qm] = 7
    for tag in (None, torch.tensor([TAG_TRUE, TAG_GEN])):
        a, b = reader(p, pm, q, qm, tag), reader(p, pm, q2, qm, tag)
        assert torch.allclose(a.start_log_probs, b.start_log_probs) and torch.allclose(a.end_log_probs, b.end_log_probs)


# --------------------------------------------------------------------------- paragraph padding invariance
@pytest.mark.parametrize("kw", [{}, {"reencode_per_layer": False}, {"span_scorer": "bilinear"}])
def test_paragraph_padding_invariance(kw):
    torch.manual_seed(0)
    reader = tiny_reader(**kw)
    p, pm = random_ids([7, 5], 7)
    q, qm = random_ids([4, 3], 4)
    p_long, pm_long = torch.nn.functional.pad(p, (0, 4)), torch.nn.functional.pad(pm, (0, 4))
    for tag in (None, torch.tensor([TAG_GEN, TAG_TRUE])):
        a, b = reader(p, pm, q, qm, tag), reader(p_long, pm_long, q, qm, tag)
        for x, y in ((a.start_log_probs, b.start_log_probs), (a.end_log_probs, b.end_log_probs)):
            assert torch.allclose(x[pm], y[:, :7][pm], atol=1e-12)


def test_packed_rnn_backward_direction_starts_at_last_valid_token():
    torch.manual_seed(0)
    rnn = PackedRNN(3, 4).double()
    x = torch.randn(1, 5, 3, dtype=torch.float64)
    mask = prefix_mask([3], 5)
    out, final = rnn(x, mask)
    alone, alone_final = rnn(x[:, :3], mask[:, :3])
    assert torch.allclose(out[:, :3], alone) and torch.allclose(final, alone_final)
    assert (out[:, 3:] == 0).all()


def test_generator_paragraph_padding_invariance():
    torch.manual_seed(0)
    g = tiny_generator()
    p, pm = random_ids([6, 4], 6, high=20)
    q = torch.tensor([[5, 6, 3], [7, 3, 0]])
    qm = q != 0
    start, end = torch.tensor([1, 0]), torch.tensor([2, 1])
    a = g.teacher_forced(g.encode(p, p, pm, start, end), q, qm)
    p_long, pm_long = torch.nn.functional.pad(p, (0, 3)), torch.nn.functional.pad(pm, (0, 3))
    b = g.teacher_forced(g.encode(p_long, p_long, pm_long, start, end), q, qm)
    assert torch.allclose(a, b, atol=1e-12)


# ------------------------------------------------------------------------------------ span log-likelihood
def test_span_log_likelihood_and_masked_positions():
    torch.manual_seed(0)
    reader = tiny_reader()
    p, pm = random_ids([7, 5, 6], 7)
    q, qm = random_ids([4, 2, 3], 4)
    tag = torch.tensor([TAG_TRUE, TAG_GEN, TAG_TRUE])
    out = reader(p, pm, q, qm, tag)
    start, end = torch.tensor([1, 0, 5]), torch.tensor([3, 4, 5])
    ll = out.log_likelihood(start, end)
    rows = torch.arange(3)
    assert torch.allclose(ll, out.start_log_probs[rows, start] + out.end_log_probs[rows, end])
    for lp in (out.start_log_probs.exp(), out.end_log_probs.exp()):
        assert torch.allclose(lp.sum(1), torch.ones(3, dtype=torch.float64))
        assert (lp[~pm] == 0).all()  # padding, including row 1's tag slot at position 5 and row 2's at 6
    assert (~pm[1, 5:]).all() and (~pm[2, 6:]).all()
    # the tag sits at those positions in what D reads
    tagged, _ = reader.tagged(p, pm, tag + 0)
    assert tagged[1, 5] == reader.tag_id(TAG_GEN) and tagged[2, 6] == reader.tag_id(TAG_TRUE)


# ------------------------------------------------------------------------------------------- span decoder
def test_best_span_decoder_constraints_and_hand_built_argmax():
    # constant shifts (log-softmax) do not move the argmax, so raw scores serve as log-probabilities
    s = torch.tensor([[-9.0, 5.0, 0.0, 0.0, 0.0, 0.0]])
    e = torch.tensor([[9.0, 0.0, 1.5, 0.0, 3.0, 6.0]])
    # the unconstrained best pair (j=1, k=0) has k < j; the legal best moves with max_len
    for max_len, want in ((6, (1, 5)), (5, (1, 5)), (4, (1, 4)), (3, (1, 2)), (1, (5, 5))):
        j, k = best_span(s, e, max_len=max_len)
        assert (j.item(), k.item()) == want, max_len
    torch.manual_seed(0)
    s, e = torch.randn(50, 20).log_softmax(-1), torch.randn(50, 20).log_softmax(-1)
    j, k = best_span(s, e, max_len=4)
    assert ((j <= k) & (k <= j + 3)).all()
    for b in range(50):  # brute force
        best = max((s[b, a] + e[b, c], a, c) for a in range(20) for c in range(a, min(20, a + 4)))
        assert (j[b].item(), k[b].item()) == best[1:]


# -------------------------------------------------------------------------------------------- domain tags
def test_domain_tags_are_the_last_valid_token_of_paragraph_and_question():
    reader = tiny_reader()
    p, pm = random_ids([7, 3], 7)
    q, qm = random_ids([4, 1], 4)
    tag = torch.tensor([TAG_TRUE, TAG_GEN])
    for ids, mask in ((p, pm), (q, qm)):
        tagged, tmask = reader.tagged(ids, mask, tag)
        last = tmask.sum(1) - 1
        assert tagged[torch.arange(2), last].tolist() == [reader.tag_id(TAG_TRUE), reader.tag_id(TAG_GEN)]
        assert torch.equal(tagged[:, :-1][mask], ids[mask])
        assert torch.equal(reader.tagged(ids, mask, None)[0], ids)  # domain_tags=false: unchanged
    assert reader.tag_id(TAG_TRUE) == V and reader.tag_id(TAG_GEN) == V + 1


def test_append_tag_to_a_full_row_adds_a_column():
    ids, mask = append_tag(torch.tensor([[5, 6]]), torch.tensor([[True, True]]), torch.tensor([9]))
    assert ids.tolist() == [[5, 6, 9]] and mask.all()


def test_tag_and_unk_embeddings_train_when_word_embeddings_are_frozen():
    reader = tiny_reader(freeze_word_emb=True).train()
    p, pm = random_ids([6], 6)
    p[0, 2] = reader.unk_id
    q, qm = random_ids([3], 4)
    out = reader(p, pm, q, qm, torch.tensor([TAG_GEN]))
    out.log_likelihood(torch.tensor([1]), torch.tensor([2])).sum().backward()
    assert reader.embed.weight.grad is None and not reader.embed.weight.requires_grad
    trainable = [reader.unk_id, reader.tag_id(TAG_TRUE), reader.tag_id(TAG_GEN)]
    grads = reader.embed.special.grad
    slot = reader.embed.special_index
    assert grads[slot[reader.tag_id(TAG_GEN)]].abs().sum() > 0 and grads[slot[reader.unk_id]].abs().sum() > 0
    assert grads[slot[reader.tag_id(TAG_TRUE)]].abs().sum() == 0  # not used in this example
    assert sorted(torch.nonzero(slot >= 0).flatten().tolist()) == sorted(trainable)


# ------------------------------------------------------------------------------------ answer feature of G
def test_answer_feature_marks_exactly_the_answer_span():
    f = answer_indicator(torch.tensor([2, 0]), torch.tensor([4, 0]), 6)
    assert f.tolist() == [[0, 0, 1, 1, 1, 0], [1, 0, 0, 0, 0, 0]]
    ids = torch.tensor([[5, 7, 5, 8, 7, 0]])
    t = answer_type_indicator(ids, ids != 0, torch.tensor([2]), torch.tensor([3]))  # answer = "5 8"
    assert t.tolist() == [[1, 0, 1, 1, 0, 0]]


def test_question_overlap_never_matches_unknown_words():
    p, q = torch.tensor([[4, 1, 1, 5, 1]]), torch.tensor([[6, 1]])  # <unk> = 1 in both: two OOV words, not one word
    assert question_overlap(p, p > 0, q, q > 0).tolist() == [[0, 0, 0, 0, 0]]
    q = torch.tensor([[5, 4, 0]])
    assert question_overlap(p, p > 0, q, q > 0).tolist() == [[1, 0, 0, 1, 0]]  # known words still match
    assert question_overlap(p, p > 0, torch.tensor([[1]]), torch.tensor([[True]]), unk_id=7).tolist() == [[0, 1, 1, 0, 1]]


# ------------------------------------------------------------------------------------------- copy mixture
def test_copy_mixture_gate_extremes_scatter_and_oov():
    torch.manual_seed(0)
    vocab, n_ext = 6, 8
    p_vocab = torch.softmax(torch.randn(1, 1, vocab, dtype=torch.float64), -1)
    copy = torch.tensor([[[0.1, 0.2, 0.3, 0.4]]], dtype=torch.float64)
    p_ext = torch.tensor([[4, 7, 4, 2]])  # word 4 twice; 7 is a paragraph-only OOV word (extended slot)
    one = copy_mixture(p_vocab, copy, p_ext, torch.ones(1, 1, 1, dtype=torch.float64), n_ext)
    assert torch.allclose(one[..., :vocab], p_vocab) and (one[..., vocab:] == 0).all()
    zero = copy_mixture(p_vocab, copy, p_ext, torch.zeros(1, 1, 1, dtype=torch.float64), n_ext)
    assert zero[0, 0].tolist() == pytest.approx([0, 0, 0.4, 0, 0.4, 0, 0, 0.2])  # absent types get 0
    half = copy_mixture(p_vocab, copy, p_ext, torch.full((1, 1, 1), 0.5, dtype=torch.float64), n_ext)
    assert torch.allclose(half.sum(-1), torch.ones(1, 1, dtype=torch.float64))
    assert half[0, 0, 7] == pytest.approx(0.1) and half[0, 0, 6] == 0  # OOV: only through copying


def test_generator_distribution_sums_to_one_over_the_extended_vocabulary():
    torch.manual_seed(0)
    g = tiny_generator()
    p, pm = random_ids([6, 4], 6, high=20)
    p_ext = p.clone()
    p_ext[0, 1], p_ext[1, 2] = 20, 21
    enc = g.encode(p, p_ext, pm, torch.tensor([0, 1]), torch.tensor([1, 1]))
    h = torch.randn(2, 3, 10, dtype=torch.float64)
    att, ctx = g._attend(enc, h)
    dist = g._distribution(enc, h, ctx, att)
    assert dist.shape == (2, 3, 22)
    assert torch.allclose(dist.sum(-1), torch.ones(2, 3, dtype=torch.float64))
    assert (dist[..., [g.pad_id, g.bos_id]] == 0).all()
    assert (dist[0, :, 21] == 0).all() and (dist[1, :, 20] == 0).all()  # another row's OOV slot: impossible
    assert (dist[0, :, 20] > 0).all()


# -------------------------------------------------------------------------------------------- MLE overfit
def test_mle_overfits_eight_triples_and_greedy_reproduces_them():
    torch.manual_seed(0)
    g = QuestionGenerator(16, embed_dim=16, enc_hidden=16, dec_hidden=32, max_question_len=6)
    gen = torch.Generator().manual_seed(1)
    p = torch.randint(4, 16, (8, 7), generator=gen)
    pm = torch.ones_like(p, dtype=torch.bool)
    start = torch.randint(0, 5, (8,), generator=gen)
    end = start + 1
    q = torch.randint(4, 16, (8, 4), generator=gen)
    q[:, -1] = g.eos_id
    qm = torch.ones_like(q, dtype=torch.bool)
    opt = torch.optim.Adam(g.parameters(), lr=1e-2)
    for _ in range(300):
        nll = -g.teacher_forced(g.encode(p, p, pm, start, end), q, qm).sum(1).mean()
        opt.zero_grad()
        nll.backward()
        opt.step()
    assert nll.item() < 0.05
    with torch.no_grad():
        greedy = g.sample(g.encode(p, p, pm, start, end), greedy=True)
    assert torch.equal(greedy.tokens, q)


# ------------------------------------------------------------------------- teacher forcing vs step by step
@pytest.mark.parametrize("kw", [{}, {"input_feeding": False}, {"cell": "lstm"}, {"copy_scores": "reuse_attention"},
                                {"answer_feature": "type_match"}, {"enc_bidirectional": False}])
def test_teacher_forcing_equals_the_incremental_loop(kw):
    torch.manual_seed(0)
    g = tiny_generator(**kw)
    p, pm = random_ids([6, 5, 3], 6, high=20)
    p_ext = p.clone()
    p_ext[1, 0] = 20  # an OOV word the question copies
    q = torch.tensor([[5, 6, 7, 3], [20, 3, 0, 0], [9, 9, 3, 0]])
    qm = q != 0
    enc = g.encode(p, p_ext, pm, torch.tensor([1, 0, 2]), torch.tensor([2, 0, 2]))
    parallel = g.teacher_forced(enc, q, qm)
    forced = g.sample(enc, forced=q)
    assert torch.equal(forced.tokens, q) and torch.equal(forced.mask, qm)
    assert torch.allclose(parallel, forced.log_probs, atol=1e-12)
    assert torch.allclose(parallel.sum(1), forced.sequence_log_prob(), atol=1e-12)
    assert (parallel[~qm] == 0).all()


def test_sampling_masks_steps_after_eos():
    torch.manual_seed(0)
    g = tiny_generator()
    p, pm = random_ids([6, 6, 6, 6], 6, high=20)
    with torch.no_grad():  # make <eos> likely so rows stop at different steps
        g.out_proj.bias[g.eos_id] = 2.0
    s = g.sample(g.encode(p, p, pm, torch.zeros(4, dtype=torch.long), torch.ones(4, dtype=torch.long)))
    for row in range(4):
        ended = (s.tokens[row] == g.eos_id).nonzero()
        if len(ended):
            stop = ended[0].item()
            assert s.mask[row, : stop + 1].all() and not s.mask[row, stop + 1:].any()
            assert (s.tokens[row, stop + 1:] == g.pad_id).all() and (s.log_probs[row, stop + 1:] == 0).all()


# ------------------------------------------------------------------------------------------------ hand-over
def test_questions_for_reader_maps_vocab_copied_oov_eos_and_empty():
    reader = GAReader(V, embed_dim=4, hidden=3, num_layers=2)
    g = QuestionGenerator(20, embed_dim=4, enc_hidden=3, dec_hidden=5)
    model = GDAN(reader, g)
    p_ids = torch.tensor([[5, 25, 7, 26], [8, 9, 0, 0]])      # D ids; 25, 26 are words G does not know
    g_p_ext = torch.tensor([[5, 20, 7, 21], [8, 9, 0, 0]])    # their extended slots 20, 21
    tokens = torch.tensor([[21, 5, 3, 0], [3, 0, 0, 0]])
    mask = torch.tensor([[True, True, True, False], [True, False, False, False]])
    gen = Generated(tokens, torch.zeros(2, 4), mask)
    q, qm = model.questions_for_reader(gen, g_p_ext, p_ids)
    assert q[0, :2].tolist() == [26, 5] and qm[0].tolist() == [True, True, False, False]
    assert q[1, 0].item() == reader.unk_id and qm[1].tolist() == [True, False, False, False]  # empty -> <unk>
    model.set_vocab_map(torch.arange(20).flip(0))
    q, _ = model.questions_for_reader(gen, g_p_ext, p_ids)
    assert q[0, :2].tolist() == [26, 14]
    with pytest.raises(ValueError, match="vocab_size"):
        GDAN(GAReader(10, embed_dim=4, hidden=3, num_layers=2), g)


def test_domain_classifier_pools_valid_positions_only():
    torch.manual_seed(0)
    clf = DomainClassifier(4, 3).double()
    states = torch.randn(2, 5, 4, dtype=torch.float64)
    mask = prefix_mask([5, 2], 5)
    out = clf(states, mask)
    states2 = states.clone()
    states2[1, 2:] = 100.0
    assert out.shape == (2,) and torch.equal(clf(states2, mask), out)
