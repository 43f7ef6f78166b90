#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Validates capture reports against docs/report.schema.json (python3-jsonschema).

usage: check_reports.py SCHEMA REPORT.json...   (a directory argument: every *.report.json in it)
Exit 0 when every report is valid, 1 naming the first violation of each invalid one, 2 when no
report was found (a check that checks nothing must not pass).
"""
import json
import pathlib
import sys

import jsonschema


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    schema = json.loads(pathlib.Path(argv[1]).read_text())
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
