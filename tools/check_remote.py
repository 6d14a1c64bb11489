#!/usr/bin/env python3
"""`shardscope-cli --ssh HOST …` prints what the same command prints on HOST.

    check_remote.py --cli CLI --demo DEMO [--api REMOTE_SESSION_TESTS] CASE

Each command runs here and through the remote protocol on the bundled demo (the same machine
plays the remote host, so both see the same files): stdout, stderr and the exit code must be
equal byte for byte (a verification's seconds excepted), and so must the files written (a
report written here, fix's output written "there", its manifest's time excepted).

Cases:
  loopback  through a loopback transport: tools/loopback_ssh.sh stands in for ssh and runs the
            server as a child process; also the protocol spoken by hand (the ready line, a
            hello of another major refused in one message, a request the protocol does not
            name refused) and the C++ API's tests (--api) over the same transport
  sshd      through a real OpenSSH server on localhost, started on a free port with a throwaway
            host key and user key (as the current user; skipped, exit 77, only where sshd
            cannot start); a host alias from the ssh config, and user@host:port; the C++ API's
            tests (--api) over it, its prompt hook answering a key's passphrase
  killed    the server killed mid-job (through the loopback transport and through sshd): the
            command says so in one line and exits 2, and the next connection works
  version   a server of another protocol major (loopback and sshd): one line naming both
            versions and the server
  askpass   an encrypted user key: its passphrase asked through the user's SSH_ASKPASS (the
            right one connects, a wrong one fails in one line)
  torchrun  verify --launch torchrun --ranks 2: the job the server launches prints what
            torchrun started here prints
  cancel    a launched job whose ranks hang (stopped) cancelled with Ctrl-C: one line, exit 2,
            no rank left running
  cached    the index travels as the server's persistent index entry (the demo cached on
            its first open), is kept by the client and then not sent again (only its header);
            where the open adds to what the entry holds (a data file cut short: the
            integrity checks' problems; torch_dist's common.pt, with --fixtures) it is encoded
            anew: each time the same output as here
  compare   diff A --against B with a side on another host (ssh://HOST/PATH, HOST:/PATH): the
            one here opened here, the other there (loopback, two hosts at once, and sshd), each
            output (text, --json, a report) equal byte for byte to the comparison of the same
            two checkpoints here; --values across hosts by each tensor's SHA-256 computed
            where it lives, with the verdicts of the element-by-element comparison here; a
            report's --values across hosts refused in one line
  repair    through sshd, fix --ssh with a layout file here: the layout is written beside OUT
            there, the manifest and its "check:" commands name it there, and those commands
            run there (the file here moved away) as they run here
  compressed  the server keeps its persistent entry's compressed wire form beside the entry
            and sends it as it is, ahead of its open (the keys current, the index then the one
            opened here); a compressed form corrupt, cut short or of an earlier entry is not
            used; a checkpoint rewritten by torch, or a data file cut short, after the client
            kept its index: the index opened here
  window    through sshd, the window's session (CheckpointSession over a RemoteBackend) against
            the same session here (--window: tests/model/remote_window_tests)
  confined  through sshd, the server under strace: every command above and a torchrun launch
            equal to local, and the server wrote nothing but fix's OUT and the user's cache
            (nothing left in its cwd and HOME) and ran nothing but itself and torchrun
Prints one line per failure and "N passed, M failed"; exits 0 only when all pass.
"""

from __future__ import annotations

import argparse
import getpass
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tally import Tally  # noqa: E402

TOOLS = Path(__file__).resolve().parent
SKIP = 77


def run(cmd, env=None, timeout=300, cwd=None):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                       env=env, cwd=cwd)
    return p.returncode, p.stdout, p.stderr


def normalise(text: str) -> str:
    """What differs between two runs of one command: a verification's seconds."""
    text = re.sub(r'("seconds": )[0-9.e+-]+', r"\1S", text)
    return re.sub(r"MiB read in [0-9.e+-]+ s", "MiB read in S s", text)


