#!/usr/bin/env python3
"""Acceptance checks of `shardscope-cli layout / diff / report` against checkpoints written by
real torch (tools/make_layout_fixtures.py) and the bundled demo.

    check_diff.py --cli CLI --fixtures DIR --demo DIR CASE

The expectations come from the fixture writer's MANIFEST.json (names, shapes and fusions it
derived from docs/formats.md §6-7 independently of the C++ code) and from torch's own metadata, never
from the C++ side. Exit 0 when every check of CASE holds, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

FAILURES: list[str] = []


def check(cond: bool, what: str) -> None:
    if not cond:
        FAILURES.append(what)


def run(args: list[str]) -> tuple[int, str, str]:
    p = subprocess.run(args, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


class Env:
    def __init__(self, a):
        self.cli = a.cli
        self.fixtures = Path(a.fixtures)
        self.demo = Path(a.demo)
        self.inspect_fixtures = Path(a.inspect_fixtures) if a.inspect_fixtures else None
        self.tmp = Path(tempfile.mkdtemp(prefix="ss-diff-"))
        self.manifest = json.loads((self.fixtures / "MANIFEST.json").read_text())

    def entry(self, path: str) -> dict:
        return next(c for c in self.manifest["checkpoints"] if c["path"] == path)

    def layout(self, config: Path, *extra: str) -> Path:
        out = self.tmp / (config.parent.name + "-" + "-".join(e.strip("-") for e in extra) + ".json")
        rc, _, err = run([self.cli, "layout", "--from-config", str(config), "-o", str(out), *extra])
        if rc != 0:
            raise SystemExit(f"layout failed: {err}")
        return out

    def diff(self, ckpt: Path, layout: Path, *extra: str) -> tuple[int, dict]:
        rc, out, err = run([self.cli, "diff", str(ckpt), "--layout", str(layout), "--json", *extra])
        if rc == 2:
            raise SystemExit(f"diff could not read: {err}")
        d = json.loads(out)
        d.update(d.get("counts", {}))
        return rc, d


def expected_live(e: dict) -> dict[str, list[int]]:
    return {p["name"]: p["shape"] for p in e["live_params"] + e.get("live_buffers", [])}


def model_entries(d: dict) -> dict[str, dict]:
    return {x["name"]: x for x in d["entries"] if x["section"] == "model"}


def case_layout(env: Env, fam: str) -> None:
    e = env.entry(f"{fam}/unfused")
    lay = json.loads(env.layout(env.fixtures / e["config"]).read_text())
    got = {p["name"]: p["shape"] for p in lay["params"]}
    want = expected_live(e)
    for n in sorted(want.keys() - got.keys()):
        check(False, f"layout lacks {n}")
    for n in sorted(got.keys() - want.keys()):
        check(False, f"layout has {n}, which the model does not")
    for n in sorted(want.keys() & got.keys()):
        check(got[n] == want[n], f"{n}: layout shape {got[n]} != {want[n]}")
    fus = {p["name"]: p["fusion"] for p in lay["params"] if "fusion" in p}
    for n, f in e["fusions"].items():
        g = fus.get(n)
        check(g is not None, f"{n}: no fusion in the layout")
        if g:
            check(g["rule"] == f["rule"], f"{n}: rule {g['rule']} != {f['rule']}")
            check([(s["name"], s["size"]) for s in g["sections"]] ==
                  [(s["name"], s["size"]) for s in f["sections"]], f"{n}: sections differ")
    check(fus.keys() == e["fusions"].keys(), f"fused params differ: {sorted(fus.keys() ^ e['fusions'].keys())}")
    absorbs = {p["name"]: p["absorbs"] for p in lay["params"] if "absorbs" in p}
    check(absorbs == e["absorbs"], f"absorbed norms differ: {absorbs} != {e['absorbs']}")
    buffers = {p["name"] for p in lay["params"] if p.get("optimizer_state") is False}
    check(buffers == {b["name"] for b in e.get("live_buffers", [])}, "buffers differ")


def case_mla_unfused_model(env: Env) -> None:
    """DeepSeek-V3 built without the fused MLA down projection (`--no-mla-down-proj-fusion`):
    its separate linear_q_down_proj / linear_kv_down_proj and input_layernorm load the split
    checkpoint as they are, and against the fused-on-disk one they are cut out of it."""
    e = env.entry("deepseek_v3/unfused")
    lay = env.layout(env.fixtures / e["config"], "--no-mla-down-proj-fusion")
    names = {p["name"] for p in json.loads(lay.read_text())["params"]}
    sections = {s["name"] for f in e["fusions"].values() if f["rule"] == "mla_down_proj"
                for s in f["sections"]}
    check(sections <= names and not (set(e["mla_fused_params"]) & names),
          "layout still has fused MLA parameters or lacks their sections")
    check(set(e["absorbs"].values()) <= names, "layout lacks the input norms")
    rc, d = env.diff(env.fixtures / e["path"], lay)
    check(rc == 0 and d["loadable_model"] == d["expected_model"],
          f"against the split checkpoint: exit {rc}, {d['loadable_model']} of {d['expected_model']}")
    mla = [x for x in model_entries(d).values() if x["name"] in sections]
    check(mla and all(x["status"] == ("rename" if ".mtp_model_layer." in x["name"] else "ok")
                      for x in mla), "MLA sections not loaded as they are (MTP: renamed)")
    f = env.entry("deepseek_v3/fused")
    rc, d = env.diff(env.fixtures / f["path"], lay)
    cut = [x for x in model_entries(d).values()
           if x["name"] in sections and ".mtp_model_layer." not in x["name"]]
    check(cut and all(x["status"] == "merge" for x in cut), "not cut from the fused tensor")


def case_unfused(env: Env, fam: str) -> None:
    """Fused model, checkpoint saved through Megatron's split handlers: N of N."""
    e = env.entry(f"{fam}/unfused")
    rc, d = env.diff(env.fixtures / e["path"], env.layout(env.fixtures / e["config"]))
    n = len(expected_live(e))
    check(rc == 0, f"exit {rc}, want 0")
    check(d["expected_model"] == n and d["loadable_model"] == n,
          f"model {d['loadable_model']} of {d['expected_model']}, want {n} of {n}")
    check(d["expected_optimizer"] > 0 and d["loadable_optimizer"] == d["expected_optimizer"],
          f"optimizer {d['loadable_optimizer']} of {d['expected_optimizer']}")
    check(not [u for u in d["unconsumed"] if u["tensor"]], f"unconsumed: {d['unconsumed'][:3]}")
    check(d["outcome"]["action"] == "loads", f"outcome {d['outcome']}")
    split = {x["name"] for x in model_entries(d).values() if x["status"] == "split"}
    check(split == set(e["fusions"]), f"split params {sorted(split ^ set(e['fusions']))}")


def fused_on_disk(e: dict) -> set[str]:
    live = expected_live(e)
    out = {n for n in live if n in e["fusions"] or n in e["absorbs"]}
    if e.get("mtp_inner_on_disk") == "mtp_model_layer":
        out |= {n for n in live if ".mtp_model_layer." in n}
    return out


