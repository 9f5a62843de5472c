"""``download`` tier of the finetuning datasets: canonical URLs, sha256 digests from public
records, and the preparation that turns each archive into the layout its reader opens.

Where the digests come from (never computed by us, never guessed):
* SQuAD 1.1/2.0, RACE, IMDB, Yelp-2: TensorFlow Datasets checksum files
  (``tensorflow_datasets/question_answering/squad/checksums.tsv``, ``datasets/race/checksums.tsv``,
  ``url_checksums/imdb_reviews.txt``, ``url_checksums/yelp_polarity_reviews.txt``).
* AG News: TensorFlow Datasets ``url_checksums/ag_news_subset.txt`` (Zhang et al.'s Google Drive original).
* GLUE: TensorFlow Datasets ``url_checksums/glue.txt`` (the per-task zips of the GLUE download, and the three
  MRPC source files the GLUE script assembles MRPC from).
* Yelp-5, DBpedia, Amazon-2, Amazon-5: **no public sha256 exists** for any copy we could find. The fast.ai
  mirror's archives are recorded by fastai (``fastai/datasets.py`` ``_checks``) as (size in bytes, md5 of the
  first MiB); ``prepare`` checks that record before extracting, and the RemoteFile carries ``sha256=None``.
* GLUE diagnostic (AX): no verified public URL + digest pair, so it is not downloaded (put
  ``diagnostic/diagnostic.tsv`` into the MNLI folder by hand).
"""

from __future__ import annotations

import csv
import hashlib
import shutil
import tarfile
import zipfile
from pathlib import Path

from genlab.data.finetune.doc_classification import get_dataset
from genlab.data.finetune.glue import get_task
from genlab.data.sources.tiers import DatasetSpec, RemoteFile
from genlab.errors import DataError

SQUAD_URL = "https://rajpurkar.github.io/SQuAD-explorer/dataset/"
SQUAD_SHA256 = {  # TFDS question_answering/squad/checksums.tsv
    "train-v1.1.json": "3527663986b8295af4f7fcdff1ba1ff3f72d07d61a20f487cb238a6ef92fd955",
    "dev-v1.1.json": "95aa6a52d5d6a735563366753ca50492a658031da74f301ac5238b03966972c9",
    "train-v2.0.json": "68dcfbb971bd3e96d5b46c7177b16c1a4e7d4bdef19fb204502738552dede002",
    "dev-v2.0.json": "80a5225e94905956a6446d296ca1093975c4d3b3260f1d6c8f68bc2ab77182d8",
}
RACE_MARKER = "RACE.prepared"


# ------------------------------------------------------------------------------------------------ archives
def extract(archive: Path, dest: Path) -> None:
    """Unpack a .zip / .tar.gz into ``dest``, refusing members that would land outside it."""
    try:
        if archive.name.endswith(".zip"):
            with zipfile.ZipFile(archive) as z:
                for name in z.namelist():
                    if not (dest / name).resolve().is_relative_to(dest.resolve()):
                        raise DataError(f"{archive}: member {name!r} points outside the dataset folder; refusing.")
                z.extractall(dest)
        else:
            with tarfile.open(archive) as t:
                t.extractall(dest, filter="data")
    except (tarfile.TarError, zipfile.BadZipFile, OSError) as err:
        raise DataError(f"{archive} is not a readable archive ({err}); delete it and download again.") from err


def hoist(root: Path, folder: str) -> None:
    """Move the contents of ``root/folder`` (the archive's top folder) up into ``root``."""
    top = root / folder
    if not top.is_dir():
        raise DataError(f"{root}: the archive did not contain the folder {folder}/; wrong or changed download.")
    for item in top.iterdir():
        target = root / item.name
        if target.exists():
            shutil.rmtree(target) if target.is_dir() else target.unlink()
        shutil.move(str(item), str(target))
    top.rmdir()


