"""docs/record-format.md and the record schema (store/records.py SCHEMA)
cannot drift: the doc's field table is the one the schema generates, and
the doc's example record is a valid record whose fields are all in it."""
import copy
import json
import pathlib
import re

import pytest

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


def test_version_4_drops_exclusive_and_old_digests_stay():
    """Version 4 has no step.exclusive (the store decides sharing from time
    overlap). A version 1-3 record's flag is still checked and still counts
    in its digest, so that a copy ingested before migration 019 is still the
    same record; nothing of it is stored."""
    import recgen
    old = recgen.record()                     # version 1, "exclusive": true
    assert old["step"]["exclusive"] is True
    other = copy.deepcopy(old)
    other["step"]["exclusive"] = False
    p_old, p_other = records.parse_record(old), records.parse_record(other)
    assert "exclusive" not in records.STEP_COLUMNS
    assert p_old.step == p_other.step         # the same rows
    assert p_old.digest != p_other.digest     # but not the same copy
    gone = copy.deepcopy(old)                 # a version 3 record without the flag
    del gone["step"]["exclusive"]
    gone["version"] = 3
    v4 = copy.deepcopy(gone)
    v4["version"] = 4
    assert records.parse_record(v4).digest == records.parse_record(gone).digest
    assert records.parse_record(v4).step == records.parse_record(gone).step
    bad = copy.deepcopy(old)
    bad["step"]["exclusive"] = "yes"
    with pytest.raises(records.RecordError, match=r"step\.exclusive: expected true or false"):
        records.parse_record(bad)
    v4["step"]["exclusive"] = "yes"           # not a version 4 field: ignored
    assert records.parse_record(v4).step == records.parse_record(gone).step
