#!/usr/bin/env python3
"""Export a ``shardscope.layout/1`` JSON (docs/layout-format.md) from a live PyTorch model, for
``shardscope-cli diff --layout``.

    python tools/export_layout.py MODULE:FACTORY [--arg k=v ...] [--meta] [--tp N --ep N ...] -o layout.json
    python tools/export_layout.py --state-dict FILE.pt [--key model] [--tp N ...] -o layout.json

``MODULE:FACTORY`` names an importable callable (the current directory is on ``sys.path``) that
returns an ``nn.Module``; ``--arg k=v`` become keyword arguments (values parsed as JSON or Python
literals, else kept as strings). ``--meta`` builds the model on the meta device (no memory, no
init cost). Build the model unsharded (TP = EP = 1): shapes are taken as full shapes and expert
indices as global; ``--tp/--pp/--ep/--etp/--dp-shard`` only describe the parallel configuration
the layout is for.

Every parameter and persistent buffer of ``state_dict()`` becomes a param entry, named with the
leading ``module.`` wrappers stripped, with torch's shape and dtype (``--dtype`` overrides the
dtype of floating tensors, e.g. ``float32`` for fsdp_dtensor's fp32 main params). Buffers and
frozen parameters get ``optimizer_state: false``; TE ``_extra_state`` entries are not params (Megatron
deletes them for fsdp_dtensor, docs/formats.md §6.9): their presence sets ``transformer_engine``.

Megatron facts are read by duck typing, so no Megatron import is needed (docs/formats.md §6):

* a module with ``linear_qkv_down_proj`` and a ``config`` with ``q_lora_rank``, ``kv_lora_rank``,
  ``qk_pos_emb_head_dim`` (FusedMLASelfAttention): the fused linear's ``weight`` (and any other
  non-norm leaf) gets an ``mla_down_proj`` fusion ``[q_lora; kv_lora + rope]``; its
  ``layer_norm_weight`` / ``layer_norm_bias`` ``absorbs`` ``<layer>.input_layernorm.weight|bias``;
* ``linear_fc1.weight|bias`` (dense, TE grouped ``weight<e>``, sequential ``local_experts.<e>``,
  ``shared_experts``) inside a TransformerLayer-like module (``self_attention`` + ``mlp``) whose
  ``config.gated_linear_unit`` is true gets a ``swiglu`` fusion ``[<name>_w; <name>_v]``; GELU
  layers stay unfused. Outside any such layer, the nearest ancestor with ``config.gated_linear_unit``
  decides; with none, fc1 stays unfused and a warning is printed (never guessed from names);
* GDN modules (``qk_dim``, ``v_dim``, ``num_value_heads``): ``in_proj.weight`` -> ``.query .key
  .value .z .beta .alpha`` ``[qk, qk, v, v, nvh, nvh]``, ``conv1d.weight|bias`` -> ``.query .key
  .value`` ``[qk, qk, v]``;
* ``tp_dim`` = the parameter's ``partition_dim`` when ``tensor_model_parallel`` is true, else -1;
* ``mtp_inner`` = ``mtp_model_layer`` when a module has that attribute (``transformer_layer`` for
  an MTP layer that has ``transformer_layer`` + ``eh_proj`` instead);
* ``expert`` from ``experts.linear_fc<1|2>.weight<e>`` / ``local_experts.<e>.``; ``num_experts``
  from ``config.num_moe_experts`` (else the highest index + 1);
* ``ties``: the state dict's names that are one tensor (tied weights, by identity), in its order;
  a Megatron model built with ``share_embeddings_and_output_weights`` ties
  ``output_layer.weight`` (which has no weight of its own) to ``embedding.word_embeddings.weight``;
  from ``--state-dict``, tensors that view one storage at the same place;
* ``torch_dist.layers``: ``per_layer`` when the decoder block's config makes megatron-core's
  ``sharded_state_dict`` key each layer apart (``moe_layer_freq`` a list or > 1,
  ``linear_attention_freq``, heterogeneous block specs, ``hetereogenous_dist_checkpoint``),
  else ``stacked``.

From ``--state-dict`` there are no modules: names, shapes, dtypes and expert indices only, no
fusions (use ``--no-optimizer-state REGEX`` to mark buffers).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import os
import re
import sys
from typing import Any

SCHEMA = "shardscope.layout/1"

_EXPERT = re.compile(r"(?:^|\.)experts\.linear_fc[12]\.(?:weight|bias)(\d+)$|"
                     r"(?:^|\.)local_experts\.(\d+)\.")
# handle_swiglu_in_state_dict's patterns, relative to the key's end (§6.4).
_SWIGLU = re.compile(r"(?:^|\.)mlp\.(?:linear_fc1\.(?:weight|bias)|"
                     r"experts\.linear_fc1\.(?:weight|bias)\d+|"
                     r"experts\.local_experts\.\d+\.linear_fc1\.(?:weight|bias)|"
                     r"shared_experts\.linear_fc1\.(?:weight|bias))$")


class LayoutError(Exception):
    pass


def strip_wrappers(name: str) -> str:
    """``module.module.decoder…`` -> ``decoder…`` (FSDP/DDP/Float16Module wrapper levels)."""
    while name.startswith("module."):
        name = name[len("module."):]
    return name


def dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _join(path: str, leaf: str) -> str:
    return f"{path}.{leaf}" if path else leaf


def _parent(path: str) -> str:
    return path.rpartition(".")[0]


def _ancestors(key: str):
    """Module paths containing `key`, longest first ('' = the root)."""
    path = key
    while path:
        path = _parent(path)
        yield path


def _fusion(rule: str, sections: list[tuple[str, int]]) -> dict:
    return {"rule": rule, "dim": 0, "tp_interleaved": True, "tp_local": False,
            "sections": [{"name": n, "size": int(s)} for n, s in sections]}


def _expert_index(name: str) -> int | None:
    m = _EXPERT.search(name)
    if not m:
        return None
    return int(m[1] if m[1] is not None else m[2])


def _layout(params: list[dict], parallel: dict, family: str, source: str, num_experts: int | None,
            mtp_inner: str, keys=()) -> dict:
    # TEDotProductAttention's extra state marks a Transformer Engine model; Megatron's own
    # linears keep one too ("for compatibility with TE state dict").
    transformer_engine = any(k.endswith("core_attention._extra_state") for k in keys)
    linear_extra_state = any(k.endswith("._extra_state") for k in keys)
    if num_experts is None:
        idx = [p["expert"] for p in params if "expert" in p]
        num_experts = max(idx) + 1 if idx else 0
    return {
        "schema": SCHEMA,
        "family": family,
        "source": source,
        "parallel": {k: int(parallel.get(k, 1)) for k in ("tp", "pp", "ep", "etp", "dp_shard")},
        "num_experts": int(num_experts),
        "experts_global": True,
        "transformer_engine": transformer_engine,
        "linear_extra_state": linear_extra_state,
        "mtp_inner": mtp_inner,
        "optimizer": {"states": ["exp_avg", "exp_avg_sq"], "step": True},
        "params": params,
    }


def _entry(name: str, t, tp_dim: int, dtype: str | None, optimizer_state: bool) -> dict:
    e: dict[str, Any] = {"name": name, "shape": [int(d) for d in t.shape],
                         "dtype": dtype if dtype and t.is_floating_point() else dtype_name(t.dtype),
                         "tp_dim": tp_dim}
    ex = _expert_index(name)
    if ex is not None:
        e["expert"] = ex
    if not optimizer_state:
        e["optimizer_state"] = False
    return e


def _check(params: list[dict]) -> None:
    for p in params:
        f = p.get("fusion")
        if not f:
            continue
        total = sum(s["size"] for s in f["sections"])
        if len(f["sections"]) < 2 or total != p["shape"][f["dim"]]:
            raise LayoutError(f"{p['name']}: {f['rule']} sections {[s['size'] for s in f['sections']]}"
                              f" do not add up to dim {f['dim']} of shape {p['shape']} (was the "
                              f"model built TP-sharded? build it with TP = 1)")


def export_layout(model, parallel: dict | None = None, family: str | None = None,
                  source: str = "", dtype: str | None = None,
                  no_optimizer_state: list[str] = ()) -> dict:
    """The layout dict of a live ``nn.Module`` (see the module docstring)."""
    modules = dict(model.named_modules(remove_duplicate=False))
    param_objs = dict(model.named_parameters(remove_duplicate=False))
    sd = model.state_dict(keep_vars=True)
    warn = lambda msg: print(f"export_layout: warning: {msg}", file=sys.stderr)  # noqa: E731

    # Megatron facts, keyed by the (unstripped) state-dict key they apply to.
    fusions: dict[str, dict] = {}
    absorbs: dict[str, str] = {}

    for path, mod in modules.items():
        cfg = getattr(mod, "config", None)
        if hasattr(mod, "linear_qkv_down_proj") and all(
                hasattr(cfg, a) for a in ("q_lora_rank", "kv_lora_rank", "qk_pos_emb_head_dim")):
            sizes = [cfg.q_lora_rank, cfg.kv_lora_rank + cfg.qk_pos_emb_head_dim]
            att = strip_wrappers(path)
            prefix = _join(path, "linear_qkv_down_proj.")
            for key in sd:
                if not key.startswith(prefix) or key.endswith("_extra_state"):
                    continue
                leaf = key[len(prefix):]
                if leaf.startswith("layer_norm_"):  # moved, not split (§6.5)
                    absorbs[key] = _join(_parent(att), "input_layernorm." + leaf[len("layer_norm_"):])
                else:
                    fusions[key] = _fusion("mla_down_proj", [
                        (_join(att, "linear_q_down_proj." + leaf), sizes[0]),
                        (_join(att, "linear_kv_down_proj." + leaf), sizes[1])])
        if all(hasattr(mod, a) for a in ("qk_dim", "v_dim", "num_value_heads")):
            qk, v, nvh = int(mod.qk_dim), int(mod.v_dim), int(mod.num_value_heads)
            for leaf, names, sizes in (
                    ("in_proj.weight", ("query", "key", "value", "z", "beta", "alpha"),
                     (qk, qk, v, v, nvh, nvh)),
                    ("conv1d.weight", ("query", "key", "value"), (qk, qk, v)),
                    ("conv1d.bias", ("query", "key", "value"), (qk, qk, v))):
                key = _join(path, leaf)
                if key in sd:
                    name = strip_wrappers(key)
                    fusions[key] = _fusion("gdn", [(f"{name}.{n}", s) for n, s in zip(names, sizes)])

    def is_layer(m) -> bool:
        return hasattr(m, "self_attention") and hasattr(m, "mlp")

    for key, t in sd.items():
        if not _SWIGLU.search(key) or key in fusions:
            continue
        glu = None
        for anc in _ancestors(key):  # longest TransformerLayer-like path first
            if anc in modules and is_layer(modules[anc]):
                glu = getattr(getattr(modules[anc], "config", None), "gated_linear_unit", None)
                break
        if glu is None:
            for anc in _ancestors(key):
                cfg = getattr(modules.get(anc), "config", None)
                if hasattr(cfg, "gated_linear_unit"):
                    glu = cfg.gated_linear_unit
                    break
        if glu is None:
            warn(f"{key}: no TransformerLayer or config.gated_linear_unit above it; left unfused")
            continue
        if glu:
            rows = t.shape[0]
            if rows % 2:
                raise LayoutError(f"{key}: SwiGLU fc1 with an odd number of rows ({rows})")
            name = strip_wrappers(key)
            fusions[key] = _fusion("swiglu", [(name + "_w", rows // 2), (name + "_v", rows // 2)])

    mtp_inner = "mtp_model_layer"
    if not any(hasattr(m, "mtp_model_layer") for m in modules.values()) and any(
            hasattr(m, "transformer_layer") and hasattr(m, "eh_proj") for m in modules.values()):
        mtp_inner = "transformer_layer"

    num_experts = None
    for m in modules.values():
        n = getattr(getattr(m, "config", None), "num_moe_experts", None)
        if isinstance(n, int) and n > 0:
            num_experts = n
            break

    torch_dist = _torch_dist_layers(modules)

    frozen = [re.compile(r) for r in no_optimizer_state]
    params = []
    for key, t in sd.items():
        if key.endswith("_extra_state") or not hasattr(t, "shape"):
            continue
        name = strip_wrappers(key)
        p = param_objs.get(key)
        tp_dim = -1
        if p is not None and getattr(p, "tensor_model_parallel", False):
            tp_dim = int(getattr(p, "partition_dim", -1))
        has_state = p is not None and p.requires_grad and not any(r.search(name) for r in frozen)
        e = _entry(name, t, tp_dim, dtype, has_state)
        if key in fusions:
            e["fusion"] = fusions[key]
        if key in absorbs:
            e["absorbs"] = absorbs[key]
        params.append(e)
    _check(params)
    layout = _layout(params, parallel or {}, family if family is not None else type(model).__name__,
                     source, num_experts, mtp_inner, list(sd))
    if torch_dist:
        layout["torch_dist"] = torch_dist
    ties = _ties(sd, lambda t: id(t))
    # Megatron's tied output layer has no weight of its own: the embedding's is used.
    for m in modules.values():
        if getattr(m, "share_embeddings_and_output_weights", False) and \
                getattr(getattr(m, "output_layer", None), "weight", None) is None and \
                getattr(m, "pre_process", True) and hasattr(m, "embedding"):
            ties.append(["embedding.word_embeddings.weight", "output_layer.weight"])
            break
    if ties:
        layout["ties"] = ties
    return layout


def _ties(sd: dict, same) -> list[list[str]]:
    """Groups of state-dict names that are one tensor (tied weights), in the state dict's order:
    the order load_state_dict fills them in, the last stored one deciding the values."""
    groups: dict = {}
    for key, t in sd.items():
        if key.endswith("_extra_state") or not hasattr(t, "shape"):
            continue
        groups.setdefault(same(t), []).append(strip_wrappers(key))
    return [names for names in groups.values() if len(names) > 1]


def _torch_dist_layers(modules: dict) -> dict | None:
    """How megatron-core's torch_dist load asks for the decoder's layers: what
    TransformerBlock.sharded_state_dict decides from its config (non_homogeneous_layers), read
    from the first module with a ``layers`` list and a ``config`` that has ``moe_layer_freq``;
    None for a model without one (not a Megatron model)."""
    for m in modules.values():
        cfg = getattr(m, "config", None)
        if not hasattr(m, "layers") or not hasattr(cfg, "moe_layer_freq"):
            continue
        why = None
        if getattr(cfg, "hetereogenous_dist_checkpoint", False):
            why = "hetereogenous_dist_checkpoint"
        for field in ("moe_layer_freq", "linear_attention_freq"):
            v = getattr(cfg, field, None)
            if isinstance(v, list):
                why = why or f"{field} is a list"
            elif isinstance(v, int) and not isinstance(v, bool) and v > 1:
                why = why or f"{field} > 1"
        if getattr(cfg, "heterogeneous_block_specs", False):
            why = why or "heterogeneous block specs"
        return {"layers": "per_layer", "why": why} if why else \
            {"layers": "stacked", "why": "a homogeneous block"}
    return None


def layout_from_state_dict(sd: dict, parallel: dict | None = None, family: str = "",
                           source: str = "", dtype: str | None = None,
                           no_optimizer_state: list[str] = ()) -> dict:
    """Names, shapes, dtypes (and expert indices) of a plain state dict; no module facts."""
    frozen = [re.compile(r) for r in no_optimizer_state]
    flat: dict = {}

    def walk(d, prefix):
        for k, v in d.items():
            if isinstance(v, dict):
                walk(v, f"{prefix}{k}.")
            else:
                flat[f"{prefix}{k}"] = v

    walk(sd, "")
    params = []
    for key, t in flat.items():
        if key.endswith("_extra_state") or not hasattr(t, "shape") or not hasattr(t, "dtype"):
            continue
        name = strip_wrappers(key)
        params.append(_entry(name, t, -1, dtype, not any(r.search(name) for r in frozen)))
    names = [p["name"] for p in params]
    mtp_inner = "mtp_model_layer"
    if not any(".mtp_model_layer." in n for n in names) and any(
            n.startswith("mtp.") and ".transformer_layer." in n for n in names):
        mtp_inner = "transformer_layer"
    layout = _layout(params, parallel or {}, family, source, None, mtp_inner, list(flat))
    # torch.save keeps tied tensors as views of one storage.
    ties = _ties(flat, lambda t: (t.untyped_storage().data_ptr(), t.storage_offset(),
                                  tuple(t.shape), tuple(t.stride()), t.dtype)
                 if hasattr(t, "untyped_storage") and t.numel() else id(t))
    if ties:
        layout["ties"] = ties
    return layout


def parse_value(text: str):
    for parse in (json.loads, ast.literal_eval):
        try:
            return parse(text)
        except (ValueError, SyntaxError):
            pass
    return text


def build_model(spec: str, kwargs: dict, meta: bool):
    import torch

    mod_name, sep, attr = spec.partition(":")
    if not sep or not mod_name or not attr:
        raise LayoutError(f"expected MODULE:FACTORY, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj = importlib.import_module(mod_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise LayoutError(f"cannot load {spec}: {e}") from e
    if meta:
        with torch.device("meta"):
            model = obj(**kwargs)
    else:
        model = obj(**kwargs)
    if not isinstance(model, torch.nn.Module):
        raise LayoutError(f"{spec} returned {type(model).__name__}, not an nn.Module")
    return model


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("factory", nargs="?", help="MODULE:FACTORY returning an nn.Module")
    ap.add_argument("--state-dict", metavar="FILE", help="a torch.save'd state dict instead")
    ap.add_argument("--key", help="with --state-dict: the entry holding the model (e.g. model)")
    ap.add_argument("--arg", action="append", default=[], metavar="K=V",
                    help="keyword argument for the factory (repeatable)")
    ap.add_argument("--meta", action="store_true", help="build the model on the meta device")
    for k in ("tp", "pp", "ep", "etp", "dp-shard"):
        ap.add_argument(f"--{k}", type=int, default=1, metavar="N")
    ap.add_argument("--family", help="informational family name (default: the model's class)")
    ap.add_argument("--dtype", help="dtype name for floating tensors (default: torch's)")
    ap.add_argument("--no-optimizer-state", action="append", default=[], metavar="REGEX",
                    help="names without optimizer state (buffers in a state dict)")
    ap.add_argument("-o", "--output", required=True, help="layout JSON to write ('-': stdout)")
    ns = ap.parse_args(argv)
    if bool(ns.factory) == bool(ns.state_dict):
        ap.error("give exactly one of MODULE:FACTORY and --state-dict")
    parallel = {"tp": ns.tp, "pp": ns.pp, "ep": ns.ep, "etp": ns.etp, "dp_shard": ns.dp_shard}
    if any(v < 1 for v in parallel.values()):
        ap.error("parallel sizes must be at least 1")
    if ns.dtype:
        import torch

        if not isinstance(getattr(torch, ns.dtype, None), torch.dtype):
            ap.error(f"unknown dtype {ns.dtype!r}")
    try:
        if ns.state_dict:
            import torch

            sd = torch.load(ns.state_dict, map_location="meta", weights_only=True)
            if ns.key:
                sd = sd[ns.key]
            if not isinstance(sd, dict):
                raise LayoutError(f"{ns.state_dict}: not a state dict ({type(sd).__name__})")
            layout = layout_from_state_dict(sd, parallel, ns.family or "", ns.state_dict,
                                            ns.dtype, ns.no_optimizer_state)
        else:
            kwargs = {}
            for a in ns.arg:
                k, sep, v = a.partition("=")
                if not sep or not k:
                    ap.error(f"--arg expects K=V, got {a!r}")
                kwargs[k] = parse_value(v)
            model = build_model(ns.factory, kwargs, ns.meta)
            layout = export_layout(model, parallel, ns.family, ns.factory, ns.dtype,
                                   ns.no_optimizer_state)
    except LayoutError as e:
        print(f"export_layout: {e}", file=sys.stderr)
        return 1
    text = json.dumps(layout, indent=1) + "\n"
    if ns.output == "-":
        sys.stdout.write(text)
    else:
        with open(ns.output, "w") as f:
            f.write(text)
        n_f = sum("fusion" in p for p in layout["params"])
        print(f"wrote {ns.output}: {len(layout['params'])} params, {n_f} fused, "
              f"{sum('absorbs' in p for p in layout['params'])} absorbed norms, "
              f"{layout['num_experts']} experts", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
