"""SentencePiece tokenizer: train (unigram or BPE) from text files, load, encode/decode, identify.

User-defined symbols (e.g. XLNet's ``<eop>``) are always cut out of raw text as one piece; control symbols
(``<cls>``, ``<sep>``, ``<mask>`` ...) get reserved ids but are never produced from text. A model is identified by
the sha256 of its serialized proto (:meth:`SentencePieceTokenizer.fingerprint`), so a checkpoint can refuse a
different tokenizer. ``required_symbols`` are checked on load: a model without them is a clear error.

Training memory is bounded: SentencePiece holds the text it trains on in memory, about 20 bytes per byte of it
(XLNet's 32k unigram model on 5.4 / 10 / 21.6 / 40 MB of text: 145 / 238 / 474 / 848 MB peak RSS), so text beyond
:data:`MAX_TRAINING_BYTES` is not handed over whole: a seeded random sample of its lines of about that size is
streamed into a temporary file and trained on instead (40 MB with the bound at 5.4 MB: 150 MB). Text under the bound
trains exactly as before (same files, same options, the same model). 50 MB (~9M words) is past the point where more
text helps: on Zipf-distributed paragraphs over 100k words those models spend 0.354 / 0.342 / 0.345 / 0.345 pieces
per held-out byte. GPT's 40k BPE needs far less memory: 106 / 115 / 188 MB peak for 5.4 / 10 / 40 MB.
(``experiments/perf/tokenizer_training.py``.)

SentencePiece silently skips every input line over ``max_sentence_length`` bytes (4,192 by default): a paragraph,
article or review on one line would never reach training. Such lines are cut at whitespace into pieces under the
bound in the text written for training (:func:`cut_line`; pieces never span whitespace, so nothing learnable is
lost), and the count is logged. The stored model records no input path (``trainer_spec.input`` is cleared), so the
same text and options give the same bytes, wherever the files or the temporary sample lived.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from genlab.data.text.chunks import line_pieces, total_bytes
from genlab.data.text.progress import Progress
from genlab.errors import DataError
from genlab.utils import atomic_write

log = logging.getLogger("genlab")
MODEL_TYPES = ("unigram", "bpe")
MAX_TRAINING_BYTES = 50_000_000
MAX_SENTENCE_LENGTH = 4192  # SentencePiece's default max_sentence_length: longer input lines are skipped by its trainer


class SentencePieceTokenizer:
    """A loaded SentencePiece model plus the symbols the caller needs from it."""

    def __init__(self, model_file: str | os.PathLike, required_symbols: Sequence[str] = ()) -> None:
        import sentencepiece as spm

        self.model_file = Path(model_file)
        try:
            proto = self.model_file.read_bytes()
        except OSError as err:
            raise DataError(f"cannot read the SentencePiece model {self.model_file} ({err}).") from err
        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.LoadFromSerializedProto(proto)
        except (RuntimeError, OSError) as err:
            raise DataError(
                f"{self.model_file} is not a SentencePiece model ({err}); point at the .model file written by training."
            ) from err
        self._fingerprint = hashlib.sha256(proto).hexdigest()
        self.check_symbols(required_symbols)

    # ------------------------------------------------------------------ training
    @classmethod
    def train(
        cls,
        files: Sequence[str | os.PathLike],
        model_file: str | os.PathLike,
        vocab_size: int,
        model_type: str = "unigram",
        user_defined_symbols: Sequence[str] = (),
        control_symbols: Sequence[str] = (),
        character_coverage: float = 1.0,
        seed: int = 0,
        max_bytes: int = MAX_TRAINING_BYTES,
        **options,
    ) -> SentencePieceTokenizer:
        """Train on ``files`` and write ``model_file`` (and ``.vocab`` beside it) atomically.

        ``options`` go to the SentencePiece trainer unchanged (e.g. ``input_sentence_size``, ``split_digits``).
        Files of more than ``max_bytes`` in all are trained on through a random sample of their lines of about
        that size (:func:`sample_lines`); lines longer than ``max_sentence_length`` (an option, default
        :data:`MAX_SENTENCE_LENGTH`) are cut at whitespace rather than skipped. The result requires the
        user-defined and control symbols it was trained with.
        """
        import sentencepiece as spm

        if model_type not in MODEL_TYPES:
            raise DataError(f"sentencepiece model_type={model_type!r} is not one of {MODEL_TYPES}.")
        paths = [Path(f) for f in files]
        missing = [str(p) for p in paths if not p.is_file()]
        if missing:
            raise DataError(f"SentencePiece training input {', '.join(missing)} does not exist; pass existing text files.")
        if not any(_has_text(p) for p in paths):
            raise DataError(f"SentencePiece training input {', '.join(map(str, paths))} is empty: nothing to learn from.")
        overlap = set(user_defined_symbols) & set(control_symbols)
        if overlap:
            raise DataError(f"symbols {sorted(overlap)} are both user-defined and control symbols; pick one kind.")
        spm.set_random_generator_seed(seed)  # input sampling / shuffling is seeded, so training is reproducible
        model = io.BytesIO()
        model_file = Path(model_file)
        try:  # before the work: a folder that cannot be written is one message, not a lost training
            model_file.parent.mkdir(parents=True, exist_ok=True)
            scratch_dir = tempfile.TemporaryDirectory(dir=model_file.parent, prefix=f".{model_file.name}.")
        except OSError as err:
            raise DataError(f"cannot write the tokenizer {model_file} ({err}); make its folder writable or point "
                            "paths.cache_dir= (or GENLAB_CACHE) at a writable folder.") from err
        with scratch_dir as scratch:
            inputs, max_line = paths, int(options.get("max_sentence_length", MAX_SENTENCE_LENGTH))
            if total_bytes(paths) > max_bytes or any(_has_long_line(p, max_line) for p in paths):
                inputs = [sample_lines(paths, Path(scratch) / "input.txt", max_bytes, seed, max_line)]
            try:
                spm.SentencePieceTrainer.train(
                    input=[str(p) for p in inputs],
                    model_writer=model,
                    vocab_size=vocab_size,
                    model_type=model_type,
                    user_defined_symbols=list(user_defined_symbols),
                    control_symbols=list(control_symbols),
                    character_coverage=character_coverage,
                    num_threads=1,
                    minloglevel=2,
                    **options,
                )
            except RuntimeError as err:
                raise DataError(
                    f"SentencePiece training on {', '.join(map(str, paths))} failed: {err}. For 'Vocabulary size too "
                    "high', lower vocab_size or give more text."
                ) from err
        with atomic_write(model_file, "wb") as f:
            f.write(_without_input_paths(model.getvalue()))
        tok = cls(model_file, required_symbols=(*user_defined_symbols, *control_symbols))
        with atomic_write(model_file.with_suffix(".vocab"), "w") as f:
            f.writelines(f"{tok.id_to_piece(i)}\t{tok._sp.GetScore(i)}\n" for i in range(len(tok)))
        return tok

    # ------------------------------------------------------------------ identity and symbols
    def fingerprint(self) -> str:
        """sha256 of the serialized model: equal exactly when pieces, scores and normalisation are equal."""
        return self._fingerprint

    def check_symbols(self, symbols: Iterable[str]) -> None:
        """Every symbol must be one piece of its own (not the unknown piece)."""
        missing = [s for s in symbols if self._sp.PieceToId(s) == self._sp.unk_id() and s != self.unk_piece]
        if missing:
            raise DataError(
                f"SentencePiece model {self.model_file} lacks the symbols {missing}. Retrain it with them as "
                "user_defined_symbols (cut out of text) or control_symbols (ids only)."
            )

    def piece_to_id(self, piece: str) -> int:
        return self._sp.PieceToId(piece)

    def id_to_piece(self, i: int) -> str:
        return self._sp.IdToPiece(i)

    def is_control(self, i: int) -> bool:
        return self._sp.IsControl(i)

    @property
    def unk_piece(self) -> str:
        return self._sp.IdToPiece(self._sp.unk_id())

    @property
    def unk_id(self) -> int:
        return self._sp.unk_id()

    def __len__(self) -> int:
        return self._sp.GetPieceSize()

    # ------------------------------------------------------------------ text
    def encode(self, text: str | list[str]) -> list[int] | list[list[int]]:
        return self._sp.Encode(text, out_type=int)

    def encode_pieces(self, text: str | list[str]) -> list[str] | list[list[str]]:
        return self._sp.Encode(text, out_type=str)

    def decode(self, ids: Sequence[int]) -> str:
        return self._sp.Decode(list(map(int, ids)))


def _has_text(path: Path) -> bool:
    with open(path, "rb") as f:
        while block := f.read(1 << 16):
            if block.strip():
                return True
    return False


def _without_input_paths(model: bytes) -> bytes:
    """The serialized model with ``trainer_spec.input`` cleared: the paths trained on (a user's folder, a temporary
    sample or build folder) would make equal models differ in their bytes, hence their fingerprints."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model)
    del proto.trainer_spec.input[:]
    return proto.SerializeToString()


