"""Unpickling a file a user passes without running its code: the one restricted unpickler of genlab.

A pickle names the callables it is rebuilt with (``module.name`` globals) and the unpickler calls them, so a pickle
can call ``os.system``. :func:`loads` resolves only the globals of an allow-list, the few a data format needs
(:func:`numpy_arrays`, plus each reader's own), and refuses every other one before anything is called. Formats that
use it: CIFAR-10 python batches, the Planetoid ``ind.*`` files, gensim's newsgroups mini and the index of a folder of
FSDP shards. Checkpoints themselves are read with ``torch.load(weights_only=True)`` (:mod:`genlab.checkpoints`).
"""

from __future__ import annotations

import codecs
import io
import pickle
from collections.abc import Mapping

Globals = Mapping[tuple[str, str], object]


class RefusedGlobal(pickle.UnpicklingError):
    """The pickle refers to a global outside the allow-list (it could run code); nothing was called."""


def numpy_arrays() -> dict[tuple[str, str], object]:
    """The globals numpy arrays are pickled with: by numpy 1 and 2 (``numpy.core`` / ``numpy._core``), by Python 2
    (protocol 2, ``_reconstruct``) and Python 3 (``_codecs.encode`` for bytes at protocol 2, ``_frombuffer`` at 5)."""
    import numpy as np

    core = getattr(np, "_core", None) or np.core
    table: dict[tuple[str, str], object] = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype,
                                            ("_codecs", "encode"): codecs.encode}
    for mod in ("numpy.core", "numpy._core"):
        table[(f"{mod}.multiarray", "_reconstruct")] = core.multiarray._reconstruct
        table[(f"{mod}.numeric", "_frombuffer")] = core.numeric._frombuffer
    return table


def loads(data: bytes, allowed: Globals, *, encoding: str = "ASCII") -> object:
    """Unpickle ``data``, resolving only the globals in ``allowed`` (``(module, name) -> object``); any other raises
    :class:`RefusedGlobal` naming it. ``encoding`` decodes Python 2 strings (``"latin1"``, or ``"bytes"``)."""

    class _Unpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> object:
            try:
                return allowed[(module, name)]
            except KeyError:
                raise RefusedGlobal(f"{module}.{name}") from None

    return _Unpickler(io.BytesIO(data), encoding=encoding).load()


def refusal(err: RefusedGlobal, path: object, holds: str, fix: str) -> str:
    """The user's message for a refused pickle: the file, the global it names, why it was not unpickled, ``fix``."""
    return f"{path} refers to {err}, which {holds} never holds; it was not unpickled (that could run code). {fix}"
