#!/usr/bin/env python3
"""Every container form torch's weights-only load accepts in a torch.save file, read by
`shardscope-cli inspect` as `torch.load(f, map_location="cpu", weights_only=True)` reads it.

    check_torchsave_forms.py --cli shardscope-cli [CASE...]

Each case writes its files with real torch at test time (torch.save with a pickler that writes
the form, in the zip archive and in the legacy pre-1.6 stream): Python 2's OrderedDict, a call on
[key, value] lists (what the weights published in the `lpips` package are, storages on
'cuda:0'), OrderedDict and Counter calls on tuples of pairs or on a dict, OrderedDict made by
NEWOBJ and filled by SETITEMS, nn.Parameter made by NEWOBJ, sets, tuples and lists nested, a bare
tensor, a list, a tuple at the top. The oracle is torch's weights-only load, flattened the way
ShardScope names nested keys (torchsave.cpp): dict keys by str(), lists, tuples and sets that
hold a tensor or a dict by position, joined with '.'. Set items are compared as a multiset (a set
has no order torch keeps). Every tensor's key, dtype, shape and SHA-256 must be equal, exit 0,
healthy.

The `hidden` cases hold tensors ShardScope does not read (a sparse tensor, a meta tensor, tensors
inside a Counter built from a list, a storage at the top): torch's load returns them, so inspect
must exit 1 with a problem naming the file, the key path where torch puts them and an offset, and
still read every other tensor exactly.

Prints one line per mismatch and "N passed, M failed"; exits 0 only when all pass.
"""
from __future__ import annotations

import argparse
import collections
import copyreg
import hashlib
import json
import pickle
import struct
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import warnings  # noqa: E402

import torch  # noqa: E402
from tally import Tally  # noqa: E402

# torch's rebuild of the hidden case's sparse tensor says its invariants go unchecked.
warnings.filterwarnings("ignore", message="Sparse invariant checks")

# ---------------------------------------------------------------------------------------------
# Picklers that write the forms
# ---------------------------------------------------------------------------------------------


class Py2Pickler(pickle._Pickler):
    """What Python 2's cPickle wrote at protocol 2: str as SHORT_BINSTRING/BINSTRING, and an
    OrderedDict through its __reduce__ of the time, a call on a list of [key, value] lists (and
    the instance's __dict__, its `_metadata`, as BUILD state)."""

    dispatch = dict(pickle._Pickler.dispatch)

    def save_py2_str(self, s):
        if not s.isascii():  # Python 2's unicode
            return pickle._Pickler.save_str(self, s)
        b = s.encode("ascii")
        if len(b) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(b)]) + b)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(b)) + b)
        self.memoize(s)

    dispatch[str] = save_py2_str

    def reducer_override(self, obj):
        if type(obj) is collections.OrderedDict:
            items = [[k, obj[k]] for k in obj]
            inst = vars(obj).copy()
            return (collections.OrderedDict, (items,), inst) if inst else (collections.OrderedDict, (items,))
        return NotImplemented


class FormPickler(pickle._Pickler):
    """Writes the marker classes below in the form each names; everything else as Python 3."""

    def reducer_override(self, obj):
        t = type(obj)
        if t is TuplePairs:  # OrderedDict([(k, v), ...])
            return (collections.OrderedDict, ([(k, v) for k, v in obj.items()],))
        if t is TupleOfPairs:  # OrderedDict(((k, v), ...))
            return (collections.OrderedDict, (tuple((k, v) for k, v in obj.items()),))
        if t is FromDict:  # OrderedDict({k: v})
            return (collections.OrderedDict, (dict(obj),))
        if t is NewObj:  # NEWOBJ OrderedDict (its args ignored, as __new__ ignores them), SETITEMS
            return (copyreg.__newobj__, (collections.OrderedDict, [["ignored", 0]]), None, None,
                    iter(dict(obj).items()))
        if t is CounterFromList:  # Counter([(k, v), ...]): counts the pairs
            return (collections.Counter, ([(k, v) for k, v in obj.items()],))
        if t is ParamNewObj:  # NEWOBJ torch.nn.Parameter(data, requires_grad)
            return (copyreg.__newobj__, (torch.nn.Parameter, obj.t, False))
        return NotImplemented

    def save_reduce(self, func, args, state=None, listitems=None, dictitems=None,
                    state_setter=None, *, obj=None):
        # NEWOBJ of another class than the marker's: pickle checks the class only with obj.
        if isinstance(obj, (NewObj, ParamNewObj)):
            obj = None
        return super().save_reduce(func, args, state, listitems, dictitems, state_setter, obj=obj)


class TuplePairs(dict):
    pass


class TupleOfPairs(dict):
    pass


class FromDict(dict):
    pass


class NewObj(dict):
    pass


class CounterFromList(dict):
    pass


class ParamNewObj:
    def __init__(self, t):
        self.t = t


def module_with(pickler):
    class Mod:
        Pickler = pickler
        Unpickler = pickle.Unpickler
        load = staticmethod(pickle.load)

        @staticmethod
        def dump(obj, f, protocol=2):
            pickler(f, protocol).dump(obj)
    return Mod


