"""THE trace schema: lookups, deliveries (and the simulator's keys per node), defined once.

Used by every writer and by Spark.

Each table is a tuple of `Field(name, kind)`. The pyarrow schema and the Spark schema are both
derived from it, so the simulator's Parquet and the live processes' JSON Lines cannot drift apart.
Ids may exceed int64 (64- and 128-bit rings), so the kind "id" is a decimal string.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SOURCES = ("sim", "live", "mininet")
MODES = ("direct", "relay")


@dataclass(frozen=True)
class Field:
    name: str
    kind: str  # "string" | "id" | "int" | "float" | "bool"
    nullable: bool = False


LOOKUPS: tuple[Field, ...] = (
    Field("run", "string"),
    Field("source", "string"),
    Field("nodes", "int", nullable=True),
    Field("key_id", "id"),
    Field("origin", "id"),
    Field("owner", "id", nullable=True),
    Field("hops", "int"),
    Field("timeouts", "int"),
    Field("latency_ms", "float", nullable=True),
    Field("ok", "bool"),
    Field("ts", "float"),
)

DELIVERIES: tuple[Field, ...] = (
    Field("run", "string"),
    Field("source", "string"),
    Field("mode", "string"),
    Field("topic", "string"),
    Field("publisher", "string"),
    Field("subscriber", "string"),
    Field("seq", "int"),
    Field("sent_ns", "int"),
    Field("recv_ns", "int"),
    Field("latency_ms", "float"),
    Field("recovered", "bool"),
    Field("first_owed", "int", nullable=True),  # the publisher's first seq this subscriber is owed (accounting)
)

LOAD: tuple[Field, ...] = (  # keys per real node, from `chordpub sim load --out` (SIGCOMM'01 Figs. 8-9)
    Field("run", "string"),
    Field("source", "string"),
    Field("node", "int"),
    Field("virtual", "int"),
    Field("keys", "int"),
)

TABLES: dict[str, tuple[Field, ...]] = {"lookups": LOOKUPS, "deliveries": DELIVERIES, "load": LOAD}


class SchemaError(ValueError):
    """A row that does not fit its table; never written, always reported."""


def _coerce(field: Field, value: Any) -> Any:
    if value is None:
        if field.nullable:
            return None
        raise SchemaError(f"{field.name} may not be null")
    kind = field.kind
    if kind == "id":
        if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).isdigit():
            raise SchemaError(f"{field.name} must be a non-negative integer id, got {value!r}")
        return str(int(value))
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise SchemaError(f"{field.name} must be an integer, got {value!r}")
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SchemaError(f"{field.name} must be a number, got {value!r}")
        return float(value)
    if kind == "bool":
        if not isinstance(value, bool):
            raise SchemaError(f"{field.name} must be a boolean, got {value!r}")
        return value
    if not isinstance(value, str):
        raise SchemaError(f"{field.name} must be a string, got {value!r}")
    return value


def normalize(table: str, row: dict) -> dict:
    """The row in the table's field order with checked, canonical values; SchemaError if it does not fit."""
    fields = TABLES[table]
    extra = set(row) - {f.name for f in fields}
    if extra:
        raise SchemaError(f"unknown {table} fields: {sorted(extra)}")
    out = {f.name: _coerce(f, row.get(f.name)) for f in fields}
    if out["source"] not in SOURCES:
        raise SchemaError(f"source must be one of {SOURCES}, got {out['source']!r}")
    if table == "deliveries" and out["mode"] not in MODES:
        raise SchemaError(f"mode must be one of {MODES}, got {out['mode']!r}")
    return out


def arrow_schema(table: str):  # -> pyarrow.Schema (imported lazily: live nodes never need it)
    import pyarrow as pa

    types = {"string": pa.string(), "id": pa.string(), "int": pa.int64(), "float": pa.float64(),
             "bool": pa.bool_()}
    return pa.schema([pa.field(f.name, types[f.kind], nullable=f.nullable) for f in TABLES[table]])


def spark_schema(table: str):  # -> pyspark.sql.types.StructType
    from pyspark.sql import types as T

    types = {"string": T.StringType(), "id": T.StringType(), "int": T.LongType(),
             "float": T.DoubleType(), "bool": T.BooleanType()}
    return T.StructType([T.StructField(f.name, types[f.kind], f.nullable) for f in TABLES[table]])
