"""On-disk cache of compiled objects: one file per key, verified before use, replaced atomically.

An entry is the machine code (an object file, as ``TargetMachine.emit_object`` writes it) and
the optimised LLVM IR of one module. The key (:func:`cache_key`) is a SHA-256 over everything
that decides the machine code: the unoptimised module text (which holds no process-specific
address), a caller-supplied salt (tapejit's version), llvmlite's and LLVM's versions, and the
target triple, CPU name and feature string.

File format: ``MAGIC``, the SHA-256 of the payload (32 bytes), then the payload: the key as 64
hex digits, a 4-byte count of *parts*, and each part as a 2-byte name length, the name, an
8-byte length and that many bytes (all little-endian). A part is whatever the caller stores
under a name (tapejit stores the object code, the compressed LLVM IR and a JSON description of
the compiled function: :func:`encode_entry` / :func:`decode_entry`). :meth:`ObjectCache.load` returns ``None`` — a miss, and the next store
replaces the file — for a missing, truncated, garbled or foreign entry (wrong magic, checksum,
key or framing) or for anything but a regular file (a FIFO, a symlink — to ``/dev/zero`` or
elsewhere —, a device or a directory: opened without following links or blocking, and read up
to its size), never loading it blindly. :meth:`ObjectCache.store` writes a temporary file in
the same directory and renames it over the entry (atomic on POSIX and Windows), so processes
compiling the same function at once each write a whole entry and readers never see half of one.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import struct
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import llvmlite
import llvmlite.binding as llvm
import numpy as np

from . import target

MAGIC = b"TAPEJIT-OBJ-2\n"
SUFFIX = ".tjo"


def cache_key(text: str, salt: str) -> str:
    """The hex SHA-256 key of ``text`` (what decides the machine code) for this toolchain and
    host (see the module docstring)."""
    triple, cpu, features = target.host()
    h = hashlib.sha256()
    for part in (salt, llvmlite.__version__, str(llvm.llvm_version_info), triple, cpu, features):
        h.update(part.encode())
        h.update(b"\0")
    h.update(text.encode())
    return h.hexdigest()


#: The largest entry read (a bigger file is not one this cache wrote: a miss).
MAX_ENTRY_BYTES = 1 << 31


def _read_regular(path: Path) -> bytes | None:
    """The bytes of ``path`` if it is a regular file (not a symlink, FIFO, device or
    directory) of at most :data:`MAX_ENTRY_BYTES`, read up to the size it had when opened;
    ``None`` otherwise. Never blocks on a FIFO (``O_NONBLOCK``) nor follows a link into
    ``/dev/zero`` (``O_NOFOLLOW``, then ``fstat``)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    flags |= getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError:  # absent, a symlink (ELOOP), unreadable
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_ENTRY_BYTES:
            return None
        chunks, left = [], st.st_size
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 24))
            if not chunk:  # truncated meanwhile
                return None
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


