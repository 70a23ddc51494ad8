"""``celery -A crawltasks worker`` started from a user's directory that holds a ``celeryconfig.py`` of
its own: the worker must still have the project's queues and routes (celery puts the current
directory first on ``sys.path``, where a module named ``celeryconfig`` used to win)."""

from __future__ import annotations

import sys

from crawltasks.settings import Settings
from crawltasks.worker.app import celeryconfig

from .test_flower import Proc, service_env

ROGUE = """task_default_queue = "somebody-elses-queue"
task_queues = ()
task_routes = {}
imports = ()
"""


def test_a_users_celeryconfig_in_the_working_directory_does_not_replace_ours(settings: Settings, tmp_path):
    (tmp_path / "celeryconfig.py").write_text(ROGUE)
    worker = Proc([sys.executable, "-m", "celery", "-A", "crawltasks", "worker", "--loglevel", "INFO"],
                  service_env(settings), tmp_path / "worker.log", cwd=tmp_path)
    try:
        worker.wait_for(lambda: " ready." in worker.output(), "worker")
        banner = worker.output()
        for queue in celeryconfig.task_queues:
            assert f".> {queue.name} " in banner, banner[:3000]
        assert "somebody-elses-queue" not in banner
        assert ". crawltasks.fetch" in banner and ". crawltasks.store" in banner
    finally:
        worker.stop()
