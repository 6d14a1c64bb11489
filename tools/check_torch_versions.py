#!/usr/bin/env python3
"""What `fix` writes, read by an older torch: our `.metadata` pickle, the torch.save archives of
rewritten keys (float8 too) and a rewritten torch.save file.

    python tools/check_torch_versions.py --cli shardscope-cli --demo DEMO \
        --fixtures LAYOUT_FIXTURES --old-python /tmp/venv24/bin/python

Run with the project's torch: writes the outputs, loads every key of each with a strict
dcp.load (torch.load for the torch.save file) and keeps the values; then runs itself under
--old-python (a virtual environment with another torch from PyPI, e.g. `pip install
torch==2.4.1 "numpy<2"`), which loads the same keys and compares bit for bit. Not part of the
test suite: it needs a second torch installed. Exits 0 when every value is the same.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

warnings.filterwarnings("ignore")


def load_all(d: Path) -> dict[str, torch.Tensor]:
    md = dcp.FileSystemReader(str(d)).read_metadata().state_dict_metadata
    sd = {k: torch.empty(tuple(m.size), dtype=m.properties.dtype)
          for k, m in md.items() if hasattr(m, "size")}
    dcp.load(sd, checkpoint_id=str(d), planner=DefaultLoadPlanner(allow_partial_load=False))
    return sd


def outputs(tmp: Path) -> dict[str, Path]:
    return {"mla": tmp / "mla-fixed" / "iter_0000020", "swiglu_fused": tmp / "swiglu-fixed",
            "float8": tmp / "f8-fixed", "torch_save": tmp / "pt-fixed" / "model.pt"}


def read(name: str, p: Path) -> dict[str, torch.Tensor]:
    return torch.load(p, weights_only=True) if name == "torch_save" else load_all(p)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


def write(a: argparse.Namespace, tmp: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from check_fix import recast
    cli, demo, fx = a.cli, Path(a.demo), Path(a.fixtures)

    def run(*args: str) -> None:
        subprocess.run([cli, *args], check=True, capture_output=True)
    run("layout", "--from-config", str(demo / "config.json"), "-o", str(tmp / "demo.json"))
    run("layout", "--from-config", str(fx / "llama/config.json"), "-o", str(tmp / "llama.json"))
    run("fix", str(demo), "--layout", str(tmp / "demo.json"), "--disable-rule", "mla_down_proj",
        "-o", str(tmp / "mla-fixed"))
    run("fix", str(fx / "llama/fused"), "--layout", str(tmp / "llama.json"), "-o",
        str(tmp / "swiglu-fixed"))
    recast(fx / "llama/fused", tmp / "f8src", {
        "model.module.decoder.layers.0.mlp.linear_fc1.weight": torch.float8_e4m3fn})
    run("fix", str(tmp / "f8src"), "--layout", str(tmp / "llama.json"), "-o",
        str(tmp / "f8-fixed"))
    g = torch.Generator().manual_seed(3)
    (tmp / "pt").mkdir()
    torch.save({"_orig_mod.lm_head.weight": torch.randn(16, 8, generator=g).bfloat16(),
                "_orig_mod.model.norm.weight": torch.randn(8, generator=g)}, tmp / "pt/model.pt")
    (tmp / "hf.json").write_text(
        '{"schema": "shardscope.layout/1", "family": "test", "source": "x", "parallel": '
        '{"tp": 1, "pp": 1, "ep": 1, "etp": 1, "dp_shard": 1}, "transformer_engine": false, '
        '"params": [{"name": "lm_head.weight", "shape": [16, 8], "dtype": "bfloat16", '
        '"tp_dim": -1}, {"name": "model.norm.weight", "shape": [8], "dtype": "float32", '
        '"tp_dim": -1}]}')
    run("fix", str(tmp / "pt/model.pt"), "--layout", str(tmp / "hf.json"), "-o",
        str(tmp / "pt-fixed"))
    torch.save({n: read(n, p) for n, p in outputs(tmp).items()}, tmp / "expected.pt")


def check(tmp: Path) -> int:
    expected = torch.load(tmp / "expected.pt", weights_only=True)
    bad = 0
    for name, p in outputs(tmp).items():
        got = read(name, p)
        same = got.keys() == expected[name].keys() and all(
            torch.equal(bits(v), bits(got[k])) for k, v in expected[name].items())
        bad += not same
        print(f"torch {torch.__version__}: {name}: {len(got)} keys, "
              f"{'the same values' if same else 'DIFFERENT values'}")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli")
    ap.add_argument("--demo")
    ap.add_argument("--fixtures")
    ap.add_argument("--old-python")
    ap.add_argument("--check", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.check:
        return check(Path(a.check))
    with tempfile.TemporaryDirectory(prefix="ss-torch-versions-") as t:
        tmp = Path(t)
        write(a, tmp)
        mine = check(tmp)
        return mine or subprocess.run([a.old_python, __file__, "--check", str(tmp)]).returncode


if __name__ == "__main__":
    sys.exit(main())
