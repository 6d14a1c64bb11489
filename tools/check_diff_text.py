#!/usr/bin/env python3
"""`shardscope-cli diff`'s text output at a size where listing every entry buries the answer.

    check_diff_text.py --cli CLI [--keep DIR]

Writes, with real torch (tools/make_layout_fixtures.py's DeepSeek-V3 names and values, saved the
way Megatron-FSDP's fsdp_dtensor saves them), a DeepSeek-V3-like checkpoint of 12 layers and 16
experts, then runs the diff with rules off, in text and as JSON. The JSON's entries are the
ground truth; the text must say the same:

- problems come first, one line per folded group (`decoder.layers.{2..11}.…`): each pattern
  expands to exactly its entries, every problem entry is covered once with its status, and the
  entries fold as far as their names allow (one group per section, status, fill and name with
  its numbers taken out);
- what loads as the layout asks is counted per status, and the counts are the JSON's;
- kept-at-init and unconsumed keys fold to exactly the JSON's lists;
- `--all` lists every entry, kept key and unconsumed key, in the JSON's order;
- the report (`report --json`) counts the problems the text lists: one definition, also where
  the checkpoint is stored in bfloat16 and the model asks for float32 (a cast that keeps every
  value is no problem; the reverse, which may change values, is).

`diff A --against B` (B: A re-saved by real torch with its experts in bfloat16, its last two
layers dropped, a vocabulary grown and a key added) says its changes folded as the report folds them:
each line's pattern expands to exactly the JSON's keys of that kind, every change covered once;
`--all` lists every change in the JSON's order.

Exit 0 when every check holds, 1 otherwise.
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_layout_fixtures as mlf  # noqa: E402

FAILURES: list[str] = []
LAYERS, EXPERTS = 12, 16


def check(cond: bool, what: str) -> None:
    if not cond:
        FAILURES.append(what)


def run(*args: str) -> tuple[int, str, str]:
    p = subprocess.run(args, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


CONFIG = dict(mlf.DEEPSEEK_V3, num_hidden_layers=LAYERS, n_routed_experts=EXPERTS,
              first_k_dense_replace=2)


def state() -> dict:
    mlf.CONFIGS["deepseek_v3"] = CONFIG  # megatron_args() reads the family's config from there
    return mlf.state_dict("deepseek_v3", "unfused", mlf.deepseek_v3_model(CONFIG))


def write_checkpoint(ckpt: Path) -> None:
    mlf.write_dcp(state(), ckpt)


def write_bf16(ckpt: Path) -> None:
    """The same model's weights stored in bfloat16 (its optimizer states as they were)."""
    import torch
    sd = state()
    sd["model"] = {k: v.to(torch.bfloat16) if v.is_floating_point() else v
                   for k, v in sd["model"].items()}
    mlf.write_dcp(sd, ckpt)


