"""python -m joulestep.store: the field table of docs/record-format.md,
generated from the record schema (records.SCHEMA)."""
from .records import field_table

print(field_table(), end="")
