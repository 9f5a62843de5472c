"""SQuAD-format JSON is streamed article by article: the same articles as ``json.load`` whatever the buffer size
(a 1-byte buffer cuts every token and UTF-8 sequence), and a bad file is one DataError with its byte offset."""

from __future__ import annotations

import json

import pytest

from genlab.data.finetune.squad import read_squad
from genlab.data.text.json_stream import iter_json_array
from genlab.errors import DataError

DOC = {"version": "2.0", "data": [
    {"title": f"T{a}", "paragraphs": [{"context": "Zürich ☃ é" * (a + 1), "qas": [
        {"id": f"q{a}", "question": "Wo?", "is_impossible": False, "answers": [{"text": "Zürich", "answer_start": 0}],
         "n": 12345678901234567890, "x": [True, None, -1.5e-3, "é\"\\"]}]}]}
    for a in range(6)], "tail": {"k": [1, 2]}}


@pytest.mark.parametrize("indent", [None, 1])
def test_streamed_articles_equal_json_load_for_any_buffer(tmp_path, indent):
    path = tmp_path / "train.json"
    raw = json.dumps(DOC, indent=indent, ensure_ascii=False).encode()
    path.write_bytes(b"\xef\xbb\xbf" + raw)  # with a byte-order mark
    for buffer in (1, 3, 17, 1 << 20):
        got = list(iter_json_array(path, "data", buffer))
        assert [a for _, a in got] == DOC["data"]
        assert all(path.read_bytes()[offset:offset + 1] == b"{" for offset, _ in got)  # offsets of the articles
    data, examples = read_squad(path, buffer_bytes=5)
    assert data == DOC["data"] and [e.qid for e in examples] == [f"q{a}" for a in range(6)]
    assert read_squad(path, keep_data=False, buffer_bytes=5)[0] == []


@pytest.mark.parametrize("damage, message", [
    (lambda raw: raw[:200] + b"@" + raw[201:], r"is not valid JSON .* at byte offset 200"),
    (lambda raw: raw[:300] + b"\xff" + raw[300:], r"is not valid UTF-8 text \(byte offset 300"),
    (lambda raw: raw[:250], r"at byte offset \d+: .*where the file ends \(truncated\?\)"),
    (lambda raw: b"\x00\x01\x02", r"at byte offset 0: expected a JSON object"),
    (lambda raw: b'{"version": "1.1"}', r"has no 'data' array"),
])
def test_a_bad_file_is_one_error_naming_it_and_the_offset(tmp_path, damage, message):
    path = tmp_path / "dev.json"
    path.write_bytes(damage(json.dumps(DOC, ensure_ascii=False).encode()))
    for buffer in (7, 1 << 20):
        with pytest.raises(DataError, match=f"dev.json .*{message}"):
            read_squad(path, buffer_bytes=buffer)
