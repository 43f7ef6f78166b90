#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Validates capture reports against docs/reference/report.schema.json (python3-jsonschema).

usage: check_reports.py [--strict] SCHEMA REPORT.json...   (a directory: every *.report.json in it)
Exit 0 when every report is valid, 1 naming the first violation of each invalid one, 2 when no
report was found (a check that checks nothing must not pass).

The published schema allows keys it does not name (a reader of an older version reads a newer
report). --strict, for this project's own reports, does not: every object the schema describes must
hold only the keys it names, so a key written by mistake, or left out of the schema, fails.
"""
import json
import pathlib
import sys

import jsonschema


def strict(schema):
    """The schema with additionalProperties false on every object that names its properties."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(x) for x in schema]
    return schema


def main(argv):
    strict_mode = len(argv) > 1 and argv[1] == "--strict"
    if strict_mode:
        argv = argv[:1] + argv[2:]
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    schema = json.loads(pathlib.Path(argv[1]).read_text())
    if strict_mode:
        schema = strict(schema)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    reports = []
    for arg in argv[2:]:
        p = pathlib.Path(arg)
        reports += sorted(p.glob("*.report.json")) if p.is_dir() else [p]
    if not reports:
        print("check_reports: no report to check", file=sys.stderr)
        return 2
    bad = 0
    for path in reports:
        errors = sorted(validator.iter_errors(json.loads(path.read_text())), key=lambda e: list(e.path))
        if errors:
            bad += 1
            e = errors[0]
            print(f"{path}: {'/'.join(map(str, e.path)) or '(top)'}: {e.message}", file=sys.stderr)
        else:
            print(f"{path}: valid")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
