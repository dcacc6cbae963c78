"""What ships around the daemon: the systemd unit, the container and Kubernetes examples, the
Prometheus alerts and the Grafana dashboard. Each is checked with the tool that will consume it
when that tool is here (systemd-analyze, promtool, kubectl), and statically otherwise."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from forwarder.config import load_config

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "forwarder.service"
ALERTS = REPO / "deploy" / "prometheus" / "alerts.yml"
ALERTS_TEST = REPO / "deploy" / "prometheus" / "alerts_test.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "forwarder.json"
KUBERNETES = REPO / "deploy" / "kubernetes"
CONFIGS = [
    REPO / "systemd" / "forwarder.toml",
    REPO / "deploy" / "container" / "forwarder.toml",
    KUBERNETES / "base" / "forwarder.toml",
    KUBERNETES / "node" / "forwarder.toml",
]
MAX_EXPOSURE = 1.5

# The metrics the daemon serves at /metrics (issue 6), as they appear in the exposition.
COUNTERS = {
    "forwarder_ingest_lines",
    "forwarder_ingest_bytes",
    "forwarder_ingest_parse_failures",
    "forwarder_ingest_entries_truncated",
    "forwarder_store_retention_deleted_lines",
    "forwarder_http_requests",
    "forwarder_destination_lines_sent",
    "forwarder_destination_bytes_sent",
    "forwarder_destination_failures",
    "forwarder_destination_lines_dropped",
    "process_cpu_seconds",
}
GAUGES = {
    "forwarder_build_info",
    "forwarder_config_last_reload_successful",
    "forwarder_config_last_reload_success_timestamp_seconds",
    "forwarder_ingest_source_up",
    "forwarder_ingest_last_read_timestamp_seconds",
    "forwarder_store_size_bytes",
    "forwarder_store_max_bytes",
    "forwarder_store_lines",
    "forwarder_destination_lag_lines",
    "forwarder_destination_oldest_undelivered_age_seconds",
    "forwarder_destination_consecutive_failures",
    "forwarder_destination_last_success_timestamp_seconds",
    "forwarder_alerts",
    "forwarder_insights_lag_lines",
    "process_resident_memory_bytes",
    "process_open_fds",
    "process_start_time_seconds",
    "python_info",
}
HISTOGRAMS = {"forwarder_http_request_duration_seconds", "forwarder_destination_request_duration_seconds"}
KNOWN_METRICS = (
    {f"{name}_total" for name in COUNTERS}
    | GAUGES
    | {f"{name}{suffix}" for name in HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")}
)
SCRAPE_METRICS = {"up"}  # made by Prometheus for every target


# --- systemd ------------------------------------------------------------------------------------


def _systemd_analyze() -> str:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed (Debian: package systemd)")
    out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=30)
    match = re.match(r"systemd (\d+)", out.stdout)
    if not match or int(match.group(1)) < 250:
        pytest.skip(f"systemd-analyze is too old for `security --offline` (needs systemd 250+): {out.stdout[:40]!r}")
    return tool


def test_systemd_unit_exposure() -> None:
    tool = _systemd_analyze()
    out = subprocess.run(
        [tool, "security", "--offline=true", "--no-pager", str(UNIT)], capture_output=True, text=True, timeout=60
    )
    match = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", out.stdout)
    assert match, f"no exposure figure in systemd-analyze's output:\n{out.stdout}\n{out.stderr}"
    exposure = float(match.group(1))
    failing = [line for line in out.stdout.splitlines() if line.startswith("✗")]
    assert exposure <= MAX_EXPOSURE, f"exposure {exposure} > {MAX_EXPOSURE}; still open:\n" + "\n".join(failing)


def test_systemd_unit_verifies(tmp_path: Path) -> None:
    """`systemd-analyze verify` names unknown or malformed settings. It also insists that ExecStart's
    binary exists, which /opt/forwarder/bin/forwarder does not here: the copy runs the venv's."""
    tool = _systemd_analyze()
    forwarder = shutil.which("forwarder") or str(Path(REPO / ".venv" / "bin" / "forwarder"))
    if not Path(forwarder).exists():
        pytest.skip("no forwarder executable to stand in for /opt/forwarder/bin/forwarder")
    unit = tmp_path / "forwarder.service"
    unit.write_text(UNIT.read_text().replace("/opt/forwarder/bin/forwarder", forwarder))
    out = subprocess.run(
        [tool, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    # verify exits 0 on unknown keys, but says so on stderr.
    complaints = [line for line in (out.stdout + out.stderr).splitlines() if "forwarder.service" in line]
    assert out.returncode == 0 and not complaints, out.stdout + out.stderr


def _unit_settings() -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if line and not line.startswith(("#", "[")) and "=" in line:
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


def test_systemd_unit_fits_the_daemon() -> None:
    """The settings the daemon's behaviour depends on (exit codes, drain time, paths, notify)."""
    s = _unit_settings()
    assert s["Type"] == ["notify"] and s["NotifyAccess"] == ["main"]
    assert s["RestartPreventExitStatus"] == ["78"]  # EX_CONFIG: forwarder.cli.EX_CONFIG
    config = load_config(REPO / "systemd" / "forwarder.toml")
    stop = int(s["TimeoutStopSec"][0].removesuffix("s"))
    assert stop > config.delivery.shutdown_grace_seconds, "TimeoutStopSec must leave room above the drain"
    # SIGTERM to the main process only: the daemon drains pending entries through its parse worker
    # and then ends it. With the default control-group mode the worker was signalled too and the
    # drain failed (seen under systemd 252, with the multiprocessing pool the worker was then).
    assert s["KillMode"] == ["mixed"]
    assert "AF_UNIX" in s["RestrictAddressFamilies"][0]  # sd_notify
    assert s["StateDirectory"] == ["forwarder"]
    for path in (config.store.path, config.security.secrets_key_file):
        assert path.is_relative_to("/var/lib/forwarder"), f"{path} is not in the unit's StateDirectory"
    assert f"--config /etc/{s['ConfigurationDirectory'][0]}/forwarder.toml" in s["ExecStart"][0]
    sysusers = (REPO / "systemd" / "forwarder.sysusers").read_text()
    assert re.search(rf"^u\s+{s['User'][0]}\s", sysusers, re.M)


# --- configs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(REPO)))
def test_shipped_configs_are_valid(path: Path) -> None:
    config = load_config(path)
    assert config.databases, "an example config without a database reads nothing"


# --- container ----------------------------------------------------------------------------------


def test_containerfile_runs_as_non_root_with_the_container_config() -> None:
    text = (REPO / "deploy" / "container" / "Containerfile").read_text()
    stages = re.findall(r"^FROM\s+(\S+)", text, re.M)
    assert len(stages) == 2 and stages[1] == "${PYTHON_IMAGE}", stages
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11-slim", text, re.M)
    final = text[text.rindex("\nFROM ") :]
    assert "gcc" not in final and re.search(r"^USER 10001", final, re.M)
    assert 'ENTRYPOINT ["forwarder", "run", "--config", "/etc/forwarder/forwarder.toml"]' in final
    assert "COPY deploy/container/forwarder.toml /etc/forwarder/forwarder.toml" in final
    assert "/healthz" in final and "EXPOSE 8780" in final
    config = load_config(REPO / "deploy" / "container" / "forwarder.toml")
    assert config.server.host == "0.0.0.0" and config.server.port == 8780
    assert config.store.path.is_relative_to("/var/lib/forwarder")
    # The build context sends only what the COPY lines name.
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    for source in re.findall(r"^COPY (?!--from)(.+) \S+$", text, re.M):
        for name in source.split():
            assert f"!{name.rstrip('/')}" in ignore or f"!{name.rstrip('/')}/" in ignore, name


# --- Kubernetes ---------------------------------------------------------------------------------


def _documents(path: Path) -> Iterator[dict[str, Any]]:
    for doc in yaml.safe_load_all(path.read_text()):
        if doc is not None:
            yield doc


def test_kubernetes_manifests_parse_and_agree_with_the_config() -> None:
    files = sorted(KUBERNETES.rglob("*.yaml"))
    assert files
    docs = {f.relative_to(KUBERNETES).as_posix(): list(_documents(f)) for f in files}
    kinds = {d["kind"] for ds in docs.values() for d in ds}
    assert {"Kustomization", "StatefulSet", "Service", "PodMonitor"} <= kinds
    (sts,) = [d for d in docs["base/statefulset.yaml"] if d["kind"] == "StatefulSet"]
    pod = sts["spec"]["template"]
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    fwd, pg = containers["forwarder"], containers["postgres"]
    assert pod["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    for c in (fwd, pg):
        sc = c["securityContext"]
        assert sc["readOnlyRootFilesystem"] and sc["capabilities"]["drop"] == ["ALL"]
        assert sc["allowPrivilegeEscalation"] is False
    assert fwd["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert fwd["readinessProbe"]["httpGet"]["path"] == "/readyz"
    mounts = {m["mountPath"]: m for m in fwd["volumeMounts"]}
    assert mounts["/var/log/postgresql"].get("readOnly") is True

    # postgres writes where, and how, the forwarder reads.
    settings = dict(a.split("=", 1) for a in pg["args"] if "=" in a)
    config = load_config(KUBERNETES / "base" / "forwarder.toml")
    (db,) = config.databases
    assert settings["logging_collector"] == "on" and settings["log_file_mode"] == "0640"
    assert settings["log_line_prefix"] == db.log.line_prefix
    assert db.log.path.startswith(settings["log_directory"] + "/")
    assert {m["mountPath"] for m in pg["volumeMounts"] if m["name"] == "logs"} == {settings["log_directory"]}
    assert config.server.port == fwd["ports"][0]["containerPort"] == 8780
    assert config.store.path.parent.as_posix() in mounts
    # The drain must fit in the grace period.
    assert pod["spec"]["terminationGracePeriodSeconds"] > config.delivery.shutdown_grace_seconds


def test_the_node_daemonset_reads_the_pod_logs_as_its_config_says() -> None:
    (ds,) = [d for d in _documents(KUBERNETES / "node" / "daemonset.yaml") if d["kind"] == "DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    (fwd,) = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in fwd["volumeMounts"]}
    # The node's container logs, read-only, and nothing of the node writable but the store's directory.
    assert volumes[mounts["/var/log/pods"]["name"]]["hostPath"]["path"] == "/var/log/pods"
    assert mounts["/var/log/pods"]["readOnly"] is True
    sc = fwd["securityContext"]
    assert sc["readOnlyRootFilesystem"] and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["DAC_READ_SEARCH"]}
    config = load_config(KUBERNETES / "node" / "forwarder.toml")
    assert config.databases and all(db.log.format == "cri" for db in config.databases)
    assert all(db.log.path.startswith("/var/log/pods/") for db in config.databases)
    assert config.store.path.parent.as_posix() in mounts
    assert config.server.port == fwd["ports"][0]["containerPort"]
    assert pod["terminationGracePeriodSeconds"] > config.delivery.shutdown_grace_seconds


def test_kustomize_builds() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: cannot run its kustomize")
    for target, workload in (
        (KUBERNETES, {"Service", "StatefulSet"}),
        (KUBERNETES / "prometheus-operator", {"Service", "StatefulSet"}),
        (KUBERNETES / "node", {"Namespace", "DaemonSet"}),
    ):
        out = subprocess.run([kubectl, "kustomize", str(target)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        kinds = [d["kind"] for d in yaml.safe_load_all(out.stdout) if d]
        assert {"ConfigMap", *workload} <= set(kinds)


# --- Prometheus ---------------------------------------------------------------------------------


def _promtool() -> str:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool is not installed (Debian: package prometheus; `make test` installs it as root)")
    return tool


def test_alert_rules_pass_promtool() -> None:
    tool = _promtool()
    check = subprocess.run([tool, "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    test = subprocess.run(
        [tool, "test", "rules", str(ALERTS_TEST)], capture_output=True, text=True, timeout=120, cwd=ALERTS.parent
    )
    assert test.returncode == 0, test.stdout + test.stderr


def _alert_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_every_alert_has_for_severity_and_annotations() -> None:
    rules = _alert_rules()
    names = {r["alert"] for r in rules}
    assert {
        "ForwarderDown",
        "ForwarderDestinationFailing",
        "ForwarderDestinationLagging",
        "ForwarderDestinationDroppingLines",
        "ForwarderSourceUnreadable",
        "ForwarderParseFailures",
        "ForwarderStoreNearlyFull",
    } <= names
    for rule in rules:
        assert "for" in rule, rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]
    tested = set(re.findall(r"alertname: (\w+)", ALERTS_TEST.read_text()))
    assert tested == names, f"alerts without a promtool test: {names - tested}"


# --- Grafana ------------------------------------------------------------------------------------

_PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool"}
_PROMQL_WORDS |= {"offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects: what is left once label matchers, grouping clauses,
    ranges, strings, numbers, functions and keywords are taken out."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w$.])([A-Za-z_:][\w:]*)(\s*\()?", text):
        word, call = match.group(1), match.group(2)
        if call or word in _PROMQL_WORDS:
            continue
        names.add(word)
    return names


def test_metric_name_extraction() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (destination_id, le) "
        "(rate(forwarder_destination_request_duration_seconds_bucket"
        '{instance=~"$instance", destination_id=~"$destination_id"}[$__rate_interval]))) '
        "/ on (instance) group_left forwarder_store_max_bytes > 0.9 or vector(0)"
    )
    assert metric_names(expr) == {"forwarder_destination_request_duration_seconds_bucket", "forwarder_store_max_bytes"}
    assert metric_names("time() - process_start_time_seconds") == {"process_start_time_seconds"}


def _dashboard_exprs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "expr" and isinstance(value, str):
                yield value
            else:
                yield from _dashboard_exprs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _dashboard_exprs(item)


def test_grafana_dashboard_is_valid_and_uses_only_known_metrics() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["schemaVersion"] >= 36 and dash["uid"] and dash["title"]
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert {"database_id", "destination_id"} <= variables.keys()
    panels = [p for p in dash["panels"] if p["type"] != "row"]
    assert len(panels) >= 12
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
    exprs = list(_dashboard_exprs(dash["panels"]))
    used: set[str] = set()
    for expr in exprs:
        unknown = metric_names(expr) - KNOWN_METRICS
        assert not unknown, f"{unknown} in {expr}"
        used |= metric_names(expr)
    # Every metric of the list is on the dashboard somewhere, bar the histograms' _sum/_count.
    missing = {m for m in KNOWN_METRICS - used if not m.endswith(("_sum", "_count"))} - {"python_info"}
    assert not missing, f"metrics no panel shows: {sorted(missing)}"


def test_alert_rules_use_only_known_metrics() -> None:
    for rule in _alert_rules():
        unknown = metric_names(rule["expr"]) - KNOWN_METRICS - SCRAPE_METRICS
        assert not unknown, f"{rule['alert']}: {unknown}"


def test_dashboard_queries_parse(tmp_path: Path) -> None:
    """promtool parses every dashboard query (Grafana's variables filled in) as a recording rule."""
    tool = _promtool()
    dash = json.loads(DASHBOARD.read_text())
    rules = []
    for i, expr in enumerate(_dashboard_exprs(dash["panels"])):
        expr = expr.replace("$__rate_interval", "5m").replace("$__range", "1h")
        expr = re.sub(r"\$\w+", ".*", expr)
        rules.append({"record": f"dashboard:query_{i}", "expr": expr})
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    out = subprocess.run([tool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_listed_metrics_are_the_daemons() -> None:
    """The list above against forwarder.metrics: a renamed metric breaks the dashboard and the alerts."""
    from forwarder import metrics

    served: set[str] = set()
    for family in metrics.REGISTRY.collect():
        if family.type == "counter":
            served.add(f"{family.name}_total")
        elif family.type == "histogram":
            served |= {f"{family.name}{s}" for s in ("_bucket", "_sum", "_count")}
        else:
            served.add(family.name)
    missing = KNOWN_METRICS - served
    assert not missing, f"not in forwarder.metrics.REGISTRY: {sorted(missing)}"
