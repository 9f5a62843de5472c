"""Shared corpus preparation: line-aligned pieces, bad-input messages, ordered parallel map, throttled progress."""

import logging

import pytest

from genlab.data.text import chunks as C
from genlab.data.text.parallel import ordered_map, resolve_num_proc
from genlab.data.text.progress import Progress, text_bytes, tracked
from genlab.errors import ConfigError, DataError


def test_pieces_end_at_newlines_and_rebuild_the_file(tmp_path):
    text = "".join(f"line {i} caf\u00e9 {'x' * (i % 7)}\n" for i in range(200)) + "no newline at the end"
    f = tmp_path / "a.txt"
    f.write_text(text, encoding="utf-8")
    pieces = list(C.line_pieces(f, piece_bytes=50))
    assert b"".join(p.data for p in pieces) == text.encode()
    assert all(p.data.endswith(b"\n") for p in pieces[:-1]) and pieces[-1].last and not pieces[0].last
    assert [p.offset for p in pieces] == [sum(len(q.data) for q in pieces[:k]) for k in range(len(pieces))]
    assert C.split_lines(C.decode_piece(pieces[0]))[0] == "line 0 caf\u00e9 "


@pytest.mark.parametrize(("data", "message"), [
    (b"ok line\n\x00\x00\x01\x02\n", r"b.bin is a binary file \(NUL byte at offset 8\).*remove it"),
    (b"ok line\nlatin-1 caf\xe9\n", r"b.bin is not valid UTF-8 text \(byte offset 19.*iconv"),
])
def test_binary_and_non_utf8_files_are_named_with_the_fix(tmp_path, data, message):
    f = tmp_path / "b.bin"
    f.write_bytes(data)
    with pytest.raises(DataError, match=message):
        [C.decode_piece(p) for p in C.line_pieces(f, piece_bytes=4)]
    with pytest.raises(DataError, match=message):
        C.sniff_text([f])


def test_sniff_accepts_a_sequence_cut_at_its_window_and_rejects_empty_shards(tmp_path):
    f = tmp_path / "a.txt"
    f.write_bytes("\u00e9".encode() * 10)
    C.sniff_text([f], n_bytes=5)  # the window ends inside a two-byte character: not an error
    (tmp_path / "empty.txt").write_bytes(b"")
    with pytest.raises(DataError, match=r"empty.txt is empty \(0 bytes\).*Replace it"):
        C.sniff_text([f, tmp_path / "empty.txt"])


def _square(x):
    if x == 13:
        raise DataError("bad item 13")
    return x * x


def test_ordered_map_keeps_order_over_processes_and_raises_worker_errors():
    assert list(ordered_map(_square, range(12), 2)) == [x * x for x in range(12)]
    with pytest.raises(DataError, match="bad item 13"):
        list(ordered_map(_square, range(20), 2))
    assert resolve_num_proc(None) >= 1 and resolve_num_proc(3) == 3
    with pytest.raises(ConfigError, match="data.num_proc=0"):
        resolve_num_proc(0)


def test_progress_is_throttled_and_reports_rate_and_time_left(caplog):
    with caplog.at_level(logging.INFO, logger="genlab"):
        quiet = Progress("quiet job", 100)
        quiet.advance(100)
        quiet.finish()
        assert caplog.text == ""  # a job shorter than one interval prints nothing
        loud = Progress("encoding x", 4_000_000, every_s=0)
        loud.advance(1_000_000)
        loud.finish()
    assert "encoding x: 1.0 MB of 4.0 MB (25%)" in caplog.text and "/s, about" in caplog.text
    assert "left" in caplog.text and "encoding x: done" in caplog.text


def test_tracked_examples_report_their_text_bytes(caplog):
    examples = [("héllo", None), ("a", "bc")]
    with caplog.at_level(logging.INFO, logger="genlab"):
        assert list(tracked(examples, "encoding sst2 train", lambda e: text_bytes(*e), every_s=0)) == examples
    assert "encoding sst2 train: 6 B of 9 B (67%)" in caplog.text and "encoding sst2 train: done" in caplog.text


def test_read_lines_keeps_line_ends_drops_the_bom_and_names_a_bad_file(tmp_path):
    good = tmp_path / "train.tsv"
    good.write_bytes("\ufeffa\tb\r\nc\u2028d\te\nlast".encode())
    assert list(C.read_lines(good)) == ["a\tb\r\n", "c\u2028d\te\n", "last"]  # U+2028 is text, not a line end
    latin = tmp_path / "latin1.tsv"
    latin.write_bytes("ok\ncaf\xe9\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"latin1.tsv is not valid UTF-8 text \(byte offset 6"):
        list(C.read_lines(latin))


def test_every_long_reading_step_reports_progress(tmp_path, monkeypatch, caplog):
    """With the interval at 0 every step logs: reading finetuning text and SQuAD/RACE files, extracting GDAN's
    answers, encoding texts, checksumming a new cache entry and verifying it before it is read, LM1B's training
    shards and a download."""
    import json

    from genlab.data.finetune.race import read_race
    from genlab.data.finetune.squad import read_squad
    from genlab.data.lm import readers as R
    from genlab.data.qa.answers import HeuristicExtractor, read_unlabeled
    from genlab.data.sources.tiers import RemoteFile, fetch
    from genlab.data.text import cache_entry, progress
    from genlab.data.text.encoded_texts import encode_texts

    monkeypatch.setattr(progress, "EVERY_S", 0.0)
    (tmp_path / "train.tsv").write_text("sentence\tlabel\nfine\t1\n")
    squad = {"data": [{"title": "t", "paragraphs": [{"context": "Rome is old.", "qas": []}]}]}
    (tmp_path / "train.json").write_text(json.dumps(squad))
    for level in ("middle", "high"):
        (tmp_path / "train" / level).mkdir(parents=True)
        (tmp_path / "train" / level / "1.txt").write_text(json.dumps(
            {"article": "A b.", "questions": ["Q?"], "options": [["a", "b", "c", "d"]], "answers": ["A"]}))
    (tmp_path / "u.jsonl").write_text(json.dumps({"id": "p", "context": "In 1990 the Senate met in Rome."}) + "\n")
    (tmp_path / "shard").write_text("a b c\nb c\n")
    with caplog.at_level(logging.INFO, logger="genlab"):
        list(C.read_lines(tmp_path / "train.tsv"))
        read_squad(tmp_path / "train.json")
        read_race(tmp_path, "train")
        read_unlabeled(tmp_path / "u.jsonl", HeuristicExtractor())
        encode_texts(["x", "yz"], lambda t: ([1] * len(t),), "e", tmp_path / "cache", "toy texts")
        monkeypatch.setattr(cache_entry, "_verified", set())  # as another process finds the entry: checked, read
        encode_texts(["x", "yz"], lambda t: ([1] * len(t),), "e", tmp_path / "cache", "toy texts")
        vocab = R.build_lm1b_top_vocab(tmp_path, 5, ["shard"])
        R.materialize(R.read_lm1b(tmp_path, "eos", 0, ["shard"], ["shard"], ["shard"], vocab)[1]["train"])
        fetch(RemoteFile((tmp_path / "shard").as_uri(), None, "shard"), tmp_path / "copy")
    for step in ("reading train.tsv: done", "reading train.json: done", "reading RACE train (2 files): done",
                 "extracting answers from u.jsonl: done", "encoding toy texts: done",
                 "checksumming the cache entry toy_texts-", "verifying the cache entry toy_texts-",
                 "encoding 1 LM1B training shards: done", "downloading file://"):
        assert step in caplog.text