def case_fused(env: Env, fam: str) -> None:
    """Fused model, checkpoint saved without the split handlers: the loader asks for keys that
    are not there; under ignore_all exactly those parameters keep their initial values."""
    e = env.entry(f"{fam}/fused")
    ckpt, lay = env.fixtures / e["path"], env.layout(env.fixtures / e["config"])
    want = fused_on_disk(e)
    rc, d = env.diff(ckpt, lay)
    check(rc == 1, f"exit {rc}, want 1")
    check(d["outcome"]["action"] == "raises", f"strict load: {d['outcome']['action']}")
    rc, d = env.diff(ckpt, lay, "--no-strict-fsdp-dtensor-load", "--strictness", "ignore_all")
    check(set(d["outcome"]["kept_at_init"]) == want,
          f"kept at init differs: {sorted(set(d['outcome']['kept_at_init']) ^ want)[:6]}")
    for name, x in model_entries(d).items():
        if name in e["fusions"]:
            check(x["status"] == "merge" and not x["real_load_fills"], f"{name}: {x['status']}")
        elif name not in want:
            check(x["real_load_fills"], f"{name}: not filled ({x['reason']})")


def unfuse(layout: Path, out: Path) -> Path:
    """The reverse model: every fused parameter replaced by its sections, absorbed norms by the
    norms themselves (what a model holding them apart exports)."""
    lay = json.loads(layout.read_text())
    params = []
    for p in lay["params"]:
        if "fusion" in p:
            f = p["fusion"]
            for s in f["sections"]:
                shape = list(p["shape"])
                shape[f["dim"]] = s["size"]
                params.append({"name": s["name"], "shape": shape, "dtype": p["dtype"],
                               "tp_dim": p["tp_dim"]})
        elif "absorbs" in p:
            params.append({"name": p["absorbs"], "shape": p["shape"], "dtype": p["dtype"],
                           "tp_dim": -1})
        else:
            params.append(p)
    lay["params"] = params
    out.write_text(json.dumps(lay))
    return out


def case_reverse(env: Env, fam: str) -> None:
    """Unfused model: loads the split checkpoint as is; against the fused checkpoint its
    sections are cut out of the stored fused tensors (a merge the real load cannot do)."""
    e = env.entry(f"{fam}/unfused")
    lay = unfuse(env.layout(env.fixtures / e["config"]), env.tmp / f"{fam}-unfused-model.json")
    rc, d = env.diff(env.fixtures / e["path"], lay)
    check(rc == 0 and d["loadable_model"] == d["expected_model"],
          f"unfused model vs split checkpoint: exit {rc}, {d['loadable_model']} of {d['expected_model']}")
    f = env.entry(f"{fam}/fused")
    rc, d = env.diff(env.fixtures / f["path"], lay)
    check(rc == 1, f"unfused model vs fused checkpoint: exit {rc}")
    sections = {s["name"]: (fused, i) for fused, fu in f["fusions"].items()
                for i, s in enumerate(fu["sections"])}
    entries = model_entries(d)
    for name, (fused, i) in sections.items():
        x = entries.get(name)
        check(x is not None, f"{name} missing from the diff")
        if not x:
            continue
        if ".mtp_model_layer." in name:
            continue  # the MTP spelling decides first
        check(x["status"] == "merge", f"{name}: {x['status']} ({x['reason']})")
        if x["status"] == "merge":
            src = x["sources"][0]
            begin = sum(s["size"] for s in f["fusions"][fused]["sections"][:i])
            check(src["key"].endswith(fused) and src["stored_row"] == begin,
                  f"{name}: source {src['key']} row {src['stored_row']}, want {fused} from {begin}")


def case_seed_mla(env: Env, ckpt: Path, config: Path, mla: list[str]) -> None:
    """Seed 000's negative control: the MLA handler disabled."""
    lay = env.layout(config)
    rc, d = env.diff(ckpt, lay, "--disable-rule", "mla_down_proj")
    bad = {x["name"] for x in model_entries(d).values() if not x["real_load_fills"]}
    check(bad == set(mla), f"unloadable {sorted(bad ^ set(mla))}")
    check(all(model_entries(d)[n]["status"] == "unloadable" for n in mla), "status not unloadable")
    check(rc == 1 and d["outcome"]["action"] == "raises", f"strict: exit {rc}, {d['outcome']['action']}")
    rc, d = env.diff(ckpt, lay, "--disable-rule", "mla_down_proj", "--no-strict-fsdp-dtensor-load",
                     "--strictness", "raise_unexpected")
    check(d["outcome"]["action"] == "raises" and set(d["outcome"]["named_keys"]) <= set(mla),
          f"raise_unexpected: {d['outcome']}")
    rc, d = env.diff(ckpt, lay, "--disable-rule", "mla_down_proj", "--no-strict-fsdp-dtensor-load",
                     "--strictness", "ignore_all")
    check(d["outcome"]["action"] == "silent", f"ignore_all: {d['outcome']['action']}")
    check(set(d["outcome"]["kept_at_init"]) == set(mla),
          f"kept at init {sorted(set(d['outcome']['kept_at_init']) ^ set(mla))}")
    rc, d = env.diff(ckpt, lay)
    check(rc == 0 and d["loadable_model"] == d["expected_model"], "with the rule: not clean")


def mla_params(config: Path) -> list[str]:
    c = json.loads(config.read_text())
    names = []
    paths = [f"decoder.layers.{i}" for i in range(c["num_hidden_layers"])]
    paths += [f"mtp.layers.{m}.mtp_model_layer" for m in range(c.get("num_nextn_predict_layers", 0))]
    for p in paths:
        names += [f"{p}.self_attention.linear_qkv_down_proj.weight",
                  f"{p}.self_attention.linear_qkv_down_proj.layer_norm_weight"]
    return names


def case_reports(env: Env) -> None:
    lay = env.layout(env.demo / "config.json")
    outs = {}
    for ext in ("md", "html", "json"):
        out = env.tmp / f"report.{ext}"
        rc, _, err = run([env.cli, "report", str(env.demo), "--layout", str(lay), "--disable-rule",
                          "mla_down_proj", "--no-strict-fsdp-dtensor-load", "--strictness",
                          "ignore_all", "-o", str(out)])
        check(rc == 1, f"report .{ext}: exit {rc} {err}")
        outs[ext] = out.read_text() if out.exists() else ""
    mla = mla_params(env.demo / "config.json")
    html = outs["html"]
    check("http://" not in html and "https://" not in html and "<script" not in html,
          "HTML report is not self-contained")
    check("<meta charset=\"utf-8\">" in html.lower() or "<meta charset=utf-8>" in html.lower(),
          "HTML report lacks a charset")
    for text, ext in ((outs["md"], "md"), (html, "html")):
        check("handle_mla_down_proj_in_state_dict" in text, f"{ext}: no fix naming the handler")
        check("report " in text and "--disable-rule mla_down_proj" in text,
              f"{ext}: no reproduce command")
        check("linear_qkv_down_proj" in text, f"{ext}: the unloadable parameters are not named")
    j = json.loads(outs["json"])
    check(set(j["diff"]["outcome"]["kept_at_init"]) == set(mla), "JSON report: kept at init")
    check(j["schema"] == "shardscope.report/1", "JSON report schema")


