"""Message filters a consumer subscribes with: tag expressions (TAG) and SQL92 property expressions (SQL92)."""

from __future__ import annotations

from typing import Final

from rocketflow.filter.sql92 import FilterSyntaxError, Sql92Filter, compile_sql92

#: ``ExpressionType.TAG``: ``MessageSelector.byTag`` ("TagA || TagB", "*").
EXPRESSION_TYPE_TAG: Final = "TAG"
#: ``ExpressionType.SQL92``: ``MessageSelector.bySql`` (an expression over message properties).
EXPRESSION_TYPE_SQL92: Final = "SQL92"

__all__ = ["EXPRESSION_TYPE_SQL92", "EXPRESSION_TYPE_TAG", "FilterSyntaxError", "Sql92Filter", "compile_sql92"]
