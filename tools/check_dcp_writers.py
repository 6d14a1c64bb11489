#!/usr/bin/env python3
"""torch's other DCP writers against torch's own readers (issue 38).

    python tools/check_dcp_writers.py --cli shardscope-cli CASE [--keep DIR]

CASE is one of:
  fs_safetensors  FileSystemWriter(serialization_format=SAFETENSORS) from two gloo ranks (a
                  sharded DTensor, a replicated one, objects before the block) and from one
                  process: every key's dtype, shape, chunks, sha256 and statistics against what
                  HuggingFaceStorageReader loads from the blocks and what was saved; a note that
                  FileSystemReader cannot load them (checked: it raises); `diff --against --values`
                  with the same state saved as torch.save items; `fix` refuses in one line.
  hf_sharded      HuggingFaceStorageWriter(save_distributed=True) from two ranks: the directory of
                  shard files (no index) against dcp.load with HuggingFaceStorageReader, and one
                  shard file alone against that reader over a directory holding only it (global
                  size from the chunk's extent, the chunk at its DCP_SHARDING_INFO offsets, the
                  rows it lacks as holes); the consolidated output (enable_consolidation) too;
                  `diff --against --values` with the torch.save items; `fix` refuses.
  float4          float4_e2m1fn_x2 in a plain DCP, a torch.save file, a safetensors file ("F4")
                  and a HuggingFaceStorageWriter shard: dtype, shape and sha256 against torch's and
                  safetensors' own reads, and no "cannot decode dtype".

Every expected value comes from torch 2.11 at test time. Prints one line per mismatch and a
final "N passed, M failed"; exits 0 only when all pass.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tally import Tally  # noqa: E402

WORLD = 2


# ---------------------------------------------------------------------------------------------
# Writing with real torch
# ---------------------------------------------------------------------------------------------

def full_state(float_only: bool = False) -> dict:
    import torch
    g = torch.Generator().manual_seed(38)
    sd = {
        "layers.0.w": torch.randn(8, 7, generator=g),
        "layers.0.b": torch.randn(6, generator=g).to(torch.bfloat16),
        "layers.1.w": torch.randn(5, 4, generator=g).to(torch.float16),  # uneven over 2 ranks
        "embed": torch.randn(3, 10, generator=g).to(torch.float64),      # sharded by columns
    }
    if not float_only:
        sd["counts"] = torch.arange(12, dtype=torch.int64).reshape(4, 3)  # replicated
    return sd


def placements(key: str):
    from torch.distributed.tensor import Replicate, Shard
    if key == "counts":
        return [Replicate()]
    return [Shard(1)] if key == "embed" else [Shard(0)]


def _rank_main(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemWriter
    from torch.distributed.checkpoint.filesystem import SerializationFormat
    from torch.distributed.checkpoint.hf_storage import HuggingFaceStorageWriter
    from torch.distributed.tensor import DeviceMesh, distribute_tensor

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    mesh = DeviceMesh("cpu", list(range(WORLD)))
    sd = {k: distribute_tensor(v, mesh, placements(k)) for k, v in full_state().items()}
    with_objects = dict(sd, step=7, note="objects are written before the safetensors block")
    dcp.save(with_objects, storage_writer=FileSystemWriter(
        f"{out}/fs_st_2ranks", serialization_format=SerializationFormat.SAFETENSORS))
    dcp.save(with_objects, storage_writer=FileSystemWriter(f"{out}/fs_plain_2ranks"))
    dcp.save(sd, storage_writer=HuggingFaceStorageWriter(f"{out}/hf_sharded", save_distributed=True))
    # Consolidation sizes every dtype with torch.finfo: floats only.
    floats = {k: v for k, v in sd.items() if v.dtype.is_floating_point}
    dcp.save(floats, storage_writer=HuggingFaceStorageWriter(
        f"{out}/hf_consolidated", save_distributed=True, enable_consolidation=True))
    dist.barrier()
    dist.destroy_process_group()


def write_multirank(out: Path) -> None:
    import socket
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_rank_main, args=(port, str(out)), nprocs=WORLD, join=True)


def write_one_process(out: Path) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemWriter
    from torch.distributed.checkpoint.filesystem import SerializationFormat
    sd = dict(full_state(), step=3)
    dcp.save(sd, storage_writer=FileSystemWriter(
        str(out / "fs_st_1proc"), serialization_format=SerializationFormat.SAFETENSORS),
        no_dist=True)


# ---------------------------------------------------------------------------------------------
# torch's own reads
# ---------------------------------------------------------------------------------------------

def hf_read(path: Path) -> tuple[dict, dict]:
    """(metadata, tensors) as dcp.load with HuggingFaceStorageReader reads the directory: whole
    tensors of the sizes its read_metadata gives (a region no chunk covers stays NaN / -1)."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import DefaultLoadPlanner
    from torch.distributed.checkpoint.hf_storage import HuggingFaceStorageReader
    md = HuggingFaceStorageReader(str(path)).read_metadata()
    sd = {}
    for k, v in md.state_dict_metadata.items():
        t = torch.empty(tuple(v.size), dtype=v.properties.dtype)
        sd[k] = t.fill_(float("nan") if t.is_floating_point() else -1)
    dcp.load(sd, storage_reader=HuggingFaceStorageReader(str(path)),
             planner=DefaultLoadPlanner(flatten_state_dict=False), no_dist=True)
    return md.state_dict_metadata, sd


