"""Translate the Pinot SQL subset the application uses into DuckDB SQL.

The translator is a whitelist: every syntax node and function is handled
explicitly, and anything else raises :class:`QueryError`, which the server
answers with a Pinot-style exception. A query this module accepts returns what
Pinot (single-stage engine, null handling off) would return:

* the default ``LIMIT 10`` for selections, DISTINCT and group-bys without LIMIT;
* ``skipUpsert=true`` (``SET skipUpsert = true;`` or ``OPTION(skipUpsert=true)``
  or the request's ``queryOptions``) reads the full history of an upsert table;
* ``now()`` and ``ago('<ISO-8601 duration>')`` are epoch-millis literals taken
  at query time; ``ToDateTime(millis, 'joda pattern')`` formats in UTC;
* aggregations return Pinot's types (COUNT LONG, DISTINCTCOUNT INT, the rest
  DOUBLE) and Pinot's empty-input values (SUM 0, MIN +inf, MAX/AVG/PERCENTILE
  -inf); ``percentile(x, p)`` is the sorted value at index floor(n*p/100);
* arithmetic is DOUBLE, as in Pinot's transform functions (``FLOOR``/``CEIL``/``MOD`` too);
* ``ST_Distance(ST_Point(x1, y1, 1), ST_Point(x2, y2, 1))`` is metres on the sphere, as
  Pinot measures two geographies;
* ``ST_Contains(ST_GeogFromText('<wkt>'), <point column>)`` and
  ``ST_Within(<point column>, ST_GeogFromText('<wkt>'))`` (the forms Pinot's H3 index
  serves), and ``ST_Contains(ST_GeomFromText('<wkt>'), toGeometry(<point column>))``
  (no index), are a planar point-in-polygon test (shapely), as Pinot's ``stContains``
  is on geography too; mixing geography and geometry is an error, as in Pinot.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field, replace
from typing import Any

import shapely
import sqlglot
from sqlglot import exp

from pinot.definitions import TableDef
from pinot.store import history_table

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
        "see pinot/sql.py for the supported subset",
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


# ------------------------------------------------------------------ options

_SET = re.compile(r"^\s*SET\s+(\w+)\s*=\s*('[^']*'|\"[^\"]*\"|[\w.]+)\s*;", re.I)
_OPTION = re.compile(r"\boption\s*\(([^()]*)\)\s*;?\s*$", re.I)
_KNOWN_OPTIONS = {"skipupsert", "timeoutms", "usemultistageengine", "enablenullhandling"}


def _option_value(raw: str) -> str:
    return raw.strip().strip("'\"").strip()


def parse_options(sql: str, query_options: str | None) -> tuple[str, dict[str, str]]:
    """Strip ``SET k = v;`` prefixes and a trailing ``OPTION(...)``; merge all options."""
    options: dict[str, str] = {}
    for part in (query_options or "").split(";"):
        if part.strip():
            if "=" not in part:
                raise QueryError(SQL_PARSING_ERROR, f"bad query option {part!r}")
            key, value = part.split("=", 1)
            options[key.strip().lower()] = _option_value(value)
    while match := _SET.match(sql):
        options[match.group(1).lower()] = _option_value(match.group(2))
        sql = sql[match.end() :]
    if match := _OPTION.search(sql):
        for part in match.group(1).split(","):
            if "=" not in part:
                raise QueryError(SQL_PARSING_ERROR, f"bad OPTION entry {part!r}")
            key, value = part.split("=", 1)
            options[key.strip().lower()] = _option_value(value)
        sql = sql[: match.start()]
    for key, value in options.items():
        if key not in _KNOWN_OPTIONS:
            raise unsupported(f"query option {key!r}")
        if key in ("usemultistageengine", "enablenullhandling") and value.lower() != "false":
            raise unsupported(f"query option {key}={value}")
    return sql.strip().rstrip(";"), options


def _is_true(value: str | None) -> bool:
    return (value or "").lower() == "true"


# ------------------------------------------------------------------ durations / formats

_DURATION = re.compile(
    r"^P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d{1,3})?)S)?)?$",
    re.I,
)


def duration_ms(text: str) -> int:
    """ISO-8601 duration (Java ``Duration.parse`` forms Pinot's ``ago`` accepts) in ms."""
    match = _DURATION.match(text.strip())
    if not match or text.strip().upper() in ("P", "PT") or text.strip().upper().endswith("T"):
        raise QueryError(QUERY_EXECUTION_ERROR, f"Invalid ISO-8601 duration for ago(): {text!r}")
    d, h, m, s = (match.group(k) for k in "dhms")
    total = (int(d or 0) * 86400 + int(h or 0) * 3600 + int(m or 0) * 60) * 1000
    return total + round(float(s or 0) * 1000)


_JODA = [
    ("yyyy", "%Y"),
    ("YYYY", "%Y"),  # Joda: Y is year-of-era, equal to y for AD dates
    ("MM", "%m"),
    ("dd", "%d"),
    ("HH", "%H"),
    ("mm", "%M"),
    ("ss", "%S"),
    ("SSS", "%g"),
]


def joda_to_strftime(pattern: str) -> str:
    """Translate the Joda date pattern subset used with ToDateTime into strftime."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "'":
            end = pattern.find("'", i + 1)
            if end < 0:
                raise QueryError(QUERY_EXECUTION_ERROR, f"unterminated quote in {pattern!r}")
            literal = pattern[i + 1 : end] or "'"
            out.append(literal.replace("%", "%%"))
            i = end + 1
            continue
        if ch.isalpha():
            for token, fmt in _JODA:
                if pattern.startswith(token, i):
                    out.append(fmt)
                    i += len(token)
                    break
            else:
                raise unsupported(f"ToDateTime pattern letter {ch!r} in {pattern!r}")
            continue
        out.append("%%" if ch == "%" else ch)
        i += 1
    return "".join(out)


# ------------------------------------------------------------------ translation

_AGGREGATES = {
    "count", "sum", "min", "max", "avg", "minmaxrange", "distinctcount", "distinctcounthll",
    "distinctcountbitmap", "percentile", "percentileest", "percentiletdigest",
}  # fmt: skip
#: Percentile aggregations: (expr, pct) or <name><pct>(expr). The estimating ones answer
#: exactly here (Pinot's estimate of a small set is exact too; on large sets it is close).
_PERCENTILE_FAMILY = ("percentile", "percentileest", "percentiletdigest")
_PERCENTILE_N = re.compile(r"^(percentile|percentileest|percentiletdigest)(\d+(?:\.\d+)?)$")
_COMPARISONS = {
    exp.EQ: "=",
    exp.NEQ: "<>",
    exp.GT: ">",
    exp.GTE: ">=",
    exp.LT: "<",
    exp.LTE: "<=",
}
_ARITHMETIC = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%"}
#: Mean earth radius (m) of Pinot's spherical ST_Distance on geographies.
_EARTH_RADIUS_M = 6371008.8


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


class _Translator:
    """Translates one parsed query on one table into DuckDB SQL, node by node.

    Each ``emit`` returns the DuckDB text and the Pinot type of the result, so aggregates and
    arithmetic answer with Pinot's types; any node or function without a case here is a
    :class:`QueryError` (the whitelist). One instance per query: it collects the aliases
    and whether the query aggregates.
    """

    def __init__(self, table: TableDef, now_ms: int) -> None:
        self.table = table
        self.now_ms = now_ms
        self.aliases: dict[str, str] = {}  # alias -> Pinot type
        self.has_aggregate = False

    # Each emit returns (DuckDB SQL, Pinot result type).
    def emit(self, node: exp.Expression, ctx: str, in_agg: bool = False) -> tuple[str, str]:
        if isinstance(node, exp.Paren):
            sql, t = self.emit(node.this, ctx, in_agg)
            return f"({sql})", t
        if isinstance(node, exp.Column):
            return self._column(node, ctx)
        if isinstance(node, exp.Literal):
            if node.is_string:
                return _string(node.this), "STRING"
            text = node.this
            return text, ("LONG" if re.fullmatch(r"-?\d+", text) else "DOUBLE")
        if isinstance(node, exp.Boolean):
            return ("TRUE" if node.this else "FALSE"), "BOOLEAN"
        if isinstance(node, exp.Neg):
            sql, t = self.emit(node.this, ctx, in_agg)
            return f"(-{sql})", t
        for cls, op in _ARITHMETIC.items():
            if type(node) is cls:
                left, _ = self.emit(node.this, ctx, in_agg)
                right, _ = self.emit(node.expression, ctx, in_agg)
                return f"(CAST({left} AS DOUBLE) {op} CAST({right} AS DOUBLE))", "DOUBLE"
        for cls, op in _COMPARISONS.items():
            if type(node) is cls:
                left, _ = self.emit(node.this, ctx, in_agg)
                right, _ = self.emit(node.expression, ctx, in_agg)
                return f"({left} {op} {right})", "BOOLEAN"
        if isinstance(node, (exp.And, exp.Or)):
            op = "AND" if isinstance(node, exp.And) else "OR"
            left, _ = self.emit(node.this, ctx, in_agg)
            right, _ = self.emit(node.expression, ctx, in_agg)
            return f"({left} {op} {right})", "BOOLEAN"
        if isinstance(node, exp.Not):
            inner, _ = self.emit(node.this, ctx, in_agg)
            return f"(NOT {inner})", "BOOLEAN"
        if isinstance(node, exp.In):
            if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
                raise unsupported("IN with a subquery")
            left, _ = self.emit(node.this, ctx, in_agg)
            items = [self.emit(e, ctx, in_agg)[0] for e in node.expressions]
            return f"({left} IN ({', '.join(items)}))", "BOOLEAN"
        if isinstance(node, exp.Between):
            v, _ = self.emit(node.this, ctx, in_agg)
            lo, _ = self.emit(node.args["low"], ctx, in_agg)
            hi, _ = self.emit(node.args["high"], ctx, in_agg)
            return f"({v} BETWEEN {lo} AND {hi})", "BOOLEAN"
        if isinstance(node, exp.Like) and not node.args.get("escape"):
            left, _ = self.emit(node.this, ctx, in_agg)
            right, _ = self.emit(node.expression, ctx, in_agg)
            return f"({left} LIKE {right})", "BOOLEAN"
        if isinstance(node, exp.Filter):
            return self._aggregate(node.this, node.expression, ctx, in_agg)
        if isinstance(node, (exp.Count, exp.Sum, exp.Min, exp.Max, exp.Avg)):
            return self._aggregate(node, None, ctx, in_agg)
        if isinstance(node, exp.Anonymous):
            name = node.name.lower()
            if name in _AGGREGATES or _PERCENTILE_N.match(name):
                return self._aggregate(node, None, ctx, in_agg)
            return self._function(node, name, ctx, in_agg)
        if isinstance(node, (exp.Floor, exp.Ceil)):  # Pinot: DOUBLE in, DOUBLE out
            if node.args.get("decimals") is not None or node.args.get("to") is not None:
                raise unsupported(f"{node.sql()!r}")
            value, _ = self.emit(node.this, ctx, in_agg)
            fn = "FLOOR" if isinstance(node, exp.Floor) else "CEIL"
            return f"CAST({fn}(CAST({value} AS DOUBLE)) AS DOUBLE)", "DOUBLE"
        if isinstance(node, exp.StDistance):
            return self._distance(node, ctx, in_agg)
        if isinstance(node, exp.CurrentTimestamp):  # sqlglot may normalise now()
            return str(self.now_ms), "LONG"
        raise unsupported(f"SQL construct {node.key.upper()} ({node.sql()!r})")

    def _column(self, node: exp.Column, ctx: str) -> tuple[str, str]:
        if node.table and node.table not in (self.table.name, f"{self.table.name}_REALTIME"):
            raise QueryError(QUERY_VALIDATION_ERROR, f"Unknown table qualifier {node.table!r}")
        name = node.name
        if (
            ctx in ("order", "group", "having")
            and name in self.aliases
            and (self.table.column(name) is None or ctx != "group")
        ):
            return _q(name), self.aliases[name]
        col = self.table.column(name)
        if col is None:
            raise QueryError(
                QUERY_VALIDATION_ERROR, f"Unknown columnName '{name}' found in the query"
            )
        if col.data_type == "BYTES":
            raise unsupported(
                f"reading the BYTES column {name!r} directly (use it in ST_Contains/ST_Within)"
            )
        return _q(name), col.data_type

    def _aggregate(
        self, node: exp.Expression, where: exp.Expression | None, ctx: str, in_agg: bool
    ) -> tuple[str, str]:
        if ctx not in ("select", "having", "order") or in_agg:
            raise QueryError(
                QUERY_VALIDATION_ERROR, f"aggregation not allowed here: {node.sql()!r}"
            )
        self.has_aggregate = True
        flt = ""
        if where is not None:
            if not isinstance(where, exp.Where):
                raise unsupported("FILTER without WHERE")
            cond, _ = self.emit(where.this, "where")
            flt = f" FILTER (WHERE {cond})"
        if isinstance(node, exp.Count):
            arg = node.this
            if isinstance(arg, exp.Star):
                return f"COUNT(*){flt}", "LONG"
            if isinstance(arg, exp.Distinct):
                (inner,) = arg.expressions
                sql, _ = self.emit(inner, ctx, True)
                return f"CAST(COUNT(DISTINCT {sql}){flt} AS INTEGER)", "INT"
            sql, _ = self.emit(arg, ctx, True)
            return f"COUNT({sql}){flt}", "LONG"
        if isinstance(node, (exp.Sum, exp.Min, exp.Max, exp.Avg)):
            if node.args.get("expressions") or isinstance(node.this, exp.Distinct):
                raise unsupported(f"{node.sql()!r}")
            sql, t = self.emit(node.this, ctx, True)
            if t not in ("INT", "LONG", "FLOAT", "DOUBLE"):
                raise QueryError(
                    QUERY_EXECUTION_ERROR, f"{node.key.upper()} needs a numeric argument"
                )
            fn = node.key.upper()
            empty = {"SUM": "0.0", "MIN": "'inf'", "MAX": "'-inf'", "AVG": "'-inf'"}[fn]
            return (
                f"COALESCE(CAST({fn}({sql}){flt} AS DOUBLE), CAST({empty} AS DOUBLE))",
                "DOUBLE",
            )
        name = node.name.lower()
        args = list(node.expressions)
        if name in ("distinctcount", "distinctcountbitmap", "distinctcounthll"):
            if len(args) != 1:
                raise QueryError(QUERY_VALIDATION_ERROR, f"{name.upper()} takes one argument")
            sql, _ = self.emit(args[0], ctx, True)
            if name == "distinctcounthll":  # Pinot: LONG (an estimate; exact here)
                return f"CAST(COUNT(DISTINCT {sql}){flt} AS BIGINT)", "LONG"
            return f"CAST(COUNT(DISTINCT {sql}){flt} AS INTEGER)", "INT"
        if name == "minmaxrange":
            if len(args) != 1:
                raise QueryError(QUERY_VALIDATION_ERROR, "MINMAXRANGE takes one argument")
            sql, t = self.emit(args[0], ctx, True)
            if t not in ("INT", "LONG", "FLOAT", "DOUBLE"):
                raise QueryError(QUERY_EXECUTION_ERROR, "MINMAXRANGE needs a numeric argument")
            return (
                f"COALESCE(CAST(MAX({sql}){flt} - MIN({sql}){flt} AS DOUBLE), "
                "CAST('-inf' AS DOUBLE))",
                "DOUBLE",
            )
        match = _PERCENTILE_N.match(name)
        if match:
            if len(args) != 1:
                raise QueryError(QUERY_VALIDATION_ERROR, f"{name} takes one argument")
            family, pct = match.group(1), match.group(2)
        else:
            if name not in _PERCENTILE_FAMILY or len(args) != 2:
                raise QueryError(QUERY_VALIDATION_ERROR, f"{name.upper()} takes (expression, pct)")
            if not isinstance(args[1], exp.Literal) or args[1].is_string:
                raise QueryError(QUERY_VALIDATION_ERROR, f"{name.upper()}'s pct must be a number")
            family, pct = name, args[1].this
        if not 0 <= float(pct) <= 100:
            raise QueryError(QUERY_EXECUTION_ERROR, f"percentile {pct} is outside [0, 100]")
        sql, _ = self.emit(args[0], ctx, True)
        value = f"pinot_percentile(LIST(CAST({sql} AS DOUBLE)){flt}, {pct})"
        if family == "percentileest":  # Pinot: LONG, Long.MIN_VALUE on no rows
            return (
                f"CASE WHEN isinf({value}) THEN -9223372036854775808 "
                f"ELSE CAST({value} AS BIGINT) END",
                "LONG",
            )
        if family == "percentiletdigest":  # Pinot: NaN on no rows
            return f"CASE WHEN isinf({value}) THEN CAST('NaN' AS DOUBLE) ELSE {value} END", "DOUBLE"
        return value, "DOUBLE"

    def _function(self, node: exp.Anonymous, name: str, ctx: str, in_agg: bool) -> tuple[str, str]:
        args = list(node.expressions)
        if name == "now":
            if args:
                raise QueryError(QUERY_VALIDATION_ERROR, "now() takes no arguments")
            return str(self.now_ms), "LONG"
        if name == "ago":
            if len(args) != 1 or not isinstance(args[0], exp.Literal) or not args[0].is_string:
                raise QueryError(QUERY_VALIDATION_ERROR, "ago() takes one duration literal")
            return f"({self.now_ms} - {duration_ms(args[0].this)})", "LONG"
        if name == "todatetime":
            if len(args) not in (2, 3) or not all(
                isinstance(a, exp.Literal) and a.is_string for a in args[1:]
            ):
                raise QueryError(QUERY_VALIDATION_ERROR, "ToDateTime(millis, 'pattern'[, 'tz'])")
            if len(args) == 3 and args[2].this.upper() not in ("UTC", "GMT", "Z"):
                raise unsupported(f"ToDateTime time zone {args[2].this!r}")
            value, _ = self.emit(args[0], ctx, in_agg)
            fmt = joda_to_strftime(args[1].this)
            return (
                f"strftime(make_timestamp(CAST({value} AS BIGINT) * 1000), {_string(fmt)})",
                "STRING",
            )
        if name in ("st_contains", "st_within"):
            return self._point_in_shape(name, args)
        raise unsupported(f"function {node.name}()")

    def _distance(self, node: exp.StDistance, ctx: str, in_agg: bool) -> tuple[str, str]:
        """``ST_Distance(ST_Point(x1, y1, 1), ST_Point(x2, y2, 1))``: metres on the sphere,
        as Pinot measures two geographies (only that form: points built in the query)."""
        points = []
        for point in (node.this, node.expression):
            z = point.args.get("z") if isinstance(point, exp.StPoint) else None
            if not (isinstance(z, exp.Literal) and z.this == "1"):
                raise unsupported("ST_Distance other than of two ST_Point(x, y, 1) geographies")
            x, _ = self.emit(point.this, ctx, in_agg)
            y, _ = self.emit(point.expression, ctx, in_agg)
            points.append((f"radians(CAST({x} AS DOUBLE))", f"radians(CAST({y} AS DOUBLE))"))
        (l1, p1), (l2, p2) = points
        haversine = f"pow(sin(({p2} - {p1}) / 2), 2) + cos({p1}) * cos({p2}) * pow(sin(({l2} - {l1}) / 2), 2)"
        return f"(2 * {_EARTH_RADIUS_M} * asin(least(1.0, sqrt({haversine}))))", "DOUBLE"

    def _point_in_shape(self, name: str, args: list[exp.Expression]) -> tuple[str, str]:
        """``ST_Contains(<shape>, <point>)`` / ``ST_Within(<point>, <shape>)`` as Pinot runs them.

        The shape is a ``ST_GeogFromText``/``ST_GeomFromText`` literal. The point is the
        column itself (what Pinot's H3 index serves: ``FilterPlanNode`` applies the index
        only when an argument is the indexed identifier) or ``toGeometry(<column>)``
        (evaluated row by row: no index). Like Pinot's ``stContains``, geography and
        geometry cannot be mixed: a ``stPoint(x, y, 1)`` column is a geography.
        """
        label = "ST_Contains" if name == "st_contains" else "ST_Within"
        if len(args) != 2:
            raise QueryError(QUERY_VALIDATION_ERROR, f"{label} takes two arguments")
        shape, point = args if name == "st_contains" else (args[1], args[0])
        shape_fn = shape.name.lower() if isinstance(shape, exp.Anonymous) else ""
        if not (
            shape_fn in ("st_geogfromtext", "st_geomfromtext")
            and len(shape.expressions) == 1
            and isinstance(shape.expressions[0], exp.Literal)
            and shape.expressions[0].is_string
        ):
            raise unsupported(
                f"{label} whose shape is not ST_GeogFromText('wkt') or ST_GeomFromText('wkt')"
            )
        shape_geography = shape_fn == "st_geogfromtext"
        if isinstance(point, exp.Column) and point.name in self.table.points:
            col = point.name
            point_geography = col in self.table.geography_points
        elif (
            isinstance(point, exp.Anonymous)
            and point.name.lower() == "togeometry"
            and len(point.expressions) == 1
            and isinstance(point.expressions[0], exp.Column)
            and point.expressions[0].name in self.table.points
        ):
            col = point.expressions[0].name
            point_geography = False
        else:
            raise unsupported(
                f"{label} whose point is not a point column or toGeometry(<point column>)"
            )
        if shape_geography != point_geography:
            raise QueryError(
                QUERY_EXECUTION_ERROR,
                f"{label}: the first and second arguments should either both be geometry "
                "or both be geography",
            )
        wkt = shape.expressions[0].this
        try:
            geom = shapely.from_wkt(wkt)
        except shapely.errors.GEOSException as exc:
            raise QueryError(QUERY_EXECUTION_ERROR, f"invalid WKT {wkt!r}: {exc}") from None
        if geom.geom_type not in ("Polygon", "MultiPolygon"):
            raise unsupported(f"{label} on a {geom.geom_type}")
        return (
            f"pinot_st_contains({_string(wkt)}, {_q(col + '__x')}, {_q(col + '__y')})",
            "INT",
        )


#: Pinot's transform function names for SQL's arithmetic operators.
_ARITHMETIC_NAMES = {exp.Add: "plus", exp.Sub: "minus", exp.Mul: "times", exp.Div: "divide"}


def _java_double(text: str) -> str:
    """A number as Java's ``Double.toString`` writes it (90 -> 90.0, 99.9 -> 99.9)."""
    value = float(text)
    return repr(value) if "e" not in repr(value) else str(value)


def _default_name(node: exp.Expression, table: TableDef | None = None) -> str | None:
    """The result column name Pinot's broker gives an unaliased expression, or None when
    the stand-in cannot reproduce it exactly (the caller then asks for an alias).

    Pinot names a column after the query's expression tree
    (``ExpressionContext.toString``): identifiers as written, literals in single
    quotes, functions lower-cased as ``name(arg,arg)`` with SQL operators as their
    transform names (``plus``, ``minus``, ``times``, ``divide``); an aggregation as
    ``AggregationFunction.getResultColumnName()``: ``count(*)`` (also for
    ``COUNT(col)``, which Pinot counts as rows with null handling off),
    ``sum(total)``, ``distinctcount(status)`` (also for ``COUNT(DISTINCT status)``),
    ``percentile(total, 90.0)`` (the percentile as a Java double) and
    ``percentile90(total)``. A filtered aggregation appends ``FILTER(WHERE <filter>)``
    with the filter as Pinot prints its tree (``FilterContext.toString``); the stand-in
    rebuilds that for the filters Pinot's optimizers leave as written (see
    :func:`_filter_name`), and asks for an alias otherwise.
    """
    if isinstance(node, exp.Filter):
        inner = _default_name(node.this, table)
        where = node.expression
        cond = _filter_name(where.this, table) if isinstance(where, exp.Where) else None
        return None if inner is None or cond is None else f"{inner} FILTER(WHERE {cond})"
    if isinstance(node, exp.Paren):
        return _default_name(node.this)
    if isinstance(node, exp.Column):
        return node.name
    if isinstance(node, exp.Literal):
        return f"'{node.this}'"
    for cls, name in _ARITHMETIC_NAMES.items():
        if type(node) is cls:
            left, right = _default_name(node.this), _default_name(node.expression)
            return None if left is None or right is None else f"{name}({left},{right})"
    if isinstance(node, exp.Count):
        arg = node.this
        if isinstance(arg, exp.Distinct) and len(arg.expressions) == 1:
            inner = _default_name(arg.expressions[0])
            return None if inner is None else f"distinctcount({inner})"
        return "count(*)"
    if isinstance(node, (exp.Sum, exp.Min, exp.Max, exp.Avg)):
        inner = _default_name(node.this)
        return None if inner is None else f"{node.key.lower()}({inner})"
    if isinstance(node, (exp.Floor, exp.Ceil)):
        inner = _default_name(node.this)
        return None if inner is None else f"{node.key.lower()}({inner})"
    if isinstance(node, exp.Anonymous):
        name = node.name.lower()
        if name in ("now", "ago"):
            return None  # evaluated to a literal by the broker before naming
        args = [_default_name(a) for a in node.expressions]
        if any(a is None for a in args):
            return None
        if name in _PERCENTILE_FAMILY and len(args) == 2:
            pct = node.expressions[1]
            if not isinstance(pct, exp.Literal) or pct.is_string:
                return None
            return f"{name}({args[0]}, {_java_double(pct.this)})"
        return f"{name}({','.join(args)})"
    return None


_RANGE_OPS = {exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}
_INTEGRAL = ("INT", "LONG")


def _literal_fits(column: Any, literal: exp.Literal) -> bool:
    """True when Pinot keeps the literal as written for this column (its numerical filter
    optimizer rewrites a decimal compared with an integer column, and the reverse)."""
    if literal.is_string:
        return column.data_type == "STRING"
    if column.data_type in _INTEGRAL:
        return re.fullmatch(r"-?\d+", literal.this) is not None
    if column.data_type in ("FLOAT", "DOUBLE"):
        return re.fullmatch(r"-?\d+\.\d*[1-9]", literal.this) is not None  # e.g. 2.5, not 2.0
    return False


def _filter_name(node: exp.Expression, table: TableDef | None) -> str | None:
    """Pinot's ``FilterContext.toString`` for a filter the optimizers leave alone:
    ``col = 'v'``, ``col != 'v'``, ``col > 'v'`` (the value always quoted),
    ``col BETWEEN 'a' AND 'b'``, and ``(a AND b)`` / ``(a OR b)`` over predicates on
    different columns. Pinot merges ranges and ORs on one column, flattens nested
    ANDs/ORs and may push a NOT into its predicate, so those get None (an alias is
    then required)."""
    if table is None:
        return None
    if isinstance(node, exp.Paren):
        return _filter_name(node.this, table)
    if isinstance(node, (exp.And, exp.Or)):
        children = [node.this, node.expression]
        if any(isinstance(c, type(node)) or isinstance(getattr(c, "this", None), type(node))
               for c in children):  # fmt: skip
            return None  # nested: Pinot flattens
        columns = [c.find(exp.Column) for c in children]
        if None in columns or len({c.name for c in columns}) != len(columns):
            return None  # same column twice: Pinot merges
        names = [_filter_name(c, table) for c in children]
        if None in names:
            return None
        op = " AND " if isinstance(node, exp.And) else " OR "
        return "(" + op.join(names) + ")"
    if isinstance(node, exp.Between):
        col, lo, hi = node.this, node.args["low"], node.args["high"]
        if not isinstance(col, exp.Column) or table.column(col.name) is None:
            return None
        if not all(isinstance(v, exp.Literal) and _literal_fits(table.column(col.name), v)
                   for v in (lo, hi)):  # fmt: skip
            return None
        return f"{col.name} BETWEEN '{lo.this}' AND '{hi.this}'"
    ops = {**_RANGE_OPS, exp.EQ: "=", exp.NEQ: "!="}
    for cls, op in ops.items():
        if type(node) is cls:
            col, value = node.this, node.expression
            if not (isinstance(col, exp.Column) and isinstance(value, exp.Literal)):
                return None
            column = table.column(col.name)
            if column is None or not _literal_fits(column, value):
                return None
            return f"{col.name} {op} '{value.this}'"
    return None


def translate(
    sql: str, query_options: str | None, tables: dict[str, TableDef], now_ms: int
) -> Plan:
    """Pinot SQL -> :class:`Plan`, or :class:`QueryError` for anything outside the subset."""
    body, options = parse_options(sql, query_options)
    try:
        statements = sqlglot.parse(body)
    except sqlglot.errors.ParseError as exc:
        raise QueryError(SQL_PARSING_ERROR, str(exc).splitlines()[0]) from None
    statements = [s for s in statements if s is not None]
    if len(statements) != 1:
        raise QueryError(SQL_PARSING_ERROR, "expected exactly one SELECT statement")
    (tree,) = statements
    if not isinstance(tree, exp.Select):
        raise unsupported(f"statement {tree.key.upper()}")
    for key in ("joins", "with", "laterals", "qualify", "windows", "into", "locks", "sample"):
        if tree.args.get(key):
            raise unsupported(key.upper())
    if tree.args.get("distinct") and tree.args["distinct"].args.get("on"):
        raise unsupported("DISTINCT ON")
    source = tree.args.get("from_") or tree.args.get("from")
    if source is None or not isinstance(source.this, exp.Table) or source.this.args.get("db"):
        raise unsupported("a FROM clause that is not one table name")
    raw_name = source.this.name
    table_name = raw_name[: -len("_REALTIME")] if raw_name.endswith("_REALTIME") else raw_name
    table = tables.get(table_name)
    if table is None:
        raise QueryError(TABLE_DOES_NOT_EXIST, f"Unknown table: {raw_name}")

    tr = _Translator(table, now_ms)
    select_sql, names, types = [], [], []
    for item in tree.expressions:
        if isinstance(item, exp.Star):
            for col in sorted(table.columns, key=lambda c: c.name):
                if col.data_type == "BYTES":
                    raise unsupported(f"SELECT * on a table with the BYTES column {col.name!r}")
                select_sql.append(_q(col.name))
                names.append(col.name)
                types.append(col.data_type)
            continue
        node, alias = (item.this, item.alias) if isinstance(item, exp.Alias) else (item, None)
        name = alias or _default_name(node, table)
        if name is None:
            raise unsupported(
                f"naming the unaliased expression {node.sql()!r} as Pinot's broker does "
                "(add AS <name>)"
            )
        sql, t = tr.emit(node, "select")
        select_sql.append(f"{sql} AS {_q(name)}")
        names.append(name)
        types.append(t)
        tr.aliases[name] = t

    skip_upsert = _is_true(options.get("skipupsert"))
    physical = history_table(table.name) if (table.upsert and skip_upsert) else table.name
    distinct = "DISTINCT " if tree.args.get("distinct") else ""
    parts = [f"SELECT {distinct}{', '.join(select_sql)} FROM {_q(physical)}"]
    where = tree.args.get("where")
    if where is not None:
        parts.append("WHERE " + tr.emit(where.this, "where")[0])
    group = tree.args.get("group")
    if group is not None:
        if group.args.get("rollup") or group.args.get("cube") or group.args.get("grouping_sets"):
            raise unsupported("ROLLUP/CUBE/GROUPING SETS")
        parts.append("GROUP BY " + ", ".join(tr.emit(g, "group")[0] for g in group.expressions))
    having = tree.args.get("having")
    if having is not None:
        if group is None:
            raise QueryError(QUERY_VALIDATION_ERROR, "HAVING needs GROUP BY")
        parts.append("HAVING " + tr.emit(having.this, "having")[0])
    order = tree.args.get("order")
    if order is not None:
        keys = []
        for o in order.expressions:
            sql, _ = tr.emit(o.this, "order")
            keys.append(sql + (" DESC" if o.args.get("desc") else " ASC"))
        parts.append("ORDER BY " + ", ".join(keys))
    limit_node, offset_node = tree.args.get("limit"), tree.args.get("offset")
    limit = _int_literal(limit_node.expression, "LIMIT") if limit_node else None
    offset = _int_literal(offset_node.expression, "OFFSET") if offset_node else 0
    aggregate_only = tr.has_aggregate and group is None and not tree.args.get("distinct")
    if limit is None and not aggregate_only:
        limit = DEFAULT_LIMIT  # Pinot's default for selections, DISTINCT and group-bys
    if limit is not None:
        parts.append(f"LIMIT {limit}")
    if offset_node:  # even OFFSET 0, so a query's plan does not depend on its offset's value
        parts.append(f"OFFSET {offset}")
    return Plan(
        sql=" ".join(parts),
        table=table.name,
        column_names=names,
        column_types=types,
        options=options,
    )


def _int_literal(node: exp.Expression, what: str) -> int:
    if not isinstance(node, exp.Literal) or node.is_string or not node.this.isdigit():
        raise QueryError(SQL_PARSING_ERROR, f"{what} must be a non-negative integer literal")
    return int(node.this)


# ------------------------------------------------------------------ plans by query shape

#: Literals as written: a double-quoted name first (its content is not a literal), then a
#: string, then an unsigned number that is not part of a name (``orders_1h``) or of a
#: longer number; anything else (``1e5``, ``.5``) stays in the shape as written.
_LITERAL = re.compile(r"""("(?:[^"]|"")*")|('(?:[^']|'')*')|(?<![\w.$])(\d+(?:\.\d+)?)(?![\w.])""")
#: Stand-ins a shape is translated with, one per literal, of the same kind as the literal
#: (string, integer, decimal that does or does not end in a non-zero digit: the translator
#: treats those differently), and one for ``now``. They come out of the translator as written.
_SLOT = re.compile(r"'\ue000(\d+)\ue001'|(?<![\w.])(?:0\.)?9135791(\d{5})30?(?![\w.])")
_NOW = 9135792000000003
_NOW_SLOT = re.compile(rf"(?<![\w.]){_NOW}(?![\w.])")
_MAX_SHAPES = 2048


def _kind(literal: str) -> str:
    if literal.startswith("'"):
        return "s"
    if "." not in literal:
        return "i"
    return "f" if literal[-1] in "123456789" else "d"


def _stand_in(index: int, kind: str) -> str:
    if kind == "s":
        return f"'\ue000{index}\ue001'"
    digits = f"9135791{index:05d}3"
    return {"i": digits, "f": f"0.{digits}", "d": f"0.{digits}0"}[kind]


@dataclass(frozen=True)
class _Template:
    """A translated shape: text pieces between slots (a literal's index, or -1 for now)."""

    sql: list[str | int]
    names: list[list[str | int]]
    plan: Plan

    @staticmethod
    def of(plan: Plan) -> _Template | None:
        """None when a stand-in did not come out as written (it was used, not copied)."""
        pieces = [_pieces(plan.sql), *(_pieces(n) for n in plan.column_names)]
        if any(isinstance(p, str) and ("\ue000" in p or "9135791" in p or str(_NOW) in p)
               for piece in pieces for p in piece):  # fmt: skip
            return None
        return _Template(pieces[0], pieces[1:], plan)

    def fill(self, literals: list[str], now_ms: int) -> Plan:
        def text(pieces: list[str | int], name: bool) -> str:
            out = []
            for p in pieces:
                if isinstance(p, str):
                    out.append(p)
                elif p < 0:
                    out.append(str(now_ms))
                else:
                    value = literals[p]
                    if name and value.startswith("'"):  # a name shows the string unescaped
                        value = "'" + value[1:-1].replace("''", "'") + "'"
                    out.append(value)
            return "".join(out)

        return replace(
            self.plan,
            sql=text(self.sql, False),
            column_names=[text(n, True) for n in self.names],
            column_types=list(self.plan.column_types),
            options=dict(self.plan.options),
            prepared=self._prepared(literals, now_ms),
        )

    def _prepared(self, literals: list[str], now_ms: int) -> tuple[str, tuple[int, ...]] | None:
        """Integer literals compared with ``=`` become parameters (typed by the column they
        are compared with, so the result is the same); every other literal stays text."""
        out: list[str] = []
        params: list[int] = []
        for i, p in enumerate(self.sql):
            if isinstance(p, str):
                out.append(p)
            elif p < 0:
                out.append(str(now_ms))
            elif _kind(literals[p]) == "i" and i and str(self.sql[i - 1]).endswith("= "):
                params.append(int(literals[p]))
                out.append(f"${len(params)}")
            else:
                out.append(literals[p])
        return ("".join(out), tuple(params)) if params else None


def _pieces(text: str) -> list[str | int]:
    out: list[str | int] = []
    for i, part in enumerate(_NOW_SLOT.split(text)):
        if i:
            out.append(-1)
        last = 0
        for match in _SLOT.finditer(part):
            out.append(part[last : match.start()])
            out.append(int(match.group(1) or match.group(2)))
            last = match.end()
        out.append(part[last:])
    return [p for p in out if p != ""]


class Translator:
    """:func:`translate` that parses each query shape once.

    A shape is the query with its literals taken out (``... WHERE order_id = ? LIMIT ?``);
    its first query is translated with a stand-in for each literal, and later queries of
    the shape fill their literals into that translation. A literal whose value the
    translator uses rather than copies (``ago('PT1H')``, a percentile, a polygon) stays
    part of the shape. Each new template is checked against a direct translation; a shape
    that cannot be templated is translated every time.
    """

    def __init__(self, tables: dict[str, TableDef]) -> None:
        self.tables = tables
        self._shapes: dict[tuple, _Shape] = {}
        self._lock = threading.Lock()

    def translate(self, sql: str, query_options: str | None, now_ms: int) -> Plan:
        body, options = parse_options(sql, query_options)
        texts, literals = _split(body)
        kinds = tuple(_kind(lit) for lit in literals)
        key = (tuple(texts), kinds, tuple(sorted(options.items())))
        shape = self._shapes.get(key)
        if shape is None:
            translate(sql, query_options, self.tables, now_ms)  # a bad query fails here
            shape = _Shape(texts, kinds, ";".join(f"{k}={v}" for k, v in options.items()))
            shape.fixed = shape.find_fixed(literals, self.tables)
            with self._lock:
                if len(self._shapes) >= _MAX_SHAPES:
                    self._shapes.clear()
                self._shapes[key] = shape
        template = shape.template(literals, self.tables, sql, query_options, now_ms)
        if template is None:
            return translate(sql, query_options, self.tables, now_ms)
        return template.fill(literals, now_ms)


#: Templates kept per shape for distinct values of its fixed literals (polygons vary).
_MAX_TEMPLATES_PER_SHAPE = 32


@dataclass
class _Shape:
    """One query shape seen by :class:`Translator`: its text around the literals, which
    literals stay fixed, and its templates.
    """

    texts: list[str]
    kinds: tuple[str, ...]
    options: str
    #: Literals whose value decides the translation, kept as written.
    fixed: tuple[int, ...] = ()
    templates: dict[tuple[str, ...], _Template | None] = field(default_factory=dict)

    def probe(
        self, literals: list[str], fixed: set[int], tables: dict[str, TableDef]
    ) -> _Template | None:
        out = [self.texts[0]]
        for i, literal in enumerate(literals):
            out += [literal if i in fixed else _stand_in(i, self.kinds[i]), self.texts[i + 1]]
        try:
            return _Template.of(translate("".join(out), self.options, tables, _NOW))
        except QueryError:
            return None

    def find_fixed(self, literals: list[str], tables: dict[str, TableDef]) -> tuple[int, ...]:
        if self.probe(literals, set(), tables) is not None:
            return ()
        every = set(range(len(literals)))
        return tuple(i for i in every if self.probe(literals, every - {i}, tables) is None)

    def template(
        self, literals: list[str], tables: dict[str, TableDef], sql: str,
        query_options: str | None, now_ms: int,
    ) -> _Template | None:  # fmt: skip
        values = tuple(literals[i] for i in self.fixed)
        if values in self.templates:
            return self.templates[values]
        if len(self.templates) >= _MAX_TEMPLATES_PER_SHAPE:
            return None
        template = self.probe(literals, set(self.fixed), tables)
        if template is not None and template.fill(literals, now_ms) != translate(
            sql, query_options, tables, now_ms
        ):
            template = None
        self.templates[values] = template
        return template


def _split(body: str) -> tuple[list[str], list[str]]:
    """The text around the literals (one more piece than literals), and the literals."""
    texts, literals, last = [""], [], 0
    for match in _LITERAL.finditer(body):
        if match.group(1) is not None:
            continue  # a quoted name stays in the text
        texts[-1] += body[last : match.start()]
        literals.append(match.group(0))
        texts.append("")
        last = match.end()
    texts[-1] += body[last:]
    return texts, literals
