#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Every alert of the rules is one a pager can live with: a `for:`, a severity (critical, warning or
info), a summary naming the host (and the Redis, where its series has one), a description, and a
runbook_url to a section of docs/guide/runbooks.md; and the promtool tests have a case where it fires and
one where it does not.

usage: alerts_check.py RULES.yml RULES_TEST.yml RUNBOOKS.md
Prints one line per problem; exits 1 when there is one, 2 on unreadable input."""
import re
import sys

import yaml

SEVERITIES = {"critical", "warning", "info"}
# Alerts on host-wide series (the daemon itself, its ring buffer, its probes): no `target` label.
HOST_WIDE = {"ThptraceDaemonDown", "ThptraceDaemonAbsent", "ThptraceEventsDropped", "ThptraceProbeUnavailable"}
# absent() has no instance either: it fires when no daemon is left to name.
NO_INSTANCE = {"ThptraceDaemonAbsent"}


def anchors(markdown):
    """GitHub's anchors of the `## ` headings: lower case, punctuation dropped, spaces to dashes."""
    out = set()
    for line in markdown.splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            out.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return out


def alert_problems(rule, sections):
    name, ann, out = rule["alert"], rule.get("annotations", {}), []
    if "for" not in rule:
        out.append("no for:")
    if rule.get("labels", {}).get("severity") not in SEVERITIES:
        out.append(f"severity {rule.get('labels', {}).get('severity')!r} is not one of {sorted(SEVERITIES)}")
    summary = ann.get("summary", "")
    if name not in NO_INSTANCE and "$labels.instance" not in summary:
        out.append("summary does not name {{ $labels.instance }}")
    if name not in HOST_WIDE and "$labels.target" not in summary:
        out.append("summary does not name {{ $labels.target }}")
    if not ann.get("description"):
        out.append("no description")
    url = ann.get("runbook_url", "")
    m = re.fullmatch(r"docs/guide/runbooks\.md#([\w-]+)", url)
    if not m:
        out.append(f"runbook_url {url!r} is not docs/guide/runbooks.md#ANCHOR")
    elif m.group(1) not in sections:
        out.append(f"runbook_url {url!r}: docs/guide/runbooks.md has no such section")
    elif m.group(1) != name.lower():
        out.append(f"runbook_url {url!r} is not the alert's own section #{name.lower()}")
    return out


def main():
    if len(sys.argv) != 4:
        print("usage: alerts_check.py RULES.yml RULES_TEST.yml RUNBOOKS.md", file=sys.stderr)
        return 2
    try:
        rules = yaml.safe_load(open(sys.argv[1]))
        tests = yaml.safe_load(open(sys.argv[2]))
        sections = anchors(open(sys.argv[3]).read())
    except (OSError, yaml.YAMLError) as e:
        print(f"cannot read the input: {e}", file=sys.stderr)
        return 2
    alerts = [r for g in rules.get("groups", []) for r in g.get("rules", []) if "alert" in r]
    fires, quiet = set(), set()
    for t in tests.get("tests", []):
        for a in t.get("alert_rule_test", []) or []:
            (fires if a.get("exp_alerts") else quiet).add(a.get("alertname"))
    bad = []
    for r in alerts:
        for p in alert_problems(r, sections):
            bad.append(f"{r['alert']}: {p}")
        if r["alert"] not in fires:
            bad.append(f"{r['alert']}: no promtool test where it fires")
        if r["alert"] not in quiet:
            bad.append(f"{r['alert']}: no promtool test where it does not fire")
    print("\n".join(bad + [f"{len(alerts)} alerts checked, {len(bad)} problems"]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