def save(obj, path: Path, pickler, legacy: bool, location: str = "cpu") -> None:
    """torch.save through `pickler` at protocol 2; storages tagged with `location`."""
    original = torch.serialization.location_tag
    torch.serialization.location_tag = lambda storage: location
    try:
        torch.save(obj, path, pickle_module=module_with(pickler), pickle_protocol=2,
                   _use_new_zipfile_serialization=not legacy)
    finally:
        torch.serialization.location_tag = original


def rand(name: str, shape, dtype=torch.float32) -> torch.Tensor:
    g = torch.Generator().manual_seed(int(hashlib.sha256(name.encode()).hexdigest()[:8], 16))
    t = torch.randn(shape, generator=g)
    return t.to(dtype) if dtype.is_floating_point else (t * 100).to(dtype)


# ---------------------------------------------------------------------------------------------
# The cases: (object, pickler, location, keys where tensors hide)
# ---------------------------------------------------------------------------------------------

def lpips_like():
    """A state dict as lpips' published weights hold it: an OrderedDict with `_metadata`."""
    sd = collections.OrderedDict()
    for i, c in enumerate((64, 128, 256)):
        sd[f"lin{i}.model.1.weight"] = rand(f"lpips{i}", (1, c, 1, 1))
    sd._metadata = collections.OrderedDict([("", {"version": 1}), ("lin0", {"version": 1})])
    return sd


def nested():
    inner = collections.OrderedDict([("w", rand("n.w", (4, 3))), ("b", rand("n.b", (4,), torch.bfloat16))])
    return collections.OrderedDict([
        ("model", collections.OrderedDict([("layer", inner), ("step", torch.tensor(7))])),
        ("state", [rand("n.s0", (2, 2)), (rand("n.s1", (3,), torch.float16), {"m": rand("n.m", (2,))}),
                   {"deep": [collections.OrderedDict([("x", rand("n.x", (5,), torch.int64))])]}]),
        ("ids", [1, 2, 3]),
        ("epoch", 3),
    ])


def many():
    """More pairs than one APPENDS/SETITEMS batch (pickle batches by 1000)."""
    return collections.OrderedDict((f"p.{i}", rand(f"many{i}", (2,))) for i in range(1203))


def forms():
    a = rand("f.a", (3, 4))
    return {
        "tuple_pairs": TuplePairs({"a": a, "b": rand("f.b", (2,), torch.float64)}),
        "tuple_of_pairs": TupleOfPairs({"c": rand("f.c", (5,)), "d": {"e": rand("f.e", (1, 1))}}),
        "from_dict": FromDict({"f": rand("f.f", (2, 2), torch.bfloat16)}),
        "newobj": NewObj({"g": rand("f.g", (3,)), "h": TuplePairs({"i": rand("f.i", (2,))})}),
        "counter": collections.Counter({"j": rand("f.j", (2,)), "k": rand("f.k", (3,))}),
        "empty_od": collections.OrderedDict(),
        "param": ParamNewObj(rand("f.p", (2, 3))),
        "view": a[1:, 2:],  # a view of "tuple_pairs.a"'s storage
        "set": {rand("f.s0", (2,)), rand("f.s1", (2,))},
    }


def hidden():
    return {
        "plain": rand("h.plain", (4,)),
        "sparse": rand("h.sparse", (3, 3)).to_sparse(),
        "meta": torch.empty(2, 3, device="meta"),
        "counted": CounterFromList({"k": rand("h.counted", (2,))}),
    }


CASES = {
    # name: (builder, pickler, storage location tag); each in the zip and the legacy stream
    "py2_lpips": (lpips_like, Py2Pickler, "cuda:0"),
    "py2_nested": (nested, Py2Pickler, "cuda:0"),
    "py2_many": (many, Py2Pickler, "cpu"),
    "forms": (forms, FormPickler, "cpu"),
    "forms_cuda": (forms, FormPickler, "cuda:0"),
    "bare_tensor": (lambda: rand("bare", (3, 2)), FormPickler, "cpu"),
    "top_list": (lambda: [rand("tl0", (2,)), {"a": rand("tl1", (1,))}], FormPickler, "cpu"),
    "top_tuple": (lambda: (rand("tt0", (2,)), rand("tt1", (2, 2))), Py2Pickler, "cuda:0"),
    "hidden": (hidden, FormPickler, "cpu"),
    # zip only: torch's legacy load of an untyped storage raises (no dtype to read it as)
    "hidden_storage": (lambda: rand("hs", (4,)).untyped_storage(), FormPickler, "cpu"),
}
ZIP_ONLY = {"hidden_storage"}

# ---------------------------------------------------------------------------------------------
# The oracle: torch's weights-only load, named as ShardScope names nested keys
# ---------------------------------------------------------------------------------------------


def plain(t) -> bool:
    return isinstance(t, torch.Tensor) and t.layout == torch.strided and not t.is_meta \
        and not t.is_quantized and not t.is_nested


def holds(x) -> bool:
    """A tensor or a mapping, in x or in its lists, tuples and sets (torchsave.cpp's rule)."""
    if isinstance(x, torch.Tensor) or isinstance(x, Mapping):
        return True
    return isinstance(x, (list, tuple, set, frozenset)) and any(holds(v) for v in x)


