"""The one exception a bad config.xml raises."""

from __future__ import annotations

__all__ = ["ConfigError"]


class ConfigError(Exception):
    """config.xml cannot be used; ``str(error)`` says where and why.

    The message reads ``<file>, line <n>, at <element path>: <problem>``, for example
    ``conf/config.xml, line 7, at hivemq/listeners/tcp-listener/port: expected an integer
    between 0 and 65535, got 'abc'``. The parts are also kept as attributes so a caller can
    render them differently.
    """

    def __init__(
        self,
        problem: str,
        *,
        source: str = "<string>",
        line: int | None = None,
        path: str | None = None,
    ) -> None:
        self.problem = problem
        self.source = source
        self.line = line
        self.path = path
        where = source
        if line is not None:
            where += f", line {line}"
        if path:
            where += f", at {path}"
        super().__init__(f"{where}: {problem}")