def case_demo(env: Env) -> None:
    import torch.distributed.checkpoint as dcp
    rc, d = env.diff(env.demo, env.layout(env.demo / "config.json"))
    check(rc == 0 and d["loadable_model"] == d["expected_model"] > 0, "demo is not clean")
    check(d["loadable_optimizer"] == d["expected_optimizer"] > 0, "demo optimizer is not clean")
    # Each parameter's optimizer group (param_to_group_meta), against torch's own key list.
    it = next(p for p in env.demo.iterdir() if p.name.startswith("iter_"))
    md = dcp.FileSystemReader(str(it)).read_metadata().state_dict_metadata
    prefix = "optimizer.param_to_group_meta.module.module.module."
    groups = {k[len(prefix):].rsplit(".", 1)[0] for k in md if k.startswith(prefix)}
    got = {x["param"] for x in d["entries"] if x["section"] == "other" and x["status"] == "ok"}
    check(groups and got == groups, f"param groups: {sorted(got ^ groups)[:4]}")
    case_seed_mla(env, env.demo, env.demo / "config.json", mla_params(env.demo / "config.json"))


def case_bridge(env: Env) -> None:
    """Seed 004: no args/iteration entries, GDN tensors already TP-local: diffs cleanly."""
    e = env.entry("qwen3_next/bridge")
    rc, d = env.diff(env.fixtures / e["path"], env.layout(env.fixtures / e["config"]))
    check(rc == 0 and d["loadable_model"] == d["expected_model"] > 0,
          f"bridge: exit {rc}, {d['loadable_model']} of {d['expected_model']}")


def case_bridge_tp2(env: Env) -> None:
    """Seed 004: GDN tensors already TP-local (TP 2), written by Megatron-Bridge."""
    e = env.entry("qwen3_next/bridge_tp2")
    lay = env.layout(env.fixtures / e["config"], "--tp", "2", "--gdn-tp-local")
    shapes = {p["name"]: p["shape"] for p in json.loads(lay.read_text())["params"]}
    for p in e["live_params"]:
        check(shapes.get(p["name"]) == p["shape"], f"{p['name']}: {shapes.get(p['name'])} != {p['shape']}")
    rc, d = env.diff(env.fixtures / e["path"], lay)
    check(rc == 0 and d["loadable_model"] == d["expected_model"] > 0,
          f"bridge_tp2: exit {rc}, {d['loadable_model']} of {d['expected_model']}")
    # The same checkpoint against a layout that is not TP-local must not pass.
    rc, d = env.diff(env.fixtures / e["path"], env.layout(env.fixtures / e["config"], "--tp", "2"))
    check(rc == 1, f"bridge_tp2 against a full-shape layout: exit {rc}")


def case_gdn_fused(env: Env) -> None:
    """Training at Megatron-LM head keeps GDN fused (the handler was not wired): a loader with the
    gdn handler asks for split keys; one without it loads cleanly."""
    e = env.entry("qwen3_next/gdn_fused")
    ckpt, lay = env.fixtures / e["path"], env.layout(env.fixtures / e["config"])
    gdn = {n for n, f in e["fusions"].items() if f["rule"] == "gdn"}
    rc, d = env.diff(ckpt, lay, "--no-strict-fsdp-dtensor-load", "--strictness", "ignore_all")
    check(set(d["outcome"]["kept_at_init"]) == gdn,
          f"kept at init: {sorted(set(d['outcome']['kept_at_init']) ^ gdn)[:5]}")
    rc, d = env.diff(ckpt, lay, "--disable-rule", "gdn")
    check(rc == 0 and d["loadable_model"] == d["expected_model"], f"without the gdn rule: exit {rc}")


def case_torch_dist(env: Env, inspect_fixtures: Path) -> None:
    """A torch_dist checkpoint (stacked layer axes, SwiGLU kept as [W; V]) against the layout
    generated from its own saved args: every per-layer parameter found at its stacked index."""
    import torch.distributed.checkpoint as dcp  # the oracle
    ckpt = inspect_fixtures / "megatron_torch_dist"
    it = next(p for p in ckpt.iterdir() if p.name.startswith("iter_"))
    md = dcp.FileSystemReader(str(it)).read_metadata().state_dict_metadata
    want = 0
    for k, v in md.items():
        if k.startswith("optimizer.") or not hasattr(v, "size"):
            continue
        want += v.size[0] if ".layers." in k else 1
    lay = env.tmp / "torch_dist.json"
    rc, _, err = run([env.cli, "layout", "--from-config", str(ckpt), "-o", str(lay)])
    check(rc == 0, f"layout from the checkpoint's args: {err}")
    # The saving run's parallel sizes, as torch reads its args back: what a resume plans for.
    import torch
    saved = torch.load(it / "common.pt", weights_only=False)["args"]
    par = json.loads(lay.read_text())["parallel"]
    check(par["tp"] == saved.tensor_model_parallel_size and
          par["pp"] == getattr(saved, "pipeline_model_parallel_size", 1),
          f"layout parallel {par}, saved tp {saved.tensor_model_parallel_size}")
    rc, _, err = run([env.cli, "layout", "--from-config", str(ckpt), "--tp", "1", "-o", str(lay)])
    check(json.loads(lay.read_text())["parallel"]["tp"] == 1, "--tp given: not the saved size")
    rc, _, err = run([env.cli, "layout", "--from-config", str(ckpt), "-o", str(lay)])
    rc, d = env.diff(ckpt, lay, "--no-optimizer")
    check(rc == 0 and d["loadable_model"] == d["expected_model"] == want,
          f"exit {rc}, {d['loadable_model']} of {d['expected_model']}, torch has {want}")
    for x in model_entries(d).values():
        if ".layers." in x["name"]:
            layer = int(x["name"].split(".layers.")[1].split(".")[0])
            check(x["sources"] and x["sources"][0]["index"] == [layer],
                  f"{x['name']}: source index {x['sources'][0]['index'] if x['sources'] else None}")
    rc, d = env.diff(ckpt, lay)
    main = {x["name"]: x for x in d["entries"] if x["state"] == "param"}
    want_main = {f"decoder.layers.{i}.self_attention.linear_qkv.weight.param" for i in range(2)}
    check(want_main <= {n for n, x in main.items() if x["real_load_fills"]},
          f"fp32 main params (optimizer.state.param.*) not found: {sorted(main)[:3]}")
    fc1 = [x for x in d["entries"] if x["name"].endswith("linear_fc1.weight.exp_avg")]
    check(fc1 and all(x["real_load_fills"] and x["sources"][0]["key"] ==
                      "optimizer.state.exp_avg.decoder.layers.mlp.linear_fc1.weight" for x in fc1),
          "stacked optimizer state not found")