def extract_blocks(ckpt: Path, into: Path) -> None:
    """Each data file's safetensors block (from the offset torch's .metadata gives its tensors
    to the end) as a file of its own, which HuggingFaceStorageReader reads."""
    from torch.distributed.checkpoint import FileSystemReader
    md = FileSystemReader(str(ckpt)).read_metadata()
    starts = {}
    for idx, info in md.storage_data.items():
        if idx.offset is not None:  # a tensor chunk; objects precede the block
            starts.setdefault(info.relative_path, set()).add(info.offset)
    into.mkdir(parents=True)
    for name, offs in starts.items():
        assert len(offs) == 1, f"{name}: tensors at several offsets {offs}"
        data = (ckpt / name).read_bytes()[offs.pop():]
        (into / (name + ".safetensors")).write_bytes(data)


def fs_reader_raises(ckpt: Path, md) -> str:
    """What dcp.load with FileSystemReader raises on the checkpoint ('' when it loads)."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata
    sd = {k: torch.empty(tuple(v.size), dtype=v.properties.dtype)
          for k, v in md.state_dict_metadata.items() if not isinstance(v, BytesStorageMetadata)}
    try:
        dcp.load(sd, storage_reader=FileSystemReader(str(ckpt)),
                 planner=DefaultLoadPlanner(flatten_state_dict=False, allow_partial_load=True),
                 no_dist=True)
    except BaseException as e:  # noqa: BLE001 - CheckpointException is a BaseException
        if isinstance(e, KeyboardInterrupt):
            raise
        return f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:160]}"
    return ""


def bits(t):
    import torch
    return t.contiguous().reshape(-1).view(torch.uint8)


# ---------------------------------------------------------------------------------------------
# The CLI
# ---------------------------------------------------------------------------------------------

def run(cmd: list, timeout: float = 300) -> tuple[int | None, str, str]:
    try:
        p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "", "timed out"
    return p.returncode, p.stdout, p.stderr


def inspect_json(cli: str, path: Path, tally: Tally, name: str, extra=("--hash", "--stats")):
    rc, out, err = run([cli, "inspect", path, "--json", *extra])
    try:
        report = json.loads(out)
    except ValueError:
        tally.unit(f"{name}: inspect", [f"exit {rc}, no JSON; stderr: {err.strip()[:300]}"])
        return None
    if rc not in (0, 1):
        tally.unit(f"{name}: inspect", [f"exit {rc}; stderr: {err.strip()[:300]}"])
    return report


def compare_keys(tally: Tally, name: str, report: dict, md: dict, tensors: dict,
                 stats: bool = True, unreadable_ok: set = frozenset()) -> None:
    """Every key of torch's metadata: dtype, shape, chunks, and the values bit for bit."""
    import oracle
    got = {t["key"]: t for t in report.get("tensors") or []}
    unreadable = {p.get("key") for p in report.get("problems") or [] if p.get("effect") == "unreadable"}
    for key, v in md.items():
        if not hasattr(v, "chunks"):
            continue
        g = got.get(key)
        if g is None:
            tally.unit(f"{name}: {key}", ["missing from the CLI's keys"])
            continue
        problems = []
        want_dtype = oracle.dtype_name(v.properties.dtype)
        if g.get("dtype") != want_dtype:
            problems.append(f"dtype: cli {g.get('dtype')!r}, torch {want_dtype!r}")
        if g.get("shape") != list(v.size):
            problems.append(f"shape: cli {g.get('shape')}, torch {list(v.size)}")
        want_chunks = sorted((list(c.offsets), list(c.sizes)) for c in v.chunks)
        got_chunks = sorted((c.get("offsets"), c.get("sizes")) for c in g.get("chunks") or [])
        if got_chunks != want_chunks:
            problems.append(f"chunks: cli {got_chunks}, torch {want_chunks}")
        if key in unreadable and key not in unreadable_ok:
            problems.append("called unreadable")
        if key in tensors:
            want = oracle.sha256(tensors[key])
            if g.get("sha256") != want:
                problems.append(f"sha256: cli {g.get('sha256')}, torch {want}")
            if stats:
                want_stats = oracle.stats(tensors[key])
                got_stats = g.get("stats") or {}
                for f in ("count", "nan", "posinf", "neginf", "fingerprint"):
                    if got_stats.get(f) != want_stats[f]:
                        problems.append(f"stats.{f}: cli {got_stats.get(f)}, torch {want_stats[f]}")
        tally.unit(f"{name}: {key}", problems)
    for key in got.keys() - md.keys():
        tally.unit(f"{name}: {key}", ["listed by the CLI, not a tensor torch's reader reads"])


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------

