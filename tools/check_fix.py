#!/usr/bin/env python3
"""`shardscope-cli fix` against torch's own load.

    python tools/check_fix.py --cli shardscope-cli --demo DEMO --fixtures LAYOUT_FIXTURES CASE

Each repair case takes a checkpoint real torch wrote (the bundled demo, or
tools/make_layout_fixtures.py's families as Megatron-FSDP saves them) and a load that fails on it
(a rule its loader lacks), then:
- the failing load is rebuilt with torch: every key the diff says the load asks for, with its
  shape, loaded by `dcp.load` with a strict DefaultLoadPlanner (Megatron-FSDP's strict
  fsdp_dtensor load); it must raise on the source;
- `fix` writes OUT; the same strict load of OUT must pass, and every tensor it fills must equal,
  bit for bit, what torch builds from the source's stored tensors (the rows each source gives,
  cut and placed by torch's own narrow());
- `diff OUT` with the failing options is clean, `verify OUT` is bit-identical, `inspect OUT` says
  what it was repaired from, no tensor data was written (the data files are hard links of the
  source's), and the source's files are unchanged (bytes, sizes and modification times).

Other cases: `refusals` (an existing OUT, --force on a directory no fix wrote, an output inside
the source, a parameter that nothing stores: nothing written, the blocker named, --partial
writes the rest) and `hostile` (a `.metadata` whose storage names a file outside the checkpoint:
nothing written anywhere). Issue 37's, each with its format's real loader (strict dcp.load,
load_state_dict(strict=True), Megatron's legacy strict load per rank) loading OUT bit for bit,
the source's bytes unchanged, and the manifest saying the output read back loads:
`zero_element`, `wrapper_fused`, `key_prefix`, `unused`, `symlink_outside`, `torch_save_index`,
`legacy` and `recheck` (a --partial output flagged as no repair).
Prints one line per failure and "N passed, M failed"; exits 0 only when all pass.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tally import Tally  # noqa: E402

warnings.filterwarnings("ignore")


def run(cli: str, *args: str) -> tuple[int, str, str]:
    p = subprocess.run([cli, *args], capture_output=True, timeout=600)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def data_dir(ckpt: Path) -> Path:
    tracker = ckpt / "latest_checkpointed_iteration.txt"
    if tracker.exists():
        it = tracker.read_text().strip()
        return ckpt / ("release" if it == "release" else f"iter_{int(it):07d}")
    return ckpt


def snapshot(root: Path) -> dict[str, tuple]:
    """Every file under root: size, mtime and SHA-256 (what 'untouched' means)."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            st = p.stat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns,
                                             hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def load_strict(ckpt_dir: Path, request: dict[str, tuple[list[int], torch.dtype]]):
    sd = {k: torch.full(shape, float("nan"), dtype=dt) if dt.is_floating_point
          else torch.zeros(shape, dtype=dt) for k, (shape, dt) in request.items()}
    dcp.load(sd, checkpoint_id=str(ckpt_dir), planner=DefaultLoadPlanner(allow_partial_load=False))
    return sd


def bits(t: torch.Tensor) -> torch.Tensor:
    t = t.contiguous().reshape(-1)
    return t.view(torch.uint8) if t.numel() else t


def recast(ckpt: Path, out: Path, dtypes: dict[str, torch.dtype]) -> Path:
    """A copy of a one-rank DCP checkpoint saved again by dcp.save, the named keys cast."""
    md = dcp.FileSystemReader(str(ckpt)).read_metadata()
    sd = {k: torch.empty(tuple(m.size), dtype=m.properties.dtype)
          for k, m in md.state_dict_metadata.items() if hasattr(m, "size")}
    dcp.load(sd, checkpoint_id=str(ckpt))
    for k, dt in dtypes.items():
        sd[k] = sd[k].to(dt)
    # The objects (param_to_group_meta's leaves) as they were.
    objs = {k: None for k, m in md.state_dict_metadata.items() if not hasattr(m, "size")}
    dcp.load(objs, checkpoint_id=str(ckpt))
    dcp.save({**sd, **objs}, checkpoint_id=str(out), no_dist=True)
    return out


def check_written(ckpt: Path, out: Path, result: dict, out_md, rewrites: bool,
                  outside: tuple[str, ...] = ()) -> list[str]:
    """Only what references cannot express was written: no bytes at all, or (`rewrites`) one
    new data file holding exactly the rewritten keys; every other data file is a hard link of
    the source's, except `outside` (data files that are symlinks out of the checkpoint): those
    are copies, byte for byte, sharing no inode with the file outside, and the result says so."""
    problems = []
    kinds = {c["kind"]: c["count"] for c in result["changes"]}
    if bool(kinds.get("rewrite")) != rewrites:
        problems.append(f"rewrites expected: {rewrites}; changes {kinds}")
    if result["files"]["copied"] != len(outside):
        problems.append(f"files copied: {result['files']}, expected {len(outside)}")
    said = result.get("copied_from_outside", [])
    if sorted(x.split(" -> ")[0].split("/")[-1] for x in said) != sorted(outside):
        problems.append(f"the result names {said} as copied from outside, not {list(outside)}")
    new = []
    for f in data_dir(out).glob("*.distcp"):
        src = data_dir(ckpt) / f.name
        if not src.exists():
            new.append(f.name)
        elif f.name in outside:
            if f.is_symlink() or f.stat().st_ino == src.stat().st_ino or f.stat().st_nlink != 1 \
                    or f.read_bytes() != src.read_bytes():
                problems.append(f"{f.name} is not a copy of the file outside the checkpoint")
        elif f.stat().st_ino != src.stat().st_ino:
            problems.append(f"{f.name} is not a hard link of the source's")
    # The bytes of the keys torch reads from the new file, as torch's metadata gives them.
    in_new = 0
    for i, v in out_md.storage_data.items():
        if v.relative_path in new:
            m = out_md.state_dict_metadata[i.fqn]
            in_new += m.size.numel() * m.properties.dtype.itemsize
    if rewrites and (len(new) != 1 or in_new != result["bytes_written"] or in_new == 0):
        problems.append(f"new data files {new} hold {in_new} bytes of tensors; the fix says it "
                        f"wrote {result['bytes_written']}")
    if not rewrites and (new or result["bytes_written"] != 0):
        problems.append(f"data was written: {new}, {result['bytes_written']} bytes")
    return problems


def check_manifest(out: Path, result: dict) -> list[str]:
    """A fix that exits 0 read its output back and found it loads: the result and the manifest
    say so."""
    m = out / "shardscope-fix.json"
    manifest = json.loads(m.read_text()) if m.exists() else {}
    if not (result.get("repaired") and manifest.get("repaired") is True and
            not manifest.get("still_fails") and result.get("after")):
        return [f"exit 0 without a read-back that loads: repaired {result.get('repaired')}, "
                f"manifest {manifest.get('repaired')!r} {manifest.get('still_fails')!r}"]
    return []


