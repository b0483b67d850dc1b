"""The dynamic section of an ELF shared library: the libraries it needs and where it looks for them.

Enough of the ELF format (64-bit, little-endian: x86_64 and aarch64, the machines Triton runs on)
to read DT_NEEDED, DT_RPATH and DT_RUNPATH without running the library or its loader (`ldd` would
execute code, and the library's dependencies may be missing on purpose). Anything else, or a
truncated file, reads as "nothing needed".
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

_PT_LOAD, _PT_DYNAMIC = 1, 2
_DT_NULL, _DT_NEEDED, _DT_STRTAB, _DT_RPATH, _DT_RUNPATH = 0, 1, 5, 15, 29


@dataclass(frozen=True)
class Dynamic:
    """What the dynamic section of one library says."""

    needed: tuple[str, ...] = ()
    search: tuple[str, ...] = ()  # DT_RUNPATH (or DT_RPATH) entries, $ORIGIN already replaced


def read_dynamic(path: Path) -> Dynamic:
    """DT_NEEDED and the run path of the ELF file at `path`; an empty Dynamic when it is not one this reads."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError:
        return Dynamic()
    try:
        return _parse(data, path.resolve().parent)
    except (struct.error, IndexError, ValueError):
        return Dynamic()


def _parse(data: bytes, origin: Path) -> Dynamic:
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:  # ELFCLASS64, ELFDATA2LSB
        return Dynamic()
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz)
    dynamic: tuple[int, int] | None = None  # (offset, filesz)
    for index in range(phnum):
        base = phoff + index * phentsize
        p_type, = struct.unpack_from("<I", data, base)
        p_offset, p_vaddr = struct.unpack_from("<QQ", data, base + 8)
        p_filesz, = struct.unpack_from("<Q", data, base + 32)
        if p_type == _PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == _PT_DYNAMIC:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return Dynamic()
    entries: list[tuple[int, int]] = []
    offset, size = dynamic
    for at in range(offset, offset + size, 16):
        tag, value = struct.unpack_from("<qQ", data, at)
        if tag == _DT_NULL:
            break
        entries.append((tag, value))
    strtab = next((v for t, v in entries if t == _DT_STRTAB), None)
    if strtab is None:
        return Dynamic()
    table = next((off + strtab - vaddr for vaddr, off, filesz in loads if vaddr <= strtab < vaddr + filesz), None)
    if table is None:
        return Dynamic()

    def string(index: int) -> str:
        start = table + index
        return data[start:data.index(b"\x00", start)].decode("utf-8", "replace")

    needed = tuple(string(v) for t, v in entries if t == _DT_NEEDED)
    runpath = [string(v) for t, v in entries if t == _DT_RUNPATH] or [string(v) for t, v in entries if t == _DT_RPATH]
    search = tuple(part.replace("$ORIGIN", str(origin)).replace("${ORIGIN}", str(origin))
                   for entry in runpath for part in entry.split(":") if part)
    return Dynamic(needed, search)
