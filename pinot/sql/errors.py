"""What a translation produces (:class:`Plan`) and how it fails (:class:`QueryError`, with
Pinot's error codes).
"""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_LIMIT = 10

# Pinot broker error codes.
SQL_PARSING_ERROR = 150
TABLE_DOES_NOT_EXIST = 190
QUERY_EXECUTION_ERROR = 200
QUERY_VALIDATION_ERROR = 700

_ERROR_NAMES = {
    SQL_PARSING_ERROR: "SQLParsingError",
    TABLE_DOES_NOT_EXIST: "TableDoesNotExistError",
    QUERY_EXECUTION_ERROR: "QueryExecutionError",
    QUERY_VALIDATION_ERROR: "QueryValidationError",
}


class QueryError(Exception):
    """A query Pinot would reject, or one outside the subset this stand-in serves."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        super().__init__(f"{_ERROR_NAMES.get(code, 'Error')}:\n{message}")


def unsupported(what: str) -> QueryError:
    return QueryError(
        QUERY_VALIDATION_ERROR,
        f"{what} is not supported by the local Pinot server (embedded mode); "
        "see pinot/sql/ for the supported subset",
    )


@dataclass
class Plan:
    """A translated query: DuckDB SQL plus the Pinot result schema."""

    sql: str
    table: str
    column_names: list[str]
    column_types: list[str]
    options: dict[str, str] = field(default_factory=dict)
    #: The same query with its ``= <integer>`` literals as parameters, and their values:
    #: the store prepares the text once per cursor (a point lookup's cost is mostly
    #: planning). None when the query has no such literal or was not translated by shape.
    prepared: tuple[str, tuple[int, ...]] | None = field(default=None, compare=False)