class Case:
    def __init__(self, cli: str, tmp: Path, tally: Tally):
        self.cli, self.tmp, self.tally = cli, tmp, tally

    def layout(self, config: Path, *flags: str) -> Path:
        out = self.tmp / f"layout-{len(list(self.tmp.glob('layout-*')))}.json"
        rc, _, err = run(self.cli, "layout", "--from-config", str(config), *flags, "-o", str(out))
        if rc != 0:
            raise RuntimeError(f"layout: {err}")
        return out

    def repair(self, name: str, ckpt: Path, layout: Path, opts: list[str],
               rewrites: bool = False, verify: bool = True,
               outside: tuple[str, ...] = ()) -> None:
        problems: list[str] = []
        before = snapshot(ckpt)
        rc, text, err = run(self.cli, "diff", str(ckpt), "--layout", str(layout), *opts, "--json")
        asked = json.loads(text)
        if rc != 1 or asked["passes"]:
            self.tally.unit(name, [f"the source must fail to load: exit {rc} {err}"])
            return
        # Where each entry's data is: the same diff with every rule the loader lacks switched on.
        rc, text, err = run(self.cli, "diff", str(ckpt), "--layout", str(layout), "--json")
        found = {(e["section"], e["name"]): e for e in json.loads(text)["entries"]}
        wanted = [e for e in asked["entries"] if e["section"] in ("model", "optimizer")]
        src_md = dcp.FileSystemReader(str(data_dir(ckpt))).read_metadata().state_dict_metadata

        out = self.tmp / f"{name.replace('/', '-')}-fixed"
        rc, text, err = run(self.cli, "fix", str(ckpt), "--layout", str(layout), *opts, "-o",
                            str(out), "--json")
        if rc != 0:
            self.tally.unit(name, [f"fix: exit {rc}: {err} {text[-800:]}"])
            return
        result = json.loads(text)
        src_full = dcp.FileSystemReader(str(data_dir(ckpt))).read_metadata()
        out_full = dcp.FileSystemReader(str(data_dir(out))).read_metadata()
        out_md = out_full.state_dict_metadata
        # What torch reads of our pickle: every key kept is torch's own entry, chunk for chunk,
        # each chunk stored where the source's is.
        kept = 0
        for key, m in out_md.items():
            if key not in src_full.state_dict_metadata:
                continue
            kept += 1
            if m != src_full.state_dict_metadata[key]:
                problems.append(f"{key}: torch reads {m} where the source has "
                                f"{src_full.state_dict_metadata[key]}")
        if kept == 0:
            problems.append("no key kept")
        src_storage = {(i.fqn, tuple(i.offset) if i.offset is not None else None): v
                       for i, v in src_full.storage_data.items()}
        for i, v in out_full.storage_data.items():
            k = (i.fqn, tuple(i.offset) if i.offset is not None else None)
            if k in src_storage and (v.relative_path, v.offset, v.length) != \
                    (src_storage[k].relative_path, src_storage[k].offset, src_storage[k].length):
                problems.append(f"{i.fqn}: stored at {v}, the source at {src_storage[k]}")
        if out_full.planner_data.keys() != out_md.keys():
            problems.append("planner_data does not name every key")
        request = {}
        for e in wanted:
            # One key per parameter (its shape), or each section the load asks for apart.
            rows = e.get("request_rows") or [{"key": e["request_keys"][0], "shape": e["shape"]}]
            for r in rows:
                if r["key"] not in out_md:
                    problems.append(f"{r['key']} is not in the repaired checkpoint")
                    continue
                shape = r["shape"] if e["shape"] else []  # Adam's step is 0-dim
                request[r["key"]] = (shape, out_md[r["key"]].properties.dtype)
        # The failing load: it raises on the source, and passes on the output.
        try:
            load_strict(data_dir(ckpt), {k: v for k, v in request.items()})
            problems.append("the strict load of the source did not raise")
        except (Exception, CheckpointException):  # noqa: BLE001 - a BaseException in torch
            pass
        try:
            loaded = load_strict(data_dir(out), request)
        except (Exception, CheckpointException) as exc:  # noqa: BLE001
            self.tally.unit(name, problems + [f"strict load of OUT raised: {str(exc)[:400]}"])
            return
        # Every value against what torch builds from the source's stored tensors.
        cache: dict[str, torch.Tensor] = {}

        def stored(key: str) -> torch.Tensor:
            if key not in cache:
                m = src_md[key]
                sd = {key: torch.empty(tuple(m.size), dtype=m.properties.dtype)}
                dcp.load(sd, checkpoint_id=str(data_dir(ckpt)))
                cache[key] = sd[key]
            return cache[key]

        checked = repaired = 0
        for e in wanted:
            rows = e.get("request_rows") or [{"key": e["request_keys"][0], "begin": 0, "end": 0,
                                              "dim": 0}]
            if not all(r["key"] in loaded for r in rows):
                continue
            f = found.get((e["section"], e["name"]))
            if not f or not f["sources"]:
                problems.append(f"{e['name']}: no sources with every rule on")
                continue
            # The parameter as torch builds it from the stored tensors, then each key's rows.
            want = torch.empty(e["shape"], dtype=loaded[rows[0]["key"]].dtype)
            for s in f["sources"]:
                t = stored(s["key"])
                for i in s["index"]:
                    t = t[i]
                if want.dim() == 0:  # a fused parameter's step: its sections share it
                    want = t.clone()
                    break
                d = s["dim"]
                begin, end = (s["begin"], s["end"]) if s["begin"] < s["end"] else (0, want.shape[d])
                want.narrow(d, begin, end - begin).copy_(t.narrow(d, s["stored_row"], end - begin))
            for r in rows:
                part = want if r["begin"] >= r["end"] or want.dim() == 0 else \
                    want.narrow(r["dim"], r["begin"], r["end"] - r["begin"])
                if not torch.equal(bits(part), bits(loaded[r["key"]])):
                    problems.append(f"{r['key']}: the loaded values are not the stored ones")
                checked += 1
                repaired += r["key"] not in src_md
        if repaired == 0:
            problems.append("no key was repaired")
        # The repaired checkpoint under the same options, its verification and its provenance.
        rc, text, err = run(self.cli, "diff", str(out), "--layout", str(layout), *opts, "--json")
        d = json.loads(text) if text else {"counts": {}}
        if rc != 0 or not d.get("passes"):
            problems.append(f"diff OUT: exit {rc}, {d['counts']}: {err}")
        rules = [x for i, x in enumerate(opts)
                 if x == "--disable-rule" or (i > 0 and opts[i - 1] == "--disable-rule")]
        if verify:
            rc, text, err = run(self.cli, "verify", str(out), "--layout", str(layout), "--quiet",
                                *rules)
            if rc != 0:
                problems.append(f"verify OUT: exit {rc}: {err[-300:]} {text[-300:]}")
        problems += check_manifest(out, result)
        rc, text, err = run(self.cli, "inspect", str(out))
        if "repaired from" not in text or str(ckpt.resolve()) not in text:
            problems.append(f"inspect OUT does not say where it was repaired from: {text[:300]}")
        problems += check_written(ckpt, out, result, out_full, rewrites, outside)
        if snapshot(ckpt) != before:
            problems.append("the source checkpoint changed")
        print(f"{name}: {checked} tensors loaded, {repaired} repaired keys, "
              f"{result['metadata_bytes']} bytes of metadata, changes "
              f"{[(c['kind'], c['count']) for c in result['changes']]}")
        self.tally.unit(name, problems)


