"""One query into a :class:`Plan`: the statement's clauses, Pinot's default column names
and LIMIT, and the checks Pinot makes before running it.
"""

from __future__ import annotations

import re
from typing import Any

import sqlglot
from sqlglot import exp

from pinot.definitions import TableDef
from pinot.sql.errors import (
    DEFAULT_LIMIT,
    QUERY_VALIDATION_ERROR,
    SQL_PARSING_ERROR,
    TABLE_DOES_NOT_EXIST,
    Plan,
    QueryError,
    unsupported,
)
from pinot.sql.expressions import _PERCENTILE_FAMILY, _q, _Translator
from pinot.sql.options import _is_true, parse_options
from pinot.store import history_table

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
