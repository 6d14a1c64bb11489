#!/usr/bin/env python3
"""Write a multi-GB Megatron-FSDP-style checkpoint for the verification benchmark.

    python bench/make_verify_checkpoint.py --out DIR [--hidden 2048 --layers 8]

A Llama-style model (GQA, SwiGLU) saved the way Megatron-FSDP's fsdp_dtensor format holds it
after its handlers: fp32 main weights under ``model.module.<name>`` with SwiGLU ``linear_fc1``
split into ``weight_w`` / ``weight_v``; no optimizer state (the benchmark measures parameter
loading). Written by ``torch.distributed.checkpoint.save`` in one process, with the Hugging Face
``config.json`` that ``shardscope-cli layout --from-config`` turns into the matching layout.
With the defaults: about 2.2 GB.
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--ffn", type=int, default=5632)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32000)
    a = ap.parse_args()
    out = Path(a.out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    h, hn = a.hidden, a.hidden // a.heads
    config = {"model_type": "llama", "hidden_size": h, "intermediate_size": a.ffn,
              "num_attention_heads": a.heads, "num_key_value_heads": a.groups,
              "num_hidden_layers": a.layers, "vocab_size": a.vocab, "tie_word_embeddings": False,
              "hidden_act": "silu", "torch_dtype": "bfloat16"}
    (out / "config.json").write_text(json.dumps(config, indent=1))
    g = torch.Generator().manual_seed(0)

    def t(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float32)

    sd = {"embedding.word_embeddings.weight": t(a.vocab, h)}
    for i in range(a.layers):
        p = f"decoder.layers.{i}"
        sd[f"{p}.self_attention.linear_qkv.layer_norm_weight"] = t(h)
        sd[f"{p}.self_attention.linear_qkv.weight"] = t((a.heads + 2 * a.groups) * hn, h)
        sd[f"{p}.self_attention.linear_proj.weight"] = t(h, a.heads * hn)
        sd[f"{p}.mlp.linear_fc1.layer_norm_weight"] = t(h)
        sd[f"{p}.mlp.linear_fc1.weight_w"] = t(a.ffn, h)
        sd[f"{p}.mlp.linear_fc1.weight_v"] = t(a.ffn, h)
        sd[f"{p}.mlp.linear_fc2.weight"] = t(h, a.ffn)
    sd["decoder.final_layernorm.weight"] = t(h)
    sd["output_layer.weight"] = t(a.vocab, h)
    dcp.save({"model": {"module." + k: v for k, v in sd.items()}},
             checkpoint_id=str(out / "ckpt"), no_dist=True)
    size = sum(f.stat().st_size for f in (out / "ckpt").iterdir())
    print(f"wrote {out}/ckpt: {size / 2**30:.2f} GiB, {len(sd)} tensors")


if __name__ == "__main__":
    main()