def case_torch_dist_layers(c: Case) -> None:
    """A torch_dist checkpoint megatron-core saved with its layers stacked (decoder.layers.<name>
    [L, ...], one item per layer), loaded by a model that asks layer by layer (a heterogeneous
    block: decoder.layers.<i>.<name>, and each linear's extra state as shard_0_1): megatron-core's
    dist_checkpointing.load raises on the source; `fix` copies each layer's entry (an item keeps
    its stacked axis, whose shape DCP's reader checks) and renames the extra states; the same
    load of OUT passes and every tensor equals the saved model's bit for bit."""
    from check_loaders import megatron_model_parallel
    from megatron.core import dist_checkpointing
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig
    problems: list[str] = []
    src, out = c.tmp / "torch_dist", c.tmp / "torch_dist-fixed"
    src.mkdir()
    opts = ["--disable-rule", "torch_dist_stacked", "--no-optimizer"]
    with megatron_model_parallel():
        torch.manual_seed(11)

        def build(per_layer: bool) -> GPTModel:
            cfg = TransformerConfig(num_layers=3, hidden_size=16, num_attention_heads=4,
                                    ffn_hidden_size=32, use_cpu_initialization=True,
                                    params_dtype=torch.bfloat16, bf16=True,
                                    hetereogenous_dist_checkpoint=per_layer)
            return GPTModel(cfg, get_gpt_layer_local_spec(), vocab_size=32,
                            max_sequence_length=64)

        saved = build(False)
        dist_checkpointing.save(saved.sharded_state_dict(), str(src))
        params = {n: t for n, t in saved.state_dict().items()
                  if isinstance(t, torch.Tensor) and not n.endswith("._extra_state")}
        layout = c.tmp / "torch_dist-layout.json"
        layout.write_text(json.dumps({
            "schema": "shardscope.layout/1", "family": "test", "source": "megatron-core GPTModel",
            "parallel": {"tp": 1, "pp": 1, "ep": 1, "etp": 1, "dp_shard": 1},
            "transformer_engine": False, "linear_extra_state": True,
            "params": [{"name": n, "shape": list(t.shape), "dtype": str(t.dtype).split(".")[-1],
                        "tp_dim": -1} for n, t in params.items()]}))
        before = snapshot(src)

        def load(path: Path) -> dict[str, torch.Tensor]:
            model = build(True)
            model.load_state_dict(dist_checkpointing.load(model.sharded_state_dict(), str(path)))
            return model.state_dict()

        try:
            load(src)
            problems.append("megatron-core's per-layer load of the stacked source did not raise")
        except (Exception, CheckpointException):  # noqa: BLE001
            pass
        rc, text, err = run(c.cli, "fix", str(src), "--layout", str(layout), *opts, "-o",
                            str(out), "--json")
        if rc != 0:
            c.tally.unit("torch_dist_layers", [f"fix: exit {rc}: {err} {text[-800:]}"])
            return
        result = json.loads(text)
        try:
            loaded = load(out)
        except (Exception, CheckpointException) as exc:  # noqa: BLE001
            c.tally.unit("torch_dist_layers", [f"megatron-core's load of OUT raised: "
                                               f"{str(exc).strip().splitlines()[-1][:400]}"])
            return
        for n, t in params.items():
            if not torch.equal(bits(t), bits(loaded[n])):
                problems.append(f"{n}: megatron-core loads other values than were saved")
    rc, text, err = run(c.cli, "diff", str(out), "--layout", str(layout), *opts, "--json")
    if rc != 0 or not json.loads(text or "{}").get("passes"):
        problems.append(f"diff OUT: exit {rc}: {err[-300:]}")
    rc, text, err = run(c.cli, "verify", str(out), "--layout", str(layout), "--quiet",
                        "--disable-rule", "torch_dist_stacked")
    if rc != 0:
        problems.append(f"verify OUT: exit {rc}: {err[-300:]} {text[-300:]}")
    rc, text, _ = run(c.cli, "inspect", str(out))
    if "repaired from" not in text:
        problems.append("inspect OUT does not say where it was repaired from")
    kinds = {x["kind"]: x["count"] for x in result["changes"]}
    if kinds.get("rename") != 4 * 3:  # four linears' extra states a layer
        problems.append(f"the extra states were not renamed: {kinds}")
    problems += check_written(src, out, result, dcp.FileSystemReader(str(out)).read_metadata(),
                              rewrites=True)
    if snapshot(src) != before:
        problems.append("the source checkpoint changed")
    print(f"torch_dist_layers: {len(params)} tensors loaded by megatron-core, changes {kinds}, "
          f"{result['bytes_written']} bytes rewritten")
    c.tally.unit("torch_dist_layers", problems)


def wanted_value(e: dict, f: dict, stored, dtype: torch.dtype) -> torch.Tensor:
    """A parameter as torch builds it from the stored tensors the diff (every rule on) names."""
    want = torch.empty(e["shape"], dtype=dtype)
    for s in f["sources"]:
        t = stored(s["key"])
        for i in s["index"]:
            t = t[i]
        if want.dim() == 0:
            return t.clone().to(dtype)
        d = s["dim"]
        begin, end = (s["begin"], s["end"]) if s["begin"] < s["end"] else (0, want.shape[d])
        want.narrow(d, begin, end - begin).copy_(t.narrow(d, s["stored_row"], end - begin))
    return want


def check_state_dict_fix(c: Case, name: str, ckpt: Path, layout: Path, read, out_file: str,
                         stored: dict[str, torch.Tensor], extra=None) -> None:
    """fix of a torch.save / safetensors checkpoint: the model's strict load_state_dict raises on
    the source and passes on OUT, every value torch's own from the stored tensors."""
    problems: list[str] = []
    before = snapshot(ckpt if ckpt.is_dir() else ckpt.parent)
    lay = json.loads(layout.read_text())
    from check_loaders import module_from
    model = module_from({p["name"]: (tuple(p["shape"]), getattr(torch, p["dtype"]))
                         for p in lay["params"]})
    try:
        model.load_state_dict(read(ckpt), strict=True)
        problems.append("the strict load of the source did not raise")
    except RuntimeError:
        pass
    rc, text, err = run(c.cli, "diff", str(ckpt), "--layout", str(layout), "--json", "--every-rule")
    found = {x["name"]: x for x in json.loads(text)["entries"] if x["section"] == "model"}
    out = c.tmp / f"{name.replace('/', '-')}-fixed"
    rc, text, err = run(c.cli, "fix", str(ckpt), "--layout", str(layout), "-o", str(out), "--json")
    if rc != 0:
        c.tally.unit(name, [f"fix: exit {rc}: {err} {text[-600:]}"])
        return
    result = json.loads(text)
    loaded = read(out / out_file if out_file else out)
    try:
        model.load_state_dict(loaded, strict=True)
    except RuntimeError as exc:
        c.tally.unit(name, problems + [f"strict load of OUT raised: {str(exc)[:300]}"])
        return
    total = 0
    for k, v in loaded.items():
        total += v.numel() * v.element_size()
        f = found.get(k)
        if not f or not f["sources"]:
            problems.append(f"{k}: no sources")
            continue
        want = wanted_value(f, f, lambda key: stored[key], v.dtype)
        if not torch.equal(bits(want), bits(v)):
            problems.append(f"{k}: the loaded values are not the stored ones")
    if result["bytes_written"] != total:
        problems.append(f"wrote {result['bytes_written']} bytes of tensors, the files hold {total}")
    rc, text, err = run(c.cli, "diff", str(out / out_file if out_file.endswith(".pt") else out),
                        "--layout", str(layout), "--json")
    if rc != 0:
        problems.append(f"diff OUT: exit {rc}: {err[-300:]}")
    if snapshot(ckpt if ckpt.is_dir() else ckpt.parent) != before:
        problems.append("the source checkpoint changed")
    problems += check_manifest(out, result)
    problems += extra(out, result) if extra else []
    print(f"{name}: {len(loaded)} tensors loaded, changes "
          f"{[(x['kind'], x['count']) for x in result['changes']]}")
    c.tally.unit(name, problems)


