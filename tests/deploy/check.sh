#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Static checks of the deployment assets: Prometheus rules and their unit tests, the scrape config,
# the systemd unit (verify + sandbox exposure), the Grafana dashboard and the Kubernetes manifests.
# Prints one line per check and ends with `N passed, M failed`; exits 1 when any check failed.
# Needs: promtool (Debian `prometheus`), systemd-analyze (`systemd`), /usr/bin/python3 with yaml
# (`python3-yaml`) — all installed by scripts/install-deps.sh.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
unit="$root/deploy/systemd/thptrace.service"
rules="$root/deploy/prometheus/thptrace.rules.yml"
rules_test="$root/deploy/prometheus/tests/thptrace.rules.test.yml"
prom_config="$root/deploy/prometheus/prometheus.yml"
dashboard="$root/dashboards/thptrace.json"
daemonset="$root/deploy/kubernetes/base/daemonset.yaml"
servicemonitor="$root/deploy/kubernetes/servicemonitor.yaml"
networkpolicy="$root/deploy/kubernetes/base/networkpolicy.yaml"
max_exposure="2.5"
# Debian's python3: the one on PATH may be a pyenv build without the yaml module.
py=/usr/bin/python3

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

passed=0
failed=0

# check NAME COMMAND...: runs COMMAND with its output captured; prints PASS, or FAIL and the output.
check() {
  local name="$1"
  shift
  if "$@" >"$tmp/out" 2>&1; then
    passed=$((passed + 1))
    printf 'PASS %s\n' "$name"
  else
    failed=$((failed + 1))
    printf 'FAIL %s\n' "$name"
    sed 's/^/     /' "$tmp/out" | tail -n 40
  fi
}

need() {
  command -v "$1" >/dev/null 2>&1 || { echo "$1 not found: run scripts/install-deps.sh as root"; return 1; }
}

# --- Prometheus ---------------------------------------------------------------------------------
prom() { need promtool && promtool "$@"; }
check "promtool check rules deploy/prometheus/thptrace.rules.yml" prom check rules "$rules"
check "promtool test rules deploy/prometheus/tests/thptrace.rules.test.yml" prom test rules "$rules_test"
check "promtool check config deploy/prometheus/prometheus.yml" prom check config "$prom_config"
# Each alert: for:, severity, a summary naming instance and target, a runbook section, tests both ways.
check "alerts: for, severity, summary, runbook_url into docs/guide/runbooks.md, tested firing and not" \
  "$py" "$root/tests/deploy/alerts_check.py" "$rules" "$rules_test" "$root/docs/guide/runbooks.md"

# --- systemd ------------------------------------------------------------------------------------
# `verify` also checks that ExecStart's binary exists. Until thptrace is installed, verify a copy
# whose ExecStart runs /bin/true with the same arguments; everything else is the real unit.
verify_unit() {
  need systemd-analyze || return 1
  local u="$unit"
  if [ ! -x /usr/bin/thptrace ]; then
    mkdir -p "$tmp/unit"
    u="$tmp/unit/thptrace.service"
    sed 's#^ExecStart=/usr/bin/thptrace #ExecStart=/bin/true #' "$unit" >"$u"
    grep -q '^ExecStart=/bin/true daemon --config /etc/thptrace/thptrace.conf$' "$u" ||
      { echo "ExecStart is not '/usr/bin/thptrace daemon --config /etc/thptrace/thptrace.conf'"; return 1; }
  fi
  # systemd-analyze verify exits 0 on some warnings: treat any output as a failure.
  local out
  out="$(systemd-analyze verify "$u" 2>&1)" || { echo "$out"; return 1; }
  [ -z "$out" ] || { echo "$out"; return 1; }
}
check "systemd-analyze verify deploy/systemd/thptrace.service" verify_unit

# The level is read once, so that the check's own line can show it.
exposure_level() {
  systemd-analyze security --offline=yes "$unit" 2>&1 |
    sed -nE 's/.*Overall exposure level for [^:]*: ([0-9]+\.[0-9]+).*/\1/p'
}
level="$(command -v systemd-analyze >/dev/null && exposure_level)"
exposure_ok() {
  need systemd-analyze || return 1
  [ -n "$level" ] || { echo "no 'Overall exposure level' line from systemd-analyze security"; return 1; }
  awk -v l="$level" -v m="$max_exposure" 'BEGIN { exit !(l + 0 <= m + 0) }' ||
    { echo "exposure $level is above $max_exposure"; return 1; }
}
check "systemd-analyze security --offline=yes: exposure ${level:-unknown} <= $max_exposure" exposure_ok

