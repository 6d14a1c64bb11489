#!/usr/bin/env python3
"""What torch itself reads from a checkpoint: the reference the C++ inspector is checked against.

    python tools/oracle.py expected PATH
        JSON {"tensors": {KEY: {"dtype", "shape", ["chunks"], "sha256", "stats"}}, "objects": [KEY]}
    python tools/oracle.py box PATH KEY OFFSETS SIZES
        JSON {"sha256": ...} of the sub-box (OFFSETS/SIZES: "1,0" or "[1,0]"; "" or "[]" for 0-d)

PATH may be a DCP directory, a Megatron root (latest_checkpointed_iteration.txt), a torch.save
file, a .safetensors file or a model.safetensors.index.json. Only ever point it at trusted
checkpoints: torch.save files are loaded with weights_only=False.

Keys: DCP keys as in state_dict_metadata (BYTE_IO keys are "objects"); torch.save files are
flattened with DCP's own flatten_state_dict; Megatron legacy keys are "mp_rank_XX/<key>" and a
torch_dist common.pt contributes "common.pt/<key>".

Hash: sha256 of the tensor's contiguous row-major little-endian bytes. Stats: float64 over the
elements (complex: real and imaginary parts as separate elements); count = all elements, nan /
posinf / neginf counted, min/max/mean/std (population) over the finite ones, null when none.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import warnings

import numpy as np
import torch

# dcp.load(no_dist=True) warns that it assumes a single process; that is exactly the intent here.
warnings.filterwarnings("ignore", message="torch.distributed is disabled")

TRACKER = "latest_checkpointed_iteration.txt"


# ---------------------------------------------------------------------------------------------
# Per-tensor summaries
# ---------------------------------------------------------------------------------------------

def dtype_name(dt: torch.dtype) -> str:
    return str(dt).removeprefix("torch.")


def tensor_bytes(t: torch.Tensor) -> bytes:
    # view(uint8) of the flattened contiguous tensor works for every dtype (fp8, bool, complex);
    # reshape(-1) turns a 0-d tensor into one element. The machine is little-endian.
    assert sys.byteorder == "little"
    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def sha256(t: torch.Tensor) -> str:
    return hashlib.sha256(tensor_bytes(t)).hexdigest()


def as_float64(t: torch.Tensor) -> np.ndarray:
    t = t.detach().reshape(-1)
    if t.is_complex():
        t = torch.view_as_real(t).reshape(-1)  # re, im, re, im, ...
    return t.to(torch.float64).numpy()


def stats(t: torch.Tensor) -> dict:
    x = as_float64(t)
    finite = x[np.isfinite(x)]
    out = {
        "count": int(x.size),
        "nan": int(np.isnan(x).sum()),
        "posinf": int(np.isposinf(x).sum()),
        "neginf": int(np.isneginf(x).sum()),
        "min": None, "max": None, "mean": None, "std": None,
    }
    if finite.size:
        out.update(min=float(finite.min()), max=float(finite.max()),
                   mean=float(finite.mean()), std=float(finite.std()))  # std: ddof=0
    out["l2"] = float(np.sqrt(np.sum(finite * finite))) if finite.size else 0.0
    # Complex: the real and imaginary parts are the elements, as everywhere above.
    parts = torch.view_as_real(t.detach()) if t.is_complex() else t
    out["denormal"] = denormal_count(parts)
    out["histogram"] = histogram(finite, out["min"], out["max"], HISTOGRAM_BINS)
    out["fingerprint"] = fingerprint(tensor_bytes(t))
    return out


HISTOGRAM_BINS = 64


def denormal_count(t: torch.Tensor) -> int:
    """Non-zero finite values below the dtype's smallest normal (torch.finfo(...).tiny)."""
    if not t.is_floating_point():
        return 0
    x = t.detach().reshape(-1).to(torch.float64)
    tiny = torch.finfo(t.dtype).tiny
    return int(((x != 0) & (x.abs() < tiny) & torch.isfinite(x)).sum())


def histogram(finite: np.ndarray, lo, hi, bins: int) -> list[int]:
    """Equal-width bins over [min, max] of the finite values; the last bin is closed. Same
    floating-point expression as kernels/healthcore.h binOf() (one multiply by bins / (hi - lo))."""
    h = [0] * bins
    if finite.size == 0:
        return h
    if not hi > lo:
        h[0] = int(finite.size)
        return h
    b = ((finite - lo) * (bins / (hi - lo))).astype(np.int64)
    b = np.clip(b, 0, bins - 1)
    return [int(c) for c in np.bincount(b, minlength=bins)]


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def fingerprint(data: bytes) -> str:
    """Wrapping sum over little-endian 8-byte words w_i (zero-padded) of
    splitmix64(w_i + i * 0x9E3779B97F4A7C15), as kernels/healthcore.h fingerprintWords()."""
    padded = data + b"\0" * (-len(data) % 8)
    w = np.frombuffer(padded, dtype="<u8")
    with np.errstate(over="ignore"):
        i = np.arange(w.size, dtype=np.uint64)
        total = int(_splitmix64(w + i * np.uint64(0x9E3779B97F4A7C15)).sum(dtype=np.uint64))
    return f"{total:016x}"