def case_state_dicts(c: Case, demo: Path) -> None:
    """torch.save and safetensors saved through a wrapper (DDP's module., torch.compile's
    _orig_mod., FSDP's _fsdp_wrapped_module. inside the layers), a sharded Hugging Face
    directory, and Megatron names stored apart where the model fuses them."""
    import re
    from safetensors.torch import load_file, save_file
    from check_loaders import hf_model, tensors
    params = hf_model()
    sd = tensors(params)
    layout = c.tmp / "hf-layout.json"
    layout.write_text(json.dumps({
        "schema": "shardscope.layout/1", "family": "test", "source": "hf",
        "parallel": {"tp": 1, "pp": 1, "ep": 1, "etp": 1, "dp_shard": 1},
        "transformer_engine": False,
        "params": [{"name": n, "shape": list(s), "dtype": str(d).split(".")[-1], "tp_dim": -1}
                   for n, (s, d) in params.items()]}))
    wrappers = {"ddp": lambda k: "module." + k, "compile": lambda k: "_orig_mod." + k,
                "fsdp": lambda k: re.sub(r"(\.layers\.\d+\.)", r"\1_fsdp_wrapped_module.", k)}
    for wname, wrap in wrappers.items():
        held = {wrap(k): v for k, v in sd.items()}
        stored = dict(held)
        for fmt in ("safetensors", "pt"):
            d = c.tmp / f"{wname}-{fmt}"
            d.mkdir()
            path = d / f"model.{fmt}"
            if fmt == "pt":
                torch.save(held, path)
                read = lambda p: torch.load(p, weights_only=True)  # noqa: E731
            else:
                save_file(held, str(path))
                read = lambda p: load_file(str(p))  # noqa: E731
            check_state_dict_fix(c, f"{wname}/{fmt}", path, layout, read, path.name, stored)
    # A torch.save file with objects beside its tensors: refused in one line, nothing written.
    odir = c.tmp / "objects"
    odir.mkdir()
    torch.save({**{"module." + k: v for k, v in sd.items()}, "step": 5}, odir / "model.pt")
    out = c.tmp / "objects-fixed"
    rc, text, err = run(c.cli, "fix", str(odir / "model.pt"), "--layout", str(layout), "-o",
                        str(out))
    c.tally.unit("torch.save with objects: refused",
                 [] if rc == 2 and "step" in err and len(err.splitlines()) == 1 and
                 not out.exists() else [f"exit {rc}: {err} {text[-300:]}"])
    # A sharded Hugging Face directory: shards rewritten, the index too, config.json linked.
    hf = c.tmp / "hf-sharded"
    hf.mkdir()
    held = {"_orig_mod." + k: v for k, v in sd.items()}
    keys = list(held)
    shards = {"model-00001-of-00002.safetensors": keys[: len(keys) // 2],
              "model-00002-of-00002.safetensors": keys[len(keys) // 2:]}
    for shard, names in shards.items():
        save_file({k: held[k] for k in names}, str(hf / shard))
    (hf / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 0}, "weight_map": {k: s for s, ns in shards.items() for k in ns}}))
    (hf / "config.json").write_text("{}")

    def read_dir(p: Path) -> dict:
        out = {}
        for f in sorted(p.glob("*.safetensors")):
            out |= load_file(str(f))
        if (p / "model.safetensors.index.json").exists():
            index = json.loads((p / "model.safetensors.index.json").read_text())
            if set(index["weight_map"]) != set(out):
                raise RuntimeError(f"the index names {sorted(index['weight_map'])[:3]}")
        return out
    check_state_dict_fix(c, "hf_sharded", hf, layout, read_dir, "", held)
    out = c.tmp / "hf_sharded-fixed"
    if out.exists():
        c.tally.unit("hf_sharded: config.json hard-linked",
                     [] if (out / "config.json").stat().st_ino == (hf / "config.json").stat().st_ino
                     else ["config.json is not a hard link"])
    # An index of another name (diffusers'), opened by its path: rewritten under its own name.
    dif = c.tmp / "hf-diffusers"
    dif.mkdir()
    for shard, names in shards.items():
        save_file({k: held[k] for k in names}, str(dif / shard))
    (dif / "diffusion_pytorch_model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 0, "kept": "yes"},
         "weight_map": {k: s for s, ns in shards.items() for k in ns}}))
    out = c.tmp / "hf-diffusers-fixed"
    rc, text, err = run(c.cli, "fix", str(dif / "diffusion_pytorch_model.safetensors.index.json"),
                        "--layout", str(layout), "-o", str(out))
    index = out / "diffusion_pytorch_model.safetensors.index.json"
    got = json.loads(index.read_text()) if index.exists() else {}
    c.tally.unit("an index of another name", [] if rc == 0 and
                 set(got.get("weight_map", {})) == set(sd) and
                 got.get("metadata", {}).get("kept") == "yes" and
                 not (out / "model.safetensors.index.json").exists()
                 else [f"exit {rc}: {err} {sorted(p.name for p in out.glob('*'))}"])
    # Megatron names stored apart (MLA down projections, SwiGLU weight_w / weight_v, norms under
    # their own names) where the model fuses them: concatenated into the new file.
    md = dcp.FileSystemReader(str(data_dir(demo))).read_metadata().state_dict_metadata
    msd = {k: torch.empty(tuple(m.size), dtype=m.properties.dtype)
           for k, m in md.items() if k.startswith("model.module.") and hasattr(m, "size")}
    dcp.load(msd, checkpoint_id=str(data_dir(demo)))
    mheld = {k[len("model.module."):]: v.contiguous() for k, v in msd.items()}
    mpath = c.tmp / "megatron" / "model.safetensors"
    mpath.parent.mkdir()
    save_file(mheld, str(mpath))
    mlay = c.layout(demo / "config.json")
    lay = json.loads(mlay.read_text())
    lay["transformer_engine"] = lay["linear_extra_state"] = False
    lay["params"] = [p for p in lay["params"] if not p["name"].endswith("._extra_state")]
    mlay.write_text(json.dumps(lay))
    check_state_dict_fix(c, "megatron_fused/safetensors", mpath, mlay,
                         lambda p: load_file(str(p)), mpath.name, mheld)


def case_refusals(c: Case, demo: Path) -> None:
    layout = c.layout(demo / "config.json")
    opts = ["--disable-rule", "mla_down_proj"]
    # An existing output is never replaced, unless an earlier fix wrote it.
    taken = c.tmp / "taken"
    taken.mkdir()
    (taken / "mine.txt").write_text("keep")
    rc, _, err = run(c.cli, "fix", str(demo), "--layout", str(layout), *opts, "-o", str(taken))
    c.tally.unit("existing output", [] if rc == 2 and "exists" in err and len(err.splitlines()) == 1
                 else [f"exit {rc}: {err}"])
    rc, _, err = run(c.cli, "fix", str(demo), "--layout", str(layout), *opts, "-o", str(taken),
                     "--force")
    c.tally.unit("--force on a foreign directory",
                 [] if rc == 2 and (taken / "mine.txt").read_text() == "keep" else [f"exit {rc}: {err}"])
    out = c.tmp / "again"
    rc1, _, _ = run(c.cli, "fix", str(demo), "--layout", str(layout), *opts, "-o", str(out))
    rc2, _, err = run(c.cli, "fix", str(demo), "--layout", str(layout), *opts, "-o", str(out),
                      "--force")
    c.tally.unit("--force replaces an earlier fix", [] if rc1 == rc2 == 0 else [f"exit {rc1}, {rc2}: {err}"])
    # Inside the source: refused before anything is made.
    inner = data_dir(demo) / "fixed"
    rc, _, err = run(c.cli, "fix", str(demo), "--layout", str(layout), *opts, "-o", str(inner))
    c.tally.unit("output inside the source", [] if rc == 2 and not inner.exists() else [f"exit {rc}: {err}"])
    # A parameter nothing stores: no repair by references; nothing written without --partial.
    src = c.tmp / "missing"
    shutil.copytree(demo, src)
    dd = data_dir(src)
    md = dcp.FileSystemReader(str(dd)).read_metadata()
    gone = next(k for k in md.state_dict_metadata if k.endswith("linear_proj.weight"))
    del md.state_dict_metadata[gone]
    md.storage_data = {k: v for k, v in md.storage_data.items() if k.fqn != gone}
    (dd / ".metadata").write_bytes(pickle.dumps(md))
    out = c.tmp / "missing-fixed"
    rc, text, err = run(c.cli, "fix", str(src), "--layout", str(layout), *opts, "-o", str(out))
    param = gone[len("model.module."):]
    c.tally.unit("blocked: nothing written",
                 [] if rc == 1 and not out.exists() and param in text else [f"exit {rc}: {text[-500:]} {err}"])
    rc, text, err = run(c.cli, "fix", str(src), "--layout", str(layout), *opts, "-o", str(out),
                        "--partial", "--json")
    r = json.loads(text) if text else {}
    ok = rc == 1 and r.get("written") and any(param in b for b in r.get("blockers", [])) and \
        r["after"]["counts"]["loadable_model"] == r["after"]["counts"]["expected_model"] - 1
    c.tally.unit("--partial writes the rest", [] if ok else [f"exit {rc}: {text[-600:]} {err}"])