def case_experts_local(env: Env) -> None:
    """An EP-local layout (one EP rank's names, EP 2) against global expert keys: loads through
    handle_experts_in_state_dict; without it EP rank 1 silently loads EP rank 0's experts."""
    import re
    e = env.entry("deepseek_v3/unfused")
    cfg = json.loads((env.fixtures / e["config"]).read_text())
    local = cfg["n_routed_experts"] // 2
    lay = env.layout(env.fixtures / e["config"], "--ep", "2", "--local-experts")
    rc, d = env.diff(env.fixtures / e["path"], lay)
    n = len(expected_live(e))
    check(rc == 0 and d["loadable_model"] == d["expected_model"] == n,
          f"with the rule: exit {rc}, {d['loadable_model']} of {d['expected_model']}, want {n}")
    rc, d = env.diff(env.fixtures / e["path"], lay, "--disable-rule", "experts_global")
    upper = {p for p in expected_live(e)
             if (m := re.search(r"\.mlp\.experts\.linear_fc[12]\.weight(\d+)$", p)) and int(m[1]) >= local}
    wrong = {x for x in d["outcome"]["loaded_wrong"] if "." + x.rsplit(".", 1)[-1] not in
             (".exp_avg", ".exp_avg_sq", ".step")}
    check(upper and wrong == upper, f"loaded wrong: {sorted(wrong ^ upper)[:4]}")
    check(rc == 1 and d["outcome"]["action"] == "silent", f"exit {rc}, {d['outcome']['action']}")
    stale = {u["key"] for u in d["unconsumed"] if u["key"].startswith("model.")}
    check(stale and all(re.search(r"weight(\d+)_[wv]$|weight(\d+)$", k) for k in stale),
          f"unconsumed: {sorted(stale)[:3]}")


def case_megatron_args(env: Env) -> None:
    """The same DeepSeek-V3-like model described as Megatron arguments (JSON and --flag text)
    gives a layout the split checkpoint loads N of N."""
    e = env.entry("deepseek_v3/unfused")
    c = json.loads((env.fixtures / e["config"]).read_text())
    args = {  # HF name -> Megatron argparse name (megatron/training/arguments.py)
        "num_layers": c["num_hidden_layers"], "hidden_size": c["hidden_size"],
        "num_attention_heads": c["num_attention_heads"], "ffn_hidden_size": c["intermediate_size"],
        "padded_vocab_size": c["vocab_size"], "swiglu": True,
        "untie_embeddings_and_output_weights": not c.get("tie_word_embeddings", False),
        "multi_latent_attention": True, "q_lora_rank": c["q_lora_rank"],
        "kv_lora_rank": c["kv_lora_rank"], "qk_head_dim": c["qk_nope_head_dim"],
        "qk_pos_emb_head_dim": c["qk_rope_head_dim"], "v_head_dim": c["v_head_dim"],
        "num_experts": c["n_routed_experts"], "moe_ffn_hidden_size": c["moe_intermediate_size"],
        "moe_shared_expert_intermediate_size": c["moe_intermediate_size"] * c["n_shared_experts"],
        "moe_layer_freq": [0] * c["first_k_dense_replace"] +
                          [1] * (c["num_hidden_layers"] - c["first_k_dense_replace"]),
        "moe_router_enable_expert_bias": True, "mtp_num_layers": c["num_nextn_predict_layers"],
        # What a DeepSeek-V3 run passes where Megatron's defaults would build something else
        # (examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh).
        "normalization": "RMSNorm", "disable_bias_linear": True, "position_embedding_type": "rope",
        "qk_layernorm": True, "moe_grouped_gemm": True, "mla_down_proj_fusion": True,
    }
    as_json = env.tmp / "megatron_args.json"
    as_json.write_text(json.dumps(args))
    flags = []
    for k, v in args.items():
        if v is True:
            flags.append(f"--{k.replace('_', '-')}")
        elif isinstance(v, list):
            flags.append(f"--{k.replace('_', '-')} " + " ".join(map(str, v)))
        elif v is not False:
            flags.append(f"--{k.replace('_', '-')} {v}")
    as_flags = env.tmp / "megatron_args.sh"
    as_flags.write_text(" \\\n  ".join(flags) + "\n")
    # --moe-layer-freq as Megatron takes it: Python text its moe_freq_type evaluates.
    dense = c["first_k_dense_replace"]
    expr = f"([0]*{dense}+[1]*{c['num_hidden_layers'] - dense})"
    check(eval(expr) == args["moe_layer_freq"], "the expression is not the list")  # Megatron's eval
    as_expr = env.tmp / "megatron_args_expr.json"
    as_expr.write_text(json.dumps(args | {"moe_layer_freq": expr}))
    as_expr_flags = env.tmp / "megatron_args_expr.sh"
    as_expr_flags.write_text("\n".join(
        line if not line.startswith("--moe-layer-freq") else f"--moe-layer-freq {expr}"
        for line in as_flags.read_text().replace(" \\\n  ", "\n").splitlines()) + "\n")
    for src in (as_json, as_flags, as_expr, as_expr_flags):
        rc, d = env.diff(env.fixtures / e["path"], env.layout(src))
        n = len(expected_live(e))
        check(rc == 0 and d["loadable_model"] == d["expected_model"] == n,
              f"{src.name}: exit {rc}, {d['loadable_model']} of {d['expected_model']}, want {n}")