unit_fields() {
  local f
  for f in '^CapabilityBoundingSet=CAP_BPF CAP_PERFMON CAP_SYS_PTRACE CAP_DAC_READ_SEARCH$' \
    '^NoNewPrivileges=yes$' '^ProtectSystem=strict$' '^ProtectHome=yes$' '^PrivateTmp=yes$' \
    '^ProtectProc=default$' '^SystemCallFilter=@system-service bpf perf_event_open$' \
    '^RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6$' \
    '^ExecStart=/usr/bin/thptrace daemon --config /etc/thptrace/thptrace.conf$'; do
    grep -Eq "$f" "$unit" || { echo "missing: $f"; return 1; }
  done
}
check "systemd unit keeps its capabilities and sandbox settings" unit_fields

# --- example config -----------------------------------------------------------------------------
config_ok() {
  local c="$root/deploy/thptrace.conf" f
  for f in '^listen = 127\.0\.0\.1:9966$' '^redis = 127\.0\.0\.1:6379$' \
    '^#redis-password-file = /etc/thptrace/redis\.password$' '^discover = false$' \
    '^poll-interval-ms = 100$'; do
    grep -Eq "$f" "$c" || { echo "deploy/thptrace.conf lacks: $f"; return 1; }
  done
}
check "deploy/thptrace.conf has every documented key" config_ok

# --- metrics contract ---------------------------------------------------------------------------
# Every thptrace_* name used by the rules and the dashboard is a metric of the contract: a row of the
# tables of docs/reference/metrics.md (a histogram with its series suffixes), which a unit test
# (MetricsTargets.EveryFamilyIsDocumentedWithItsType) holds to what the daemon exports. So nothing here
# depends on a series the daemon does not export.
contract_ok() {
  "$py" - "$root/docs/reference/metrics.md" "$rules" "$dashboard" <<'EOF'
import re, sys
known = set()
for name, kind in re.findall(r"^\| `(thptrace_\w+)` \| (\w+) \|", open(sys.argv[1]).read(), re.M):
    known |= {name + s for s in ("_bucket", "_sum", "_count")} if kind == "histogram" else {name}
if len(known) < 30:
    print(f"only {len(known)} metrics read from {sys.argv[1]}: is its table format changed?")
    sys.exit(1)
bad = []
for path in sys.argv[2:]:
    text = open(path).read()
    # Names after a recording-rule colon (target:thptrace_x:rate1m) are rule outputs, not inputs.
    for m in re.finditer(r"(?<![:\w])thptrace_\w+", text):
        if m.group(0) not in known:
            bad.append(f"{path}: {m.group(0)}")
if bad:
    print("not in the metrics contract:\n" + "\n".join(sorted(set(bad))))
    sys.exit(1)
EOF
}
check "rules and dashboard use only metrics of the contract" contract_ok

# --- Grafana dashboard --------------------------------------------------------------------------
check "dashboards/thptrace.json is valid JSON" "$py" -m json.tool "$dashboard"