def widening_loads_exactly(ckpt: Path) -> bool:
    """torch's own judgement of the bfloat16 -> float32 cast the text calls harmless: DCP's load
    into float32 tensors gives every stored value exactly."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    md = FileSystemReader(str(ckpt)).read_metadata().state_dict_metadata
    keys = [k for k, v in md.items() if k.startswith("model.") and hasattr(v, "size")]
    wide = {k: torch.zeros(tuple(md[k].size), dtype=torch.float32) for k in keys}
    stored = {k: torch.zeros(tuple(md[k].size), dtype=md[k].properties.dtype) for k in keys}
    for sd in (wide, stored):
        dcp.load(sd, storage_reader=FileSystemReader(str(ckpt)), no_dist=True)
    return bool(keys) and all(torch.equal(wide[k], stored[k].float()) for k in keys)


def write_changed(ckpt: Path) -> None:
    """The same state changed as a later run might save it: experts in bfloat16, the last two
    layers gone, the vocabulary grown by 64 rows, one key more."""
    import torch
    sd = state()
    last = (f".layers.{LAYERS - 2}.", f".layers.{LAYERS - 1}.")

    def changed(d: dict) -> dict:
        out = {}
        for k, v in d.items():
            if any(x in k for x in last):
                continue
            if isinstance(v, dict):
                out[k] = changed(v)
            elif torch.is_tensor(v) and ".experts." in k and v.is_floating_point():
                out[k] = v.to(torch.bfloat16)
            elif torch.is_tensor(v) and "word_embeddings.weight" in k:
                out[k] = torch.cat([v, v[:64]])
            else:
                out[k] = v
        return out

    sd["model"] = changed(sd["model"])
    sd["optimizer"] = changed(sd["optimizer"])
    sd["model"]["module.extra_head.weight"] = torch.ones(4, 4)
    mlf.write_dcp(sd, ckpt)


def layout(cli: str, root: Path, cfg: dict, name: str) -> Path:
    config, out = root / f"{name}.config.json", root / f"{name}.layout.json"
    config.write_text(json.dumps(cfg))
    rc, _, err = run(cli, "layout", "--from-config", str(config), "-o", str(out))
    if rc != 0:
        raise SystemExit(f"layout failed: {err}")
    return out


def is_problem(e: dict) -> bool:
    """What the text lists rather than counts (app/cli/difftext.h): not filled, filled from the
    wrong key, with another shape, with holes, unreadable, or cast with a possible loss."""
    if not e["real_load_fills"]:
        return True
    if e["status"] in ("ok", "split", "merge", "rename"):
        return False
    if e["status"] == "cast":
        loss = e.get("cast_loss")
        return bool(e.get("narrowing")) and not (loss and loss["changed"] == 0)
    return True


def expand(pattern: str) -> list[str]:
    """`a.{0..2}.b{3,5}` -> every name it stands for."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if not m:
        return [pattern]
    values: list[int] = []
    for part in m.group(1).split(","):
        lo, _, hi = part.partition("..")
        values += range(int(lo), int(hi or lo) + 1)
    return [n for v in values for n in expand(pattern[:m.start()] + str(v) + pattern[m.end():])]


def skeleton(name: str) -> str:
    """A name with its numeric fields taken out, as shardscope/keyfold.h splits names: dotted
    numbers and the index after a component's leading weight/bias."""
    parts = []
    for c in name.split("."):
        if re.fullmatch(r"0|[1-9][0-9]*", c):
            c = "#"
        else:
            c = re.sub(r"^(weight|bias)(0|[1-9][0-9]*)", r"\1#", c)
        parts.append(c)
    return ".".join(parts)


def sections(text: str) -> dict[str, list[str]]:
    """Blocks of the output by their heading line (text up to its count), in order."""
    out: dict[str, list[str]] = {}
    current = "header"
    for line in text.splitlines():
        if not line:
            current = ""
            continue
        m = re.fullmatch(r"([A-Za-z][A-Za-z ]+) \((.*)\):|([A-Z]+):", line)
        if not current and m:
            current = (m.group(1) or m.group(3)).strip()
            out[current] = [line]
            continue
        if not current:  # a block without a heading: the counts at the end
            current = "tail"
        out.setdefault(current, []).append(line)
    return out


ENTRY = re.compile(r"(!| ) (\S+)  (\S+?)(?:  \((\d+)\))?")


def entry_blocks(lines: list[str]) -> list[dict]:
    """`! status  pattern  (n)` lines, each with its indented reason and fix."""
    blocks: list[dict] = []
    for line in lines[1:]:
        m = ENTRY.fullmatch(line)
        if m:
            blocks.append({"fills": m[1] == " ", "status": m[2], "pattern": m[3],
                           "count": int(m[4] or 1), "reason": "", "fix": ""})
        elif line.startswith("      fix: ") and blocks:
            blocks[-1]["fix"] = line[len("      fix: "):]
        elif line.startswith("      ") and blocks:
            blocks[-1]["reason"] = line[6:]
        else:
            check(False, f"unexpected line among the entries: {line!r}")
    return blocks


def key_lines(lines: list[str]) -> list[tuple[str, int]]:
    """`  pattern  (n)  (note)` lines of a key list."""
    out = []
    for line in lines[1:]:
        m = re.fullmatch(r"  (\S+)(?:  \((\d+)\))?(?:  \(.*\))?", line)
        check(m is not None, f"not a key line: {line!r}")
        if m:
            out.append((m[1], int(m[2] or 1)))
    return out


def healthy_counts(text: str) -> tuple[dict[str, int], int] | None:
    m = re.search(r"^healthy: +(.*) \((\d+) entr(?:y|ies) the load fills as the layout asks\)$",
                  text, re.M)
    if not m:
        return None
    counts = {} if m[1] == "none" else {
        k: int(v) for k, v in (p.rsplit(" ", 1) for p in m[1].split(", "))}
    return counts, int(m[2])


