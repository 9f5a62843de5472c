"""A ``.npy`` file written in chunks whose total length is not known in advance (a streamed cache build).

The header is reserved at a fixed size, the rows are appended, and the final shape is written into the header on
:meth:`NpyWriter.close`: the result is a standard ``.npy`` file that ``np.load(..., mmap_mode="r")`` maps.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

HEADER_BYTES = 128


def npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """A version-1.0 ``.npy`` header padded to :data:`HEADER_BYTES`."""
    fields = f"{{'descr': {np.lib.format.dtype_to_descr(np.dtype(dtype))!r}, 'fortran_order': False, " \
             f"'shape': {tuple(shape)!r}, }}"
    header = fields.ljust(HEADER_BYTES - 10 - 1) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1")


class NpyWriter:
    """Append chunks of rows of ``dtype`` (each row of shape ``row``) to ``path``; :meth:`close` returns the rows."""

    def __init__(self, path: Path, dtype: str, row: tuple[int, ...] = ()):
        self.path, self.dtype, self.row, self.n = Path(path), np.dtype(dtype), tuple(row), 0
        self.file = open(self.path, "wb")
        self.file.write(b"\0" * HEADER_BYTES)

    def append(self, chunk: np.ndarray) -> None:
        chunk = np.ascontiguousarray(chunk, dtype=self.dtype)
        if chunk.shape[1:] != self.row:
            raise ValueError(f"{self.path.name}: rows of shape {chunk.shape[1:]}, expected {self.row}")
        self.file.write(chunk.tobytes())
        self.n += len(chunk)

    def close(self) -> int:
        self.file.seek(0)
        self.file.write(npy_header(self.dtype, (self.n, *self.row)))
        self.file.close()
        return self.n
