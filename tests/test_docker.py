"""docker/ without a Docker engine: the compose file validates with `docker-compose config` and has
what production needs; the Dockerfile's shape is checked; and the worker, Flower and healthcheck
commands the compose file uses are run for real, here, against the test services."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import celeryconfig
from crawltasks.settings import Settings

from .test_flower import Proc, free_port, service_env

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"
COMPOSE = DOCKER / "docker-compose.yml"
ENV_NAMES = {"CRAWLTASKS_BROKER_URL", "CRAWLTASKS_REDIS_URL", "CRAWLTASKS_MONGO_URL", "CRAWLTASKS_MONGO_DB",
             "CRAWLTASKS_SPIDER_MODULES"}
WORKERS = ("fetch-worker", "parse-worker", "store-worker")


def compose_config(*profiles: str, **env: str) -> subprocess.CompletedProcess:
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.skip("docker-compose is not installed (Debian package docker-compose)")
    args = [exe, "-f", str(COMPOSE)]
    for profile in profiles:
        args += ["--profile", profile]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("FLOWER_", "CRAWLTASKS_"))} | env
    return subprocess.run([*args, "config"], capture_output=True, text=True, env=full_env, timeout=60)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    """The compose file as `docker-compose config` resolves it (anchors merged, variables filled)."""
    proc = compose_config("cli", "rabbitmq", FLOWER_BASIC_AUTH="admin:secret")
    assert proc.returncode == 0, proc.stderr
    return yaml.safe_load(proc.stdout)


def test_compose_validates_and_flower_requires_auth():
    ok = compose_config(FLOWER_BASIC_AUTH="admin:secret")
    assert ok.returncode == 0, ok.stderr
    missing = compose_config()
    assert missing.returncode != 0 and "FLOWER_BASIC_AUTH" in missing.stderr


def test_compose_services_persistence_healthchecks_and_environment(compose):
    services = compose["services"]
    assert {"redis", "mongo", *WORKERS, "flower", "cli", "rabbitmq"} <= set(services)
    redis_cmd = " ".join(services["redis"]["command"])
    assert "--appendonly yes" in redis_cmd and "--maxmemory-policy noeviction" in redis_cmd
    assert any("/data" in str(v) for v in services["redis"]["volumes"])
    for name in ("redis", "mongo", *WORKERS, "flower", "rabbitmq"):
        assert services[name].get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
    for name in (*WORKERS, "flower", "cli"):
        env = services[name]["environment"]
        assert set(env) >= ENV_NAMES, f"{name} misses {ENV_NAMES - set(env)}"
        assert env["CRAWLTASKS_BROKER_URL"] == "redis://redis:6379/0"
    for name in WORKERS:
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy"
    flower = services["flower"]
    assert flower["environment"]["FLOWER_BASIC_AUTH"] == "admin:secret"
    for port in flower["ports"]:  # published on loopback only (short or long syntax)
        host_ip = port.get("host_ip") if isinstance(port, dict) else str(port).rsplit(":", 2)[0]
        assert host_ip == "127.0.0.1", port


def pool_of(command: list[str]) -> tuple[str, list[str]]:
    args = list(command)
    return args[args.index("--pool") + 1], args[args.index("--queues") + 1].split(",")


def test_one_worker_per_queue_family_covers_every_routed_queue(compose):
    services = compose["services"]
    pools = {name: pool_of(services[name]["command"]) for name in WORKERS}
    assert pools["fetch-worker"][0] == "threads" and set(pools["fetch-worker"][1]) == set(
        celeryconfig.FETCH_QUEUES.values())
    assert pools["parse-worker"] == ("prefork", [celeryconfig.PARSE_QUEUE])
    assert pools["store-worker"][0] == "threads" and celeryconfig.STORE_QUEUE in pools["store-worker"][1]
    consumed = {q for _, queues in pools.values() for q in queues}
    routed = {route["queue"] for route in celeryconfig.task_routes.values()}
    assert routed | set(celeryconfig.FETCH_QUEUES.values()) <= consumed


def test_dockerfile_slim_base_non_root_and_package_installed():
    text = (DOCKER / "Dockerfile").read_text()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert re.fullmatch(r"FROM python:3\.\d+-slim", lines[0]), lines[0]
    users = [ln.split()[1] for ln in lines if ln.startswith("USER ")]
    assert users and users[-1] not in ("root", "0"), "the image must run as a non-root user"
    assert any(ln.startswith("RUN pip install") and ".[monitor]" in ln for ln in lines)
    for ln in lines:  # everything COPY'd exists in the build context (the project root)
        if ln.startswith("COPY "):
            for src in ln.split()[1:-1]:
                assert (ROOT / src).exists(), f"COPY source {src} is missing"
    cmd = next(ln for ln in lines if ln.startswith("CMD "))
    assert '"celery", "-A", "crawltasks", "worker"' in cmd


def local_command(command: list[str] | str) -> list[str]:
    """A compose command as it would run here: `celery` from this venv, `$$` unescaped."""
    args = shlex.split(command) if isinstance(command, str) else list(command)
    args = [a.replace("$$", "$") for a in args]
    if args[0] in ("celery", "python"):
        args = [sys.executable, "-m", "celery"] + args[1:] if args[0] == "celery" else [sys.executable] + args[1:]
    return args


def test_compose_worker_and_flower_commands_and_healthchecks_run_here(compose, settings: Settings, rt,
                                                                      tmp_path):
    """Each worker command starts a real worker on the test services, and its healthcheck passes."""
    services = compose["services"]
    hostname = socket.gethostname()
    procs: dict[str, Proc] = {}
    base_env = service_env(settings, HOSTNAME=hostname, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    port = free_port()
    try:
        for name in WORKERS:
            procs[name] = Proc(local_command(services[name]["command"]), base_env, tmp_path / f"{name}.log")
        flower_env = base_env | {k: str(v) for k, v in services["flower"]["environment"].items()
                                 if k.startswith("FLOWER_")} | {"FLOWER_ADDRESS": "127.0.0.1", "FLOWER_PORT": str(port)}
        procs["flower"] = Proc(local_command(services["flower"]["command"]), flower_env, tmp_path / "flower.log")
        for name in WORKERS:
            procs[name].wait_for(lambda p=procs[name]: " ready." in p.output(), name)
        for name in (*WORKERS, "flower"):
            test = services[name]["healthcheck"]["test"]
            env = flower_env if name == "flower" else base_env
            if test[0] == "CMD-SHELL":
                check = subprocess.run(["bash", "-c", test[1].replace("$$", "$")], env=env, cwd=ROOT,
                                       capture_output=True, text=True, timeout=60)
            else:
                check = None
                probe = local_command(test[1:])
                procs[name].wait_for(lambda probe=probe, env=env: subprocess.run(
                    probe, env=env, capture_output=True, timeout=30).returncode == 0, f"{name} healthcheck")
            if check is not None:
                assert check.returncode == 0, f"{name} healthcheck failed: {check.stdout}{check.stderr}"
                assert "pong" in check.stdout
    finally:
        for proc in procs.values():
            proc.stop()


def test_flower_refuses_a_public_address_without_auth(settings: Settings, tmp_path):
    env = service_env(settings, FLOWER_ADDRESS="0.0.0.0", FLOWER_PORT=str(free_port()))
    proc = subprocess.run([sys.executable, "-m", "celery", "-A", "crawltasks", "flower"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "without authentication" in proc.stderr and "Traceback" not in proc.stderr


def test_pip_install_of_the_project_ships_every_subpackage(tmp_path):
    """The image runs `pip install .`, not an editable install: a subpackage missing from the wheel
    breaks only there. Build the wheel and compare it with the package's folders."""
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(tmp_path)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    import zipfile

    (wheel,) = tmp_path.glob("crawltasks-*.whl")
    shipped = {name.rsplit("/", 1)[0] for name in zipfile.ZipFile(wheel).namelist() if name.endswith("/__init__.py")}
    packages = {str(p.parent.relative_to(ROOT)) for p in (ROOT / "crawltasks").rglob("__init__.py")}
    assert packages <= shipped, f"missing from the wheel: {sorted(packages - shipped)}"
    assert "celeryconfig.py" in zipfile.ZipFile(wheel).namelist()