def _unpack(archive: str, folder: str, fastai_checked: bool = False):
    def prepare(root: Path) -> None:
        if fastai_checked:
            check_fastai_record(root / archive)
        extract(root / archive, root)
        hoist(root, folder)

    return prepare


# ------------------------------------------------------------------------------------------------ SQuAD
def squad_spec(version: str, dev_only: bool = False) -> DatasetSpec:
    """The official JSON files of SQuAD ``version`` (``dev_only``: just the dev file, for evaluation)."""
    names = (f"dev-v{version}.json",) if dev_only else (f"train-v{version}.json", f"dev-v{version}.json")
    return DatasetSpec(f"squad{version}" + ("_dev" if dev_only else ""), names,
                       downloads=tuple(RemoteFile(SQUAD_URL + n, SQUAD_SHA256[n], n) for n in names),
                       homepage="https://rajpurkar.github.io/SQuAD-explorer/")


# ------------------------------------------------------------------------------------------------ RACE
def _prepare_race(root: Path) -> None:
    extract(root / "RACE.tar.gz", root)
    hoist(root, "RACE")
    for split in ("train", "dev", "test"):
        for level in ("middle", "high"):
            if not any((root / split / level).glob("*.txt")):
                raise DataError(f"{root}: RACE archive lacks {split}/{level}/*.txt; wrong or changed download.")
    (root / RACE_MARKER).write_text("extracted from RACE.tar.gz\n", encoding="utf-8")


def race_spec(download: bool) -> DatasetSpec:
    """RACE's folder layout. The download tier writes a marker after extraction (the layout has no fixed file
    name to check); a user's own copy (``data.path``) is checked by the reader."""
    downloads = (RemoteFile("http://www.cs.cmu.edu/~glai1/data/race/RACE.tar.gz",  # TFDS datasets/race/checksums.tsv
                            "b2769cc9fdc5c546a693300eb9a966cec6870bd349fbc44ed5225f8ad33006e5", "RACE.tar.gz"),)
    return DatasetSpec("race", (RACE_MARKER,) if download else (), downloads=downloads,
                       prepare=_prepare_race, homepage="https://www.cs.cmu.edu/~glai1/data/race/")


# ------------------------------------------------------------------------------------------------ documents
# fastai's record for its mirror: (size in bytes, md5 of the first MiB) -- the only public digests of these files
FASTAI_RECORDS = {
    "yelp_review_full_csv.tgz": (196146755, "1efd84215ea3e30d90e4c33764b889db"),
    "dbpedia_csv.tgz": (68341743, "239c7837b9e79db34486f3de6a00e38e"),
    "amazon_review_polarity_csv.tgz": (688339454, "676f7e5208ec343c8274b4bb085bc938"),
    "amazon_review_full_csv.tgz": (643695014, "4a1196cf0adaea22f4bc3f592cddde90"),
}
FASTAI = "https://s3.amazonaws.com/fast-ai-nlp/"


def check_fastai_record(path: Path) -> None:
    size, md5 = FASTAI_RECORDS[path.name]
    with open(path, "rb") as f:
        head = hashlib.md5(f.read(1 << 20)).hexdigest()
    if (path.stat().st_size, head) != (size, md5):
        raise DataError(f"{path}: {path.stat().st_size} bytes, md5 of the first MiB {head}; fastai records {size} "
                        f"bytes and {md5}. The file is corrupt or a different version; delete it and download again.")


