"""What every table shares: the declarative base, timezone-aware UTC timestamps, enums
stored as strings."""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase


def utcnow() -> dt.datetime:
    """The current time, timezone-aware in UTC."""
    return dt.datetime.now(dt.UTC)


class UTCDateTime(sa.types.TypeDecorator[dt.datetime]):
    """A timestamp that is always timezone-aware UTC, on PostgreSQL and on SQLite alike."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(dt.UTC) if value is not None else None

    def process_result_value(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is not None and value.tzinfo is None:  # SQLite drops the zone
            return value.replace(tzinfo=dt.UTC)
        return value


def enum_column(enum_cls: type) -> sa.Enum:
    # Stored as plain strings (no native PostgreSQL enum), so both databases
    # share one migration and new values need no ALTER TYPE.
    return sa.Enum(
        enum_cls, native_enum=False, length=16, values_callable=lambda e: [m.value for m in e]
    )


class Base(DeclarativeBase):
    type_annotation_map = {dt.datetime: UTCDateTime, dict[str, Any]: sa.JSON}