class ObjectCache:
    """Compiled objects under ``directory`` (created on first store)."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)

    def path(self, key: str) -> Path:
        return self.directory / f"{key}{SUFFIX}"

    def load(self, key: str) -> dict[str, bytes] | None:
        """The parts stored under ``key``, or ``None`` if absent or not valid."""
        data = _read_regular(self.path(key))
        if data is None:
            return None
        head = len(MAGIC) + 32
        if len(data) < head + 64 + 4 or not data.startswith(MAGIC):
            return None
        payload = data[head:]
        if hashlib.sha256(payload).digest() != data[len(MAGIC) : head]:
            return None
        if payload[:64].decode("ascii", "replace") != key:
            return None
        try:
            (count,) = struct.unpack_from("<I", payload, 64)
            pos, parts = 68, {}
            for _ in range(count):
                (n,) = struct.unpack_from("<H", payload, pos)
                name = payload[pos + 2 : pos + 2 + n].decode()
                (size,) = struct.unpack_from("<Q", payload, pos + 2 + n)
                pos += 10 + n
                parts[name] = payload[pos : pos + size]
                if len(parts[name]) != size:
                    return None
                pos += size
        except (struct.error, UnicodeDecodeError):
            return None
        return parts if pos == len(payload) else None

    def store(self, key: str, parts: dict[str, bytes]) -> None:
        """Write the entry for ``key`` atomically; errors (read-only disk, ...) are ignored: a
        cache that cannot be written only costs a recompile."""
        chunks = [key.encode(), struct.pack("<I", len(parts))]
        for name, value in parts.items():
            raw = name.encode()
            chunks += [struct.pack("<H", len(raw)), raw, struct.pack("<Q", len(value)), value]
        payload = b"".join(chunks)
        data = MAGIC + hashlib.sha256(payload).digest() + payload
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=self.directory)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, self.path(key))
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError:
            pass

    def entries(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        return sorted(
            p for p in self.directory.iterdir() if p.suffix == SUFFIX and not p.name.startswith(".")
        )

    def info(self) -> dict:
        """``{"directory", "entries", "bytes"}``."""
        files = self.entries()
        return {
            "directory": str(self.directory),
            "entries": len(files),
            "bytes": sum(p.lstat().st_size for p in files),
        }

    def clear(self) -> int:
        """Remove every entry (and stale temporary files); returns the number of entries removed."""
        removed = 0
        if not self.directory.is_dir():
            return 0
        for p in self.directory.iterdir():
            if p.suffix == SUFFIX:
                removed += not p.name.startswith(".")
                p.unlink(missing_ok=True)
        return removed


# -- the entry of one compiled function ------------------------------------------------------


@dataclass
class Entry:
    """A compiled function as a cache entry holds it: ``meta`` (a JSON-able description the
    caller chose), the object code, the LLVM IR before and after optimisation (zlib-compressed
    UTF-8; :func:`text` decompresses) and the constant arrays the code takes."""

    meta: dict[str, Any]
    object: bytes
    llvm: bytes
    llvm_opt: bytes
    consts: list[np.ndarray]


def text(compressed: bytes | str) -> str:
    """The text of a compressed LLVM IR part (a ``str`` is returned as it is)."""
    return compressed if isinstance(compressed, str) else zlib.decompress(compressed).decode()


def encode_entry(
    meta: dict[str, Any],
    obj: bytes,
    llvm_text: str,
    llvm_opt_text: str,
    consts: list[np.ndarray],
    captured: Mapping[int, np.ndarray],
) -> dict[str, bytes]:
    """The parts of a cache entry. A constant that *is* one of the ``captured`` arrays (the
    arrays the traced function closed over, which the key already covers) is stored as its
    index there; only constants made by the compiler are stored as ``.npy`` data."""

    def where(a: np.ndarray) -> tuple:
        return a.__array_interface__["data"][0], a.shape, a.dtype.str

    index = {where(np.asarray(a)): i for i, a in captured.items()}
    refs, parts = [], {}
    for k, c in enumerate(consts):
        i = index.get(where(c))
        if i is None:
            buf = io.BytesIO()
            np.save(buf, c, allow_pickle=False)
            parts[f"const{k}"] = buf.getvalue()
            refs.append(["data", k])
        else:
            refs.append(["trace", i])
    parts["object"] = obj
    # level 1: a third of level 6's time (4 vs 12 ms for 1.3 MB of LLVM IR), 1.5x the size
    parts["llvm"] = zlib.compress(llvm_text.encode(), 1)
    parts["llvm-opt"] = zlib.compress(llvm_opt_text.encode(), 1)
    parts["meta"] = json.dumps({**meta, "consts": refs}).encode()
    return parts


def decode_entry(
    parts: dict[str, bytes] | None, captured: Mapping[int, np.ndarray]
) -> Entry | None:
    """The :class:`Entry` of ``parts`` (see :func:`encode_entry`), or ``None`` when there is
    none or it does not decode (the caller then compiles and replaces it)."""
    if parts is None:
        return None
    try:
        meta = json.loads(parts["meta"])
        consts = []
        for kind, i in meta.pop("consts"):
            if kind == "trace":
                consts.append(np.ascontiguousarray(captured[i]))
            else:
                consts.append(np.load(io.BytesIO(parts[f"const{i}"]), allow_pickle=False))
        return Entry(meta, parts["object"], parts["llvm"], parts["llvm-opt"], consts)
    except (KeyError, ValueError, TypeError, IndexError, OSError, AttributeError):
        return None
