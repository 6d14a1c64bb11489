"""Pass/fail counting shared by the checking tools: one line per failure, then a total."""

from __future__ import annotations


class Tally:
    """One unit = one key or one property; a unit fails if any of its checks fails."""

    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0

    def unit(self, name: str, problems: list[str]) -> None:
        if problems:
            self.failed += 1
            for p in problems:
                print(f"FAIL {name}: {p}")
        else:
            self.passed += 1

    def finish(self) -> int:
        """Prints "N passed, M failed"; the exit code (0 only when nothing failed)."""
        print(f"{self.passed} passed, {self.failed} failed")
        return 0 if self.failed == 0 else 1