def case_fs_safetensors(cli: str, work: Path, tally: Tally) -> None:
    import torch
    from torch.distributed.checkpoint import FileSystemReader
    write_multirank(work)
    write_one_process(work)
    saved = full_state()
    for ck in ("fs_st_2ranks", "fs_st_1proc"):
        ckpt = work / ck
        md = FileSystemReader(str(ckpt)).read_metadata()
        raised = fs_reader_raises(ckpt, md)
        # The evidence for the note: torch's own reader of this layout fails.
        tally.unit(f"{ck}: FileSystemReader raises", [] if raised else ["it loaded"])
        extract_blocks(ckpt, work / (ck + "_blocks"))
        hf_md, loaded = hf_read(work / (ck + "_blocks"))
        same = [k for k in saved if not torch.equal(bits(loaded[k]), bits(saved[k]))]
        tally.unit(f"{ck}: HuggingFaceStorageReader reads what was saved",
                   [f"{k} differs" for k in same])
        report = inspect_json(cli, ckpt, tally, ck)
        if report is None:
            continue
        # Which torch reads it: the metadata unpickles, but torch's reader loads no tensor, so no
        # release is named (the raise above is the evidence).
        readable = report.get("torch_readable") or {}
        tally.unit(f"{ck}: torch_readable names no release",
                   [] if readable and readable.get("from") is None
                   else [f"torch_readable {readable}"])
        tensors_md = {k: v for k, v in md.state_dict_metadata.items() if hasattr(v, "chunks")}
        compare_keys(tally, ck, report, tensors_md, loaded)
        objects = sorted(o["key"] for o in report.get("objects") or [])
        want_objects = sorted(k for k, v in md.state_dict_metadata.items() if not hasattr(v, "chunks"))
        tally.unit(f"{ck}: objects", [] if objects == want_objects else [f"cli {objects}, torch {want_objects}"])
        # Without --hash: not healthy, and the one note says why, naming no key unreadable.
        quick = inspect_json(cli, ckpt, tally, ck + " (no --hash)", extra=())
        if quick is not None:
            notes = [p for p in quick.get("problems") or [] if "SAFETENSORS" in p.get("message", "")]
            bad = [p for p in quick.get("problems") or [] if p.get("effect") == "unreadable"]
            tally.unit(f"{ck}: inspect without --hash",
                       ([] if quick.get("healthy") is False else ["called healthy"]) +
                       ([] if notes else ["no note that FileSystemReader cannot load it"]) +
                       [f"unreadable: {p}" for p in bad])
    check_values_against_plain(cli, work, work / "fs_st_2ranks", full_state(), tally)
    # fix cannot write a .metadata torch loads over safetensors blocks: it says so, writes nothing.
    check_fix_refuses(cli, work, work / "fs_st_2ranks", full_state(), tally)