def case_hostile(c: Case, demo: Path) -> None:
    """A .metadata whose storage names a file outside the checkpoint: refused, nothing written."""
    layout = c.layout(demo / "config.json")
    src = c.tmp / "hostile" / "ckpt"
    shutil.copytree(demo, src)
    dd = data_dir(src)
    first = sorted(dd.glob("*.distcp"))[0]
    outside = c.tmp / "hostile" / "outside.distcp"
    shutil.copy(first, outside)
    md = dcp.FileSystemReader(str(dd)).read_metadata()
    for info in md.storage_data.values():
        if info.relative_path == first.name:
            info.relative_path = "../../outside.distcp"
    (dd / ".metadata").write_bytes(pickle.dumps(md))
    before = sorted(str(p) for p in (c.tmp / "hostile").rglob("*"))
    out = c.tmp / "hostile" / "fixed"
    rc, text, err = run(c.cli, "fix", str(src), "--layout", str(layout), "--disable-rule",
                        "mla_down_proj", "-o", str(out))
    after = sorted(str(p) for p in (c.tmp / "hostile").rglob("*"))
    problems = []
    if rc == 0 or out.exists() or after != before:
        problems.append(f"exit {rc}, wrote {sorted(set(after) - set(before))}: {text[-300:]} {err}")
    c.tally.unit("hostile relative_path", problems)


def hf_layout(c: Case, params: dict[str, tuple], name: str) -> Path:
    """A layout of these Hugging Face-style names, shapes and dtypes."""
    out = c.tmp / f"{name}-layout.json"
    out.write_text(json.dumps({
        "schema": "shardscope.layout/1", "family": "test", "source": "hf",
        "parallel": {"tp": 1, "pp": 1, "ep": 1, "etp": 1, "dp_shard": 1},
        "transformer_engine": False,
        "params": [{"name": n, "shape": list(s), "dtype": str(d).split(".")[-1], "tp_dim": -1}
                   for n, (s, d) in params.items()]}))
    return out


def check_dcp_fix(c: Case, name: str, src: Path, layout: Path, opts: list[str],
                  kept: tuple[str, ...] = ()) -> None:
    """fix of a plain DCP checkpoint: torch's strict dcp.load of what the diff says the load asks
    for raises on the source and passes on OUT, every value the one torch builds from the stored
    tensors the diff with every rule names; the stored tensors no parameter uses are `kept`
    (dcp.load does not read them), and the source is untouched."""
    problems: list[str] = []
    before = snapshot(src)
    rc, text, err = run(c.cli, "diff", str(src), "--layout", str(layout), *opts, "--json")
    asked = json.loads(text)
    rc, text, err = run(c.cli, "diff", str(src), "--layout", str(layout), "--json", "--every-rule")
    found = {(e["section"], e["name"]): e for e in json.loads(text)["entries"]}
    request = {}
    for e in asked["entries"]:
        rows = e.get("request_rows") or [{"key": e["request_keys"][0], "shape": e["shape"]}]
        for r in rows:
            request[r["key"]] = (r["shape"], getattr(torch, e["dtype"]))
    try:
        load_strict(src, request)
        problems.append("the strict load of the source did not raise")
    except (Exception, CheckpointException):  # noqa: BLE001 - a BaseException in torch
        pass
    out = c.tmp / f"{name.replace('/', '-')}-fixed"
    rc, text, err = run(c.cli, "fix", str(src), "--layout", str(layout), *opts, "-o", str(out),
                        "--json")
    if rc != 0:
        c.tally.unit(name, problems + [f"fix: exit {rc}: {err} {text[-600:]}"])
        return
    result = json.loads(text)
    try:
        loaded = load_strict(out, request)
    except (Exception, CheckpointException) as exc:  # noqa: BLE001
        c.tally.unit(name, problems + [f"strict load of OUT raised: {str(exc)[:400]}"])
        return
    md = dcp.FileSystemReader(str(src)).read_metadata().state_dict_metadata
    cache: dict[str, torch.Tensor] = {}

    def stored(key: str) -> torch.Tensor:
        if key not in cache:
            sd = {key: torch.empty(tuple(md[key].size), dtype=md[key].properties.dtype)}
            dcp.load(sd, checkpoint_id=str(src))
            cache[key] = sd[key]
        return cache[key]

    for e in asked["entries"]:
        f = found.get((e["section"], e["name"]))
        if not f or not f["sources"]:
            problems.append(f"{e['name']}: no sources with every rule on")
            continue
        want = wanted_value(e, f, stored, getattr(torch, e["dtype"]))
        for r in e.get("request_rows") or [{"key": e["request_keys"][0], "begin": 0, "end": 0}]:
            part = want if r["begin"] >= r["end"] else \
                want.narrow(r["dim"], r["begin"], r["end"] - r["begin"])
            if not torch.equal(bits(part), bits(loaded[r["key"]])):
                problems.append(f"{r['key']}: the loaded values are not the stored ones")
    got = tuple(sorted(u["key"] for u in result.get("unused", []) if u["kept"]))
    if got != tuple(sorted(kept)) or any(not u["kept"] for u in result.get("unused", [])):
        problems.append(f"unused tensors {result.get('unused')}, expected kept {list(kept)}")
    problems += check_manifest(out, result)
    if snapshot(src) != before:
        problems.append("the source checkpoint changed")
    print(f"{name}: {len(loaded)} keys loaded by a strict dcp.load, changes "
          f"{[(x['kind'], x['count']) for x in result['changes']]}")
    c.tally.unit(name, problems)


def resaved(ckpt: Path, out: Path, rename) -> Path:
    """A copy of a one-rank DCP checkpoint saved again by dcp.save, its keys renamed (None:
    left out)."""
    md = dcp.FileSystemReader(str(ckpt)).read_metadata()
    sd = {k: torch.empty(tuple(m.size), dtype=m.properties.dtype)
          for k, m in md.state_dict_metadata.items() if hasattr(m, "size")}
    sd |= {k: None for k, m in md.state_dict_metadata.items() if not hasattr(m, "size")}
    dcp.load(sd, checkpoint_id=str(ckpt))
    dcp.save({rename(k): v for k, v in sd.items() if rename(k) is not None},
             checkpoint_id=str(out), no_dist=True)
    return out


def case_zero_element(c: Case) -> None:
    """A zero-element tensor (a bias of no rows) among the keys a wrapper's prefix hides, in a
    torch.save file saved through DDP and a DCP checkpoint saved from a torch.compile'd model:
    it is renamed with the rest (it blocked the whole repair: no stored tensor holds its rows)."""
    from check_loaders import hf_model, tensors
    params = hf_model()
    params["model.layers.0.self_attn.q_proj.bias"] = ((0,), torch.float32)
    params["model.layers.1.mlp.gate_proj.lora"] = ((0, 8), torch.float32)
    sd = tensors(params)
    layout = hf_layout(c, params, "zero")
    d = c.tmp / "zero-pt"
    d.mkdir()
    held = {"module." + k: v for k, v in sd.items()}
    torch.save(held, d / "model.pt")
    check_state_dict_fix(c, "zero_element/torch_save", d / "model.pt", layout,
                         lambda p: torch.load(p, weights_only=True), "model.pt", held)
    src = c.tmp / "zero-dcp"
    dcp.save({"model": {"_orig_mod." + k: v for k, v in sd.items()}}, checkpoint_id=str(src),
             no_dist=True)
    check_dcp_fix(c, "zero_element/dcp", src, layout, [])


