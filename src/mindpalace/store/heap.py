"""Resident memory of large in-process index builds: hand the heap memory a build freed back to
the operating system (:func:`release_free_heap`), and read rows into a buffer whose growth
copies nothing (:class:`GrowingBuffer`).

Building the BM25 posting cache or a vector index from 100k+ rows allocates tens of MB of
temporaries (row tuples, token lists, occurrence arrays) that are freed when the build ends.
glibc's allocator keeps most of it mapped: its mmap threshold rises with every large block
freed, so later temporaries of a few MB come from the heap, whose free pages stay resident
until ``malloc_trim`` returns them (measured at 100k facts: 14 MB of a 128 MB process). Other
C libraries (musl, macOS) have no ``malloc_trim``: then nothing is done.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import sys
from collections.abc import Callable
from functools import cache

import numpy as np

TRIM_MIN_ROWS = 20_000
"""Rows (documents or vectors) from which a build is followed by :func:`release_free_heap`:
below it the temporaries are too small to matter."""


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the C library this process already runs on
    except (OSError, AttributeError):  # not glibc
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_free_heap(rows: int) -> bool:
    """After a build of `rows` rows: return the free heap pages to the operating system when
    the build was large (``rows >= TRIM_MIN_ROWS``) and the C library can (glibc). Returns
    whether memory was released. Costs about a millisecond per 100 MB of heap; never raises."""
    if rows < TRIM_MIN_ROWS:
        return False
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False


class GrowingBuffer:
    """Bytes appended at the end, held in an anonymous memory map that grows in place.

    Growing a ``bytearray`` to tens of MB copies it on every growth, and below glibc's (risen)
    mmap threshold each freed copy stays resident: reading 100k 64-d vectors held ~15 MB of
    such copies at the peak. A memory map grows by remapping its pages (``mremap``), never
    copying them, and untouched capacity costs no resident memory. Where a map cannot grow in
    place (no ``mremap``), the bytes move to a ``bytearray`` once and grow there.
    """

    def __init__(self, capacity: int = 1 << 20) -> None:
        self._map: mmap.mmap | None = None
        # private: a shared anonymous map is backed by a fixed-size object, and pages past
        # its first size would fault (SIGBUS) after growing
        flags = getattr(mmap, "MAP_PRIVATE", None), getattr(mmap, "MAP_ANONYMOUS", None)
        if flags[0] is not None and flags[1] is not None:  # POSIX; else a bytearray
            with contextlib.suppress(OSError):
                self._map = mmap.mmap(-1, max(capacity, mmap.PAGESIZE), flags=flags[0] | flags[1])
        self._bytes = bytearray()
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def extend(self, data: bytes) -> None:
        """Append `data`."""
        end = self._n + len(data)
        held = self._map
        if held is not None and end > len(held):
            try:
                held.resize(max(end, 2 * len(held)))
            except (OSError, SystemError, ValueError):  # no in-place growth on this platform
                self._bytes = bytearray(held[: self._n])
                held.close()
                self._map = held = None
        if held is not None:
            held[self._n : end] = data
        else:
            self._bytes += data
        self._n = end

    def array(self, dtype: type[np.generic], *, spare: int = 0) -> np.ndarray:
        """The bytes written as a writable 1-D array of `dtype` sharing this buffer's memory
        (the buffer is handed over: extend it no more). `spare`: bytes of room kept past them
        (a multiple of the item size) and included in the array — zero pages of the map, no
        resident memory until written; kept only when the buffer is a map (else none)."""
        held = self._map
        if held is None:
            return np.frombuffer(self._bytes, dtype)
        if self._n == 0:
            return np.empty(0, dtype)
        end = self._n + max(spare, 0)
        with contextlib.suppress(OSError, SystemError, ValueError):
            held.resize(end)  # to the bytes plus their room (a remap, no copy)
        return np.frombuffer(held, dtype, count=min(end, len(held)) // np.dtype(dtype).itemsize)