def check_values_against_plain(cli: str, work: Path, ckpt: Path, saved: dict, tally: Tally) -> None:
    """`diff --against --values` with the same state saved as torch.save items: every tensor
    compared and identical."""
    rc, out, err = run([cli, "diff", ckpt, "--against", work / "fs_plain_2ranks", "--values", "--json"])
    problems = []
    try:
        vd = json.loads(out)
        # value-diff/1: every tensor compared and identical
        tensors = vd.get("tensors") or []
        if len(tensors) != len(saved):
            problems.append(f"{len(tensors)} tensors compared, {len(saved)} saved")
        problems += [f"{t.get('name')}: {t.get('verdict')}" for t in tensors
                     if t.get("verdict") != "identical"]
    except ValueError:
        problems.append(f"exit {rc}, no JSON: {err.strip()[:300]}")
    if rc != 0:
        problems.append(f"exit {rc}: {err.strip()[:300]}")
    tally.unit(f"{ckpt.name}: diff --against the torch.save items --values", problems)


def check_fix_refuses(cli: str, work: Path, ckpt: Path, state: dict, tally: Tally) -> None:
    """`fix` against a layout asking for every tensor under a `model.` prefix (a repair by
    renames on a plain DCP) refuses in one line and writes nothing."""
    import oracle
    layout = work / (ckpt.name + "_layout.json")
    layout.write_text(json.dumps({"schema": "shardscope.layout/1", "params": [
        {"name": "model." + k, "shape": list(t.shape), "dtype": oracle.dtype_name(t.dtype)}
        for k, t in state.items()]}))
    out_dir = work / (ckpt.name + "_fixed")
    rc, out, err = run([cli, "fix", ckpt, "--layout", layout, "-o", out_dir])
    lines = [ln for ln in err.strip().splitlines() if ln]
    tally.unit(f"{ckpt.name}: fix refuses", (
        ([] if rc == 2 else [f"exit {rc}"]) +
        ([] if len(lines) == 1 and "safetensors" in lines[0] else [f"stderr {err.strip()[:300]!r}"]) +
        ([] if not out_dir.exists() else ["wrote an output"])))


def case_hf_sharded(cli: str, work: Path, tally: Tally) -> None:
    write_multirank(work)
    ckpt = work / "hf_sharded"
    md, loaded = hf_read(ckpt)
    report = inspect_json(cli, ckpt, tally, "hf_sharded")
    # HuggingFaceStorageReader reads no .metadata: no claim about which torch unpickles one.
    if report is not None:
        tally.unit("hf_sharded: no torch_readable claim",
                   [] if "torch_readable" not in report else [str(report["torch_readable"])])
    if report is not None:
        compare_keys(tally, "hf_sharded", report, md, loaded)
        tally.unit("hf_sharded: healthy", [] if report.get("healthy") else
                   [f"problems {report.get('problems')}"])
    check_values_against_plain(cli, work, ckpt, full_state(), tally)
    check_fix_refuses(cli, work, ckpt, full_state(), tally)
    # One shard alone: as the reader reads a directory holding only it.
    for shard in sorted(ckpt.glob("*.safetensors")):
        alone = work / ("alone_" + shard.stem)
        alone.mkdir()
        shutil.copy(shard, alone / shard.name)
        md1, loaded1 = hf_read(alone)
        report = inspect_json(cli, shard, tally, shard.name, extra=())
        if report is None:
            continue
        compare_keys(tally, shard.name, report, md1, {}, stats=False)
        holes = {p.get("key") for p in report.get("problems") or [] if p.get("effect") == "holes"}
        want_holes = {k for k, v in md1.items()
                      if sum(c.sizes.numel() for c in v.chunks) != v.size.numel()}
        tally.unit(f"{shard.name}: holes", [] if holes == want_holes else
                   [f"cli {sorted(holes)}, torch's chunks leave {sorted(want_holes)}"])
        # Each chunk's bytes where the CLI places them against what the reader put there.
        import oracle
        data = shard.read_bytes()
        got = {t["key"]: t for t in report.get("tensors") or []}
        for key, v in md1.items():
            for c in v.chunks:
                off, size = list(c.offsets), list(c.sizes)
                want = oracle.tensor_bytes(oracle.narrow_box(loaded1[key], off, size))
                where = [x for x in (got.get(key) or {}).get("chunks") or [] if x.get("offsets") == off]
                problems = []
                if len(where) != 1 or where[0].get("file") != shard.name:
                    problems.append(f"chunk listed as {where}")
                elif data[where[0]["offset"]:where[0]["offset"] + where[0]["length"]] != want:
                    problems.append(f"bytes at {where[0]['offset']} +{where[0]['length']} are not "
                                    "the chunk torch's reader loads")
                tally.unit(f"{shard.name}: {key} chunk {off}", problems)
    cons = work / "hf_consolidated"
    md, loaded = hf_read(cons)
    report = inspect_json(cli, cons, tally, "hf_consolidated")
    if report is not None:
        compare_keys(tally, "hf_consolidated", report, md, loaded)


