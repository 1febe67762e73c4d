#!/usr/bin/env python3
"""Validates deploy/compose.yaml and the YAML files it mounts, without Docker.

Checks that every YAML file under deploy/ parses, that compose.yaml has the waavd, prometheus
and grafana services, that its bind mounts point at files in the repository (the models folder
and the Dockerfile may not exist yet: they are reported, not failed), that Prometheus scrapes
the waavd service on the metrics port compose publishes, and that Grafana's dashboard provider
reads the folder the dashboard is mounted in. Exits 77 (skipped) without PyYAML.
Usage: check_compose.py SOURCE_DIR
"""
import os
import sys

try:
    import yaml
except ImportError:
    print("SKIP: python3 has no yaml module (Debian package python3-yaml); compose not validated")
    sys.exit(77)

METRICS_PORT = "9464"


def load(path, errors):
    try:
        with open(path, encoding="utf-8") as f:
            return yaml.safe_load(f)
    except (OSError, yaml.YAMLError) as e:
        errors.append(f"{path}: {e}")
        return None


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    deploy = os.path.join(sys.argv[1], "deploy")
    errors, notes = [], []

    yaml_files = [os.path.join(root, f) for root, _, files in os.walk(deploy) for f in files
                  if f.endswith((".yml", ".yaml"))]
    for path in sorted(yaml_files):
        load(path, errors)
    compose = load(os.path.join(deploy, "compose.yaml"), errors) or {}
    services = compose.get("services", {})
    for name in ("waavd", "prometheus", "grafana"):
        if name not in services:
            errors.append(f"compose.yaml: no service '{name}'")

    mounts = {}  # container path -> host path, per service
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source, target = volume.split(":")[:2]
            mounts[(name, target)] = source
            if not source.startswith((".", "/")):
                if source not in compose.get("volumes", {}):
                    errors.append(f"compose.yaml: service {name} uses undeclared volume '{source}'")
                continue
            host = os.path.normpath(os.path.join(deploy, source))
            if not os.path.exists(host):
                (notes if source == "../models" else errors).append(
                    f"compose.yaml: service {name} mounts {source}, which does not exist")
        build = service.get("build")
        if build:
            dockerfile = os.path.join(deploy, build.get("context", "."), build.get("dockerfile", "Dockerfile"))
            if not os.path.exists(dockerfile):
                notes.append(f"compose.yaml: {os.path.normpath(dockerfile)} does not exist yet")

    waavd_ports = [str(p).split(":")[-1] for p in services.get("waavd", {}).get("ports", [])]
    if METRICS_PORT not in waavd_ports:
        errors.append(f"compose.yaml: waavd does not publish the metrics port {METRICS_PORT}")

    prom_dir = mounts.get(("prometheus", "/etc/prometheus"))
    if prom_dir is None:
        errors.append("compose.yaml: prometheus does not mount its configuration at /etc/prometheus")
    else:
        config = load(os.path.join(deploy, prom_dir, "prometheus.yml"), errors) or {}
        targets = [t for job in config.get("scrape_configs", []) if job.get("job_name") == "waavd"
                   for sc in job.get("static_configs", []) for t in sc.get("targets", [])]
        if f"waavd:{METRICS_PORT}" not in targets:
            errors.append(f"prometheus.yml: job waavd does not scrape waavd:{METRICS_PORT}")
        for rule_file in config.get("rule_files", []):
            if not os.path.exists(os.path.join(deploy, prom_dir, rule_file)):
                errors.append(f"prometheus.yml: rule file {rule_file} does not exist")

    provider = load(os.path.join(deploy, "grafana/provisioning/dashboards/waav.yaml"), errors) or {}
    paths = [p.get("options", {}).get("path") for p in provider.get("providers", [])]
    dashboards = [t for (s, t), src in mounts.items() if s == "grafana" and src.endswith(".json")]
    if not dashboards or any(os.path.dirname(d) not in paths for d in dashboards):
        errors.append(f"grafana: dashboard mounted at {dashboards}, provider reads {paths}")
    if ("grafana", "/etc/grafana/provisioning") not in mounts:
        errors.append("compose.yaml: grafana does not mount the provisioning folder")

    for note in notes:
        print("note:", note)
    print(f"{len(yaml_files)} YAML files parsed; services: {', '.join(services)}")
    if errors:
        print("FAIL:\n  " + "\n  ".join(errors))
        return 1
    print("compose stack consistent: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
