"""Write a 2-D ``.npy`` file row block by row block, without knowing the row count up front.

The header (format 1.0) is written last, over a reserved 128 bytes: what numpy itself writes
for any 2-D shape below 10**20 rows. Data goes to ``<name>.tmp`` and is renamed into place only
when complete, so a crash never leaves a truncated ``.npy`` that looks finished.
"""

import os
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

import numpy as np

from dlrm_exp.util.files import replace_durably, sync_open_file

HEADER_BYTES = 128


def _write_header(f: BinaryIO, path: Path, dtype: np.dtype, rows: int, columns: int) -> None:
    """The npy header of a (``rows``, ``columns``) ``dtype`` array at the start of ``f``.

    Raises:
        ValueError: it is not :data:`HEADER_BYTES` long (the rows are written after it).
    """
    f.seek(0)
    header = {
        "descr": np.lib.format.dtype_to_descr(dtype),
        "fortran_order": False,
        "shape": (rows, columns),
    }
    np.lib.format.write_array_header_1_0(f, header)
    if f.tell() != HEADER_BYTES:
        raise ValueError(f"npy header of {path} is {f.tell()} bytes, not {HEADER_BYTES}")


class NpyRowWriter:
    """Append (n, columns) blocks of ``dtype``; :meth:`close` writes the header and renames.

    Raises:
        ValueError: a block with another column count, or a header that does not fit.
    """

    def __init__(self, path: Path, dtype: np.dtype | type, columns: int) -> None:
        self.path = Path(path)
        self.tmp = self.path.with_name(self.path.name + ".tmp")
        self.dtype = np.dtype(dtype)
        self.columns = columns
        self.rows = 0
        self._file = open(self.tmp, "wb")
        self._file.seek(HEADER_BYTES)

    def append(self, block: np.ndarray) -> None:
        """Append rows: ``block`` is reshaped to (n, columns) and cast to the file's dtype."""
        block = np.asarray(block, dtype=self.dtype).reshape(-1, self.columns)
        self._file.write(np.ascontiguousarray(block).data)
        self.rows += block.shape[0]

    def close(self) -> Path:
        """Write the header, sync, and move the file into place (the partial file removed if
        any of it fails: a 1TB day's is about 40 GB, and a full disk is the likely cause)."""
        try:
            _write_header(self._file, self.path, self.dtype, self.rows, self.columns)
            sync_open_file(self._file)
            self._file.close()
            replace_durably(self.tmp, self.path)
        except BaseException:
            self.abort()
            raise
        return self.path

    def abort(self) -> None:
        """Drop the partial file."""
        self._file.close()
        self.tmp.unlink(missing_ok=True)

    def __enter__(self) -> "NpyRowWriter":
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class NpyRowFile:
    """A 2-D ``.npy`` file filled by row offset, from any process: :meth:`write_rows` opens
    the ``.tmp`` file by name and ``pwrite``s, so parallel workers can each write their block
    where it belongs. :meth:`finish` writes the header (the row count is known only then) and
    renames; :meth:`abort` drops the partial file.
    """

    def __init__(self, path: Path, dtype: np.dtype | type, columns: int) -> None:
        self.path = Path(path)
        self.tmp = self.path.with_name(self.path.name + ".tmp")
        self.dtype = np.dtype(dtype)
        self.columns = columns
        self.tmp.write_bytes(b"\0" * HEADER_BYTES)

    def write_rows(self, row: int, block: np.ndarray) -> None:
        """Write ``block`` (cast to the file's dtype, reshaped to (n, columns)) at ``row``."""
        data = np.ascontiguousarray(np.asarray(block, dtype=self.dtype).reshape(-1, self.columns))
        if not data.size:
            return
        fd = os.open(self.tmp, os.O_WRONLY)
        try:
            offset = HEADER_BYTES + row * self.columns * self.dtype.itemsize
            view = memoryview(data).cast("B")
            while view:
                written = os.pwrite(fd, view, offset)
                view, offset = view[written:], offset + written
        finally:
            os.close(fd)

    def finish(self, rows: int) -> Path:
        """Write the header for ``rows`` rows, cut anything beyond them, and move the file
        into place."""
        with open(self.tmp, "r+b") as f:
            _write_header(f, self.path, self.dtype, rows, self.columns)
            f.truncate(HEADER_BYTES + rows * self.columns * self.dtype.itemsize)
            sync_open_file(f)  # on disk before the day's marker vouches for it
        replace_durably(self.tmp, self.path)
        return self.path

    def abort(self) -> None:
        """Drop the partial file."""
        self.tmp.unlink(missing_ok=True)
