"""The code of each function in a cubin (an ELF64 file): a digest of its `.text.<mangled name>`
section, the SASS bytes the GPU runs. Two builds whose digests agree run the same instructions, so
a change that leaves them alone (a template split, a comment, moved lines) needs no GPU to show it
costs nothing; one that moves them needs a measurement. No cuobjdump needed."""

from __future__ import annotations

import hashlib
import struct

_ELF64_LE = b"\x7fELF\x02\x01"
_SHT_NOBITS = 8
_TEXT = ".text."


def code_digests(cubin: bytes) -> dict[str, str]:
    """{mangled function name: first 12 hex digits of the sha256 of its code section}."""
    if not cubin.startswith(_ELF64_LE):
        raise ValueError("not a 64-bit little-endian ELF file (a cubin)")
    (shoff,) = struct.unpack_from("<Q", cubin, 0x28)
    entsize, count, names_index = struct.unpack_from("<HHH", cubin, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * entsize) for i in range(count)]
    names_at, names_size = headers[names_index][4], headers[names_index][5]
    names = cubin[names_at : names_at + names_size]
    digests = {}
    for name_offset, kind, _, _, offset, size, *_ in headers:
        name = names[name_offset : names.index(b"\0", name_offset)].decode()
        if name.startswith(_TEXT) and kind != _SHT_NOBITS:
            digests[name[len(_TEXT) :]] = hashlib.sha256(cubin[offset : offset + size]).hexdigest()[:12]
    return digests
