#!/usr/bin/env python3
"""Hostile names cannot forge ShardScope's output.

    python tools/check_hostile.py --cli shardscope-cli --config CONFIG.json

Real torch (and the safetensors package) writes checkpoints whose keys hold terminal escape
sequences, a newline followed by a fake "problem:" line, bidirectional overrides, C1 controls,
HTML, Markdown, quotes and a lone surrogate (invalid UTF-8 once pickled), in a directory whose
name is a shell injection. Every output is then checked:
- terminal text (inspect, diff, values, errors): nothing a terminal acts on, each name on one
  line, no line a checkpoint wrote;
- JSON: parses, and its keys are exactly torch's (invalid UTF-8 as U+FFFD);
- HTML: no element a name brought in; Markdown: names stay inside their code spans;
- the reproduce command a report prints: run by bash, it gives back exactly the arguments that
  were used, and the injection in the path does not run.
Prints one line per failure and "N passed, M failed"; exits 0 only when all pass.
"""

from __future__ import annotations

import argparse
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tally import Tally  # noqa: E402

KEYS = [
    "model.\x1b]0;pwned\x07\x1b[31mweight\nproblem: fake line\r",
    "model.layers.0.\u202eevil\u200b.bias",
    "model.emb.<script>alert(1)</script><img src=x>`|x|`.weight",
    'model.q."quoted\\back\'s".weight',
    "model.c1.\u0085next\u2028line.weight",
    "model.bad.\udc80.weight",  # a lone surrogate: pickle writes it as invalid UTF-8
]
PLAIN = "model.plain.weight"
# What no output may hold: C0 controls but newline, DEL, C1, and the format characters that hide
# or reorder text.
FORBIDDEN = re.compile("[\x00-\x09\x0b-\x1f\x7f\x80-\x9f\u00ad\u061c\u180e\u200b-\u200f"
                       "\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb]")
ALLOWED_TAGS = {"html", "head", "meta", "title", "style", "body", "main", "header", "h1", "h2",
                "h3", "p", "section", "details", "summary", "div", "span", "code", "pre", "table",
                "thead", "tbody", "tr", "th", "td", "ul", "ol", "li", "dl", "dt", "dd", "footer",
                "b", "strong", "em", "small", "br", "nav", "a"}


