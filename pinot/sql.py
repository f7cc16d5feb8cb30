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
* arithmetic is DOUBLE, as in Pinot's transform functions;
* ``ST_Contains(ST_GeogFromText('<wkt>'), <point column>)`` and
  ``ST_Within(<point column>, ST_GeogFromText('<wkt>'))`` (the forms Pinot's H3 index
  serves), and ``ST_Contains(ST_GeomFromText('<wkt>'), toGeometry(<point column>))``
  (no index), are a planar point-in-polygon test (shapely), as Pinot's ``stContains``
  is on geography too; mixing geography and geometry is an error, as in Pinot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

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

_AGGREGATES = {"count", "sum", "min", "max", "avg", "distinctcount", "percentile"}
_PERCENTILE_N = re.compile(r"^percentile(\d+(?:\.\d+)?)$")
_COMPARISONS = {
    exp.EQ: "=",
    exp.NEQ: "<>",
    exp.GT: ">",
    exp.GTE: ">=",
    exp.LT: "<",
    exp.LTE: "<=",
}
_ARITHMETIC = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/"}


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


class _Translator:
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
        if name == "distinctcount":
            if len(args) != 1:
                raise QueryError(QUERY_VALIDATION_ERROR, "DISTINCTCOUNT takes one argument")
            sql, _ = self.emit(args[0], ctx, True)
            return f"CAST(COUNT(DISTINCT {sql}){flt} AS INTEGER)", "INT"
        match = _PERCENTILE_N.match(name)
        if match:
            if len(args) != 1:
                raise QueryError(QUERY_VALIDATION_ERROR, f"{name} takes one argument")
            pct = match.group(1)
        else:
            if name != "percentile" or len(args) != 2:
                raise QueryError(QUERY_VALIDATION_ERROR, "PERCENTILE takes (expression, pct)")
            if not isinstance(args[1], exp.Literal) or args[1].is_string:
                raise QueryError(QUERY_VALIDATION_ERROR, "PERCENTILE's pct must be a number")
            pct = args[1].this
        if not 0 <= float(pct) <= 100:
            raise QueryError(QUERY_EXECUTION_ERROR, f"percentile {pct} is outside [0, 100]")
        sql, _ = self.emit(args[0], ctx, True)
        return f"pinot_percentile(LIST(CAST({sql} AS DOUBLE)){flt}, {pct})", "DOUBLE"

    def _function(self, node: exp.Anonymous, name: str, ctx: str, in_agg: bool) -> tuple[str, str]:
        args = list(node.expressions)
        if name == "now":
            if args:
                raise QueryError(QUERY_VALIDATION_ERROR, "now() takes no arguments")
            return str(self.now_ms), "LONG"
        if name == "ago":
            if len(args) != 1 or not isinstance(args[0], exp.Literal) or not args[0].is_string:
                raise QueryError(QUERY_VALIDATION_ERROR, "ago() takes one duration literal")
            return str(self.now_ms - duration_ms(args[0].this)), "LONG"
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


def _default_name(node: exp.Expression) -> str | None:
    """Pinot's result column name for an unaliased expression (simple cases only)."""
    if isinstance(node, exp.Column):
        return node.name
    if isinstance(node, exp.Count) and isinstance(node.this, exp.Star):
        return "count(*)"
    if isinstance(node, (exp.Count, exp.Sum, exp.Min, exp.Max, exp.Avg)) and isinstance(
        node.this, exp.Column
    ):
        return f"{node.key.lower()}({node.this.name})"
    if (
        isinstance(node, exp.Anonymous)
        and node.name.lower() == "distinctcount"
        and len(node.expressions) == 1
        and isinstance(node.expressions[0], exp.Column)
    ):
        return f"distinctcount({node.expressions[0].name})"
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
        name = alias or _default_name(node)
        if name is None:
            raise unsupported(f"an unaliased expression {node.sql()!r} (add AS <name>)")
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
    if offset:
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