def case_wrapper_fused(c: Case, fx: Path) -> None:
    """A fused SwiGLU linear_fc1 stored whole under a wrapper's prefix: in a torch.save file saved
    through DDP (module.decoder.layers.0.mlp.linear_fc1.weight), which the model's
    load_state_dict asks for whole (was blocked, the blocker naming the prefix); and in an
    fsdp_dtensor checkpoint of a torch.compile'd model (model.module._orig_mod.…) saved before
    Megatron-FSDP had the split handler, which a load with the handler asks for as its sections
    (the prefix dropped and the sections cut out)."""
    ckpt = fx / "llama/fused"
    dd = data_dir(ckpt)
    md = dcp.FileSystemReader(str(dd)).read_metadata().state_dict_metadata
    sd = {k: torch.empty(tuple(m.size), dtype=m.properties.dtype)
          for k, m in md.items() if k.startswith("model.module.") and hasattr(m, "size")}
    dcp.load(sd, checkpoint_id=str(dd))
    held = {"module." + k[len("model.module."):]: v.contiguous() for k, v in sd.items()}
    path = c.tmp / "wrapper-fused" / "model.pt"
    path.parent.mkdir()
    torch.save(held, path)
    lay = c.layout(fx / "llama/config.json")
    plain = json.loads(lay.read_text())
    plain["transformer_engine"] = plain["linear_extra_state"] = False
    plain["params"] = [p for p in plain["params"] if not p["name"].endswith("._extra_state")]
    lay.write_text(json.dumps(plain))
    check_state_dict_fix(c, "wrapper_fused/torch_save", path, lay,
                         lambda p: torch.load(p, weights_only=True), "model.pt", held)

    def compiled(k: str) -> str:
        return "model.module._orig_mod." + k[len("model.module."):] \
            if k.startswith("model.module.") else k
    src = resaved(dd, c.tmp / "wrapper-fused-dcp", compiled)
    c.repair("wrapper_fused/fsdp_dtensor", src, c.layout(fx / "llama/config.json"),
             ["--no-optimizer"], rewrites=True)


def case_key_prefix(c: Case, demo: Path) -> None:
    """key_prefix under DCP's top-level nesting: a plain DCP {'model': sd} asked for under
    `encoder.` (a model that keeps the saved one as a submodule) and the reverse (stored under
    `backbone.`, asked for without it); the bundled fsdp_dtensor demo asked for under
    `language_model.` (model.module.language_model.…), optimizer states and groups included."""
    from check_loaders import hf_model, tensors
    params = hf_model()
    sd = tensors(params)
    src = c.tmp / "prefix-dcp"
    dcp.save({"model": sd}, checkpoint_id=str(src), no_dist=True)
    check_dcp_fix(c, "key_prefix/dcp_add", src,
                  hf_layout(c, {"encoder." + k: v for k, v in params.items()}, "encoder"), [])
    src = c.tmp / "prefix-dcp-strip"
    dcp.save({"model": {"backbone." + k: v for k, v in sd.items()}}, checkpoint_id=str(src),
             no_dist=True)
    check_dcp_fix(c, "key_prefix/dcp_strip", src, hf_layout(c, params, "backbone"), [])
    lay = c.layout(demo / "config.json")
    d = json.loads(lay.read_text())
    for p in d["params"]:
        p["name"] = "language_model." + p["name"]
        if p.get("absorbs"):
            p["absorbs"] = "language_model." + p["absorbs"]
        for sec in (p.get("fusion") or {}).get("sections", []):
            sec["name"] = "language_model." + sec["name"]
    lay.write_text(json.dumps(d))
    c.repair("key_prefix/fsdp_dtensor", demo, lay, [])


def case_unused(c: Case) -> None:
    """A stored tensor no parameter uses: left out of a state dict's copy (a strict
    load_state_dict raises on it), so a repair that succeeds exits 0 and says so (it exited 1,
    written but not repaired); alone, the diff's REPAIR line offers that fix by name (it offered
    one summarised as "()"); kept in a DCP copy (dcp.load does not read it), named as kept; and a
    DCP checkpoint whose only extra is such a tensor has nothing to repair (exit 0)."""
    from safetensors.torch import load_file, save_file
    from check_loaders import hf_model, tensors
    params = hf_model()
    sd = tensors(params)
    layout = hf_layout(c, params, "unused")
    extra = torch.arange(6, dtype=torch.float32)

    def left_out(key: str):
        def check(out: Path, result: dict) -> list[str]:
            u = result.get("unused", [])
            return [] if [(x["key"], x["kept"]) for x in u] == [(key, False)] else \
                [f"unused {u}, expected {key} left out"]
        return check
    d = c.tmp / "unused-pt"
    d.mkdir()
    held = {"module." + k: v for k, v in sd.items()} | {"module.extra_head.weight": extra}
    torch.save(held, d / "model.pt")
    check_state_dict_fix(c, "unused/torch_save", d / "model.pt", layout,
                         lambda p: torch.load(p, weights_only=True), "model.pt", held,
                         left_out("module.extra_head.weight"))
    # Only the extra: the diff fails (a strict load raises Unexpected key(s)) and offers the fix.
    d = c.tmp / "unused-st"
    d.mkdir()
    held = sd | {"extra_head.weight": extra}
    save_file(held, str(d / "model.safetensors"))
    rc, text, err = run(c.cli, "diff", str(d / "model.safetensors"), "--layout", str(layout))
    line = next((x for x in text.splitlines() if "writes a checkpoint" in x), "")
    c.tally.unit("unused/diff REPAIR line", [] if rc == 1 and "(1 leave out)" in line and
                 "()" not in text else [f"exit {rc}: {text[-600:]} {err}"])
    # The file is written anew (its tensors copied): never "no tensor data copied".
    c.tally.unit("unused/diff REPAIR line says the file is written anew",
                 [] if "written anew" in line and "no tensor data copied" not in line
                 else [line])
    check_state_dict_fix(c, "unused/safetensors", d / "model.safetensors", layout,
                         lambda p: load_file(str(p)), "model.safetensors", held,
                         left_out("extra_head.weight"))
    # DCP: kept.
    src = c.tmp / "unused-dcp"
    dcp.save({"model": {"module." + k: v for k, v in sd.items()} | {"extra_head.weight": extra}},
             checkpoint_id=str(src), no_dist=True)
    check_dcp_fix(c, "unused/dcp", src,
                  hf_layout(c, {"decoder." + k: v for k, v in params.items()}, "unused-dcp"), [],
                  kept=("model.extra_head.weight",))
    src = c.tmp / "unused-dcp-only"
    dcp.save({"model": sd | {"extra_head.weight": extra}}, checkpoint_id=str(src), no_dist=True)
    rc, text, err = run(c.cli, "diff", str(src), "--layout", str(layout))
    offers = [x for x in text.splitlines() if "shardscope-cli fix" in x or "writes a" in x]
    problems = [] if "nothing for fix to repair" in text and not offers else \
        [f"diff offers {offers}: {text[-500:]}"]
    out = c.tmp / "unused-dcp-only-fixed"
    rc, text, err = run(c.cli, "fix", str(src), "--layout", str(layout), "-o", str(out), "--json")
    r = json.loads(text) if text else {}
    if rc != 0 or not r.get("already_loads") or out.exists() or \
            [u["key"] for u in r.get("unused", []) if u["kept"]] != ["model.extra_head.weight"]:
        problems.append(f"fix: exit {rc}, {text[:300]} {err}")
    c.tally.unit("unused/dcp nothing to repair", problems)


def case_symlink_outside(c: Case, demo: Path) -> None:
    """A data file that is a symlink to a file outside the checkpoint: copied into OUT (a hard
    link made OUT share that outside inode), and the result and manifest name it."""
    src = c.tmp / "symlinked" / "ckpt"
    shutil.copytree(demo, src)
    first = sorted(data_dir(src).glob("*.distcp"))[0]
    outside = c.tmp / "symlinked" / "elsewhere" / first.name
    outside.parent.mkdir()
    shutil.move(first, outside)
    first.symlink_to(outside)
    c.repair("symlink_outside", src, c.layout(demo / "config.json"),
             ["--disable-rule", "mla_down_proj"], outside=(first.name,))
    m = json.loads((c.tmp / "symlink_outside-fixed" / "shardscope-fix.json").read_text())
    c.tally.unit("symlink_outside: manifest", [] if any(
        str(outside) in x for x in m.get("copied_from_outside", [])) else [f"manifest {m}"])