def case_cast_and_partial(env: Env) -> None:
    """A bf16 layout against fp32 tensors: cast, still filled. A data file cut short: the keys
    whose chunks it held are unreadable and the load raises, as torch's does. A chunk gone from
    the metadata: that key is partial, and torch's load leaves the hole untouched."""
    import shutil
    import torch
    import torch.distributed.checkpoint as dcp
    e = env.entry("llama/unfused")
    lay = env.layout(env.fixtures / e["config"], "--dtype", "bfloat16")
    rc, d = env.diff(env.fixtures / e["path"], lay, "--no-optimizer")
    casts = [x for x in model_entries(d).values() if x["status"] == "cast"]
    check(rc == 0 and len(casts) == d["expected_model"] and all(x["real_load_fills"] for x in casts),
          f"cast: exit {rc}, {len(casts)} casts of {d['expected_model']}")
    # A config whose vocabulary differs from the saving run's: both vocab-sized tensors mismatch,
    # and DCP's planner raises on the first.
    c = json.loads((env.fixtures / e["config"]).read_text())
    c["vocab_size"] += 8
    other = env.tmp / "llama-vocab" / "config.json"
    other.parent.mkdir(exist_ok=True)
    other.write_text(json.dumps(c))
    rc, d = env.diff(env.fixtures / e["path"], env.layout(other), "--no-optimizer")
    bad = {x["name"] for x in model_entries(d).values() if x["status"] == "shape_mismatch"}
    check(bad == {"embedding.word_embeddings.weight", "output_layer.weight"}, f"mismatch: {bad}")
    check(rc == 1 and d["outcome"]["action"] == "raises" and
          "Size mismatch" in d["outcome"]["message"], f"mismatch outcome: {d['outcome']}")
    lay = env.layout(env.fixtures / e["config"])

    def model_state(md) -> dict:
        """Every stored model tensor, filled with a sentinel that no saved weight holds."""
        from torch.distributed.checkpoint.metadata import TensorStorageMetadata
        return {k: torch.full(v.size, 1234.5, dtype=v.properties.dtype)
                for k, v in md.state_dict_metadata.items()
                if k.startswith("model.") and isinstance(v, TensorStorageMetadata)}

    def torch_load(ckpt: Path, sd: dict) -> str:
        """torch's own partial load of `sd`; '' when it finishes, else what it raised."""
        from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
        try:
            dcp.load(sd, checkpoint_id=str(ckpt), planner=DefaultLoadPlanner(allow_partial_load=True))
            return ""
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as ex:  # noqa: BLE001 - CheckpointException is a BaseException
            return type(ex).__name__ or "raised"

    # A data file cut short (a save or a copy that stopped early): every model key stored at or
    # past the cut cannot be read, and torch's load raises on the first, however partial the
    # load is allowed to be. torch's own storage_data says which keys lost their bytes.
    broken = env.tmp / "llama-short"
    shutil.copytree(env.fixtures / e["path"], broken)
    md = dcp.FileSystemReader(str(broken)).read_metadata()
    items = [(i.offset, idx.fqn, i.relative_path) for idx, i in md.storage_data.items()
             if idx.fqn.startswith("model.")]
    cut, _, rel = max(items)
    lost = {fqn for off, fqn, r in items if r == rel and off >= cut}
    with open(broken / rel, "r+b") as f:
        f.truncate(cut)
    raised = torch_load(broken, model_state(md))
    check(raised != "", "torch loads a checkpoint whose data file is cut short")
    rc, d = env.diff(broken, lay, "--no-optimizer")
    bad = {x["sources"][0]["key"] for x in model_entries(d).values() if x["status"] == "unreadable"}
    check(rc == 1 and bad == lost, f"unreadable: exit {rc}, {sorted(bad ^ lost)[:4]}")
    check(all(not x["real_load_fills"] and Path(rel).name in x["reason"]
              for x in model_entries(d).values() if x["status"] == "unreadable"),
          "unreadable entries counted as filled, or not naming the file")
    o = d["outcome"]
    check(o["action"] == "raises" and "cannot be read" in o["message"] and not o["kept_at_init"],
          f"cut short: torch raised {raised}, diff says {o}")

    # A hole: the metadata loses one of the two chunks (one per saving rank) of a demo tensor,
    # torch's own Metadata pickled back the way its writer does. torch's load, strict as it is,
    # finishes without a word and leaves the hole at the destination's values: a partial
    # parameter, silently kept at its initial values there.
    import pickle
    holed = env.tmp / "demo-hole"
    shutil.copytree(env.demo, holed)
    it = next(p for p in holed.iterdir() if p.name.startswith("iter_"))
    md = dcp.FileSystemReader(str(it)).read_metadata()
    fqn = max((k for k in model_state(md) if len(md.state_dict_metadata[k].chunks) > 1),
              key=lambda k: md.state_dict_metadata[k].size.numel())
    gone = md.state_dict_metadata[fqn].chunks.pop()
    with open(it / ".metadata", "wb") as f:
        pickle.dump(md, f)
    sd = model_state(md)
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
    try:
        dcp.load(sd, checkpoint_id=str(it), planner=DefaultLoadPlanner(allow_partial_load=False))
        raised = ""
    except BaseException as ex:  # noqa: BLE001
        raised = type(ex).__name__
    region = sd[fqn][tuple(slice(o, o + n) for o, n in zip(gone.offsets, gone.sizes))]
    check(raised == "" and bool((region == 1234.5).all()) and not bool((sd[fqn] == 1234.5).all()),
          f"torch with a hole: raised {raised!r}, hole kept its values: {bool((region == 1234.5).all())}")
    rc, d = env.diff(holed, env.layout(env.demo / "config.json"))
    part = {x["sources"][0]["key"] for x in model_entries(d).values() if x["status"] == "partial"}
    o = d["outcome"]
    check(rc == 1 and part == {fqn}, f"partial: exit {rc}, {sorted(part)[:4]} != {fqn}")
    check(o["action"] == "silent" and len(o["kept_at_init"]) == 1, f"hole: {o}")


def case_strictness(env: Env) -> None:
    """Every --dist-ckpt-strictness value on a partial load with missing model keys, as
    validate_fsdp_dtensor_model_load treats them (docs/formats.md §6.11)."""
    e = env.entry("deepseek_v3/unfused")
    ckpt, lay = env.fixtures / e["path"], env.layout(env.fixtures / e["config"])
    want = {"assume_ok_unexpected": "raises", "raise_unexpected": "raises", "raise_all": "raises",
            "log_unexpected": "logs_and_continues", "log_all": "logs_and_continues",
            "return_unexpected": "returns_and_continues", "return_all": "returns_and_continues",
            "ignore_all": "silent"}
    mla = set(e["mla_fused_params"])
    for mode, action in want.items():
        rc, d = env.diff(ckpt, lay, "--disable-rule", "mla_down_proj",
                         "--no-strict-fsdp-dtensor-load", "--strictness", mode)
        o = d["outcome"]
        check(o["action"] == action, f"{mode}: {o['action']}, want {action}")
        if action == "raises":
            check(set(o["named_keys"]) <= mla and o["named_keys"] and not o["kept_at_init"],
                  f"{mode}: named {o['named_keys'][:3]}")
        else:
            check(set(o["kept_at_init"]) == mla, f"{mode}: kept {sorted(o['kept_at_init'])[:3]}")
    rc, _, err = run([env.cli, "diff", str(ckpt), "--layout", str(lay), "--strictness", "bogus"])
    check(rc == 2 and "bogus" in err and len(err.strip().splitlines()) == 1,
          f"unknown strictness: exit {rc}, {err!r}")


def case_torch_dist_moe(env: Env, inspect_fixtures: Path) -> None:
    """torch_dist with per-layer keys (moe_layer_freq as a list) and expert axes: each expert
    parameter found at its index of `mlp.experts.experts.linear_fcN.weight`, with its optimizer
    state (param, exp_avg, exp_avg_sq), against the layout from the checkpoint's args."""
    import torch.distributed.checkpoint as dcp
    ckpt = inspect_fixtures / "megatron_torch_dist_moe"
    it = next(p for p in ckpt.iterdir() if p.name.startswith("iter_"))
    md = dcp.FileSystemReader(str(it)).read_metadata().state_dict_metadata
    want = sum(v.size[0] if ".experts.experts." in k else 1 for k, v in md.items()
               if not k.startswith("optimizer.") and hasattr(v, "size"))
    states = sum(1 for k, v in md.items() if k.startswith("optimizer.state.") and hasattr(v, "size"))
    lay = env.tmp / "torch_dist_moe.json"
    rc, _, err = run([env.cli, "layout", "--from-config", str(ckpt), "-o", str(lay)])
    check(rc == 0, f"layout from args: {err}")
    rc, d = env.diff(ckpt, lay)
    check(rc == 0 and d["loadable_model"] == d["expected_model"] == want,
          f"exit {rc}, {d['loadable_model']} of {d['expected_model']}, torch has {want}")
    check(d["loadable_optimizer"] == d["expected_optimizer"] > 0, "optimizer not clean")
    expert_keys = [k for k in md if ".experts.experts." in k and not k.startswith("optimizer.")
                   and hasattr(md[k], "size")]
    want_states = sum(md[k].size[0] * 3 for k in expert_keys) + (states - 3 * len(expert_keys))
    check(d["expected_optimizer"] == want_states, f"optimizer entries {d['expected_optimizer']}, want {want_states}")
    for x in model_entries(d).values():
        if ".mlp.experts.linear_fc" in x["name"]:
            e = int(x["name"].rsplit("weight", 1)[1])
            check(x["sources"][0]["index"] == [e] and ".experts.experts." in x["sources"][0]["key"],
                  f"{x['name']}: {x['sources'][0]}")