dashboard_ok() {
  "$py" - "$dashboard" "$tmp/dashboard.rules.yml" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
errors = []
if not isinstance(d.get("schemaVersion"), int) or d["schemaVersion"] < 36:
    errors.append(f"schemaVersion {d.get('schemaVersion')} is not current (>= 36)")
variables = {v.get("name"): v for v in d.get("templating", {}).get("list", [])}
ds = variables.get("datasource")
if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
    errors.append("no `datasource` variable of type datasource for prometheus")
def check_query_variable(name, what, expected):
    v = variables.get(name)
    if not v or v.get("type") != "query":
        errors.append(f"no `{name}` {what}query variable")
        return
    q = v.get("query")
    q = q.get("query") if isinstance(q, dict) else q
    if q != expected:
        errors.append(f"{name} variable query is {q!r}")
    if v.get("datasource", {}).get("uid") != "${datasource}":
        errors.append(f"{name} variable does not use ${{datasource}}")

check_query_variable("target", "",
                     'label_values(thptrace_redis_up{instance=~"$instance", namespace=~"$namespace", pod=~"$pod"}, target)')
check_query_variable("instance", "(host) ", "label_values(thptrace_redis_up, instance)")
check_query_variable("namespace", "(Kubernetes) ", 'label_values(thptrace_redis_up{instance=~"$instance"}, namespace)')
check_query_variable("pod", "(Kubernetes) ",
                     'label_values(thptrace_redis_up{instance=~"$instance", namespace=~"$namespace"}, pod)')
# All must match a Redis on a bare host too, which has no namespace or pod label.
for name in ("namespace", "pod"):
    v = variables.get(name, {})
    if not v.get("includeAll") or v.get("allValue") != ".*":
        errors.append(f"{name} variable has no All of .* (a bare host's Redis has no {name})")

def uses_ds(obj):
    ds = obj.get("datasource")
    return isinstance(ds, dict) and ds.get("uid") == "${datasource}" and ds.get("type") == "prometheus"

exprs = []
def walk(panels):
    for p in panels:
        if p.get("type") == "row":
            walk(p.get("panels", []))
            continue
        title = p.get("title", "?")
        if not uses_ds(p):
            errors.append(f"panel {title!r}: datasource is not ${{datasource}}")
        targets = p.get("targets", [])
        if not targets:
            errors.append(f"panel {title!r}: no queries")
        for t in targets:
            expr = t.get("expr", "")
            if not uses_ds(t):
                errors.append(f"panel {title!r} query {t.get('refId')}: datasource is not ${{datasource}}")
            if '$target' not in expr:
                errors.append(f"panel {title!r} query {t.get('refId')}: expr does not use $target")
            for var in ("$instance", "$namespace", "$pod"):
                if var not in expr:
                    errors.append(f"panel {title!r} query {t.get('refId')}: expr does not use {var}")
            exprs.append((f"panel {title} {t.get('refId')}", expr))
walk(d.get("panels", []))
annotations = [a for a in d.get("annotations", {}).get("list", []) if a.get("expr")]
if not annotations:
    errors.append("no fork-episode annotation query")
for a in annotations:
    if not uses_ds(a):
        errors.append(f"annotation {a.get('name')!r}: datasource is not ${{datasource}}")
    if '$target' not in a["expr"]:
        errors.append(f"annotation {a.get('name')!r}: expr does not use $target")
    for var in ("$instance", "$namespace", "$pod"):
        if var not in a["expr"]:
            errors.append(f"annotation {a.get('name')!r}: expr does not use {var}")
    exprs.append((f"annotation {a.get('name')}", a["expr"]))
if not any("thptrace_fork_in_progress" in a["expr"] or "thptrace_forks_total" in a["expr"]
           for a in annotations):
    errors.append("no annotation of fork episodes")
wanted = ["thptrace_redis_command_latency_seconds_bucket", "thptrace_forks_total",
          "thptrace_fork_duration_seconds", "thptrace_fork_child_lifetime_seconds",
          "thptrace_cow_faults_total", "thptrace_thp_splits_total", "thptrace_thp_collapses_total",
          "thptrace_anon_huge_pages_bytes", "thptrace_stall_seconds", "thptrace_probe_info",
          "thptrace_events_dropped_total", "thptrace_redis_up", "thptrace_parent_copied_bytes_total",
          "thptrace_last_fork_timestamp_seconds", "thptrace_last_fork_duration_seconds",
          "thptrace_last_fork_parent_copied_bytes", "thptrace_redis_client_latency_seconds_bucket"]
alltext = "\n".join(e for _, e in exprs)
for w in wanted:
    if w not in alltext:
        errors.append(f"no panel shows {w}")

# Each expression, with Grafana's variables substituted, becomes a recording rule for promtool to parse.
subst = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h", "$target": ".*",
         "$instance": ".*", "$namespace": ".*", "$pod": ".*"}
with open(sys.argv[2], "w") as f:
    f.write("groups:\n  - name: dashboard\n    rules:\n")
    for i, (_, e) in enumerate(exprs):
        for k, v in subst.items():
            e = e.replace(k, v)
        f.write(f"      - record: dashboard:expr_{i}\n        expr: {json.dumps(e)}\n")
print(f"{len(exprs)} queries checked")
if errors:
    print("\n".join(errors))
    sys.exit(1)
EOF
}
check "dashboard: datasource, instance, namespace, pod and target variables, every query uses them" dashboard_ok
dashboard_promql_ok() {
  [ -s "$tmp/dashboard.rules.yml" ] || { echo "no queries extracted (see the previous check)"; return 1; }
  prom check rules "$tmp/dashboard.rules.yml"
}
check "dashboard: every query parses as PromQL (promtool)" dashboard_promql_ok