def tree(root: Path) -> dict[str, str]:
    """Every file under root: its kind and bytes (a manifest without its time)."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = "link " + os.readlink(p)
        elif p.is_file():
            data = p.read_bytes()
            if p.name == "shardscope-fix.json":
                data = re.sub(rb'"created": "[^"]*"', b'"created": "T"', data)
            out[rel] = "file " + hashlib.sha256(data).hexdigest()
        elif p.is_dir():
            out[rel] = "dir"
    return out


class Setup:
    def __init__(self, a, tmp: Path):
        self.cli = str(Path(a.cli).resolve())
        self.demo = Path(a.demo).resolve()
        self.tmp = tmp
        self.api = a.api
        self.fixtures = getattr(a, "fixtures", None)
        self.window = getattr(a, "window", None)
        self.env = dict(os.environ)
        self.env["SHARDSCOPE_CACHE_DIR"] = str(tmp / "cache")
        # torchrun where the "remote" server looks for it (its PATH).
        self.env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + self.env.get("PATH", "")
        self.layout = tmp / "layout.json"
        rc, _, err = run([self.cli, "layout", "--from-config", self.demo / "config.json", "-o",
                          self.layout], env=self.env)
        if rc != 0:
            raise SystemExit(f"layout --from-config failed: {err}")
        rc, out, _ = run([self.cli, "inspect", self.demo, "--json"], env=self.env)
        self.key = json.loads(out)["tensors"][0]["key"]

    def loopback(self) -> tuple[list[str], dict]:
        env = dict(self.env, SHARDSCOPE_SSH=str(TOOLS / "loopback_ssh.sh"))
        return ["--ssh", "cluster", "--server", self.cli], env


def commands(s: Setup) -> list[tuple[str, list, list[Path]]]:
    """(name, arguments, files the command writes): what each face of the CLI is checked on."""
    d, L, t = s.demo, s.layout, s.tmp
    return [
        ("inspect", ["inspect", d], []),
        ("inspect --json", ["inspect", d, "--json"], []),
        ("inspect --stats --hash --objects --json",
         ["inspect", d, "--stats", "--hash", "--objects", "--json"], []),
        ("inspect --tensor", ["inspect", d, "--tensor", s.key, "--stats", "--hash"], []),
        ("inspect --filter", ["inspect", d, "--filter", "*experts*", "--no-collapse"], []),
        ("inspect of a missing path", ["inspect", t / "nothing-here"], []),
        ("diff --layout", ["diff", d, "--layout", L], []),
        ("diff --layout --json", ["diff", d, "--layout", L, "--json"], []),
        ("diff --config", ["diff", d, "--config", d / "config.json"], []),
        ("diff of a failing load", ["diff", d, "--layout", L, "--disable-rule", "mla_down_proj"],
         []),
        ("diff --against", ["diff", d, "--against", d, "--json"], []),
        ("diff --values", ["diff", d, "--against", d, "--values"], []),
        ("diff --values --layout --json",
         ["diff", d, "--against", d, "--values", "--layout", L, "--json"], []),
        ("verify", ["verify", d, "--layout", L, "--dp", "2"], []),
        ("verify --json --hash", ["verify", d, "--layout", L, "--dp", "2", "--json", "--hash"],
         []),
        ("report .md", ["report", d, "--layout", L, "--disable-rule", "mla_down_proj", "-o",
                        t / "report.md"], [t / "report.md"]),
        ("report .html", ["report", d, "--config", d / "config.json", "-o", t / "report.html"],
         [t / "report.html"]),
        ("report .json --against --values",
         ["report", d, "--against", d, "--values", "-o", t / "report.json"], [t / "report.json"]),
        ("fix", ["fix", d, "--layout", L, "--disable-rule", "mla_down_proj", "-o", t / "fixed"],
         [t / "fixed", t / "fixed.layout.json"]),
        ("fix --json (an output that exists)",
         ["fix", d, "--layout", L, "--disable-rule", "mla_down_proj", "-o", t / "fixed",
          "--json"], []),
    ]


def local_form(s: Setup, args: list) -> list:
    """What a remote command does, run here. A fix's layout file here travels with it and is
    written beside OUT there, named by its manifest and commands: here, the same file beside
    OUT, named so."""
    if args[0] != "fix" or "--layout" not in args:
        return args
    out = Path(args[args.index("-o") + 1])
    beside = out.with_name(out.name + ".layout.json")
    if not beside.exists():
        shutil.copy(s.layout, beside)
    args = list(args)
    args[args.index("--layout") + 1] = beside
    return args


def compare_commands(tally: Tally, s: Setup, prefix: list[str], env: dict, label: str,
                     only: set[str] | None = None) -> None:
    for name, args, files in commands(s):
        if only is not None and name not in only:
            continue
        for f in files:  # the local run writes them first; the remote one writes them anew
            shutil.rmtree(f, ignore_errors=True) if f.is_dir() else f.unlink(missing_ok=True)
        local = run([s.cli, *local_form(s, args)], env=env)
        kept = {}
        for f in files:
            kept[f] = tree(f) if f.is_dir() else (f.read_bytes() if f.exists() else None)
            aside = f.with_name(f.name + ".local")
            shutil.rmtree(aside, ignore_errors=True) if aside.is_dir() else None
            f.rename(aside) if f.exists() else None
        remote = run([s.cli, *prefix, *args], env=env)
        problems = []
        if local[0] != remote[0]:
            problems.append(f"exit {remote[0]}, here {local[0]}: {remote[2].strip()[:300]}")
        for what, i in (("stdout", 1), ("stderr", 2)):
            if normalise(local[i]) != normalise(remote[i]):
                a, b = normalise(local[i]).splitlines(), normalise(remote[i]).splitlines()
                diff = next((f"line {n}: here {x!r}, remote {y!r}" for n, (x, y)
                             in enumerate(zip(a, b)) if x != y),
                            f"{len(a)} lines here, {len(b)} remote")
                problems.append(f"{what} differs: {diff}"[:400])
        for f in files:
            got = tree(f) if f.is_dir() else (f.read_bytes() if f.exists() else None)
            if got != kept[f]:
                problems.append(f"{f.name} differs from the one written here")
        tally.unit(f"{label}: {name}", problems)


# ---------------------------------------------------------------- the protocol by hand

def frame(kind: int, rid: int, payload: bytes) -> bytes:
    return struct.pack(">IBI", len(payload), kind, rid) + payload


def read_frame(f) -> tuple[int, int, bytes]:
    head = f.read(9)
    if len(head) < 9:
        raise EOFError("closed")
    n, kind, rid = struct.unpack(">IBI", head)
    return kind, rid, f.read(n)


def by_hand(tally: Tally, s: Setup) -> None:
    """A client of protocol 99, and a request the protocol does not name."""
    def start():
        return subprocess.Popen([s.cli, "serve", "--stdio"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=s.env)

    p = start()
    problems = []
    ready = p.stdout.readline().decode()
    if not re.fullmatch(r"SHARDSCOPE-SERVE 1 \S+\n", ready):
        problems.append(f"ready line {ready!r}")
    p.stdin.write(frame(0, 0, json.dumps({"type": "hello", "major": 99, "minor": 0,
                                          "version": "99.0.0"}).encode()))
    p.stdin.flush()
    kind, _, body = read_frame(p.stdout)
    msg = json.loads(body)
    p.stdin.close()
    rc = p.wait(30)
    if kind != 0 or msg.get("type") != "refused" or "protocol 1" not in msg.get("message", "") \
            or "protocol 99" not in msg.get("message", "") or "99.0.0" not in msg["message"]:
        problems.append(f"a hello of protocol 99 got {msg}")
    if rc != 2:
        problems.append(f"the server exited {rc} after refusing, not 2")
    tally.unit("by hand: a client of another major is refused, naming both", problems)

    p = start()
    problems = []
    p.stdout.readline()
    p.stdin.write(frame(0, 0, json.dumps({"type": "hello", "major": 1, "minor": 0,
                                          "version": "test"}).encode()))
    p.stdin.write(frame(0, 7, json.dumps({"type": "request", "op": "exec"}).encode()))
    p.stdin.flush()
    hello = json.loads(read_frame(p.stdout)[2])
    kind, rid, body = read_frame(p.stdout)
    reply = json.loads(body)
    p.stdin.close()
    rc = p.wait(30)
    if hello.get("type") != "hello" or hello.get("major") != 1:
        problems.append(f"hello {hello}")
    if rid != 7 or reply.get("type") != "error":
        problems.append(f"a request named 'exec' got {reply} (id {rid})")
    if rc != 0:
        problems.append(f"the server exited {rc} at the end of its stdin, not 0")
    tally.unit("by hand: a request the protocol does not name is refused", problems)


# ---------------------------------------------------------------- a real sshd

class Sshd:
    """sshd on a free port of 127.0.0.1 with throwaway keys, and an ssh config for it."""

    def __init__(self, tmp: Path, passphrase: str = "", path: str = ""):
        self.dir = tmp / "sshd"
        self.dir.mkdir()
        self.proc = None
        sshd = shutil.which("sshd") or "/usr/sbin/sshd"
        if not Path(sshd).exists():
            raise RuntimeError("no sshd (Debian's openssh-server: ./dev installs it)")
        if os.geteuid() == 0 and not Path("/run/sshd").is_dir():
            # sshd run by root separates privileges into this (empty) directory.
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        d = self.dir
        for name, phrase in (("host", ""), ("user", passphrase)):
            rc, _, err = run(["ssh-keygen", "-q", "-t", "ed25519", "-N", phrase, "-C",
                              "shardscope-test", "-f", d / name])
            if rc != 0:
                raise RuntimeError(f"ssh-keygen: {err.strip()}")
        shutil.copy(d / "user.pub", d / "authorized_keys")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.user = getpass.getuser()
        (d / "sshd_config").write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {d}/host\n"
            f"AuthorizedKeysFile {d}/authorized_keys\nPidFile {d}/sshd.pid\n"
            "StrictModes no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "UsePAM no\nPermitRootLogin prohibit-password\nAllowTcpForwarding no\n"
            f"SetEnv SHARDSCOPE_CACHE_DIR={tmp}/remote-cache"
            + (f" PATH={path}" if path else "") + "\n")
        (d / "ssh_config").write_text(
            f"Host shardscope-test\n  HostName 127.0.0.1\n  Port {self.port}\n"
            f"Host *\n  User {self.user}\n  IdentityFile {d}/user\n  IdentitiesOnly yes\n"
            f"  IdentityAgent none\n  UserKnownHostsFile {d}/known_hosts\n"
            "  StrictHostKeyChecking accept-new\n  LogLevel ERROR\n")
        # The system's ssh with this config: what SHARDSCOPE_SSH names.
        self.ssh = d / "ssh"
        self.ssh.write_text(f"#!/bin/sh\nexec ssh -F {d}/ssh_config \"$@\"\n")
        self.ssh.chmod(0o755)
        self.proc = subprocess.Popen([sshd, "-D", "-e", "-f", d / "sshd_config"],
                                     stdout=subprocess.DEVNULL, stderr=open(d / "log", "w"))
        for _ in range(100):
            if self.proc.poll() is not None:
                raise RuntimeError("sshd exited: " + (d / "log").read_text().strip()[-300:])
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("sshd did not listen within 5 s")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


def with_sshd(tmp: Path, passphrase: str = "", path: str = "") -> Sshd | None:
    try:
        return Sshd(tmp, passphrase, path)
    except RuntimeError as e:
        print(f"SKIP: cannot start an OpenSSH server here: {e}")
        return None


# ---------------------------------------------------------------- cases

def case_loopback(tally: Tally, s: Setup) -> None:
    prefix, env = s.loopback()
    compare_commands(tally, s, prefix, env, "loopback")
    by_hand(tally, s)
    if s.api:
        rc, out, err = run([s.api], env=dict(env, SHARDSCOPE_TEST_DEMO=str(s.demo),
                                             SHARDSCOPE_TEST_CLI=s.cli,
                                             SHARDSCOPE_TEST_LAYOUT=str(s.layout)), timeout=600)
        tally.unit("loopback: the C++ API (remote_session_tests)",
                   [] if rc == 0 else [(out + err).strip()[-1500:]])


def case_sshd(tally: Tally, s: Setup) -> int:
    sshd = with_sshd(s.tmp)
    if not sshd:
        return SKIP
    try:
        env = dict(s.env, SHARDSCOPE_SSH=str(sshd.ssh))
        compare_commands(tally, s, ["--ssh", "shardscope-test", "--server", s.cli], env,
                         "sshd (host alias)")
        compare_commands(tally, s, ["--ssh", f"{sshd.user}@127.0.0.1:{sshd.port}", "--server",
                                    s.cli], env, "sshd (user@host:port)",
                         only={"inspect --json", "diff --config", "verify"})
        if s.api:
            rc, out, err = run([s.api], env=dict(env, SHARDSCOPE_TEST_DEMO=str(s.demo),
                                                 SHARDSCOPE_TEST_CLI=s.cli,
                                                 SHARDSCOPE_TEST_LAYOUT=str(s.layout),
                                                 SHARDSCOPE_TEST_HOST="shardscope-test"),
                               timeout=600)
            tally.unit("sshd: the C++ API (remote_session_tests)",
                       [] if rc == 0 else [(out + err).strip()[-1500:]])
    finally:
        sshd.stop()
    return 0


def serve_processes(root: int) -> list[int]:
    """`serve --stdio` processes descended from `root`."""
    children: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(p.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        for c in children.get(pid, []):
            todo.append(c)
            try:
                cmd = Path(f"/proc/{c}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"serve" in cmd and b"--stdio" in cmd:
                found.append(c)
    return found


def threads_of(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def killed_through(tally: Tally, s: Setup, prefix: list[str], env: dict, host: str,
                   root_of, label: str) -> None:
    """The server (found under root_of(client pid)) killed while a verify runs."""
    cmd = [s.cli, *prefix, "verify", s.demo, "--layout", s.layout, "--dp", "2",
           "--max-memory", "60000", "--threads", "1"]
    problems = ["the job always ended before the server could be killed"]
    for _ in range(10):
        p = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env, text=True)
        killed = False
        deadline = time.time() + 60
        while p.poll() is None and time.time() < deadline and not killed:
            for pid in serve_processes(root_of(p.pid)):
                if threads_of(pid) >= 2:  # a job's thread is running
                    os.kill(pid, signal.SIGKILL)
                    killed = True
            time.sleep(0.002)
        out, err = p.communicate(timeout=60)
        if not killed:
            continue
        lines = err.strip().splitlines()
        problems = []
        if p.returncode != 2:
            problems.append(f"exit {p.returncode}, not 2")
        if len(lines) != 1 or f"connection to {host} was lost" not in lines[0]:
            problems.append(f"stderr is not one line saying the connection was lost: {lines}")
        if out:
            problems.append(f"printed a result: {out[:200]!r}")
        break
    tally.unit(f"killed ({label}): the server killed mid-job is one line, exit 2", problems)
    rc, out, err = run([s.cli, *prefix, "verify", s.demo, "--layout", s.layout, "--dp", "2"],
                       env=env)
    tally.unit(f"killed ({label}): the next connection works",
               [] if rc == 0 and "bit-identical" in out else [f"exit {rc}: {err.strip()}"])


def case_killed(tally: Tally, s: Setup) -> int:
    prefix, env = s.loopback()
    killed_through(tally, s, prefix, env, "cluster", lambda pid: pid, "loopback")
    sshd = with_sshd(s.tmp)
    if not sshd:
        return SKIP
    try:
        env = dict(s.env, SHARDSCOPE_SSH=str(sshd.ssh))
        # Over sshd the server is sshd's grandchild, not the client's.
        killed_through(tally, s, ["--ssh", "shardscope-test", "--server", s.cli], env,
                       "shardscope-test", lambda pid: sshd.proc.pid, "sshd")
    finally:
        sshd.stop()
    return 0


def version_through(tally: Tally, s: Setup, host: str, env: dict, label: str) -> None:
    fake = s.tmp / "future-server"
    fake.write_text("#!/bin/sh\necho 'Welcome to the cluster'\n"
                    "echo 'SHARDSCOPE-SERVE 2 9.9.0'\nexec cat >/dev/null\n")
    fake.chmod(0o755)
    rc, out, err = run([s.cli, "--ssh", host, "--server", fake, "inspect", s.demo], env=env)
    lines = err.strip().splitlines()
    ok = (rc == 2 and len(lines) == 1 and "ShardScope 9.9.0 (protocol 2)" in lines[0]
          and "(protocol 1)" in lines[0] and "install the same version" in lines[0]
          and str(fake) in lines[0] and host in lines[0] and not out)
    tally.unit(f"version ({label}): a server of another major says which, in one line",
               [] if ok else [f"exit {rc}: {err.strip()}"])
    # Several times: ssh's last words may arrive after the connection closed.
    problems = []
    for _ in range(8):
        rc, out, err = run([s.cli, "--ssh", host, "--server", s.tmp / "no-such-server",
                            "inspect", s.demo], env=env)
        lines = err.strip().splitlines()
        if not (rc == 2 and len(lines) == 1 and "could not start" in lines[0]
                and ("No such file" in lines[0] or "not found" in lines[0])
                and "--server" in lines[0]):
            problems.append(f"exit {rc}: {err.strip()}")
    tally.unit(f"version ({label}): a server that is not there says so, in one line",
               problems[:2])


def case_version(tally: Tally, s: Setup) -> int:
    _, env = s.loopback()
    version_through(tally, s, "cluster", env, "loopback")
    by_hand(tally, s)
    sshd = with_sshd(s.tmp)
    if not sshd:
        return SKIP
    try:
        version_through(tally, s, "shardscope-test", dict(s.env, SHARDSCOPE_SSH=str(sshd.ssh)),
                        "sshd")
    finally:
        sshd.stop()
    return 0


# What the server may change: the calls that create, write, move or remove a file, and exec.
TRACED = "execve,open,openat,creat,mkdir,mkdirat,rename,renameat,renameat2,unlink,unlinkat," \
         "link,linkat,symlink,symlinkat,truncate,chmod,fchmodat"
WRITES = re.compile(r"O_WRONLY|O_RDWR|O_CREAT|O_TRUNC")


def stitched(text: str) -> list[str]:
    """strace -f's lines with each call another thread interrupted (`PID call(args
    <unfinished ...>` … `PID <... call resumed>rest`) joined into one line."""
    out, pending = [], {}
    for line in text.splitlines():
        m = re.match(r"(\d+)\s+(.*) <unfinished \.\.\.>$", line)
        if m:
            pending[m.group(1)] = m.group(2)
            continue
        m = re.match(r"(\d+)\s+<\.\.\. \w+ resumed>(.*)$", line)
        if m and m.group(1) in pending:
            out.append(f"{m.group(1)} {pending.pop(m.group(1))}{m.group(2)}")
            continue
        out.append(line)
    return out


def listing_reads(log: Path, demo: Path) -> list:
    """What a traced server that only listed opened under `demo` other than directories."""
    problems, dirs = [], 0
    for f in log.iterdir():
        for line in stitched(f.read_text(errors="replace")):
            m = re.match(r"\d+\s+(open|openat)\((.*)\)\s+= (-?\d+)", line)
            if not m or int(m.group(3)) < 0:
                continue
            paths = re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(2))
            if re.match(r"\d+,", m.group(2)):  # relative to a directory it opened
                if paths and "O_DIRECTORY" not in m.group(2):
                    problems.append(f"opened {paths[0]} inside a directory it listed")
                continue
            if not paths or not (Path(paths[0]) == demo or demo in Path(paths[0]).parents):
                continue
            if "O_DIRECTORY" in m.group(2):
                dirs += 1
            else:
                problems.append(f"opened {paths[0]}")
    if not dirs:
        problems.append("the trace saw no directory of the demo opened (is the trace working?)")
    return problems[:10]


def case_confined(tally: Tally, s: Setup) -> int:
    """Through sshd, the server under strace: it writes nothing but fix's OUT and the user's
    cache, and runs nothing but itself and the launcher a verify --launch names."""
    if not shutil.which("strace"):
        print("SKIP: no strace here to watch the server")
        return SKIP
    venv = str(Path(sys.executable).parent)
    sshd = with_sshd(s.tmp, path=venv + ":/usr/local/bin:/usr/bin:/bin")
    if not sshd:
        return SKIP
    home = s.tmp / "remote-home"
    home.mkdir()
    log = s.tmp / "strace"
    log.mkdir()
    traced = s.tmp / "traced-server"
    # Its cwd and HOME an empty directory of its own, where anything it left would show.
    traced.write_text(f"#!/bin/sh\ncd {home} && HOME={home} exec strace -f -qq -s 4096 "
                      f"-e trace={TRACED} -o {log}/trace.$$ {s.cli} \"$@\"\n")
    traced.chmod(0o755)
    # The file browser's listing, in a trace of its own: it may read directories, never a file.
    listed = s.tmp / "strace-list"
    listed.mkdir()
    traced_list = s.tmp / "traced-list-server"
    traced_list.write_text(traced.read_text().replace(f"{log}/trace.", f"{listed}/trace."))
    traced_list.chmod(0o755)
    cache = s.tmp / "remote-cache"
    try:
        env = dict(s.env, SHARDSCOPE_SSH=str(sshd.ssh))
        prefix = ["--ssh", "shardscope-test", "--server", traced]
        compare_commands(tally, s, prefix, env, "confined")
        args = ["verify", str(s.demo), "--layout", str(s.layout), "--json"]
        local = run(torchrun_cmd(s, 2, args + ["--quiet"]), env=env)
        remote = run([s.cli, *prefix, *args, "--launch", "torchrun", "--ranks", "2"], env=env)
        tally.unit("confined: verify --launch torchrun --ranks 2 through sshd",
                   [] if local[0] == remote[0] and normalise(local[1]) == normalise(remote[1])
                   else [f"exit {remote[0]}, here {local[0]}: {remote[2].strip()[-300:]}"])
        if s.api:
            rc, out, err = run([s.api, "--gtest_filter=Remote.ADirectoryIsListed*"],
                               env=dict(env, SHARDSCOPE_TEST_DEMO=str(s.demo),
                                        SHARDSCOPE_TEST_CLI=str(traced_list),
                                        SHARDSCOPE_TEST_LAYOUT=str(s.layout),
                                        SHARDSCOPE_TEST_HOST="shardscope-test"), timeout=300)
            tally.unit("confined: the file browser's listing through sshd",
                       [] if rc == 0 and "[  PASSED  ] 1 test" in out
                       else [(out + err).strip()[-1500:]])
            tally.unit("confined: a listing opens directories, never a file's bytes",
                       listing_reads(listed, Path(s.demo).resolve()))
    finally:
        sshd.stop()
    allowed_dirs = [s.tmp / "fixed", cache, home / ".cache/shardscope"]
    # fix's layout, sent from here, beside its OUT (written to a temporary name, renamed)
    beside = s.tmp / "fixed.layout.json"
    allowed_exec = {s.cli, str(Path(venv) / "torchrun")}
    writes, execs = set(), set()
    for f in [*log.iterdir(), *listed.iterdir()]:
        lines = stitched(f.read_text(errors="replace"))
        # The launcher's own processes (torchrun's python and what it forks before a rank's
        # exec) write its own scratch files: those are torchrun's, which the protocol named.
        launcher = {int(m.group(1)) for m in (re.match(r"(\d+)\s+execve\(\"([^\"]*)\"", x)
                                              for x in lines)
                    if m and "python" in Path(m.group(2)).name or m and "torchrun" in m.group(2)}
        for line in lines:
            m = re.match(r"(\d+)\s+(\w+)\((.*)\)\s+= (-?\d+)", line)
            if not m or int(m.group(4)) < 0:
                continue
            pid, call, args_ = int(m.group(1)), m.group(2), m.group(3)
            paths = re.findall(r'"((?:[^"\\]|\\.)*)"', args_)
            if call == "execve":
                execs.add(paths[0])
                continue
            if pid in launcher:
                continue
            if call in ("open", "openat") and not WRITES.search(args_):
                continue
            if call.startswith("rename"):
                targets = paths[:2]  # the old name goes, the new one comes
            elif call.startswith(("link", "symlink")):
                targets = paths[1:2]  # the new name; the first is only read
            else:
                targets = paths[:1]
            for target in targets:
                if target.startswith("/dev/") or target.startswith("/proc/self/"):
                    continue
                writes.add(target)
    problems = []
    for w in sorted(writes):
        p = Path(w)
        if not p.is_absolute():
            problems.append(f"a relative path written: {w}")
        elif any(a.parent == s.tmp and a.name.startswith(".fixed.shardscope-")
                 for a in [p, *p.parents]):
            continue  # fix's OUT while it is written, renamed to OUT at the end
        elif p == beside or (p.parent == s.tmp and p.name.startswith(".fixed.layout.json.")):
            continue
        elif p in (home / ".cache/shardscope").parents:
            continue  # the user's cache directory's parents, made for it
        elif not any(p == d or d in p.parents for d in allowed_dirs):
            problems.append(f"wrote {w}")
    for e in sorted(execs):
        # python itself, when torchrun's script starts it
        if e not in allowed_exec and not Path(e).name.startswith("python"):
            problems.append(f"ran {e}")
    if not any(Path(w).is_relative_to(s.tmp / "fixed") for w in writes):
        problems.append("the trace saw no write of fix's OUT (is the trace working?)")
    if s.cli not in execs or not any("torchrun" in e for e in execs):
        problems.append(f"the trace saw neither the server nor torchrun run: {sorted(execs)}")
    left = sorted(str(p.relative_to(home)) for p in home.rglob("*")
                  if p != home / ".cache" and (home / ".cache/shardscope") not in [p, *p.parents])
    if left:
        problems.append(f"left in its cwd and HOME: {left}")
    tally.unit(f"confined: {len(writes)} paths written, {len(execs)} programs run, all named "
               "by the protocol", problems[:20])
    return 0


def case_askpass(tally: Tally, s: Setup) -> int:
    sshd = with_sshd(s.tmp, passphrase="correct horse")
    if not sshd:
        return SKIP
    try:
        log = s.tmp / "prompts"
        for name, phrase, want in (("the right passphrase", "correct horse", 0),
                                   ("a wrong passphrase", "battery staple", 2)):
            script = s.tmp / f"askpass-{want}"
            script.write_text(f"#!/bin/sh\necho \"$1\" >> {log}\necho '{phrase}'\n")
            script.chmod(0o755)
            env = dict(s.env, SHARDSCOPE_SSH=str(sshd.ssh), SSH_ASKPASS=str(script),
                       SSH_ASKPASS_REQUIRE="force", DISPLAY=":0")
            env.pop("SSH_AUTH_SOCK", None)
            rc, out, err = run([s.cli, "--ssh", "shardscope-test", "--server", s.cli, "inspect",
                                s.demo], env=env, timeout=120)
            prompts = log.read_text() if log.exists() else ""
            problems = []
            if rc != want:
                problems.append(f"exit {rc}, not {want}: {err.strip()}")
            if "passphrase" not in prompts:
                problems.append(f"SSH_ASKPASS was not asked for the key's passphrase: {prompts!r}")
            if want and len(err.strip().splitlines()) != 1:
                problems.append(f"a refused login is not one line: {err!r}")
            tally.unit(f"askpass: {name}", problems)
    finally:
        sshd.stop()
    return 0


def torchrun_cmd(s: Setup, ranks: int, args: list) -> list:
    return [sys.executable, "-m", "torch.distributed.run", "--no-python", "--standalone",
            "--nproc-per-node", str(ranks), s.cli, *args]


def case_torchrun(tally: Tally, s: Setup) -> None:
    prefix, env = s.loopback()
    for name, extra in (("text", []), ("--json", ["--json"])):
        args = ["verify", str(s.demo), "--layout", str(s.layout), *extra]
        local = run(torchrun_cmd(s, 2, args + ["--quiet"]), env=env)
        remote = run([s.cli, *prefix, *args, "--launch", "torchrun", "--ranks", "2"], env=env)
        problems = []
        if local[0] != remote[0]:
            problems.append(f"exit {remote[0]}, here {local[0]}: {remote[2].strip()[-300:]}")
        if normalise(local[1]) != normalise(remote[1]):
            problems.append(f"stdout differs:\nhere   {local[1][:300]!r}\nremote {remote[1][:300]!r}")
        if "2 processes over gloo" not in local[1] and '"processes": 2' not in local[1]:
            problems.append(f"the local run was not two processes: {local[1][:200]!r}")
        tally.unit(f"torchrun: verify --launch torchrun --ranks 2 ({name})", problems)
    rc, _, err = run([s.cli, *prefix, "verify", s.demo, "--layout", s.layout, "--launch",
                      "torchrun", "--ranks", "2", "--nodes", "2"], env=env)
    tally.unit("torchrun: two nodes without srun is refused in one line",
               [] if rc == 2 and len(err.strip().splitlines()) == 1 and "srun" in err
               else [f"exit {rc}: {err.strip()}"])


def verify_ranks(root: int) -> list[int]:
    """The ranks (`… verify …` under torchrun) descended from `root`."""
    out = []
    for pid in all_descendants(root):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd and cmd[0].endswith(b"shardscope-cli") and b"verify" in cmd and b"--ssh" not in cmd:
            out.append(pid)
    return out


def all_descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(p.name))
    found, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            found.append(c)
            todo.append(c)
    return found


def case_cancel(tally: Tally, s: Setup) -> None:
    prefix, env = s.loopback()
    p = subprocess.Popen([s.cli, *prefix, "verify", str(s.demo), "--layout", str(s.layout),
                          "--launch", "torchrun", "--ranks", "2"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env, text=True)
    ranks = []
    deadline = time.time() + 60
    while time.time() < deadline and len(ranks) < 2 and p.poll() is None:
        ranks = verify_ranks(p.pid)
        time.sleep(0.01)
    problems = []
    if len(ranks) < 2:
        p.kill()
        tally.unit("cancel: a hung job is cancelled", [f"no two ranks started ({ranks})"])
        return
    for r in ranks:  # hung: they never answer again
        os.kill(r, signal.SIGSTOP)
    time.sleep(0.5)
    started = time.time()
    p.send_signal(signal.SIGINT)
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        problems.append("Ctrl-C did not end the command within 60 s")
    took = time.time() - started
    lines = err.strip().splitlines()
    if p.returncode != 2:
        problems.append(f"exit {p.returncode}, not 2")
    if len(lines) != 1 or "cancelled" not in lines[0]:
        problems.append(f"stderr is not one line saying it was cancelled: {lines}")
    left = [r for r in ranks if Path(f"/proc/{r}").exists()
            and (Path(f"/proc/{r}/stat").read_text().split()[2] != "Z")]
    if left:
        problems.append(f"ranks still running: {left}")
        for r in left:
            os.kill(r, signal.SIGKILL)
    tally.unit(f"cancel: a hung job is cancelled ({took:.1f} s)", problems)


def case_cached(tally: Tally, s: Setup) -> None:
    prefix, env = s.loopback()
    # Every DCP checkpoint through the persistent index, the demo's small one too.
    # (SETTLE 0: the copies made here are stored at once.)
    env = dict(env, SHARDSCOPE_CACHE_MIN_BYTES="0", SHARDSCOPE_CACHE_SETTLE_SECONDS="0")
    cache = Path(env["SHARDSCOPE_CACHE_DIR"])
    # A data file cut short after the entry was written: its problems are the integrity
    # checks', which no entry holds.
    cut = s.tmp / "cut"
    shutil.copytree(s.demo, cut)
    run([s.cli, "inspect", cut], env=env)
    data = next(cut.glob("iter_*/__1_0.distcp"))
    with open(data, "r+b") as f:
        f.truncate(data.stat().st_size - 3000)
    sources = [("the demo", s.demo), ("a copy cut short after its open", cut)]
    if s.fixtures and (Path(s.fixtures) / "megatron_torch_dist").exists():
        sources.append(("torch_dist with common.pt", Path(s.fixtures) / "megatron_torch_dist"))
    for what, ckpt in sources:
        run([s.cli, "inspect", ckpt], env=env)  # here first: the entry is written
        for turn in ("sent", "kept"):
            for name, args in (("inspect --json", ["inspect", ckpt, "--json"]),
                               ("inspect --stats", ["inspect", ckpt, "--stats", "--hash"])):
                local = run([s.cli, *args], env=env)
                remote = run([s.cli, *prefix, *args], env=env)
                problems = []
                if local != remote:
                    problems.append(f"exit {remote[0]} / {local[0]}; stdout equal: "
                                    f"{local[1] == remote[1]}; stderr: {remote[2][-300:]!r}")
                if '"index_cache": "read from' not in local[1] and name == "inspect --json":
                    problems.append("the local open did not read the persistent index")
                kept = list(cache.glob("remote-*.sskept"))
                if not kept:
                    problems.append("the client kept no index")
                tally.unit(f"cached: {what}: {name} ({turn})", problems)
        if ckpt == s.demo:
            # The kept index corrupt (a byte of its entry; a new file, as a torn write leaves
            # it): not trusted, the whole index asked for and kept anew.
            for f in cache.glob("remote-*.sskept"):
                bad = bytearray(f.read_bytes())
                bad[-100] ^= 0x55
                tmp = f.with_name("torn")
                tmp.write_bytes(bytes(bad))
                tmp.replace(f)
            local = run([s.cli, "inspect", ckpt, "--json"], env=env)
            remote = run([s.cli, *prefix, "inspect", ckpt, "--json"], env=env)
            again = run([s.cli, *prefix, "inspect", ckpt, "--json"], env=env)
            tally.unit(f"cached: {what}: a corrupt kept index is asked for anew",
                       [] if local == remote == again else
                       [f"exit {remote[0]}, then {again[0]}, here {local[0]}; "
                        f"stderr: {remote[2][-300:]!r}"])
        if s.api:  # the index itself, its problems included, through the C++ API
            rc, out, err = run([s.api, "--gtest_filter=Remote.AnOpenedIndexIsTheIndexOpenedHere"],
                               env=dict(env, SHARDSCOPE_TEST_DEMO=str(ckpt),
                                        SHARDSCOPE_TEST_CLI=s.cli,
                                        SHARDSCOPE_TEST_LAYOUT=str(s.layout)))
            tally.unit(f"cached: {what}: the opened index (C++ API)",
                       [] if rc == 0 else [(out + err).strip()[-1500:]])


def across_hosts(tally: Tally, s: Setup, env: dict, here: Path, there, label: str) -> None:
    """diff A --against B with one side (or each) on a host: equal to the comparison here.
    `there(path, host)` names a path on a host."""
    d = s.demo
    cases = [
        ("remote --against", [there(d, 0), "--against", here]),
        ("--against remote", [d, "--against", there(here, 0)]),
        ("two hosts", [there(d, 0), "--against", there(here, 1)]),
    ]
    for name, (a, _, b) in cases:
        for form, extra in (("text", []), ("--json", ["--json"])):
            local = run([s.cli, "diff", d, "--against", here, *extra], env=env)
            remote = run([s.cli, "--server", s.cli, "diff", a, "--against", b, *extra],
                         env=env)
            problems = []
            if local != remote:
                problems.append(f"exit {remote[0]}, here {local[0]}; stdout equal: "
                                f"{local[1] == remote[1]}; stderr {remote[2].strip()[-300:]!r}")
            if form == "--json" and not json.loads(local[1]).get("changes"):
                problems.append("the two checkpoints here have no change: nothing was tested")
            tally.unit(f"compare ({label}): diff {name} ({form})", problems)
    report_here, report_there = s.tmp / "compare-here.json", s.tmp / "compare-there.json"
    local = run([s.cli, "report", d, "--against", here, "-o", report_here], env=env)
    remote = run([s.cli, "--server", s.cli, "report", d, "--against", there(here, 0), "-o",
                  report_there], env=env)
    # Equal but for the command that reproduces it, which names the side on the host.
    same = False
    if report_here.exists() and report_there.exists():
        a, b = json.loads(report_here.read_text()), json.loads(report_there.read_text())
        same = (str(there(here, 0)) in b.pop("command", "") and a.pop("command", None)
                and a == b)
    tally.unit(f"compare ({label}): report --against remote (.json)",
               [] if local[0] == remote[0] and same
               else [f"exit {remote[0]}, here {local[0]}; same file: {same}; "
                     f"{remote[2].strip()[-300:]}"])
    rc, out, err = run([s.cli, "--server", s.cli, "report", d, "--against", there(here, 0),
                        "--values", "-o", s.tmp / "values.json"], env=env)
    lines = err.strip().splitlines()
    tally.unit(f"compare ({label}): report --values across hosts is refused in one line",
               [] if rc == 2 and not out and len(lines) == 1 and "two places" in lines[0]
               else [f"exit {rc}: {err.strip()}"])


def by_digest(tally: Tally, s: Setup, env: dict, changed: Path, there, label: str) -> None:
    """diff --values with a side on a host: each stored tensor's SHA-256 where it lives, whose
    verdicts are those of the element-by-element comparison here (which torch's figures back,
    tools/check_values.py), for every tensor both name by one stored key."""
    local = run([s.cli, "diff", s.demo, "--against", changed, "--values", "--json"], env=env)
    remote = run([s.cli, "--server", s.cli, "diff", s.demo, "--against", there(changed, 0),
                  "--values", "--json"], env=env)
    problems = []
    if remote[0] != local[0]:
        problems.append(f"exit {remote[0]}, here {local[0]}: {remote[2].strip()[-300:]}")
    try:
        here, hashed = json.loads(local[1]), json.loads(remote[1])
    except json.JSONDecodeError:
        tally.unit(f"compare ({label}): --values by digest", problems + ["no JSON"])
        return
    if hashed.get("method") != "sha256" or "method" in here:
        problems.append(f"method {hashed.get('method')!r} (here {here.get('method')!r})")
    verdicts = {t["name"]: t["verdict"] for t in hashed["tensors"]}
    checked = differ = 0
    for t in here["tensors"]:
        if len(t["keys_a"]) == 1 and t["keys_a"] == t["keys_b"]:
            got = verdicts.get(t["keys_a"][0])
            checked += 1
            differ += t["verdict"] == "different"
            if got != t["verdict"]:
                problems.append(f"{t['keys_a'][0]}: {got} by digest, {t['verdict']} here")
    if checked < len(here["tensors"]) // 2 or differ == 0:
        problems.append(f"only {checked} tensors checked, {differ} different: nothing was tested")
    rc, out, _ = run([s.cli, "--server", s.cli, "diff", s.demo, "--against", there(changed, 0),
                      "--values"], env=env)
    if "by each stored tensor's SHA-256" not in out:
        problems.append("the text does not say the values were compared by digest")
    if "kernels on" in out or "hashed on the host" not in out:
        problems.append("the text's read: line says kernels compared what each host hashed")
    tally.unit(f"compare ({label}): --values across hosts by each tensor's SHA-256 "
               f"({checked} tensors, {differ} different)", problems[:10])


def fixed_copy(s: Setup, env: dict) -> Path:
    """The demo repaired (MLA's fused down projection split by fix): a checkpoint whose keys
    differ from the demo's, written and checked by the code under test's own fix."""
    out = s.tmp / "compare-fixed"
    rc, _, err = run([s.cli, "fix", s.demo, "--layout", s.layout, "--disable-rule",
                      "mla_down_proj", "-o", out], env=env)
    if rc != 0:
        raise SystemExit(f"fix for the compare case failed: {err}")
    return out


def changed_copy(s: Setup) -> Path:
    """The demo with one tensor changed by real torch (tools/make_changed_copy.py)."""
    out = s.tmp / "changed"
    rc, _, err = run([sys.executable, TOOLS / "make_changed_copy.py", s.demo, out, "--json"])
    if rc != 0:
        raise SystemExit(f"make_changed_copy.py failed: {err}")
    return out


def case_compare(tally: Tally, s: Setup) -> int:
    _, env = s.loopback()
    other = fixed_copy(s, env)
    changed = changed_copy(s)
    # The loopback transport runs every host here: "cluster" and "cluster2" are two sessions.
    hosts = ["cluster", "cluster2"]
    across_hosts(tally, s, env, other,
                 lambda p, i: f"ssh://{hosts[i]}{p}" if i == 0 else f"{hosts[i]}:{p}",
                 "loopback")
    by_digest(tally, s, env, changed, lambda p, i: f"{hosts[i]}:{p}", "loopback")
    # --server without --ssh or a side on a host; a bad host in a location is one line.
    rc, out, err = run([s.cli, "--server", s.cli, "diff", s.demo, "--against", other], env=env)
    tally.unit("compare (loopback): --server without a host is refused in one line",
               [] if rc == 2 and "--server goes with" in err and not out
               else [f"exit {rc}: {err.strip()}"])
    rc, out, err = run([s.cli, "diff", s.demo, f"--against=-oProxyCommand=x:{other}"],
                       env=env)
    tally.unit("compare (loopback): a location whose host would be an ssh option is refused",
               [] if rc == 2 and len(err.strip().splitlines()) == 1 and "ssh option" in err
               else [f"exit {rc}: {err.strip()}"])
    sshd = with_sshd(s.tmp)
    if not sshd:
        return SKIP
    try:
        env = dict(s.env, SHARDSCOPE_SSH=str(sshd.ssh))
        names = ["shardscope-test", f"{sshd.user}@127.0.0.1:{sshd.port}"]
        across_hosts(tally, s, env, other,
                     lambda p, i: f"{names[i]}:{p}" if i == 0 else f"ssh://{names[i]}{p}",
                     "sshd")
        by_digest(tally, s, env, changed, lambda p, i: f"ssh://{names[i]}{p}", "sshd")
    finally:
        sshd.stop()
    return 0


def case_repair(tally: Tally, s: Setup) -> int:
    sshd = with_sshd(s.tmp)
    if not sshd:
        return SKIP
    out = s.tmp / "repaired"
    beside = s.tmp / "repaired.layout.json"
    mine = s.tmp / "mine" / "layout.json"  # the layout file "here"
    mine.parent.mkdir()
    shutil.copy(s.layout, mine)
    try:
        env = dict(s.env, SHARDSCOPE_SSH=str(sshd.ssh))
        rc, stdout, err = run([s.cli, "--ssh", "shardscope-test", "--server", s.cli, "fix",
                               s.demo, "--layout", mine, "--disable-rule", "mla_down_proj",
                               "-o", out], env=env)
        problems = [] if rc == 0 else [f"fix exit {rc}: {err.strip()}"]
        manifest = json.loads((out / "shardscope-fix.json").read_text()) if rc == 0 else {}
        if manifest.get("layout") != str(beside):
            problems.append(f"the manifest names the layout {manifest.get('layout')!r}, not "
                            f"{str(beside)!r} beside OUT")
        if not beside.exists() or json.loads(beside.read_text()) != json.loads(mine.read_text()):
            problems.append("the layout beside OUT is not the layout sent")
        command = manifest.get("command", "")
        if str(mine) in command or str(beside) not in command:
            problems.append(f"the manifest's command names the layout here: {command!r}")
        checks = [line.split(":", 1)[1].strip() if line.startswith("check:") else line.strip()
                  for line in stdout.splitlines()
                  if line.startswith("check:") or line.startswith("       shardscope-cli")]
        if len(checks) != 2 or any(str(mine) in c or str(beside) not in c for c in checks):
            problems.append(f"the check commands do not name the layout there: {checks}")
        tally.unit("repair: the layout written beside OUT there, named by the manifest",
                   problems)
        # The commands run there, the layout here gone: as they run here.
        shutil.rmtree(mine.parent)
        for c in checks:
            remote_cmd = c.replace("shardscope-cli", shlex_quote(s.cli), 1)
            there = run([sshd.ssh, "shardscope-test", remote_cmd], env=env)
            here = run(["sh", "-c", remote_cmd], env=env)
            tally.unit(f"repair: {c.split()[1]} of the manifest's commands runs there",
                       [] if there[0] == 0 and normalise(there[1]) == normalise(here[1])
                       else [f"exit {there[0]} (here {here[0]}): {there[2].strip()[-400:]}"])
        # The fix command the manifest records, run there into another OUT.
        again = command.replace("-o " + shlex_quote(str(out)),
                                "-o " + shlex_quote(str(out) + "-again"))
        there = run([sshd.ssh, "shardscope-test", again], env=env)
        tally.unit("repair: the manifest's command runs there",
                   [] if there[0] == 0 and "repaired:" in there[1]
                   else [f"exit {there[0]}: {(there[1] + there[2]).strip()[-400:]}"])
    finally:
        sshd.stop()
    return 0


def shlex_quote(text: str) -> str:
    import shlex
    return shlex.quote(text)


TORCH_SAVE = """
import sys, torch, torch.distributed.checkpoint as dcp
n = int(sys.argv[2])
dcp.save({f"layer{i}.weight": torch.arange(64.0 * (i + n)).reshape(8, -1) for i in range(n)},
         checkpoint_id=sys.argv[1])
"""


def case_compressed(tally: Tally, s: Setup) -> None:
    if not s.api:
        print("SKIP: no --api binary")
        return SKIP
    _, env = s.loopback()
    server_cache, client_cache, log = s.tmp / "server-cache", s.tmp / "client-cache", s.tmp / "log"
    env = dict(env, SHARDSCOPE_CACHE_MIN_BYTES="0", SHARDSCOPE_CACHE_SETTLE_SECONDS="0",
               LOOPBACK_CACHE_DIR=str(server_cache), SHARDSCOPE_CACHE_DIR=str(client_cache),
               LOOPBACK_STDERR=str(log), SHARDSCOPE_TIMING="1")
    ckpt = s.tmp / "written-by-torch"
    rc, _, err = run([sys.executable, "-c", TORCH_SAVE, ckpt, "3"], env=env)
    if rc != 0:
        tally.unit("compressed: torch writes a checkpoint", [err.strip()[-500:]])
        return None

    def open_(what: str, ahead: bool, keep_client: bool = True, want: tuple = (),
              refuse: tuple = ()) -> None:
        if not keep_client:
            shutil.rmtree(client_cache, ignore_errors=True)
        log.write_text("")
        rc, out, err = run([s.api, "--gtest_filter=Remote.TheKeysAheadAreCurrentAndTheIndexIsTheOneHere"],
                           env=dict(env, SHARDSCOPE_TEST_DEMO=str(ckpt), SHARDSCOPE_TEST_CLI=s.cli,
                                    SHARDSCOPE_TEST_LAYOUT=str(s.layout),
                                    SHARDSCOPE_TEST_KEYS_AHEAD="1" if ahead else "0"))
        said = log.read_text()
        problems = [] if rc == 0 and "[  PASSED  ] 1 test" in out else [(out + err).strip()[-1500:]]
        problems += [f"the server did not say {w!r}: {said!r}" for w in want if w not in said]
        problems += [f"the server said {w!r}: {said!r}" for w in refuse if w in said]
        tally.unit(f"compressed: {what}", problems)

    def kept() -> Path | None:
        found = sorted(server_cache.glob("*.ssidx.zst"), key=lambda p: p.stat().st_mtime)
        return found[-1] if found else None

    sent_as_kept = "entry: sent its kept compressed form"
    open_("first open: compressed, and its compressed form kept", False, False,
          want=("index: compressed and sent",), refuse=("entry:",))
    if not kept():
        tally.unit("compressed: the compressed form is kept beside the entry",
                   [f"none in {sorted(p.name for p in server_cache.glob('*'))}"])
        return None
    open_("the kept compressed form sent as it is, ahead of the open", True, False,
          want=(sent_as_kept,), refuse=("compressed and sent",))
    open_("a reopen: the entry kept here named, nothing compressed", True,
          refuse=("compressed",))
    z = kept()
    good = z.read_bytes()
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0x55
    z.write_bytes(bytes(bad))
    open_("a corrupt compressed form is not used", True, False,
          want=("its compressed form not used", "checksum mismatch"), refuse=(sent_as_kept,))
    open_("… and is written anew", True, False, want=(sent_as_kept,))
    z.write_bytes(good[: len(good) // 2])
    open_("a compressed form cut short is not used", True, False,
          want=("its compressed form not used",), refuse=(sent_as_kept,))
    # The checkpoint rewritten by torch after the client kept its index: the new index.
    stale = kept().read_bytes()
    open_("(kept here)", True)
    rc, _, err = run([sys.executable, "-c", TORCH_SAVE, ckpt, "4"], env=env)
    if rc != 0:
        tally.unit("compressed: torch rewrites the checkpoint", [err.strip()[-500:]])
        return None
    open_("rewritten after the client kept it: the new index", False)
    open_("rewritten: its new entry goes ahead", True, False, want=(sent_as_kept,))
    kept().write_bytes(stale)
    open_("the compressed form of the earlier entry is not used", True, False,
          want=("its compressed form not used", "earlier entry"), refuse=(sent_as_kept,))
    # A data file cut short after the client kept the index: the same keys go ahead, then the
    # index with the integrity checks' problems.
    open_("(kept here again)", True)
    data = next(ckpt.glob("*.distcp"))
    with open(data, "r+b") as f:
        f.truncate(data.stat().st_size - 100)
    open_("a data file cut short after the client kept it: the keys, then its problems", True)
    return None


def case_window(tally: Tally, s: Setup) -> int:
    """The window's session over a RemoteBackend through sshd (tests/model/remote_window_test)."""
    if not s.window:
        print("SKIP: no --window binary")
        return SKIP
    # torchrun on the server's PATH (a launched verify cancelled from the window)
    sshd = with_sshd(s.tmp, path=str(Path(sys.executable).parent) + ":/usr/local/bin:/usr/bin:/bin")
    if not sshd:
        return SKIP
    try:
        rc, out, err = run([s.window], env=dict(s.env, SHARDSCOPE_SSH=str(sshd.ssh),
                                                SHARDSCOPE_TEST_HOST="shardscope-test",
                                                SHARDSCOPE_TEST_CLI=s.cli), timeout=600)
        tally.unit("window: the session over sshd (remote_window_tests)",
                   [] if rc == 0 and "SKIPPED" not in out else [(out + err).strip()[-2500:]])
        # The window itself (offscreen): `shardscope --ssh HOST PATH` opens the demo there,
        # selects its first tensor, whose statistics come from the server, and saves itself.
        gui = Path(s.cli).parents[2] / "app/gui/shardscope"
        if gui.exists():
            png = s.tmp / "remote-window.png"
            rc, out, err = run([gui, "--ssh", "shardscope-test", "--server", s.cli, s.demo,
                                "--screenshot", png],
                               env=dict(s.env, SHARDSCOPE_SSH=str(sshd.ssh),
                                        QT_QPA_PLATFORM="offscreen"), timeout=300)
            tally.unit("window: shardscope --ssh opens the demo there and shows a tensor",
                       [] if rc == 0 and png.exists() else [f"exit {rc}: {(out + err)[-800:]}"])
            rc, out, err = run([gui, "--ssh", "shardscope-test", "--server", s.tmp / "nothing",
                                s.demo, "--screenshot", png],
                               env=dict(s.env, SHARDSCOPE_SSH=str(sshd.ssh),
                                        QT_QPA_PLATFORM="offscreen"), timeout=300)
            tally.unit("window: a server that cannot start is one line, exit 2",
                       [] if rc == 2 and "could not start" in err else [f"exit {rc}: {err}"])
    finally:
        sshd.stop()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--demo", required=True)
    ap.add_argument("--api", help="the remote_session_tests binary")
    ap.add_argument("--window", help="the remote_window_tests binary (window)")
    ap.add_argument("--fixtures", help="tools/make_fixtures.py's output (cached: torch_dist)")
    ap.add_argument("case", choices=["loopback", "sshd", "killed", "version", "askpass",
                                     "torchrun", "cancel", "cached", "compressed", "confined",
                                     "window", "compare", "repair"])
    a = ap.parse_args()
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="shardscope-remote-") as tmp:
        s = Setup(a, Path(tmp))
        code = {"loopback": case_loopback, "sshd": case_sshd, "killed": case_killed,
                "version": case_version, "askpass": case_askpass, "torchrun": case_torchrun,
                "cancel": case_cancel, "cached": case_cached, "compressed": case_compressed,
                "confined": case_confined, "window": case_window,
                "compare": case_compare, "repair": case_repair}[a.case](tally, s)
        if code == SKIP:
            return SKIP
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