def case_bad_layouts(env: Env) -> None:
    """Broken layouts and configs: exit 2 and one line naming the file (and the key, or the byte
    offset of a JSON syntax error)."""
    good = json.loads(env.layout(env.demo / "config.json").read_text())
    bad = {}
    bad["syntax.json"] = ('{"schema": "shardscope.layout/1", "params": [}', "offset")
    bad["schema.json"] = (json.dumps({"schema": "other", "params": []}), "key 'schema'")
    fused = next(p for p in good["params"] if "fusion" in p)
    fused["fusion"]["sections"][0]["size"] += 1
    bad["sections.json"] = (json.dumps(good), f"key '{fused['name']}'")
    shape = json.loads(json.dumps(good))
    shape["params"][0]["shape"] = [-1]
    bad["shape.json"] = (json.dumps(shape), f"key '{shape['params'][0]['name']}'")
    names = json.loads(json.dumps(good))
    names["parallel"]["layer_names"] = {"fsdp_dtensor": "per_stage"}
    bad["layer_names.json"] = (json.dumps(names), "key 'parallel.layer_names.fsdp_dtensor'")
    te = json.loads(json.dumps(good))
    te["transformer_engine"] = "yes"
    bad["transformer_engine.json"] = (json.dumps(te), "key 'transformer_engine'")
    typed = json.loads(json.dumps(good))
    typed["params"][1]["tp_dim"] = "0"
    bad["type.json"] = (json.dumps(typed), "key 'params[1].tp_dim'")
    layers = json.loads(json.dumps(good))
    layers["torch_dist"] = {"layers": "interleaved"}
    bad["torch_dist_layers.json"] = (json.dumps(layers), "key 'torch_dist.layers'")
    for name, (text, must) in bad.items():
        path = env.tmp / name
        path.write_text(text)
        rc, out, err = run([env.cli, "diff", str(env.demo), "--layout", str(path)])
        lines = err.strip().splitlines()
        check(rc == 2 and len(lines) == 1 and str(path) in err and must in err,
              f"{name}: exit {rc}, stderr {err!r}")
    cfg = env.tmp / "config-broken.json"
    cfg.write_text('{"model_type": "llama", "hidden_size": 64}')
    rc, _, err = run([env.cli, "layout", "--from-config", str(cfg)])
    check(rc == 2 and len(err.strip().splitlines()) == 1 and str(cfg) in err,
          f"config without sizes: exit {rc}, {err!r}")
    # Megatron arguments whose --moe-layer-freq is no expression Megatron would evaluate, or
    # one of the wrong length: one line naming the file and the key.
    for name, freq in (("freq-text", "[0]*2+x"), ("freq-length", "[0]*1+[1]*5")):
        cfg = env.tmp / f"{name}.json"
        cfg.write_text(json.dumps({"num_layers": 3, "hidden_size": 8, "num_attention_heads": 2,
                                   "padded_vocab_size": 16, "num_experts": 2,
                                   "position_embedding_type": "rope",
                                   "moe_layer_freq": freq}))
        rc, _, err = run([env.cli, "layout", "--from-config", str(cfg)])
        check(rc == 2 and len(err.strip().splitlines()) == 1 and str(cfg) in err and
              "key 'moe_layer_freq'" in err, f"{name}: exit {rc}, {err!r}")
    # A normalization Megatron does not build, and a --megatron-version that names no release:
    # one line naming the file and what is wrong.
    cfg = env.tmp / "norm.json"
    cfg.write_text(json.dumps({"num_layers": 2, "hidden_size": 8, "num_attention_heads": 2,
                               "padded_vocab_size": 16, "normalization": "BatchNorm",
                               "position_embedding_type": "rope"}))
    rc, _, err = run([env.cli, "layout", "--from-config", str(cfg)])
    check(rc == 2 and len(err.strip().splitlines()) == 1 and str(cfg) in err and
          "key 'normalization'" in err, f"normalization: exit {rc}, {err!r}")
    cfg.write_text(json.dumps({"num_layers": 2, "hidden_size": 8, "num_attention_heads": 2,
                               "padded_vocab_size": 16, "position_embedding_type": "rope"}))
    rc, _, err = run([env.cli, "layout", "--from-config", str(cfg), "--megatron-version", "x"])
    check(rc == 2 and len(err.strip().splitlines()) == 1 and "--megatron-version 'x'" in err,
          f"megatron version: exit {rc}, {err!r}")


def case_sequential(env: Env) -> None:
    e = env.entry("deepseek_v3/sequential")
    ckpt, cfg = env.fixtures / e["path"], env.fixtures / e["config"]
    rc, d = env.diff(ckpt, env.layout(cfg, "--sequential-experts"))
    check(rc == 0, f"sequential layout vs sequential checkpoint: exit {rc}")
    rc, d = env.diff(ckpt, env.layout(cfg))
    experts = [x for x in model_entries(d).values() if ".mlp.experts." in x["name"]]
    check(experts and all(x["status"] == "rename" and not x["real_load_fills"] for x in experts),
          "grouped model vs sequential checkpoint: experts not mapped by experts_form")


def case_against(env: Env) -> None:
    a, b = env.fixtures / "deepseek_v3/fused", env.fixtures / "deepseek_v3/unfused"
    rc, out, err = run([env.cli, "diff", str(a), "--against", str(b), "--json"])
    check(rc in (0, 1), f"exit {rc}: {err}")
    d = json.loads(out)
    kinds = {c["kind"] for c in d["changes"]}
    rules = {c.get("rule") for c in d["changes"] if c["kind"] == "renamed"}
    check("renamed" in kinds and {"swiglu", "mtp", "mla_down_proj"} <= rules, f"rules seen: {rules}")
    # Every fused key of the first is matched to its parts in the second: nothing removed/added.
    check(not [c for c in d["changes"] if c["kind"] in ("added", "removed") and
               c["key"].startswith("model.")], f"unmatched: {[c['key'] for c in d['changes'] if c['kind'] in ('added', 'removed')][:4]}")
    rc, out, _ = run([env.cli, "diff", str(b), "--against", str(b), "--json"])
    d = json.loads(out)
    check(rc == 0 and not d["changes"], "a checkpoint against itself has changes")