def check_folded(what: str, text: str, d: dict) -> None:
    lines = text.splitlines()
    s = sections(text)
    entries = d["entries"]
    problems = [e for e in entries if is_problem(e)]
    by_name = {e["name"]: e for e in entries}

    # Problems: first (before what is unconsumed, the repair and the counts), folded, exact.
    check(bool(problems), f"{what}: the case has no problem to show")
    heads = [i for i, l in enumerate(lines) if l.startswith("PROBLEMS (")]
    check(len(heads) == 1, f"{what}: {len(heads)} PROBLEMS headings")
    if not heads:
        return
    later = [i for i, l in enumerate(lines)
             if l.startswith(("unconsumed keys (", "REPAIR:", "healthy:", "--all "))]
    check(all(heads[0] < i for i in later), f"{what}: problems are not listed first")
    blocks = entry_blocks(s.get("PROBLEMS", []))
    want_head = f"PROBLEMS ({len(problems)} entr{'y' if len(problems) == 1 else 'ies'} in " \
                f"{len(blocks)} group{'' if len(blocks) == 1 else 's'}):"
    check(lines[heads[0]] == want_head, f"{what}: {lines[heads[0]]!r}, want {want_head!r}")
    covered = []
    for b in blocks:
        names = expand(b["pattern"])
        check(len(names) == b["count"], f"{what}: {b['pattern']} counts {b['count']}, "
                                        f"expands to {len(names)}")
        for n in names:
            e = by_name.get(n)
            check(e is not None and is_problem(e) and e["status"] == b["status"]
                  and e["real_load_fills"] == b["fills"],
                  f"{what}: {n} (from {b['pattern']}) is "
                  f"{e and (e['status'], e['real_load_fills'])}, the line says "
                  f"{(b['status'], b['fills'])}")
        if b["count"] == 1 and names[0] in by_name:
            e = by_name[names[0]]
            check(b["reason"] == e["reason"], f"{what}: {names[0]}: reason {b['reason']!r}")
            check(b["fix"] == ("" if e["real_load_fills"] else e["fix"]),
                  f"{what}: {names[0]}: fix")
        covered += names
    missing = collections.Counter(e["name"] for e in problems) - collections.Counter(covered)
    extra = collections.Counter(covered) - collections.Counter(e["name"] for e in problems)
    check(not missing and not extra,
          f"{what}: problems not covered {sorted(missing)[:5]}, covered twice or not problems "
          f"{sorted(extra)[:5]}")
    kinds = {(e["section"], e["status"], e["real_load_fills"], skeleton(e["name"]))
             for e in problems}
    check(len(blocks) == len(kinds), f"{what}: {len(blocks)} problem lines for {len(kinds)} "
                                     f"kinds of name: not folded as far as the names allow")
    fills = [b["fills"] for b in blocks]
    check(fills == sorted(fills), f"{what}: what the load fills listed before what it does not")

    # The rest counted per status: the JSON's counts.
    got = healthy_counts(text)
    want = collections.Counter(e["status"] for e in entries if not is_problem(e))
    check(got is not None and got[0] == dict(want) and got[1] == sum(want.values()),
          f"{what}: healthy counts {got}, the JSON's {dict(want)}")
    check(f"--all lists all {len(entries)} entries one by one" in text,
          f"{what}: no hint that --all lists every entry")

    # Kept at init and unconsumed keys: exactly the JSON's, folded.
    for heading, keys in (("SILENTLY KEPT AT INITIAL VALUES", d["outcome"]["kept_at_init"]),
                          ("unconsumed keys", [u["key"] for u in d["unconsumed"]])):
        listed = key_lines(s.get(heading, [""]))
        names = [n for p, c in listed for n in expand(p)]
        check(sorted(names) == sorted(keys), f"{what}: {heading}: {len(names)} keys listed, "
                                             f"the JSON has {len(keys)}")
        check(all(len(expand(p)) == c for p, c in listed), f"{what}: {heading}: counts")
        kinds = {skeleton(k) for k in keys}
        check(len(listed) == len(kinds), f"{what}: {heading}: {len(listed)} lines for "
                                         f"{len(kinds)} kinds of name")


