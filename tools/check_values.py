#!/usr/bin/env python3
"""`diff A --against B --values` against torch's own figures.

    check_values.py --cli CLI CASE [--fixtures DIR]

Each case writes checkpoint pairs with real torch (or the safetensors package) that differ in
known places, runs the value comparison, and checks every figure it prints against what torch
computes from the tensors it loads itself: identity (bit for bit, torch.equal on the bits),
the differing count and first differing index, max abs and max rel difference, mean abs, RMS,
relative L2, cosine, ULPs of bfloat16. Nothing expected is typed in.

Cases: element (one element changed, several dtypes), rows_permuted (SwiGLU halves stored in the
wrong order: Megatron-LM#2769; the structural diff sees nothing), bf16_roundtrip (a float32
tensor against its bfloat16 copy, and a float64 copy: a dtype change of the same values),
ranks (the same tensors written by 1, 2 and 4 DCP ranks, chunked differently), hf_llama (a
Hugging Face Llama against the Megatron checkpoint the test converts from it with
Megatron-Bridge's published mapping, then with one query group swapped; its sharded set too),
mla_split (MLA's fused down projection and absorbed norm against the handler's parts), formats
(one real megatron-core model in torch_dist, legacy at EP 1 and 2, torch.save, safetensors),
layout_fixtures (make_layout_fixtures.py's fused against unfused families), splits (the same
results whatever the threads, memory budget and processes), report (the value section of each
report format), unreadable (a data file cut short), rule_off (the bundled demo against a copy
torch changed inside MLA's fused down projection, with Megatron's MLA handler switched off, then
every other rule off in turn: keys stored under the same name are compared whatever the rules),
not_compared (tensors that truly cannot be compared: counted, listed first, exit 1 unless
--allow-not-compared).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import torch

FAILURES: list[str] = []


def check(cond: bool, what: str) -> None:
    if not cond:
        FAILURES.append(what)


def close(x, y, rel: float = 1e-9) -> bool:
    if x is None or y is None:
        return x is y
    if math.isinf(y):
        return x is None or math.isinf(x)
    return abs(x - y) <= rel * max(1.0, abs(y)) or abs(x - y) <= 1e-300


class Env:
    def __init__(self, cli: str, fixtures: str | None, layout_fixtures: str | None = None,
                 demo: str | None = None):
        self.cli = cli
        self.fixtures = Path(fixtures) if fixtures else None
        self.layout_fixtures = Path(layout_fixtures) if layout_fixtures else None
        self.demo = Path(demo) if demo else Path(__file__).resolve().parent.parent / "resources" / "demo" / "dsv3-mini"
        self.tmp = Path(tempfile.mkdtemp(prefix="ss-values-"))

    def values(self, a: Path, b: Path, *extra: str, launch: int = 0) -> tuple[int, dict, str]:
        cmd = [self.cli, "diff", str(a), "--against", str(b), "--values", "--json", *extra]
        if launch:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--no-python", "--standalone",
                   "--nproc-per-node", str(launch)] + cmd + ["--backend", "gloo"]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        try:
            d = json.loads(p.stdout) if p.stdout.strip() else {}
        except json.JSONDecodeError:
            d = {}
        return p.returncode, d, p.stderr


    def text(self, a: Path, b: Path, *extra: str) -> tuple[int, str]:
        p = subprocess.run([self.cli, "diff", str(a), "--against", str(b), "--values", *extra],
                           capture_output=True, text=True, timeout=600)
        return p.returncode, p.stdout


def sections(text: str) -> list[str]:
    """The verdict sections of diff --values' text, in the order it prints them."""
    return [line.split(" (")[0] for line in text.splitlines()
            if line and line[0].isupper() and line.split(" (")[0] in
            ("NOT COMPARED", "DIFFERENT", "WITHIN TOLERANCE", "IDENTICAL")]


def save_dcp(state: dict, path: Path) -> Path:
    import torch.distributed.checkpoint as dcp
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, checkpoint_id=str(path))
    return path