def case_pp_stage_local(env: Env) -> None:
    """NVIDIA/Megatron-LM#7452: Megatron-FSDP names decoder layers per pipeline stage, so the
    demo (saved at pp 1) loaded at pp 2 has stage 1 ask for decoder.layers.0… for its layers
    L/2…L-1. torch's own DCP load of those stage-local keys says what each one really gets:
    where the key is stored with the requested shape it loads another layer's weights (the diff
    must say wrong_source), elsewhere it is missing (unloadable; a strict load raises); the
    stored layers past L/2 nothing asks for. verify --pp 2 reads exactly those keys."""
    import re
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
    data = next(p for p in env.demo.iterdir() if p.name.startswith("iter_"))
    md = dcp.FileSystemReader(str(data)).read_metadata().state_dict_metadata
    layer_of = lambda k: int(m[1]) if (m := re.search(r"\.decoder\.layers\.(\d+)\.", k)) else -1
    layers = 1 + max(layer_of(k) for k in md if k.startswith("model."))
    half = layers // 2  # Megatron's even split over 2 stages
    lay = env.layout(env.demo / "config.json", "--pp", "2")
    rc, d = env.diff(env.demo, lay)
    entries = model_entries(d)

    def local(k: str) -> str:
        g = layer_of(k)
        return k.replace(f".decoder.layers.{g}.", f".decoder.layers.{g - half}.", 1)

    # Parameters stored under their own name (no rule needed): what torch gives the stage-local key.
    checked, wrong_want, missing_want = 0, set(), set()
    for name, x in entries.items():
        key = "model.module." + name
        if layer_of(key) < half or key not in md:
            continue
        lk = local(key)
        if lk in md and tuple(md[lk].size) == tuple(md[key].size):
            got = {lk: torch.full(tuple(md[lk].size), 1234.5, dtype=md[lk].properties.dtype)}
            dcp.load(got, checkpoint_id=str(data), planner=DefaultLoadPlanner(allow_partial_load=True))
            own = {key: torch.empty(tuple(md[key].size), dtype=md[key].properties.dtype)}
            dcp.load(own, checkpoint_id=str(data))
            if not torch.equal(got[lk], own[key]):  # it really gets another layer's weights
                wrong_want.add(name)
        elif lk not in md:
            missing_want.add(name)
        checked += 1
    got_wrong = {n for n, x in entries.items() if x["status"] == "wrong_source"}
    got_missing = {n for n, x in entries.items() if x["status"] == "unloadable"}
    check(checked > 0 and wrong_want and wrong_want <= got_wrong,
          f"wrong_source: torch loads other layers into {sorted(wrong_want - got_wrong)[:4]}")
    check(missing_want and missing_want <= got_missing,
          f"unloadable: torch finds no key for {sorted(missing_want - got_missing)[:4]}")
    check(all(not entries[n]["real_load_fills"] and n in d["outcome"]["loaded_wrong"]
              for n in got_wrong), "wrong_source entries must be reported as loaded wrong")
    check(not any(layer_of("." + n) < half and x["status"] == "wrong_source"
                  for n, x in entries.items()), "stage 0 has no wrong sources")
    # What nothing reads: the stored layers past every stage's local range.
    unread = {u["key"] for u in d["unconsumed"] if u["key"].startswith("model.")}
    stored_past = {k for k in md if k.startswith("model.") and layer_of(k) >= half}
    check(stored_past and stored_past <= unread and all(
        "no stage reads it" in u["note"] for u in d["unconsumed"] if u["key"] in stored_past),
        f"stored layers nobody reads: {sorted(stored_past - unread)[:3]}")
    # A strict load raises on the first missing key, as torch's planner does.
    check(rc == 1 and d["outcome"]["action"] == "raises" and
          "Missing key in checkpoint state_dict" in d["outcome"]["message"],
          f"strict outcome: {d['outcome']['action']}: {d['outcome']['message'][:120]}")
    # verify --pp 2 plans the load as those names make it happen: each wrong source is read from
    # the key the load asks for, bit for bit, and reported as such.
    rc, out, err = run([env.cli, "verify", str(env.demo), "--layout", str(lay), "--pp", "2",
                        "--dp", "1", "--json", "--quiet"])
    v = json.loads(out) if out.strip() else {}
    # Buffers (a router's expert_bias) are read whole on one rank of their stage, so a buffer a
    # wrong source fills comes out wrong_source like a parameter.
    buffers = {p["name"] for p in json.loads(lay.read_text())["params"]
               if p.get("optimizer_state") is False}
    got_v = {p["name"] for p in v.get("params", []) if p["outcome"] == "wrong_source"}
    check(rc == 1 and got_v == got_wrong and v.get("wrong_source") == len(got_wrong) and
          v.get("not_checked") == 0,
          f"verify: exit {rc}, wrong_source {sorted(got_v ^ got_wrong)[:4]} {err.strip()[:200]}")
    check(got_wrong & buffers, "no buffer is filled from the wrong key: the case lost its point")


def case_cast_loss(env: Env) -> None:
    """pytorch/pytorch#187138: float32 saved, bfloat16 requested. DCP's load casts silently; the
    diff warns (exit 0), --fail-on-cast makes it a problem (exit 1), and --measure-casts reports
    for each tensor the worst change torch's own cast makes and how many values it changes."""
    import torch
    import torch.distributed.checkpoint as dcp
    e = env.entry("llama/unfused")
    ckpt = env.fixtures / e["path"]
    lay = env.layout(env.fixtures / e["config"], "--dtype", "bfloat16")
    rc, d = env.diff(ckpt, lay, "--no-optimizer")
    warned = [w for w in d["outcome"]["warnings"] if w.startswith("cast: ")]
    check(rc == 0 and d["clean"] and d["passes"] and warned and "may change" in warned[0],
          f"unmeasured: exit {rc}, warnings {d['outcome']['warnings']}")
    check(d["outcome"]["lossy_casts"] == len(model_entries(d)), "every float32 -> bfloat16 narrows")
    rc, d = env.diff(ckpt, lay, "--no-optimizer", "--fail-on-cast")
    check(rc == 1 and d["clean"] and not d["passes"], f"--fail-on-cast: exit {rc}")
    rc, d = env.diff(ckpt, lay, "--no-optimizer", "--measure-casts")
    check(rc == 0 and d["options"]["measure_casts"], f"--measure-casts: exit {rc}")
    measured = 0
    for x in model_entries(d).values():
        keys = {s["key"] for s in x["sources"]}
        if len(keys) != 1 or not x.get("cast_loss"):
            check(not x.get("narrowing") or x.get("cast_loss"), f"{x['name']}: not measured")
            continue
        key = keys.pop()
        sd = {key: torch.empty(x["sources"][0]["shape"], dtype=torch.float32)}
        dcp.load(sd, checkpoint_id=str(ckpt))
        t = sd[key].double()
        back = sd[key].to(torch.bfloat16).double()
        diff = torch.where((back == t) | t.isnan(), 0.0, (back - t).abs())
        loss = x["cast_loss"]
        check(loss["max_abs"] == diff.max().item() and loss["changed"] == int((diff != 0).sum())
              and loss["count"] == t.numel(),
              f"{x['name']}: cast loss {loss}, torch {diff.max().item()}, {int((diff != 0).sum())}")
        measured += 1
    check(measured > 0, "no cast measured against torch")
    worst = max(model_entries(d).values(), key=lambda x: (x.get("cast_loss") or {}).get("max_abs", -1))
    check(any(worst["name"] in w and "worst change" in w for w in d["outcome"]["warnings"]),
          f"the warning names the worst tensor {worst['name']}: {d['outcome']['warnings']}")
    # Loaded as saved: nothing to warn about.
    rc, d = env.diff(ckpt, env.layout(env.fixtures / e["config"]), "--no-optimizer", "--fail-on-cast")
    check(rc == 0 and not d["outcome"]["warnings"], f"float32 layout: {d['outcome']['warnings']}")