# Every host may watch the same target: no aggregation or join of the rules or the dashboard may
# drop the scrape's job and instance (merging every host's series into one).
check "rules and dashboard keep job and instance in every aggregation and join" \
  "$py" "$root/tests/deploy/instance_check.py" "$rules" "$dashboard"

# --- Kubernetes ---------------------------------------------------------------------------------
k8s_ok() {
  "$py" - "$daemonset" "$servicemonitor" <<'EOF'
import sys
try:
    import yaml
except ImportError:
    print("python3 yaml module missing: install python3-yaml (scripts/install-deps.sh)")
    sys.exit(1)
errors = []
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
ds = [d for d in docs if d.get("kind") == "DaemonSet"]
if len(ds) != 1:
    print("daemonset.yaml must hold exactly one DaemonSet")
    sys.exit(1)
ds = ds[0]
if ds.get("apiVersion") != "apps/v1":
    errors.append("DaemonSet apiVersion is not apps/v1")
if ds["metadata"].get("namespace") != "monitoring":
    errors.append("DaemonSet namespace is not monitoring")
tmpl = ds["spec"]["template"]
spec = tmpl["spec"]
sel = ds["spec"]["selector"]["matchLabels"]
if any(tmpl["metadata"].get("labels", {}).get(k) != v for k, v in sel.items()):
    errors.append("selector does not match the pod template labels")
if spec.get("hostPID") is not True:
    errors.append("hostPID is not true")
ann = tmpl["metadata"].get("annotations", {})
if ann.get("prometheus.io/scrape") != "true" or ann.get("prometheus.io/port") != "9966":
    errors.append("prometheus.io/scrape and prometheus.io/port: \"9966\" annotations missing")
c = [c for c in spec["containers"] if c["name"] == "thptrace"]
if not c:
    print("no container named thptrace")
    sys.exit(1)
c = c[0]
if c.get("image") != "thptrace:0.1.0":
    errors.append(f"image is {c.get('image')}")
if c.get("command") != ["thptrace", "daemon", "--discover", "--listen", "0.0.0.0:9966"]:
    errors.append(f"command is {c.get('command')}")
if not any(p.get("containerPort") == 9966 for p in c.get("ports", [])):
    errors.append("no containerPort 9966")
res = c.get("resources", {})
if not res.get("requests") or not res.get("limits"):
    errors.append("resources requests/limits missing")
sc = c.get("securityContext", {})
caps = sc.get("capabilities", {})
if sorted(caps.get("add", [])) != sorted(["BPF", "PERFMON", "SYS_PTRACE", "DAC_READ_SEARCH"]):
    errors.append(f"capabilities.add is {caps.get('add')}")
if caps.get("drop") != ["ALL"]:
    errors.append("capabilities.drop is not [ALL]")
if sc.get("readOnlyRootFilesystem") is not True:
    errors.append("readOnlyRootFilesystem is not true")
if sc.get("privileged") is True or sc.get("allowPrivilegeEscalation") is not False:
    errors.append("container is privileged or allows privilege escalation")
vols = {v["name"]: v for v in spec.get("volumes", [])}
mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
for path in ("/sys/kernel/btf", "/sys/kernel/mm/transparent_hugepage"):
    m = mounts.get(path)
    if not m:
        errors.append(f"no mount at {path}")
        continue
    if m.get("readOnly") is not True:
        errors.append(f"mount {path} is not readOnly")
    v = vols.get(m["name"], {})
    if v.get("hostPath", {}).get("path") != path:
        errors.append(f"mount {path} is not the hostPath {path}")
for v in vols.values():
    hp = v.get("hostPath", {}).get("path")
    if hp and not any(m["name"] == v["name"] and m.get("readOnly") for m in c.get("volumeMounts", [])):
        errors.append(f"hostPath {hp} is not mounted read-only")

docs = [d for d in yaml.safe_load_all(open(sys.argv[2])) if d]
svc = [d for d in docs if d.get("kind") == "Service"]
sm = [d for d in docs if d.get("kind") == "ServiceMonitor"]
if len(svc) != 1 or len(sm) != 1:
    errors.append("servicemonitor.yaml must hold one Service and one ServiceMonitor")
else:
    svc, sm = svc[0], sm[0]
    if svc["spec"].get("clusterIP") != "None":
        errors.append("Service is not headless (clusterIP: None)")
    if any(tmpl["metadata"]["labels"].get(k) != v for k, v in svc["spec"]["selector"].items()):
        errors.append("Service selector does not select the DaemonSet pods")
    port_names = {p["name"] for p in svc["spec"]["ports"] if p.get("port") == 9966}
    if sm.get("apiVersion") != "monitoring.coreos.com/v1":
        errors.append("ServiceMonitor apiVersion is not monitoring.coreos.com/v1")
    if any(svc["metadata"]["labels"].get(k) != v for k, v in sm["spec"]["selector"]["matchLabels"].items()):
        errors.append("ServiceMonitor selector does not select the Service")
    if not any(e.get("port") in port_names for e in sm["spec"]["endpoints"]):
        errors.append("ServiceMonitor endpoint port is not the Service's 9966 port")
    for d in (svc, sm):
        if d["metadata"].get("namespace") != "monitoring":
            errors.append(f"{d['kind']} namespace is not monitoring")
if errors:
    print("\n".join(errors))
    sys.exit(1)
EOF
}
check "kubernetes: DaemonSet (hostPID, capabilities, read-only mounts) and ServiceMonitor" k8s_ok

