"""The error a failed check raises: an AssertionError that names the check."""
from __future__ import annotations


class CheckError(AssertionError):
    """One property of ``CHECKS`` did not hold on one layer; ``check`` names it."""

    def __init__(self, check: str, message: str):
        super().__init__(f"[{check}] {message}")
        self.check, self.message = check, message
