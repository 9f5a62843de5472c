"""SQuAD v1.1 with unlabelled paragraphs for GDAN (Yang thesis §3.2.5): the batches of genlab.tasks.gdan.

Splits (genlab.data.qa.protocol): ``test`` = 10 % of the training file's articles (``split_seed``), ``dev`` = the
official dev file, ``L`` = ``round(label_rate × N_train)`` questions of the remaining training articles (``seed``),
``U`` = the (paragraph, answer) pairs of the unlabelled JSONL (at most ``answers_per_paragraph`` per paragraph,
type-weighted; ``unlabeled_size`` of them, e.g. 50,000 for Table 3.4's "50K"; fixed by ``split_seed``). A training
question whose first answer does not equal its offset, or lies past ``max_paragraph_tokens``, is skipped and counted;
a file with no usable training question is a DataError. Dev and test keep every question and score against all its
gold texts.

Where the files come from (``source``): ``path`` = ``train-v1.1.json`` and ``dev-v1.1.json`` in ``path`` (the
unlabelled file from ``unlabeled_path``, default ``<path>/unlabeled.jsonl``); ``download`` = the official SQuAD v1.1
files (sha256-checked), with ``unlabeled_path``; ``mini`` = an offline build of all three files: ``mini=wiki`` real
Wikipedia text (genlab.data.qa.wiki_mini), ``mini=synthetic`` the unit-test fixture.

Tokens and vocabularies: genlab.data.qa.text (G's vocabulary is D's first ids, so G ids need no map); every
paragraph and question is tokenised once over ``num_proc`` processes (null: the cores available, at most 8) and
cached (``tokenize_all``). U is read a line at a time and held in memory-mapped entries (genlab.data.qa.unlabeled),
so memory does not grow with the unlabelled file.
Training batches are ``{"lab": ..., "unl": ...}`` from two infinite, reshuffled streams whose position is saved in
checkpoints (resume continues with the same batches). ``unlabeled=false`` (SL) reads no unlabelled file and gives
no ``unl``; ``generator_vocab=false`` (methods without G) leaves G's size out of ``model_overrides``.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from genlab.data.finetune.downloads import squad_spec
from genlab.data.images.datamodule import (  # _batches: infinite reshuffled stream
    SSLImageDataModule,
    _batches,
)
from genlab.data.qa.answers import AnswerExtractor, HeuristicExtractor
from genlab.data.qa.protocol import (
    QAExample,
    check_label_rate,
    labeled_subset,
    read_articles,
    split_by_article,
)
from genlab.data.qa.synthetic import GDAN_SYNTHETIC_MINI
from genlab.data.qa.text import (
    EOS,
    PAD,
    UNK,
    TextNorm,
    Tokenised,
    Vocabulary,
    extended_ids,
    shared_vocabularies,
    token_span,
    tokenize_all,
)
from genlab.data.qa.unlabeled import UnlabeledPairs, context_digest, read_pairs
from genlab.data.qa.wiki_mini import GDAN_WIKI_MINI
from genlab.data.sources.tiers import expected_root, locate
from genlab.data.text.progress import text_bytes, tracked
from genlab.errors import ConfigError, DataError

log = logging.getLogger(__name__)
MINIS = {"wiki": GDAN_WIKI_MINI, "synthetic": GDAN_SYNTHETIC_MINI}
# The official SQuAD v1.1 files' sizes (bytes): what ``setup_bytes`` counts for files not yet at hand.
SQUAD11_BYTES = {"train-v1.1.json": 30_288_272, "dev-v1.1.json": 4_854_279}
# Host memory ``setup`` keeps per byte of SQuAD JSON (every paragraph's and question's words as Python strings, their
# offsets, D and G ids, the items and the vocabularies) and per drawn unlabelled pair (its memory-mapped rows), measured
# on the thesis-sized files of experiments/perf/full_size_data.py (38.5 MB of JSON: 0.88 GB; 50,000 pairs: 0.05 GB).
HELD_PER_JSON_BYTE = 24
HELD_PER_UNLABELED_PAIR = 1_000


@dataclass
class Passage:
    """One tokenised paragraph: D ids, G's extended ids (OOV words -> per-paragraph slots after G's vocabulary),
    character offsets, and the normalised words (for G's copy targets)."""

    context: str
    words: list[str]
    offsets: np.ndarray  # [T, 2]
    d_ids: np.ndarray = None  # type: ignore[assignment]
    g_ext: np.ndarray = None  # type: ignore[assignment]


@dataclass
class Item:
    passage: int
    start: int
    end: int
    question: list[str] | None = None  # normalised question words (None for U)
    qid: str = ""
    golds: list[str] | None = None


class _Items(Dataset):
    def __init__(self, items: list[Item]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Item:
        return self.items[i]


class _Stream(IterableDataset):
    """Training batches ``{"lab", "unl", "position"}`` from ``start`` on (two independent shuffled streams)."""

    def __init__(self, dm: SemiSupervisedSquadDataModule, start: int) -> None:
        self.dm, self.start = dm, start

    def __iter__(self) -> Iterator[dict[str, Any]]:
        dm = self.dm
        seed = dm.hparams.seed
        lab = _batches(len(dm.labeled), dm.hparams.batch_size, seed * 2 + 1, self.start)
        unl = _batches(len(dm.unlabeled), dm.hparams.unlabeled_batch_size, seed * 2 + 2, self.start) \
            if dm.unlabeled else None
        position = self.start
        while True:
            batch = {"lab": dm.collate([dm.labeled[i] for i in next(lab).tolist()], with_question=True),
                     "position": position}
            if unl is not None:
                rows = next(unl).tolist()
                batch["unl"] = dm.collate_unlabeled(rows)
                batch["unl"]["index"] = torch.tensor(rows)
            yield batch
            position += 1


class SemiSupervisedSquadDataModule(pl.LightningDataModule):
    data_parallel = False  # the two streams are not split by rank

    def __init__(self, source: Literal["mini", "path", "download"] = "path", path: str | None = None,
                 cache_dir: str | None = None, mini: Literal["wiki", "synthetic"] = "wiki", label_rate: float = 0.1,
                 test_fraction: float = 0.1, split_seed: int = 0, seed: int = 0, unlabeled: bool = True,
                 unlabeled_path: str | None = None, unlabeled_size: int | None = 50000, answers_per_paragraph: int = 5,
                 generator_vocab: bool = True, lowercase: bool = True, digits_to_zero: bool = True,
                 g_vocab_min_count: int = 2, g_vocab_max: int | None = 30000, d_vocab_min_count: int = 1,
                 d_vocab_max: int | None = 200000, d_vocab_from: Literal["all", "training"] = "training",
                 max_paragraph_tokens: int | None = None,
                 max_question_tokens: int = 60, g_max_question_tokens: int = 20, batch_size: int = 32,
                 unlabeled_batch_size: int = 32, eval_batch_size: int = 64,
                 extractor: Literal["heuristic", "spacy"] | None = None, spacy_model: str = "en_core_web_sm",
                 num_proc: int | None = None) -> None:
        super().__init__()
        check_label_rate(label_rate)
        if d_vocab_from not in ("all", "training"):
            raise ConfigError(f"data.d_vocab_from={d_vocab_from!r}: choose 'all' or 'training'.")
        if mini not in MINIS:
            raise ConfigError(f"data.mini={mini!r}: choose one of {sorted(MINIS)}.")
        if extractor not in (None, "heuristic", "spacy"):
            raise ConfigError(f"data.extractor={extractor!r}: choose null (the file's answers), heuristic or spacy.")
        if g_max_question_tokens < 2:
            raise ConfigError("data.g_max_question_tokens must be >= 2 (a word and <eos>).")
        self.save_hyperparameters()
        self.norm = TextNorm(lowercase, digits_to_zero)
        self.passages: list[Passage] = []
        self.labeled: list[Item] = []
        self.unlabeled: UnlabeledPairs | list = []  # [] without U
        self.splits: dict[str, list[Item]] = {}
        self.vocab: Vocabulary | None = None
        self.g_vocab_size = 0
        self._words: Tokenised = {}
        self._train_pool: list[Item] = []
        self.skipped = 0
        self.next_position = 0

    # ------------------------------------------------------------------------------------------------ files
    def _root(self) -> Path:
        hp = self.hparams
        spec = MINIS[hp.mini] if hp.source == "mini" else squad_spec("1.1")
        return locate(spec, hp.source, hp.path, hp.cache_dir)

    def _unlabeled_file(self, root: Path) -> Path:
        hp = self.hparams
        if hp.unlabeled_path:
            return Path(hp.unlabeled_path).expanduser()
        if hp.source == "download":
            raise DataError("data.unlabeled=true with data.source=download: the thesis' unlabelled Wikipedia "
                            "paragraphs are not published; pass data.unlabeled_path=/your/unlabeled.jsonl (one "
                            '{"id", "context", "answers": [{"text", "answer_start", "type"}]} per line).')
        return root / "unlabeled.jsonl"

    def prepare_data(self) -> None:
        self._root()

    def setup_bytes(self) -> int:
        """Host memory ``setup`` keeps (``genlab.cli.memory_data``), from the sizes of the SQuAD files where it will
        read them (stat only; a file not there yet counts as the official v1.1 file, a mini not yet built as
        nothing) and from ``unlabeled_size`` (all of U's pairs when null: as many as 50,000 per 10 MB of the
        unlabelled file, 20,000 paragraphs of five answers)."""
        hp = self.hparams
        root = expected_root(MINIS[hp.mini] if hp.source == "mini" else squad_spec("1.1"), hp.source, hp.path,
                             hp.cache_dir)
        json_bytes = sum((root / name).stat().st_size if (root / name).is_file()
                         else 0 if hp.source == "mini" else size for name, size in SQUAD11_BYTES.items())
        pairs = 0
        if hp.unlabeled:
            pairs = hp.unlabeled_size
            if pairs is None:
                file = self._unlabeled_file(root)
                pairs = file.stat().st_size // 200 if file.is_file() else 0
        return HELD_PER_JSON_BYTE * json_bytes + HELD_PER_UNLABELED_PAIR * pairs

    # ------------------------------------------------------------------------------------------------ set-up
    def _passage(self, context: str, cache: dict[str, int]) -> int:
        if context not in cache:
            words, offsets = self._words[context]
            cap = self.hparams.max_paragraph_tokens
            if cap is not None:
                words, offsets = words[:cap], offsets[:cap]
            cache[context] = len(self.passages)
            self.passages.append(Passage(context, words, offsets))
        return cache[context]

    def _span(self, passage: int, start: int, text: str) -> tuple[int, int] | None:
        p = self.passages[passage]
        if not text or p.context[start:start + len(text)] != text:
            return None
        return token_span(p.offsets, start, start + len(text))

    def _labeled_item(self, ex: QAExample, cache: dict[str, int], evaluation: bool) -> Item | None:
        pid = self._passage(ex.context, cache)
        span = None
        for a in ex.answers[:1] if not evaluation else ex.answers:
            try:
                span = self._span(pid, int(a["answer_start"]), str(a["text"]))
            except (KeyError, TypeError, ValueError):
                span = None
            if span is not None:
                break
        if span is None and not evaluation:
            return None
        question = self._words[ex.question][0][:self.hparams.max_question_tokens] or ["<unk>"]
        golds = [str(a.get("text", "")) for a in ex.answers if isinstance(a, dict)]
        return Item(pid, *(span or (0, 0)), question=question, qid=ex.qid, golds=golds)

    def _items(self, questions: list[QAExample], cache: dict[str, int], evaluation: bool, what: str) -> list[Item]:
        """:meth:`_labeled_item` of each question (the usable ones), logging progress by question bytes (SQuAD's
        100k questions take seconds)."""
        items = (self._labeled_item(q, cache, evaluation) for q in tracked(questions, what, _question_bytes))
        return [it for it in items if it is not None]

    def setup(self, stage: str | None = None) -> None:
        if self.vocab is not None:
            return
        hp = self.hparams
        root = self._root()
        articles = read_articles(root / "train-v1.1.json")
        n_original = sum(len(qs) for _, qs in articles)
        train_q, test_q = split_by_article(articles, hp.test_fraction, hp.split_seed)
        dev_q = [q for _, qs in read_articles(root / "dev-v1.1.json") for q in qs]
        labelled = [*train_q, *test_q, *dev_q]
        self._words = tokenize_all(chain((q.context for q in labelled), (q.question for q in labelled)), self.norm,
                                   hp.cache_dir, hp.num_proc)
        cache: dict[str, int] = {}
        usable = self._items(train_q, cache, False, "finding the answers of train-v1.1.json")
        self.skipped = len(train_q) - len(usable)
        if not usable:
            raise DataError(f"{root / 'train-v1.1.json'} has no usable answers ({len(train_q)} training questions "
                            "after the test articles, none whose first answer equals context[answer_start:][:len(text)]"
                            f"{' within data.max_paragraph_tokens' if hp.max_paragraph_tokens else ''}); use the "
                            "official SQuAD v1.1 files (or fix the answer offsets).")
        if self.skipped:
            log.warning("%d training questions had no usable answer span and were skipped", self.skipped)
        self.labeled = [usable[i] for i in labeled_subset(len(usable), hp.label_rate, n_original, hp.seed).tolist()]
        self._train_pool = usable
        self.splits = {"dev": self._items(dev_q, cache, True, "reading the answers of dev-v1.1.json"),
                       "test": self._items(test_q, cache, True, "reading the answers of the test articles")}
        for split, where in (("dev", root / "dev-v1.1.json"), ("test", f"{root / 'train-v1.1.json'} (its held-out "
                                                                         "test articles)")):
            _check_scorable(self.splits[split], where)
        if hp.unlabeled:
            self.unlabeled = read_pairs(self._unlabeled_file(root), self._extractor(), self.norm, hp.cache_dir,
                                        hp.num_proc, hp.answers_per_paragraph, hp.split_seed,
                                        hp.max_paragraph_tokens, hp.unlabeled_size)
        self._build_vocab()
        self._words = {}  # every passage holds its words now
        self.n_original = n_original
        log.info("GDAN data: %d training questions (file), L = %d (rate %.2f), test %d, dev %d, U %d pairs; "
                 "|V_D| = %d, |V_G| = %d", n_original, len(self.labeled), hp.label_rate, len(self.splits["test"]),
                 len(self.splits["dev"]), len(self.unlabeled), len(self.vocab), self.g_vocab_size)

    def _extractor(self) -> AnswerExtractor | None:
        """``data.extractor``: null keeps the answers of the unlabelled file; heuristic / spacy re-extract them."""
        kind = self.hparams.extractor
        if kind == "spacy":
            from genlab.data.qa.tagged_answers import SpacyExtractor  # spaCy is an optional extra

            return SpacyExtractor(self.hparams.spacy_model)
        return HeuristicExtractor() if kind == "heuristic" else None

    def _build_vocab(self) -> None:
        """G's words: those in at least ``g_vocab_min_count`` distinct L paragraphs (with their L questions). D's: G's
        words, then

        * ``d_vocab_from=training`` (default): the other words D trains on (L's questions and paragraphs, U's
          paragraphs); any other word is <unk>. With randomly initialised embeddings nothing else can be learnt, and
          nothing of the evaluation text leaks into the model's input space. U then also buys vocabulary coverage.
        * ``d_vocab_from=all``: every word of the text read, all splits -- the GA reader's own preprocessing
          (bdhingra/ga-reader utils/DataPreprocessor.py builds its dictionary from the training, validation and test
          files), meant for pretrained vectors (GloVe): a word seen only in dev/test keeps its vector, which matches
          the same word (qe_comm, attention) instead of being one <unk> that matches every other.
        On the real-data mini the choice decides whether Context beats SL (experiments/gdan/README.md)."""
        hp = self.hparams
        l_tokens: Counter = Counter()  # every word occurrence of L (D's counts)
        examples: dict[int, set[str]] = {}  # distinct L paragraph -> its words and its L questions' words
        for it in self.labeled:
            l_tokens.update(it.question)
            examples.setdefault(it.passage, set()).update(it.question)
        for pid in sorted(examples):
            l_tokens.update(self.passages[pid].words)
            examples[pid].update(self.passages[pid].words)
        # G's counts are paragraph frequencies: a question word is usually a word of its own paragraph, so counting
        # occurrences puts nearly every L question word twice, hence in G's vocabulary, and G never learns to copy
        # (on the wiki mini 100 % of L's target words were vocabulary words, 28 % of dev's copies).
        g_counts = Counter(w for pid in sorted(examples) for w in sorted(examples[pid]))
        d_counts: Counter = Counter()
        if hp.d_vocab_from == "all":  # every paragraph and question read
            for p in self.passages:
                d_counts.update(p.words)
            for it in [*self._train_pool, *self.splits["dev"], *self.splits["test"]]:
                d_counts.update(it.question)
            counted = self.passages
        else:
            d_counts.update(l_tokens)
            counted = [self.passages[pid] for pid in examples]
        if self.unlabeled:  # a paragraph counts once per text: one equal to a passage counted above is that passage
            rows = self.unlabeled.paragraphs(hp.d_vocab_from == "all", {context_digest(p.context) for p in counted})
            self.unlabeled.count_words(rows, d_counts)
        self.vocab, self.g_vocab_size = shared_vocabularies(g_counts, d_counts, hp.g_vocab_min_count, hp.g_vocab_max,
                                                            hp.d_vocab_min_count, hp.d_vocab_max)
        for p in tracked(self.passages, "writing the ids of SQuAD's paragraphs", lambda p: text_bytes(p.context)):
            p.d_ids = self.vocab.ids(p.words)
            p.g_ext = extended_ids(p.words, p.d_ids, self.g_vocab_size)
        if self.unlabeled:
            self.unlabeled.encode_ids(self.vocab, self.g_vocab_size, hp.cache_dir, hp.num_proc)

    def _g_target(self, question: list[str], passage: Passage) -> np.ndarray:
        """MLE target ids: in-vocabulary words, OOV words of the paragraph by their copy slot, else <unk>; <eos>."""
        words = question[:self.hparams.g_max_question_tokens - 1]
        ids = self.vocab.ids(words)
        slot = {w: int(e) for w, e in zip(passage.words, passage.g_ext.tolist()) if e >= self.g_vocab_size}
        out = [d if (d < self.g_vocab_size and d != UNK) else slot.get(w, UNK) for w, d in zip(words, ids.tolist())]
        return np.array(out + [EOS], dtype=np.int64)

    # ------------------------------------------------------------------------------------------------ batches
    def _paragraphs(self, d_ids: list[np.ndarray], g_exts: list[np.ndarray], starts: list[int],
                    ends: list[int]) -> dict[str, Any]:
        width = max(1, max(len(d) for d in d_ids))
        n = len(d_ids)
        p_ids = torch.full((n, width), PAD, dtype=torch.long)
        g_ext = torch.full((n, width), PAD, dtype=torch.long)
        for r, (d, g) in enumerate(zip(d_ids, g_exts)):
            p_ids[r, :len(d)] = torch.from_numpy(d)
            g_ext[r, :len(g)] = torch.from_numpy(g)
        lengths = torch.tensor([len(d) for d in d_ids])
        return {"p_ids": p_ids, "p_mask": torch.arange(width)[None, :] < lengths[:, None],
                "start": torch.tensor(starts), "end": torch.tensor(ends),
                "g_p_ext": g_ext, "g_p_ids": g_ext.masked_fill(g_ext >= self.g_vocab_size, UNK)}

    def collate_unlabeled(self, pairs: list[int]) -> dict[str, Any]:
        """U's pairs ``pairs`` (positions in ``self.unlabeled``) as a batch without questions."""
        return self._paragraphs(*self.unlabeled.arrays(pairs))

    def collate(self, items: list[Item], with_question: bool, evaluation: bool = False) -> dict[str, Any]:
        ps = [self.passages[it.passage] for it in items]
        out = self._paragraphs([p.d_ids for p in ps], [p.g_ext for p in ps], [it.start for it in items],
                               [it.end for it in items])
        n, width = out["p_ids"].shape
        if with_question:
            qs = [self.vocab.ids(it.question) for it in items]
            out["q_ids"], out["q_mask"] = _pad([torch.from_numpy(q) for q in qs])
            targets = [torch.from_numpy(self._g_target(it.question, p)) for it, p in zip(items, ps)]
            out["g_q_ids"], out["g_q_mask"] = _pad(targets)
        if evaluation:
            offsets = torch.zeros(n, width, 2, dtype=torch.long)
            for r, p in enumerate(ps):
                offsets[r, :len(p.words)] = torch.from_numpy(p.offsets)
            out.update(qid=[it.qid for it in items], context=[p.context for p in ps], offsets=offsets,
                       answers=[it.golds for it in items])
        return out

    def train_dataloader(self) -> DataLoader:
        return DataLoader(_Stream(self, self.next_position), batch_size=None)

    # Count a training batch when Lightning hands it to the step, not when it is prefetched (``next_position`` is what
    # a checkpoint records): the semi-supervised image streams' bookkeeping, shared as is.
    on_before_batch_transfer = SSLImageDataModule.on_before_batch_transfer

    def _eval_loader(self, split: str) -> DataLoader:
        return DataLoader(_Items(self.splits[split]), batch_size=self.hparams.eval_batch_size,
                          collate_fn=lambda items: self.collate(items, with_question=True, evaluation=True))

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader("dev")

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader("test")

    def gold(self, split: str) -> list[dict]:
        """``split``'s questions as a SQuAD ``data`` list (ids and gold texts) for genlab.metrics.squad_eval."""
        qas = [{"id": it.qid, "answers": [{"text": t} for t in it.golds]} for it in self.splits[split]]
        return [{"paragraphs": [{"qas": qas}]}]

    def random_span_predictions(self, split: str, seed: int = 0, max_len: int = 15) -> dict[str, str]:
        """A uniformly random legal span (start uniform, length uniform in 1..max_len, cut at the paragraph end)
        per question: the chance level of check 23 (a)."""
        rng = np.random.default_rng(seed)
        preds = {}
        for it in self.splits[split]:
            p = self.passages[it.passage]
            j = int(rng.integers(len(p.words)))
            k = min(len(p.words) - 1, j + int(rng.integers(max_len)))
            preds[it.qid] = p.context[p.offsets[j, 0]:p.offsets[k, 1]]
        return preds

    # ------------------------------------------------------------------------------------------------ run record
    @property
    def has_unlabeled(self) -> bool:
        return bool(self.unlabeled)

    def model_overrides(self) -> dict[str, Any]:
        sizes: dict[str, Any] = {"reader": {"vocab_size": len(self.vocab)}}
        if self.hparams.generator_vocab:
            sizes["generator"] = {"vocab_size": self.g_vocab_size}
        return sizes

    def identity(self) -> dict[str, Any]:
        digest = hashlib.sha256("\n".join(self.vocab.words).encode()).hexdigest()[:16]
        return {"dataset": f"squad1.1-{self.hparams.mini}" if self.hparams.source == "mini" else "squad1.1",
                "label_rate": self.hparams.label_rate, "n_labeled": len(self.labeled),
                "n_unlabeled": len(self.unlabeled), "vocab_digest": digest, "vocab_size": len(self.vocab),
                "g_vocab_size": self.g_vocab_size}

    def state_dict(self) -> dict[str, Any]:
        return {"next_position": self.next_position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.next_position = int(state.get("next_position", 0))


def _check_scorable(items: list[Item], where: Any) -> None:
    """Every evaluation question needs a gold answer text, as the official v1.1 script does (it stops on a question
    without one): without them every score would be 0 and model selection would pick the first checkpoint."""
    if not items:
        raise DataError(f"{where} holds no question: GDAN selects and tests on SQuAD v1.1-format questions.")
    missing = [it.qid for it in items if not any(g.strip() for g in it.golds or [])]
    if missing:
        raise DataError(f"{where}: {len(missing)} of {len(items)} questions have no usable answer (e.g. id "
                        f"{missing[0]!r}); every question needs answers: [{{\"text\", \"answer_start\"}}] with a "
                        "non-empty text, as in the official SQuAD v1.1 files.")


def _question_bytes(q: QAExample) -> int:
    return text_bytes(q.question)


def _pad(seqs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=PAD)
    lengths = torch.tensor([len(s) for s in seqs])
    return ids, torch.arange(ids.shape[1])[None, :] < lengths[:, None]