def as_json_key(k: str) -> str:
    """What a JSON output can hold of a key: invalid UTF-8 replaced."""
    return k.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def run(cli: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([cli, *args], capture_output=True, timeout=300, cwd=cwd)


def terminal_problems(out: bytes) -> list[str]:
    text = out.decode("utf-8", "surrogateescape")
    problems = []
    for m in FORBIDDEN.finditer(text):
        problems.append(f"raw U+{ord(m.group()):04X} at {m.start()}: {text[max(0, m.start() - 30):m.start() + 10]!r}")
    if any(0xDC80 <= ord(c) <= 0xDCFF for c in text):
        problems.append("invalid UTF-8 passed through")
    for line in text.splitlines():
        if line.startswith("problem: fake"):
            problems.append(f"a forged line: {line!r}")
    return problems[:5]


def one_line_each(out: bytes) -> list[str]:
    """The newline inside KEYS[0] must show as \\n on the line that holds the rest of it."""
    lines = [l for l in out.decode("utf-8", "replace").splitlines() if "fake line" in l]
    if not lines:
        return ["the key with a newline is not shown"]
    return [f"not one line: {l!r}" for l in lines if "\\nproblem: fake line" not in l]


class Tags(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)


def make_checkpoints(root: Path) -> dict[str, Path]:
    torch.manual_seed(0)
    sd = {k: torch.randn(4, 3) for k in KEYS}
    sd[PLAIN] = torch.randn(2)
    out = {}
    out["dcp"] = root / "ck $(touch PWNED) 'q\n\x1b[2J"
    dcp.save(sd, checkpoint_id=str(out["dcp"]))
    changed = dict(sd)
    changed[KEYS[0]] = sd[KEYS[0]] + 1
    out["dcp_changed"] = root / "changed"
    dcp.save(changed, checkpoint_id=str(out["dcp_changed"]))
    out["torchsave"] = root / "model.pt"
    torch.save(sd, out["torchsave"])
    try:
        from safetensors.torch import save_file
        out["safetensors"] = root / "model.safetensors"
        save_file({k: v for k, v in sd.items() if "\udc80" not in k}, str(out["safetensors"]))
    except ImportError:
        pass
    # Truncated data: every key's read fails, and each one's error names it.
    out["dcp_cut"] = root / "cut"
    dcp.save(sd, checkpoint_id=str(out["dcp_cut"]))
    for f in out["dcp_cut"].glob("*.distcp"):
        os.truncate(f, 64)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--config", required=True, help="a model config to make a layout from")
    args = ap.parse_args()
    cli = str(Path(args.cli).resolve())
    t = Tally()
    import warnings
    warnings.filterwarnings("ignore")

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ck = make_checkpoints(root)
        expected = {as_json_key(k) for k in KEYS} | {PLAIN}

        for fmt in ("dcp", "torchsave", "safetensors"):
            if fmt not in ck:
                continue
            keys = expected if fmt != "safetensors" else {k for k in expected if "\ufffd" not in k}
            r = run(cli, "inspect", str(ck[fmt]), "--no-collapse")
            t.unit(f"{fmt}: inspect", terminal_problems(r.stdout + r.stderr) + one_line_each(r.stdout)
                    + ([f"exit {r.returncode}"] if r.returncode not in (0, 1) else []))
            r = run(cli, "inspect", str(ck[fmt]), "--tensor", KEYS[0], "--stats", "--hash")
            t.unit(f"{fmt}: inspect --tensor", terminal_problems(r.stdout + r.stderr)
                    + ([f"exit {r.returncode}: {r.stderr[-300:]!r}"] if r.returncode != 0 else []))
            r = run(cli, "inspect", str(ck[fmt]), "--json")
            problems = []
            try:
                got = {x["key"] for x in json.loads(r.stdout)["tensors"]}
                if got != keys:
                    problems.append(f"keys {sorted(got ^ keys)!r} differ from torch's")
            except (ValueError, KeyError) as e:
                problems.append(f"not JSON: {e}")
            t.unit(f"{fmt}: inspect --json", problems)

        # A read error for every key: each error line is one line, names its key visibly.
        r = run(cli, "inspect", str(ck["dcp_cut"]), "--stats", "--all-problems")
        problems = terminal_problems(r.stdout + r.stderr)
        err = r.stderr.decode("utf-8", "replace")
        if "\\x1b]0;pwned\\x07" not in err:
            problems.append("the broken key is not named in its error")
        t.unit("dcp: read errors", problems)

        layout = root / "layout.json"
        r = run(cli, "layout", "--from-config", args.config, "-o", str(layout))
        t.unit("layout", [r.stderr.decode()] if r.returncode != 0 else [])

        r = run(cli, "diff", str(ck["dcp"]), "--layout", str(layout))
        t.unit("diff: text", terminal_problems(r.stdout + r.stderr) + one_line_each(r.stdout))
        r = run(cli, "diff", str(ck["dcp"]), "--layout", str(layout), "--all")
        t.unit("diff: text --all", terminal_problems(r.stdout + r.stderr) + one_line_each(r.stdout))
        r = run(cli, "diff", str(ck["dcp"]), "--layout", str(layout), "--json")
        problems = []
        try:
            unconsumed = {u["key"] for u in json.loads(r.stdout)["unconsumed"]}
            if not expected <= unconsumed:
                problems.append(f"unconsumed keys lack {sorted(expected - unconsumed)!r}")
        except (ValueError, KeyError) as e:
            problems.append(f"not JSON: {e}")
        t.unit("diff: json", problems)

        for ext in ("md", "html", "json"):
            report = root / f"report.{ext}"
            r = run(cli, "report", str(ck["dcp"]), "--layout", str(layout), "-o", str(report))
            problems = terminal_problems(r.stdout + r.stderr)
            body = report.read_bytes()
            if ext != "json":
                problems += terminal_problems(body)
            text = body.decode("utf-8", "replace")
            if ext == "html":
                tags = Tags()
                tags.feed(text)
                problems += [f"element <{x}> from a name" for x in tags.tags - ALLOWED_TAGS]
            if ext == "md":
                # Outside code spans (CommonMark: a run of backticks closed by the same run),
                # no name may bring in HTML.
                prose = re.sub(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)", "", text)
                if "<script" in prose or "<img" in prose:
                    problems.append("raw HTML outside code")
                for line in text.splitlines():
                    if line.startswith("problem: fake") or line.startswith("<script"):
                        problems.append(f"forged line {line!r}")
                # Every command printed (the repair's, then the reproduce line): bash runs it
                # with printf in the CLI's place and must get back exactly its arguments.
                blocks = re.findall(r"```sh\n(.*?)\n```", text, re.S)
                wants = {"report": ["report", str(ck["dcp"]), "--layout", str(layout), "-o",
                                    str(report)],
                         "fix": ["fix", str(ck["dcp"]), "--layout", str(layout), "-o",
                                 str(ck["dcp"]) + "-fixed"]}
                if not any(b.split(" ", 2)[1:2] == ["report"] for b in blocks):
                    problems.append("no reproduce command")
                for line in blocks:
                    prog, _, rest = line.partition(" ")
                    out = subprocess.run(["bash", "-c", "printf '%s\\0' " + rest], cwd=root,
                                         capture_output=True, timeout=60)
                    argv = out.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1]
                    want = wants.get(argv[0] if argv else "", ["report or fix"])
                    if argv != want:
                        problems.append(f"the command gives {argv!r}, not {want!r}")
                    if (root / "PWNED").exists():
                        problems.append("the path's injection ran")
            if ext == "json":
                try:
                    unconsumed = {u["pattern"] for u in json.loads(text)["unconsumed"]}
                    if not expected <= unconsumed:
                        problems.append(f"lacks {sorted(expected - unconsumed)!r}")
                except (ValueError, KeyError) as e:
                    problems.append(f"not JSON: {e}")
            t.unit(f"report: {ext}", problems)

        r = run(cli, "diff", str(ck["dcp"]), "--against", str(ck["dcp_changed"]))
        t.unit("against: text", terminal_problems(r.stdout + r.stderr))
        for extra in ([], ["--json"]):
            r = run(cli, "diff", str(ck["dcp"]), "--against", str(ck["dcp_changed"]), "--values",
                    *extra)
            problems = terminal_problems(r.stderr)
            if extra:
                try:
                    names = {x["name"] for x in json.loads(r.stdout)["tensors"]}
                    if as_json_key(KEYS[0]) not in names:
                        problems.append("the changed key is not named")
                except (ValueError, KeyError) as e:
                    problems.append(f"not JSON: {e}")
            else:
                problems += terminal_problems(r.stdout) + one_line_each(r.stdout)
            t.unit(f"values{' '.join(extra)}", problems)

        if (root / "PWNED").exists():
            t.unit("no injection ran", ["PWNED exists"])

    return t.finish()


if __name__ == "__main__":
    sys.exit(main())
