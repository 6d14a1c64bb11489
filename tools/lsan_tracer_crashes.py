#!/usr/bin/env python3
"""Reads ctest's JUnit XML: when every failed test failed only because LeakSanitizer's tracer
crashed at exit (google/sanitizers#1353: "Tracer caught signal 11" then "LeakSanitizer has
encountered a fatal error", no leak or error report), prints their names joined by '|' for a
ctest -R and exits 0; exits 1 when any failure is something else (a real finding, a failed
check), or none failed."""
import re
import sys
import xml.etree.ElementTree as ET

CRASH = "LeakSanitizer has encountered a fatal error"
# What a real finding or a failed check prints: any of these and the failure stands.
REAL = re.compile(r"ERROR: (Address|Leak|UndefinedBehavior|Thread)Sanitizer|runtime error:|"
                  r"SUMMARY: |^FAIL(?! \S+: \S+: exit 86: Tracer)", re.M)


def main() -> int:
    root = ET.parse(sys.argv[1]).getroot()
    crashed = []
    for case in root.iter("testcase"):
        if case.get("status") not in ("fail", "failed") and case.find("failure") is None:
            continue
        out = "".join((e.text or "") for e in case.iter() if e.tag in ("system-out", "failure"))
        if CRASH not in out or REAL.search(out):
            return 1
        crashed.append(re.escape(case.get("name", "")))
    if not crashed:
        return 1
    print("|".join(crashed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
