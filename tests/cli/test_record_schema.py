"""docs/record-format.md and the record schema (store/records.py SCHEMA)
cannot drift: the doc's field table is the one the schema generates, and
the doc's example record is a valid record whose fields are all in it."""
import json
import pathlib
import re

from joulestep import store
from joulestep.store import records

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "record-format.md"


def test_doc_field_table_is_the_schema():
    text = DOC.read_text()
    m = re.search(r"<!-- fields: [^\n]*-->\n(.*?)<!-- /fields -->", text, re.S)
    assert m, "docs/record-format.md lost its generated field table"
    assert m.group(1) == records.field_table(), \
        "regenerate it: python -m joulestep.store.records"


def test_every_schema_field_is_in_the_doc_example():
    """The example record shows every field ingest reads (so a field added
    to the schema is added to the example too), and it is valid."""
    ex = json.loads(re.search(r"```json\n(.*?)```", DOC.read_text(), re.S).group(1))
    store.parse_record(ex)
    seen = set()

    def walk(obj, path):
        if isinstance(obj, dict):
            for k, v in obj.items():
                p = f"{path}.{k}" if path else k
                seen.add(p)
                walk(v, p)
        elif isinstance(obj, list):
            for v in obj:
                walk(v, path + "[]")
    walk(ex, "")
    missing = {f.path for f in records.SCHEMA} - seen
    assert not missing, missing


def test_columns_follow_the_schema():
    """The stored columns come from the schema, once each."""
    assert records.STEP_COLUMNS[:3] == ("step_id", "het_component", "node_model")
    assert len(set(records.STEP_COLUMNS)) == len(records.STEP_COLUMNS)
    assert store.TABLES["steps"][3:-2] == records.STEP_COLUMNS
    assert store.TABLES["phases"][1:] == records.PHASE_COLUMNS
