"""Say each kind of API failure once, not once per retry.

The first failure of each kind is a warning, repeats are debug lines, and the first success after
failures says that things work again.
"""

from __future__ import annotations

import logging


class FailureLog:
    """Per-activity memory of the failure kinds already reported. Not thread-safe: one owner."""

    def __init__(self, logger: logging.Logger, activity: str) -> None:
        self._logger = logger
        self._activity = activity
        self._seen: set[str] = set()
        self.failures = 0

    def failed(self, kind: str, text: str, consequence: str = "") -> None:
        """Record a failure; log it as a warning only if this kind is new since the last success."""
        self.failures += 1
        level = logging.DEBUG if kind in self._seen else logging.WARNING
        self._seen.add(kind)
        suffix = f"; {consequence}" if consequence else ""
        self._logger.log(level, "%s failed: %s%s", self._activity, text, suffix)

    def succeeded(self) -> None:
        """Record a success; after failures, say once that the activity works again."""
        if self._seen:
            self._logger.info("%s works again after %d failed attempts", self._activity, self.failures)
        self._seen.clear()
        self.failures = 0

    @property
    def failing(self) -> bool:
        return bool(self._seen)
