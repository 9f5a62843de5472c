"""SQuAD char <-> piece alignment by LCS (the released XLNet code's SQuAD preprocessing): the DP is a true LCS, and
answer spans round-trip exactly through pieces on hard cases (accents, repeated spaces, split punctuation, `` ''
quotes, unknown characters, ligatures) and at window boundaries."""

from __future__ import annotations

import numpy as np
import pytest

from genlab.data.finetune.squad import (
    SquadDataModule,
    SquadExample,
    build_features,
    tokenize_paragraph,
)
from genlab.data.finetune.squad_align import align_pieces, char_to_piece_span, lcs_pairs


def lcs_length(a, b) -> int:
    d = np.zeros((len(a) + 1, len(b) + 1), dtype=int)
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i, j] = d[i - 1, j - 1] + 1 if a[i - 1] == b[j - 1] else max(d[i - 1, j], d[i, j - 1])
    return int(d[-1, -1])


def test_bit_parallel_lcs_equals_full_dp_and_is_a_common_subsequence():
    rng = np.random.default_rng(0)
    for _ in range(200):
        a = rng.integers(0, 4, rng.integers(0, 25))
        b = list(a) if rng.random() < 0.7 else list(rng.integers(0, 4, rng.integers(0, 25)))
        for _ in range(rng.integers(0, 5)):  # a few insertions/deletions, as normalisation makes
            if b and rng.random() < 0.5:
                b.pop(int(rng.integers(0, len(b))))
            else:
                b.insert(int(rng.integers(0, len(b) + 1)), int(rng.integers(0, 4)))
        b = np.array(b, dtype=np.int64)
        ia, ib = lcs_pairs(a.astype(np.int64), b)
        assert len(ia) == lcs_length(a, b)
        assert np.all(a[ia] == b[ib]) and np.all(np.diff(ia) > 0) and np.all(np.diff(ib) > 0)


def test_align_pieces_by_hand_normalisation_differences():
    ctx = "The  Eiffel Tower (1889), in ``Paris'' \u2014 caf\u00e9 \ufb01ne.\n"
    pieces = ["\u2581The", "\u2581E", "iffel", "\u2581Tower", "\u2581(", "1889", ")", ",", "\u2581in", '\u2581"', "Paris",
              '"', "\u2581\u2014", "\u2581cafe", "\u2581fine", "."]
    s, e = align_pieces(ctx, pieces)
    assert [ctx[a:b] for a, b in zip(s, e)] == ["The", "E", "iffel", "Tower", "(", "1889", ")", ",", "in", "``",
                                                "Paris", "''", "\u2014", "caf\u00e9", "\ufb01ne", "."]


def test_unknown_piece_owns_the_raw_text_between_its_neighbours():
    ctx = "in \u6771\u4eac today"
    s, e = align_pieces(ctx, ["\u2581in", "\u2581", "\uffff", "\u2581today"])
    assert [ctx[a:b] for a, b in zip(s, e)] == ["in", "", "\u6771\u4eac", "today"]


def test_lowercasing_tokenizer_aligns_to_cased_text():
    ctx = "Ab  CD"
    s, e = align_pieces(ctx, ["\u2581ab", "\u2581c", "d"], lower=True)
    assert [ctx[a:b] for a, b in zip(s, e)] == ["Ab", "C", "D"]


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    dm = SquadDataModule("1.1", source="mini", cache_dir=str(tmp_path_factory.mktemp("c")), vocab_size=2000,
                         max_seq_len=64, doc_stride=24, max_query_length=24)
    dm.setup("fit")
    return dm.tokenizer


HARD = [  # (context, answer) -- answers start and end on word or punctuation boundaries
    ("The caf\u00e9 in Z\u00fcrich opened in 1905.", "Z\u00fcrich"),
    ("It  was   built\nin the  year 1889 by   Gustave Eiffel.", "1889 by   Gustave Eiffel"),
    ("The tower (324 metres) is tall.", "324"),
    ("The tower (324 metres) is tall.", "(324 metres)"),
    ("He said ``hello world'' and left.", "``hello world''"),
    ("Population: 2,000,000 in 2019.", "2,000,000"),
    ("The city of \u6771\u4eac is large.", "\u6771\u4eac"),
    ("A \ufb01ne day in Paris.", "\ufb01ne day"),
    ("Na\u00efve  r\u00e9sum\u00e9s: caf\u00e9-au-lait!", "r\u00e9sum\u00e9s"),
]