# name -> (url, sha256 or None, archive file name, top folder inside the archive)
DOC_DOWNLOADS: dict[str, tuple[str, str | None, str, str]] = {
    "imdb": ("http://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",  # TFDS url_checksums/imdb_reviews
             "c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe", "aclImdb_v1.tar.gz", "aclImdb"),
    "yelp2": (FASTAI + "yelp_review_polarity_csv.tgz",  # TFDS url_checksums/yelp_polarity_reviews
              "528f22e286cad085948acbc3bea7e58188416546b0e364d0ae4ca0ce666abe35", "yelp_review_polarity_csv.tgz",
              "yelp_review_polarity_csv"),
    "ag_news": ("https://drive.google.com/uc?export=download&id=0Bz8a_Dbh9QhbUDNpeUdjb0wxRms",  # TFDS ag_news_subset
                "4e2fc37d369e6e317a8b62d0d2f11d379f8c3dde60c07c35a46b069a246498ad", "ag_news_csv.tar.gz",
                "ag_news_csv"),
    "yelp5": (FASTAI + "yelp_review_full_csv.tgz", None, "yelp_review_full_csv.tgz", "yelp_review_full_csv"),
    "dbpedia": (FASTAI + "dbpedia_csv.tgz", None, "dbpedia_csv.tgz", "dbpedia_csv"),
    "amazon2": (FASTAI + "amazon_review_polarity_csv.tgz", None, "amazon_review_polarity_csv.tgz",
                "amazon_review_polarity_csv"),
    "amazon5": (FASTAI + "amazon_review_full_csv.tgz", None, "amazon_review_full_csv.tgz", "amazon_review_full_csv"),
}


def doc_spec(name: str) -> DatasetSpec:
    """IMDB (``aclImdb`` folder) or a Zhang et al. CSV dataset (train.csv/test.csv), with its download."""
    ds = get_dataset(name)
    url, sha, archive, folder = DOC_DOWNLOADS[ds.name]
    checked = sha is None and archive in FASTAI_RECORDS
    return DatasetSpec(ds.name, ds.files, downloads=(RemoteFile(url, sha, archive),),
                       prepare=_unpack(archive, folder, checked),
                       notes="" if sha else "no public sha256; checked against fastai's (size, md5 of first MiB)")


# ------------------------------------------------------------------------------------------------ GLUE
_FIREBASE = "https://firebasestorage.googleapis.com/v0/b/mtl-sentence-representations.appspot.com/o/data%2F"
# task -> (url, sha256, archive, top folder); TFDS url_checksums/glue.txt
GLUE_DOWNLOADS: dict[str, tuple[str, str, str, str]] = {
    "cola": (_FIREBASE + "CoLA.zip?alt=media&token=46d5e637-3411-4188-bc44-5809b5bfb5f4",
             "f212fcd832b8f7b435fb991f101abf89f96b933ab400603bf198960dfc32cbff", "CoLA.zip", "CoLA"),
    "sst2": (_FIREBASE + "SST-2.zip?alt=media&token=aabc5f6b-e466-44a2-b9b4-cf6337f84ac8",
             "d67e16fb55739c1b32cdce9877596db1c127dc322d93c082281f64057c16deaa", "SST-2.zip", "SST-2"),
    "qqp": (_FIREBASE + "QQP.zip?alt=media&token=700c6acf-160d-4d89-81d1-de4191d02cb5",
            "67cb8f5fe66c90a0bc1bf5792e3924f63008b064ab7a473736c919d20bb140ad", "QQP.zip", "QQP"),
    "stsb": (_FIREBASE + "STS-B.zip?alt=media&token=bddb94a7-8706-4e0d-a694-1109e12273b5",
             "e60a6393de5a8b5b9bac5020a1554b54e3691f9d600b775bd131e613ac179c85", "STS-B.zip", "STS-B"),
    "mnli": (_FIREBASE + "MNLI.zip?alt=media&token=50329ea1-e339-40e2-809c-10c40afff3ce",
             "e7c1d896d26ed6caf700110645df426cc2d8ebf02a5ab743d5a5c68ac1c83633", "MNLI.zip", "MNLI"),
    "qnli": (_FIREBASE + "QNLIv2.zip?alt=media&token=6fdcf570-0fc5-4631-8456-9505272d1601",
             "e634e78627a29adaecd4f955359b22bf5e70f2cbd93b493f2d624138a0c0e5f5", "QNLIv2.zip", "QNLI"),
    "rte": (_FIREBASE + "RTE.zip?alt=media&token=5efa7e85-a0bb-4f19-8ea2-9e1840f077fb",
            "6bf86de103ecd335f3441bd43574d23fef87ecc695977a63b82d5efb206556ee", "RTE.zip", "RTE"),
    "wnli": (_FIREBASE + "WNLI.zip?alt=media&token=068ad0a0-ded7-4bd7-99a5-5e00222e0faf",
             "ae0e8e4d16f4d46d4a0a566ec7ecceccfd3fbfaa4a7a4b4e02848c0f2561ac46", "WNLI.zip", "WNLI"),
}
MRPC_DOWNLOADS = (  # TFDS url_checksums/glue.txt; the GLUE script builds MRPC's TSVs from these three files
    RemoteFile("https://dl.fbaipublicfiles.com/senteval/senteval_data/msr_paraphrase_train.txt",
               "60a9b09084528f0673eedee2b69cb941920f0b8cd0eeccefc464a98768457f89", "msr_paraphrase_train.txt"),
    RemoteFile("https://dl.fbaipublicfiles.com/senteval/senteval_data/msr_paraphrase_test.txt",
               "a04e271090879aaba6423d65b94950c089298587d9c084bf9cd7439bd785f784", "msr_paraphrase_test.txt"),
    RemoteFile(_FIREBASE + "mrpc_dev_ids.tsv?alt=media&token=ec5c0836-31d5-48f4-b431-7480817f1adc",
               "971d7767d81b997fd9060ade0ec23c4fc31cbb226a55d1bd4a1bac474eb81dc7", "mrpc_dev_ids.tsv"),
)
MRPC_HEADER = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"


