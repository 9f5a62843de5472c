"""Download tier of the finetuning datasets without the network: each spec's real URLs and public digests, then
the whole fetch -> sha256 -> extract -> reader path on small fake archives in the real layouts, served from
file:// URLs (the real ``fetch`` runs; only the URL and digest are swapped), plus the offline and corrupt cases."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import re
import tarfile
import zipfile
from pathlib import Path

import pytest

from genlab.data.finetune import downloads as fs
from genlab.data.finetune import glue
from genlab.data.finetune.doc_classification import DATASETS, read_docs
from genlab.data.finetune.race import RaceDataModule, read_race
from genlab.data.finetune.squad import SquadDataModule, read_squad
from genlab.data.sources.tiers import RemoteFile, locate
from genlab.errors import DataError

HEX64 = re.compile(r"^[0-9a-f]{64}$")


def all_specs():
    return ([fs.squad_spec(v) for v in ("1.1", "2.0")] + [fs.race_spec(True)]
            + [fs.doc_spec(n) for n in DATASETS] + [fs.glue_spec(t) for t in glue.TASKS])


def test_every_finetuning_dataset_has_official_urls_and_public_digests():
    specs = all_specs()
    assert {s.name for s in specs} >= {"squad1.1", "squad2.0", "race", "imdb", "yelp2", "yelp5", "dbpedia",
                                       "ag_news", "amazon2", "amazon5", *(f"glue_{t}" for t in glue.TASKS)}
    for spec in specs:
        assert spec.files and spec.downloads, spec.name
        for d in spec.downloads:
            assert d.url.startswith(("https://", "http://")) and d.filename, d
            if d.sha256 is None:  # only where no public sha256 exists, and then fastai's record is checked
                assert d.filename in fs.FASTAI_RECORDS and "no public sha256" in spec.notes, spec.name
            else:
                assert HEX64.match(d.sha256), (spec.name, d.sha256)
    # GLUE specs expect exactly the files genlab.data.finetune.glue reads
    mnli = fs.glue_spec("mnli")
    assert set(mnli.files) == {"train.tsv", "dev_matched.tsv", "dev_mismatched.tsv"}


# ------------------------------------------------------------------------------------------------ fakes
def tgz(path: Path, members: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as t:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return path


def zipped(path: Path, members: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, text in members.items():
            z.writestr(name, text)
    return path


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def served(spec, files: dict[str, Path]):
    """The same spec with each download served from a local fake (file:// URL, the fake's own sha256)."""
    downloads = tuple(RemoteFile(files[d.filename].as_uri(), sha(files[d.filename]) if d.sha256 else None,
                                 d.filename) for d in spec.downloads)
    return dataclasses.replace(spec, downloads=downloads)


@pytest.fixture(autouse=True)
def online(monkeypatch):
    monkeypatch.delenv("GENLAB_OFFLINE", raising=False)


def race_obj(k: int) -> str:
    return json.dumps({"article": f"Article {k} text.", "questions": ["What _ ?"], "options": [["a", "b", "c", "d"]],
                       "answers": ["B"], "id": f"{k}.txt"})


def test_race_download_extracts_the_real_layout(tmp_path):
    members = {f"RACE/{s}/{lv}/{k}.txt": race_obj(k) for k, (s, lv) in enumerate(
        (s, lv) for s in ("train", "dev", "test") for lv in ("middle", "high"))}
    fake = tgz(tmp_path / "RACE.tar.gz", members)
    root = locate(served(fs.race_spec(True), {"RACE.tar.gz": fake}), "download", None, tmp_path / "cache")
    assert (root / fs.RACE_MARKER).is_file()
    qs = read_race(root, "dev")
    assert [q.level for q in qs] == [0, 1] and qs[0].label == 1


def test_squad_download_checks_sha256_and_reads(tmp_path):
    data = {"version": "2.0", "data": [{"title": "t", "paragraphs": [{"context": "Paris is big.", "qas": [
        {"id": "q", "question": "What is big?", "answers": [{"text": "Paris", "answer_start": 0}],
         "is_impossible": False}]}]}]}
    files = {}
    for name in ("train-v2.0.json", "dev-v2.0.json"):
        files[name] = tmp_path / name
        files[name].write_text(json.dumps(data))
    root = locate(served(fs.squad_spec("2.0"), files), "download", None, tmp_path / "cache")
    assert read_squad(root / "dev-v2.0.json")[1][0].answers[0]["text"] == "Paris"
    # a corrupt download (wrong digest) is refused and leaves no file behind
    bad = dataclasses.replace(fs.squad_spec("1.1", dev_only=True), downloads=(
        RemoteFile(files["dev-v2.0.json"].as_uri(), "0" * 64, "dev-v1.1.json"),))
    with pytest.raises(DataError, match="checksum mismatch"):
        locate(bad, "download", None, tmp_path / "cache2")
    assert not list((tmp_path / "cache2").rglob("dev-v1.1.json"))


CSV = '"2","Title one","Body, with comma"\n"1","Title two","Second\\nline"\n'


@pytest.mark.parametrize("name", ["yelp2", "ag_news", "dbpedia", "amazon5"])
def test_zhang_csv_download_unpacks_train_and_test(tmp_path, monkeypatch, name):
    spec = fs.doc_spec(name)
    archive = spec.downloads[0].filename
    folder = fs.DOC_DOWNLOADS[name][3]
    fake = tgz(tmp_path / archive, {f"{folder}/train.csv": CSV, f"{folder}/test.csv": CSV,
                                    f"{folder}/readme.txt": "x"})
    if archive in fs.FASTAI_RECORDS:  # no public sha256: the fastai (size, md5 of first MiB) record is checked
        monkeypatch.setitem(fs.FASTAI_RECORDS, archive,
                            (fake.stat().st_size, hashlib.md5(fake.read_bytes()[: 1 << 20]).hexdigest()))
    root = locate(served(spec, {archive: fake}), "download", None, tmp_path / "cache")
    ex = read_docs(DATASETS[name], root, "test")
    assert [e.label for e in ex] == ["2", "1"] and ex[0].text_a == "Title one Body, with comma"


def test_fastai_record_mismatch_is_refused(tmp_path):
    spec = fs.doc_spec("yelp5")
    fake = tgz(tmp_path / "yelp_review_full_csv.tgz", {"yelp_review_full_csv/train.csv": CSV})
    with pytest.raises(DataError, match="fastai records 196146755 bytes"):
        locate(served(spec, {"yelp_review_full_csv.tgz": fake}), "download", None, tmp_path / "cache")


def test_imdb_download_hoists_aclimdb(tmp_path):
    members = {"aclImdb/imdb.vocab": "good\nbad\n", "aclImdb/train/pos/0_9.txt": "Great<br />film",
               "aclImdb/train/neg/1_2.txt": "Bad", "aclImdb/test/pos/2_8.txt": "Fine", "aclImdb/test/neg/3_1.txt": "No"}
    fake = tgz(tmp_path / "aclImdb_v1.tar.gz", members)
    root = locate(served(fs.doc_spec("imdb"), {"aclImdb_v1.tar.gz": fake}), "download", None, tmp_path / "cache")
    train = read_docs(DATASETS["imdb"], root, "train")
    assert {e.label for e in train} == {"pos", "neg"} and "Great film" in {e.text_a for e in train}


def test_glue_zip_download_and_mrpc_assembly(tmp_path):
    rte = {"RTE/train.tsv": "index\tsentence1\tsentence2\tlabel\n0\tA man.\tA person.\tentailment\n",
           "RTE/dev.tsv": "index\tsentence1\tsentence2\tlabel\n0\tA dog.\tA cat.\tnot_entailment\n"}
    fake = zipped(tmp_path / "RTE.zip", rte)
    root = locate(served(fs.glue_spec("rte"), {"RTE.zip": fake}), "download", None, tmp_path / "cache")
    t = glue.get_task("rte")
    assert glue.read_split(t, root, t.dev["dev"])[0].label == "not_entailment"

    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    src = {"msr_paraphrase_train.txt": header + "1\t11\t12\tA b.\tA c.\n0\t21\t22\tD e.\tF g.\n1\t31\t32\tH.\tI.\n",
           "msr_paraphrase_test.txt": header + "1\t41\t42\tJ.\tK.\n",
           "mrpc_dev_ids.tsv": "21\t22\n"}
    files = {}
    for name, text in src.items():
        files[name] = tmp_path / name
        files[name].write_text(text)
    root = locate(served(fs.glue_spec("mrpc"), files), "download", None, tmp_path / "cache")
    m = glue.get_task("mrpc")
    assert [e.text_a for e in glue.read_split(m, root, m.train)] == ["A b.", "H."]
    assert [(e.text_a, e.label) for e in glue.read_split(m, root, m.dev["dev"])] == [("D e.", "0")]
    test = glue.read_split(m, root, m.test["MRPC"])
    assert [(e.guid, e.text_a, e.text_b) for e in test] == [("0", "J.", "K.")]


def test_archive_escaping_its_folder_is_refused(tmp_path):
    fake = zipped(tmp_path / "CoLA.zip", {"../evil.tsv": "x"})
    with pytest.raises(DataError, match="outside the dataset folder"):
        locate(served(fs.glue_spec("cola"), {"CoLA.zip": fake}), "download", None, tmp_path / "cache")


def test_offline_names_files_urls_and_data_path(tmp_path, monkeypatch):
    monkeypatch.setenv("GENLAB_OFFLINE", "1")
    for spec in (fs.squad_spec("2.0"), fs.race_spec(True), fs.doc_spec("dbpedia"), fs.glue_spec("sst2")):
        with pytest.raises(DataError) as err:
            locate(spec, "download", None, tmp_path)
        msg = str(err.value)
        assert "GENLAB_OFFLINE" in msg and "data.path=" in msg and spec.files[0] in msg
        assert spec.downloads[0].url in msg


def test_datamodules_use_the_download_specs(tmp_path, monkeypatch):
    monkeypatch.setenv("GENLAB_OFFLINE", "1")
    with pytest.raises(DataError, match="train-v2.0.json"):
        SquadDataModule("2.0", source="download", cache_dir=str(tmp_path)).prepare_data()
    with pytest.raises(DataError, match="dev-v1.1.json"):  # the 1.1 protocol needs only the 1.1 dev file
        SquadDataModule("2.0", source="path", path=str(_squad_dir(tmp_path)), eval_version="1.1",
                        cache_dir=str(tmp_path)).prepare_data()
    with pytest.raises(DataError, match="RACE.tar.gz"):
        RaceDataModule(source="download", cache_dir=str(tmp_path)).prepare_data()


def _squad_dir(tmp_path: Path) -> Path:
    d = tmp_path / "squad"
    d.mkdir()
    for n in ("train-v2.0.json", "dev-v2.0.json"):
        (d / n).write_text('{"data": []}')
    return d
