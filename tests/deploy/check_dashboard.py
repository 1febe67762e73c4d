#!/usr/bin/env python3
"""Checks that the Grafana dashboard (and the Prometheus rules) use only metrics that waav exports.

Reads the canonical metric list from engine/metrics/metric_names.h, every PromQL expression in
deploy/grafana/waav-dashboard.json (panel targets and template variables) and in the rule
files, and fails when:
  - an expression names a metric that is neither in metric_names.h (histograms also as
    _bucket/_sum/_count), a recording rule, nor a series Prometheus makes itself (up);
  - a selector uses a label the metric does not have;
  - a metric of metric_names.h appears in no dashboard panel;
  - the dashboard's panels are malformed (duplicate ids, missing refIds, outside the grid);
  - promtool, when installed, cannot parse an expression (each becomes a recording rule in a
    temporary file for `promtool check rules`).
Standard library only.  Usage: check_dashboard.py SOURCE_DIR
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Series Prometheus adds itself for every target, and the labels it attaches to all series.
BUILTIN_SERIES = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
TARGET_LABELS = {"job", "instance"}

AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
                "count_values", "bottomk", "topk", "quantile"}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
            "unless", "offset", "atan2", "inf", "nan", "Inf", "NaN"}
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}")
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*(\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*')")
TOKEN = re.compile(r"""(?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
                     |(?P<number>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?(?:ms|[smhdwy])?|\.\d+)
                     |(?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
                     |(?P<other>\S)""", re.VERBOSE)


def parse_header(path):
    """metric name -> (type, labels) from the MetricDef initialisers of metric_names.h."""
    text = open(path, encoding="utf-8").read()
    defs = {}
    for m in re.finditer(r"constexpr\s+MetricDef\s+\w+\s*=\s*\{(.*?)\n\};", text, re.S):
        body = m.group(1)
        name = re.search(r'\.name\s*=\s*"([^"]+)"', body)
        kind = re.search(r"\.type\s*=\s*MetricType::k(\w+)", body)
        labels = re.search(r"\.labels\s*=\s*\{([^}]*)\}", body)
        if not name or not kind or not labels:
            raise SystemExit(f"{path}: cannot read a MetricDef: {body.strip()[:120]}")
        defs[name.group(1)] = (kind.group(1).lower(), set(re.findall(r'"([^"]+)"', labels.group(1))))
    if not defs:
        raise SystemExit(f"{path}: no MetricDef found")
    return defs


def series_names(defs):
    """Every series name the daemon writes -> (family, labels)."""
    names = {}
    for name, (kind, labels) in defs.items():
        names[name] = (name, labels | TARGET_LABELS)
        if kind == "histogram":
            names[name + "_bucket"] = (name, labels | TARGET_LABELS | {"le"})
            names[name + "_sum"] = (name, labels | TARGET_LABELS)
            names[name + "_count"] = (name, labels | TARGET_LABELS)
    return names


def recorded_names(rule_files):
    names = set()
    for path in rule_files:
        for line in open(path, encoding="utf-8"):
            m = re.match(r"\s*-?\s*record:\s*['\"]?([a-zA-Z_:][a-zA-Z0-9_:]*)", line)
            if m:
                names.add(m.group(1))
    return names


def rule_expressions(path):
    """The expr of each rule, read without a YAML parser (plain scalars and | blocks)."""
    exprs = []
    lines = open(path, encoding="utf-8").read().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"(\s*)expr:\s*(.*)$", lines[i])
        i += 1
        if not m:
            continue
        indent, value = len(m.group(1)), m.group(2).strip()
        if value in ("|", ">", "|-", ">-"):
            block = []
            while i < len(lines) and (not lines[i].strip() or
                                      len(lines[i]) - len(lines[i].lstrip()) > indent):
                block.append(lines[i].strip())
                i += 1
            value = " ".join(block)
        exprs.append(value.strip("'\""))
    return exprs


def substitute_variables(expr):
    """Grafana variables to values that keep the PromQL valid."""
    expr = re.sub(r"\$__(rate_interval|interval|range)\b", "5m", expr)
    expr = re.sub(r"\$\{(\w+)(:\w+)?\}", "x", expr)
    return re.sub(r"\$(\w+)", "x", expr)


def metric_names_in(expr):
    """Metric names an expression selects (not functions, aggregations, keywords or labels)."""
    expr = GROUPING.sub(lambda m: m.group(1), expr)
    expr = re.sub(r"\{[^}]*\}", "", re.sub(r"\[[^\]]*\]", "", expr))
    tokens = [(m.lastgroup, m.group()) for m in TOKEN.finditer(expr)]
    names = []
    for i, (kind, text) in enumerate(tokens):
        if kind != "ident" or text in AGGREGATIONS or text in KEYWORDS:
            continue
        if i + 1 < len(tokens) and tokens[i + 1][1] == "(":
            continue  # a function call
        names.append(text)
    return names


def dashboard_expressions(dashboard, errors):
    """(where, expr) for every panel target and query variable; structural checks on the way."""
    exprs = []
    ids = set()

    def walk(panels):
        for p in panels:
            where = f"panel {p.get('id')} '{p.get('title', '')}'"
            if "id" not in p or p["id"] in ids:
                errors.append(f"{where}: missing or duplicate panel id")
            ids.add(p.get("id"))
            grid = p.get("gridPos", {})
            if not all(k in grid for k in "xywh") or grid["x"] + grid["w"] > 24:
                errors.append(f"{where}: gridPos missing or wider than the 24-column grid")
            refs = [t.get("refId") for t in p.get("targets", [])]
            if None in refs or len(set(refs)) != len(refs):
                errors.append(f"{where}: targets need distinct refIds")
            for t in p.get("targets", []):
                if not t.get("expr", "").strip():
                    errors.append(f"{where}: target {t.get('refId')} has no expr")
                else:
                    exprs.append((where, t["expr"]))
            walk(p.get("panels", []))

    walk(dashboard.get("panels", []))
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") != "query":
            continue
        query = var.get("query")
        query = query.get("query", "") if isinstance(query, dict) else (query or "")
        m = re.match(r"\s*label_values\((.*),\s*(\w+)\)\s*$", query)
        exprs.append((f"variable ${var.get('name')}", m.group(1) if m else query))
    return exprs


def check_promql(exprs, errors):
    promtool = shutil.which("promtool")
    if not promtool:
        print("promtool not found (Debian package 'prometheus'): PromQL syntax not checked")
        return
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        f.write("groups:\n  - name: dashboard\n    rules:\n")
        for n, (_, expr) in enumerate(exprs):
            f.write(f"      - record: dashboard:expr_{n}\n        expr: {json.dumps(expr)}\n")
        path = f.name
    try:
        result = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True)
    finally:
        os.unlink(path)
    if result.returncode != 0:
        output = result.stdout + result.stderr
        failing = sorted({int(n) for n in re.findall(r"dashboard:expr_(\d+)", output)})
        errors.append("promtool cannot parse:\n" + output.strip() + "".join(
            f"\n    expr_{n} ({exprs[n][0]}): {exprs[n][1]}" for n in failing))
    else:
        print(f"promtool parsed all {len(exprs)} expressions")


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    src = sys.argv[1]
    header = os.path.join(src, "engine/metrics/metric_names.h")
    dashboard_path = os.path.join(src, "deploy/grafana/waav-dashboard.json")
    rules_dir = os.path.join(src, "deploy/prometheus/rules")
    rule_files = sorted(os.path.join(rules_dir, f) for f in os.listdir(rules_dir)
                        if f.endswith((".yml", ".yaml")))
    defs = parse_header(header)
    known = series_names(defs)
    recorded = recorded_names(rule_files)
    try:
        dashboard = json.load(open(dashboard_path, encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SystemExit(f"{dashboard_path}: not readable JSON: {e}")

    errors = []
    dash_exprs = dashboard_expressions(dashboard, errors)
    rule_exprs = [(os.path.relpath(p, src), e) for p in rule_files for e in rule_expressions(p)]
    used_families = set()
    for where, raw in dash_exprs + rule_exprs:
        expr = substitute_variables(raw)
        for name in metric_names_in(expr):
            if name in known:
                if (where, raw) in dash_exprs:
                    used_families.add(known[name][0])
            elif name not in recorded and name not in BUILTIN_SERIES:
                errors.append(f"{where}: unknown metric '{name}' in: {raw}")
        for m in SELECTOR.finditer(expr):
            name, labels = m.group(1), {lm.group(1) for lm in MATCHER.finditer(m.group(2))}
            if name in known and not labels <= known[name][1]:
                errors.append(f"{where}: '{name}' has no label(s) {sorted(labels - known[name][1])}"
                              f" in: {raw}")
    for name in sorted(set(defs) - used_families):
        errors.append(f"metric '{name}' of metric_names.h is on no dashboard panel")

    check_promql([(w, substitute_variables(e)) for w, e in dash_exprs], errors)
    print(f"{len(defs)} metrics in metric_names.h, {len(dash_exprs)} dashboard expressions, "
          f"{len(rule_exprs)} rule expressions, {len(recorded)} recording rules")
    if errors:
        print("FAIL:\n  " + "\n  ".join(errors))
        return 1
    print("dashboard and rules use only known metrics: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