def summarize(t: torch.Tensor, chunks: list | None = None) -> dict:
    entry = {"dtype": dtype_name(t.dtype), "shape": list(t.shape)}
    if chunks is not None:
        entry["chunks"] = chunks
    entry["sha256"] = sha256(t)
    entry["stats"] = stats(t)
    return entry


def narrow_box(t: torch.Tensor, offsets: list[int], sizes: list[int]) -> torch.Tensor:
    if len(offsets) != t.dim() or len(sizes) != t.dim():
        raise SystemExit(f"box rank {len(offsets)}/{len(sizes)} does not match tensor rank {t.dim()}")
    for d, (o, s) in enumerate(zip(offsets, sizes)):
        t = t.narrow(d, o, s)
    return t


# ---------------------------------------------------------------------------------------------
# Format resolution
# ---------------------------------------------------------------------------------------------

def resolve(path: Path) -> tuple[str, Path]:
    """(kind, concrete path); kind in dcp, megatron_legacy, torchsave, safetensors, st_index."""
    if path.is_dir():
        if (path / TRACKER).is_file():
            tag = (path / TRACKER).read_text().strip()
            it_dir = path / ("release" if tag == "release" else f"iter_{int(tag):07d}")
            if any(p.name.startswith("mp_rank_") for p in it_dir.iterdir()):
                return "megatron_legacy", it_dir
            return "dcp", it_dir
        if (path / ".metadata").is_file():
            return "dcp", path
        if (path / "model.safetensors.index.json").is_file():
            return "st_index", path / "model.safetensors.index.json"
        raise SystemExit(f"{path}: not a checkpoint directory this oracle knows")
    if path.name.endswith(".index.json"):
        return "st_index", path
    with open(path, "rb") as f:
        head = f.read(9)
        f.seek(257)
        tar = f.read(5) == b"ustar"
    if head[:4] == b"PK\x03\x04" or head[:3] == b"\x80\x02\x8a" or tar:  # zip, legacy, tar
        return "torchsave", path
    if len(head) == 9 and head[8:9] == b"{":
        return "safetensors", path
    raise SystemExit(f"{path}: unknown file format")


# ---------------------------------------------------------------------------------------------
# torch.save / safetensors
# ---------------------------------------------------------------------------------------------

def flatten(obj) -> dict[str, object]:
    """Flatten a dict-rooted object exactly as DCP's default planner does (torch's own
    flatten_state_dict): mappings always descended, dict keys via str(); a list is descended
    (indices as numbers) only if it holds a tensor, a mapping or such a list, otherwise it is one
    leaf; tuples and other objects are leaves; empty mappings vanish."""
    from collections.abc import Mapping

    from torch.distributed.checkpoint._nested_dict import flatten_state_dict

    if not isinstance(obj, Mapping):
        raise SystemExit(f"top-level object is a {type(obj).__name__}; the oracle expects a dict")
    flat, _ = flatten_state_dict(obj)
    return flat


def load_torchsave(path: Path) -> object:
    return torch.load(path, map_location="cpu", weights_only=False)  # our own fixtures only


def torchsave_entries(obj, key_prefix: str = "") -> tuple[dict[str, torch.Tensor], list[str]]:
    tensors, objects = {}, []
    for key, leaf in flatten(obj).items():
        key = key_prefix + key
        if isinstance(leaf, torch.Tensor):
            tensors[key] = leaf
        else:
            objects.append(key)
    return tensors, objects


def safetensors_files(kind: str, path: Path) -> list[Path]:
    if kind == "safetensors":
        return [path]
    index = json.loads(path.read_text())
    return [path.parent / f for f in dict.fromkeys(index["weight_map"].values())]


# ---------------------------------------------------------------------------------------------
# DCP
# ---------------------------------------------------------------------------------------------

def dcp_metadata(path: Path):
    from torch.distributed.checkpoint import FileSystemReader
    return FileSystemReader(str(path)).read_metadata()


