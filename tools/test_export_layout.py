#!/usr/bin/env python3
"""Test tools/export_layout.py on a tiny model built from Megatron-like module classes.

    python tools/test_export_layout.py        # exit 0 = pass, 1 = failures (listed)

The model has the attribute names Megatron's fsdp_dtensor handlers look for (docs/formats.md §6): a
TransformerLayer-like class with ``config.gated_linear_unit`` (GLU and GELU layers), a fused MLA
attention with ``linear_qkv_down_proj`` (TE layer-norm linear), TE-grouped and sequential experts,
shared experts with a gate, a router with a persistent ``expert_bias`` and a non-persistent buffer,
a GDN block, an MTP block with ``mtp_model_layer``, TE ``_extra_state``, TP attributes
(``tensor_model_parallel``, ``partition_dim``), and two ``module.`` wrapper levels. Expected values
are computed from the model (its state_dict, parameters and module objects), never typed in.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
from types import SimpleNamespace

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import export_layout  # noqa: E402

FAILURES: list[str] = []


def check(cond: bool, msg: str) -> None:
    if not cond:
        FAILURES.append(msg)


# ---------------------------------------------------------------------------------------------
# Megatron-like modules (only the attributes the exporter reads, and plausible shapes)
# ---------------------------------------------------------------------------------------------


def tp(p: nn.Parameter, dim: int) -> nn.Parameter:
    p.tensor_model_parallel = True
    p.partition_dim = dim
    return p


def param(*shape, dtype, fill=None) -> nn.Parameter:
    t = torch.empty(shape, dtype=dtype)
    if t.device.type != "meta":
        nn.init.normal_(t, std=0.02) if fill is None else t.fill_(fill)
    return nn.Parameter(t)


class Norm(nn.Module):
    def __init__(self, n, dtype):
        super().__init__()
        self.weight = param(n, dtype=dtype, fill=1.0)


class ColumnLinear(nn.Module):
    """TE(LayerNorm)ColumnParallelLinear: weight [out, in] on TP dim 0, optional fused norm."""

    def __init__(self, i, o, dtype, ln=False, bias=False, extra_state=False):
        super().__init__()
        self.weight = tp(param(o, i, dtype=dtype), 0)
        if bias:
            self.bias = tp(param(o, dtype=dtype, fill=0.0), 0)
        if ln:
            self.layer_norm_weight = param(i, dtype=dtype, fill=1.0)  # replicated over TP
        self._extra = extra_state

    def get_extra_state(self):  # TE FP8 metadata: Megatron drops it before saving
        return torch.zeros(4, dtype=torch.uint8)

    def set_extra_state(self, state):
        pass

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        if not self._extra:
            destination.pop(prefix + "_extra_state", None)


class RowLinear(nn.Module):
    def __init__(self, i, o, dtype):
        super().__init__()
        self.weight = tp(param(o, i, dtype=dtype), 1)


class GroupedLinear(nn.Module):
    """TEGroupedLinear: one parameter weight<e> per local expert."""

    def __init__(self, n, i, o, dim, dtype):
        super().__init__()
        for e in range(n):
            self.register_parameter(f"weight{e}", tp(param(o, i, dtype=dtype), dim))


class MLP(nn.Module):
    def __init__(self, config, h, ffn, dtype, ln=False, bias=False):
        super().__init__()
        self.config = config
        rows = 2 * ffn if config.gated_linear_unit else ffn
        self.linear_fc1 = ColumnLinear(h, rows, dtype, ln=ln, bias=bias)
        self.linear_fc2 = RowLinear(ffn, h, dtype)


class GroupedMLP(nn.Module):
    def __init__(self, config, h, ffn, dtype):
        super().__init__()
        self.config = config
        n = config.num_moe_experts
        self.linear_fc1 = GroupedLinear(n, h, (2 if config.gated_linear_unit else 1) * ffn, 0, dtype)
        self.linear_fc2 = GroupedLinear(n, ffn, h, 1, dtype)


class SequentialMLP(nn.Module):
    def __init__(self, config, h, ffn, dtype):
        super().__init__()
        self.config = config
        self.local_experts = nn.ModuleList(MLP(config, h, ffn, dtype)
                                           for _ in range(config.num_moe_experts))


class TopKRouter(nn.Module):
    def __init__(self, config, h):
        super().__init__()
        self.config = config
        n = config.num_moe_experts
        self.weight = param(n, h, dtype=torch.float32)  # created fp32, like Megatron's router
        self.register_buffer("expert_bias", torch.zeros(n, dtype=torch.float32))
        self.register_buffer("local_tokens_per_expert", torch.zeros(n), persistent=False)


class SharedExpertMLP(MLP):
    def __init__(self, config, h, ffn, dtype):
        super().__init__(config, h, ffn, dtype)
        self.gate_weight = param(1, h, dtype=dtype)


class MoELayer(nn.Module):
    def __init__(self, config, h, dtype, sequential=False):
        super().__init__()
        self.config = config
        self.router = TopKRouter(config, h)
        cls = SequentialMLP if sequential else GroupedMLP
        self.experts = cls(config, h, config.moe_ffn_hidden_size, dtype)
        self.shared_experts = SharedExpertMLP(config, h, config.moe_shared_expert_intermediate_size,
                                              dtype)


class SelfAttention(nn.Module):
    def __init__(self, config, h, dtype, extra_state=False):
        super().__init__()
        self.config = config
        np_, ng, hn = config.num_attention_heads, config.num_query_groups, config.kv_channels
        self.linear_qkv = ColumnLinear(h, (np_ + 2 * ng) * hn, dtype, ln=True,
                                       extra_state=extra_state)
        self.q_layernorm = Norm(hn, dtype)
        self.k_layernorm = Norm(hn, dtype)
        self.linear_proj = RowLinear(np_ * hn, h, dtype)


class FusedMLASelfAttention(nn.Module):
    def __init__(self, config, h, dtype):
        super().__init__()
        self.config = config
        c = config
        self.linear_qkv_down_proj = ColumnLinear(
            h, c.q_lora_rank + c.kv_lora_rank + c.qk_pos_emb_head_dim, dtype, ln=True)
        self.linear_q_up_proj = ColumnLinear(
            c.q_lora_rank, c.num_attention_heads * (c.qk_head_dim + c.qk_pos_emb_head_dim), dtype,
            ln=True)
        self.linear_kv_up_proj = ColumnLinear(
            c.kv_lora_rank, c.num_attention_heads * (c.qk_head_dim + c.v_head_dim), dtype, ln=True)
        self.linear_proj = RowLinear(c.num_attention_heads * c.v_head_dim, h, dtype)


class GatedDeltaNet(nn.Module):
    def __init__(self, config, h, dtype):
        super().__init__()
        self.config = config
        self.qk_dim = config.linear_num_key_heads * config.linear_key_head_dim
        self.v_dim = config.linear_num_value_heads * config.linear_value_head_dim
        self.num_value_heads = config.linear_num_value_heads
        self.in_proj_dim = 2 * self.qk_dim + 2 * self.v_dim + 2 * self.num_value_heads
        self.in_proj = ColumnLinear(h, self.in_proj_dim, dtype, ln=True)
        conv = 2 * self.qk_dim + self.v_dim
        self.conv1d = nn.Conv1d(conv, conv, config.linear_conv_kernel_dim, groups=conv, bias=True,
                                dtype=dtype)
        tp(self.conv1d.weight, 0)
        tp(self.conv1d.bias, 0)
        self.A_log = tp(param(self.num_value_heads, dtype=dtype), 0)
        self.dt_bias = tp(param(self.num_value_heads, dtype=dtype), 0)
        self.out_norm = Norm(config.linear_value_head_dim, dtype)
        self.out_proj = RowLinear(self.v_dim, h, dtype)


class TransformerLayer(nn.Module):
    def __init__(self, config, h, dtype, attention: str, moe: str | None, extra_state=False):
        super().__init__()
        self.config = config
        if attention == "mla":
            self.self_attention = FusedMLASelfAttention(config, h, dtype)
        elif attention == "gdn":
            self.self_attention = GatedDeltaNet(config, h, dtype)
        else:
            self.self_attention = SelfAttention(config, h, dtype, extra_state)
        if moe:
            self.pre_mlp_layernorm = Norm(h, dtype)
            self.mlp = MoELayer(config, h, dtype, sequential=moe == "sequential")
        else:
            self.pre_mlp_layernorm = nn.Identity()
            self.mlp = MLP(config, h, config.ffn_hidden_size, dtype, ln=True, bias=True)


class MultiTokenPredictionLayer(nn.Module):
    def __init__(self, config, h, dtype):
        super().__init__()
        self.config = config
        self.mtp_layer_pattern = None
        self.enorm = Norm(h, dtype)
        self.hnorm = Norm(h, dtype)
        self.eh_proj = ColumnLinear(2 * h, h, dtype)
        self.mtp_model_layer = TransformerLayer(config, h, dtype, "mla", "grouped")
        self.final_layernorm = Norm(h, dtype)


class Holder(nn.Module):
    pass


class GPTModel(nn.Module):
    def __init__(self, config, gelu_config, dtype, vocab):
        super().__init__()
        h = config.hidden_size
        self.config = config
        self.embedding = Holder()
        self.embedding.word_embeddings = nn.Embedding(vocab, h, dtype=dtype)
        tp(self.embedding.word_embeddings.weight, 0)
        self.embedding.position_embeddings = nn.Embedding(16, h, dtype=dtype)
        self.embedding.position_embeddings.weight.requires_grad_(False)  # frozen: no optimizer
        self.decoder = Holder()
        self.decoder.layers = nn.ModuleList([
            TransformerLayer(config, h, dtype, "gqa", None, extra_state=True),
            TransformerLayer(config, h, dtype, "mla", "grouped"),
            TransformerLayer(config, h, dtype, "gdn", "sequential"),
            TransformerLayer(gelu_config, h, dtype, "gqa", None),  # GELU: fc1 stays unfused
        ])
        self.decoder.final_layernorm = Norm(h, dtype)
        self.mtp = Holder()
        self.mtp.layers = nn.ModuleList([MultiTokenPredictionLayer(config, h, dtype)])
        self.output_layer = ColumnLinear(h, vocab, dtype)


class Wrapper(nn.Module):
    """FSDP adapter / Float16Module: adds a ``module.`` level to every name."""

    def __init__(self, module):
        super().__init__()
        self.module = module


def make_config(**kw) -> SimpleNamespace:
    c = dict(hidden_size=32, ffn_hidden_size=24, num_attention_heads=4, num_query_groups=2,
             kv_channels=8, gated_linear_unit=True, num_moe_experts=12, moe_ffn_hidden_size=8,
             moe_shared_expert_intermediate_size=12, q_lora_rank=24, kv_lora_rank=12,
             qk_pos_emb_head_dim=4, qk_head_dim=8, v_head_dim=6, linear_num_key_heads=2,
             linear_key_head_dim=4, linear_num_value_heads=4, linear_value_head_dim=6,
             linear_conv_kernel_dim=4)
    c.update(kw)
    return SimpleNamespace(**c)


def build_model(num_experts: int = 12, q_lora_rank: int = 24, dtype: str = "bfloat16",
                vocab: int = 64) -> nn.Module:
    """Factory for ``export_layout.py test_export_layout:build_model``."""
    dt = getattr(torch, dtype)
    cfg = make_config(num_moe_experts=num_experts, q_lora_rank=q_lora_rank)
    gelu = make_config(num_moe_experts=num_experts, gated_linear_unit=False)
    return Wrapper(Wrapper(GPTModel(cfg, gelu, dt, vocab)))


# ---------------------------------------------------------------------------------------------
# Expectations, computed from the model objects
# ---------------------------------------------------------------------------------------------


def strip(name: str) -> str:
    while name.startswith("module."):
        name = name[len("module."):]
    return name


def expected_facts(model: nn.Module):
    """(fusions, absorbs, experts) keyed by stripped name, from isinstance() on the test's own
    classes (a different route from the exporter's duck typing)."""
    fusions: dict[str, tuple[str, list]] = {}
    absorbs: dict[str, str] = {}
    experts: dict[str, int] = {}
    for path, m in model.named_modules():
        p = strip(path)
        if isinstance(m, FusedMLASelfAttention):
            c = m.config
            fusions[f"{p}.linear_qkv_down_proj.weight"] = ("mla_down_proj", [
                (f"{p}.linear_q_down_proj.weight", c.q_lora_rank),
                (f"{p}.linear_kv_down_proj.weight", c.kv_lora_rank + c.qk_pos_emb_head_dim)])
            layer = p.rsplit(".", 1)[0]
            absorbs[f"{p}.linear_qkv_down_proj.layer_norm_weight"] = f"{layer}.input_layernorm.weight"
        if isinstance(m, GatedDeltaNet):
            names6 = ["query", "key", "value", "z", "beta", "alpha"]
            sizes6 = [m.qk_dim, m.qk_dim, m.v_dim, m.v_dim, m.num_value_heads, m.num_value_heads]
            fusions[f"{p}.in_proj.weight"] = (
                "gdn", [(f"{p}.in_proj.weight.{n}", s) for n, s in zip(names6, sizes6)])
            for leaf in ("weight", "bias"):
                fusions[f"{p}.conv1d.{leaf}"] = ("gdn", [
                    (f"{p}.conv1d.{leaf}.{n}", s) for n, s in zip(names6[:3], sizes6[:3])])
        if isinstance(m, TransformerLayer) and m.config.gated_linear_unit:
            for sub, mod in m.mlp.named_modules():
                if not (sub.endswith("linear_fc1")
                        and isinstance(mod, (ColumnLinear, GroupedLinear))):
                    continue
                for leaf, t in mod.named_parameters(recurse=False):
                    if leaf == "layer_norm_weight":
                        continue
                    name = f"{p}.mlp.{sub}.{leaf}"
                    half = t.shape[0] // 2
                    fusions[name] = ("swiglu", [(name + "_w", half), (name + "_v", half)])
        if isinstance(m, GroupedLinear):
            for leaf, _ in m.named_parameters(recurse=False):
                experts[f"{p}.{leaf}"] = int(leaf[len("weight"):])
        if isinstance(m, SequentialMLP):
            for e, ex in enumerate(m.local_experts):
                for leaf, _ in ex.named_parameters():
                    experts[f"{p}.local_experts.{e}.{leaf}"] = e
    return fusions, absorbs, experts


def check_layout(layout: dict, model: nn.Module, parallel: dict, tag: str) -> None:
    sd = model.state_dict()
    params = dict(model.named_parameters())
    keys = [k for k in sd if not k.endswith("_extra_state")]
    check(any(k.endswith("_extra_state") for k in sd), f"{tag}: test model lacks _extra_state")
    check(layout.get("schema") == "shardscope.layout/1", f"{tag}: schema {layout.get('schema')}")
    check(layout.get("parallel") == parallel, f"{tag}: parallel {layout.get('parallel')}")
    check(layout.get("mtp_inner") == "mtp_model_layer", f"{tag}: mtp_inner {layout.get('mtp_inner')}")
    n_exp = model.module.module.config.num_moe_experts
    check(layout.get("num_experts") == n_exp, f"{tag}: num_experts {layout.get('num_experts')}")
    entries = layout.get("params", [])
    names = [e["name"] for e in entries]
    check(names == [strip(k) for k in keys],
          f"{tag}: names differ: missing {sorted(set(map(strip, keys)) - set(names))[:5]}, "
          f"extra {sorted(set(names) - set(map(strip, keys)))[:5]}")
    by_name = {e["name"]: e for e in entries}
    fusions, absorbs, experts = expected_facts(model)
    check(len(fusions) >= 20 and len(absorbs) == 2 and len(experts) >= 24,
          f"{tag}: test model too small ({len(fusions)} fusions, {len(absorbs)} absorbs)")
    for k in keys:
        n, t = strip(k), sd[k]
        e = by_name.get(n)
        if e is None:
            continue
        check(e["shape"] == list(t.shape), f"{tag}: {n} shape {e['shape']} != {list(t.shape)}")
        want_dtype = str(t.dtype).removeprefix("torch.")
        check(e["dtype"] == want_dtype, f"{tag}: {n} dtype {e['dtype']} != {want_dtype}")
        p = params.get(k)
        want_tp = p.partition_dim if p is not None and getattr(p, "tensor_model_parallel", False) \
            else -1
        check(e["tp_dim"] == want_tp, f"{tag}: {n} tp_dim {e['tp_dim']} != {want_tp}")
        want_state = p is not None and p.requires_grad
        check(e.get("optimizer_state", True) == want_state,
              f"{tag}: {n} optimizer_state {e.get('optimizer_state', True)} != {want_state}")
        f = e.get("fusion")
        if n in fusions:
            rule, sections = fusions[n]
            got = f and [(s["name"], s["size"]) for s in f["sections"]]
            check(bool(f) and f["rule"] == rule and f["dim"] == 0 and f["tp_interleaved"] is True
                  and f.get("tp_local", False) is False and got == sections,
                  f"{tag}: {n} fusion {f} != {rule} {sections}")
            check(sum(s for _, s in sections) == t.shape[0], f"{tag}: {n} sections sum")
        else:
            check(f is None, f"{tag}: {n} unexpected fusion {f}")
        check(e.get("absorbs") == absorbs.get(n),
              f"{tag}: {n} absorbs {e.get('absorbs')} != {absorbs.get(n)}")
        check(e.get("expert") == experts.get(n),
              f"{tag}: {n} expert {e.get('expert')} != {experts.get(n)}")
    # Spot checks that the expectation itself covers what the handlers cover.
    for name in ("decoder.layers.0.mlp.linear_fc1.weight", "decoder.layers.0.mlp.linear_fc1.bias",
                 "decoder.layers.1.mlp.experts.linear_fc1.weight3",
                 "decoder.layers.2.mlp.experts.local_experts.1.linear_fc1.weight",
                 "decoder.layers.1.mlp.shared_experts.linear_fc1.weight",
                 "mtp.layers.0.mtp_model_layer.self_attention.linear_qkv_down_proj.weight"):
        check(name in fusions and "fusion" in by_name.get(name, {}), f"{tag}: {name} not fused")
    check("fusion" not in by_name.get("decoder.layers.3.mlp.linear_fc1.weight", {"fusion": 1}),
          f"{tag}: GELU layer fc1 fused")
    bufs = [e["name"] for e in entries if e["name"].endswith("expert_bias")]
    check(len(bufs) == 3 and all(by_name[b].get("optimizer_state") is False for b in bufs),
          f"{tag}: expert_bias buffers {bufs}")
    check(not any("local_tokens_per_expert" in n for n in names), f"{tag}: non-persistent buffer")


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------


def run_cli(args: list[str], subprocess_run: bool = False) -> tuple[int, str]:
    """export_layout's command line: in a fresh interpreter (as users run it, importing the
    factory from the working directory) or, cheaper, through main() in this process."""
    if subprocess_run:
        r = subprocess.run([sys.executable, os.path.join(HERE, "export_layout.py"), *args],
                           cwd=HERE, capture_output=True, text=True, timeout=300)
        return r.returncode, r.stderr
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            rc = export_layout.main(args)
        except SystemExit as e:  # argparse errors
            rc = e.code if isinstance(e.code, int) else 1
    return rc, err.getvalue()


def test_api() -> None:
    model = build_model()
    par = {"tp": 2, "pp": 1, "ep": 2, "etp": 1, "dp_shard": 4}
    layout = export_layout.export_layout(model, par, "test", "test")
    check_layout(json.loads(json.dumps(layout)), model, par, "api")


def test_cli(tmp: str) -> None:
    out = os.path.join(tmp, "layout.json")
    for meta in (False, True):
        rc, err = run_cli(["test_export_layout:build_model", "--arg", "num_experts=11",
                           "--arg", "dtype=\"bfloat16\"", "--tp", "2", "--ep", "4",
                           "--dp-shard", "2", "-o", out] + (["--meta"] if meta else []),
                          subprocess_run=meta)
        check(rc == 0, f"cli meta={meta}: rc {rc}: {err.strip()[-300:]}")
        if rc == 0:
            with open(out) as f:
                layout = json.load(f)
            par = {"tp": 2, "pp": 1, "ep": 4, "etp": 1, "dp_shard": 2}
            check_layout(layout, build_model(num_experts=11), par, f"cli meta={meta}")


def test_bad_sections(tmp: str) -> None:
    # A q_lora_rank the fused weight does not have (as when built TP-sharded): must refuse.
    model = build_model()
    for m in model.modules():
        if isinstance(m, FusedMLASelfAttention):
            m.config = SimpleNamespace(**{**vars(m.config), "q_lora_rank": 100})
    try:
        export_layout.export_layout(model)
        check(False, "bad sections: no error")
    except export_layout.LayoutError:
        pass
    rc, _ = run_cli(["test_export_layout:not_there", "-o", os.path.join(tmp, "x.json")])
    check(rc != 0, "cli: missing factory accepted")


def test_no_config_glu() -> None:
    # fc1 outside any TransformerLayer and without config.gated_linear_unit: never guessed.
    m = Holder()
    m.mlp = Holder()
    m.mlp.linear_fc1 = ColumnLinear(8, 16, torch.float32)
    with contextlib.redirect_stderr(io.StringIO()) as err:
        layout = export_layout.export_layout(m)
    check("left unfused" in err.getvalue(), "no-config fc1: no warning")
    e = {p["name"]: p for p in layout["params"]}["mlp.linear_fc1.weight"]
    check("fusion" not in e, "no-config fc1 fused")


def test_state_dict(tmp: str) -> None:
    model = build_model()
    path = os.path.join(tmp, "sd.pt")
    torch.save({"model": model.state_dict(), "iteration": 3}, path)
    out = os.path.join(tmp, "sd_layout.json")
    rc, err = run_cli(["--state-dict", path, "--key", "model", "--no-optimizer-state",
                       r"expert_bias$", "--dtype", "float32", "-o", out])
    check(rc == 0, f"state-dict: rc {rc}: {err.strip()[-300:]}")
    if rc != 0:
        return
    with open(out) as f:
        layout = json.load(f)
    sd = {strip(k): v for k, v in model.state_dict().items() if not k.endswith("_extra_state")}
    got = {e["name"]: e for e in layout["params"]}
    check(list(got) == list(sd), "state-dict: names differ")
    _, _, experts = expected_facts(model)
    for n, t in sd.items():
        e = got.get(n, {})
        check(e.get("shape") == list(t.shape), f"state-dict: {n} shape")
        want = "float32" if t.is_floating_point() else str(t.dtype).removeprefix("torch.")
        check(e.get("dtype") == want, f"state-dict: {n} dtype {e.get('dtype')} != {want}")
        check(e.get("tp_dim") == -1 and "fusion" not in e and "absorbs" not in e,
              f"state-dict: {n} has module facts")
        check(e.get("optimizer_state", True) == (not n.endswith("expert_bias")),
              f"state-dict: {n} optimizer_state")
        check(e.get("expert") == experts.get(n), f"state-dict: {n} expert")
    check(layout["mtp_inner"] == "mtp_model_layer" and layout["num_experts"] == 12,
          "state-dict: mtp_inner / num_experts")


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        tests = {"api": test_api, "cli": lambda: test_cli(tmp),
                 "bad_sections": lambda: test_bad_sections(tmp),
                 "no_config_glu": test_no_config_glu, "state_dict": lambda: test_state_dict(tmp)}
        for name, test in tests.items():
            try:
                test()
            except Exception as e:  # a crash is a failure, reported with the others
                FAILURES.append(f"{name}: {type(e).__name__}: {e}")
    if FAILURES:
        print(f"FAIL: {len(FAILURES)} problem(s)")
        for f in FAILURES[:50]:
            print("  " + f)
        return 1
    print("ok: export_layout")
    return 0


if __name__ == "__main__":
    sys.exit(main())
