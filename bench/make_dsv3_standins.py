#!/usr/bin/env python3
"""Make the sparse stand-ins of the DeepSeek-V3-scale bench's data files pass the open's item check.

    make_dsv3_standins.py DIR

DIR holds the bench's `.metadata` (bench/make_dsv3_metadata.py) and its data files as sparse
stand-ins (bench/dsv3_data.sh). Zeros are no torch.save archive: the open's item check
(backend/src/read/itemcheck.cpp) would call every item it reads unreadable and then check each
file whole. This writes, into the stand-ins, a torch.save archive's records around a hole for
the tensor's bytes (the same records torch writes: data.pkl as torch pickles a tensor of the
chunk's dtype and shape, .format_version, .storage_alignment, byteorder, the data record,
version, .data/serialization_id, the central directory), padded to the item's length, for the
items the open reads: each data file's first and last item, and the first item of 1 key in
(keys / 1,024) in the index's order (tensors in state_dict_metadata order, then the objects). A
few MiB of disk; the rest of each file stays a hole.
"""
from __future__ import annotations

import io
import math
import os
import struct
import sys
import time
import zipfile
import zlib
from pathlib import Path

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import BytesStorageMetadata

SAMPLES = 1024  # itemcheck.cpp's spaced samples
SERIAL = b"0" * 40


def data_pkl(dtype: torch.dtype, sizes: tuple) -> bytes:
    b = io.BytesIO()
    torch.save(torch.zeros(sizes, dtype=dtype) if sizes is not None else 0, b)
    z = zipfile.ZipFile(io.BytesIO(b.getvalue()))
    return z.read(next(n for n in z.namelist() if n.endswith("/data.pkl")))


_crc: dict = {}


def crc_of_zeros(n: int) -> int:
    if n not in _crc:
        _crc[n] = zlib.crc32(bytes(n))
    return _crc[n]


def archive(pkl: bytes, hole: int | None, length: int) -> tuple[bytes, bytes]:
    """(head, tail) of a torch.save archive `length` bytes long whose data record, when `hole`
    is given, holds `hole` zero bytes between them."""
    records = [("data.pkl", pkl), (".format_version", b"1"), (".storage_alignment", b"64"),
               ("byteorder", b"little")]
    if hole is not None:
        records.append(("data/0", hole))
    records += [("version", b"3\n"), (".data/serialization_id", SERIAL)]

    def build(pad: int):
        head, tail, cd, pos, in_tail = bytearray(), bytearray(), bytearray(), 0, False
        for i, (name, data) in enumerate(records):
            full = ("archive/" + name).encode()
            extra = struct.pack("<HH", 0x4246, pad - 4) + bytes(pad - 4) if i == 0 and pad else b""
            size = data if isinstance(data, int) else len(data)
            crc = crc_of_zeros(size) if isinstance(data, int) else zlib.crc32(data)
            local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0, crc, size, size,
                                len(full), len(extra)) + full + extra
            cd += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0x031E, 20, 0, 0, 0, 0, crc, size,
                              size, len(full), 0, 0, 0, 0, 0, pos) + full
            out = tail if in_tail else head
            out += local
            if isinstance(data, int):
                in_tail = True
            else:
                out += data
            pos += len(local) + size
        eocd = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(records), len(records), len(cd),
                           pos, 0)
        return bytes(head), bytes(tail + cd + eocd), pos + len(cd) + len(eocd)

    head, tail, total = build(0)
    pad = length - total
    if pad == 0:
        return head, tail
    if pad < 4:
        raise SystemExit(f"cannot pad an archive of {total} bytes to {length}")
    head, tail, total = build(pad)
    assert total == length, (total, length)
    return head, tail


def main() -> int:
    d = Path(sys.argv[1])
    t0 = time.time()
    md = FileSystemReader(str(d)).read_metadata()
    print(f"metadata read ({time.time() - t0:.0f} s)", flush=True)
    where = {(k.fqn, k.index): v for k, v in md.storage_data.items()}
    # The index's entries: tensors, then objects, each in state_dict_metadata's order; a
    # tensor's items in its chunks' order (empty chunks are never read).
    tensors, objects = [], []
    for key, m in md.state_dict_metadata.items():
        if isinstance(m, BytesStorageMetadata):
            s = where[(key, None)] if (key, None) in where else where[(key, 0)]
            objects.append([(s.relative_path, s.offset, s.length, None, None)])
            continue
        tensors.append([(where[(key, ci)].relative_path, where[(key, ci)].offset,
                         where[(key, ci)].length, m.properties.dtype, tuple(c.sizes))
                        for ci, c in enumerate(m.chunks) if math.prod(c.sizes)])
    entries = tensors + objects
    candidates = [it for e in entries for it in e]
    # One key in ceil(keys / 1,024), its first item; each file's first and last item.
    stride = -(-len(entries) // SAMPLES)
    chosen = {entries[e][0] for e in range(0, len(entries), stride) if entries[e]}
    ends: dict = {}
    for it in candidates:
        lo, hi = ends.get(it[0], (it, it))
        ends[it[0]] = (it if it[1] < lo[1] else lo, it if it[1] > hi[1] else hi)
    for lo, hi in ends.values():
        chosen |= {lo, hi}
    pkls: dict = {}
    fds: dict = {}
    for f, off, length, dtype, sizes in sorted(chosen, key=lambda it: (it[0], it[1])):
        if (dtype, sizes) not in pkls:
            pkls[(dtype, sizes)] = data_pkl(dtype, sizes)
        hole = math.prod(sizes) * dtype.itemsize if sizes is not None else None
        head, tail = archive(pkls[(dtype, sizes)], hole, length)
        if f not in fds:
            fds[f] = os.open(d / f, os.O_WRONLY)
        os.pwrite(fds[f], head, off)
        os.pwrite(fds[f], tail, off + length - len(tail))
    for fd in fds.values():
        os.close(fd)
    print(f"{len(chosen):,} of {len(candidates):,} items written ({len(pkls)} data.pkl forms; "
          f"{time.time() - t0:.0f} s)")
    os._exit(0)  # skip tearing down the metadata's millions of objects


if __name__ == "__main__":
    sys.exit(main())
