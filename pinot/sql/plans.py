"""Plans by query shape: :class:`Translator` parses each shape once and fills later
queries' literals into its template.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field, replace

from pinot.definitions import TableDef
from pinot.sql.errors import Plan, QueryError
from pinot.sql.options import parse_options
from pinot.sql.statement import translate

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
