"""docker/'s dashboard, Prometheus and Grafana pieces without a Docker engine: the compose file's
dashboard service as `docker-compose config` resolves it, its command and healthcheck run here on
the test services, and the Prometheus scrape config pointing at it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests
import yaml

from crawltasks.settings import Settings

from .test_docker import DOCKER, ENV_NAMES, compose_config, local_command
from .test_flower import Proc, free_port, listening, service_env


@pytest.fixture(scope="module")
def services() -> dict:
    proc = compose_config("metrics", FLOWER_BASIC_AUTH="admin:secret")
    assert proc.returncode == 0, proc.stderr
    return yaml.safe_load(proc.stdout)["services"]


def test_the_dashboard_service_takes_flowers_login_and_stays_on_loopback(services):
    board = services["dashboard"]
    env = board["environment"]
    assert set(env) >= ENV_NAMES and env["CRAWLTASKS_WEB_AUTH"] == "admin:secret"
    assert board["command"][:2] == ["crawltasks", "web"] and "0.0.0.0" in board["command"]
    for name in ("dashboard", "prometheus", "grafana"):
        for port in services[name]["ports"]:
            host_ip = port.get("host_ip") if isinstance(port, dict) else str(port).rsplit(":", 2)[0]
            assert host_ip == "127.0.0.1", (name, port)
    assert board["healthcheck"]["test"] and board["depends_on"]["redis"]["condition"] == "service_healthy"
    missing = compose_config()  # without a login, neither Flower nor the dashboard starts
    assert missing.returncode != 0 and "FLOWER_BASIC_AUTH" in missing.stderr


def test_prometheus_scrapes_the_dashboards_metrics(services):
    config = yaml.safe_load((DOCKER / "prometheus.yml").read_text())
    [job] = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics" and job["static_configs"][0]["targets"] == ["dashboard:8080"]
    mounts = [str(v) for v in services["prometheus"]["volumes"]]
    assert any("prometheus.yml" in m for m in mounts)
    grafana = [str(v) for v in services["grafana"]["volumes"]]
    assert any("grafana-dashboard.json" in m for m in grafana) and any("provisioning" in m for m in grafana)
    for path in ("grafana/provisioning/datasources/prometheus.yml", "grafana/provisioning/dashboards/crawltasks.yml"):
        assert yaml.safe_load((DOCKER / path).read_text())["apiVersion"] == 1


def test_the_dashboard_command_and_healthcheck_run_here(services, settings: Settings, rt, tmp_path: Path):
    board = services["dashboard"]
    port = free_port()
    command = local_command(board["command"])
    command[command.index("--port") + 1] = str(port)
    if command[0] == "crawltasks":  # the console script, as the image has it; here: this venv's module
        command = [sys.executable, "-m", "crawltasks.cli", *command[1:]]
    env = service_env(settings, CRAWLTASKS_WEB_AUTH=board["environment"]["CRAWLTASKS_WEB_AUTH"],
                      PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    proc = Proc(command, env, tmp_path / "dashboard.log")
    try:
        base = f"http://127.0.0.1:{port}"
        proc.wait_for(lambda: requests.get(base + "/healthz", timeout=2).ok, "dashboard")
        probe = local_command(board["healthcheck"]["test"][1:])
        probe = [a.replace("8080", str(port)) for a in probe]
        assert subprocess.run(probe, env=env, capture_output=True, timeout=30).returncode == 0
        assert requests.get(base + "/", timeout=5).status_code == 401
        assert requests.get(base + "/", auth=("admin", "secret"), timeout=5).status_code == 200
        assert "crawltasks_workers_alive" in requests.get(base + "/metrics", timeout=5).text
        if Path("/proc/net/tcp").exists():  # every interface, as in the container (auth is on)
            assert listening(port) == {"0.0.0.0"}
    finally:
        proc.stop()