def check_all(what: str, text: str, d: dict) -> None:
    s = sections(text)
    blocks = entry_blocks(s.get("ENTRIES", []))
    got = [(b["fills"], b["status"], b["pattern"]) for b in blocks]
    want = [(e["real_load_fills"], e["status"], e["name"]) for e in d["entries"]]
    if got != want:
        first = next((g, w) for g, w in zip(got + [None], want + [None]) if g != w)
        check(False, f"{what}: --all lists {len(got)} entries, the JSON {len(want)}; first "
                     f"difference {first}")
    for b, e in zip(blocks, d["entries"]):
        if b["reason"] != e["reason"]:
            check(False, f"{what}: --all: {e['name']}: reason {b['reason']!r}")
            break
    for heading, keys in (("SILENTLY KEPT AT INITIAL VALUES", d["outcome"]["kept_at_init"]),
                          ("unconsumed keys", [u["key"] for u in d["unconsumed"]])):
        listed = [p for p, _ in key_lines(s.get(heading, [""]))]
        check(listed == keys, f"{what}: --all: {heading}: {len(listed)} listed, the JSON "
                              f"{len(keys)}")
    got_counts = healthy_counts(text)
    check(got_counts is not None and got_counts[1] == sum(not is_problem(e) for e in d["entries"]),
          f"{what}: --all: healthy counts {got_counts}")


def report_problems(cli: str, base: list[str], root: Path) -> int | None:
    """The report's count of problem entries for the same diff."""
    out = root / "report.json"
    rc, _, err = run(cli, "report", *base, "-o", str(out))
    if rc not in (0, 1):
        check(False, f"report: exit {rc}: {err[-300:]}")
        return None
    return json.loads(out.read_text())["summary"]["problem_entries"]


CHANGE = re.compile(r"  (added|removed|renamed|shape_changed|dtype_changed)  (\S+)(.*?)"
                    r"(?:  \((\d+)\))?")