def dcp_load(path: Path, md, keys: list[str]) -> dict[str, torch.Tensor]:
    """Load whole tensors with dcp.load into buffers allocated from the metadata. The state dict
    is flat and keyed exactly like state_dict_metadata, hence flatten_state_dict=False."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader

    sd = {}
    for k in keys:
        tmd = md.state_dict_metadata[k]
        sd[k] = torch.empty(tuple(tmd.size), dtype=tmd.properties.dtype)
    if sd:
        dcp.load(sd, storage_reader=FileSystemReader(str(path)),
                 planner=DefaultLoadPlanner(flatten_state_dict=False, allow_partial_load=True),
                 no_dist=True)
    return sd


def dcp_expected(path: Path) -> dict:
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    md = dcp_metadata(path)
    tensor_keys = [k for k, v in md.state_dict_metadata.items() if not isinstance(v, BytesStorageMetadata)]
    loaded = dcp_load(path, md, tensor_keys)
    tensors = {}
    for k in tensor_keys:
        chunks = [{"offsets": list(c.offsets), "sizes": list(c.sizes)}
                  for c in md.state_dict_metadata[k].chunks]
        tensors[k] = summarize(loaded[k], chunks)
    objects = [k for k, v in md.state_dict_metadata.items() if isinstance(v, BytesStorageMetadata)]
    # Megatron torch_dist (legacy): the common state sits beside the DCP in common.pt; its
    # entries are keyed "common.pt/<flattened key>", like "mp_rank_00/<key>" for legacy files.
    if (path / "common.pt").is_file():
        common_t, common_o = torchsave_entries(load_torchsave(path / "common.pt"), "common.pt/")
        tensors.update({k: summarize(t) for k, t in common_t.items()})
        objects += common_o
    # The true nesting of each flattened key, as DCP's planner recorded it.
    paths = {k: [str(p) for p in v] for k, v in (md.planner_data or {}).items()
             if isinstance(v, (tuple, list))}
    return {"tensors": tensors, "objects": objects, "paths": paths}


# ---------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------

def legacy_files(it_dir: Path) -> list[tuple[str, Path]]:
    out = []
    for d in sorted(p for p in it_dir.iterdir() if p.name.startswith("mp_rank_")):
        for f in sorted(d.glob("*.pt")):
            out.append((d.name, f))
    return out


def load_plain(kind: str, path: Path) -> tuple[dict[str, torch.Tensor], list[str]]:
    """All tensors (by key) and object keys of a non-DCP checkpoint."""
    if kind == "torchsave":
        return torchsave_entries(load_torchsave(path))
    if kind == "megatron_legacy":
        tensors, objects = {}, []
        for rank_dir, f in legacy_files(path):
            t, o = torchsave_entries(load_torchsave(f), f"{rank_dir}/")
            tensors.update(t)
            objects += o
        return tensors, objects
    from safetensors.torch import load_file
    tensors = {}
    for f in safetensors_files(kind, path):
        tensors.update(load_file(str(f)))
    return tensors, []


def expected(path: Path) -> dict:
    kind, real = resolve(path)
    if kind == "dcp":
        return dcp_expected(real)
    tensors, objects = load_plain(kind, real)
    return {"tensors": {k: summarize(t) for k, t in tensors.items()}, "objects": objects}


def load_tensors(path: Path, keys: list[str]) -> dict[str, torch.Tensor]:
    """Whole tensors for `keys` (DCP: only those keys are read)."""
    kind, real = resolve(path)
    if kind == "dcp":
        from torch.distributed.checkpoint.metadata import TensorStorageMetadata
        md = dcp_metadata(real)
        available = {k for k, v in md.state_dict_metadata.items() if isinstance(v, TensorStorageMetadata)}
        common = {}
        if (real / "common.pt").is_file():
            common, _ = torchsave_entries(load_torchsave(real / "common.pt"), "common.pt/")
    else:
        available, _ = load_plain(kind, real)
    missing = [k for k in keys if k not in available and (kind != "dcp" or k not in common)]
    if missing:
        raise SystemExit(f"{missing[0]!r}: no such tensor in {real}")
    if kind == "dcp":
        out = dcp_load(real, md, [k for k in keys if k in available])
        out.update({k: common[k] for k in keys if k in common})
        return out
    return {k: available[k] for k in keys}


def box_sha256(path: Path, key: str, offsets: list[int], sizes: list[int]) -> str:
    return sha256(narrow_box(load_tensors(path, [key])[key], offsets, sizes))


def parse_ints(text: str) -> list[int]:
    text = text.strip().strip("[]").strip()
    return [int(x) for x in text.split(",") if x.strip()] if text else []


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("expected", help="JSON of every tensor and object key")
    e.add_argument("path", type=Path)
    b = sub.add_parser("box", help="sha256 of a sub-box of one tensor")
    b.add_argument("path", type=Path)
    b.add_argument("key")
    b.add_argument("offsets")
    b.add_argument("sizes")
    args = ap.parse_args(argv)

    if args.cmd == "expected":
        result = expected(args.path)
    else:
        result = {"sha256": box_sha256(args.path, args.key, parse_ints(args.offsets), parse_ints(args.sizes))}
    json.dump(result, sys.stdout, indent=1, allow_nan=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
