"""The `crawltasks` command as a subprocess, as users run it: with none of this process's
CRAWLTASKS_* variables, only those a test gives (the services, or HOME for the embedded mode)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any


def cli_env(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment without CRAWLTASKS_* variables, plus ``extra``."""
    return {k: v for k, v in os.environ.items() if not k.startswith("CRAWLTASKS_")} | extra


def run_cli(args: list[str], env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the command to its end; ``env`` adds to a clean environment."""
    return subprocess.run([sys.executable, "-m", "crawltasks.cli", *args], capture_output=True, text=True,
                          env=cli_env(env), timeout=timeout)


def start_cli(args: list[str], env: dict[str, str], **popen: Any) -> subprocess.Popen:
    """Start the command and return at once (its output in pipes)."""
    return subprocess.Popen([sys.executable, "-m", "crawltasks.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=cli_env(env), **popen)
