#!/usr/bin/env python3
"""torch_dist's two facts of a load's request, against megatron-core's own save and load.

    check_torch_dist_forms.py --cli CLI [--world 2|4]

megatron-core's sharded_state_dict names a decoder block's layers either stacked under one key
with a layer axis (a homogeneous block) or one key per layer (non_homogeneous_layers: moe_layer_freq
given as a list, hetereogenous_dist_checkpoint, …), and its routed experts stacked under
`mlp.experts.experts.linear_fcN.*` with an expert axis, or one key per expert when the checkpoint's
content metadata sets singleton_local_shards (which keys every layer apart too). The two are
separate: a per-layer request still stacks the experts.

Each case is a real megatron-core GPTModel (local spec, on the CPU over Gloo, in `--world`
processes at the case's TP and EP): dense, MoE with SequentialMLP experts, and MLA with MoE. It is
saved with its layers stacked and per layer, and loaded by megatron-core into a model of either
form; `shardscope-cli diff` with the layout exported from the loading model (tools/export_layout.py,
with the experts named as SequentialMLP and as TEGroupedMLP names them: the two share their sharded
keys) must say what megatron-core did: loads, or raises its own KeyError naming the same key. Where
it raises, `fix` writes OUT; megatron-core's load of OUT into the same model passes and gives every
rank every tensor the saving model held, bit for bit; `diff OUT` is clean and the source unchanged.
A checkpoint saved with singleton_local_shards (and that content metadata) loads N of N whatever
the layout says of the layers. The layout `shardscope-cli layout --from-config` writes from the
same Megatron arguments says the same form as the exported one.
Exit 0 when every check holds.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import traceback
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

# Megatron command lines as users pass them; `{freq}` picks the block's form: an int keeps it
# homogeneous (layers stacked), a list makes it per layer.
KINDS = {
    "dense": "--num-layers 2 --hidden-size 16 --num-attention-heads 4 --ffn-hidden-size 32 "
             "--swiglu --vocab-size 50 --max-position-embeddings 64 --transformer-impl local",
    "moe": "--num-layers 2 --hidden-size 16 --num-attention-heads 4 --ffn-hidden-size 32 "
           "--swiglu --num-experts 4 --moe-ffn-hidden-size 8 --moe-layer-freq {freq} "
           "--vocab-size 50 --max-position-embeddings 64 --transformer-impl local",
    "mla_moe": "--num-layers 2 --hidden-size 16 --num-attention-heads 4 --ffn-hidden-size 32 "
               "--swiglu --multi-latent-attention --q-lora-rank 8 --kv-lora-rank 8 "
               "--qk-head-dim 4 --qk-pos-emb-head-dim 4 --v-head-dim 4 --qk-layernorm "
               "--normalization RMSNorm --disable-bias-linear --position-embedding-type rope "
               "--num-experts 4 --moe-ffn-hidden-size 8 --moe-layer-freq {freq} "
               "--moe-shared-expert-intermediate-size 8 --vocab-size 50 "
               "--untie-embeddings-and-output-weights --transformer-impl local",
}
# (kind, tp, ep) per world size: TP 1 and 2, EP 1 and 2 (EP needs MoE; EP ranks come from DP).
PARALLEL = {2: [("dense", 1, 1), ("dense", 2, 1), ("moe", 1, 1), ("moe", 2, 1), ("moe", 1, 2),
                ("mla_moe", 1, 1), ("mla_moe", 2, 1), ("mla_moe", 1, 2)],
            4: [("moe", 2, 2), ("mla_moe", 2, 2)]}


def flags(kind: str, per_layer: bool) -> dict:
    from check_loaders import argparse_flags
    text = KINDS[kind].format(freq="[1]*2" if per_layer else "1")
    given = argparse_flags(text)
    if per_layer and kind == "dense":  # no experts: Megatron's other switch to per-layer keys
        given["hetereogenous_dist_checkpoint"] = True
    return given


def bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().contiguous().reshape(-1)
    return t.view(torch.uint8) if t.numel() else t


def tensors_of(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()
            if isinstance(v, torch.Tensor) and not k.endswith("_extra_state")}


def grouped(layout: dict) -> dict:
    """The same layout with the experts named as TEGroupedMLP names them (linear_fcN.weight<e>):
    megatron-core gives both forms the same sharded keys."""
    seq = re.compile(r"\.mlp\.experts\.local_experts\.(\d+)\.linear_fc([12])\.(weight|bias)")
    rename = lambda n: seq.sub(lambda m: f".mlp.experts.linear_fc{m[2]}.{m[3]}{m[1]}", n)  # noqa
    out = json.loads(json.dumps(layout))
    for p in out["params"]:
        p["name"] = rename(p["name"])
        for s in (p.get("fusion") or {}).get("sections", []):
            s["name"] = rename(s["name"])
    return out


def same_message(ours: str, real: str) -> bool:
    """The diff's words are megatron-core's, save that a list of stored keys past its first 20
    is cut to "… (N more)": the same up to the cut, and N the keys left out."""
    if ours == real:
        return True
    m = re.match(r"(?s)(.*), … \((\d+) more\)\](.*)$", ours)
    if not m or not real.startswith(m[1]) or not real.endswith("]" + m[3]):
        return False
    rest = real[len(m[1]):len(real) - len(m[3]) - 1]
    return rest.count("', '") + (1 if rest.startswith(", '") else 0) == int(m[2])


def megatron_error(exc: BaseException) -> str:
    """What megatron-core raised, as the diff spells it (CheckpointException wraps the planner's
    error: its last line)."""
    text = str(exc).strip().splitlines()[-1] if type(exc).__name__ == "CheckpointException" \
        else f"{type(exc).__name__}: {exc}"
    return text.replace("megatron.core.dist_checkpointing.core.", "")


class Rank:
    """One process of the job: megatron-core's parallel state at a case's TP and EP."""

    def __init__(self, rank: int, world: int, cli: str, tmp: Path):
        self.rank, self.world, self.cli, self.tmp = rank, world, cli, tmp
        self.failures: list[str] = []

    def fail(self, what: str) -> None:
        if self.rank == 0:
            self.failures.append(what)
            print("FAIL", what, flush=True)

    def parallel(self, tp: int, ep: int) -> None:
        from megatron.core import parallel_state as ps
        ps.destroy_model_parallel()
        ps.initialize_model_parallel(tp, 1, expert_model_parallel_size=ep)

    def build(self, kind: str, per_layer: bool, seed: int):
        from check_loaders import megatron_build
        build, _ = megatron_build(flags(kind, per_layer))
        torch.manual_seed(seed)
        return build()

    def cli_json(self, *args: str) -> tuple[int, dict, str]:
        p = subprocess.run([self.cli, *args], capture_output=True, text=True, timeout=600)
        try:
            return p.returncode, json.loads(p.stdout), p.stderr
        except json.JSONDecodeError:
            return p.returncode, {}, p.stderr + p.stdout[-400:]

    def barrier(self) -> None:
        torch.distributed.barrier()

    def layouts(self, kind: str, tp: int, ep: int) -> dict[bool, Path]:
        """The loading model's layout in each form, exported from the model itself (TP = EP = 1,
        full shapes, global expert names), for the case's parallel sizes; rank 0 writes them."""
        from export_layout import export_layout
        self.parallel(1, 1)
        out = {}
        for per_layer in (False, True):
            lay = export_layout(self.build(kind, per_layer, 0),
                                parallel={"tp": tp, "ep": ep, "etp": tp})
            want = "per_layer" if per_layer else "stacked"
            if lay.get("torch_dist", {}).get("layers") != want:
                self.fail(f"{kind}: export_layout says {lay.get('torch_dist')}, megatron-core "
                          f"builds {want}")
            out[per_layer] = self.tmp / f"{kind}-{want}-tp{tp}-ep{ep}.json"
            if self.rank == 0:
                out[per_layer].write_text(json.dumps(lay))
                (self.tmp / f"{kind}-{want}-tp{tp}-ep{ep}-grouped.json").write_text(
                    json.dumps(grouped(lay)))
                self.generated_form(kind, per_layer, tp, ep)
        self.barrier()
        return out

    def generated_form(self, kind: str, per_layer: bool, tp: int, ep: int) -> None:
        """`layout --from-config` on the same Megatron arguments names the same form."""
        args = self.tmp / f"{kind}-{per_layer}.args"
        text = KINDS[kind].format(freq="([1]*2)" if per_layer else "1")
        if per_layer and kind == "dense":
            text += " --hetereogenous-dist-checkpoint"
        args.write_text(text)
        out = self.tmp / f"{kind}-{per_layer}-generated.json"
        p = subprocess.run([self.cli, "layout", "--from-config", str(args), "-o", str(out)],
                           capture_output=True, text=True, timeout=120)
        got = json.loads(out.read_text()).get("torch_dist", {}).get("layers") \
            if p.returncode == 0 else p.stderr.strip()
        want = "per_layer" if per_layer else "stacked"
        if got != want:
            self.fail(f"{kind}: layout --from-config says {got!r}, megatron-core builds {want}")

    def load(self, kind: str, per_layer: bool, path: Path, metadata: dict | None = None):
        """megatron-core's load into a fresh model of that form (the checkpoint's content
        metadata passed to sharded_state_dict, as a resume does): (tensors, None) or
        (None, what it raised). Every rank raises alike (DCP gathers the planners' errors)."""
        from megatron.core import dist_checkpointing
        model = self.build(kind, per_layer, 1234)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                if metadata is None:
                    metadata = dist_checkpointing.load_content_metadata(str(path))
                sd = dist_checkpointing.load(model.sharded_state_dict(metadata=metadata),
                                             str(path))
            sd.pop("content_metadata", None)  # the common state's, not the model's
            model.load_state_dict(sd)
            return tensors_of(model), None
        except BaseException as exc:  # noqa: BLE001 (DCP's CheckpointException)
            return None, megatron_error(exc)

    def save(self, kind: str, per_layer: bool, path: Path, singleton: bool = False):
        from megatron.core import dist_checkpointing
        model = self.build(kind, per_layer, 7)
        meta = {"singleton_local_shards": singleton}
        if self.rank == 0:
            path.mkdir(parents=True, exist_ok=True)
        self.barrier()
        with contextlib.redirect_stdout(io.StringIO()):
            dist_checkpointing.save(model.sharded_state_dict(metadata=meta), str(path),
                                    content_metadata=meta)
        self.barrier()
        return tensors_of(model)

    def snapshot(self, root: Path) -> dict:
        return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(root.rglob("*")) if p.is_file()}

    def case(self, kind: str, tp: int, ep: int) -> None:
        lays = self.layouts(kind, tp, ep)
        self.parallel(tp, ep)
        for saved_per_layer in (False, True):
            src = self.tmp / f"{kind}-tp{tp}-ep{ep}-{'per_layer' if saved_per_layer else 'stacked'}"
            saved = self.save(kind, saved_per_layer, src)
            before = self.snapshot(src) if self.rank == 0 else None
            for load_per_layer in (False, True):
                tag = (f"{kind} tp{tp} ep{ep}: saved {'per layer' if saved_per_layer else 'stacked'}"
                       f", loaded {'per layer' if load_per_layer else 'stacked'}")
                loaded, raised = self.load(kind, load_per_layer, src)
                if raised is None and any(not torch.equal(bits(saved[k]), bits(loaded[k]))
                                          for k in saved):
                    self.fail(f"{tag}: megatron-core's own load differs from the save")
                lay = lays[load_per_layer]
                layouts = [lay] + ([lay.with_name(lay.stem + "-grouped.json")]
                                   if kind != "dense" else [])
                out = src.with_name(src.name + f"-fixed-{int(load_per_layer)}")
                fixed = False
                # README's own way to ask for a per-layer load: the rule off over a layout that
                # does not say (the experts stay stacked, as megatron-core keeps them).
                silent = self.tmp / f"{kind}-silent.json"
                rule = ["--disable-rule", "torch_dist_stacked"] if load_per_layer else []
                if self.rank == 0:
                    for layout in layouts:
                        self.judge(tag + f" ({layout.stem})", src, layout, raised)
                    lay_silent = json.loads(lays[False].read_text())
                    lay_silent.pop("torch_dist", None)
                    silent.write_text(json.dumps(lay_silent))
                    if rule:
                        self.judge(tag + " (a layout that does not say, --disable-rule "
                                   "torch_dist_stacked)", src, silent, raised, *rule)
                    else:  # cannot tell: takes the checkpoint's form, and says so
                        rc, d, err = self.cli_json("diff", str(src), "--layout", str(silent),
                                                   "--no-optimizer", "--json")
                        o = d.get("outcome", {})
                        if o.get("action") != "loads" or not any(
                                "torch_dist.layers" in w for w in o.get("warnings", [])):
                            self.fail(f"{tag}: a layout that does not say: {o.get('action')}, "
                                      f"warnings {o.get('warnings')}")
                    if raised is not None:
                        rc, result, err = self.cli_json("fix", str(src), "--layout", str(lay),
                                                        "--no-optimizer", "-o", str(out), "--json")
                        fixed = rc == 0 and result.get("written")
                        if not fixed:
                            self.fail(f"{tag}: fix exit {rc}: {err.strip()[:300]}")
                    else:
                        rc, result, err = self.cli_json("fix", str(src), "--layout", str(lay),
                                                        "--no-optimizer", "-o", str(out), "--json")
                        if rc != 0 or result.get("written"):
                            self.fail(f"{tag}: megatron-core loads it, yet fix exit {rc} "
                                      f"wrote {result.get('written')}: {err.strip()[:200]}")
                flag = torch.tensor([int(fixed)])
                torch.distributed.broadcast(flag, 0)
                if flag.item():
                    got, again = self.load(kind, load_per_layer, out)
                    if again is not None:
                        self.fail(f"{tag}: megatron-core's load of fix's OUT raises {again}")
                    else:
                        bad = [k for k in saved if not torch.equal(bits(saved[k]), bits(got[k]))]
                        if bad:
                            print(f"FAIL {tag}: rank {self.rank}: OUT loads other values for "
                                  f"{bad[:3]}", flush=True)
                            self.failures.append("values")
                    if self.rank == 0:
                        rc, d, err = self.cli_json("diff", str(out), "--layout", str(lay),
                                                   "--no-optimizer", "--json")
                        if rc != 0 or not d.get("passes"):
                            self.fail(f"{tag}: diff OUT exit {rc}, outcome {d.get('outcome')}")
                self.barrier()
            if self.rank == 0 and self.snapshot(src) != before:
                self.fail(f"{kind} tp{tp} ep{ep}: the source checkpoint changed")
        if kind != "dense":
            self.singleton(kind, tp, ep, lays)

    def judge(self, tag: str, src: Path, layout: Path, raised: str | None, *extra: str) -> None:
        rc, d, err = self.cli_json("diff", str(src), "--layout", str(layout), "--no-optimizer",
                                   "--json", *extra)
        o = d.get("outcome", {})
        if raised is None:
            if o.get("action") != "loads" or not d.get("passes") or rc != 0:
                bad = [(x["name"], x["status"]) for x in d.get("entries", [])
                       if not x["real_load_fills"]][:3]
                self.fail(f"{tag}: megatron-core loads; diff exit {rc} {o.get('action')}: "
                          f"{o.get('message', err)[:200]} {bad}")
            return
        if o.get("action") != "raises" or not same_message(o.get("message", ""), raised) or rc != 1:
            m = o.get("message", err)
            at = next((i for i, (x, y) in enumerate(zip(m, raised)) if x != y), min(len(m), len(raised)))
            self.fail(f"{tag}: megatron-core raises {raised[:120]!r}; diff exit {rc} "
                      f"{o.get('action')}: {m[:120]!r}; they part at {at}: "
                      f"{raised[max(0, at - 60):at + 80]!r} vs {m[max(0, at - 60):at + 80]!r}")

    def singleton(self, kind: str, tp: int, ep: int, lays: dict[bool, Path]) -> None:
        src = self.tmp / f"{kind}-tp{tp}-ep{ep}-singleton"
        saved = self.save(kind, False, src, singleton=True)
        loaded, raised = self.load(kind, False, src)
        if raised is not None or any(not torch.equal(bits(saved[k]), bits(loaded[k]))
                                     for k in saved):
            self.fail(f"{kind} tp{tp} ep{ep} singleton: megatron-core's own load: {raised}")
        if self.rank == 0:
            for per_layer, lay in lays.items():
                self.judge(f"{kind} tp{tp} ep{ep} singleton_local_shards ({lay.stem})", src, lay,
                           None)
        self.barrier()