def load_dcp(path: Path) -> dict:
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    out = path.parent / (path.name + ".pt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp_to_torch_save(str(path), str(out))
    return torch.load(out, weights_only=False)


def flat(sd: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in sd.items():
        if isinstance(v, dict):
            out.update(flat(v, prefix + k + "."))
        elif isinstance(v, torch.Tensor):
            out[prefix + k] = v
    return out


def bits(t: torch.Tensor) -> torch.Tensor:
    t = torch.view_as_real(t) if t.is_complex() else t
    if t.dtype == torch.bool:
        return t.to(torch.uint8)
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return t.contiguous().view(ints[t.element_size()])


def torch_figures(a: torch.Tensor, b: torch.Tensor) -> dict:
    """What the comparison must say, from torch's own arithmetic (float64)."""
    same = bits(a) == bits(b) if a.dtype == b.dtype else None
    a64 = (torch.view_as_real(a) if a.is_complex() else a).to(torch.float64).flatten()
    b64 = (torch.view_as_real(b) if b.is_complex() else b).to(torch.float64).flatten()
    if same is None:
        same = (a64 == b64) | (a64.isnan() & b64.isnan())
    same = same.flatten()
    finite = a64.isfinite() & b64.isfinite()
    d = (a64 - b64).abs()[finite]
    bf = b64[finite].abs()
    nz = bf != 0
    diff_at = (~same).nonzero()
    shape = list(a.shape) + ([2] if a.is_complex() else [])
    first = [int(i) for i in torch.unravel_index(diff_at[0, 0], shape)] if len(diff_at) else None
    if first is not None and a.is_complex():
        first = first[:-1]
    af, bfv = a64[finite], b64[finite]
    na, nb = af.norm().item(), bfv.norm().item()
    return {
        "count": a64.numel(), "differing": int((~same).sum()),
        "first_diff": first, "max_abs": d.max().item() if len(d) else 0.0,
        "max_rel": (d[nz] / bf[nz]).max().item() if nz.any() else 0.0,
        "mean_abs": d.mean().item() if len(d) else 0.0,
        "rms": math.sqrt((d * d).mean().item()) if len(d) else 0.0,
        "rel_l2": (d.norm().item() / nb) if nb > 0 else (0.0 if d.norm().item() == 0 else math.inf),
        "cosine": (af @ bfv).item() / (na * nb) if na > 0 and nb > 0 else 1.0,
    }


def check_figures(tag: str, got: dict, a: torch.Tensor, b: torch.Tensor) -> None:
    want = torch_figures(a, b)
    verdict = "identical" if want["differing"] == 0 else None
    if verdict:
        check(got.get("verdict") == "identical", f"{tag}: torch says identical, got {got.get('verdict')}")
        return
    check(got.get("verdict") in ("different", "within_tolerance"), f"{tag}: verdict {got.get('verdict')}")
    for k in ("count", "differing", "first_diff"):
        check(got.get(k) == want[k], f"{tag}: {k} {got.get(k)}, torch {want[k]}")
    for k in ("max_abs", "max_rel", "mean_abs", "rms", "rel_l2", "cosine"):
        check(close(got.get(k), want[k]), f"{tag}: {k} {got.get(k)}, torch {want[k]}")


def by_name(d: dict) -> dict:
    return {t["name"]: t for t in d.get("tensors", [])}


def case_element(env: Env) -> None:
    g = torch.Generator().manual_seed(1)
    a = {"w32": torch.randn(64, 48, generator=g), "wbf": torch.randn(32, 16, generator=g).bfloat16(),
         "w16": torch.randn(40, generator=g).half(), "ids": torch.arange(10),
         "same": torch.randn(8, 8, generator=g)}
    b = {k: v.clone() for k, v in a.items()}
    b["w32"][5, 7] += 0.25
    b["wbf"][3, 2] = -b["wbf"][3, 2]
    b["w16"][39] = b["w16"][39] * 2
    b["ids"][4] = 99
    pa, pb = save_dcp(a, env.tmp / "element-a"), save_dcp(b, env.tmp / "element-b")
    rc, d, err = env.values(pa, pb)
    t = by_name(d)
    check(rc == 1, f"element: exit {rc} ({err.strip()})")
    for k in a:
        check(k in t, f"element: {k} not reported")
        if k in t:
            check_figures(f"element/{k}", t[k], a[k], b[k])
    # The same pair within a tolerance that covers the change: exit 0.
    rc, d, _ = env.values(pa, pb, "--atol", "100")
    check(rc == 0 and all(x["verdict"] in ("identical", "within_tolerance") for x in d["tensors"]),
          f"element: --atol 100 exit {rc}")


def case_rows_permuted(env: Env) -> None:
    """Megatron-LM#2769: SwiGLU's halves stored in the wrong order. The first checkpoint keeps
    linear_fc1 fused [W; V]; the second stores it split (weight_w / weight_v) as Megatron-FSDP
    does, once right and once with the halves swapped."""
    g = torch.Generator().manual_seed(2)
    f, h = 24, 16
    fused = torch.randn(2 * f, h, generator=g)
    norm = torch.randn(h, generator=g)
    a = {"decoder.layers.0.mlp.linear_fc1.weight": fused,
         "decoder.layers.0.mlp.linear_fc1.layer_norm_weight": norm}

    def split(w: torch.Tensor, v: torch.Tensor) -> dict:
        return {"model": {"module.decoder.layers.0.mlp.linear_fc1.weight_w": w.clone(),
                          "module.decoder.layers.0.mlp.linear_fc1.weight_v": v.clone(),
                          "module.decoder.layers.0.mlp.linear_fc1.layer_norm_weight": norm.clone()}}
    pa = save_dcp(a, env.tmp / "rows-a")
    good = save_dcp(split(fused[:f], fused[f:]), env.tmp / "rows-good")
    bad = save_dcp(split(fused[f:], fused[:f]), env.tmp / "rows-swapped")
    rc, d, err = env.values(pa, good)
    t = by_name(d)
    name = "decoder.layers.0.mlp.linear_fc1.weight"
    check(rc == 0 and t.get(name, {}).get("verdict") == "identical" and
          len(t[name].get("keys_b", [])) == 2,
          f"rows: fused against its halves: exit {rc}, {t.get(name)} {err.strip()}")
    rc, d, _ = env.values(pa, bad)
    t = by_name(d)
    check(rc == 1 and name in t, f"rows: swapped halves: exit {rc}")
    if name in t:
        check_figures("rows/swapped", t[name], fused, torch.cat([fused[f:], fused[:f]]))
    # The structural diff cannot see it: the same keys, shapes and dtypes.
    p = subprocess.run([env.cli, "diff", str(good), "--against", str(bad), "--json"],
                       capture_output=True, text=True)
    check(p.returncode == 0 and not json.loads(p.stdout)["changes"],
          f"rows: the structural diff sees a change: {p.stdout[:200]}")


def case_mla_split(env: Env) -> None:
    """MLA's fused down projection and its absorbed input norm in the first checkpoint, the
    parts Megatron's MLA handler splits them into in the second (linear_q_down_proj,
    linear_kv_down_proj, the layer's input_layernorm): identical; then the norm changed in the
    second, found in the fused parameter's norm alone."""
    g = torch.Generator().manual_seed(8)
    q, kv, h = 12, 20, 16
    att = "decoder.layers.0.self_attention."
    down = torch.randn(q + kv, h, generator=g)
    norm = torch.rand(h, generator=g)
    a = {att + "linear_qkv_down_proj.weight": down, att + "linear_qkv_down_proj.layer_norm_weight": norm}

    def split(n: torch.Tensor) -> dict:
        return {"model": {"module." + att + "linear_q_down_proj.weight": down[:q].clone(),
                          "module." + att + "linear_kv_down_proj.weight": down[q:].clone(),
                          "module.decoder.layers.0.input_layernorm.weight": n.clone()}}
    pa = save_dcp(a, env.tmp / "mla-a")
    rc, d, err = env.values(pa, save_dcp(split(norm), env.tmp / "mla-b"))
    t = by_name(d)
    check(rc == 0 and all(t.get(k, {}).get("verdict") == "identical" for k in a) and
          len(t.get(att + "linear_qkv_down_proj.weight", {}).get("keys_b", [])) == 2,
          f"mla: exit {rc} {err.strip()} {[(k, t.get(k, {}).get('verdict'), t.get(k, {}).get('why')) for k in a]}")
    moved = norm.clone()
    moved[5] += 0.5
    rc, d, _ = env.values(pa, save_dcp(split(moved), env.tmp / "mla-c"))
    t = by_name(d)
    name = att + "linear_qkv_down_proj.layer_norm_weight"
    check(rc == 1 and t.get(att + "linear_qkv_down_proj.weight", {}).get("verdict") == "identical",
          f"mla changed norm: exit {rc}")
    if name in t:
        check_figures("mla/norm", t[name], norm, moved)


def case_bf16_roundtrip(env: Env) -> None:
    g = torch.Generator().manual_seed(3)
    w = torch.randn(128, 64, generator=g)
    pa = save_dcp({"w": w}, env.tmp / "rt-a")
    pb = save_dcp({"w": w.bfloat16()}, env.tmp / "rt-b")
    pc = save_dcp({"w": w.double()}, env.tmp / "rt-c")
    rc, d, err = env.values(pa, pb)
    t = by_name(d).get("w", {})
    check(rc == 1, f"bf16: exit {rc} {err.strip()}")
    check_figures("bf16", t, w, w.bfloat16())
    # torch's own cast is round-to-nearest-even: every value within one bfloat16 ULP (here 0).
    check(t.get("ulp_dtype") == "bfloat16" and t.get("max_ulp") is not None and t["max_ulp"] <= 1,
          f"bf16: ULPs {t.get('max_ulp')} of {t.get('ulp_dtype')}")
    rc, d, _ = env.values(pa, pb, "--rtol", str(2 ** -8))
    check(rc == 0 and by_name(d).get("w", {}).get("verdict") == "within_tolerance",
          f"bf16: --rtol 2^-8: exit {rc}")
    rc, d, _ = env.values(pa, pc)
    t = by_name(d).get("w", {})
    check(rc == 0 and t.get("verdict") == "identical" and t.get("dtype_b") == "float64",
          f"float64 copy: exit {rc}, {t.get('verdict')}")
    # float16 too: our rounding to the float16 grid is torch's (0 ULP from its own cast), and a
    # value outside float16's range becomes infinite on that side, as torch makes it.
    tiny = torch.randn(64, 64, generator=g) * 1e-5  # float16 subnormals
    pe = save_dcp({"w": w, "tiny": tiny}, env.tmp / "rt-e")
    pd = save_dcp({"w": w.half(), "tiny": tiny.half()}, env.tmp / "rt-d")
    rc, d, _ = env.values(pe, pd)
    for k, v in (("w", w), ("tiny", tiny)):
        t = by_name(d).get(k, {})
        check_figures(f"float16/{k}", t, v, v.half())
        check(t.get("ulp_dtype") == "float16" and t.get("max_ulp") == 0,
              f"float16/{k}: ULPs {t.get('max_ulp')} of {t.get('ulp_dtype')}")


def case_ranks(env: Env) -> None:
    """The fixtures' dcp_1rank / 2ranks / 4ranks: the same tensors chunked by 1, 2 and 4 writer
    ranks (some of other shapes, some only in one). torch loads each and says which are equal."""
    ones = env.fixtures / "dcp_1rank"
    t1 = flat(load_dcp(ones))
    for other in ("dcp_2ranks", "dcp_4ranks"):
        path = env.fixtures / other
        rc, d, err = env.values(ones, path)
        t2 = flat(load_dcp(path))
        got = by_name(d)
        check(rc in (0, 1) and got, f"{other}: exit {rc} {err.strip()}")
        for k, v in t1.items():
            if k not in got:
                check(False, f"{other}: {k} not reported")
                continue
            if k not in t2 or t2[k].shape != v.shape:
                check(got[k]["verdict"] == "not_compared", f"{other}/{k}: {got[k]['verdict']}")
                continue
            equal = bool((bits(v) == bits(t2[k])).all()) if v.dtype == t2[k].dtype else False
            check((got[k]["verdict"] == "identical") == equal,
                  f"{other}/{k}: {got[k]['verdict']}, torch equal {equal}")
        for k in t2.keys() - t1.keys():
            check(got.get(k, {}).get("verdict") == "not_compared" and
                  "only in the second" in got.get(k, {}).get("why", ""),
                  f"{other}: {k} only in the second: {got.get(k)}")


def hf_llama(env: Env) -> tuple[Path, dict, dict]:
    from safetensors.torch import save_file
    cfg = {"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
           "intermediate_size": 48, "vocab_size": 64, "tie_word_embeddings": False,
           "hidden_act": "silu", "rms_norm_eps": 1e-6}
    g = torch.Generator().manual_seed(4)
    h, q, kv, f = 32, 4 * 8, 2 * 8, 48
    hf = {"model.embed_tokens.weight": torch.randn(64, h, generator=g),
          "model.norm.weight": torch.rand(h, generator=g), "lm_head.weight": torch.randn(64, h, generator=g)}
    for i in range(2):
        p = f"model.layers.{i}."
        hf.update({p + "input_layernorm.weight": torch.rand(h, generator=g),
                   p + "post_attention_layernorm.weight": torch.rand(h, generator=g),
                   p + "self_attn.q_proj.weight": torch.randn(q, h, generator=g),
                   p + "self_attn.k_proj.weight": torch.randn(kv, h, generator=g),
                   p + "self_attn.v_proj.weight": torch.randn(kv, h, generator=g),
                   p + "self_attn.o_proj.weight": torch.randn(h, q, generator=g),
                   p + "mlp.gate_proj.weight": torch.randn(f, h, generator=g),
                   p + "mlp.up_proj.weight": torch.randn(f, h, generator=g),
                   p + "mlp.down_proj.weight": torch.randn(h, f, generator=g)})
    out = env.tmp / "hf-llama"
    out.mkdir()
    save_file(hf, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(cfg))
    # The same as a sharded set, as transformers writes one: two shards and an index.
    sharded = env.tmp / "hf-llama-sharded"
    sharded.mkdir()
    names = sorted(hf)
    weight_map = {}
    for i, part in enumerate((names[: len(names) // 2], names[len(names) // 2:])):
        shard = f"model-{i + 1:05d}-of-00002.safetensors"
        save_file({k: hf[k] for k in part}, str(sharded / shard), metadata={"format": "pt"})
        weight_map.update({k: shard for k in part})
    total = sum(v.numel() * v.element_size() for v in hf.values())
    (sharded / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    (sharded / "config.json").write_text(json.dumps(cfg))
    return out, hf, cfg


def to_megatron(hf: dict, cfg: dict) -> dict:
    """Megatron-Bridge's published Llama mapping (QKVMapping: per query group [q; k; v];
    GatedMLPMapping: [gate; up]; the rest renamed), written here from its documentation."""
    heads, groups, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    per = heads // groups
    m = {"embedding.word_embeddings.weight": hf["model.embed_tokens.weight"],
         "decoder.final_layernorm.weight": hf["model.norm.weight"],
         "output_layer.weight": hf["lm_head.weight"]}
    for i in range(cfg["num_hidden_layers"]):
        p, o = f"model.layers.{i}.", f"decoder.layers.{i}."
        qw, kw, vw = (hf[p + f"self_attn.{x}_proj.weight"] for x in "qkv")
        blocks = []
        for gi in range(groups):
            blocks += [qw[gi * per * d:(gi + 1) * per * d], kw[gi * d:(gi + 1) * d], vw[gi * d:(gi + 1) * d]]
        m[o + "self_attention.linear_qkv.weight"] = torch.cat(blocks)
        m[o + "self_attention.linear_qkv.layer_norm_weight"] = hf[p + "input_layernorm.weight"]
        m[o + "self_attention.linear_proj.weight"] = hf[p + "self_attn.o_proj.weight"]
        m[o + "mlp.linear_fc1.layer_norm_weight"] = hf[p + "post_attention_layernorm.weight"]
        m[o + "mlp.linear_fc1.weight"] = torch.cat([hf[p + "mlp.gate_proj.weight"], hf[p + "mlp.up_proj.weight"]])
        m[o + "mlp.linear_fc2.weight"] = hf[p + "mlp.down_proj.weight"]
    return m


def fsdp_dtensor(m: dict) -> dict:
    """As Megatron-FSDP stores the model: model.module.<name>, SwiGLU fc1 split _w / _v."""
    out = {}
    for k, v in m.items():
        if k.endswith(".mlp.linear_fc1.weight"):
            half = v.shape[0] // 2
            out["module." + k + "_w"], out["module." + k + "_v"] = v[:half].clone(), v[half:].clone()
        else:
            out["module." + k] = v.clone()
    return {"model": out}


def case_hf_llama(env: Env) -> None:
    path, hf, cfg = hf_llama(env)
    sharded = env.tmp / "hf-llama-sharded"
    rc, d, err = env.values(path, sharded)
    check(rc == 0 and {t["name"] for t in d.get("tensors", []) if t["verdict"] == "identical"} == set(hf),
          f"hf_llama: the file against its sharded set: exit {rc} {err.strip()}")
    meg = to_megatron(hf, cfg)
    good = save_dcp(fsdp_dtensor(meg), env.tmp / "megatron-converted")
    for hf_side in (path, sharded):
        rc, d, err = env.values(hf_side, good)
        t = by_name(d)
        check(rc == 0 and set(meg) <= set(t) and all(t[k]["verdict"] == "identical" for k in meg),
              f"hf_llama {hf_side.name}: exit {rc} {err.strip()}; "
              f"{[(k, t.get(k, {}).get('verdict'), t.get(k, {}).get('why')) for k in meg if t.get(k, {}).get('verdict') != 'identical'][:3]}")
    # A tensor Megatron-Bridge's mapping does not read (here a rotary buffer some exports keep)
    # is not compared, and says so: exit 1, and 0 once allowed.
    from safetensors.torch import save_file
    extra = env.tmp / "hf-llama-extra"
    extra.mkdir()
    inv_freq = "model.layers.0.self_attn.rotary_emb.inv_freq"
    save_file({**hf, inv_freq: torch.rand(4)}, str(extra / "model.safetensors"))
    shutil.copy(path / "config.json", extra / "config.json")
    rc, d, err = env.values(extra, good)
    t = by_name(d)
    unpaired = [x["name"] for x in d.get("tensors", []) if x["verdict"] == "not_compared"]
    check(rc == 1 and unpaired == [inv_freq] and "only in the first" in t[inv_freq]["why"] and
          all(t.get(k, {}).get("verdict") == "identical" for k in meg),
          f"hf_llama with a tensor no mapping reads: exit {rc} {err.strip()}; {unpaired}")
    rc, _, _ = env.values(extra, good, "--allow-not-compared")
    check(rc == 0, f"hf_llama with a tensor no mapping reads, allowed: exit {rc}")
    # One query group's q rows swapped with the next's, in layer 1: found there and only there.
    bad = dict(meg)
    name = "decoder.layers.1.self_attention.linear_qkv.weight"
    per, d_ = cfg["num_attention_heads"] // cfg["num_key_value_heads"], cfg["head_dim"]
    block = (per + 2) * d_
    w = meg[name].clone()
    w[0:per * d_], w[block:block + per * d_] = meg[name][block:block + per * d_].clone(), meg[name][0:per * d_].clone()
    bad[name] = w
    swapped = save_dcp(fsdp_dtensor(bad), env.tmp / "megatron-swapped")
    rc, d, _ = env.values(path, swapped)
    t = by_name(d)
    check(rc == 1 and [k for k in meg if t.get(k, {}).get("verdict") != "identical"] == [name],
          f"hf_llama swapped: exit {rc}, differing {[k for k in meg if t.get(k, {}).get('verdict') != 'identical']}")
    if name in t:
        check_figures("hf_llama/swapped", t[name], meg[name], w)


def case_splits(env: Env) -> None:
    """The same figures whatever the split: threads, memory budget, processes."""
    g = torch.Generator().manual_seed(5)
    a = {f"layer{i}.w": torch.randn(96, 80, generator=g) for i in range(6)}
    a["big"] = torch.randn(1000, 33, generator=g)
    b = {k: v + 1e-3 * torch.randn(v.shape, generator=g) for k, v in a.items()}
    pa, pb = save_dcp(a, env.tmp / "split-a"), save_dcp(b, env.tmp / "split-b")

    def tensors(d: dict) -> list:
        return [{k: v for k, v in t.items() if k != "device"} for t in d.get("tensors", [])]
    _, ref, err = env.values(pa, pb, "--threads", "1")
    check(bool(tensors(ref)), f"splits: no result {err.strip()}")
    for extra in (["--threads", "2"], ["--threads", "3", "--max-memory", "20000"],
                  ["--max-memory", "5000"]):
        _, d, err = env.values(pa, pb, *extra)
        check(tensors(d) == tensors(ref), f"splits: {extra} gives other figures {err.strip()[:200]}")
    _, d, err = env.values(pa, pb, "--no-gpu", "--threads", "1")
    check(tensors(d) == tensors(ref), f"splits: --no-gpu gives other figures {err.strip()[:200]}")
    rc, d, err = env.values(pa, pb, launch=2)
    check(tensors(d) == tensors(ref) and d.get("processes") == 2,
          f"splits: 2 processes: exit {rc}, {err.strip()[-300:]}")


def case_formats(env: Env) -> None:
    """One real megatron-core MoE GPTModel (SequentialMLP experts, biases, LayerNorm) written
    by megatron-core's dist_checkpointing (torch_dist: layers and experts stacked), by
    torch.save and safetensors (its state dict's names), and as a legacy mp_rank_00 file with
    its arguments: every pair of formats compares identical, tensor by tensor; one parameter
    changed in the torch.save copy is found in it alone, with torch's figures."""
    sys.path.insert(0, str(Path(__file__).parent))
    import argparse as ap
    from check_loaders import MEGATRON_RUNS, argparse_flags, megatron_build, megatron_model_parallel
    from megatron.core import dist_checkpointing
    from safetensors.torch import save_file
    with megatron_model_parallel():
        torch.manual_seed(8)
        build, args = megatron_build(argparse_flags(MEGATRON_RUNS["moe"]))
        model = build()
        sd = {k: v for k, v in model.state_dict().items()
              if isinstance(v, torch.Tensor) and not k.endswith("._extra_state")}
        dist = env.tmp / "fmt-torch_dist"
        dist.mkdir()
        sharded = model.sharded_state_dict()
        sharded["args"] = args
        dist_checkpointing.save(sharded, str(dist))
    saved = env.tmp / "fmt-model.pt"
    torch.save(sd, saved)
    st = env.tmp / "fmt-model.safetensors"
    save_file({k: v.contiguous() for k, v in sd.items()}, str(st))
    legacy = env.tmp / "fmt-legacy"
    (legacy / "iter_0000001" / "mp_rank_00").mkdir(parents=True)
    legacy_args = ap.Namespace(**{**vars(args), "ckpt_format": "torch"})
    torch.save({"checkpoint_version": 3.0, "iteration": 1, "model": sd, "args": legacy_args},
               legacy / "iter_0000001" / "mp_rank_00" / "model_optim_rng.pt")
    (legacy / "latest_checkpointed_iteration.txt").write_text("1")
    # Both in torch's legacy (pre-1.6, non-zip) stream, as Megatron and torch wrote them before.
    saved_pre16 = env.tmp / "fmt-model-pre16.pt"
    torch.save(sd, saved_pre16, _use_new_zipfile_serialization=False)
    legacy_pre16 = env.tmp / "fmt-legacy-pre16"
    (legacy_pre16 / "iter_0000001" / "mp_rank_00").mkdir(parents=True)
    torch.save({"checkpoint_version": 3.0, "iteration": 1, "model": sd, "args": legacy_args},
               legacy_pre16 / "iter_0000001" / "mp_rank_00" / "model_optim_rng.pt",
               _use_new_zipfile_serialization=False)
    (legacy_pre16 / "latest_checkpointed_iteration.txt").write_text("1")
    # The same at EP 2: mp_rank_00_00e files, each with the dense tensors and its two experts
    # under EP-local indices (local_experts.0-1), as Megatron's legacy save cuts them.
    legacy_ep = env.tmp / "fmt-legacy-ep2"
    import re
    expert_re = re.compile(r"\.local_experts\.(\d+)\.")
    for r in range(2):
        part = {}
        for k, v in sd.items():
            m = expert_re.search(k)
            if not m:
                part[k] = v
            elif int(m[1]) // 2 == r:
                part[expert_re.sub(f".local_experts.{int(m[1]) % 2}.", k)] = v
        (legacy_ep / "iter_0000001" / f"mp_rank_00_{r:03d}").mkdir(parents=True)
        torch.save({"checkpoint_version": 3.0, "iteration": 1, "model": part,
                    "args": ap.Namespace(**{**vars(legacy_args), "expert_model_parallel_size": 2})},
                   legacy_ep / "iter_0000001" / f"mp_rank_00_{r:03d}" / "model_optim_rng.pt")
    (legacy_ep / "latest_checkpointed_iteration.txt").write_text("1")
    expert = next(k for k in sd if ".local_experts.2.linear_fc1.weight" in k)
    for first, second in ((dist, saved), (saved, dist), (dist, st), (legacy, dist), (legacy, saved),
                          (dist, legacy_ep), (legacy_ep, saved), (saved_pre16, dist),
                          (legacy_pre16, saved), (dist, legacy_pre16)):
        rc, d, err = env.values(first, second, "--no-optimizer")
        t = by_name(d)
        wrong = [(k, t.get(k, {}).get("verdict"), t.get(k, {}).get("why")) for k in sd
                 if t.get(k, {}).get("verdict") != "identical"]
        # EP rank 1's file holds its own copy of every dense tensor; the layout reads EP rank
        # 0's, and the other format has nothing under those names: not compared (exit 1).
        replicas = ({f"mp_rank_00_001/model.{k}" for k in sd if not expert_re.search(k)}
                    if legacy_ep in (first, second) else set())
        unpaired = {x["name"] for x in d.get("tensors", []) if x["verdict"] == "not_compared"}
        check(rc == (1 if replicas else 0) and not wrong and unpaired == replicas,
              f"formats {first.name} / {second.name}: exit {rc} {err.strip()[:200]}; not "
              f"identical {wrong[:3]}; not compared {sorted(unpaired ^ replicas)[:3]}")
        if replicas:
            rc, _, err = env.values(first, second, "--no-optimizer", "--allow-not-compared")
            check(rc == 0, f"formats {first.name} / {second.name} --allow-not-compared: exit "
                           f"{rc} {err.strip()[:200]}")
        check(expert in t and len(t[expert]["keys_a" if first == dist else "keys_b"]) >= 1,
              f"formats {first.name} / {second.name}: expert {expert} not paired")
    # Against itself every copy is stored under the same name on both sides: all compared.
    rc, d, err = env.values(legacy_ep, legacy_ep, "--no-optimizer")
    check(rc == 0 and d.get("summary", {}).get("not_compared") == 0,
          f"formats legacy EP 2 against itself: exit {rc} {err.strip()[:200]}")
    # verify reads the pre-1.6 stream too: every parameter gathered bit for bit, torch's min/max.
    layout = env.tmp / "fmt-layout.json"
    layout.write_text(json.dumps({
        "schema": "shardscope.layout/1", "family": "test", "source": "megatron-core GPTModel",
        "parallel": {"tp": 1, "pp": 1, "ep": 1, "etp": 1, "dp_shard": 1},
        "params": [{"name": k, "shape": list(v.shape), "dtype": str(v.dtype).split(".")[-1],
                    "tp_dim": -1} for k, v in sd.items()]}))
    for ckpt in (saved_pre16, legacy_pre16):
        p = subprocess.run([env.cli, "verify", str(ckpt), "--layout", str(layout), "--json"],
                           capture_output=True, text=True, timeout=600)
        v = json.loads(p.stdout or "{}")
        got = {x["name"]: x for x in v.get("params", [])}
        wrong = [k for k in sd if got.get(k, {}).get("outcome") != "bit_identical"
                 or got[k]["stats"]["min"] != sd[k].float().min().item()
                 or got[k]["stats"]["max"] != sd[k].float().max().item()]
        check(p.returncode == 0 and not wrong,
              f"formats verify {ckpt.name}: exit {p.returncode} {p.stderr.strip()[:200]}; wrong {wrong[:3]}")
    changed = dict(sd)
    name = "decoder.layers.1.self_attention.linear_proj.weight"
    changed[name] = sd[name].clone()
    changed[name][3] *= 1.5
    bad = env.tmp / "fmt-changed.pt"
    torch.save(changed, bad)
    rc, d, _ = env.values(dist, bad, "--no-optimizer")
    t = by_name(d)
    check(rc == 1 and [k for k in sd if t.get(k, {}).get("verdict") != "identical"] == [name],
          f"formats changed: exit {rc}, {[k for k in sd if t.get(k, {}).get('verdict') != 'identical'][:3]}")
    if name in t:
        check_figures("formats/changed", t[name], sd[name], changed[name])


def case_layout_fixtures(env: Env) -> None:
    """make_layout_fixtures.py's families (Megatron-FSDP fsdp_dtensor checkpoints with their
    arguments, written by torch): each `fused` directory holds every fused tensor as exactly
    torch.cat of the `unfused` one's sections (the writer checks it with torch), for model
    tensors and optimizer states alike; SwiGLU, fused MLA with its absorbed norm, grouped and
    sequential experts, MTP's spellings, GDN. Every tensor compares identical, none is left out."""
    root = env.layout_fixtures
    for family, other in (("llama", "fused"), ("deepseek_v3", "fused"), ("qwen3_next", "fused"),
                          ("qwen3_next", "gdn_fused")):
        a, b = root / family / "unfused", root / family / other
        rc, d, err = env.values(a, b)
        bad = [(t["name"], t["verdict"], t.get("why")) for t in d.get("tensors", [])
               if t["verdict"] != "identical"]
        check(rc == 0 and d.get("tensors") and not bad,
              f"{family} unfused / {other}: exit {rc} {err.strip()[:200]}; {bad[:3]}")


def case_report(env: Env) -> None:
    """`report A --against B --values -o FILE` adds the value differences to the fix report in
    each format, with the figures the JSON of diff --values has; exit 1 for differences."""
    g = torch.Generator().manual_seed(7)
    a = {f"decoder.layers.{i}.w": torch.randn(16, 8, generator=g) for i in range(4)}
    b = {k: v.clone() for k, v in a.items()}
    b["decoder.layers.2.w"][1, 1] += 1.0
    pa, pb = save_dcp(a, env.tmp / "rep-a"), save_dcp(b, env.tmp / "rep-b")
    _, values, _ = env.values(pa, pb)
    for ext in ("md", "html", "json"):
        out = env.tmp / f"report.{ext}"
        p = subprocess.run([env.cli, "report", str(pa), "--against", str(pb), "--values", "-o",
                            str(out)], capture_output=True, text=True)
        text = out.read_text() if out.exists() else ""
        check(p.returncode == 1, f"report.{ext}: exit {p.returncode} {p.stderr.strip()}")
        if ext == "json":
            j = json.loads(text) if text else {}
            check(j.get("values", {}).get("tensors") == values.get("tensors") and
                  j["values"]["summary"]["different"] == 1, f"report.json: values {str(j)[:200]}")
        else:
            check("Value differences" in text and "decoder.layers.2.w" in text and
                  "decoder.layers.{0,1,3}.w" in text, f"report.{ext}: no value section")


def case_unreadable(env: Env) -> None:
    g = torch.Generator().manual_seed(6)
    a = {"w": torch.randn(256, 256, generator=g)}
    pa, pb = save_dcp(a, env.tmp / "cut-a"), save_dcp(a, env.tmp / "cut-b")
    data = next(p for p in pb.iterdir() if p.suffix == ".distcp")
    with open(data, "r+b") as f:
        f.truncate(data.stat().st_size // 2)
    rc, d, err = env.values(pa, pb)
    lines = err.strip().splitlines()
    check(rc == 2 and len(lines) == 1 and data.name in lines[0] and "w" in lines[0],
          f"unreadable: exit {rc}, {err!r}")
    # Once: the key stored under the same name on both sides is not reported again as stored.
    check(d.get("summary", {}).get("unreadable") == 1 and len(d.get("tensors", [])) == 1,
          f"unreadable: {d.get('summary')}")


def demo_state(path: Path, tmp: Path) -> dict:
    """Every tensor of a Megatron run folder's latest iteration as torch reads it."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    it = int((path / "latest_checkpointed_iteration.txt").read_text())
    out = tmp / (path.name + ".pt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp_to_torch_save(str(path / f"iter_{it:07d}"), str(out))
    return flat(torch.load(out, weights_only=False))


def case_rule_off(env: Env) -> None:
    """The README's debugging state: the bundled demo read through the layout of its config
    with Megatron's MLA handler switched off (--disable-rule mla_down_proj), against a copy in
    which torch changed one element of linear_q_down_proj, one of the tensors the fused
    linear_qkv_down_proj is made of. Both sides store it under the same name, so it is compared
    whatever the rules: found, alone, with torch's figures; then every other rule switched off
    in turn finds it too. What cannot be compared is listed before anything else."""
    tools = Path(__file__).resolve().parent
    changed = env.tmp / "demo-changed"
    key = "model.module.decoder.layers.1.self_attention.linear_q_down_proj.weight"
    p = subprocess.run([sys.executable, str(tools / "make_changed_copy.py"), str(env.demo),
                        str(changed), "--key", key, "--json"], capture_output=True, text=True)
    check(p.returncode == 0 and json.loads(p.stdout or "{}").get("key") == key,
          f"rule_off: make_changed_copy: {p.stderr.strip()[-300:]}")
    layout = env.tmp / "demo-layout.json"
    p = subprocess.run([env.cli, "layout", "--from-config", str(env.demo / "config.json"), "-o",
                        str(layout)], capture_output=True, text=True)
    check(p.returncode == 0, f"rule_off: layout: {p.stderr.strip()}")
    a, b = demo_state(env.demo, env.tmp), demo_state(changed, env.tmp)
    # What torch says differs: that one tensor.
    torch_different = [k for k in a if k in b and not torch.equal(bits(a[k]), bits(b[k]))]
    check(torch_different == [key], f"rule_off: torch sees {torch_different} changed")

    rules = subprocess.run([env.cli, "rules"], capture_output=True, text=True).stdout
    names = [line.split()[0] for line in rules.splitlines() if line.strip()]
    check("mla_down_proj" in names and "wrapper_prefix" in names, f"rule_off: rules {names}")
    for rule in names:
        tag = f"rule_off/{rule}"
        rc, d, err = env.values(env.demo, changed, "--layout", str(layout), "--disable-rule", rule)
        different = [t for t in d.get("tensors", []) if t["verdict"] != "identical" and
                     t["verdict"] != "not_compared"]
        check(rc == 1 and len(different) == 1 and key in different[0]["keys_a"],
              f"{tag}: exit {rc} {err.strip()[:200]}; not identical "
              f"{[(t['name'], t['verdict']) for t in different][:3]}")
        if len(different) == 1:
            t = different[0]
            # torch's own concatenation of the stored tensors the pair is made of.
            check_figures(tag, t, torch.cat([a[k] for k in t["keys_a"]]),
                          torch.cat([b[k] for k in t["keys_b"]]))
        not_compared = [t for t in d.get("tensors", []) if t["verdict"] == "not_compared"]
        check(d.get("summary", {}).get("not_compared") == len(not_compared),
              f"{tag}: summary {d.get('summary')}")
        rc, text = env.text(env.demo, changed, "--layout", str(layout), "--disable-rule", rule)
        order = sections(text)
        first = ["NOT COMPARED", "DIFFERENT"] if not_compared else ["DIFFERENT"]
        check(order[:len(first)] == first, f"{tag}: sections in the order {order}")
        check(f"{len(not_compared)} not compared" in text, f"{tag}: the count is not in the text")
        if rule == "mla_down_proj":
            # The README's state: nothing left out, the parts compared under their stored names.
            check(not not_compared and different[:1] and different[0]["name"] == key and
                  different[0]["keys_a"] == [key] == different[0]["keys_b"],
                  f"{tag}: {[(t['name'], t.get('why')) for t in not_compared][:3]}")


def case_not_compared(env: Env) -> None:
    """Tensors that truly cannot be compared, a key only one side stores and one stored under
    the same name with another shape (never reshaped), are counted in the summary, listed
    first and make the exit code 1; --allow-not-compared makes it 0 when the rest is within the
    tolerance, still counting and listing them, and never hides a difference. The report's
    exit code and sections say the same."""
    g = torch.Generator().manual_seed(9)
    a = {"w": torch.randn(16, 8, generator=g), "only_a": torch.randn(4, generator=g),
         "reshaped": torch.randn(4, 6, generator=g), "norm": torch.rand(8, generator=g)}
    b = {"w": a["w"].clone(), "only_b": torch.randn(5, generator=g),
         "reshaped": a["reshaped"].reshape(6, 4).clone(), "norm": a["norm"].clone()}
    pa, pb = save_dcp(a, env.tmp / "nc-a"), save_dcp(b, env.tmp / "nc-b")
    # What torch itself cannot compare element by element: a side lacks it, or other shapes.
    want = {k for k in a.keys() | b.keys() if k not in a or k not in b or a[k].shape != b[k].shape}
    comparable = (a.keys() & b.keys()) - want
    rc, d, err = env.values(pa, pb)
    got = {t["name"] for t in d.get("tensors", []) if t["verdict"] == "not_compared"}
    s = d.get("summary", {})
    check(rc == 1 and got == want and s.get("not_compared") == len(want) and s.get("passes") is False
          and d.get("allow_not_compared") is False,
          f"not_compared: exit {rc} {err.strip()}; not compared {got}, torch {want}; {s}")
    for k in comparable:
        check(by_name(d).get(k, {}).get("verdict") == "identical", f"not_compared: {k} not identical")
    check("another shape" in by_name(d).get("reshaped", {}).get("why", "") or
          "[6, 4]" in by_name(d).get("reshaped", {}).get("why", ""),
          f"not_compared: reshaped: {by_name(d).get('reshaped')}")
    rc, text = env.text(pa, pb)
    check(rc == 1 and sections(text)[:1] == ["NOT COMPARED"] and
          f"{len(want)} not compared" in text and "(exit 1" in text,
          f"not_compared: text exit {rc}: {text[:600]}")

    rc, d, err = env.values(pa, pb, "--allow-not-compared")
    got = {t["name"] for t in d.get("tensors", []) if t["verdict"] == "not_compared"}
    check(rc == 0 and got == want and d.get("summary", {}).get("passes") is True and
          d.get("allow_not_compared") is True,
          f"not_compared --allow-not-compared: exit {rc} {err.strip()}; {got}")
    rc, text = env.text(pa, pb, "--allow-not-compared")
    check(rc == 0 and sections(text)[:1] == ["NOT COMPARED"] and "(exit 0" in text,
          f"not_compared --allow-not-compared: text exit {rc}: {text[:600]}")
    # The flag accepts what cannot be compared, never a difference.
    moved = {k: v.clone() for k, v in b.items()}
    moved["norm"][2] += 0.5
    pc = save_dcp(moved, env.tmp / "nc-c")
    rc, d, _ = env.values(pa, pc, "--allow-not-compared")
    if "norm" in by_name(d):
        check_figures("not_compared/norm", by_name(d)["norm"], a["norm"], moved["norm"])
    check(rc == 1, f"not_compared: a difference with --allow-not-compared: exit {rc}")
    # Every tensor comparable (the pair with itself): exit 0 without the flag.
    rc, d, _ = env.values(pa, pa)
    check(rc == 0 and d.get("summary", {}).get("not_compared") == 0,
          f"not_compared: a checkpoint against itself: exit {rc}")

    # The report: its exit code, and the tensors not compared in its first rows.
    for extra, code in (([], 1), (["--allow-not-compared"], 0)):
        out = env.tmp / f"nc-report{len(extra)}.md"
        p = subprocess.run([env.cli, "report", str(pa), "--against", str(pb), "--values", "-o",
                            str(out), *extra], capture_output=True, text=True)
        md = out.read_text() if out.exists() else ""
        rows = [line for line in md.split("## Value differences")[-1].splitlines()
                if line.startswith("| `")]
        check(p.returncode == code and rows and all("not_compared" in r for r in rows[:len(want)])
              and f"{len(want)} not compared" in md,
              f"not_compared report {extra}: exit {p.returncode} {p.stderr.strip()}; {rows[:4]}")


CASES = {"element": case_element, "rows_permuted": case_rows_permuted, "mla_split": case_mla_split,
         "bf16_roundtrip": case_bf16_roundtrip, "ranks": case_ranks, "hf_llama": case_hf_llama,
         "splits": case_splits, "formats": case_formats, "layout_fixtures": case_layout_fixtures, "report": case_report, "unreadable": case_unreadable,
         "rule_off": case_rule_off, "not_compared": case_not_compared}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--fixtures", help="make_fixtures.py's output (for the ranks case)")
    ap.add_argument("--layout-fixtures", help="make_layout_fixtures.py's output")
    ap.add_argument("--demo", help="the bundled demo checkpoint (default: resources/demo/dsv3-mini)")
    ap.add_argument("case", choices=sorted(CASES))
    a = ap.parse_args()
    env = Env(a.cli, a.fixtures, a.layout_fixtures, a.demo)
    try:
        CASES[a.case](env)
    finally:
        shutil.rmtree(env.tmp, ignore_errors=True)
    for f in FAILURES:
        print("FAIL", f)
    print(f"{a.case}: {'ok' if not FAILURES else f'{len(FAILURES)} failures'}")
    return 1 if FAILURES else 0


if __name__ == "__main__":  # megatron-core's writer forks: the cases run only here
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