def readme_cli_example() -> list[str]:
    """The `crawl` command of docker/README.md's "Your own spiders" example, as the cli service runs it."""
    section = (DOCKER / "README.md").read_text().split("## Your own spiders", 1)[1].split("\n## ", 1)[0]
    line = next(ln for ln in section.splitlines() if " run --rm cli crawl " in ln)
    return shlex.split(line.split(" run --rm cli ", 1)[1])


def test_docker_readme_own_spiders_example_runs_here(settings: Settings, rt, basic_server, tmp_path):
    """docker/README.md's "your own spiders": spider files in /app/spiders, named in
    CRAWLTASKS_SPIDER_MODULES, a worker as the image starts it and the `cli` service's command, run
    from a directory laid out like the image's /app. The console script must find `spiders.titles`
    there, though a script's directory, not the current one, is what Python puts on sys.path."""
    app = tmp_path / "app"
    shutil.copytree(DOCKER / "spiders", app / "spiders")
    assert "PYTHONPATH=/app" in (DOCKER / "Dockerfile").read_text()
    env = service_env(settings, CRAWLTASKS_SPIDER_MODULES="spiders.titles",
                      PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    image_cmd = ["celery", "-A", "crawltasks", "worker", "--loglevel", "INFO"]  # the Dockerfile's CMD
    worker = Proc(local_command(image_cmd), env, tmp_path / "worker.log", cwd=app)
    try:
        worker.wait_for(lambda: " ready." in worker.output(), "worker")
        args = [a if not a.startswith("https://example.com") else basic_server.url("/") for a in readme_cli_example()]
        cli = subprocess.run([str(Path(sys.executable).parent / "crawltasks"), *args], cwd=app, env=env,
                             capture_output=True, text=True, timeout=60)
        assert cli.returncode == 0, cli.stderr
        crawl_id = cli.stdout.strip().splitlines()[-1]
        from crawltasks.crawl import Crawl

        crawl = Crawl(crawl_id, rt)
        assert crawl.wait(timeout=120), crawl.stats()
        titles = {item["title"] for item in crawl.items()}
        assert {"Home", "Page 0", "Page 29"} <= titles, titles
        assert not crawl.failures("spider_not_found")
    finally:
        worker.stop()