def worker(rank: int, world: int, port: int, cli: str, tmp: str) -> None:
    import torch.distributed as dist
    warnings.simplefilter("ignore")
    logging.getLogger("megatron").setLevel(logging.ERROR)
    torch.cuda.synchronize = lambda *a, **k: None  # megatron-core's writer on a CPU machine
    torch.cuda.current_device = lambda: "cpu"
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    r = Rank(rank, world, cli, Path(tmp))
    try:
        for kind, tp, ep in PARALLEL[world]:
            r.case(kind, tp, ep)
            if rank == 0:
                print(f"{kind} tp{tp} ep{ep}: done ({len(r.failures)} failures so far)", flush=True)
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        r.failures.append("exception")
    finally:
        from megatron.core import parallel_state as ps
        ps.destroy_model_parallel()
        dist.destroy_process_group()
    if r.failures:
        sys.exit(1)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--world", type=int, choices=sorted(PARALLEL), default=2)
    a = ap.parse_args()
    from check_loaders import free_port
    import torch.multiprocessing as mp
    tmp = tempfile.mkdtemp(prefix="ss-torch-dist-forms-")
    try:
        mp.spawn(worker, args=(a.world, free_port(), os.path.abspath(a.cli), tmp),
                 nprocs=a.world, join=True)
    except mp.ProcessRaisedException as exc:
        print("FAIL", str(exc).strip().splitlines()[-1])
        return 1
    except mp.ProcessExitedException as exc:
        print("FAIL", exc)
        return 1
    print(f"torch_dist forms, {a.world} processes: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
