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

from pinot.sql.errors import QUERY_EXECUTION_ERROR, QueryError
from pinot.sql.options import duration_ms, joda_to_strftime
from pinot.sql.plans import Translator
from pinot.sql.statement import translate

__all__ = [
    "QUERY_EXECUTION_ERROR",
    "QueryError",
    "Translator",
    "duration_ms",
    "joda_to_strftime",
    "translate",
]