def _read_rows(path: Path) -> list[list[str]]:
    with open(path, encoding="utf-8-sig", newline="") as f:
        return list(csv.reader(f, delimiter="\t", quotechar=None))


def prepare_mrpc(root: Path) -> None:
    """GLUE's MRPC layout from the MSR paraphrase corpus: the pairs listed in mrpc_dev_ids.tsv form dev.tsv, the
    other training pairs train.tsv; test.tsv gets an index column and no label."""
    dev_ids = {tuple(r[:2]) for r in _read_rows(root / "mrpc_dev_ids.tsv") if len(r) >= 2}
    train_rows = _read_rows(root / "msr_paraphrase_train.txt")[1:]
    with open(root / "train.tsv", "w", encoding="utf-8") as tr, open(root / "dev.tsv", "w", encoding="utf-8") as dv:
        tr.write(MRPC_HEADER)
        dv.write(MRPC_HEADER)
        for i, row in enumerate(train_rows, start=2):
            if len(row) != 5:
                raise DataError(f"{root / 'msr_paraphrase_train.txt'}, line {i}: {len(row)} columns, expected 5.")
            (dv if (row[1], row[2]) in dev_ids else tr).write("\t".join(row) + "\n")
    with open(root / "test.tsv", "w", encoding="utf-8") as te:
        te.write("index\t#1 ID\t#2 ID\t#1 String\t#2 String\n")
        for i, row in enumerate(_read_rows(root / "msr_paraphrase_test.txt")[1:]):
            if len(row) != 5:
                raise DataError(f"{root / 'msr_paraphrase_test.txt'}, line {i + 2}: {len(row)} columns, expected 5.")
            te.write("\t".join([str(i), *row[1:]]) + "\n")


def glue_spec(task: str) -> DatasetSpec:
    """One GLUE task folder (train + dev files of genlab.data.finetune.glue's table) and its download."""
    t = get_task(task)
    files = (t.train.file, *(s.file for s in t.dev.values()))
    if t.name == "mrpc":
        downloads, prepare = MRPC_DOWNLOADS, prepare_mrpc
    else:
        url, sha, archive, folder = GLUE_DOWNLOADS[t.name]
        downloads, prepare = (RemoteFile(url, sha, archive),), _unpack(archive, folder)
    return DatasetSpec(f"glue_{t.name}", files, downloads=downloads, prepare=prepare,
                       homepage="https://gluebenchmark.com/tasks")
