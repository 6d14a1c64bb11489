#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes pickles of varied values with Python's own pickler (protocols 2-5), each with a JSON
description of the value, for the C++ decoder's oracle test (tests/backend/pickle_oracle_test).

Usage: make_pickles.py OUT_DIR
"""
import argparse
import collections
import dataclasses
import enum
import json
import math
import pathlib
import pickle
import sys

import torch


class Colour(enum.Enum):
    RED = 1
    GREEN = 2


@dataclasses.dataclass
class Point:
    x: int
    y: float


def describe(v):
    """The JSON form the C++ test builds from its decoded PyValue."""
    if v is None or isinstance(v, bool) or isinstance(v, str):
        return v
    if isinstance(v, int):
        return v if -(2**63) <= v < 2**63 else {"bigint": str(v)}
    if isinstance(v, float):
        if math.isnan(v):
            return {"float": "nan"}
        if math.isinf(v):
            return {"float": "inf" if v > 0 else "-inf"}
        return {"float": repr(v)}
    if isinstance(v, (bytes, bytearray)):
        return {"bytes": bytes(v).hex()}
    if isinstance(v, torch.Size):
        return {"tuple": [describe(x) for x in v]}
    if isinstance(v, tuple):
        return {"tuple": [describe(x) for x in v]}
    if isinstance(v, list):
        return [describe(x) for x in v]
    if isinstance(v, dict):  # OrderedDict included: both decode to a dict in insertion order
        return {"dict": [[describe(k), describe(x)] for k, x in v.items()]}
    if isinstance(v, (set, frozenset)):
        return {"set": len(v)}
    if isinstance(v, torch.dtype):
        return {"global": "torch." + str(v).split(".")[1]}
    cls = type(v)
    return {"object": f"{cls.__module__}.{cls.__qualname__}"}


def values():
    shared = [1, 2]
    return {
        "scalars": [None, True, False, 0, 1, -1, 255, 256, 65535, 65536, -(2**31), 2**31,
                    2**63 - 1, -(2**63), 2**70, -(2**70) - 12345, 1.5, -0.0, 1e300,
                    float("inf"), float("-inf"), float("nan")],
        "strings": ["", "ascii", "ünïcødé ✓", "x" * 300, "line\nbreak"],
        "bytes": [b"", b"\x00\xff\x80abc", bytes(range(256))],
        "containers": {"tuple0": (), "tuple1": (1,), "tuple3": (1, "a", None),
                       "tuple5": (1, 2, 3, 4, 5), "nested": {"a": [1, {"b": (2, [3])}]},
                       "int_keys": {1: "one", 2: "two"}, "shared": [shared, shared]},
        "big_list": list(range(2500)),
        "big_dict": {f"k{i}": i for i in range(2100)},
        "ordered": collections.OrderedDict([("z", 1), ("a", 2)]),
        "sets": [set([1, 2, 3]), frozenset(["a"])],
        "torch": [torch.Size([4, 8]), torch.Size([]), torch.bfloat16, torch.float8_e4m3fn],
        "objects": [argparse.Namespace(lr=0.1, name="run"), Point(1, 2.5), Colour.GREEN,
                    pathlib.PurePosixPath("/a/b")],
    }


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    vals = values()
    for proto in (2, 3, 4, 5):
        for name, v in vals.items():
            (out / f"{name}.p{proto}.pkl").write_bytes(pickle.dumps(v, protocol=proto))
            (out / f"{name}.p{proto}.json").write_text(json.dumps(describe(v)))
    print(f"wrote {len(vals) * 4} pickles to {out}")


if __name__ == "__main__":
    main()
