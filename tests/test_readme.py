"""Every ```sh block of README.md, run as a user would type it: each command line through bash, in a
temporary working directory, against a local fixture site.

The blocks are read from README.md (nothing is copied here), so an example that changes is run as it
now reads. The test makes only these substitutions: ``https://example.com/`` and ``URL`` become the
fixture site, ``CRAWL_ID`` the id of a crawl made earlier in the same flow, ``pause|resume|cancel`` its
three commands, ``[--yes]`` both forms; the files the examples read (``myspider.py``, ``mymodule.py``,
``seeds.txt``) are written first; the block that exports ``CRAWLTASKS_*`` variables keeps its
``export`` lines with the test session's Redis, Mongo and broker as their values. Long-running commands
(workers, Flower, the dashboard) run in the background until they answer, and are stopped at the end.
"""

from __future__ import annotations

import csv
import fcntl
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from crawltasks.settings import ENV_BROKER, ENV_MONGO, ENV_MONGO_DB, ENV_REDIS, Settings

from .clirun import cli_env
from .sites import SiteServer, html, page, serve, status
from .test_flower import Proc, free_port

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BIN = str(Path(sys.executable).parent)  # where `crawltasks` and `celery` are installed
WEB = "http://127.0.0.1:8080"  # `crawltasks web`'s default address, as the README runs it
SUMMARY = re.compile(r"^crawl (\S+) finished in ", re.MULTILINE)


# --- the README's blocks --------------------------------------------------------------------------

def sh_blocks(text: str) -> list[list[str]]:
    """The lines of every ```sh block, in order."""
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for line in text.splitlines():
        if current is None:
            if line.strip() == "```sh":
                current = []
        elif line.strip() == "```":
            blocks.append(current)
            current = None
        else:
            current.append(line)
    return blocks


def code_of(line: str) -> str:
    """The line without its trailing ``# comment`` (a ``#`` outside quotes, after a blank)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def commands(block: list[str]) -> list[str]:
    """The block's command lines, comments and blank lines left out."""
    return [code for code in map(code_of, block) if code.strip()]


def readme_block(first: str) -> list[str]:
    """The commands of the one ```sh block that has a command starting with ``first``."""
    found = [commands(b) for b in sh_blocks(README.read_text()) if any(c.startswith(first) for c in commands(b))]
    assert len(found) == 1, f"{len(found)} sh blocks of README.md have a command starting {first!r}"
    return found[0]


# The blocks, each named by a command that only it has, and which test runs it.
BLOCKS = {
    "pip install -e '.[embedded]' && ": "test_first_command_crawls",
    "pip install -e '.[dev]' && pytest": "not run: it is the command that runs this test",
    "crawltasks crawl --spider myspider.py": "test_command_line_block",
    "export CRAWLTASKS_BROKER_URL=": "test_workers_and_dashboard_blocks",
    "crawltasks web --host 0.0.0.0": "test_workers_and_dashboard_blocks",
}


def expand(code: str) -> list[str]:
    """``a|b|c`` (no blanks around the bars) is one line per word; ``[--flag]`` is both forms."""
    alternation = re.search(r"(?<![\w|-])([\w-]+(?:\|[\w-]+)+)(?![\w|-])", code)
    if alternation:
        return [code.replace(alternation.group(1), word, 1) for word in alternation.group(1).split("|")]
    optional = re.search(r" \[(--[\w-]+)\]", code)
    if optional:
        return [code.replace(optional.group(0), ""), code.replace(optional.group(0), " " + optional.group(1))]
    return [code]


def substitute(code: str, site: str, crawl_id: str | None = None, more: list[str] | None = None) -> str:
    """The README's placeholders replaced: the example site and ``URL`` by the fixture site,
    ``URL...`` by ``more`` URLs, ``CRAWL_ID`` by a crawl the flow made."""
    code = code.replace("https://example.com/", site)
    if "URL..." in code:
        code = code.replace("URL...", " ".join(more or [site]))
    code = re.sub(r"(?<![\w-])URL(?![\w-])", site, code)
    if "CRAWL_ID" in code:
        assert crawl_id, f"no crawl made yet for {code!r}"
        code = code.replace("CRAWL_ID", crawl_id)
    return code


