#!/usr/bin/env python3
"""What each format's real loader does with a model's request, against `shardscope-cli diff`.

    check_loaders.py --cli CLI CASE

Each case writes a small checkpoint with real torch (or megatron-core, or the safetensors
package), asks the real loader to load it into a model that differs in one way (a key missing, a
key extra, a shape changed, other parallel sizes) and checks that the diff's load outcome says
what that loader did: the same action, the same message, the same keys. Nothing expected is typed
in: torch and Megatron produce every message compared here.

Cases: state_dict (torch.save and safetensors via nn.Module.load_state_dict, Hugging Face names
not under `model.`), dcp (plain torch.distributed.checkpoint), torch_dist (megatron-core's
dist_checkpointing.load under every --dist-ckpt-strictness), legacy (Megatron's
mp_rank_XX/model_optim_rng.pt files through load_model_state_dict's strict-then-retry).
Issue 38's named causes, each rebuilt from its writer: zero3 (DeepSpeed ZeRO-3 placeholders),
mxfp4 (gpt-oss's quantized experts), dcp_optimizer (a raw optimizer.state_dict() under DCP, and
its repair), causes (size changes named by their setting), peft_lora, added_settings and
grouped_mlp (the tracker threads each docstring cites).
Exit 0 when every check holds.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import torch
import torch.nn as nn

FAILURES: list[str] = []


def check(cond: bool, what: str) -> None:
    if not cond:
        FAILURES.append(what)


class Env:
    def __init__(self, cli: str):
        self.cli = cli
        self.tmp = Path(tempfile.mkdtemp(prefix="ss-loaders-"))

    def layout(self, name: str, params: dict[str, tuple], tp: int = 1, pp: int = 1,
               tp_dims: dict[str, int] | None = None, te: bool = False,
               flags: dict | None = None) -> Path:
        """A layout of exactly these parameters (the model's request), by their live names."""
        tp_dims = tp_dims or {}
        lay = {"schema": "shardscope.layout/1", "family": "test", "source": name,
               "parallel": {"tp": tp, "pp": pp, "ep": 1, "etp": 1, "dp_shard": 1},
               "transformer_engine": te, **(flags or {}),
               "params": [{"name": n, "shape": list(shape), "dtype": str(dtype).split(".")[-1],
                           "tp_dim": tp_dims.get(n, -1)} for n, (shape, dtype) in params.items()]}
        out = self.tmp / f"{name}.json"
        out.write_text(json.dumps(lay))
        return out

    def diff(self, ckpt: Path, layout: Path, *extra: str) -> dict:
        p = subprocess.run([self.cli, "diff", str(ckpt), "--layout", str(layout), "--json",
                            "--no-optimizer", *extra], capture_output=True, text=True, timeout=300)
        if p.returncode == 2 or not p.stdout.strip():
            FAILURES.append(f"diff {ckpt.name} could not read: {p.stderr.strip()}")
            return {"outcome": {"action": "?", "message": "", "kept_at_init": []}}
        d = json.loads(p.stdout)
        d["exit"] = p.returncode
        return d


class ExtraStateModule(nn.Module):
    """Stands for a Transformer Engine module: torch asks for its `_extra_state` in state dicts
    because it overrides get_extra_state / set_extra_state, as TE's modules do."""

    def get_extra_state(self):
        return None

    def set_extra_state(self, state):
        pass


def module_from(params: dict[str, tuple], cls: str = "Model", te: set[str] = frozenset()) -> nn.Module:
    """A real nn.Module whose state_dict() has exactly these names, shapes and dtypes; the
    modules named in `te` carry an extra state like Transformer Engine's."""
    root = type(cls, (nn.Module,), {})()

    def module(path: list[str]) -> nn.Module:
        m = root
        for i, part in enumerate(path):
            if part not in m._modules:
                te_module = ".".join(path[:i + 1]) in te
                m.add_module(part, ExtraStateModule() if te_module else nn.Module())
            m = m._modules[part]
        return m

    for name, (shape, dtype) in params.items():
        *path, leaf = name.split(".")
        module(path).register_parameter(
            leaf, nn.Parameter(torch.zeros(shape, dtype=dtype), requires_grad=False))
    for name in te:
        module(name.split("."))
    return root


def quoted_sets(message: str) -> tuple[list[str], dict[str, set[str]]]:
    """A load_state_dict message as its lines with the key lists taken out, and those lists
    as sets (the order of keys follows module registration, which a layout does not record)."""
    import re
    lines, sets = [], {}
    for line in message.split("\n"):
        m = re.match(r'(\t?(?:Missing|Unexpected) key\(s\) in state_dict: )(.*)', line)
        if m:
            sets[m[1]] = set(re.findall(r'"([^"]+)"', m[2]))
            lines.append(m[1])
        else:
            lines.append(line)
    return lines, sets


def error_of(fn) -> tuple[str, str] | None:
    """The exception a call raises, as (type name, message), or None."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn()
    except BaseException as e:  # DCP's CheckpointException is a BaseException
        return type(e).__name__, str(e)
    return None


def hf_model() -> dict[str, tuple]:
    """Hugging Face Llama names: `model.…` beside `lm_head.weight` (not under `model.`)."""
    h, f, v = 8, 16, 32
    p = {"model.embed_tokens.weight": ((v, h), torch.float32)}
    for i in range(2):
        q = f"model.layers.{i}"
        p |= {f"{q}.input_layernorm.weight": ((h,), torch.float32),
              f"{q}.self_attn.q_proj.weight": ((h, h), torch.float32),
              f"{q}.self_attn.k_proj.weight": ((h // 2, h), torch.float32),
              f"{q}.mlp.gate_proj.weight": ((f, h), torch.float32),
              f"{q}.mlp.down_proj.weight": ((h, f), torch.float32)}
    p |= {"model.norm.weight": ((h,), torch.float32), "lm_head.weight": ((v, h), torch.float32)}
    return p


def variants(params: dict[str, tuple]) -> dict[str, tuple[dict, dict]]:
    """(what the model asks for, what the checkpoint holds) per failure."""
    stored = dict(params)
    keys = list(params)
    missing = dict(stored)
    del missing[keys[3]]
    missing["model.layers.9.mlp.up_proj.weight"] = ((4, 8), torch.float32)
    shape = dict(stored)
    shape[keys[2]] = ((params[keys[2]][0][0] + 2, *params[keys[2]][0][1:]), torch.float32)
    return {"clean": (params, stored), "missing_and_unexpected": (params, missing),
            "size_mismatch": (params, shape)}


def tensors(params: dict[str, tuple]) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return {n: torch.randn(s, generator=g).to(d) for n, (s, d) in params.items()}


def case_state_dict(env: Env) -> None:
    """torch.save and safetensors files of a flat state dict, loaded by
    nn.Module.load_state_dict: strict raises torch's own message, non-strict returns the keys."""
    from safetensors.torch import save_file
    for fmt in ("safetensors", "torchsave"):
        for name, (want, held) in variants(hf_model()).items():
            sd = tensors(held)
            path = env.tmp / f"{name}.{fmt}"
            if fmt == "safetensors":
                path = path.with_suffix(".safetensors")
                save_file(sd, str(path))
            else:
                path = path.with_suffix(".pt")
                torch.save(sd, path)
            lay = env.layout(f"{fmt}-{name}", want)
            loaded = torch.load(path) if fmt == "torchsave" else None
            model = module_from(want)
            real = error_of(lambda: model.load_state_dict(loaded or sd, strict=True))
            d = env.diff(path, lay)
            o = d["outcome"]
            if real is None:
                check(o["action"] == "loads" and d["exit"] == 0,
                      f"{fmt}/{name}: torch loads it, the diff says {o['action']}")
            else:
                kind, msg = real
                check(o["action"] == "raises" and
                      o["message"] == f"{kind}: " + msg.replace("for Model:", "for <model>:"),
                      f"{fmt}/{name}: torch raises {kind}: {msg!r}; the diff: {o['message']!r}")
            # strict=False: size mismatches still raise; missing keys come back and keep init.
            model = module_from(want)
            real = error_of(lambda: model.load_state_dict(loaded or sd, strict=False))
            d = env.diff(path, lay, "--no-strict")
            o = d["outcome"]
            if real is not None:
                check(o["action"] == "raises" and
                      o["message"] == f"{real[0]}: " + real[1].replace("for Model:", "for <model>:"),
                      f"{fmt}/{name} strict=False: torch raises {real[1]!r}; diff {o['message']!r}")
            else:
                res = module_from(want).load_state_dict(loaded or sd, strict=False)
                if res.missing_keys or res.unexpected_keys:
                    check(o["action"] == "returns_and_continues" and
                          set(o["kept_at_init"]) == set(res.missing_keys) and
                          repr(res.missing_keys) in o["message"] and
                          repr(res.unexpected_keys) in o["message"],
                          f"{fmt}/{name} strict=False: torch returns {res}; diff {o}")
                else:
                    check(o["action"] == "loads", f"{fmt}/{name} strict=False: {o}")
    # Hugging Face names stay as they are: lm_head.weight (not under model.) is matched.
    d = env.diff(env.tmp / "clean.safetensors", env.tmp / "safetensors-clean.json")
    got = {x["name"]: x for x in d.get("entries", []) if x["section"] == "model"}
    check(got.get("lm_head.weight", {}).get("status") == "ok" and
          got.get("model.norm.weight", {}).get("status") == "ok" and
          d.get("counts", {}).get("loadable_model") == len(hf_model()),
          f"HF names: {[(n, x['status']) for n, x in got.items()][:4]}")


def case_dcp(env: Env) -> None:
    """A plain DCP directory, loaded by dcp.load with DefaultLoadPlanner: the first request in
    order that is missing or of another size raises (wrapped in CheckpointException, whose last
    line the diff quotes); allow_partial_load=True skips missing keys silently."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
    for name, (want, held) in variants(hf_model()).items():
        path = env.tmp / f"dcp-{name}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.save(tensors(held), checkpoint_id=str(path))
        lay = env.layout(f"dcp-{name}", want)
        for partial in (False, True):
            req = {n: torch.empty(s, dtype=t) for n, (s, t) in want.items()}
            real = error_of(lambda: dcp.load(req, checkpoint_id=str(path),
                                             planner=DefaultLoadPlanner(allow_partial_load=partial)))
            d = env.diff(path, lay, *(["--no-strict"] if partial else []))
            o = d["outcome"]
            tag = f"dcp/{name}{' partial' if partial else ''}"
            check(d.get("format") == "dcp", f"{tag}: format {d.get('format')}")
            if real is not None:
                last = real[1].strip().splitlines()[-1]  # "ValueError: Size mismatch …"
                check(o["action"] == "raises" and o["message"].startswith(last),
                      f"{tag}: torch raises {last!r}; diff {o['message']!r}")
                continue
            # What the load left untouched: compare with what the request held before.
            untouched = {n for n in want if n not in held}
            check((o["action"] == "loads") == (not untouched) and
                  set(o["kept_at_init"]) == untouched,
                  f"{tag}: torch loads and leaves {sorted(untouched)}; diff {o}")


def case_param_groups(env: Env) -> None:
    """Megatron-FSDP's optimizer groups (param_to_group_meta) stay under the live names: the
    split handlers rename optimizer.state only (fsdp_dtensor_checkpoint.py). A checkpoint saved
    by an MLA model that held linear_q_down_proj / linear_kv_down_proj and input_layernorm apart,
    loaded strictly by the fused model with its optimizer, raises on a param_to_group_meta key
    (DCP's DefaultLoadPlanner, the one Megatron's strict fsdp_dtensor load uses); a partial load
    takes this run's group. The diff must say the same, naming the split groups it found."""
    import re
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
    cfg = env.tmp / "mla-config.json"
    cfg.write_text(json.dumps({
        "model_type": "deepseek_v3", "hidden_size": 16, "num_hidden_layers": 2,
        "num_attention_heads": 2, "intermediate_size": 32, "vocab_size": 32,
        "q_lora_rank": 8, "kv_lora_rank": 8, "qk_nope_head_dim": 4, "qk_rope_head_dim": 4,
        "v_head_dim": 4, "n_routed_experts": 0, "tie_word_embeddings": False}))
    lay = env.tmp / "mla-fused.json"
    p = subprocess.run([env.cli, "layout", "--from-config", str(cfg), "-o", str(lay)],
                       capture_output=True, text=True)
    check(p.returncode == 0, f"layout: {p.stderr.strip()}")
    if p.returncode:
        return
    live = {x["name"]: x["shape"] for x in json.loads(lay.read_text())["params"]}

    # Megatron's handlers (handle_mla_down_proj_in_state_dict, handle_swiglu_in_state_dict),
    # written here from their source: live name -> on-disk names and row counts.
    def on_disk(name: str, shape: list[int]) -> list[tuple[str, list[int]]]:
        if name.endswith(".linear_qkv_down_proj.weight"):
            q = 8
            base = name[: -len("linear_qkv_down_proj.weight")]
            return [(base + "linear_q_down_proj.weight", [q, shape[1]]),
                    (base + "linear_kv_down_proj.weight", [shape[0] - q, shape[1]])]
        m = re.match(r"(.*\.layers\.\d+\.)self_attention\.linear_qkv_down_proj\.layer_norm_weight$", name)
        if m:
            return [(m[1] + "input_layernorm.weight", shape)]
        if name.endswith(".mlp.linear_fc1.weight"):
            return [(name + "_w", [shape[0] // 2, shape[1]]), (name + "_v", [shape[0] // 2, shape[1]])]
        return [(name, shape)]

    # The saving model held the MLA parts apart: its live names are the on-disk ones, but its
    # SwiGLU fc1 was one parameter, as in every Megatron model.
    saving_live = {}
    for n, s in live.items():
        for d, ds in on_disk(n, s):
            saving_live[n if n.endswith(".mlp.linear_fc1.weight") else d] = \
                s if n.endswith(".mlp.linear_fc1.weight") else ds
    disk = {d: ds for n, s in live.items() for d, ds in on_disk(n, s)}

    def group_meta(names) -> dict:
        opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=3e-4, weight_decay=0.1)
        meta = {k: v for k, v in opt.param_groups[0].items() if k != "params"}
        return {"module.module.module." + n: dict(meta) for n in names}

    def state_dict(groups_of) -> dict:
        g = torch.Generator().manual_seed(3)
        return {"model": {"module." + d: torch.randn(s, generator=g) for d, s in disk.items()},
                "optimizer": {"state": {"module.module.module." + d:
                                        {"exp_avg": torch.randn(s, generator=g),
                                         "exp_avg_sq": torch.rand(s, generator=g),
                                         "step": torch.tensor(20.0)}
                                        for d, s in disk.items()},
                              "param_to_group_meta": group_meta(groups_of)}}

    path = env.tmp / "mla-split-saved"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state_dict(saving_live), checkpoint_id=str(path))
    for partial in (False, True):
        request = state_dict(live)  # the fused model's request, after the same handlers
        real = error_of(lambda: dcp.load(request, checkpoint_id=str(path),
                                         planner=DefaultLoadPlanner(allow_partial_load=partial)))
        p = subprocess.run([env.cli, "diff", str(path), "--layout", str(lay), "--json",
                            *(["--no-strict"] if partial else [])],
                           capture_output=True, text=True, timeout=300)
        if p.returncode == 2:
            check(False, f"diff could not read: {p.stderr.strip()}")
            return
        d = json.loads(p.stdout)
        o = d["outcome"]
        tag = "partial" if partial else "strict"
        if real is not None:
            last = real[1].strip().splitlines()[-1]
            check(o["action"] == "raises" and o["message"].startswith(last) and
                  ".param_to_group_meta." in last,
                  f"{tag}: torch raises {last!r}; diff {o['action']} {o['message']!r}")
        else:
            check(partial and o["action"] == "loads" and not o["kept_at_init"],
                  f"{tag}: torch loads; diff {o}")
        groups = {x["param"]: x for x in d["entries"] if x["name"].endswith(".param_group")}
        fused = [n for n in live if ".linear_qkv_down_proj." in n]
        check(fused and all(groups[n]["status"] == "unloadable" and "held them apart" in
                            groups[n]["reason"] for n in fused) and
              all(groups[n]["status"] == "ok" for n in live if n not in fused),
              f"{tag}: groups {[(n, groups.get(n, {}).get('status')) for n in live][:6]}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def megatron_model_parallel():
    """megatron_on_cpu() with TP = PP = 1 model-parallel groups, its warnings silenced."""
    from megatron.core import parallel_state as ps
    with megatron_on_cpu(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ps.initialize_model_parallel(1, 1)
        try:
            yield
        finally:
            ps.destroy_model_parallel()


@contextlib.contextmanager
def megatron_on_cpu():
    """megatron-core 0.16 on a machine without CUDA, over Gloo (the shims the real save needs:
    its writer synchronises the device and puts a flag on the current device)."""
    import logging
    import torch.distributed as dist
    logging.getLogger("megatron").setLevel(logging.ERROR)  # its warnings are what we compare
    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.current_device = lambda: "cpu"
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def case_torch_dist(env: Env) -> None:
    """megatron-core's own save and load of a torch_dist checkpoint (per-layer keys), under
    every strictness: the diff's action and message are what dist_checkpointing.load does."""
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing import ShardedTensor
    from megatron.core.dist_checkpointing.validation import StrictHandling

    def megatron_names(p: dict[str, tuple]) -> dict[str, tuple]:
        return {k.replace("model.layers.", "decoder.layers."): v for k, v in p.items()}

    def sharded(p: dict[str, tuple]) -> dict:
        return {n: ShardedTensor.from_rank_offsets(n, t) for n, t in tensors(p).items()}

    with megatron_on_cpu(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, (want, held) in variants(hf_model()).items():
            want, held = megatron_names(want), megatron_names(held)
            path = env.tmp / f"torch_dist-{name}"
            path.mkdir()
            with contextlib.redirect_stdout(io.StringIO()):
                dist_checkpointing.save(sharded(held), str(path))
            lay = env.layout(f"torch_dist-{name}", want)
            for strict in StrictHandling:
                result = {}
                real = error_of(lambda: result.setdefault("r", dist_checkpointing.load(
                    sharded(want), str(path), strict=strict)))
                d = env.diff(path, lay, "--strictness", strict.value)
                o = d["outcome"]
                tag = f"torch_dist/{name} {strict.value}"
                check(d.get("format") == "torch_dist", f"{tag}: format {d.get('format')}")
                if real is not None:
                    # CheckpointException wraps the planner's error: its last line; Megatron's own
                    # CheckpointingException is raised as it is.
                    kind, msg = real
                    text = msg.strip().splitlines()[-1] if kind == "CheckpointException" else \
                        f"{kind}: {msg}"
                    text = text.replace("megatron.core.dist_checkpointing.core.", "")
                    same = o["message"] == text or (
                        "{" in text and set_of(o["message"]) == set_of(text) and
                        o["message"].split("{")[0] == text.split("{")[0])
                    check(o["action"] == "raises" and same,
                          f"{tag}: Megatron raises {text!r}; diff {o['action']}: {o['message']!r}")
                    continue
                untouched = {n for n in want if n not in held}
                want_action = "loads" if not untouched else {
                    "log_unexpected": "logs_and_continues", "log_all": "logs_and_continues",
                    "return_unexpected": "returns_and_continues",
                    "return_all": "returns_and_continues", "ignore_all": "silent"}[strict.value]
                check(o["action"] in (want_action, "logs_and_continues" if strict.value ==
                                      "log_all" else want_action) and
                      set(o["kept_at_init"]) == untouched,
                      f"{tag}: Megatron loads, leaving {sorted(untouched)}; diff {o}")
                if isinstance(result.get("r"), tuple):  # return_*: (state dict, missing, unexpected)
                    check(set(o["named_keys"]) == set(result["r"][2]),
                          f"{tag}: Megatron returns {result['r'][2]}; diff names {o['named_keys']}")


def set_of(text: str) -> set[str]:
    """The names of every Python set literal in a message."""
    import re
    out = set()
    for body in re.findall(r"\{([^}]*)\}", text):
        out |= {s.strip().strip("'") for s in body.split(",") if s.strip()}
    return out


def case_legacy(env: Env) -> None:
    """Megatron's legacy torch format at TP 2: mp_rank_0r/model_optim_rng.pt with TP-local
    shards under `model`. Megatron's load_model_state_dict loads strictly, and when that raises
    retries with strict=False and prints what it returned; a size mismatch raises from the retry.
    A model with other parallel sizes asks for rank files that are not there."""
    h, f, v, tp = 8, 16, 32, 2
    full = {"embedding.word_embeddings.weight": ((v, h), torch.bfloat16, 0),
            "decoder.final_layernorm.weight": ((h,), torch.bfloat16, -1)}
    for i in range(2):
        q = f"decoder.layers.{i}"
        full |= {f"{q}.self_attention.linear_qkv.layer_norm_weight": ((h,), torch.bfloat16, -1),
                 f"{q}.self_attention.linear_qkv.weight": ((3 * h, h), torch.bfloat16, 0),
                 f"{q}.self_attention.linear_proj.weight": ((h, 3 * h), torch.bfloat16, 1),
                 f"{q}.mlp.linear_fc1.weight": ((f, h), torch.bfloat16, 0),
                 f"{q}.mlp.linear_fc2.weight": ((h, f), torch.bfloat16, 1)}
    root = env.tmp / "legacy"
    it = root / "iter_0000005"
    g = torch.Generator().manual_seed(3)
    values = {n: torch.randn(s, generator=g).to(d) for n, (s, d, _) in full.items()}
    for r in range(tp):
        model = {n: (t.chunk(tp, full[n][2])[r] if full[n][2] >= 0 else t).clone()
                 for n, t in values.items()}
        (it / f"mp_rank_{r:02d}").mkdir(parents=True)
        torch.save({"checkpoint_version": 3.0, "iteration": 5, "model": model,
                    "rng_state": [{"random_rng_state": None}]},
                   it / f"mp_rank_{r:02d}" / "model_optim_rng.pt")
    (root / "latest_checkpointed_iteration.txt").write_text("5")

    def local(params: dict, tp_size: int) -> dict[str, tuple]:
        return {n: (tuple(s[i] // tp_size if i == dim else s[i] for i in range(len(s))), d)
                for n, (s, d, dim) in params.items()}

    def megatron_load(want_local: dict[str, tuple], rank_file: Path):
        """load_model_state_dict(model, state_dict['model'], strict=True), as Megatron runs it."""
        sd = torch.load(rank_file, weights_only=False)["model"]
        model = module_from(want_local, "GPTModel")
        first = error_of(lambda: model.load_state_dict(sd, strict=True))
        if first is None:
            return None, None, None
        retry = error_of(lambda: module_from(want_local, "GPTModel").load_state_dict(sd, strict=False))
        if retry is not None:
            return first, retry, None
        return first, None, module_from(want_local, "GPTModel").load_state_dict(sd, strict=False)

    extra = dict(full)
    extra["decoder.layers.1.self_attention.linear_qkv._extra_state_like"] = ((4,), torch.bfloat16, -1)
    dropped = {n: x for n, x in full.items() if n != "decoder.layers.0.mlp.linear_fc2.weight"}
    for name, want, tp_size in (("clean", full, 2), ("missing", extra, 2),
                                ("unexpected", dropped, 2), ("tp1", full, 1)):
        lay = env.layout(f"legacy-{name}", {n: (s, d) for n, (s, d, _) in want.items()},
                         tp=tp_size, tp_dims={n: dim for n, (_, _, dim) in want.items()})
        first, retry, returned = megatron_load(local(want, tp_size), it / "mp_rank_00" / "model_optim_rng.pt")
        d = env.diff(root, lay)
        o = d["outcome"]
        tag = f"legacy/{name}"
        check(d.get("format") == "megatron_torch", f"{tag}: format {d.get('format')}")
        if first is None:
            check(o["action"] == "loads" and d["exit"] == 0, f"{tag}: Megatron loads; diff {o}")
        elif retry is not None:
            check(o["action"] == "raises" and o["message"].startswith(f"{retry[0]}: {retry[1]}"),
                  f"{tag}: the retry raises {retry[1]!r}; diff {o['message']!r}")
        else:
            check(o["action"] == "logs_and_continues" and
                  o["message"].startswith(f"{first[0]}: {first[1]}") and
                  f"missing_keys={returned.missing_keys!r}" in o["message"] and
                  f"unexpected_keys={returned.unexpected_keys!r}" in o["message"] and
                  set(o["kept_at_init"]) == set(returned.missing_keys),
                  f"{tag}: strict raises {first[1]!r}, the retry returns {returned}; diff {o}")
        if name == "tp1":  # the fix names the TP size the shards' ratio gives
            split = {n for n, (_, _, dim) in full.items() if dim >= 0}
            fixes = {x["name"]: x["fix"] for x in d.get("entries", [])
                     if x["status"] == "shape_mismatch"}
            check(set(fixes) == split and
                  all(f.startswith("The checkpoint was saved with --tensor-model-parallel-size 2 "
                                   "and this model is built with 1") and
                      "--target-tensor-parallel-size 1" in f for f in fixes.values()),
                  f"{tag}: fixes {list(fixes.items())[:2]}")
    # TP 4: ranks 2 and 3 open files that are not there.
    lay = env.layout("legacy-tp4", {n: (s, d) for n, (s, d, _) in full.items()}, tp=4,
                     tp_dims={n: dim for n, (_, _, dim) in full.items()})
    missing_file = it / "mp_rank_02" / "model_optim_rng.pt"
    real = error_of(lambda: torch.load(missing_file))
    d = env.diff(root, lay)
    check(real is not None and d["outcome"]["action"] == "raises" and
          d["outcome"]["message"].startswith(f"{real[0]}: {real[1]}"),
          f"legacy tp4: torch.load raises {real}; diff {d['outcome']['message']!r}")


# Megatron's TE layer spec: the modules with an `_extra_state` in a dense GPT layer (the keys of
# NVIDIA/Megatron-LM#900 and alibaba/Pai-Megatron-Patch#303), written out here, not derived.
TE_MODULES = ("self_attention.core_attention", "self_attention.linear_qkv",
              "self_attention.linear_proj", "mlp.linear_fc1", "mlp.linear_fc2")


def megatron_gpt(layers: int = 2) -> dict[str, tuple]:
    h, f, v = 8, 16, 32
    p = {"embedding.word_embeddings.weight": ((v, h), torch.float32)}
    for i in range(layers):
        q = f"decoder.layers.{i}"
        p |= {f"{q}.self_attention.linear_qkv.layer_norm_weight": ((h,), torch.float32),
              f"{q}.self_attention.linear_qkv.weight": ((3 * h, h), torch.float32),
              f"{q}.self_attention.linear_proj.weight": ((h, h), torch.float32),
              f"{q}.mlp.linear_fc1.layer_norm_weight": ((h,), torch.float32),
              f"{q}.mlp.linear_fc1.weight": ((f, h), torch.float32),
              f"{q}.mlp.linear_fc2.weight": ((h, f), torch.float32)}
    return p | {"decoder.final_layernorm.weight": ((h,), torch.float32)}


def te_modules(layers: int = 2, core_attention: bool = True) -> set[str]:
    return {f"decoder.layers.{i}.{m}" for i in range(layers) for m in TE_MODULES
            if core_attention or not m.endswith("core_attention")}


# Which modules keep an extra state, and the layout flags that say so: a Transformer Engine model,
# a Megatron model of the local spec (its own linears keep one "for compatibility with TE state
# dict", megatron/core/tensor_parallel/layers.py; DotProductAttention has none), a model with none.
EXTRA_STATE = {
    "te": (te_modules(), {"transformer_engine": True, "linear_extra_state": True}),
    "local": (te_modules(core_attention=False),
              {"transformer_engine": False, "linear_extra_state": True}),
    "none": (set(), {"transformer_engine": False, "linear_extra_state": False}),
}


def case_te_torch_dist(env: Env) -> None:
    """NVIDIA/Megatron-LM#900 under torch_dist: a model built with Transformer Engine asks for
    each TE module's extra state as a ShardedObject; megatron-core saves a checkpoint with and
    one without them, and loads each into a TE and a local model under every strictness."""
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing import ShardedObject, ShardedTensor
    from megatron.core.dist_checkpointing.validation import StrictHandling
    params = megatron_gpt()

    def sharded(modules: set[str]) -> dict:
        sd = {n: ShardedTensor.from_rank_offsets(n, t) for n, t in tensors(params).items()}
        for m in sorted(modules):
            k = f"{m}._extra_state"
            sd[k] = ShardedObject(k, io.BytesIO(b"fp8 meta"), (1,), (0,), replica_id=0)
        return sd

    with megatron_on_cpu(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for saved, (saved_modules, _) in EXTRA_STATE.items():
            path = env.tmp / f"te_torch_dist-{saved}"
            path.mkdir()
            dist_checkpointing.save(sharded(saved_modules), str(path))
            for model, (modules, flags) in EXTRA_STATE.items():
                lay = env.layout(f"te_torch_dist-{saved}-{model}", params, flags=flags)
                for strict in StrictHandling:
                    real = error_of(lambda: dist_checkpointing.load(sharded(modules), str(path),
                                                                    strict=strict))
                    d = env.diff(path, lay, "--strictness", strict.value)
                    o = d["outcome"]
                    tag = f"extra state torch_dist saved={saved} model={model} {strict.value}"
                    absent = {f"{m}._extra_state" for m in modules - saved_modules}
                    if real is not None:
                        kind, msg = real
                        text = msg.strip().splitlines()[-1] if kind == "CheckpointException" \
                            else f"{kind}: {msg}"
                        same = o["message"] == text or (
                            "{" in text and set_of(o["message"]) == set_of(text) and
                            o["message"].split("{")[0] == text.split("{")[0])
                        # DCP's planner raises on the first absent key in request order, which
                        # follows module registration (not recorded in a layout): any of them.
                        planner = "RuntimeError: Missing key in checkpoint state_dict: "
                        if text.startswith(planner) and o["message"].startswith(planner):
                            same = o["message"][len(planner):-len("/shard_0_1.")] in absent
                        check(o["action"] == "raises" and same,
                              f"{tag}: Megatron raises {text!r}; diff {o['action']}: {o['message']!r}")
                        continue
                    check(o["action"] != "raises" and set(o["kept_at_init"]) == absent,
                          f"{tag}: Megatron loads, leaving {sorted(absent)[:3]}; diff {o}")


def case_te_legacy(env: Env) -> None:
    """NVIDIA/Megatron-LM#900 in the legacy torch format: TE modules' `_extra_state` keys in
    the rank file's state dict. A TE model given a checkpoint without them (and a local model
    given one with them) fails the strict load_state_dict, and Megatron's load_model_state_dict
    retries non-strict and goes on: the diff quotes torch's error and the retry's return."""
    params = megatron_gpt()
    for saved, (saved_modules, _) in EXTRA_STATE.items():
        root = env.tmp / f"te_legacy-{saved}"
        it = root / "iter_0000001" / "mp_rank_00"
        it.mkdir(parents=True)
        model = dict(tensors(params))
        model |= {f"{m}._extra_state": io.BytesIO(b"fp8 meta") for m in sorted(saved_modules)}
        torch.save({"checkpoint_version": 3.0, "iteration": 1, "model": model}, it / "model_optim_rng.pt")
        (root / "latest_checkpointed_iteration.txt").write_text("1")
        for name, (modules, flags) in EXTRA_STATE.items():
            sd = torch.load(it / "model_optim_rng.pt", weights_only=False)["model"]
            first = error_of(lambda: module_from(params, "GPTModel", modules).load_state_dict(sd, strict=True))
            lay = env.layout(f"te_legacy-{saved}-{name}", params, flags=flags)
            d = env.diff(root, lay)
            o = d["outcome"]
            tag = f"extra state legacy saved={saved} model={name}"
            if first is None:
                check(o["action"] == "loads", f"{tag}: torch loads; diff {o}")
                continue
            returned = module_from(params, "GPTModel", modules).load_state_dict(sd, strict=False)
            got_lines, got_sets = quoted_sets(o["message"].split("\nMegatron's")[0])
            want_lines, want_sets = quoted_sets(f"{first[0]}: {first[1]}")
            check(o["action"] == "logs_and_continues" and got_lines == want_lines and
                  got_sets == want_sets and
                  set(o["kept_at_init"]) == set(returned.missing_keys),
                  f"{tag}: strict raises {first[1][:300]!r}, retry returns {returned}; diff {o}")


def case_mla_q_lora_null(env: Env) -> None:
    """DeepSeek-V2-Lite-style MLA (q_lora_rank null). Megatron's TE spec under qk_layernorm
    (which Megatron-Bridge's DeepSeek providers set) fuses a query norm into linear_q_proj
    (mla_qk_norm_config.py); Hugging Face has no such norm, so a checkpoint converted from it
    lacks linear_q_proj.layer_norm_weight and a partial load leaves it at its initial values
    (NVIDIA-NeMo/Megatron-Bridge#5261, #5294). torch's own partial DCP load says which keys it
    leaves untouched; the diff must say the same, and must not call a layout's `absorbs` of that
    norm a rename: only the MLA handler maps an absorbed norm, and only linear_qkv_down_proj's."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
    cfg = env.tmp / "v2-lite.json"
    cfg.write_text(json.dumps({
        "model_type": "deepseek_v2", "hidden_size": 16, "num_hidden_layers": 2,
        "num_attention_heads": 2, "q_lora_rank": None, "kv_lora_rank": 8, "qk_rope_head_dim": 4,
        "qk_nope_head_dim": 4, "v_head_dim": 4, "n_routed_experts": None,
        "intermediate_size": 32, "vocab_size": 32, "hidden_act": "silu"}))

    def layout(*extra: str) -> tuple[Path, dict]:
        out = env.tmp / f"v2-lite-{len(extra)}.json"
        p = subprocess.run([env.cli, "layout", "--from-config", str(cfg), "-o", str(out), *extra],
                           capture_output=True, text=True)
        check(p.returncode == 0, f"layout {extra}: {p.stderr}")
        return out, json.loads(out.read_text())

    te_path, te = layout()
    plain_path, plain = layout("--no-mla-query-norm")
    te_names = {p["name"] for p in te["params"]}
    plain_names = {p["name"] for p in plain["params"]}
    q_norms = {f"decoder.layers.{i}.self_attention.linear_q_proj.layer_norm_weight" for i in range(2)}
    check(q_norms <= te_names and not (q_norms & plain_names) and te_names - plain_names == q_norms,
          f"query norms: TE layout {sorted(te_names - plain_names)}")
    check(not any("linear_q_down_proj" in n or "linear_qkv_down_proj" in n for n in te_names),
          "no query LoRA: no q down projection")
    check({f"decoder.layers.{i}.input_layernorm.weight" for i in range(2)} <= te_names,
          "the layers keep their input_layernorm")
    check(not any("absorbs" in p for p in te["params"]), "nothing absorbed without q_lora")
    def saved_names(lay: dict) -> dict[str, list[int]]:
        """Megatron-FSDP's names: fused SwiGLU linear_fc1 saved split (docs/formats.md §6)."""
        out = {}
        for p in lay["params"]:
            for s in p.get("fusion", {}).get("sections", []):
                shape = list(p["shape"])
                shape[p["fusion"]["dim"]] = s["size"]
                out[s["name"]] = shape
            if "fusion" not in p:
                out[p["name"]] = p["shape"]
        return out

    # A Megatron-FSDP checkpoint of the plain model (what a conversion from Hugging Face holds).
    g = torch.Generator().manual_seed(11)
    sd = {"model.module." + n: torch.randn(s, generator=g) for n, s in saved_names(plain).items()}
    ckpt = env.tmp / "v2-lite-plain"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(sd, checkpoint_id=str(ckpt))
        req = {"model.module." + n: torch.full(s, 7.0) for n, s in saved_names(te).items()}
        dcp.load(req, checkpoint_id=str(ckpt), planner=DefaultLoadPlanner(allow_partial_load=True))
    untouched = {k[len("model.module."):] for k, v in req.items() if bool((v == 7.0).all())}
    d = env.diff(ckpt, te_path, "--no-strict", "--strictness", "ignore_all")
    o = d["outcome"]
    check(untouched == q_norms and set(o["kept_at_init"]) == untouched and o["action"] == "silent",
          f"partial load leaves {sorted(untouched)}; diff {o['action']} {o['kept_at_init']}")
    d = env.diff(ckpt, plain_path)
    check(d["outcome"]["action"] == "loads", f"plain model: {d['outcome']}")
    # A layout that claims the query norm absorbs the input norm: no handler maps that.
    claimed = json.loads(te_path.read_text())
    for p in claimed["params"]:
        if p["name"] in q_norms:
            p["absorbs"] = p["name"].split(".self_attention.")[0] + ".input_layernorm.weight"
    claimed_path = env.tmp / "v2-lite-claimed.json"
    claimed_path.write_text(json.dumps(claimed))
    d = env.diff(ckpt, claimed_path, "--no-strict", "--strictness", "ignore_all")
    got = {x["name"]: x for x in d.get("entries", []) if x["name"] in q_norms}
    check(len(got) == 2 and all(x["status"] == "unloadable" and not x["real_load_fills"] and
                                "no handler" in x["reason"] for x in got.values()) and
          set(d["outcome"]["kept_at_init"]) == q_norms,
          f"absorbs claimed: {[(x['status'], x['reason'][:80]) for x in got.values()]}")


def case_causes(env: Env) -> None:
    """Every size change named by the setting that makes it, in plain words (finding 8; issue 38:
    not "Dimension 0 is the checkpoint has 64, the model 32"). A checkpoint written by torch from
    a model that differs in one setting, loaded into this one: torch's load_state_dict raises a
    size mismatch for exactly the tensors the diff calls shape_mismatch, and each fix says, in
    its words, which size differs, in which tensor, both sizes (read from torch's tensors) and
    the setting that gives the saved size, spelled as the model's framework spells it: Megatron's
    flags for Megatron names, Hugging Face's config fields for Hugging Face names. The saved
    sizes come from torch's tensors, never typed in; the sentences are ShardScope's own.
    NVIDIA-NeMo/Megatron-Bridge#127 is one such report (query groups: linear_qkv's rows)."""
    def run(tag, base, changed, expect):
        """expect(name, stored tensor, wanted shape) -> the words the fix must hold."""
        path = env.tmp / f"cause-{tag}.pt"
        held = tensors(base | changed)
        torch.save(held, path)
        real = error_of(lambda: module_from(base).load_state_dict(torch.load(path), strict=False))
        d = env.diff(path, env.layout(f"cause-{tag}", base))
        bad = {x["name"]: x["fix"] for x in d.get("entries", []) if x["status"] == "shape_mismatch"}
        check(real is not None and set(bad) == set(changed) and
              all(f"size mismatch for {n}:" in real[1] for n in bad),
              f"{tag}: torch {real}; diff mismatches {sorted(bad)}")
        for n, fix in bad.items():
            for words in expect(n, held[n], base[n][0]):
                check(words in fix, f"{tag}: {n}: {words!r} not in {fix!r}")

    def dim_of(t, want):
        return next(i for i, (a, b) in enumerate(zip(t.shape, want)) if a != b)

    def sizes(n, t, want, unit=None):
        d = dim_of(t, want)
        unit = unit or ("entries" if t.dim() == 1 else ("rows", "columns")[d])
        return f"{n} has {t.shape[d]} {unit} in the checkpoint and {want[d]} in the model"

    mg = megatron_gpt()
    hf = hf_model()
    L = "decoder.layers"
    cases = {
        # Megatron's names: its flags.
        "mg_vocab": (mg, {"embedding.word_embeddings.weight": ((40, 8), torch.float32)},
                     lambda n, t, w: ["The vocabulary size differs: " + sizes(n, t, w),
                                      f"--vocab-size {t.shape[0]}",
                                      "--make-vocab-size-divisible-by"]),
        "mg_gated": (mg, {f"{L}.{i}.mlp.linear_fc1.weight": ((32, 8), torch.float32)
                          for i in range(2)},
                     lambda n, t, w: ["linear_fc1 has twice the rows the model asks for "
                                      f"({t.shape[0]} in the checkpoint, {w[0]} in the model)",
                                      "Build the model with --swiglu"]),
        "mg_hidden": (mg, {"decoder.final_layernorm.weight": ((12,), torch.float32)},
                      lambda n, t, w: ["The hidden size differs: " + sizes(n, t, w),
                                       f"The saving run had --hidden-size {t.shape[0]}"]),
        "mg_ffn": (mg, {f"{L}.{i}.mlp.linear_fc2.weight": ((8, 24), torch.float32)
                        for i in range(2)},
                   lambda n, t, w: ["The MLP's inner (FFN) size differs: " + sizes(n, t, w),
                                    f"--ffn-hidden-size {t.shape[1]}"]),
        "mg_qkv": (mg, {f"{L}.{i}.self_attention.linear_qkv.weight": ((16, 8), torch.float32)
                        for i in range(2)},
                   lambda n, t, w: ["The attention's heads, query groups or head size differs: "
                                    + sizes(n, t, w),
                                    "(--num-attention-heads + 2 × --num-query-groups) × "
                                    f"--kv-channels = {t.shape[0]}"]),
        "mg_experts": ({**mg, f"{L}.0.mlp.router.weight": ((4, 8), torch.float32)},
                       {f"{L}.0.mlp.router.weight": ((8, 8), torch.float32)},
                       lambda n, t, w: ["The number of experts differs: " + sizes(n, t, w),
                                        f"--num-experts {t.shape[0]}"]),
        # Hugging Face's names: its config fields.
        "hf_hidden": (hf, {"model.norm.weight": ((12,), torch.float32)},
                      lambda n, t, w: ["The hidden size differs: " + sizes(n, t, w),
                                       f"hidden_size {t.shape[0]}", "config.json"]),
        "hf_ffn": (hf, {f"model.layers.{i}.mlp.gate_proj.weight": ((24, 8), torch.float32)
                        for i in range(2)},
                   lambda n, t, w: ["The MLP's inner (FFN) size differs: " + sizes(n, t, w),
                                    f"intermediate_size {t.shape[0]}"]),
        "hf_kv": (hf, {f"model.layers.{i}.self_attn.k_proj.weight": ((8, 8), torch.float32)
                       for i in range(2)},
                  lambda n, t, w: ["The attention's key/value heads × head size differs: "
                                   + sizes(n, t, w),
                                   f"num_key_value_heads × head_dim = {t.shape[0]}"]),
        "hf_q": (hf, {f"model.layers.{i}.self_attn.q_proj.weight": ((16, 8), torch.float32)
                      for i in range(2)},
                 lambda n, t, w: ["The attention's query heads × head size differs: "
                                  + sizes(n, t, w),
                                  f"num_attention_heads × head_dim = {t.shape[0]}"]),
        "hf_vocab": (hf, {"model.embed_tokens.weight": ((40, 8), torch.float32),
                          "lm_head.weight": ((40, 8), torch.float32)},
                     lambda n, t, w: ["The vocabulary size differs: " + sizes(n, t, w),
                                      f"vocab_size {t.shape[0]}"]),
    }
    for tag, (base, changed, expect) in cases.items():
        run(tag, base, changed, expect)


def entries_of(d: dict) -> dict:
    return {x["name"]: x for x in d.get("entries", [])}


def same_raise(tag: str, d: dict, real, model_name: str = "Model") -> None:
    """The diff's load outcome is the load_state_dict error torch raised (the model's class
    name written as <model>; the key lists compared as sets, their order being the module's)."""
    o = d["outcome"]
    want = f"{real[0]}: " + real[1].replace(f"for {model_name}:", "for <model>:") if real else ""
    check(real is not None and o["action"] == "raises" and
          quoted_sets(o["message"]) == quoted_sets(want),
          f"{tag}: torch raises {want[:300]!r}; the diff {o['action']} {o['message'][:300]!r}")


def zero3_placeholders(model: nn.Module) -> dict:
    """model.state_dict() as a ZeRO-3 engine's module gives it: every parameter an empty
    torch.Size([0]) tensor of its dtype (DeepSpeed's partition_parameters.py free_param:
    `param.data = torch.empty(0, dtype=param.dtype, device=param.device)`), buffers whole."""
    params = {n for n, _ in model.named_parameters()}
    return {k: torch.empty(0, dtype=v.dtype) if k in params else v.clone()
            for k, v in model.state_dict().items()}


def case_zero3(env: Env) -> None:
    """ZeRO-3 parameters saved without gathering (huggingface/transformers#20082,
    FlagOpen/FlagEmbedding#873): every parameter torch.Size([0]). DeepSpeed does not install on
    this CPU-only test machine's venv, so what it writes is mimicked with torch, as its source
    writes it: the state dict a Trainer or accelerate saves from the ZeRO-3 module (torch.save
    and safetensors), and DeepSpeed's own zero_pp_rank_0_mp_rank_00_model_states.pt, whose
    `module` entry holds those placeholders and whose param_shapes (one OrderedDict per
    optimizer group, name -> torch.Size) the real shapes (engine.py's _common_checkpoint_state
    and _get_zero_param_shapes; checked once against deepspeed 0.19.8's save_checkpoint of a
    CPU ZeRO-3 run: the same entries, types and shapes). torch's strict load_state_dict raises
    a size mismatch on every parameter, the diff quotes it (for DeepSpeed's file, the load of
    its `module` entry) and each fix names ZeRO-3, zero_to_fp32.py and
    stage3_gather_16bit_weights_on_model_save; DeepSpeed's param_shapes are quoted."""
    from collections import OrderedDict
    from safetensors.torch import load_file, save_file
    base = hf_model()
    model = module_from(base)
    model.load_state_dict(tensors(base))
    sd = zero3_placeholders(model)
    params = [n for n, _ in model.named_parameters()]

    def fixes_name_zero3(tag, d):
        e = entries_of(d)
        bad = [n for n in params if e.get(n, {}).get("status") != "shape_mismatch" or not all(
            w in e[n]["fix"] for w in ("DeepSpeed ZeRO-3 placeholder", "zero_to_fp32.py",
                                       '"stage3_gather_16bit_weights_on_model_save": true',
                                       "huggingface/transformers#20082"))]
        check(not bad, f"{tag}: fixes {[(n, e.get(n, {}).get('fix')) for n in bad[:1]]}")
        return e

    for fmt in ("pt", "safetensors"):
        path = env.tmp / f"zero3.{fmt}"
        torch.save(sd, path) if fmt == "pt" else save_file(sd, str(path))
        got = torch.load(path) if fmt == "pt" else load_file(str(path))
        real = error_of(lambda: module_from(base).load_state_dict(got))
        d = env.diff(path, env.layout(f"zero3-{fmt}", base))
        same_raise(f"zero3/{fmt}", d, real)
        fixes_name_zero3(f"zero3/{fmt}", d)

    # DeepSpeed's own save_checkpoint under ZeRO-3.
    ds = env.tmp / "ds-zero3" / "global_step4"
    ds.mkdir(parents=True)
    state = dict(module=sd, buffer_names=[], optimizer=None,
                 param_shapes=[OrderedDict((n, p.shape) for n, p in model.named_parameters())],
                 frozen_param_shapes=OrderedDict(), shared_params={},
                 frozen_param_fragments=OrderedDict(), lr_scheduler=None, data_sampler=None,
                 random_ltd=None, skipped_steps=0, global_steps=4, global_samples=32,
                 dp_world_size=2, mp_world_size=1,
                 checkpoint_parallel_dimensions={"pp_degree": 1, "tp_degree": 1},
                 ds_config={"train_micro_batch_size_per_gpu": 4,
                            "zero_optimization": {"stage": 3}},
                 ds_version="0.19.8")
    path = ds / "zero_pp_rank_0_mp_rank_00_model_states.pt"
    torch.save(state, path)
    (ds.parent / "latest").write_text("global_step4")
    got = torch.load(path, weights_only=False)["module"]
    real = error_of(lambda: module_from(base).load_state_dict(got))
    d = env.diff(path, env.layout("zero3-deepspeed", base))
    same_raise("zero3/deepspeed", d, real)
    e = fixes_name_zero3("zero3/deepspeed", d)
    shapes = state["param_shapes"][0]
    bad = [n for n in params if f"DeepSpeed's param_shapes records it as {list(shapes[n])}"
           not in e.get(n, {}).get("reason", "")]
    check(not bad, f"zero3/deepspeed: reasons {[e.get(n, {}).get('reason') for n in bad[:1]]}")


def mxfp4_gpt_oss(layers: int = 1, experts: int = 2, hidden: int = 64, inner: int = 32):
    """gpt-oss as shipped (MXFP4 experts) and as transformers' dequantized GptOssForCausalLM
    asks for it, by transformers' own definitions (integrations/mxfp4.py Mxfp4GptOssExperts:
    gate_up_proj_blocks [E, 2I, H/32, 16] uint8, _scales [E, 2I, H/32] uint8, down_proj_blocks
    [E, H, I/32, 16], _scales [E, H, I/32]; modeling_gpt_oss.py GptOssExperts: gate_up_proj
    [E, H, 2I], down_proj [E, I, H]; the biases are the same in both). Returns (stored tensors,
    the dequantized model's request)."""
    g = torch.Generator().manual_seed(11)
    E, H, I = experts, hidden, inner
    common = {"model.embed_tokens.weight": ((32, H), torch.bfloat16),
              "model.norm.weight": ((H,), torch.bfloat16), "lm_head.weight": ((32, H), torch.bfloat16)}
    stored, asked = {}, {}
    for i in range(layers):
        q = f"model.layers.{i}"
        common |= {f"{q}.input_layernorm.weight": ((H,), torch.bfloat16),
                   f"{q}.mlp.router.weight": ((E, H), torch.bfloat16),
                   f"{q}.mlp.experts.gate_up_proj_bias": ((E, 2 * I), torch.bfloat16),
                   f"{q}.mlp.experts.down_proj_bias": ((E, H), torch.bfloat16)}
        stored |= {f"{q}.mlp.experts.gate_up_proj_blocks": torch.randint(0, 256, (E, 2 * I, H // 32, 16), generator=g, dtype=torch.uint8),
                   f"{q}.mlp.experts.gate_up_proj_scales": torch.randint(120, 130, (E, 2 * I, H // 32), generator=g, dtype=torch.uint8),
                   f"{q}.mlp.experts.down_proj_blocks": torch.randint(0, 256, (E, H, I // 32, 16), generator=g, dtype=torch.uint8),
                   f"{q}.mlp.experts.down_proj_scales": torch.randint(120, 130, (E, H, I // 32), generator=g, dtype=torch.uint8)}
        asked |= {f"{q}.mlp.experts.gate_up_proj": ((E, H, 2 * I), torch.bfloat16),
                  f"{q}.mlp.experts.down_proj": ((E, I, H), torch.bfloat16)}
    return tensors(common) | stored, common | asked


def dequantize_mxfp4(blocks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """transformers' integrations/mxfp4.py convert_moe_packed_tensors, step for step: each byte
    two FP4 (E2M1) codes, low nibble first, through its lookup table; each block of 32 values
    scaled by 2^(scale - 127); the last two axes swapped."""
    lut = torch.tensor([+0.0, +0.5, +1.0, +1.5, +2.0, +3.0, +4.0, +6.0,
                        -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=torch.bfloat16)
    *prefix, G, B = blocks.shape
    exp = scales.to(torch.int32) - 127
    out = torch.empty(*prefix, G, B * 2, dtype=torch.bfloat16)
    out[..., 0::2] = lut[(blocks & 0x0F).long()]
    out[..., 1::2] = lut[(blocks >> 4).long()]
    out = torch.ldexp(out, exp[..., None]).to(torch.bfloat16)
    return out.reshape(*prefix[:-1], prefix[-1], G * B * 2).transpose(1, 2).contiguous()


def case_mxfp4(env: Env) -> None:
    """Quantized expert blocks on disk (openai/harmony#34, tenstorrent/tt-forge-models#443):
    gpt-oss ships its experts MXFP4 (`*_blocks` / `*_scales`), the dequantized model asks for
    gate_up_proj / down_proj. Written with the safetensors package in transformers' shapes;
    torch's strict load_state_dict raises Missing (the dense names) and Unexpected (the blocks
    and scales), which the diff quotes; each dense weight is named as MXFP4 with the dense shape
    transformers' dequantization gives (computed here by its algorithm on the stored tensors,
    and equal to the model's), and the fix names Mxfp4Config(dequantize=True) and
    convert_moe_packed_tensors; the blocks and scales are explained, not left unconsumed."""
    from safetensors.torch import load_file, save_file
    stored, asked = mxfp4_gpt_oss()
    path = env.tmp / "gpt-oss-mxfp4.safetensors"
    save_file(stored, str(path))
    real = error_of(lambda: module_from(asked).load_state_dict(load_file(str(path))))
    d = env.diff(path, env.layout("gpt-oss-dequantized", asked))
    same_raise("mxfp4", d, real)
    e = entries_of(d)
    for n in (k for k in asked if k.endswith(("gate_up_proj", "down_proj"))):
        dense = dequantize_mxfp4(stored[n + "_blocks"], stored[n + "_scales"])
        x = e.get(n, {})
        check(tuple(dense.shape) == asked[n][0] and x.get("status") == "unloadable" and
              f"which dequantize to {list(dense.shape)}, the tensor the model asks for as {n}"
              in x.get("reason", "") and "stored MXFP4-quantized" in x.get("reason", "") and
              "Mxfp4Config(dequantize=True)" in x.get("fix", "") and
              "convert_moe_packed_tensors" in x.get("fix", ""),
              f"mxfp4: {n} dense {tuple(dense.shape)}: {x.get('status')} {x.get('reason')!r} {x.get('fix')!r}")
    left = [u["key"] for u in d.get("unconsumed", []) if u["key"].endswith(("_blocks", "_scales"))]
    check(not left, f"mxfp4: blocks and scales left unconsumed: {left}")
    # A model that asks for down_proj the other way round ([E, H, I], the orientation
    # NVIDIA-NeMo/Megatron-Bridge#3743 mixed up) is told the blocks dequantize to [E, I, H].
    other = dict(asked)
    E, I, H = asked["model.layers.0.mlp.experts.down_proj"][0]
    other["model.layers.0.mlp.experts.down_proj"] = ((E, H, I), torch.bfloat16)
    x = entries_of(env.diff(path, env.layout("gpt-oss-other", other))).get(
        "model.layers.0.mlp.experts.down_proj", {})
    check(f"which dequantize to {[E, I, H]}, not the model's {[E, H, I]}" in x.get("reason", ""),
          f"mxfp4 other orientation: {x.get('reason')!r}")


class OptModel(nn.Module):
    """Hugging Face Llama names, trainable."""

    def __init__(self):
        super().__init__()
        self.inner = module_from(hf_model())
        for p in self.inner.parameters():
            p.requires_grad_(True)

    def forward(self):
        return sum((p.float() ** 2).sum() for p in self.inner.parameters())


def case_dcp_optimizer(env: Env) -> None:
    """DCP optimizer state saved from a raw optimizer.state_dict() (optimizer.state.0.exp_avg:
    by position; KempnerInstitute/KempnerForge#115 saved and loaded it raw) and loaded through
    get_optimizer_state_dict's names (optimizer.state.<fqn>.exp_avg). torch's dcp.load raises
    Missing key on the first state, which the diff quotes; every state is found by position in
    param_groups order (rule optimizer_index), and `fix` writes the states under the names and
    the one group's params as names: torch's strict dcp.load of the repair with
    get_optimizer_state_dict's request, then set_optimizer_state_dict, gives every state bit for
    bit and every group hyperparameter (a params list of positions makes
    set_optimizer_state_dict drop lr, betas and weight decay without a word, so that list is
    rewritten too). Two param groups (decay / no decay) number the parameters out of the model's
    order: the diff says why it cannot name them, and `fix` refuses."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (get_model_state_dict,
                                                         get_optimizer_state_dict,
                                                         set_model_state_dict,
                                                         set_optimizer_state_dict)
    base = {f"inner.{k}": v for k, v in hf_model().items()}

    def trained(groups: bool):
        torch.manual_seed(5)
        m = OptModel()
        m.load_state_dict({f"inner.{k}": v for k, v in tensors(hf_model()).items()})
        if groups:
            decay = [p for p in m.parameters() if p.dim() > 1]
            rest = [p for p in m.parameters() if p.dim() <= 1]
            opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                     {"params": rest, "weight_decay": 0.0}], lr=3e-3)
        else:
            opt = torch.optim.AdamW(m.parameters(), lr=3e-3, betas=(0.8, 0.9), weight_decay=0.05)
        for _ in range(2):
            m().backward()
            opt.step()
            opt.zero_grad()
        return m, opt

    def fresh(groups: bool):
        m = OptModel()
        if groups:
            return m, torch.optim.AdamW([{"params": [p for p in m.parameters() if p.dim() > 1]},
                                         {"params": [p for p in m.parameters() if p.dim() <= 1]}])
        return m, torch.optim.AdamW(m.parameters())

    def request(groups: bool):
        m, opt = fresh(groups)
        return m, opt, {"model": get_model_state_dict(m), "optimizer": get_optimizer_state_dict(m, opt)}

    lay = env.tmp / "dcp-optimizer.json"
    layout = json.loads(env.layout("dcp-optimizer", base).read_text())
    # AdamW's states in the order it creates them (what get_optimizer_state_dict lists).
    layout["optimizer"] = {"states": ["step", "exp_avg", "exp_avg_sq"], "step": False}
    lay.write_text(json.dumps(layout))

    def diff_opt(ckpt):
        p = subprocess.run([env.cli, "diff", str(ckpt), "--layout", str(lay), "--json"],
                           capture_output=True, text=True, timeout=300)
        return json.loads(p.stdout) if p.stdout.strip() else {"outcome": {}, "entries": []}

    for groups in (False, True):
        tag = "dcp_optimizer" + ("/groups" if groups else "")
        m, opt = trained(groups)
        path = env.tmp / ("dcp-raw-optim" + ("-groups" if groups else ""))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.save({"model": m.state_dict(), "optimizer": opt.state_dict()}, checkpoint_id=str(path))
        _, _, req = request(groups)
        real = error_of(lambda: dcp.load(req, checkpoint_id=str(path)))
        d = diff_opt(path)
        last = real[1].strip().splitlines()[-1] if real else ""
        check(real is not None and d["outcome"].get("action") == "raises" and
              d["outcome"].get("message", "").startswith(last),
              f"{tag}: torch raises {last!r}; diff {d['outcome']}")
        states = [x for x in d["entries"] if x.get("section") == "optimizer"]
        if not groups:
            bad = [x for x in states if x["status"] != "rename" or "optimizer_index" not in x["rules"]
                   or "by position" not in x["reason"]]
            check(states and not bad, f"{tag}: {[(x['name'], x['status'], x['reason']) for x in bad[:2]]}")
            out = env.tmp / "dcp-raw-optim-fixed"
            p = subprocess.run([env.cli, "fix", str(path), "--layout", str(lay), "-o", str(out)],
                               capture_output=True, text=True, timeout=300)
            check(p.returncode == 0, f"{tag}: fix exit {p.returncode}: {p.stderr.strip()[:300]}")
            if p.returncode != 0:
                continue
            m2, opt2, req = request(False)
            err = error_of(lambda: dcp.load(req, checkpoint_id=str(out)))
            check(err is None, f"{tag}: strict dcp.load of the repair raises {err}")
            if err is not None:
                continue
            set_model_state_dict(m2, req["model"])
            set_optimizer_state_dict(m2, opt2, req["optimizer"])
            want, got = opt.state_dict(), opt2.state_dict()
            wrong = [(i, k) for i in want["state"] for k in want["state"][i]
                     if not torch.equal(want["state"][i][k], got["state"].get(i, {}).get(k, torch.empty(0)))]
            hyper = [k for k in ("lr", "betas", "eps", "weight_decay")
                     if got["param_groups"][0].get(k) != want["param_groups"][0].get(k)]
            check(not wrong and not hyper and all(torch.equal(a, b) for a, b in
                                                  zip(m.state_dict().values(), m2.state_dict().values())),
                  f"{tag}: repaired states differ {wrong[:3]}; group hyperparameters lost {hyper}")
        else:
            bad = [x for x in states if x["status"] != "unloadable" or
                   "do not follow the model's order" not in x["reason"]]
            check(states and not bad, f"{tag}: {[(x['name'], x['status'], x['reason']) for x in bad[:2]]}")
            out = env.tmp / "dcp-raw-optim-groups-fixed"
            p = subprocess.run([env.cli, "fix", str(path), "--layout", str(lay), "-o", str(out)],
                               capture_output=True, text=True, timeout=300)
            check(p.returncode != 0 and not out.exists(), f"{tag}: fix exit {p.returncode}, wrote {out.exists()}")


class LoraLinear(nn.Module):
    """A LoRA-wrapped linear as PEFT names it (peft/tuners/lora/layer.py: the original under
    base_layer, the adapter's A and B in ModuleDicts keyed by adapter name)."""

    def __init__(self, base: nn.Module, r: int = 2, adapter: str = "default"):
        super().__init__()
        out, inp = base.weight.shape
        self.base_layer = base
        self.lora_A = nn.ModuleDict({adapter: nn.Linear(inp, r, bias=False)})
        self.lora_B = nn.ModuleDict({adapter: nn.Linear(r, out, bias=False)})


def peft_wrapped(model: nn.Module, targets=("q_proj", "k_proj")) -> nn.Module:
    """get_peft_model's module tree: PeftModel.base_model (LoraModel).model (the original), each
    target linear replaced by its LoRA form; the names are peft's (huggingface/peft#2647 lists
    them: base_model.model.….q_proj.base_layer.weight, ….lora_A.default.weight)."""
    for name, mod in list(model.named_modules()):
        for child, sub in list(mod.named_children()):
            if child in targets:
                setattr(mod, child, LoraLinear(sub))
    lora_model = nn.Module()
    lora_model.model = model
    peft = nn.Module()
    peft.base_model = lora_model
    return peft


def case_peft_lora(env: Env) -> None:
    """PEFT LoRA names, both ways. (1) huggingface/peft#2647: a state dict saved from the
    PEFT-wrapped model without merging (base_model.model.….q_proj.base_layer.weight beside
    lora_A / lora_B) loaded into the plain model: torch's strict load_state_dict raises, the
    diff quotes it, the untargeted weights are found under the prefix (key_prefix), and each
    targeted weight is named as a LoRA module's base weight with its unmerged adapter; the fix
    says merge_and_unload (renaming base_layer would load the weight from before fine-tuning),
    and `fix` refuses. (2) pytorch/torchtitan#2945 (huggingface/peft#3000): the base model's
    checkpoint loaded into the PEFT-wrapped model: every base weight is found under its plain
    name (rule peft_base_layer or the prefix), each adapter weight is named as one a base
    checkpoint never has; `fix --partial` writes the base weights under the wrapped names, and
    torch's load_state_dict(strict=False) of that copy reports exactly the adapters missing and
    holds every base weight bit for bit. PEFT itself is not in the test venv: its module tree
    is rebuilt with torch modules under peft's names (LoraLinear, peft_wrapped)."""
    from safetensors.torch import load_file, save_file
    base = hf_model()
    plain = module_from(base)
    plain.load_state_dict(tensors(base))
    inner = module_from(base)
    inner.load_state_dict(tensors(base))
    wrapped = peft_wrapped(inner)  # as get_peft_model wraps a loaded model
    for n, p in wrapped.named_parameters():
        if ".lora_" in n:
            p.data.normal_(generator=torch.Generator().manual_seed(len(n)))
    wsd = {k: v.clone() for k, v in wrapped.state_dict().items()}
    targeted = [n for n in base if n.endswith(("q_proj.weight", "k_proj.weight"))]
    read = {"pt": torch.load, "safetensors": lambda p: load_file(str(p))}
    for fmt in ("pt", "safetensors"):
        # (1) unmerged PEFT state dict into the plain model.
        path = env.tmp / f"peft-unmerged.{fmt}"
        torch.save(wsd, path) if fmt == "pt" else save_file(wsd, str(path))
        real = error_of(lambda: module_from(base).load_state_dict(read[fmt](path)))
        lay = env.layout(f"peft-plain-{fmt}", base)
        d = env.diff(path, lay)
        same_raise(f"peft/unmerged/{fmt}", d, real)
        e = entries_of(d)
        bad = [n for n in targeted if e.get(n, {}).get("status") != "unloadable" or
               "base weight of a PEFT LoRA module, beside its unmerged adapter" not in e[n]["reason"]
               or "merge_and_unload()" not in e[n]["fix"] or "huggingface/peft#2647" not in e[n]["fix"]]
        check(not bad, f"peft/unmerged/{fmt}: {[(n, e.get(n, {}).get('reason')) for n in bad[:1]]}")
        others = [n for n in base if n not in targeted and e.get(n, {}).get("status") != "rename"]
        check(not others, f"peft/unmerged/{fmt}: not found under the prefix: {others[:3]}")
        left = [u["key"] for u in d.get("unconsumed", []) if ".lora_" in u["key"] or "base_layer" in u["key"]]
        check(not left, f"peft/unmerged/{fmt}: left unconsumed {left[:3]}")
        out = env.tmp / f"peft-unmerged-{fmt}-fixed"
        p = subprocess.run([env.cli, "fix", str(path), "--layout", str(lay), "-o", str(out)],
                           capture_output=True, text=True, timeout=300)
        check(p.returncode != 0 and not out.exists(), f"peft/unmerged/{fmt}: fix exit {p.returncode}")

        # (2) the base checkpoint into the PEFT-wrapped model.
        path = env.tmp / f"peft-base.{fmt}"
        sd = {k: v.clone() for k, v in plain.state_dict().items()}
        torch.save(sd, path) if fmt == "pt" else save_file(sd, str(path))
        asked = {k: (tuple(v.shape), v.dtype) for k, v in wsd.items()}
        real = error_of(lambda: module_from(asked).load_state_dict(read[fmt](path)))
        lay = env.layout(f"peft-wrapped-{fmt}", asked)
        d = env.diff(path, lay)
        same_raise(f"peft/base/{fmt}", d, real)
        e = entries_of(d)
        adapters = [n for n in asked if ".lora_" in n]
        bad = [n for n in adapters if e.get(n, {}).get("status") != "unloadable" or
               "a LoRA adapter weight" not in e[n]["reason"] or "huggingface/peft#3000" not in e[n]["fix"]]
        check(not bad, f"peft/base/{fmt}: adapters {[(n, e.get(n, {}).get('fix')) for n in bad[:1]]}")
        found = [n for n in asked if n not in adapters and e.get(n, {}).get("status") != "rename"]
        check(not found, f"peft/base/{fmt}: base weights not found {found[:3]}")
        check(any("peft_base_layer" in e[n]["rules"] for n in asked if ".base_layer." in n),
              f"peft/base/{fmt}: rules {[e[n]['rules'] for n in asked if '.base_layer.' in n][:1]}")
        out = env.tmp / f"peft-base-{fmt}-fixed"
        p = subprocess.run([env.cli, "fix", str(path), "--layout", str(lay), "-o", str(out), "--partial"],
                           capture_output=True, text=True, timeout=300)
        if not out.exists():  # written, and marked NOT a repair: the adapters stay missing
            FAILURES.append(f"peft/base/{fmt}: fix --partial exit {p.returncode}: {p.stderr.strip()[:200]}")
            continue
        f = next((x for x in out.iterdir() if x.suffix in (".pt", ".safetensors")), None)
        if f is None:
            FAILURES.append(f"peft/base/{fmt}: fix wrote no state dict: {sorted(out.iterdir())}")
            continue
        got = read[fmt](f)
        m = module_from(asked)
        result = m.load_state_dict(got, strict=False)
        wrong = [k for k in asked if k not in adapters and (k not in got or not torch.equal(got[k], wsd[k]))]
        check(sorted(result.missing_keys) == sorted(adapters) and not result.unexpected_keys and not wrong,
              f"peft/base/{fmt}: load of the repair {result}; wrong {wrong[:3]}")


def case_added_settings(env: Env) -> None:
    """Parameters a model setting adds that the saving run did not have, named by that setting
    (not "compare the model config"): Megatron's learned position embeddings
    (NVIDIA/Megatron-LM#933: a Llama-like checkpoint, add_position_embedding=False), linear
    biases (--disable-bias-linear, --add-qkv-bias; Hugging Face's attention_bias and mlp_bias,
    mlc-ai/mlc-llm#3494), --qk-layernorm, and a model deeper than the checkpoint
    (--num-layers / num_hidden_layers, the count read from the stored keys). Each checkpoint is
    the model without them, written by torch; torch's strict load_state_dict raises Missing
    key(s) on exactly them, the diff quotes it, and each fix names the setting."""
    mg, hf = megatron_gpt(), hf_model()
    L = "decoder.layers"
    deeper_hf = dict(hf)
    for k, v in hf.items():
        if k.startswith("model.layers.1."):
            deeper_hf[k.replace("layers.1.", "layers.2.")] = v
    cases = {
        "position": (mg, {"embedding.position_embeddings.weight": ((16, 8), torch.float32)},
                     ["--position-embedding-type", "NVIDIA/Megatron-LM#933"]),
        "mg_bias": (mg, {f"{L}.{i}.{m}.bias": ((r,), torch.float32) for i in range(2)
                         for m, r in (("self_attention.linear_qkv", 24), ("self_attention.linear_proj", 8),
                                      ("mlp.linear_fc1", 16), ("mlp.linear_fc2", 8))},
                    ["--disable-bias-linear"]),
        "qk_norm": (mg, {f"{L}.{i}.self_attention.{n}.weight": ((4,), torch.float32) for i in range(2)
                         for n in ("q_layernorm", "k_layernorm")}, ["--qk-layernorm"]),
        "deeper_mg": (mg, {k: v for k, v in megatron_gpt(3).items() if k not in mg},
                      ["--num-layers 2", "num_hidden_layers 2"]),
        "hf_attn_bias": (hf, {f"model.layers.{i}.self_attn.q_proj.bias": ((8,), torch.float32)
                              for i in range(2)}, ["attention_bias", "mlc-ai/mlc-llm#3494"]),
        "hf_mlp_bias": (hf, {f"model.layers.{i}.mlp.gate_proj.bias": ((16,), torch.float32)
                             for i in range(2)}, ["mlp_bias"]),
        "deeper_hf": (hf, {k: v for k, v in deeper_hf.items() if k not in hf},
                      ["--num-layers 2", "num_hidden_layers 2"]),
    }
    for tag, (saved, added, words) in cases.items():
        path = env.tmp / f"added-{tag}.pt"
        torch.save(tensors(saved), path)
        model = saved | added
        real = error_of(lambda: module_from(model).load_state_dict(torch.load(path)))
        d = env.diff(path, env.layout(f"added-{tag}", model))
        same_raise(f"added/{tag}", d, real)
        e = entries_of(d)
        bad = [n for n in added if e.get(n, {}).get("status") != "unloadable" or
               not all(w in e[n]["fix"] for w in words) or "compare the model config" in e[n]["fix"]]
        check(not bad, f"added/{tag}: {[(n, e.get(n, {}).get('fix')) for n in bad[:1]]}")


def case_grouped_mlp(env: Env) -> None:
    """NVIDIA/Megatron-LM#924: a Mixtral checkpoint of SequentialMLP experts
    (mlp.experts.local_experts.<e>.linear_fc1/2.weight) loaded into a model built with
    Megatron's legacy GroupedMLP (mlp.experts.weight1 [H, E·F], weight2 [E·F, H], every expert
    in one transposed tensor: megatron/core/transformer/moe/experts.py; it needs the
    grouped_gemm package, so its names and shapes are rebuilt with torch). torch's strict
    load_state_dict raises on weight1/weight2 and the local experts, the diff quotes it, and
    the fix names the expert implementation (--moe-grouped-gemm, TEGroupedMLP)."""
    H, F, E = 8, 16, 4
    base = {k: v for k, v in megatron_gpt().items() if ".mlp.linear_fc" not in k}
    stored, model = dict(base), dict(base)
    for i in range(2):
        q = f"decoder.layers.{i}.mlp"
        stored[f"{q}.router.weight"] = model[f"{q}.router.weight"] = ((E, H), torch.float32)
        for e in range(E):
            stored[f"{q}.experts.local_experts.{e}.linear_fc1.weight"] = ((F, H), torch.float32)
            stored[f"{q}.experts.local_experts.{e}.linear_fc2.weight"] = ((H, F), torch.float32)
        model[f"{q}.experts.weight1"] = ((H, E * F), torch.float32)
        model[f"{q}.experts.weight2"] = ((E * F, H), torch.float32)
    path = env.tmp / "sequential-experts.pt"
    torch.save(tensors(stored), path)
    real = error_of(lambda: module_from(model).load_state_dict(torch.load(path)))
    d = env.diff(path, env.layout("grouped-mlp", model))
    same_raise("grouped_mlp", d, real)
    e = entries_of(d)
    grouped = [n for n in model if ".experts.weight" in n]
    bad = [n for n in grouped if e.get(n, {}).get("status") != "unloadable" or
           "SequentialMLP's" not in e[n]["reason"] or "--moe-grouped-gemm" not in e[n]["fix"] or
           "NVIDIA/Megatron-LM#924" not in e[n]["fix"]]
    check(not bad, f"grouped_mlp: {[(n, e.get(n, {}).get('reason'), e.get(n, {}).get('fix')) for n in bad[:1]]}")
    left = [u["key"] for u in d.get("unconsumed", []) if ".local_experts." in u["key"]]
    check(not left, f"grouped_mlp: local experts left unconsumed: {left[:3]}")


def case_megatron_gpt(env: Env) -> None:
    """A real megatron-core GPTModel (local spec, no Transformer Engine, on the CPU) saved by
    dist_checkpointing.save of its own sharded_state_dict: against the layout of its own
    parameters the diff must find every one (the norms under the TE names the spec's
    sharded_state_dict_keys_map gives them, the linears' extra state as ShardedObjects), and
    against a copy saved without the extra state say what megatron-core's load raises."""
    from megatron.core import dist_checkpointing
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig
    with megatron_model_parallel():
        torch.manual_seed(5)
        cfg = TransformerConfig(num_layers=2, hidden_size=16, num_attention_heads=4,
                                ffn_hidden_size=32, use_cpu_initialization=True)

        def build() -> GPTModel:
            return GPTModel(cfg, get_gpt_layer_local_spec(), vocab_size=32,
                            max_sequence_length=64)

        model = build()
        params = {}
        tp_dims = {}
        for n, t in model.state_dict().items():
            if n.endswith("._extra_state") or not isinstance(t, torch.Tensor):
                continue
            params[n] = (tuple(t.shape), t.dtype)
        for n, prm in model.named_parameters():
            if getattr(prm, "tensor_model_parallel", False):
                tp_dims[n] = prm.partition_dim
        lay = env.layout("megatron-gpt", params, tp_dims=tp_dims,
                         flags=EXTRA_STATE["local"][1])
        whole, stripped = env.tmp / "megatron-gpt", env.tmp / "megatron-gpt-no-extra"
        whole.mkdir()
        stripped.mkdir()
        dist_checkpointing.save(model.sharded_state_dict(), str(whole))
        sd = {k: v for k, v in model.sharded_state_dict().items() if not k.endswith("._extra_state")}
        dist_checkpointing.save(sd, str(stripped))
        real = error_of(lambda: dist_checkpointing.load(build().sharded_state_dict(), str(whole)))
        d = env.diff(whole, lay)
        check(real is None and d["outcome"]["action"] == "loads" and d["exit"] == 0 and
              d["counts"]["loadable_model"] == d["counts"]["expected_model"] == len(params),
              f"whole: Megatron {real}; diff {d['outcome']} {d.get('counts')}")
        mapped = {x["name"] for x in d.get("entries", []) if "local_spec_keys_map" in x["rules"]}
        norms = {n for n in params if "input_layernorm" in n or "pre_mlp_layernorm" in n}
        check(norms and mapped == norms, f"keys map: {sorted(mapped ^ norms)[:4]}")
        extra = [x for x in d.get("entries", []) if x["name"].endswith("._extra_state")]
        check(len(extra) == 4 * cfg.num_layers and all(x["status"] == "ok" for x in extra),
              f"linears' extra state: {[(x['name'], x['status']) for x in extra][:3]}")
        real = error_of(lambda: dist_checkpointing.load(build().sharded_state_dict(), str(stripped)))
        d = env.diff(stripped, lay)
        planner = "RuntimeError: Missing key in checkpoint state_dict: "
        text = real[1].strip().splitlines()[-1] if real else ""
        check(text.startswith(planner) and d["outcome"]["action"] == "raises" and
              d["outcome"]["message"].startswith(planner) and
              d["outcome"]["message"][len(planner):].split("/")[0].endswith("._extra_state"),
              f"stripped: Megatron raises {text!r}; diff {d['outcome']['message']!r}")


def case_untrained_experts(env: Env) -> None:
    """"The experts are still random": a real megatron-core MoE GPTModel whose every tensor moved
    from its initialization except expert 2's, saved by dist_checkpointing (experts stacked under
    mlp.experts.experts.linear_fcN). `diff --check-init` reads the slice of the stacked keys each
    parameter loads and must flag exactly expert 2's tensors, in every layer."""
    from megatron.core import dist_checkpointing
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig
    with megatron_model_parallel():
        torch.manual_seed(8)
        cfg = TransformerConfig(num_layers=2, hidden_size=32, num_attention_heads=4,
                                ffn_hidden_size=64, num_moe_experts=4, moe_grouped_gemm=False,
                                use_cpu_initialization=True)
        model = GPTModel(cfg, get_gpt_layer_local_spec(num_experts=4, moe_grouped_gemm=False),
                         vocab_size=32, max_sequence_length=64)
        g = torch.Generator().manual_seed(9)
        untrained = set()
        with torch.no_grad():
            for n, prm in model.named_parameters():
                if ".local_experts.2." in n:
                    untrained.add(n)
                else:  # as some training moves it
                    prm.add_(0.01 * torch.randn(prm.shape, generator=g, dtype=prm.dtype))
        params = {n: (tuple(t.shape), t.dtype) for n, t in model.state_dict().items()
                  if isinstance(t, torch.Tensor) and not n.endswith("._extra_state")}
        path = env.tmp / "megatron-untrained-experts"
        path.mkdir()
        dist_checkpointing.save(model.sharded_state_dict(), str(path))
        lay = env.layout("megatron-untrained-experts", params, flags=EXTRA_STATE["local"][1])
        d = env.diff(path, lay, "--check-init")
        flagged = {x["name"] for x in d.get("entries", []) if x.get("looks_initial")}
        check(untrained and flagged == untrained and d["exit"] == 0 and
              any(w.startswith("init: ") for w in d["outcome"]["warnings"]),
              f"flagged {sorted(flagged ^ untrained)[:4]} wrongly; exit {d['exit']}")


def case_megatron_moe(env: Env) -> None:
    """A real megatron-core MoE GPTModel of the local spec with SequentialMLP experts
    (moe_grouped_gemm off: local_experts.<e>.linear_fcN), saved by dist_checkpointing: its
    sharded state dict stacks the experts under mlp.experts.experts.linear_fcN [L, E, …], the
    key TEGroupedMLP's weight<e> use too. The layout of the model's own parameters loads N of N,
    and so does a grouped-experts layout of the same model: megatron-core makes the two forms
    interchangeable, and ShardScope must not call either unloadable. megatron-core's own load
    of the checkpoint into the model is the oracle that it loads."""
    import re
    from megatron.core import dist_checkpointing
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig
    with megatron_model_parallel():
        torch.manual_seed(6)
        experts = 4
        cfg = TransformerConfig(num_layers=2, hidden_size=16, num_attention_heads=4,
                                ffn_hidden_size=32, num_moe_experts=experts,
                                moe_grouped_gemm=False, use_cpu_initialization=True)

        def build() -> GPTModel:
            return GPTModel(cfg, get_gpt_layer_local_spec(num_experts=experts,
                                                          moe_grouped_gemm=False),
                            vocab_size=32, max_sequence_length=64)

        model = build()
        params = {n: (tuple(t.shape), t.dtype) for n, t in model.state_dict().items()
                  if isinstance(t, torch.Tensor) and not n.endswith("._extra_state")}
        check(any(".local_experts.3." in n for n in params), "no sequential experts built")
        path = env.tmp / "megatron-moe"
        path.mkdir()
        dist_checkpointing.save(model.sharded_state_dict(), str(path))
        real = error_of(lambda: dist_checkpointing.load(build().sharded_state_dict(), str(path)))
        check(real is None, f"megatron-core does not load its own checkpoint: {real}")
        seq = re.compile(r"\.mlp\.experts\.local_experts\.(\d+)\.linear_fc([12])\.(weight|bias)$")
        grouped = {seq.sub(lambda m: f".mlp.experts.linear_fc{m[2]}.{m[3]}{m[1]}", n): v
                   for n, v in params.items()}
        for form, want in (("sequential", params), ("grouped", grouped)):
            lay = env.layout(f"megatron-moe-{form}", want, flags=EXTRA_STATE["local"][1])
            d = env.diff(path, lay)
            bad = [(x["name"], x["status"]) for x in d.get("entries", [])
                   if x["section"] == "model" and not x["real_load_fills"]]
            check(d["outcome"]["action"] == "loads" and not bad and
                  d["counts"]["loadable_model"] == d["counts"]["expected_model"] == len(want),
                  f"{form} experts: {d['outcome']['action']}, {bad[:3]}")
            experts_read = {x["sources"][0]["key"] for x in d.get("entries", [])
                            if ".experts." in x["name"] and x["sources"]}
            check(experts_read and all(".mlp.experts.experts.linear_fc" in k for k in experts_read),
                  f"{form}: experts read from {sorted(experts_read)[:2]}")


# Megatron command lines as users pass them (megatron/training/arguments.py flags); what each
# leaves unsaid takes Megatron's defaults, which come from TransformerConfig's own fields.
MEGATRON_RUNS = {
    # Megatron's defaults: LayerNorm with biases, biased linears, learned absolute positions.
    "gpt": "--num-layers 2 --hidden-size 16 --num-attention-heads 4 --vocab-size 50 "
           "--max-position-embeddings 64 --transformer-impl local",
    "llama": "--num-layers 2 --hidden-size 16 --num-attention-heads 4 --group-query-attention "
             "--num-query-groups 2 --ffn-hidden-size 24 --swiglu --normalization RMSNorm "
             "--disable-bias-linear --position-embedding-type rope --qk-layernorm "
             "--untie-embeddings-and-output-weights --vocab-size 50 --transformer-impl local",
    # SequentialMLP (no --moe-grouped-gemm); biased router and experts (Megatron's shared
    # experts refuse biases).
    "moe": "--num-layers 2 --hidden-size 16 --num-attention-heads 4 --ffn-hidden-size 32 "
           "--swiglu --num-experts 4 --moe-ffn-hidden-size 8 --moe-layer-freq ([0]*1+[1]*1) "
           "--moe-router-enable-expert-bias "
           "--moe-router-score-function sigmoid "
           "--max-position-embeddings 64 --vocab-size 50 --transformer-impl local",
    "mla": "--num-layers 2 --hidden-size 16 --num-attention-heads 4 --ffn-hidden-size 32 --swiglu "
           "--multi-latent-attention --q-lora-rank 8 --kv-lora-rank 8 --qk-head-dim 4 "
           "--qk-pos-emb-head-dim 4 --v-head-dim 4 --qk-layernorm --normalization RMSNorm "
           "--disable-bias-linear --position-embedding-type rope --num-experts 4 "
           "--moe-ffn-hidden-size 8 --moe-layer-freq [0]*1+[1]*1 --vocab-size 50 "
           "--moe-shared-expert-intermediate-size 8 "
           "--untie-embeddings-and-output-weights --transformer-impl local",
    # No query LoRA, Megatron's LayerNorm and biases.
    "mla_no_q_lora": "--num-layers 2 --hidden-size 16 --num-attention-heads 4 --ffn-hidden-size 32 "
                     "--multi-latent-attention --kv-lora-rank 8 --qk-head-dim 4 "
                     "--qk-pos-emb-head-dim 4 --v-head-dim 4 --qk-layernorm "
                     "--position-embedding-type rope --vocab-size 50 --transformer-impl local",
}


def argparse_flags(text: str) -> dict:
    """A Megatron command line as its argparse reads it: dests, store_true/false flags, and
    --moe-layer-freq's Python expression evaluated as moe_freq_type does."""
    words, out = text.split(), {}
    store_false = {"disable_bias_linear": "add_bias_linear"}
    for i, w in enumerate(words):
        if not w.startswith("--"):
            continue
        name = w[2:].replace("-", "_")
        if i + 1 < len(words) and not words[i + 1].startswith("--"):
            v = words[i + 1]
            out[name] = int(v) if v.isdigit() else eval(v) if name == "moe_layer_freq" else v
        elif name in store_false:
            out[store_false[name]] = False
        else:
            out[name] = True
    return out


def megatron_build(given: dict):
    """What gpt_builder builds from these arguments (the spec Megatron picks, the
    TransformerConfig core_transformer_config_from_args fills), on the CPU, at the TP size of the
    current model-parallel groups; returns (build, saved args): the Namespace Megatron saves holds
    every argument, defaults too. Without --transformer-impl local it is Transformer Engine's
    spec, TE's leaf modules stood in for (te_stub_provider; dense layers only)."""
    import argparse as ap
    import dataclasses
    import torch.nn.functional as F
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt import gpt_layer_specs
    from megatron.core.models.gpt.gpt_layer_specs import (get_gpt_decoder_block_spec,
                                                          get_gpt_layer_local_spec)
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig
    import megatron.core.transformer.multi_latent_attention as mla_module
    mla = given.get("multi_latent_attention", False)
    Config = MLATransformerConfig if mla else TransformerConfig
    fields = {f.name for f in dataclasses.fields(Config)}
    kw = {k: v for k, v in given.items() if k in fields}
    if given.get("swiglu"):
        kw.update(gated_linear_unit=True, activation_func=F.silu)
    if given.get("num_experts"):
        kw["num_moe_experts"] = given["num_experts"]
    if mla:
        kw["rope_type"] = "rope"  # no YaRN tables on the CPU; names do not depend on it
        # Megatron's arguments, not MLATransformerConfig's defaults: --q-lora-rank defaults to
        # None, and --normalization to TransformerConfig's.
        kw.setdefault("q_lora_rank", None)
        kw.setdefault("normalization", next(f.default for f in dataclasses.fields(TransformerConfig)
                                            if f.name == "normalization"))
    cfg = Config(use_cpu_initialization=True, **kw)
    tp = given.get("tensor_model_parallel_size", 1)
    multiple = 128 * tp  # _vocab_size_with_padding: make_vocab_size_divisible_by × TP
    te = given.get("transformer_impl", "transformer_engine") != "local"
    vocab = -(-given["vocab_size"] // multiple) * multiple
    positions = given.get("position_embedding_type", "learned_absolute")

    class MlaCoreAttention(DotProductAttention):
        """Megatron's local core attention, accepting what MLA passes (no TE on the CPU)."""

        def __init__(self, *a, k_channels=None, v_channels=None, softmax_scale=None, **k):
            super().__init__(*a, **k)

    def build():
        if te:
            gpt_layer_specs.TESpecProvider = te_stub_provider()
            mla_module.TELinear = gpt_layer_specs.TESpecProvider().linear()  # MLA checks its class
            spec = gpt_layer_specs.get_gpt_layer_with_transformer_engine_spec(
                cfg.num_moe_experts, cfg.moe_grouped_gemm, cfg.qk_layernorm, mla)
            layers = []
        elif cfg.num_moe_experts:
            spec = get_gpt_decoder_block_spec(cfg, use_transformer_engine=False,
                                              normalization=cfg.normalization)
            layers = spec.layer_specs
        else:
            spec = get_gpt_layer_local_spec(None, False, cfg.qk_layernorm, mla,
                                            normalization=cfg.normalization)
            layers = [spec]
        if mla:
            mla_module.HAVE_TE = False
            for s in layers:
                s.submodules.self_attention.submodules.core_attention = MlaCoreAttention
        return GPTModel(cfg, spec, vocab_size=vocab,
                        max_sequence_length=given.get("max_position_embeddings", 64),
                        position_embedding_type=positions,
                        share_embeddings_and_output_weights=not given.get(
                            "untie_embeddings_and_output_weights", False))

    plain = (bool, int, float, str, list)
    saved = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)
             if isinstance(getattr(cfg, f.name), plain)}
    saved.update(given, padded_vocab_size=vocab, position_embedding_type=positions,
                 num_experts=cfg.num_moe_experts, moe_grouped_gemm=cfg.moe_grouped_gemm,
                 make_vocab_size_divisible_by=multiple // tp, ckpt_format="torch_dist",
                 tensor_model_parallel_size=tp, pipeline_model_parallel_size=1,
                 expert_model_parallel_size=1, swiglu=given.get("swiglu", False),
                 untie_embeddings_and_output_weights=given.get(
                     "untie_embeddings_and_output_weights", False))
    return build, ap.Namespace(**saved)


def te_stub_provider():
    """Transformer Engine's spec provider for megatron-core's own spec functions on a machine
    without TE: each TE leaf module is a stand-in with TE's parameter names (a linear's `weight`
    and `bias`, a LayerNormLinear's `layer_norm_weight`/`layer_norm_bias`, a norm's `weight`/
    `bias`), so that the real spec logic and the real attention and MLP classes decide the rest.
    A linear splits as TE's Linear does by its `parallel_mode` over the TP group megatron-core's
    wrapper gives it (TEColumnParallelLinear and TELayerNormColumnParallelLinear: "column",
    the output rows; TERowParallelLinear: "row", the input columns; TELinear: what its caller
    passes, `duplicated` whole on every rank), and marks its split parameters with
    `tensor_model_parallel` and `partition_dim` as TE does (values are left uninitialised)."""
    import torch.nn as tnn
    from megatron.core.tensor_parallel.layers import set_tensor_model_parallel_attributes
    from megatron.core.utils import divide, get_pg_size, get_tensor_model_parallel_group_if_none

    def norm_params(m, size, config):
        m.weight = tnn.Parameter(torch.empty(size))
        if config.normalization == "LayerNorm":
            m.bias = tnn.Parameter(torch.empty(size))

    class Linear(tnn.Module):
        mode = None  # TELinear: the caller's parallel_mode

        def __init__(self, input_size, output_size, *, config, bias=True, parallel_mode=None,
                     tp_group=None, is_expert=False, **_):
            super().__init__()
            mode = self.mode or parallel_mode
            tp = get_pg_size(get_tensor_model_parallel_group_if_none(tp_group, is_expert)) \
                if mode in ("column", "row") else 1
            if mode == "column":
                output_size = divide(output_size, tp)
            elif mode == "row":
                input_size = divide(input_size, tp)
            self.weight = tnn.Parameter(torch.empty(output_size, input_size))
            if mode in ("column", "row"):
                set_tensor_model_parallel_attributes(self.weight, True, int(mode == "row"), 1)
            if bias:
                self.bias = tnn.Parameter(torch.empty(output_size))
                if mode == "column":
                    set_tensor_model_parallel_attributes(self.bias, True, 0, 1)

    class ColumnLinear(Linear):
        mode = "column"

    class RowLinear(Linear):
        mode = "row"

    class LayerNormLinear(ColumnLinear):
        def __init__(self, input_size, output_size, *, config, bias=True, **kw):
            super().__init__(input_size, output_size, config=config, bias=bias, **kw)
            self.layer_norm_weight = tnn.Parameter(torch.empty(input_size))
            if config.normalization == "LayerNorm":
                self.layer_norm_bias = tnn.Parameter(torch.empty(input_size))

    class Norm(tnn.Module):
        def __init__(self, config, hidden_size, eps=1e-5, **_):
            super().__init__()
            norm_params(self, hidden_size, config)

    class CoreAttention(tnn.Module):
        def __init__(self, *a, **k):
            super().__init__()

    class Provider:
        def linear(self): return Linear
        def column_parallel_linear(self): return ColumnLinear
        def row_parallel_linear(self): return RowLinear
        def fuse_layernorm_and_linear(self): return True
        def column_parallel_layer_norm_linear(self): return LayerNormLinear
        def layer_norm(self, rms_norm=False, for_qk=False): return Norm
        def core_attention(self): return CoreAttention
        def activation_func(self): return None
        def grouped_mlp_modules(self, *a): raise NotImplementedError("dense layers only")

    return Provider


def case_mla_versions(env: Env) -> None:
    """MLA as each Megatron version builds it under Transformer Engine. megatron-core 0.16's own
    TE spec and MLASelfAttention (TE's leaf modules stood in for) build the model of each command
    line; the layout generated with --megatron-version 0.16 must name exactly its tensors (no
    fused linear_qkv_down_proj, no query norm in linear_q_proj, even when the arguments ask for
    mla_down_proj_fusion), and the default (main) must differ only by what main adds."""
    import torch.nn.functional as F
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt import gpt_layer_specs
    from megatron.core.transformer.transformer_config import MLATransformerConfig
    import megatron.core.transformer.multi_latent_attention as mla_module
    base = ("--num-layers 2 --hidden-size 16 --num-attention-heads 4 --ffn-hidden-size 32 --swiglu "
            "--multi-latent-attention --kv-lora-rank 8 --qk-head-dim 4 --qk-pos-emb-head-dim 4 "
            "--v-head-dim 4 --qk-layernorm --normalization RMSNorm --disable-bias-linear "
            "--position-embedding-type rope --vocab-size 50 --untie-embeddings-and-output-weights")
    runs = {"q_lora": base + " --q-lora-rank 8 --mla-down-proj-fusion", "no_q_lora": base}
    with megatron_model_parallel():
        gpt_layer_specs.TESpecProvider = te_stub_provider()
        mla_module.HAVE_TE = False
        mla_module.TELinear = gpt_layer_specs.TESpecProvider().linear()  # MLA checks its class
        for name, line in runs.items():
            given = argparse_flags(line)
            cfg = MLATransformerConfig(
                num_layers=2, hidden_size=16, num_attention_heads=4, ffn_hidden_size=32,
                gated_linear_unit=True, activation_func=F.silu, q_lora_rank=given.get("q_lora_rank"),
                kv_lora_rank=8, qk_head_dim=4, qk_pos_emb_head_dim=4, v_head_dim=4,
                qk_layernorm=True, normalization="RMSNorm", add_bias_linear=False,
                rope_type="rope", use_cpu_initialization=True)
            spec = gpt_layer_specs.get_gpt_layer_with_transformer_engine_spec(
                None, False, True, True)
            model = GPTModel(cfg, spec, vocab_size=128, max_sequence_length=64,
                             position_embedding_type="rope",
                             share_embeddings_and_output_weights=False)
            real = {n: list(t.shape) for n, t in model.state_dict().items()
                    if isinstance(t, torch.Tensor) and not n.endswith("._extra_state")}
            flags = env.tmp / f"mla-{name}.args"
            flags.write_text(line + "\n")
            shapes = {}
            for version in ("0.16", "main"):
                out = env.tmp / f"mla-{name}-{version}.json"
                p = subprocess.run([env.cli, "layout", "--from-config", str(flags),
                                    "--megatron-version", version, "-o", str(out)],
                                   capture_output=True, text=True)
                check(p.returncode == 0, f"{name} {version}: {p.stderr.strip()}")
                shapes[version] = {x["name"]: x["shape"] for x in json.loads(out.read_text())["params"]} \
                    if p.returncode == 0 else {}
            old = shapes["0.16"]
            check(old == real, f"{name}: 0.16 builds {sorted(real.keys() - old.keys())[:3]} the "
                               f"layout lacks, the layout has {sorted(old.keys() - real.keys())[:3]}")
            added = set(shapes["main"]) - set(old)
            want = ({n for n in shapes["main"] if ".linear_qkv_down_proj." in n} if name == "q_lora"
                    else {n for n in shapes["main"] if n.endswith(".linear_q_proj.layer_norm_weight")})
            check(want and added == want, f"{name}: main adds {sorted(added)[:3]}")


def case_megatron_args(env: Env) -> None:
    """Layouts from Megatron arguments are what the arguments build. For each command line
    (Megatron's defaults, Llama-like, MoE with SequentialMLP, MLA with and without a query
    LoRA, all of the local spec), megatron-core builds the real GPTModel; the layout generated
    from the `--flag` text must name exactly its tensors with their shapes, and the checkpoint
    megatron-core saves of it, with the args Namespace Megatron saves, must load N of N against
    the layout generated from its own saved args (megatron-core's load is the oracle)."""
    from megatron.core import dist_checkpointing
    with megatron_model_parallel():
        for name, line in MEGATRON_RUNS.items():
            torch.manual_seed(7)
            build, saved_args = megatron_build(argparse_flags(line))
            model = build()
            real = {n: list(t.shape) for n, t in model.state_dict().items()
                    if isinstance(t, torch.Tensor) and not n.endswith("._extra_state")}
            flags = env.tmp / f"{name}.args"
            flags.write_text(line.replace(" --", " \\\n  --") + "\n")
            lay = env.tmp / f"{name}-from-flags.json"
            p = subprocess.run([env.cli, "layout", "--from-config", str(flags), "-o", str(lay)],
                               capture_output=True, text=True)
            got = {x["name"]: x["shape"] for x in json.loads(lay.read_text())["params"]} \
                if p.returncode == 0 else {}
            check(p.returncode == 0, f"{name}: layout from flags: {p.stderr.strip()}")
            wrong = sorted(n for n in real.keys() & got.keys() if real[n] != got[n])
            check(got.keys() == real.keys() and not wrong,
                  f"{name}: the model has {sorted(real.keys() - got.keys())[:4]} the layout "
                  f"lacks, the layout {sorted(got.keys() - real.keys())[:4]} the model lacks,"
                  f" shapes differ for {wrong[:3]}")
            path = env.tmp / f"megatron-args-{name}"
            path.mkdir()
            sd = model.sharded_state_dict()
            sd["args"] = saved_args  # as save_checkpoint does
            dist_checkpointing.save(sd, str(path))
            oracle = error_of(lambda: dist_checkpointing.load(build().sharded_state_dict(),
                                                              str(path)))
            own = env.tmp / f"{name}-from-ckpt.json"
            p = subprocess.run([env.cli, "layout", "--from-config", str(path), "-o", str(own)],
                               capture_output=True, text=True)
            check(p.returncode == 0, f"{name}: layout from saved args: {p.stderr.strip()}")
            if p.returncode != 0:
                continue
            d = env.diff(path, own)
            bad = [(x["name"], x["status"]) for x in d.get("entries", [])
                   if x["section"] == "model" and not x["real_load_fills"]]
            check(oracle is None and d["outcome"]["action"] == "loads" and not bad and
                  d.get("counts", {}).get("loadable_model") == len(real),
                  f"{name}: Megatron {oracle}; diff {d['outcome']['action']} "
                  f"{d.get('counts', {}).get('loadable_model')} of {len(real)}: {bad[:3]}")


# MLA under tensor parallelism, as Megatron command lines ask for it: `{tp}` is the TP size.
# The local spec builds MLA's projections (but linear_proj) as megatron-core's own
# ColumnParallelLinear, the down projections too; the TE spec its down projections as
# TELinear(parallel_mode='duplicated'). q_lora_rank 48 splits 24 rows a rank at TP 2,
# kv_lora_rank + rope 12 into 6. The vocabulary needs no padding at TP 1 or 2
# (make_vocab_size_divisible_by × TP), so both have one shape. megatron-core 0.16 has no
# --mla-down-proj-fusion (its config has no such field, so the build ignores it); Megatron-LM's
# main has it for the TE spec only, so a local-spec layout stays unfused under it.
MLA_TP_BASE = ("--num-layers 2 --hidden-size 16 --num-attention-heads 4 --ffn-hidden-size 32 "
               "--swiglu --multi-latent-attention --kv-lora-rank 8 --qk-head-dim 4 "
               "--qk-pos-emb-head-dim 4 --v-head-dim 4 --qk-layernorm --normalization RMSNorm "
               "--disable-bias-linear --position-embedding-type rope --vocab-size 256 "
               "--untie-embeddings-and-output-weights --tensor-model-parallel-size {tp}")
MLA_TP_RUNS = {
    "local_q_lora": " --q-lora-rank 48 --transformer-impl local",
    "local_q_lora_fusion": " --q-lora-rank 48 --mla-down-proj-fusion --transformer-impl local",
    "local_no_q_lora": " --transformer-impl local",
    "te_q_lora": " --q-lora-rank 48",
    "te_q_lora_fusion": " --q-lora-rank 48 --mla-down-proj-fusion",
    "te_no_q_lora": "",
}


def mla_tp_worker(rank: int, world: int, port: int, tmp: str) -> None:
    """One of `world` Gloo processes: builds each MLA_TP_RUNS model at TP 1 and 2 and writes
    what this rank holds (each tensor's local shape, tp dim, and for the local spec its values);
    at TP 2 the local spec's model is also saved with megatron-core's torch_dist save, and as
    Megatron's legacy files (mp_rank_0<r>/model_optim_rng.pt), which Megatron's own strict load
    must load back into a fresh model of that rank."""
    import logging
    import torch.distributed as dist
    from megatron.core import dist_checkpointing
    from megatron.core import parallel_state as ps
    warnings.simplefilter("ignore")
    logging.getLogger("megatron").setLevel(logging.ERROR)
    torch.cuda.synchronize = lambda *a, **k: None  # megatron-core's writer on a CPU machine
    torch.cuda.current_device = lambda: "cpu"
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    out = Path(tmp)
    try:
        for tp in (1, 2):
            ps.initialize_model_parallel(tp, 1)
            for name, extra in MLA_TP_RUNS.items():
                local = name.startswith("local")
                build, _ = megatron_build(argparse_flags((MLA_TP_BASE + extra).format(tp=tp)))
                torch.manual_seed(7)
                model = build()
                params = dict(model.named_parameters())
                held = {k: v.detach().clone() for k, v in model.state_dict().items()
                        if isinstance(v, torch.Tensor) and not k.endswith("._extra_state")}
                facts = {"shape": {k: list(v.shape) for k, v in held.items()},
                         "tp_dim": {k: params[k].partition_dim
                                    if getattr(params.get(k), "tensor_model_parallel", False)
                                    else -1 for k in held},
                         "tensors": held if local else {}}
                if tp == 2 and local:
                    saved = out / f"{name}-torch_dist"
                    legacy = out / f"{name}-legacy"
                    rank_dir = legacy / "iter_0000001" / f"mp_rank_{rank:02d}"
                    rank_file = rank_dir / "model_optim_rng.pt"
                    rank_dir.mkdir(parents=True, exist_ok=True)
                    saved.mkdir(exist_ok=True)
                    dist.barrier()
                    with contextlib.redirect_stdout(io.StringIO()):
                        dist_checkpointing.save(model.sharded_state_dict(), str(saved))
                    torch.save({"checkpoint_version": 3.0, "iteration": 1,
                                "model": model.state_dict()}, rank_file)
                    if rank == 0:
                        (legacy / "latest_checkpointed_iteration.txt").write_text("1")
                    dist.barrier()
                    torch.manual_seed(8)
                    fresh = build()
                    facts["legacy_load"] = error_of(lambda: fresh.load_state_dict(
                        torch.load(rank_file, weights_only=False)["model"], strict=True))
                    facts["legacy_same"] = all(torch.equal(v, fresh.state_dict()[k])
                                               for k, v in held.items())
                if rank == 0 or tp > 1:
                    torch.save(facts, out / f"{name}-tp{tp}-rank{rank}.pt")
            ps.destroy_model_parallel()
    finally:
        dist.destroy_process_group()


def case_mla_tp(env: Env) -> None:
    """MLA's tensor-parallel layout, against megatron-core 0.16's own GPTModel built at TP 1 and
    TP 2 in two Gloo processes (local spec, and TE's spec with TE's leaf modules stood in for;
    with and without a query LoRA, with and without --mla-down-proj-fusion, which 0.16 does not
    have). The layout `layout --from-config` writes from the same command line at --tp 2 must
    give every tensor its name and full shape (the TP 1 model's) and its tp_dim (the TP 2
    parameter's partition_dim when tensor_model_parallel, else -1), and each rank's tensor must
    be the layout's TP slice: its shape, and for the local spec its values, which must be the
    slice along tp_dim of the tensor megatron-core's torch_dist save of the TP 2 model holds.
    On that save `verify --tp 2` must be clean and read, over its ranks, as many bytes as the
    ranks hold (plus its direct read of each tensor). The same model saved as Megatron's legacy
    rank files, which Megatron's strict load loads back into each rank's model: the diff of rank
    0's file must fill every parameter, at the layout's TP-local shapes."""
    import torch.multiprocessing as mp
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import oracle
    tmp = env.tmp / "mla-tp"
    tmp.mkdir()
    mp.spawn(mla_tp_worker, args=(2, free_port(), str(tmp)), nprocs=2, join=True)
    for name, extra in MLA_TP_RUNS.items():
        local = name.startswith("local")
        version = [] if local else ["--megatron-version", "0.16"]  # megatron-core 0.16's TE spec
        args = tmp / f"{name}.args"
        args.write_text((MLA_TP_BASE + extra).format(tp=2) + "\n")
        out = tmp / f"{name}.json"
        p = subprocess.run([env.cli, "layout", "--from-config", str(args), "--tp", "2", *version,
                            "-o", str(out)], capture_output=True, text=True)
        check(p.returncode == 0, f"{name}: layout: {p.stderr.strip()}")
        if p.returncode != 0:
            continue
        lay = {x["name"]: x for x in json.loads(out.read_text())["params"]}
        full = torch.load(tmp / f"{name}-tp1-rank0.pt", weights_only=False)
        ranks = [torch.load(tmp / f"{name}-tp2-rank{r}.pt", weights_only=False) for r in (0, 1)]
        check(lay.keys() == full["shape"].keys(),
              f"{name}: megatron-core builds {sorted(full['shape'].keys() - lay.keys())[:3]} the "
              f"layout lacks, the layout has {sorted(lay.keys() - full['shape'].keys())[:3]}")
        for n in sorted(lay.keys() & full["shape"].keys()):
            x = lay[n]
            real_dims = {r["tp_dim"][n] for r in ranks}
            check(x["shape"] == full["shape"][n] and real_dims == {x["tp_dim"]},
                  f"{name}: {n}: layout {x['shape']} tp_dim {x['tp_dim']}, megatron-core "
                  f"{full['shape'][n]} partition_dim {sorted(real_dims)}")
            for r, held in enumerate(ranks):
                want = list(x["shape"])
                if x["tp_dim"] >= 0:
                    want[x["tp_dim"]] //= 2
                check(held["shape"][n] == want,
                      f"{name}: {n}: rank {r} holds {held['shape'][n]}, the layout's TP slice "
                      f"is {want}")
        if not local:
            continue
        saved = tmp / f"{name}-torch_dist"
        md = oracle.dcp_metadata(saved)

        def stored(n: str) -> torch.Tensor | None:
            """The full tensor megatron-core saved for `n` (its layer of a stacked key)."""
            parts = n.split(".")
            if parts[:2] == ["decoder", "layers"] and parts[2].isdigit():
                key = ".".join(parts[:2] + parts[3:])
                return oracle.dcp_load(saved, md, [key])[key][int(parts[2])] \
                    if key in md.state_dict_metadata else None
            return oracle.dcp_load(saved, md, [n])[n] if n in md.state_dict_metadata else None

        whole_bytes = 0
        for n in sorted(lay.keys() & full["shape"].keys()):
            whole, d = stored(n), lay[n]["tp_dim"]
            whole_bytes += 0 if whole is None else whole.numel() * whole.element_size()
            if whole is None or list(whole.shape) != lay[n]["shape"]:
                check(False, f"{name}: {n}: torch_dist holds "
                             f"{None if whole is None else list(whole.shape)}")
                continue
            # A fused parameter's rank holds its rows of each section ([W_r; V_r]).
            fusion = lay[n].get("fusion") or {}
            sections = [s["size"] for s in fusion["sections"]] if fusion.get("tp_interleaved") \
                else [whole.shape[0]]
            for r, held in enumerate(ranks):
                if d < 0:
                    want = whole
                elif d == 0:
                    want = torch.cat([s.chunk(2, 0)[r] for s in whole.split(sections, 0)])
                else:
                    want = whole.chunk(2, d)[r]
                check(torch.equal(held["tensors"][n], want),
                      f"{name}: {n}: rank {r}'s tensor is not the layout's slice of the saved one")
        for r, held in enumerate(ranks):
            check(held["legacy_load"] is None and held["legacy_same"],
                  f"{name}: Megatron's load of mp_rank_0{r}: {held['legacy_load']}")
        # The diff reads rank 0's file at the layout's TP-local shapes: every parameter must be
        # filled, and the load must load, as Megatron's strict load does (the output layer's
        # `_extra_state`, which Megatron's ColumnParallelLinear keeps, asked for too).
        d = env.diff(tmp / f"{name}-legacy", out)
        bad = [(x["name"], x["status"]) for x in d.get("entries", [])
               if x["section"] == "model" and not x["real_load_fills"]]
        check(not bad and not d["outcome"]["kept_at_init"] and
              d["outcome"]["action"] == "loads" and
              d.get("counts", {}).get("loadable_model") == len(lay),
              f"{name}: Megatron's legacy load fills every parameter from rank 0's file; diff "
              f"{d['outcome']['action']}: {bad[:3]}")
        # verify reads each rank's planned shard, then each tensor once whole to compare the
        # gathered one with: as many bytes as megatron-core's ranks hold, plus the saved tensors.
        p = subprocess.run([env.cli, "verify", str(saved), "--layout", str(out), "--tp", "2",
                            "--dp", "1", "--json"], capture_output=True, text=True, timeout=300)
        v = json.loads(p.stdout) if p.stdout.strip() else {}
        held_bytes = sum(t.numel() * t.element_size()
                         for held in ranks for t in held["tensors"].values())
        off = [(x["name"], x["outcome"]) for x in v.get("params", [])
               if x["outcome"] != "bit_identical"]
        check(p.returncode == 0 and v.get("clean") and v.get("checked") == len(lay),
              f"{name}: verify --tp 2 exit {p.returncode}: {p.stderr.strip()[:200]} {off[:3]}")
        check(v.get("bytes_read") == held_bytes + whole_bytes,
              f"{name}: verify --tp 2 reads {v.get('bytes_read')} bytes; megatron-core's ranks "
              f"hold {held_bytes}, the saved tensors are {whole_bytes}")


def case_named_causes(env: Env) -> None:
    """Failures people report, rebuilt with real torch, each with its cause named (not "compare
    the model config"), torch's own message as the load outcome, and where ShardScope can repair
    it, `fix`'s copy loading strict with every value bit for bit:
    - a prefix on every key: torch.compile's _orig_mod., DataParallel's module., and a base
      model's state dict for a model that keeps it under model. (prefix to add);
    - an output layer saved tied (no lm_head.weight) for a model with tie_word_embeddings false,
      and the reverse (an untied head for a tied model);
    - rotary inv_freq buffers an older model saved and today's recomputes: harmless, dropped;
    - an embedding whose extra rows are vocabulary padding;
    - a sharded safetensors or torch.save set whose index names a shard that is missing, or
      cut short."""
    from safetensors.torch import load_file, save_file
    base = hf_model()
    full = tensors(base)

    def bits(t):
        return t.contiguous().view(torch.uint8) if t.dtype != torch.bool else t

    def entries(d):
        return {x["name"]: x for x in d.get("entries", [])}

    def strict(model, sd):
        return error_of(lambda: model.load_state_dict(sd, strict=True))

    def repaired(name, src, lay, want: dict[str, torch.Tensor], fmt: str):
        out = env.tmp / f"{name}-fixed"
        p = subprocess.run([env.cli, "fix", str(src), "--layout", str(lay), "-o", str(out)],
                           capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            FAILURES.append(f"{name}: fix exit {p.returncode}: {p.stderr.strip()[:200]}")
            return
        f = next(x for x in out.iterdir() if x.suffix in (".pt", ".safetensors"))
        got = torch.load(f) if fmt == "pt" else load_file(str(f))
        err = strict(module_from({k: (tuple(v.shape), v.dtype) for k, v in want.items()}), got)
        wrong = [k for k in want if k not in got or not torch.equal(bits(got[k]), bits(want[k]))]
        check(err is None and not wrong, f"{name}: strict load of the repair {err}; wrong {wrong[:3]}")

    def saved(name, sd, fmt):
        path = env.tmp / f"{name}.{fmt}"
        if fmt == "pt":
            torch.save(sd, path)
        else:
            save_file({k: v.contiguous() for k, v in sd.items()}, str(path))
        return path

    def read(path):  # the state dict as the loader gets it (safetensors orders its keys)
        return torch.load(path) if path.suffix == ".pt" else load_file(str(path))

    def same_outcome(name, d, real):
        o = d["outcome"]
        want = f"{real[0]}: " + real[1].replace("for Model:", "for <model>:") if real else None
        check(real is not None and o["action"] == "raises" and o["message"] == want,
              f"{name}: torch raises {want!r}; the diff {o['action']} {o['message']!r}")

    for fmt in ("pt", "safetensors"):
        # 1. Prefixes: the wrappers' state dicts as torch itself names them.
        model = module_from(base)
        model.load_state_dict(full)
        for state, (wrapped, prefix) in {
                "compiled": (torch.compile(model), "_orig_mod."),
                "data_parallel": (nn.DataParallel(model), "module.")}.items():
            sd = dict(wrapped.state_dict())
            check(all(k.startswith(prefix) for k in sd), f"{state}: torch's names {list(sd)[:2]}")
            path = saved(f"{state}-{fmt}", sd, fmt)
            lay = env.layout(f"{state}-{fmt}", base)
            d = env.diff(path, lay)
            same_outcome(f"{fmt}/{state}", d, strict(module_from(base), read(path)))
            e = entries(d)
            check(all(e[n]["status"] == "rename" and f"'{prefix}'" in e[n]["fix"] for n in base),
                  f"{fmt}/{state}: {[(n, e.get(n, {}).get('status'), e.get(n, {}).get('fix')) for n in base][:1]}")
            repaired(f"{state}-{fmt}", path, lay, full, fmt)
        # A base model's state dict (the module under model.) for the model that wraps it.
        inner = {k: v for k, v in base.items() if k.startswith("model.")}
        holder = module_from(inner)
        for k, v in full.items():
            if k in inner:
                holder.get_parameter(k).data.copy_(v)
        sd = dict(holder.model.state_dict())
        path = saved(f"base-{fmt}", sd, fmt)
        lay = env.layout(f"base-{fmt}", inner)
        d = env.diff(path, lay)
        same_outcome(f"{fmt}/base", d, strict(module_from(inner), read(path)))
        e = entries(d)
        check(all(e[n]["status"] == "rename" and "key_prefix" in e[n]["rules"] and
                  "Add prefix 'model.'" in e[n]["fix"] for n in inner),
              f"{fmt}/base: {[(n, e.get(n, {}).get('rules'), e.get(n, {}).get('fix')) for n in inner][:1]}")
        repaired(f"base-{fmt}", path, lay, {k: full[k] for k in inner}, fmt)

        # 2. Tied and untied output layers.
        sd = {k: v for k, v in full.items() if k != "lm_head.weight"}
        path = saved(f"tied-{fmt}", sd, fmt)
        lay = env.layout(f"tied-{fmt}", base)
        d = env.diff(path, lay)
        same_outcome(f"{fmt}/tied", d, strict(module_from(base), read(path)))
        head = entries(d).get("lm_head.weight", {})
        check("tied_output" in head.get("rules", []) and "tie_word_embeddings" in head.get("fix", ""),
              f"{fmt}/tied: {head.get('status')} {head.get('fix')}")
        repaired(f"tied-{fmt}", path, lay, full | {"lm_head.weight": full["model.embed_tokens.weight"]}, fmt)
        tied_model = {k: v for k, v in base.items() if k != "lm_head.weight"}
        path = saved(f"untied-{fmt}", full, fmt)
        d = env.diff(path, env.layout(f"untied-{fmt}", tied_model))
        same_outcome(f"{fmt}/untied", d, strict(module_from(tied_model), read(path)))
        notes = {u["key"]: u["note"] for u in d.get("unconsumed", [])}
        check("saved untied" in notes.get("lm_head.weight", ""), f"{fmt}/untied: {notes}")

        # 3. Buffers a model recomputes.
        sd = full | {f"model.layers.{i}.self_attn.rotary_emb.inv_freq":
                     1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8)) for i in range(2)}
        path = saved(f"inv_freq-{fmt}", sd, fmt)
        lay = env.layout(f"inv_freq-{fmt}", base)
        d = env.diff(path, lay)
        same_outcome(f"{fmt}/inv_freq", d, strict(module_from(base), read(path)))
        notes = [u["note"] for u in d.get("unconsumed", [])]
        check(len(notes) == 2 and all("recomputes" in n and "harmless" in n for n in notes),
              f"{fmt}/inv_freq: {notes}")
        repaired(f"inv_freq-{fmt}", path, lay, full, fmt)

        # 4. Vocabulary padding: 61 tokens padded to a multiple of 64 by the saving run.
        padded = base | {"model.embed_tokens.weight": ((64, 8), torch.float32),
                         "lm_head.weight": ((64, 8), torch.float32)}
        want = base | {"model.embed_tokens.weight": ((61, 8), torch.float32),
                       "lm_head.weight": ((61, 8), torch.float32)}
        sd = tensors(padded)
        path = saved(f"vocab-{fmt}", sd, fmt)
        d = env.diff(path, env.layout(f"vocab-{fmt}", want))
        same_outcome(f"{fmt}/vocab", d, strict(module_from(want), read(path)))
        e = entries(d)
        check(all(e[n]["status"] == "shape_mismatch" and "padding" in e[n]["fix"] and
                  "tensor[:61]" in e[n]["fix"] for n in ("model.embed_tokens.weight", "lm_head.weight")),
              f"{fmt}/vocab: {[e.get(n, {}).get('fix') for n in ('lm_head.weight',)]}")

    # 5. A sharded set whose index names a shard that is gone, or cut short: safetensors (as
    # transformers writes it) and torch.save (pytorch_model.bin.index.json).
    names = sorted(full)
    for kind, index_name, suffix in (("safetensors", "model.safetensors.index.json", "safetensors"),
                                     ("torch_save", "pytorch_model.bin.index.json", "bin")):
        stem = "model" if kind == "safetensors" else "pytorch_model"
        shards = {f"{stem}-00001-of-00002.{suffix}": names[: len(names) // 2],
                  f"{stem}-00002-of-00002.{suffix}": names[len(names) // 2:]}
        for how in ("missing", "cut", "listed"):
            d_ = env.tmp / f"shards-{kind}-{how}"
            d_.mkdir()
            for f, keys in shards.items():
                part = {k: full[k] for k in keys}
                save_file(part, str(d_ / f)) if kind == "safetensors" else torch.save(part, d_ / f)
            (d_ / index_name).write_text(json.dumps(
                {"metadata": {}, "weight_map": {k: f for f, ks in shards.items() for k in ks}}))
            victim = d_ / f"{stem}-00002-of-00002.{suffix}"
            gone = shards[victim.name][0]
            if how == "missing":
                victim.unlink()
            elif how == "cut":
                victim.write_bytes(victim.read_bytes()[:20])
            else:  # the shard rewritten without one of its keys; the index still names it
                part = {k: full[k] for k in shards[victim.name] if k != gone}
                save_file(part, str(victim)) if kind == "safetensors" else torch.save(part, victim)

            def load_set():  # what a sharded load does: each shard the index names, in turn
                got = {}
                for f in shards:
                    got |= load_file(str(d_ / f)) if kind == "safetensors" else torch.load(d_ / f)
                return got
            real = error_of(load_set)
            d = env.diff(d_, env.layout(f"shards-{kind}-{how}", base))
            e = entries(d)
            if how == "listed":  # every shard reads; the strict load of what they hold raises
                listed = subprocess.run([env.cli, "inspect", str(d_), "--json"], capture_output=True,
                                        text=True, timeout=300)
                problems = json.loads(listed.stdout).get("problems", []) if listed.stdout else []
                check(real is None and e.get(gone, {}).get("status") == "unloadable" and
                      "does not hold it" in e[gone]["reason"] and victim.name in e[gone]["reason"] and
                      any(p.get("key") == gone and "absent from its shard" in p.get("message", "")
                          for p in problems),
                      f"shards {kind} listed: {gone} {e.get(gone, {}).get('status')}; {problems[:2]}")
                same_outcome(f"shards {kind} listed", d, strict(module_from(base), load_set()))
                continue
            bad = sorted(n for n, x in e.items() if x["status"] == "unreadable")
            check(bad == sorted(shards[victim.name]) and all(victim.name in e[n]["reason"] for n in bad),
                  f"shards {kind} {how}: unreadable {bad} {[e[n]['reason'] for n in bad][:1]}")
            check(real is not None and d["outcome"]["action"] == "raises" and
                  (how != "missing" or d["outcome"]["message"] == f"{real[0]}: {real[1]}"),
                  f"shards {kind} {how}: the load raises {real}; the diff {d['outcome']}")

    # 6. One safetensors file (no index) whose entry's shape disagrees with its bytes: the
    # reader skips the entry with a note, and the diff says nothing of an index or a shard.
    single = env.tmp / "single-size-note"
    single.mkdir()
    f = single / "model.safetensors"
    save_file({k: full[k] for k in names}, str(f))
    raw = f.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    lying = next(k for k in names if ".layers." in k)  # no other rule maps a layer's weight
    header[lying]["shape"] = [s + 1 for s in header[lying]["shape"]]
    # ... and another entry whose bytes run past the buffer: unreadable, in the file's words.
    past = [k for k in names if ".layers." in k and k != lying][0]
    header[past]["data_offsets"][1] = len(raw) * 2
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    f.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n:])
    e = entries(env.diff(f, env.layout("single-size-note", base)))
    got = e.get(lying, {})
    check(got.get("status") == "unloadable" and "index" not in got.get("reason", "") and
          "shard" not in got.get("fix", ""), f"single file, size note: {got.get('reason')!r}")
    got = e.get(past, {})
    check(got.get("status") == "unreadable" and "model.safetensors lists it" in got.get("reason", "")
          and "index" not in got.get("reason", "") and "shard" not in got.get("fix", ""),
          f"single file, bytes past the buffer: {got.get('reason')!r}")


def case_megatron_layers(env: Env) -> None:
    """megatron-core's own torch_dist checkpoints (local spec, stacked layers, linears' extra
    states) loaded into models that differ from the saving one, under every strictness:
    - more or fewer layers than the checkpoint stacks: megatron-core raises its global shape
      check ("Global shape mismatch for loaded … tensor for key …") whatever the strictness;
    - no output layer in the checkpoint (saved tied, Megatron-Bridge PR 6032) for an untied
      model: only output_layer.weight keeps its initial values (log_all, return_all …), the
      extra states load; the raising modes raise megatron-core's words."""
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing.validation import StrictHandling
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig
    with megatron_model_parallel():
        torch.manual_seed(5)

        def build(layers: int, untied: bool = False) -> GPTModel:
            cfg = TransformerConfig(num_layers=layers, hidden_size=16, num_attention_heads=4,
                                    ffn_hidden_size=32, use_cpu_initialization=True)
            return GPTModel(cfg, get_gpt_layer_local_spec(), vocab_size=32, max_sequence_length=64,
                            share_embeddings_and_output_weights=not untied)

        def layout(name: str, model: GPTModel) -> Path:
            params = {n: (tuple(t.shape), t.dtype) for n, t in model.state_dict().items()
                      if isinstance(t, torch.Tensor) and not n.endswith("._extra_state")}
            tp_dims = {n: p.partition_dim for n, p in model.named_parameters()
                       if getattr(p, "tensor_model_parallel", False)}
            return env.layout(name, params, tp_dims=tp_dims, flags=EXTRA_STATE["local"][1])

        def megatron(path: Path, model_of) -> tuple[str, str] | None:
            m = model_of()

            def load():
                got = dist_checkpointing.load(m.sharded_state_dict(), str(path), strict=strict)
                # return_* modes return (state dict, missing keys, unexpected keys)
                m.load_state_dict(got[0] if isinstance(got, tuple) else got, strict=False)
            return error_of(load)

        two = env.tmp / "megatron-two-layers"
        two.mkdir()
        dist_checkpointing.save(build(2).sharded_state_dict(), str(two))
        for layers in (3, 1):
            lay = layout(f"megatron-{layers}-layers", build(layers))
            for strict in StrictHandling:
                real = megatron(two, lambda: build(layers))
                d = env.diff(two, lay, "--strictness", strict.value)
                text = real[1].strip().splitlines()[-1] if real else ""
                want = text.removeprefix("megatron.core.dist_checkpointing.core.")
                check(real is not None and "Global shape mismatch" in text and
                      d["outcome"]["action"] == "raises" and d["outcome"]["message"] == want,
                      f"{layers} layers {strict.value}: megatron-core {text!r}; "
                      f"diff {d['outcome']['action']} {d['outcome']['message']!r}")

        tied = env.tmp / "megatron-no-output-layer"
        tied.mkdir()
        dist_checkpointing.save({k: v for k, v in build(2, untied=True).sharded_state_dict().items()
                                 if not k.startswith("output_layer.")}, str(tied))
        lay = layout("megatron-untied", build(2, untied=True))
        for strict in StrictHandling:
            real = megatron(tied, lambda: build(2, untied=True))
            d = env.diff(tied, lay, "--strictness", strict.value)
            o = d["outcome"]
            if real is not None:
                text = real[1].strip().splitlines()[-1] if real[0] == "CheckpointException" \
                    else f"{real[0]}: {real[1]}"
                check(o["action"] == "raises" and (o["message"].strip() == text.strip() or
                                                   set_of(o["message"]) == set_of(text)),
                      f"no output layer {strict.value}: megatron-core {text!r}; diff {o}")
                continue
            check(o["action"] != "raises" and o["kept_at_init"] == ["output_layer.weight"],
                  f"no output layer {strict.value}: megatron-core keeps output_layer.weight at "
                  f"init; the diff {o['action']} keeps {o['kept_at_init']}")


def case_legacy_stacked_experts(env: Env) -> None:
    """MoE experts saved stacked in Megatron's legacy torch format (mlp.experts.mlp_fc1_weight
    [E, 2F, H], NVIDIA/Megatron-LM#5844) for a model that asks for each expert's
    local_experts.<e>.linear_fcN: the strict load fails, Megatron's retry with strict=False
    fills every other parameter. The diff must count exactly those as loaded and keep exactly
    the experts at their initial values (torch's own non-strict load says which)."""
    import argparse as ap
    h, f, experts, layers = 8, 16, 4, 3
    want = {"embedding.word_embeddings.weight": ((32, h), torch.float32)}
    for i in range(layers):
        q = f"decoder.layers.{i}"
        want |= {f"{q}.input_layernorm.weight": ((h,), torch.float32),
                 f"{q}.self_attention.linear_qkv.weight": ((3 * h, h), torch.float32),
                 f"{q}.self_attention.linear_proj.weight": ((h, h), torch.float32),
                 f"{q}.pre_mlp_layernorm.weight": ((h,), torch.float32),
                 f"{q}.mlp.router.weight": ((experts, h), torch.float32)}
        for e in range(experts):
            want |= {f"{q}.mlp.experts.local_experts.{e}.linear_fc1.weight": ((2 * f, h), torch.float32),
                     f"{q}.mlp.experts.local_experts.{e}.linear_fc2.weight": ((h, f), torch.float32)}
    want |= {"decoder.final_layernorm.weight": ((h,), torch.float32),
             "output_layer.weight": ((32, h), torch.float32)}
    stored = {k: v for k, v in want.items() if ".local_experts." not in k}
    for i in range(layers):
        stored[f"decoder.layers.{i}.mlp.experts.mlp_fc1_weight"] = ((experts, 2 * f, h), torch.float32)
        stored[f"decoder.layers.{i}.mlp.experts.mlp_fc2_weight"] = ((experts, h, f), torch.float32)
    root = env.tmp / "legacy-stacked-experts"
    rank = root / "iter_0000001" / "mp_rank_00"
    rank.mkdir(parents=True)
    sd = tensors(stored)
    torch.save({"checkpoint_version": 3.0, "iteration": 1, "model": sd,
                "args": ap.Namespace(num_layers=layers, hidden_size=h, ckpt_format="torch")},
               rank / "model_optim_rng.pt")
    (root / "latest_checkpointed_iteration.txt").write_text("1")
    real = module_from(want).load_state_dict(sd, strict=False)
    d = env.diff(root, env.layout("legacy-stacked-experts", want))
    kept = set(d["outcome"]["kept_at_init"])
    loaded = {x["name"] for x in d.get("entries", []) if x["status"] == "ok"}
    check(kept == set(real.missing_keys) and loaded == set(want) - set(real.missing_keys) and
          d["outcome"]["action"] != "raises",
          f"torch's retry fills {len(want) - len(real.missing_keys)} of {len(want)}; the diff loads "
          f"{len(loaded)}, keeps {len(kept)} at init ({sorted(kept ^ set(real.missing_keys))[:3]})")


class TiedLM(nn.Module):
    """A Hugging Face–style causal LM with tie_word_embeddings: lm_head.weight is the embedding,
    one Parameter under two names (its state_dict lists both, embedding first)."""

    def __init__(self, vocab: int = 32, h: int = 8, tied: bool = True):
        super().__init__()
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(vocab, h)
        self.model.norm = nn.LayerNorm(h)
        self.lm_head = nn.Linear(h, vocab, bias=False)
        if tied:
            self.lm_head.weight = self.model.embed_tokens.weight


def case_tied(env: Env) -> None:
    """Tied weights (vllm-project/vllm#51063, NVIDIA-NeMo/Automodel#2941). A tied model loading
    a checkpoint trained untied (lm_head.weight distinct from the embedding): torch's strict
    load_state_dict succeeds and leaves the one tensor holding whichever name it fills last; the
    other trained tensor is lost. With the layout tools/export_layout.py writes of the live tied
    module, the diff must name exactly the names whose stored values the model does not end up
    holding (torch says which, by comparing after its own load), as filled from the wrong key;
    with equal stored values (a tied save) nothing is lost; a tied save that stores the tensor
    once (safetensors' save_model) raises torch's Missing key(s) strictly, and non-strictly
    keeps nothing at its initial values. dcp.load decides by its read order: the same checks.
    Megatron's tied output layer (no weight of its own) against a checkpoint that stores one:
    lost when the values differ, nothing lost when equal."""
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import load_file, save_file, save_model
    from export_layout import export_layout, layout_from_state_dict
    torch.manual_seed(3)
    untied = TiedLM(tied=False)
    tied_src = TiedLM()
    layout = env.tmp / "tied-layout.json"
    layout.write_text(json.dumps(export_layout(TiedLM(), source="tied")))
    check(json.loads(layout.read_text()).get("ties") ==
          [["model.embed_tokens.weight", "lm_head.weight"]],
          f"export_layout ties: {json.loads(layout.read_text()).get('ties')}")

    def saved(name: str, model: nn.Module, fmt: str) -> Path:
        sd = model.state_dict()
        if fmt == "torchsave":
            path = env.tmp / f"{name}.pt"
            torch.save(sd, path)
        elif fmt == "safetensors":
            path = env.tmp / f"{name}.safetensors"
            save_file({k: v.clone() for k, v in sd.items()}, str(path))
        elif fmt == "safetensors_once":  # Hugging Face's tied save: the tensor stored once
            path = env.tmp / f"{name}.safetensors"
            save_model(model, str(path))
        else:
            path = env.tmp / f"{name}-dcp"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                dcp.save({k: v.clone() for k, v in sd.items()}, checkpoint_id=str(path))
        return path

    def real_load(path: Path, fmt: str, strict: bool):
        """The tied model after torch's own load, or what it raised."""
        model = TiedLM()
        if fmt == "dcp":
            sd = model.state_dict()
            err = error_of(lambda: dcp.load(sd, checkpoint_id=str(path)))
            return model, sd, err
        sd = torch.load(path) if fmt == "torchsave" else load_file(str(path))
        res = {}
        err = error_of(lambda: res.setdefault("r", model.load_state_dict(sd, strict=strict)))
        return model, sd, err

    for source, fmts in (("untied", ("torchsave", "safetensors", "dcp")),
                         ("tied", ("torchsave", "safetensors", "safetensors_once", "dcp"))):
        for fmt in fmts:
            tag = f"tied model / {source} save / {fmt}"
            path = saved(f"{source}-{fmt}", untied if source == "untied" else tied_src, fmt)
            stored = {k: v for k, v in (torch.load(path).items() if fmt == "torchsave" else
                                        load_file(str(path)).items() if "safetensors" in fmt
                                        else {}.items())}
            if fmt == "dcp":
                stored = {k: torch.empty_like(v) for k, v in untied.state_dict().items()}
                dcp.load(stored, checkpoint_id=str(path))
            model, _, err = real_load(path, fmt, True)
            d = env.diff(path, layout)
            o = d["outcome"]
            entries = {x["name"]: x for x in d.get("entries", []) if x["section"] == "model"}
            if err is not None:
                kind, msg = err
                text = msg.strip().splitlines()[-1] if kind == "CheckpointException" else \
                    f"{kind}: " + msg.replace("for TiedLM:", "for <model>:")
                check(o["action"] == "raises" and o["message"] == text,
                      f"{tag}: torch raises {text!r}; the diff {o['action']}: {o['message']!r}")
                # Non-strict: torch names it missing, yet the tie fills it.
                if fmt != "dcp":
                    m2, _, err2 = real_load(path, fmt, False)
                    d2 = env.diff(path, layout, "--no-strict")
                    lost = [n for n in ("model.embed_tokens.weight", "lm_head.weight")
                            if n in stored and not torch.equal(m2.state_dict()[n], stored[n])]
                    names = ("model.embed_tokens.weight", "lm_head.weight")
                    absent = [n for n in names if n not in stored]
                    tied_to = {n: entries.get(n, {}).get("tied_to") for n in absent}
                    check(err2 is None and not lost and d2["outcome"]["kept_at_init"] == [] and
                          absent and all(t in stored for t in tied_to.values()),
                          f"{tag} strict=False: torch fills both names ({lost}); the diff keeps "
                          f"{d2['outcome']['kept_at_init']} at init, tied_to {tied_to}")
                continue
            after = model.state_dict()
            lost = {n for n in ("model.embed_tokens.weight", "lm_head.weight")
                    if not torch.equal(after[n], stored[n])}
            wrong = {n for n, x in entries.items() if x["status"] == "wrong_source"}
            check(wrong == lost and set(o["loaded_wrong"]) == lost and
                  (d["exit"] == 1) == bool(lost),
                  f"{tag}: torch's load leaves {sorted(lost)} not holding their stored values; "
                  f"the diff says {sorted(wrong)} (exit {d['exit']}, {o['action']})")
    # From a torch.save of the tied model, export_layout --state-dict finds the tie by storage.
    lay_sd = layout_from_state_dict(torch.load(env.tmp / "tied-torchsave.pt"))
    check(lay_sd.get("ties") == [["model.embed_tokens.weight", "lm_head.weight"]],
          f"export_layout --state-dict ties: {lay_sd.get('ties')}")
    case_tied_megatron(env)


def case_tied_megatron(env: Env) -> None:
    """A Megatron GPTModel built tied (share_embeddings_and_output_weights: no output layer
    weight of its own) loading megatron-core's save of an untied one: megatron-core ignores the
    stored output_layer.weight. Its trained values are lost when they differ from the embedding's
    (torch compares), and nothing is lost when they are equal; the layouts from export_layout.py
    and from the Megatron arguments both say the tie."""
    from megatron.core import dist_checkpointing
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig
    from export_layout import export_layout
    with megatron_model_parallel():
        torch.manual_seed(9)

        def build(tied: bool) -> GPTModel:
            cfg = TransformerConfig(num_layers=2, hidden_size=16, num_attention_heads=4,
                                    ffn_hidden_size=32, use_cpu_initialization=True)
            return GPTModel(cfg, get_gpt_layer_local_spec(), vocab_size=32,
                            max_sequence_length=64, share_embeddings_and_output_weights=tied)

        # The generated layouts say the tie as the configs do.
        hf = {"model_type": "llama", "hidden_size": 16, "num_hidden_layers": 2,
              "num_attention_heads": 4, "intermediate_size": 32, "vocab_size": 32}
        tie = ["embedding.word_embeddings.weight", "output_layer.weight"]
        for name, cfg, want in (
                ("hf-tied.json", json.dumps({**hf, "tie_word_embeddings": True}), True),
                ("hf-untied.json", json.dumps({**hf, "tie_word_embeddings": False}), False),
                ("megatron-tied.args", MEGATRON_RUNS["gpt"], True),
                ("megatron-untied.args", MEGATRON_RUNS["llama"], False)):
            (env.tmp / name).write_text(cfg)
            out = env.tmp / (name + ".layout.json")
            p = subprocess.run([env.cli, "layout", "--from-config", str(env.tmp / name), "-o",
                                str(out)], capture_output=True, text=True, timeout=120)
            ties = json.loads(out.read_text()).get("ties", []) if p.returncode == 0 else p.stderr
            check((tie in ties) == want, f"layout --from-config {name}: ties {ties}")
        lay = export_layout(build(True), source="megatron tied")
        check(["embedding.word_embeddings.weight", "output_layer.weight"] in lay.get("ties", []),
              f"export_layout of a tied GPTModel: ties {lay.get('ties')}")
        layout = env.tmp / "megatron-tied.json"
        layout.write_text(json.dumps(lay))
        for equal in (False, True):
            src = build(False)
            if equal:
                with torch.no_grad():
                    src.output_layer.weight.copy_(src.embedding.word_embeddings.weight)
            path = env.tmp / f"megatron-untied-save-{equal}"
            path.mkdir()
            with contextlib.redirect_stdout(io.StringIO()):
                dist_checkpointing.save(src.sharded_state_dict(), str(path))
            real = error_of(lambda: dist_checkpointing.load(build(True).sharded_state_dict(),
                                                            str(path)))
            same = torch.equal(src.output_layer.weight, src.embedding.word_embeddings.weight)
            d = env.diff(path, layout)
            u = {x["key"]: x for x in d.get("unconsumed", [])}.get("output_layer.weight", {})
            check(real is None and u.get("redundant") == same and d["exit"] == (0 if same else 1)
                  and ("differ" in u.get("note", "")) != same,
                  f"megatron tied, stored output layer {'equal' if same else 'distinct'}: "
                  f"megatron-core {real}; diff exit {d['exit']}, {u}")


CASES = {"state_dict": case_state_dict, "tied": case_tied, "dcp": case_dcp, "torch_dist": case_torch_dist,
         "legacy": case_legacy, "te_torch_dist": case_te_torch_dist, "te_legacy": case_te_legacy,
         "mla_q_lora_null": case_mla_q_lora_null, "causes": case_causes,
         "megatron_gpt": case_megatron_gpt, "megatron_moe": case_megatron_moe,
         "megatron_args": case_megatron_args, "param_groups": case_param_groups,
         "untrained_experts": case_untrained_experts, "mla_versions": case_mla_versions,
         "named_causes": case_named_causes, "megatron_layers": case_megatron_layers,
         "legacy_stacked_experts": case_legacy_stacked_experts, "mla_tp": case_mla_tp,
         "zero3": case_zero3,
         "mxfp4": case_mxfp4, "dcp_optimizer": case_dcp_optimizer, "peft_lora": case_peft_lora,
         "added_settings": case_added_settings, "grouped_mlp": case_grouped_mlp}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("case", choices=sorted(CASES))
    a = ap.parse_args()
    CASES[a.case](Env(a.cli))
    for f in FAILURES:
        print("FAIL", f)
    print(f"{a.case}: {'ok' if not FAILURES else f'{len(FAILURES)} failures'}")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