def case_torch_save_index(c: Case) -> None:
    """transformers' pytorch_model.bin.index.json set (torch.save shards) saved through
    torch.compile: the shards written anew, the index rewritten, config.json hard-linked (fix
    refused the format: exit 2)."""
    from check_loaders import hf_model, tensors
    params = hf_model()
    sd = tensors(params)
    held = {"_orig_mod." + k: v for k, v in sd.items()}
    keys = list(held)
    shards = {"pytorch_model-00001-of-00002.bin": keys[: len(keys) // 2],
              "pytorch_model-00002-of-00002.bin": keys[len(keys) // 2:]}
    d = c.tmp / "bin-set"
    d.mkdir()
    for shard, names in shards.items():
        torch.save({k: held[k] for k in names}, d / shard)
    (d / "pytorch_model.bin.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 0}, "weight_map": {k: s for s, ns in shards.items() for k in ns}}))
    (d / "config.json").write_text("{}")

    def read_set(p: Path) -> dict:
        index = json.loads((p / "pytorch_model.bin.index.json").read_text())
        out = {}
        for f in sorted(set(index["weight_map"].values())):
            out |= torch.load(p / f, weights_only=True)
        if set(index["weight_map"]) != set(out):
            raise RuntimeError(f"the index names {sorted(index['weight_map'])[:3]}")
        return out

    def linked(out: Path, result: dict) -> list[str]:
        return [] if (out / "config.json").stat().st_ino == (d / "config.json").stat().st_ino \
            else ["config.json is not a hard link"]
    check_state_dict_fix(c, "torch_save_index", d, hf_layout(c, params, "bin-set"), read_set, "",
                         held, linked)


def case_legacy(c: Case) -> None:
    """Megatron's legacy torch format at TP 2 (mp_rank_0r/model_optim_rng.pt): saved with the
    output layer tied to the embedding and MLA's down projections fused, loaded by a model that
    unties them and holds the projections apart; rotary inv_freq saved beside them. Megatron's
    load_model_state_dict (strict load_state_dict of each rank's `model`) raises on the source;
    `fix` (exit 2 before) writes both rank files anew, and the same strict load of OUT passes
    with every value bit for bit torch's own from the stored tensors, every other entry (args,
    optimizer, RNG states, iteration) as saved."""
    import argparse
    import numpy as np
    from check_loaders import module_from
    h, v, q, kv, tp = 8, 32, 6, 4, 2
    saved = {"embedding.word_embeddings.weight": ((v, h), 0),
             "decoder.layers.0.self_attention.linear_qkv_down_proj.weight": ((q + kv, h), -1),
             "decoder.layers.0.self_attention.linear_proj.weight": ((h, h), 1),
             "decoder.final_layernorm.weight": ((h,), -1)}
    g = torch.Generator().manual_seed(5)
    values = {n: torch.randn(s, generator=g).to(torch.bfloat16) for n, (s, _) in saved.items()}
    root = c.tmp / "legacy"
    it = root / "iter_0000007"
    files = []
    for r in range(tp):
        # As Megatron saves it: the module's state_dict(), an OrderedDict with _metadata.
        model = module_from({n: (x.shape, x.dtype) for n, x in values.items()}).state_dict()
        for n, t in values.items():
            model[n] = (t.chunk(tp, saved[n][1])[r] if saved[n][1] >= 0 else t).clone()
        model["rotary_pos_emb.inv_freq"] = torch.arange(4, dtype=torch.float32)
        (it / f"mp_rank_{r:02d}").mkdir(parents=True)
        files.append(it / f"mp_rank_{r:02d}" / "model_optim_rng.pt")
        torch.save({"args": argparse.Namespace(tensor_model_parallel_size=tp, lr=1e-4),
                    "checkpoint_version": 3.0, "iteration": 7, "model": model,
                    "optimizer": {"optimizer": {"state": {0: {"exp_avg": torch.randn(3, generator=g)}},
                                                "param_groups": [{"lr": 1e-4, "params": [0]}]}},
                    "rng_state": [{"random_rng_state": ("MT", 1),
                                   "np_rng_state": np.random.RandomState(r).get_state(),
                                   "torch_rng_state": torch.get_rng_state()}]}, files[-1])
    (root / "latest_checkpointed_iteration.txt").write_text("7")
    want = {"embedding.word_embeddings.weight": ((v, h), 0),
            "decoder.layers.0.self_attention.linear_q_down_proj.weight": ((q, h), -1),
            "decoder.layers.0.self_attention.linear_kv_down_proj.weight": ((kv, h), -1),
            "decoder.layers.0.self_attention.linear_proj.weight": ((h, h), 1),
            "decoder.final_layernorm.weight": ((h,), -1),
            "output_layer.weight": ((v, h), 0)}
    layout = c.tmp / "legacy-layout.json"
    layout.write_text(json.dumps({
        "schema": "shardscope.layout/1", "family": "test", "source": "test",
        "parallel": {"tp": tp, "pp": 1, "ep": 1, "etp": 1, "dp_shard": 1},
        "transformer_engine": False,
        "params": [{"name": n, "shape": list(s), "dtype": "bfloat16", "tp_dim": d}
                   for n, (s, d) in want.items()]}))
    local = {n: (tuple(s[i] // tp if i == d else s[i] for i in range(len(s))), torch.bfloat16)
             for n, (s, d) in want.items()}

    def megatron_load(path: Path) -> dict:
        """load_model_state_dict's strict load_state_dict of the rank file's `model`."""
        model = module_from(local, "GPTModel")
        model.load_state_dict(torch.load(path, weights_only=False)["model"], strict=True)
        return model.state_dict()

    problems: list[str] = []
    before = snapshot(root)
    for f in files:
        try:
            megatron_load(f)
            problems.append(f"the strict load of the source's {f.parent.name} did not raise")
        except RuntimeError:
            pass
    out = c.tmp / "legacy-fixed"
    rc, text, err = run(c.cli, "fix", str(root), "--layout", str(layout), "-o", str(out), "--json")
    if rc != 0:
        c.tally.unit("legacy", problems + [f"fix: exit {rc}: {err} {text[-600:]}"])
        return
    result = json.loads(text)
    for f in files:
        src = torch.load(f, weights_only=False)
        o = out / f.relative_to(root)
        try:
            loaded = megatron_load(o)
        except RuntimeError as exc:
            problems.append(f"{f.parent.name}: the strict load of OUT raised: {str(exc)[:300]}")
            continue
        m = src["model"]
        fused = m["decoder.layers.0.self_attention.linear_qkv_down_proj.weight"]
        expect = {n: m[n] for n in saved if n in want} | {
            "output_layer.weight": m["embedding.word_embeddings.weight"],
            "decoder.layers.0.self_attention.linear_q_down_proj.weight": fused.narrow(0, 0, q),
            "decoder.layers.0.self_attention.linear_kv_down_proj.weight": fused.narrow(0, q, kv)}
        for n, t in expect.items():
            if not torch.equal(bits(t), bits(loaded[n])):
                problems.append(f"{f.parent.name}: {n} loads other values than were stored")
        got = torch.load(o, weights_only=False)
        if list(got) != list(src):
            problems.append(f"{f.parent.name}: entries {list(got)}, the source's {list(src)}")
        if type(got["model"]) is not type(m) or got["model"]._metadata != m._metadata:
            problems.append(f"{f.parent.name}: `model` is a {type(got['model'])} without the "
                            "source's _metadata")
        if vars(got["args"]) != vars(src["args"]) or got["iteration"] != src["iteration"] or \
                got["checkpoint_version"] != src["checkpoint_version"]:
            problems.append(f"{f.parent.name}: args or iteration changed")
        so, go = src["optimizer"]["optimizer"], got["optimizer"]["optimizer"]
        if not torch.equal(bits(so["state"][0]["exp_avg"]), bits(go["state"][0]["exp_avg"])) or \
                so["param_groups"] != go["param_groups"]:
            problems.append(f"{f.parent.name}: the optimizer state changed")
        rs, rg = src["rng_state"][0], got["rng_state"][0]
        if rs["random_rng_state"] != rg["random_rng_state"] or \
                not torch.equal(rs["torch_rng_state"], rg["torch_rng_state"]) or \
                any(not np.array_equal(a, b) if isinstance(a, np.ndarray) else a != b
                    for a, b in zip(rs["np_rng_state"], rg["np_rng_state"])):
            problems.append(f"{f.parent.name}: the RNG state changed")
    if [(u["key"], u["kept"]) for u in result.get("unused", [])] != \
            [("mp_rank_00/model.rotary_pos_emb.inv_freq", False)]:
        problems.append(f"unused: {result.get('unused')}")
    rc, text, err = run(c.cli, "diff", str(out), "--layout", str(layout), "--json")
    if rc != 0:
        problems.append(f"diff OUT: exit {rc}: {text[-300:]} {err}")
    problems += check_manifest(out, result)
    if snapshot(root) != before:
        problems.append("the source checkpoint changed")
    print(f"legacy: {tp} rank files loaded strictly, changes "
          f"{[(x['kind'], x['count']) for x in result['changes']]}")
    c.tally.unit("legacy", problems)


def case_recheck(c: Case, demo: Path) -> None:
    """fix reads its output back and diffs it as asked before the output takes its name, and
    the manifest records the verdict: a --partial output is flagged as no repair, naming what
    still fails (exit 1); a repair records that it loads (check_manifest, in every case)."""
    layout = c.layout(demo / "config.json")
    opts = ["--disable-rule", "mla_down_proj"]
    # --partial: written, read back, flagged.
    src = c.tmp / "recheck" / "missing"
    src.parent.mkdir()
    shutil.copytree(demo, src)
    dd = data_dir(src)
    md = dcp.FileSystemReader(str(dd)).read_metadata()
    gone = next(k for k in md.state_dict_metadata if k.endswith("linear_proj.weight"))
    del md.state_dict_metadata[gone]
    md.storage_data = {k: v for k, v in md.storage_data.items() if k.fqn != gone}
    (dd / ".metadata").write_bytes(pickle.dumps(md))
    out = c.tmp / "recheck" / "partial"
    rc, text, err = run(c.cli, "fix", str(src), "--layout", str(layout), *opts, "-o", str(out),
                        "--partial", "--json")
    r = json.loads(text) if text else {}
    m = out / "shardscope-fix.json"
    manifest = json.loads(m.read_text()) if m.exists() else {}
    param = gone[len("model.module."):]
    c.tally.unit("recheck: --partial flagged", [] if rc == 1 and r.get("written") and
                 manifest.get("repaired") is False and param in manifest.get("still_fails", "")
                 else [f"exit {rc}: {manifest} {err}"])



def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--demo", required=True)
    ap.add_argument("--fixtures", help="make_layout_fixtures.py's output")
    ap.add_argument("case")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="ss-fix-"))
    tally = Tally()
    c = Case(a.cli, tmp, tally)
    demo = Path(a.demo)
    fx = Path(a.fixtures) if a.fixtures else None
    try:
        if a.case == "mla":
            c.repair("mla", demo, c.layout(demo / "config.json"), ["--disable-rule", "mla_down_proj"])
        elif a.case == "mla_partial_load":
            c.repair("mla_partial_load", demo, c.layout(demo / "config.json"),
                     ["--disable-rule", "mla_down_proj", "--no-strict", "--strictness", "ignore_all"])
        elif a.case == "swiglu":
            c.repair("swiglu", fx / "llama/unfused", c.layout(fx / "llama/config.json"),
                     ["--disable-rule", "swiglu"])
        elif a.case == "gdn":
            c.repair("gdn", fx / "qwen3_next/unfused", c.layout(fx / "qwen3_next/config.json"),
                     ["--disable-rule", "gdn"])
        elif a.case == "mtp":
            c.repair("mtp", fx / "deepseek_v3/unfused", c.layout(fx / "deepseek_v3/config.json"),
                     ["--disable-rule", "mtp"])
        elif a.case == "experts_form":
            c.repair("experts_form", fx / "deepseek_v3/sequential",
                     c.layout(fx / "deepseek_v3/config.json"), ["--disable-rule", "experts_form"])
        elif a.case == "swiglu_fused":
            # Saved fused before Megatron-FSDP had the split handler; loaded by one that has it:
            # the sections cut across the stored chunk, so they are copied.
            c.repair("swiglu_fused", fx / "llama/fused", c.layout(fx / "llama/config.json"), [],
                     rewrites=True)
        elif a.case == "swiglu_fused_dtypes":
            # The same, with layer 0's fused weight stored as float8 (torch.save writes it as an
            # untyped storage, rebuilt by _rebuild_tensor_v3) and layer 1's as bfloat16.
            src = recast(fx / "llama/fused", c.tmp / "dtypes", {
                "model.module.decoder.layers.0.mlp.linear_fc1.weight": torch.float8_e4m3fn,
                "model.module.decoder.layers.1.mlp.linear_fc1.weight": torch.bfloat16})
            c.repair("swiglu_fused_dtypes", src, c.layout(fx / "llama/config.json"), [],
                     rewrites=True)
        elif a.case == "mla_cast":
            # The demo (float32) with its kv down projections saved in bfloat16:
            # one fused key holds one dtype, so it is rewritten in the model's (what the load's
            # copy_ casts to anyway).
            md = dcp.FileSystemReader(str(data_dir(demo))).read_metadata().state_dict_metadata
            src = recast(data_dir(demo), c.tmp / "mla_cast", {
                k: torch.bfloat16 for k in md if k.endswith("linear_kv_down_proj.weight")})
            c.repair("mla_cast", src, c.layout(demo / "config.json"),
                     ["--disable-rule", "mla_down_proj"], rewrites=True)
        elif a.case == "state_dicts":
            case_state_dicts(c, demo)
        elif a.case == "zip64":
            # The ZIP64 records torch writes past 4 GiB, on every record (a test switch): torch
            # reads the rewritten archives of a DCP fix, and a rewritten torch.save file.
            os.environ["SHARDSCOPE_FORCE_ZIP64"] = "1"
            c.repair("zip64_dcp", fx / "llama/fused", c.layout(fx / "llama/config.json"), [],
                     rewrites=True)
            from check_loaders import hf_model, tensors
            held = {"module." + k: v for k, v in tensors(hf_model()).items()}
            d = c.tmp / "zip64-pt"
            d.mkdir()
            torch.save(held, d / "model.pt")
            lay = c.tmp / "zip64-layout.json"
            lay.write_text(json.dumps({
                "schema": "shardscope.layout/1", "family": "test", "source": "hf",
                "parallel": {"tp": 1, "pp": 1, "ep": 1, "etp": 1, "dp_shard": 1},
                "transformer_engine": False,
                "params": [{"name": n, "shape": list(s), "dtype": str(dt).split(".")[-1],
                            "tp_dim": -1} for n, (s, dt) in hf_model().items()]}))
            check_state_dict_fix(c, "zip64_torch_save", d / "model.pt", lay,
                                 lambda p: torch.load(p, weights_only=True), "model.pt", held)
        elif a.case == "torch_dist_layers":
            case_torch_dist_layers(c)
        elif a.case == "zero_element":
            case_zero_element(c)
        elif a.case == "wrapper_fused":
            case_wrapper_fused(c, fx)
        elif a.case == "key_prefix":
            case_key_prefix(c, demo)
        elif a.case == "unused":
            case_unused(c)
        elif a.case == "symlink_outside":
            case_symlink_outside(c, demo)
        elif a.case == "torch_save_index":
            case_torch_save_index(c)
        elif a.case == "legacy":
            case_legacy(c)
        elif a.case == "recheck":
            case_recheck(c, demo)
        elif a.case == "refusals":
            case_refusals(c, demo)
        elif a.case == "hostile":
            case_hostile(c, demo)
        else:
            print(f"unknown case {a.case}")
            return 2
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