def case_float4(cli: str, work: Path, tally: Tally) -> None:
    import torch
    import torch.distributed.checkpoint as dcp
    from safetensors import safe_open
    from safetensors.torch import save_file
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.hf_storage import HuggingFaceStorageWriter
    import oracle
    g = torch.Generator().manual_seed(4)
    x = torch.randint(0, 256, (6, 5), dtype=torch.uint8, generator=g).view(torch.float4_e2m1fn_x2)
    y = torch.randint(0, 256, (4,), dtype=torch.uint8, generator=g).view(torch.float4_e2m1fn_x2)
    sd = {"experts.w_blocks": x, "experts.b_blocks": y}
    dcp.save(sd, checkpoint_id=str(work / "dcp"), no_dist=True)
    torch.save(sd, work / "f4.pt")
    save_file(sd, str(work / "f4.safetensors"))
    dcp.save(sd, storage_writer=HuggingFaceStorageWriter(str(work / "hf")), no_dist=True)

    def want_from(reads: dict) -> dict:
        return {k: {"dtype": oracle.dtype_name(t.dtype), "shape": list(t.shape),
                    "sha256": oracle.sha256(t)} for k, t in reads.items()}

    truths = {}
    md = FileSystemReader(str(work / "dcp")).read_metadata()
    out = {k: torch.empty(tuple(v.size), dtype=v.properties.dtype) for k, v in md.state_dict_metadata.items()}
    dcp.load(out, checkpoint_id=str(work / "dcp"), no_dist=True)
    truths[work / "dcp"] = want_from(out)
    truths[work / "f4.pt"] = want_from(torch.load(work / "f4.pt", weights_only=True))
    for p in (work / "f4.safetensors", work / "hf" / "model-00001-of-00001.safetensors"):
        with safe_open(str(p), "pt") as f:  # safetensors' own reader of "F4"
            truths[p] = want_from({k: f.get_tensor(k) for k in f.keys()})
    for path, want in truths.items():
        name = path.relative_to(work)
        report = inspect_json(cli, path, tally, str(name), extra=("--hash",))
        if report is None:
            continue
        got = {t["key"]: {f: t.get(f) for f in ("dtype", "shape", "sha256")}
               for t in report.get("tensors") or []}
        for key, w in want.items():
            tally.unit(f"{name}: {key}", [] if got.get(key) == w else [f"cli {got.get(key)}, torch {w}"])
        tally.unit(f"{name}: problems", [str(p) for p in report.get("problems") or []])
        rc, text, err = run([cli, "inspect", path, "--tensor", "experts.w_blocks", "--hash"])
        tally.unit(f"{name}: --tensor", [] if rc == 0 and "cannot decode" not in text + err else
                   [f"exit {rc}: {(text + err).strip()[-300:]}"])


CASES = {"fs_safetensors": case_fs_safetensors, "hf_sharded": case_hf_sharded, "float4": case_float4}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", required=True, help="path to shardscope-cli")
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("--keep", metavar="DIR", help="write the checkpoints here and keep them")
    args = ap.parse_args(argv)
    import warnings
    warnings.filterwarnings("ignore")
    tally = Tally()
    if args.keep:
        work = Path(args.keep)
        work.mkdir(parents=True, exist_ok=False)
        CASES[args.case](args.cli, work, tally)
    else:
        with tempfile.TemporaryDirectory(prefix="ss-dcpwriters-") as d:
            CASES[args.case](args.cli, Path(d), tally)
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
