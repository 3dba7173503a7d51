"""Many rows of one table inserted in one statement on PostgreSQL: the rows a scheduling
pass stores for the gangs it places (a replica each, an event per job).

`session.execute(sa.insert(table), rows)` is an executemany: psycopg runs the INSERT
once per row (pipelined), and its work per row cost a pass placing 500 gangs ~25 ms of
its CPU for 1,250 replicas. Here the rows travel as one JSON document that PostgreSQL
reads as a record set (psycopg's dump of a list, an array parameter per column, costs
more than the executemany): one statement, each value processed as SQLAlchemy would
bind it (the columns' types: enums, UTC timestamps, JSON), the columns a row leaves
out given their Python-side defaults as SQLAlchemy gives them.
tests/services/test_bulk_rows.py checks the rows stored are those the executemany
stores. Elsewhere (SQLite, in-process), and for a value with no exact JSON form, the
executemany.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Sequence
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session


def insert_rows(session: Session, table: sa.Table, rows: Sequence[dict[str, Any]]) -> None:
    """INSERT `rows` (dicts naming the same columns) into `table`, in their order."""
    if not rows:
        return
    dialect = session.get_bind().dialect
    defaults = _defaults(table, rows[0])
    document = None
    if dialect.name == "postgresql" and defaults is not None:
        names = [*rows[0], *defaults]
        document = _document(table, names, rows, defaults, dialect)
    if document is None:
        session.execute(sa.insert(table), rows)
        return
    quote = dialect.identifier_preparer.quote
    columns = [table.c[name] for name in names]
    # A JSON column's value travels as its JSON text (a Python None as JSON's null, as
    # SQLAlchemy stores it), cast back here; the others in their column's own type.
    shapes = ", ".join(
        f"{quote(c.name)} {'TEXT' if _is_json(c) else c.type.compile(dialect)}" for c in columns
    )
    values = ", ".join(
        f"CAST(v.{quote(c.name)} AS JSON)" if _is_json(c) else f"v.{quote(c.name)}" for c in columns
    )
    listed = ", ".join(quote(name) for name in names)
    session.execute(
        sa.text(
            f"INSERT INTO {dialect.identifier_preparer.format_table(table)} "
            f"({listed}) "
            # In the rows' order, as the executemany numbers them (their ids).
            f"SELECT {values} FROM ROWS FROM (json_to_recordset(CAST(:rows AS JSON)) "
            f"AS ({shapes})) WITH ORDINALITY AS v({listed}, n) ORDER BY n"
        ),
        {"rows": document},
    )


def _document(
    table: sa.Table,
    names: list[str],
    rows: Sequence[dict[str, Any]],
    defaults: dict[str, Any],
    dialect: sa.Dialect,
) -> str | None:
    """The rows as one JSON array of objects, each value as SQLAlchemy would bind it;
    None if a value has no exact JSON form (the executemany takes those rows)."""
    columns = []  # column by column: a third of the time of a loop over each value
    for name in names:
        if name in defaults:
            default = defaults[name]
            values = [default() for _ in rows] if callable(default) else [default] * len(rows)
        else:
            values = [row[name] for row in rows]
        # One object in every row (a pass's `now`): bound once.
        same = all(value is values[0] for value in values)
        bound = _bound(table.c[name], values[:1] if same else values, dialect)
        if bound is None:
            return None
        columns.append(bound * len(rows) if same else bound)
    return json.dumps(
        [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]
    )


def _bound(column: sa.Column[Any], values: list[Any], dialect: sa.Dialect) -> list[Any] | None:
    """`values` of `column` as SQLAlchemy would bind them, in JSON's terms; None if one
    has no exact JSON form."""
    process = _processor(column, dialect)
    if process is not None:
        values = [process(value) for value in values]
    kinds = {type(value) for value in values}
    if any(issubclass(kind, dt.datetime) for kind in kinds):
        # With its offset: exact for timestamptz.
        return [value.isoformat() if value is not None else None for value in values]
    return values if kinds <= {str, int, type(None)} else None


def _defaults(table: sa.Table, row: dict[str, Any]) -> dict[str, Any] | None:
    """The Python-side default of each column `row` leaves out (a value, or a function
    of no argument to call for each row); None if one is of a kind not handled here."""
    defaults: dict[str, Any] = {}
    for column in table.columns:
        default = column.default
        if column.name in row or default is None:
            continue
        if not isinstance(default, sa.ColumnDefault):
            return None  # a sequence or a SQL expression: the executemany takes them
        if default.is_scalar:
            defaults[column.name] = default.arg
        elif default.is_callable:
            arg = default.arg
            defaults[column.name] = lambda arg=arg: arg(None)  # SQLAlchemy's (context)
        else:
            return None
    return defaults


def _is_json(column: sa.Column[Any]) -> bool:
    return isinstance(column.type, sa.JSON)


def _processor(column: sa.Column[Any], dialect: sa.Dialect) -> Callable[[Any], Any] | None:
    """What SQLAlchemy does to a value of `column` before the driver gets it; for JSON,
    the text it serialises (the driver's JSON wrapper left out: the value is sent as
    text)."""
    if _is_json(column):
        none_as_null = cast(sa.JSON, column.type).none_as_null
        return lambda value: None if value is None and none_as_null else json.dumps(value)
    return column.type.dialect_impl(dialect).bind_processor(dialect)