@pytest.mark.parametrize("context,answer", HARD)
def test_answer_spans_round_trip_exactly_on_hard_cases(tok, context, answer):
    start = context.index(answer)
    para = tokenize_paragraph(context, tok)
    a, b = char_to_piece_span(para, start, start + len(answer))
    assert context[para.char_start[a]:para.char_end[b]] == answer
    # spans are ordered, inside the text, and never start or end on whitespace
    assert np.all(np.diff(para.char_start) >= 0) and np.all(para.char_end >= para.char_start)
    for s, e in zip(para.char_start, para.char_end):
        if e > s:
            assert not context[s].isspace() and not context[e - 1].isspace()


def test_answers_at_window_boundaries_round_trip_and_label_only_full_windows(tok):
    words = [f"w{i}x" for i in range(60)]
    context = "  ".join(words)
    para = tokenize_paragraph(context, tok)
    qs = []
    for k in range(0, 60, 3):  # answers everywhere, so several sit at the edge of a window
        start = context.index(words[k])
        qs.append(SquadExample(f"q{k}", "which _ ?", context, [{"text": words[k], "answer_start": start}], False))
    feats, bad = build_features(qs, tok, max_seq_len=40, doc_stride=9, max_query_length=8, training=True)
    assert bad == 0
    edges = 0
    for f in range(len(feats.cls_index)):
        ex, win = qs[feats.example_index[f]], feats.windows[f]
        want = char_to_piece_span(para, ex.answers[0]["answer_start"],
                                  ex.answers[0]["answer_start"] + len(ex.answers[0]["text"]))
        inside = win["offset"] <= want[0] and want[1] < win["offset"] + win["length"]
        if not inside:
            assert feats.is_impossible[f] == 1 and feats.start_positions[f] == feats.cls_index[f]
            continue
        s, e = win["offset"] + feats.start_positions[f], win["offset"] + feats.end_positions[f]
        assert context[para.char_start[s]:para.char_end[e]] == ex.answers[0]["text"]
        edges += int(feats.end_positions[f] == win["length"] - 1 or feats.start_positions[f] == 0)
    assert edges > 0  # the boundary case really occurred


@pytest.fixture(scope="module")
def nfkc_tok(tmp_path_factory, tok):
    """A tokenizer whose SentencePiece model normalises with NFKC itself (as the published XLNet spiece.model
    does), so piece text differs from the raw text in width, ligatures and compatibility characters."""
    from genlab.data.tokenizers.sentencepiece import SentencePieceTokenizer
    from genlab.data.tokenizers.xlnet_pieces import (
        CONTROL_SYMBOLS,
        USER_SYMBOLS,
        PieceTokenizer,
    )

    root = tmp_path_factory.mktemp("nfkc")
    text = root / "text.txt"
    text.write_text("\n".join(f"The value {k} of item {k + 1} in the year {1900 + k} was fine." for k in range(400)))
    model = root / "nfkc.model"
    SentencePieceTokenizer.train([text], model, 300, "unigram", user_defined_symbols=USER_SYMBOLS,
                                 control_symbols=CONTROL_SYMBOLS, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
                                 hard_vocab_limit=False, normalization_rule_name="nmt_nfkc")
    return PieceTokenizer(model)


NFKC = [  # the SentencePiece model rewrites these characters; answers must still come back verbatim
    ("The value \uff11\uff19\uff10\uff15 was fine.", "\uff11\uff19\uff10\uff15"),  # full-width digits
    ("The item \u2460 was fine\u2026 in the year 1905.", "1905"),                   # circled digit, ellipsis
    ("The \ufb01ne year was 1903.", "\ufb01ne year"),                                # ligature
]


@pytest.mark.parametrize("context,answer", NFKC)
def test_round_trip_through_a_normalising_sentencepiece_model(nfkc_tok, context, answer):
    start = context.index(answer)
    para = tokenize_paragraph(context, nfkc_tok)
    a, b = char_to_piece_span(para, start, start + len(answer))
    assert context[para.char_start[a]:para.char_end[b]] == answer