# The NetworkPolicy parses, selects the DaemonSet's pods, and admits only a labelled scraper in a
# named namespace, to the metrics port only: no rule open to every peer or every port.
networkpolicy_ok() {
  "$py" - "$networkpolicy" "$daemonset" <<'EOF'
import sys
import yaml
errors = []
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
ds = [d for d in yaml.safe_load_all(open(sys.argv[2])) if d and d.get("kind") == "DaemonSet"][0]
pod_labels = ds["spec"]["template"]["metadata"]["labels"]
container = [c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "thptrace"][0]
metrics_ports = {9966} | {p["name"] for p in container.get("ports", []) if p.get("containerPort") == 9966}
nps = [d for d in docs if d.get("kind") == "NetworkPolicy"]
if len(nps) != 1:
    print("networkpolicy.yaml must hold exactly one NetworkPolicy")
    sys.exit(1)
np = nps[0]
if np.get("apiVersion") != "networking.k8s.io/v1":
    errors.append("NetworkPolicy apiVersion is not networking.k8s.io/v1")
if np["metadata"].get("namespace") != ds["metadata"].get("namespace"):
    errors.append("NetworkPolicy is not in the DaemonSet's namespace")
spec = np.get("spec", {})
sel = spec.get("podSelector", {}).get("matchLabels", {})
if not sel or any(pod_labels.get(k) != v for k, v in sel.items()):
    errors.append("podSelector does not select the DaemonSet's pods")
if "Ingress" not in spec.get("policyTypes", []):
    errors.append("policyTypes lacks Ingress")
rules = spec.get("ingress", [])
if not rules:
    errors.append("no ingress rule: the scraper would be refused too")
for i, r in enumerate(rules):
    peers = r.get("from", [])
    if not peers:
        errors.append(f"ingress rule {i} admits every peer")
    for p in peers:
        ns = p.get("namespaceSelector", {}).get("matchLabels")
        pods = p.get("podSelector", {}).get("matchLabels")
        if "ipBlock" not in p and (not ns or not pods):
            errors.append(f"ingress rule {i}: a peer without both a labelled namespace and labelled pods")
    ports = r.get("ports", [])
    if not ports:
        errors.append(f"ingress rule {i} admits every port")
    for p in ports:
        if p.get("port") not in metrics_ports or p.get("protocol", "TCP") != "TCP":
            errors.append(f"ingress rule {i} admits {p}, not only the metrics port")
if errors:
    print("\n".join(errors))
    sys.exit(1)
EOF
}
check "kubernetes: NetworkPolicy admits only the labelled scraper to the metrics port" networkpolicy_ok