def case_unconsumed_shapes(env: Env) -> None:
    """Keys nothing consumes, explained by their shape: layer 1's routed experts saved stacked in
    one [E, …] tensor (Megatron-LM#5844, the grouped 3-D experts of NVIDIA-NeMo/Automodel#2595)
    where the model asks for linear_fc2.weight<e>, and a layer past the model's depth. The
    checkpoint is the DeepSeek-V3 fixture rewritten by torch with exactly those two changes."""
    import re
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    e = env.entry("deepseek_v3/unfused")
    src = env.fixtures / e["path"]
    md = dcp.FileSystemReader(str(src)).read_metadata().state_dict_metadata
    sd = {k: torch.empty(tuple(v.size), dtype=v.properties.dtype) for k, v in md.items()
          if k.startswith("model.") and isinstance(v, TensorStorageMetadata)}
    dcp.load(sd, checkpoint_id=str(src))
    experts = json.loads((env.fixtures / e["config"]).read_text())["n_routed_experts"]
    stem = "model.module.decoder.layers.1.mlp.experts.linear_fc2.weight"
    per_expert = [f"{stem}{i}" for i in range(experts)]
    sd[stem] = torch.stack([sd.pop(k) for k in per_expert])
    layers = 1 + max(int(m[1]) for k in sd if (m := re.search(r"\.decoder\.layers\.(\d+)\.", k)))
    extra = {k.replace(f".layers.{layers - 1}.", f".layers.{layers}.", 1): v.clone()
             for k, v in sd.items() if f".decoder.layers.{layers - 1}." in k}
    sd.update(extra)
    out = env.tmp / "dsv3-reshaped"
    dcp.save(sd, checkpoint_id=str(out))
    rc, d = env.diff(out, env.layout(env.fixtures / e["config"]), "--no-optimizer")
    notes = {u["key"]: u["note"] for u in d["unconsumed"]}
    check(stem in notes and f"expert count ({experts})" in notes[stem] and "weight0" in notes[stem],
          f"stacked experts: {notes.get(stem)}")
    check(extra and all(k in notes and f"past the model's {layers} decoder layers" in notes[k]
                        for k in extra), f"extra layer: {[notes.get(k) for k in list(extra)[:1]]}")
    missing = {x["name"] for x in model_entries(d).values() if x["status"] == "unloadable"}
    want = {k[len("model.module."):] for k in per_expert}
    check(missing == want, f"unloadable: {sorted(missing ^ want)[:4]}")
    check(rc == 1 and not d["clean"], f"exit {rc}")


def case_config(env: Env) -> None:
    """`diff CKPT --config C [--tp N]` builds the layout itself, as the window does: the same
    entries, outcome and exit as `diff CKPT --layout` of `layout --from-config C`, for the demo
    and for the DeepSeek-V3 family at TP 2; a repair preview's command writes that layout first
    and then runs, and the fix it writes loads clean."""
    for ckpt, config, extra in ((env.demo, env.demo / "config.json", []),
                                (env.fixtures / "deepseek_v3/unfused",
                                 env.fixtures / "deepseek_v3/config.json", ["--tp", "2"]),
                                (env.demo, env.demo / "config.json",
                                 ["--disable-rule", "mla_down_proj"])):
        lay = env.tmp / f"config-{len(extra)}.json"
        parallel = [a for a in extra if a != "--disable-rule" and a != "mla_down_proj"]
        rules = [a for a in extra if a not in parallel]
        rc, _, err = run([env.cli, "layout", "--from-config", str(config), *parallel, "-o", str(lay)])
        check(rc == 0, f"layout --from-config {config}: {err}")
        a = run([env.cli, "diff", str(ckpt), "--layout", str(lay), *rules, "--json"])
        b = run([env.cli, "diff", str(ckpt), "--config", str(config), *extra, "--json"])
        ja, jb = json.loads(a[1] or "{}"), json.loads(b[1] or "{}")
        for j in (ja, jb):
            j.pop("against", None)
            j.pop("repair", None)
        check(a[0] == b[0] and ja == jb and ja.get("entries"),
              f"diff --config {config} {extra}: exit {b[0]} vs {a[0]} {b[2][:200]}; "
              f"same result: {ja == jb}")
    # The preview's command, run as printed (from a scratch directory: it writes there).
    rc, out, _ = run([env.cli, "diff", str(env.demo.resolve()), "--config",
                      str((env.demo / "config.json").resolve()), "--disable-rule", "mla_down_proj",
                      "--json"])
    command = json.loads(out or "{}").get("repair", {}).get("command", "")
    work = env.tmp / "preview"
    work.mkdir()
    fixed = work / "demo-fixed"
    command = command.replace(str(env.demo.resolve()) + "-fixed", str(fixed)).replace(
        "shardscope-cli ", shlex.quote(str(Path(env.cli).resolve())) + " ")
    p = subprocess.run(command, shell=True, cwd=work, capture_output=True, text=True, timeout=300)
    check(command.count("&&") == 1 and p.returncode == 0 and fixed.is_dir(),
          f"preview command {command!r}: exit {p.returncode} {p.stderr[-300:]}")
    rc, _, err = run([env.cli, "diff", str(fixed), "--config", str(env.demo / "config.json"),
                      "--disable-rule", "mla_down_proj"])
    check(rc == 0, f"the preview's repair does not load clean: exit {rc} {err[-200:]}")


CASES = {
    "config": case_config,
    **{f"layout_{f}": (lambda env, f=f: case_layout(env, f)) for f in ("llama", "deepseek_v3", "qwen3_next")},
    **{f"unfused_{f}": (lambda env, f=f: case_unfused(env, f)) for f in ("llama", "deepseek_v3", "qwen3_next")},
    **{f"fused_{f}": (lambda env, f=f: case_fused(env, f)) for f in ("llama", "deepseek_v3", "qwen3_next")},
    **{f"reverse_{f}": (lambda env, f=f: case_reverse(env, f)) for f in ("llama", "deepseek_v3", "qwen3_next")},
    "seed_mla": lambda env: case_seed_mla(env, env.fixtures / "deepseek_v3/unfused",
                                          env.fixtures / "deepseek_v3/config.json",
                                          env.entry("deepseek_v3/unfused")["mla_fused_params"]),
    "demo": case_demo,
    "bridge": case_bridge,
    "bridge_tp2": case_bridge_tp2,
    "gdn_fused": case_gdn_fused,
    "sequential": case_sequential,
    "experts_local": case_experts_local,
    "megatron_args": case_megatron_args,
    "mla_unfused_model": case_mla_unfused_model,
    "cast_and_partial": case_cast_and_partial,
    "strictness": case_strictness,
    "bad_layouts": case_bad_layouts,
    "reports": case_reports,
    "against": case_against,
    "pp_stage_local": case_pp_stage_local,
    "cast_loss": case_cast_loss,
    "unconsumed_shapes": case_unconsumed_shapes,
    "torch_dist": lambda env: case_torch_dist(env, env.inspect_fixtures),
    "torch_dist_moe": lambda env: case_torch_dist_moe(env, env.inspect_fixtures),
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--demo", required=True)
    ap.add_argument("--inspect-fixtures", help="tools/make_fixtures.py output (torch_dist case)")
    ap.add_argument("case", choices=sorted(CASES))
    a = ap.parse_args()
    CASES[a.case](Env(a))
    for f in FAILURES:
        print("FAIL", f)
    print(f"{a.case}: {'ok' if not FAILURES else f'{len(FAILURES)} failures'}")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
