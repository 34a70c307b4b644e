"""An expression's limits, and the errors of compiling one (`FilterSyntaxError`) and of evaluating one."""

from __future__ import annotations

from typing import Final

from rocketflow.errors import RocketflowError

MAX_EXPRESSION_LENGTH: Final = 4096
MAX_NESTING: Final = 100


class FilterSyntaxError(RocketflowError, ValueError):
    """An SQL92 expression that does not compile; ``position`` is the 0-based offset of the problem, if any."""

    def __init__(self, message: str, position: int | None = None) -> None:
        super().__init__(message)
        self.position = position


class EvalAbort(Exception):
    """A conversion failed while evaluating: RocketMQ throws, and the message does not match."""


__all__ = ["MAX_EXPRESSION_LENGTH", "MAX_NESTING", "EvalAbort", "FilterSyntaxError"]