# The kustomize base renders to the two manifests as they are; the example overlay sets the image,
# the namespace of every object and the Redis credentials from a Secret it does not carry. Rendered
# by Debian 12's kubectl (kubernetes-client, unpacked by scripts/install-deps.sh test: its kustomize
# is the oldest an operator is likely to run, and newer ones read the same files).
kubectl_bin=/var/cache/thptrace/kubernetes-client/root/usr/bin/kubectl
kustomize_ok() {
  if [ ! -x "$kubectl_bin" ]; then
    echo "no $kubectl_bin: run scripts/install-deps.sh test"
    return 1
  fi
  "$kubectl_bin" kustomize "$root/deploy/kubernetes/base" >"$tmp/base.yaml" || return 1
  "$kubectl_bin" kustomize "$root/deploy/kubernetes/overlays/example" >"$tmp/overlay.yaml" || return 1
  "$py" - "$tmp/base.yaml" "$tmp/overlay.yaml" "$daemonset" "$networkpolicy" <<'EOF'
import sys, yaml
base, overlay = (list(yaml.safe_load_all(open(p))) for p in sys.argv[1:3])
files = [d for p in sys.argv[3:5] for d in yaml.safe_load_all(open(p)) if d]
errors = []
key = lambda d: (d["kind"], d["metadata"]["name"])
if sorted(map(key, base)) != sorted(map(key, files)) or any(
        b != next(f for f in files if key(f) == key(b)) for b in base):
    errors.append("the base does not render to daemonset.yaml and networkpolicy.yaml as they are")
if sorted(map(key, overlay)) != sorted(map(key, files)):
    errors.append(f"the overlay renders {sorted(map(key, overlay))}, not the base's objects")
for d in overlay:
    if d["metadata"].get("namespace") != "observability":
        errors.append(f"{key(d)} is in namespace {d['metadata'].get('namespace')}, not the overlay's")
    if d["kind"] == "Secret":
        errors.append("the overlay carries a Secret: credentials are made outside the repository")
ds = next((d for d in overlay if d["kind"] == "DaemonSet"), None)
bds = next((d for d in base if d["kind"] == "DaemonSet"), None)
if ds and bds:
    c = ds["spec"]["template"]["spec"]["containers"][0]
    bc = bds["spec"]["template"]["spec"]["containers"][0]
    if c["image"] != "registry.example.com/platform/thptrace:0.1.0":
        errors.append(f"the overlay's image is {c['image']}")
    if c["securityContext"] != bc["securityContext"]:
        errors.append("the overlay changed the container's securityContext")
    if ds["spec"]["selector"] != bds["spec"]["selector"]:
        errors.append("the overlay changed the DaemonSet's selector (immutable once applied)")
    vols = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    secret = vols.get("redis-credentials", {}).get("secret", {})
    if secret.get("secretName") != "thptrace-redis" or secret.get("defaultMode") != 0o400:
        errors.append(f"no Secret thptrace-redis mounted with mode 0400: {secret}")
    m = mounts.get("redis-credentials", {})
    if m.get("mountPath") != "/etc/thptrace/redis" or not m.get("readOnly"):
        errors.append(f"the credentials are not mounted read-only at /etc/thptrace/redis: {m}")
    cmd = c["command"]
    def arg(flag):
        return cmd[cmd.index(flag) + 1] if flag in cmd and cmd.index(flag) + 1 < len(cmd) else None
    if arg("--redis-password-file") != "/etc/thptrace/redis/password" or arg("--redis-cacert") != "/etc/thptrace/redis/ca.crt":
        errors.append(f"the command does not read the password and CA from the Secret: {cmd}")
    if "--redis-tls" not in cmd or arg("--redis-user") != "thptrace":
        errors.append(f"the command does not log in as thptrace over TLS: {cmd}")
    # Each --redis-auth rule reads a Secret mounted read-only as a directory, mode 0400.
    rules = [cmd[i + 1] for i, a in enumerate(cmd[:-1]) if a == "--redis-auth"]
    if not rules:
        errors.append(f"the overlay has no --redis-auth rule: {cmd}")
    for rule in rules:
        match, _, path = rule.partition("=")
        m = next((m for m in c["volumeMounts"] if m["mountPath"] == path), None)
        v = vols.get(m["name"], {}).get("secret", {}) if m else {}
        if not match or not m or not m.get("readOnly") or not v.get("secretName") or v.get("defaultMode") != 0o400:
            errors.append(f"--redis-auth {rule}: not a Secret mounted read-only with mode 0400 at {path}")
    for kept in bc["command"]:
        if kept not in cmd:
            errors.append(f"the overlay's command lost the base's {kept}")
if errors:
    print("\n".join(errors))
    sys.exit(1)
EOF
}
check "kubernetes: kustomize base renders the manifests, the example overlay sets image, namespace, a Secret and a login per pod group" kustomize_ok

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
