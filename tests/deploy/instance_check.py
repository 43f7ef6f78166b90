#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Fails on any PromQL aggregation or join, in the Prometheus rules or the Grafana dashboard, that
drops the scrape's `job` or `instance`: one daemon runs per host, every host may watch the same
`target` (127.0.0.1:6379), and a series without its instance merges with every other host's.

usage: instance_check.py RULES.yml DASHBOARD.json
An aggregation (sum, max, min, avg, count, group, stddev, stdvar, topk, bottomk, quantile,
count_values) must carry `by (...)` naming both labels, or `without (...)` naming neither; one with
neither clause fails. A join's `on (...)` must name both; `ignoring (...)` must name neither.
Prints one line per offending expression; exits 1 when there is one, 2 on unreadable input."""
import json
import re
import sys

import yaml

KEPT = ("job", "instance")
AGGREGATORS = "sum|max|min|avg|count|group|stddev|stdvar|topk|bottomk|quantile|count_values"
AGG_RE = re.compile(r"(?<![\w:])(%s)(?![\w:])" % AGGREGATORS, re.I)
JOIN_RE = re.compile(r"(?<![\w:])(on|ignoring)\s*\(([^)]*)\)", re.I)
CLAUSE_RE = re.compile(r"\s*(by|without)\s*\(([^)]*)\)", re.I)
STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')


def labels(text):
    return {l.strip() for l in text.split(",") if l.strip()}


def matching_paren(s, i):
    """Index of the parenthesis closing the one at s[i], or -1."""
    depth = 0
    for j in range(i, len(s)):
        if s[j] == "(":
            depth += 1
        elif s[j] == ")":
            depth -= 1
            if depth == 0:
                return j
    return -1


def clause_problem(op, kind, names):
    kind = kind.lower()  # PromQL keywords are case-insensitive
    if kind == "by" and not all(k in names for k in KEPT):
        return f"{op} by ({', '.join(sorted(names))}) drops " + " and ".join(k for k in KEPT if k not in names)
    if kind == "without" and any(k in names for k in KEPT):
        return f"{op} without ({', '.join(sorted(names))}) drops " + " and ".join(k for k in KEPT if k in names)
    return None


def problems(expr):
    """What in one PromQL expression drops job or instance (strings and comments removed first)."""
    s = STRING_RE.sub('""', expr)
    s = re.sub(r"#[^\n]*", "", s)
    out = []
    for m in AGG_RE.finditer(s):
        op, rest = m.group(1), m.end()
        pre = CLAUSE_RE.match(s, rest)
        if pre:
            p = clause_problem(op, pre.group(1), labels(pre.group(2)))
            if p:
                out.append(p)
            continue
        open_at = rest + len(s[rest:]) - len(s[rest:].lstrip())
        if open_at >= len(s) or s[open_at] != "(":
            continue  # a label name such as `by (count)`, not an aggregation
        close = matching_paren(s, open_at)
        post = CLAUSE_RE.match(s, close + 1) if close >= 0 else None
        if post:
            p = clause_problem(op, post.group(1), labels(post.group(2)))
            if p:
                out.append(p)
        else:
            out.append(f"{op}(...) with neither by nor without drops job and instance")
    for m in JOIN_RE.finditer(s):
        names = labels(m.group(2))
        if m.group(1).lower() == "on" and not all(k in names for k in KEPT):
            out.append(f"on ({', '.join(sorted(names))}) joins hosts: it lacks " +
                       " and ".join(k for k in KEPT if k not in names))
        if m.group(1).lower() == "ignoring" and any(k in names for k in KEPT):
            out.append(f"ignoring ({', '.join(sorted(names))}) joins hosts")
    return out


def rule_exprs(path):
    doc = yaml.safe_load(open(path))
    for g in doc.get("groups", []):
        for r in g.get("rules", []):
            yield f"{path}: {r.get('record') or r.get('alert')}", str(r.get("expr", ""))


def dashboard_exprs(path):
    d = json.load(open(path))

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                if t.get("expr"):
                    yield f"{path}: panel {p.get('title')!r} {t.get('refId')}", t["expr"]
            yield from walk(p.get("panels", []))

    yield from walk(d.get("panels", []))
    for a in d.get("annotations", {}).get("list", []):
        if a.get("expr"):
            yield f"{path}: annotation {a.get('name')!r}", a["expr"]
    for v in d.get("templating", {}).get("list", []):
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        if v.get("type") == "query" and isinstance(q, str):
            yield f"{path}: variable {v.get('name')!r}", q


def main():
    if len(sys.argv) != 3:
        print("usage: instance_check.py RULES.yml DASHBOARD.json", file=sys.stderr)
        return 2
    try:
        exprs = list(rule_exprs(sys.argv[1])) + list(dashboard_exprs(sys.argv[2]))
    except (OSError, ValueError, yaml.YAMLError) as e:
        print(f"cannot read the rules or the dashboard: {e}", file=sys.stderr)
        return 2
    bad = 0
    for where, expr in exprs:
        for p in problems(expr):
            bad += 1
            print(f"{where}: {p}")
    print(f"{len(exprs)} expressions checked, {bad} drop job or instance")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