# --- running lines ----------------------------------------------------------------------------------

def user_env(home: Path, **extra: str) -> dict[str, str]:
    """A user's shell: no CRAWLTASKS_*/FLOWER_* variables of this process, the installed commands on
    PATH, HOME (the embedded data directory lives under it) in the test's directory."""
    env = {k: v for k, v in cli_env({}).items() if not k.startswith("FLOWER_")}
    env.pop("PYTHONPATH", None)
    env.update(HOME=str(home), PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


@dataclass
class Shell:
    """Runs README lines with bash in one working directory and environment, after ``prelude``
    (the block's export lines, as a user's shell has them)."""

    cwd: Path
    env: dict[str, str]
    prelude: str = ""

    def script(self, code: str) -> str:
        return f"{self.prelude}\n{code}" if self.prelude else code

    def run(self, code: str, expect: int = 0, stdin: str = "", timeout: float = 120) -> subprocess.CompletedProcess:
        proc = subprocess.run(["bash", "-c", self.script(code)], cwd=self.cwd, env=self.env, input=stdin,
                              capture_output=True, text=True, timeout=timeout)
        assert proc.returncode == expect, \
            f"{code}\nexit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        return proc

    def start(self, code: str, log: Path, cwd: Path | None = None, **env: str) -> Proc:
        """A long-running line in the background (its process group is stopped by ``Proc.stop``)."""
        return Proc(["bash", "-c", self.script(code)], {**self.env, **env}, log, cwd=cwd or self.cwd)


@contextmanager
def port_8080() -> Iterator[None]:
    """Two test sessions on one machine take turns at `crawltasks web`'s default port."""
    with open(Path(tempfile.gettempdir()) / "crawltasks-test-readme-8080.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def answers(url: str, code: int = 200, **kw: object) -> bool:
    return requests.get(url, timeout=5, **kw).status_code == code


# --- the fixture site and the files the examples read -----------------------------------------------

class Gate:
    """A page that answers only while the gate is open: a crawl that links to it stays running
    (an event, not a delay) while the test pauses, resumes and cancels it."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.open.set()

    def route(self, server: SiteServer, path: str) -> tuple[int, dict[str, str], bytes]:
        self.open.wait(60)
        return 200, {}, html("Held", [])


@pytest.fixture
def gate() -> Iterator[Gate]:
    g = Gate()
    yield g
    g.open.set()


@pytest.fixture
def site(gate: Gate) -> Iterator[SiteServer]:
    """Five pages (one held by the gate), a 404 and a page no link leads to (for `add`)."""
    server = serve({"/": page("Home", ["/a", "/b", "/missing", "/held"]), "/a": page("A", ["/b", "/"]),
                    "/b": page("B", ["/a"]), "/missing": status(404), "/held": gate.route,
                    "/extra": page("Extra", [])})
    yield server
    server.stop()


@pytest.fixture
def small_site() -> Iterator[SiteServer]:
    """Two pages: the embedded crawls spend their time on politeness (0.5 s between requests), so fewer
    pages is a faster test."""
    server = serve({"/": page("Home", ["/a"]), "/a": page("A", ["/"])})
    yield server
    server.stop()


SPIDER = '''from crawltasks import Spider


class {cls}(Spider):
    name = "{name}"
    start_urls = ["{url}"]

    def parse(self, response):
        yield {{"title": response.title, "category": getattr(self, "category", None)}}
        yield from response.follow_all()
'''


def pages_of(path: Path) -> list[dict]:
    lines = path.read_text().splitlines()
    assert lines, f"{path.name} is empty"
    return [json.loads(line) for line in lines]


def paths(site: SiteServer, docs: list[dict]) -> set[str]:
    return {d["url"].removeprefix(site.base) for d in docs}


# --- the tests ----------------------------------------------------------------------------------------

def test_readme_sh_blocks_are_all_claimed() -> None:
    """Each ```sh block is run by one test here (or said why not): a new block fails this until it is."""
    blocks = [commands(b) for b in sh_blocks(README.read_text())]
    for block in blocks:
        claims = [first for first in BLOCKS if any(c.startswith(first) for c in block)]
        assert len(claims) == 1, f"a ```sh block of README.md claimed by {claims} (none: no test runs it): {block}"
    assert len(blocks) == len(BLOCKS)


def test_placeholders() -> None:
    assert expand("crawltasks pause|resume|cancel X") == [f"crawltasks {w} X" for w in ("pause", "resume", "cancel")]
    assert expand("crawltasks delete X [--yes]") == ["crawltasks delete X", "crawltasks delete X --yes"]
    assert expand("a | b") == ["a | b"]
    assert substitute("export CRAWLTASKS_BROKER_URL=x", "S") == "export CRAWLTASKS_BROKER_URL=x"
    assert substitute("crawltasks add CRAWL_ID URL...", "S", "c1", ["u1", "u2"]) == "crawltasks add c1 u1 u2"
    assert code_of("""crawl -s 'h={"a": "#b"}'   # note""") == """crawl -s 'h={"a": "#b"}'"""


def test_first_command_crawls(small_site: SiteServer, tmp_path: Path) -> None:
    """The README's first command, embedded (no service configured). pip is not run: this test runs in
    the environment it made (`pip install -e '.[embedded]'`); the part after `&&` is run as written."""
    (line,) = readme_block("pip install -e '.[embedded]' && ")
    install, crawl = line.split(" && ", 1)
    assert install == "pip install -e '.[embedded]'"
    shell = Shell(tmp_path, user_env(tmp_path / "home"))
    out = shell.run(substitute(crawl, small_site.url("/"))).stdout
    assert SUMMARY.search(out), out
    assert paths(small_site, pages_of(tmp_path / "pages.jsonl")) == {"/", "/a"}


# The test block (`pip install -e '.[dev]' && pytest`) is not run here: it is the command that runs
# this file, and a pytest inside pytest would run the whole suite again (and this test with it).


def test_command_line_block(small_site: SiteServer, tmp_path: Path) -> None:
    """"The command line" block, embedded, in a fresh directory holding a spider file, a spider module
    and a seeds file."""
    lines = readme_block("crawltasks crawl --spider myspider.py")
    site = small_site
    url = site.url("/")
    (tmp_path / "myspider.py").write_text(SPIDER.format(cls="BookSpider", name="readme-books", url=url))
    (tmp_path / "mymodule.py").write_text(SPIDER.format(cls="MySpider", name="readme-module", url=url))
    (tmp_path / "seeds.txt").write_text(f"{url}\n{site.url('/a')}\n")
    shell = Shell(tmp_path, user_env(tmp_path / "home"))
    crawl_id = None
    for line in lines:
        for code in expand(substitute(line, url, crawl_id)):
            if " delete " in code and "--yes" not in code:
                proc = shell.run(code, expect=1, stdin="n\n")  # it asks; "n" keeps the crawl
                assert "not deleted" in proc.stderr
                continue
            proc = shell.run(code)
            if " crawl " in code and "-o -" not in code:
                assert SUMMARY.search(proc.stdout), proc.stdout
            if "pages.csv" in code:
                with open(tmp_path / "pages.csv", newline="") as f:
                    rows = list(csv.DictReader(f))
                assert {r["url"].removeprefix(site.base) for r in rows} == {"/", "/a"}
                items = json.loads((tmp_path / "items.json").read_text())
                assert items and {i["category"] for i in items} == {"books"}, items  # -a category=books
            elif "--seeds-file" in code:
                assert paths(site, pages_of(tmp_path / "pages.jsonl")) == {"/", "/a"}
                assert "finished" in proc.stderr  # the summary, out of the feed's way
            elif "-s max_pages" in code:
                assert any(h.headers.get("x-team") == "crawl" for h in site.hits), "the -s headers were not sent"
            elif "--stats-json" in code:
                stats = json.loads((tmp_path / "stats.json").read_text())
                assert stats["state"] == "finished" and stats["stored"] == 2, stats
                crawl_id = stats["crawl_id"]  # the crawl `delete CRAWL_ID` removes
            elif code.startswith("crawltasks fetch"):
                printed = proc.stdout.splitlines()
                assert json.loads(printed[0]) == {"title": "Home", "category": None}, printed
                assert site.url("/a") in printed, printed
            elif " delete " in code:
                assert proc.stdout.strip() == f"deleted crawl {crawl_id}"
                gone = shell.run(f"crawltasks stats {crawl_id}", expect=2)
                assert "no crawl named" in gone.stderr
            elif code == "crawltasks --version":
                assert proc.stdout.startswith("crawltasks ")
    assert crawl_id


def readme_exports(lines: list[str], settings: Settings) -> str:
    """The block's export lines with the test session's services as values (the names stay)."""
    ours = {ENV_BROKER: settings.broker_url, ENV_REDIS: settings.redis_url, ENV_MONGO: settings.mongo_url,
            ENV_MONGO_DB: settings.mongo_db}
    exports = [line for line in lines if line.startswith("export ")]
    names = [re.match(r"export (\w+)=", line).group(1) for line in exports]
    assert names and set(names) <= set(ours), names
    return "\n".join(re.sub(r"=\S+", f"={ours[name]}", line, count=1)
                     for line, name in zip(exports, names, strict=True))


def test_workers_and_dashboard_blocks(settings: Settings, site: SiteServer, small_site: SiteServer, gate: Gate,
                                      tmp_path: Path) -> None:
    """"Running workers and Flower", then "Dashboard and metrics", as one shell session against the
    test's Redis, Mongo and broker: the workers, a crawl they run, the commands that look at and steer
    it, Flower and the dashboard."""
    lines = readme_block("export CRAWLTASKS_BROKER_URL=")
    dashboard = readme_block("crawltasks web --host 0.0.0.0")
    url = site.url("/")
    shell = Shell(tmp_path, user_env(tmp_path / "home"), prelude=readme_exports(lines, settings))
    procs: list[Proc] = []
    first = second = None  # the crawl that ran to its end, the one held running by the gate

    def start_workers(*codes: str) -> list[Proc]:
        """Worker lines, started together from the project root as the README says, each under a name
        of its own (the README's workers are on machines of their own) and logging its " ready." line
        (Celery's own environment variables: the lines stay as written); returns once all are ready."""
        started = []
        for code in codes:
            n = lines.index(code)
            started.append(shell.start(code, tmp_path / f"worker{n}.log", cwd=ROOT, CELERY_WORKER_LOGLEVEL="info",
                                       CELERY_WORKER_HOSTNAME=f"readme{n}@%h"))
        procs.extend(started)
        for proc, code in zip(started, codes, strict=True):
            proc.wait_for(lambda proc=proc: " ready." in proc.output(), code, timeout=60)
        return started

    try:
        workers = [code for code in lines if code.startswith("celery -A crawltasks worker")]
        assert len(workers) == 4, workers
        (everything,) = start_workers(workers[0])  # one worker for everything runs the first crawl alone

        for code in lines:
            if code.startswith(("export ", "celery -A crawltasks worker")):
                continue
            if code.startswith("FLOWER_"):
                port = free_port()  # in Flower's own FLOWER_PORT: 5555 may be another session's
                api = f"http://127.0.0.1:{port}/api/workers"
                flower = shell.start(code, tmp_path / "flower.log", FLOWER_PORT=str(port))
                procs.append(flower)
                data = flower.wait_for(lambda api=api: requests.get(api, timeout=10).json(), "flower's API, no login",
                                       timeout=60)
                assert any(name.startswith("readme") for name in data), data
                flower.stop()
                continue
            for one in expand(substitute(code, url, second if " pause" in code else first,
                                         [site.url("/extra"), site.url("/a")])):
                if one == "crawltasks web":
                    with port_8080():
                        web = shell.start(one, tmp_path / "web.log")
                        procs.append(web)
                        crawls = web.wait_for(lambda: requests.get(f"{WEB}/api/crawls", timeout=5).json(), one,
                                              timeout=60)
                        assert {first, second} <= {c["crawl_id"] for c in crawls["crawls"]}, crawls
                        assert answers(WEB + "/") and answers(f"{WEB}/crawl/{first}")
                        web.stop()
                    continue
                if "--detach" in one:
                    gate.open.clear()  # the crawl stays running until the commands below have steered it
                proc = shell.run(one)
                out = proc.stdout
                if "--output pages.jsonl" in one:
                    assert {"/", "/a", "/b"} <= paths(site, pages_of(tmp_path / "pages.jsonl"))
                    if first is None:
                        first = SUMMARY.search(out).group(1)
                        stopping = threading.Thread(target=everything.stop)  # while the next ones start
                        stopping.start()
                        start_workers(*workers[1:])  # ... or one per stage family, for the rest
                        stopping.join()
                    else:
                        assert "to pages.jsonl" in out
                elif "--detach" in one:
                    second = out.strip()
                    assert re.fullmatch(r"\S+", second), out
                elif re.match(r"crawltasks stats \S+$", one):
                    assert re.search(r"state\s+finished", out), out
                elif " failures " in one:
                    assert site.url("/missing") in out and out.rstrip().endswith("1 failure(s)"), out
                elif " retry-failed " in one:
                    assert "sending 1 failed request(s) again" in out and SUMMARY.search(out), out
                elif re.match(r"crawltasks (pause|resume|cancel) ", one):
                    state = {"pause": "paused", "resume": "running", "cancel": "cancel"}[one.split()[1]]
                    assert out.startswith(f"{second}: {state}") and "unchanged" not in out, out
                    if " cancel " in one:
                        gate.open.set()
                elif " add " in one:
                    assert out.strip() == f"{first}: 1 new of 2 URL(s)", out  # /extra; /a was crawled
                elif " close " in one:
                    assert out.startswith(f"{first}: "), out  # not a feed crawl: nothing held it open
                elif one == "crawltasks list":
                    assert first in out and second in out, out
                elif "--watch" in one:
                    assert "finished" in out, out
        assert first and second

        for code in dashboard:
            if code == "crawltasks web":
                assert code in lines  # the same line as in the workers block, run there
                continue
            if "--basic-auth" in code:
                with port_8080():
                    web = shell.start(code, tmp_path / "web-public.log")
                    procs.append(web)
                    web.wait_for(lambda: answers(WEB + "/healthz"), code, timeout=60)
                    assert answers(WEB + "/", 401)  # a login is required, and the password is openssl's
                    web.stop()
            elif "--web" in code:  # embedded mode: no service configured, none of the exports
                embedded = Shell(tmp_path, user_env(tmp_path / "embedded-home"))
                proc = embedded.run(substitute(code, small_site.url("/")))
                crawl_id = SUMMARY.search(proc.stdout).group(1)
                assert re.search(rf"^dashboard: http://127\.0\.0\.1:\d+/crawl/{crawl_id}$", proc.stderr, re.M), \
                    proc.stderr
            else:
                shell.run(substitute(code, url, first))
    finally:
        gate.open.set()
        for proc in reversed(procs):
            proc.stop()