def check_against(what: str, text: str, text_all: str, d: dict) -> None:
    """The folded lines cover exactly the JSON's changes, each once; --all lists them."""
    want = collections.Counter((c["kind"], c["key"]) for c in d["changes"])
    details = collections.defaultdict(set)
    for c in d["changes"]:
        details[(c["kind"], c["key"])].add(c["detail"])
    got: collections.Counter = collections.Counter()
    lines = text.splitlines()
    check(lines[0].endswith(f": {d['same']} same, {len(d['changes'])} changes"),
          f"{what}: header {lines[0]!r}")
    for line in lines[1:]:
        if " is read by: " in line or line.startswith("--all lists all"):
            continue
        m = CHANGE.fullmatch(line)
        if not m:
            check(False, f"{what}: not a change line: {line!r}")
            continue
        keys = expand(m[2])
        check(len(keys) == int(m[4] or 1), f"{what}: {line!r} counts {m[4]}, expands to "
                                            f"{len(keys)}")
        for k in keys:
            got[(m[1], k)] += 1
            if m[1] == "dtype_changed":  # "float32 -> bfloat16": no field to fold
                for detail in details.get((m[1], k), ()):
                    check(detail in m[3], f"{what}: {line!r} lacks {k}'s {detail!r}")
    check(got == want, f"{what}: the folded lines cover {sum(got.values())} changes, the JSON "
                       f"{sum(want.values())}; first apart: "
                       f"{next(iter((got - want) or (want - got)), None)}")
    listed = [(m[1], m[2]) for m in map(CHANGE.fullmatch, text_all.splitlines()[1:]) if m]
    check(listed == [(c["kind"], c["key"]) for c in d["changes"]],
          f"{what}: --all lists {len(listed)} changes, the JSON {len(d['changes'])}")
    kinds = collections.Counter(c["kind"] for c in d["changes"])
    check(all(kinds[k] > 0 for k in ("added", "removed", "shape_changed", "dtype_changed")),
          f"{what}: the case lacks a kind of change: {dict(kinds)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--keep", type=Path, help="write the checkpoint here and keep it")
    a = ap.parse_args()
    root = a.keep or Path(tempfile.mkdtemp(prefix="ss-difftext-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        ckpt = root / "dsv3-12x16"
        if not ckpt.exists():
            write_checkpoint(ckpt)
        full = layout(a.cli, root, CONFIG, "full")
        # Two layers fewer than were saved: their keys are unconsumed model tensors.
        shallow = layout(a.cli, root, dict(CONFIG, num_hidden_layers=LAYERS - 2), "shallow")
        bf16 = root / "dsv3-12x16-bf16"
        if not bf16.exists():
            write_bf16(bf16)
        asks_bf16 = root / "bf16.layout.json"
        rc, _, err = run(a.cli, "layout", "--from-config", str(root / "full.config.json"),
                         "--dtype", "bfloat16", "-o", str(asks_bf16))
        check(rc == 0, f"layout --dtype bfloat16: {err}")
        cases = {
            "mla_down_proj and swiglu off": (full, ["--disable-rule", "mla_down_proj",
                                                    "--disable-rule", "swiglu"]),
            # Every weight cast: to float32 keeps each value, to bfloat16 may not.
            "bfloat16 stored, float32 asked, swiglu off": (
                full, ["--disable-rule", "swiglu"], bf16),
            "float32 stored, bfloat16 asked, swiglu off": (
                asks_bf16, ["--disable-rule", "swiglu"], ckpt),
            "swiglu off, shallower model, ignore_all": (
                shallow, ["--disable-rule", "swiglu", "--no-strict-fsdp-dtensor-load",
                          "--strictness", "ignore_all"]),
        }
        for what, (lay, flags, *stored) in cases.items():
            args = [str(stored[0] if stored else ckpt), "--layout", str(lay), *flags]
            base = [a.cli, "diff", *args]
            rc_json, out, err = run(*base, "--json")
            if rc_json == 2:
                raise SystemExit(f"{what}: diff could not read: {err}")
            d = json.loads(out)
            rc, text, err = run(*base)
            check(rc == rc_json == 1, f"{what}: exit {rc} (JSON {rc_json}): {err[-300:]}")
            problems = sum(map(is_problem, d["entries"]))
            reported = report_problems(a.cli, args, root)
            check(reported == problems, f"{what}: the report counts {reported} problems, the "
                                        f"text lists {problems}")
            casts = collections.Counter(bool(e.get("narrowing")) for e in d["entries"]
                                        if e["status"] == "cast")
            if stored:
                check(casts[stored[0] == ckpt] > 0, f"{what}: no such cast: {dict(casts)}")
            if stored and stored[0] == bf16:
                check(widening_loads_exactly(bf16), f"{what}: torch's load into float32 "
                                                    "changes a value the text calls harmless")
            check_folded(what, text, d)
            rc, text_all, err = run(*base, "--all")
            check(rc == rc_json, f"{what}: --all: exit {rc}: {err[-300:]}")
            check_all(what, text_all, d)
            check(len(text.splitlines()) * 10 < len(text_all.splitlines()),
                  f"{what}: {len(text.splitlines())} lines, --all {len(text_all.splitlines())}")
            print(f"{what}: {len(d['entries'])} entries, "
                  f"{sum(map(is_problem, d['entries']))} problems, "
                  f"{len(d['unconsumed'])} unconsumed: {len(text.splitlines())} lines "
                  f"(--all: {len(text_all.splitlines())})")
        changed = root / "dsv3-12x10-changed"
        if not changed.exists():
            write_changed(changed)
        base = [a.cli, "diff", str(ckpt), "--against", str(changed)]
        rc_json, out, err = run(*base, "--json")
        check(rc_json == 1, f"--against: exit {rc_json}: {err[-300:]}")
        d = json.loads(out) if out.strip() else {"changes": [], "same": 0}
        rc, text, _ = run(*base)
        rc_all, text_all, _ = run(*base, "--all")
        check(rc == rc_all == rc_json, f"--against: exit {rc}, --all {rc_all}, JSON {rc_json}")
        check_against("--against", text, text_all, d)
        check(len(text.splitlines()) * 10 < len(text_all.splitlines()),
              f"--against: {len(text.splitlines())} lines, --all {len(text_all.splitlines())}")
        print(f"--against: {len(d['changes'])} changes: {len(text.splitlines())} lines "
              f"(--all: {len(text_all.splitlines())})")
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    for f in FAILURES:
        print("FAIL:", f)
    print("ok" if not FAILURES else f"{len(FAILURES)} failures")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