def _has_long_line(path: Path, max_line: int) -> bool:
    return any(len(line) > max_line for piece in line_pieces(path) for line in piece.data.split(b"\n"))


def cut_line(line: bytes, max_line: int) -> list[bytes]:
    """``line`` (without its newline) as pieces of at most ``max_line`` bytes, cut at the last space or tab that
    fits (SentencePiece never learns a piece across whitespace, so the cut loses nothing) or, in a run of more than
    ``max_line`` bytes without one, before the last UTF-8 character that fits; blank pieces are dropped."""
    pieces = []
    while len(line) > max_line:
        cut = max(line.rfind(b" ", 0, max_line + 1), line.rfind(b"\t", 0, max_line + 1))
        if cut >= 0:
            head, line = line[:cut], line[cut + 1:]
        else:
            cut = max_line
            while cut > 0 and (line[cut] & 0xC0) == 0x80:  # a UTF-8 continuation byte: not a character start
                cut -= 1
            cut = cut or max_line  # not UTF-8 at all: cut anywhere
            head, line = line[:cut], line[cut:]
        if head.strip():
            pieces.append(head)
    if line.strip():
        pieces.append(line)
    return pieces


def sample_lines(paths: Sequence[Path], out: Path, max_bytes: int, seed: int = 0,
                 max_line: int = MAX_SENTENCE_LENGTH) -> Path:
    """Write to ``out`` each line of ``paths`` with probability ``max_bytes`` / their size (every line when they
    are smaller; seeded, so the sample is reproducible), a line of more than ``max_line`` bytes first cut into
    pieces under it (:func:`cut_line`, each then drawn on its own), streaming them a piece at a time: the sample is
    about ``max_bytes`` and memory stays at a piece. Lines are cut at ``\\n`` as SentencePiece reads them."""
    total = total_bytes(paths)
    keep = max_bytes / total
    if keep < 1:
        log.info("SentencePiece trains on a random %.1f%% of the lines of %s (%.0f MB; it holds its input in memory, "
                 "so at most ~%.0f MB of it)", 100 * keep, ", ".join(p.name for p in paths), total / 1e6,
                 max_bytes / 1e6)
    rng = np.random.default_rng(seed)
    progress = Progress(f"{'sampling' if keep < 1 else 'writing'} the tokenizer's training text", total)
    long_lines = 0
    with open(out, "wb") as f:
        for path in paths:
            for piece in line_pieces(path):
                lines = piece.data.split(b"\n")
                if piece.data.endswith(b"\n"):
                    lines.pop()
                if any(len(line) > max_line for line in lines):
                    long_lines += sum(len(line) > max_line for line in lines)
                    lines = [cut for line in lines for cut in (cut_line(line, max_line) if len(line) > max_line
                                                               else (line,))]
                chosen = np.flatnonzero(rng.random(len(lines)) < keep).tolist() if keep < 1 else range(len(lines))
                f.writelines(lines[i] + b"\n" for i in chosen)
                progress.advance(len(piece.data))
    progress.finish()
    if long_lines:
        log.info("lines cut at whitespace for SentencePiece, which skips lines over max_sentence_length (%d bytes): "
                 "%d of %s", max_line, long_lines, ", ".join(p.name for p in paths))
    return out