def has_tensor(x, seen=None) -> bool:
    seen = set() if seen is None else seen
    if id(x) in seen:
        return False
    seen.add(id(x))
    if isinstance(x, (torch.Tensor, torch.UntypedStorage, torch.storage.TypedStorage)):
        return True
    if isinstance(x, Mapping):
        return any(has_tensor(k, seen) or has_tensor(v, seen) for k, v in x.items())
    if isinstance(x, (list, tuple, set, frozenset)):
        return any(has_tensor(v, seen) for v in x)
    return any(has_tensor(v, seen) for v in getattr(x, "__dict__", {}).values())


def flatten(x, path: list[str], tensors: dict, sets: dict, hidden: set, in_set=None) -> None:
    key = ".".join(path)
    if plain(x):
        if in_set is not None:
            sets.setdefault(in_set, []).append(x)
        else:
            tensors[key] = x
        return
    # A mapping whose keys hold tensors (Counter over pairs) is not walked: torch keeps the
    # tensors in its keys.
    if isinstance(x, Mapping) and len(x) and not any(has_tensor(k) for k in x):
        for k, v in x.items():
            flatten(v, path + [str(k)], tensors, sets, hidden, in_set)
        return
    if isinstance(x, (list, tuple, set, frozenset)) and len(x) and holds(x):
        is_set = isinstance(x, (set, frozenset))
        for i, v in enumerate(x):
            flatten(v, path + [str(i)], tensors, sets, hidden, key if is_set else in_set)
        return
    if has_tensor(x):
        hidden.add(key)


def summary(t: torch.Tensor) -> dict:
    c = t.detach().contiguous()
    return {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
            "sha256": hashlib.sha256(c.reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()}


# ---------------------------------------------------------------------------------------------
# The check
# ---------------------------------------------------------------------------------------------


def check_file(cli: str, path: Path, tally: Tally, label: str) -> None:
    loaded = torch.load(path, map_location="cpu", weights_only=True)
    tensors: dict[str, torch.Tensor] = {}
    sets: dict[str, list] = {}
    hidden: set[str] = set()
    flatten(loaded, [], tensors, sets, hidden)
    p = subprocess.run([cli, "inspect", str(path), "--json", "--hash", "--no-cache"],
                       capture_output=True, text=True, timeout=300)
    try:
        got = json.loads(p.stdout)
    except ValueError:
        tally.unit(label, [f"exit {p.returncode}, no JSON: {p.stderr.strip()[:300]}"])
        return
    problems = got.get("problems") or []
    want_rc = 1 if hidden else 0
    tally.unit(f"{label}: exit code", [] if p.returncode == want_rc else
               [f"exit {p.returncode}, expected {want_rc}; problems {problems[:3]}"])
    # Every place torch keeps tensors that ShardScope does not list is named: file, key, offset.
    named = {q.get("key") for q in problems
             if Path(str(q.get("file"))).name == path.name and isinstance(q.get("offset"), int)}
    tally.unit(f"{label}: hidden tensors named",
               [] if named == hidden else [f"problems at {sorted(named)}, torch has tensors at {sorted(hidden)}"])
    by_key = {t["key"]: t for t in got.get("tensors") or []}
    set_keys = {k: [c for c in by_key if c.startswith(k + "." if k else "") and
                    c[len(k) + bool(k):].isdigit()] for k in sets}
    in_sets = {c for cs in set_keys.values() for c in cs}
    for key, t in tensors.items():
        w = summary(t)
        g = by_key.get(key)
        if g is None:
            tally.unit(f"{label}: tensor {key!r}", ["missing from the CLI's output"])
            continue
        g = {k: g.get(k) for k in ("dtype", "shape", "sha256")}
        tally.unit(f"{label}: tensor {key!r}", [] if g == w else [f"cli {g}, torch {w}"])
    for key, items in sets.items():
        want = sorted(json.dumps(summary(t), sort_keys=True) for t in items)
        have = sorted(json.dumps({k: by_key[c].get(k) for k in ("dtype", "shape", "sha256")},
                                 sort_keys=True) for c in set_keys[key])
        tally.unit(f"{label}: set {key!r}", [] if want == have else [f"cli {have}, torch {want}"])
    extra = set(by_key) - set(tensors) - in_sets
    tally.unit(f"{label}: no other tensors", [] if not extra else [f"cli lists {sorted(extra)[:5]}"])
    if not tensors and not sets and not hidden:
        tally.unit(f"{label}: the case holds tensors", ["torch read no tensor: the case tests nothing"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("cases", nargs="*", help=f"default: all of {', '.join(CASES)}")
    a = ap.parse_args()
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="ss-forms-") as tmp:
        for name in a.cases or CASES:
            build, pickler, location = CASES[name]
            for legacy in (False,) if name in ZIP_ONLY else (False, True):
                path = Path(tmp) / f"{name}{'_legacy' if legacy else ''}.pt"
                save(build(), path, pickler, legacy, location)
                check_file(a.cli, path, tally, path.name)
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
