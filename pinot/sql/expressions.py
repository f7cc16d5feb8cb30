"""Expression by expression, Pinot SQL into DuckDB SQL with Pinot's result types
(:class:`_Translator`).
"""

from __future__ import annotations

import re

import shapely
from sqlglot import exp

from pinot.definitions import TableDef
from pinot.sql.errors import QUERY_EXECUTION_ERROR, QUERY_VALIDATION_ERROR, QueryError, unsupported
from pinot.sql.options import duration_ms, joda_to_strftime

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
        if isinstance(node, exp.Case) and node.this is None:  # CASE WHEN c THEN v ... END
            parts, kinds = [], []
            for branch in node.args.get("ifs") or []:
                cond, _ = self.emit(branch.this, ctx, in_agg)
                value, kind = self.emit(branch.args["true"], ctx, in_agg)
                parts.append(f"WHEN {cond} THEN {value}")
                kinds.append(kind)
            default = node.args.get("default")
            if default is not None:
                value, kind = self.emit(default, ctx, in_agg)
                parts.append(f"ELSE {value}")
                kinds.append(kind)
            # Pinot's result type: DOUBLE when any branch is, else the first branch's
            kind = "DOUBLE" if "DOUBLE" in kinds else kinds[0]
            return f"(CASE {' '.join(parts)} END)", kind
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
