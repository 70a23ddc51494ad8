"""The command line Scrapy users expect, run as users run it: spider files, -s/-a, feeds, stdin seeds,
delete, fetch, --version, --stats-json, and the README's "From Python" example in a plain script."""

import csv
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .sites import page, serve

SPIDER_FILE = '''
from crawltasks import Spider


class Tagged(Spider):
    def __init__(self, crawl_id="", tag="none", **kwargs):
        super().__init__(crawl_id, **kwargs)
        self.tag = tag

    def parse(self, response):
        yield {"tag": self.tag, "title": response.title, "pid": __import__("os").getpid(), "tags": ["a", "b"]}
        yield from response.follow_all()
'''


def clean_env(home):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLTASKS_")}
    env["HOME"] = str(home)  # the embedded data directory lives under it
    env.pop("PYTHONPATH", None)
    return env


def run_cli(args, home, timeout=120, cwd=None, stdin=None, python_flags=()):
    return subprocess.run([sys.executable, *python_flags, "-m", "crawltasks.cli", *args], capture_output=True,
                          text=True, env=clean_env(home), timeout=timeout, cwd=cwd, input=stdin)


def as_external_worker(home, crawl_id):
    """What a worker elsewhere (another directory, nothing on sys.path) finds in the crawl's saved options:
    (spider, spider_path, the class name it resolves to)."""
    code = textwrap.dedent(f"""
        from crawltasks import runtime
        from crawltasks.local.embedded import EmbeddedServices, data_dir
        from crawltasks.spiders import resolve_spider
        with EmbeddedServices(data_dir()) as emb:
            opts = runtime.configure(emb.settings).options({crawl_id!r})
            cls = resolve_spider(opts.spider, [], opts.spider_path)
            print(opts.spider, opts.spider_path, cls.__name__, cls(**opts.spider_args).tag)
    """)
    proc = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, env=clean_env(home),
                          cwd="/", timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def quotes_site():
    quote = '<div class="quote"><span class="text">{}</span></div>'
    return {"/": page("Home", ["/a", "/b"], quote.format("first")),
            "/a": page("A", ["/"], quote.format("second")),
            "/b": page("B", [], quote.format("third"))}


@pytest.fixture(scope="module")
def site():
    server = serve(quotes_site())
    yield server
    server.stop()


FAST = ["--host-delay", "0", "--host-concurrency", "8", "--quiet"]


def test_version(tmp_path):
    proc = run_cli(["--version"], tmp_path)
    assert proc.returncode == 0 and re.fullmatch(r"crawltasks \d+\.\d+\.\d+\n", proc.stdout), proc


def test_spider_file_with_workers_arguments_and_csv_items(site, tmp_path):
    work = tmp_path / "project"
    work.mkdir()
    (work / "myspider.py").write_text(SPIDER_FILE)
    proc = run_cli(["crawl", site.url("/"), "--spider", "myspider.py", "--workers", "2", "-a", "tag=blue",
                    "--crawl-id", "file-1",
                    "--items", str(tmp_path / "items.csv"), "-o", str(tmp_path / "pages.json"), *FAST],
                   tmp_path, cwd=work, python_flags=["-P"])  # -P: the current directory is not on sys.path
    assert proc.returncode == 0, proc.stderr
    with open(tmp_path / "items.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["title"] for r in rows) == ["A", "B", "Home"]
    assert {r["tag"] for r in rows} == {"blue"}  # -a reached the spider on whichever worker parsed
    assert {json.dumps(["a", "b"])} == {r["tags"] for r in rows}
    pages = json.loads((tmp_path / "pages.json").read_text())
    assert sorted(p["url"] for p in pages) == [site.url("/"), site.url("/a"), site.url("/b")]
    assert all("type" not in p for p in pages)
    assert as_external_worker(tmp_path, "file-1") == [f"{work.resolve()}/myspider.py:Tagged", "None", "Tagged", "blue"]


def test_module_class_from_the_current_directory(site, tmp_path):
    work = tmp_path / "project"
    work.mkdir()
    (work / "spiderdefs.py").write_text(SPIDER_FILE)
    out = tmp_path / "all.jsonl"
    proc = run_cli(["crawl", site.url("/"), "--spider", "spiderdefs:Tagged", "--workers", "2", "-a", "tag=x",
                    "--crawl-id", "module-1",
                    "-o", str(out), *FAST], tmp_path, cwd=work, python_flags=["-P"])
    assert proc.returncode == 0, proc.stderr
    docs = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(d["type"] for d in docs) == ["item"] * 3 + ["page"] * 3
    assert {d["tag"] for d in docs if d["type"] == "item"} == {"x"}
    assert as_external_worker(tmp_path, "module-1") == ["spiderdefs:Tagged", str(work.resolve()), "Tagged", "x"]


def test_unknown_spider_file_is_one_line(tmp_path):
    proc = run_cli(["crawl", "http://127.0.0.1:9/", "--spider", "nothere.py"], tmp_path, cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "nothere.py" in proc.stderr and "Traceback" not in proc.stderr


def test_stdout_feed_is_only_json_lines_with_seeds_from_stdin(site, tmp_path):
    seeds = f"# seeds\n{site.url('/a')}\n\n{site.url('/b')}\n"
    proc = run_cli(["crawl", "--seeds-file", "-", "--max-depth", "0", "-o", "-", *FAST], tmp_path, stdin=seeds)
    assert proc.returncode == 0, proc.stderr
    docs = [json.loads(line) for line in proc.stdout.splitlines()]  # every stdout line is JSON
    assert sorted(d["url"] for d in docs) == [site.url("/a"), site.url("/b")]
    assert {d["type"] for d in docs} == {"page"}
    assert "finished" in proc.stderr  # the summary went to stderr


def test_settings_are_typed_then_stats_json_then_delete(site, tmp_path):
    stats_file = tmp_path / "stats.json"
    proc = run_cli(["crawl", site.url("/"), "--crawl-id", "typed-1", "-s", "max_pages=2",
                    "-s", 'headers={"X-Team": "crawl"}', "-s", "obey_robots=false",
                    "--stats-json", str(stats_file), *FAST], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "pages/s" in proc.stdout and "scheduled" in proc.stdout  # the summary table
    stats = json.loads(stats_file.read_text())
    assert stats["crawl_id"] == "typed-1" and stats["state"] == "finished"
    assert stats["scheduled"] == 2 and stats["stored"] == 2  # max_pages arrived as the number 2
    assert {"failures_by_reason", "pages_per_second", "elapsed", "items"} <= set(stats)
    assert any(h.headers.get("x-team") == "crawl" for h in site.hits)  # the JSON object became headers

    refused = run_cli(["delete", "typed-1"], tmp_path, stdin="n\n")
    assert refused.returncode == 1
    assert run_cli(["stats", "typed-1"], tmp_path).returncode == 0
    deleted = run_cli(["delete", "typed-1", "--yes"], tmp_path)
    assert deleted.returncode == 0, deleted.stderr
    gone = run_cli(["stats", "typed-1"], tmp_path)
    assert gone.returncode == 2 and "no crawl named 'typed-1'" in gone.stderr
    export = run_cli(["export", "typed-1", "-o", str(tmp_path / "x.jsonl")], tmp_path)
    assert export.returncode == 2


@pytest.mark.parametrize(("args", "message"), [
    (["-s", "max_pages=many"], "-s max_pages: expected int"),
    (["-s", "no_such=1"], "-s no_such: unknown crawl option"),
    (["-s", "host_delay=-1"], "host_delay must be >= 0"),
    (["-s", "store_html=perhaps"], "expected true or false"),
    (["-s", "novalue"], "NAME=VALUE"),
    (["-a", "1bad=x"], "-a 1bad"),
    (["-o", "out.txt"], "unknown output format"),
    (["--items", "/no/such/dir/items.csv"], "no directory"),
    (["--seeds-file", "/no/such/seeds.txt"], "--seeds-file"),
])
def test_bad_options_are_one_line_before_anything_starts(args, message, tmp_path):
    proc = run_cli(["crawl", "http://127.0.0.1:9/", *args], tmp_path, cwd=tmp_path, timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr
    assert not (tmp_path / ".local").exists()  # no service was started


def test_data_dir_after_the_command(tmp_path):
    proc = run_cli(["stats", "nothing", "--data-dir", str(tmp_path / "d")], tmp_path)
    assert proc.returncode == 2 and "no crawl named" in proc.stderr
    assert (tmp_path / "d").is_dir() and not (tmp_path / ".local").exists()


def test_fetch_prints_items_and_requests(site, tmp_path):
    (tmp_path / "myspider.py").write_text(SPIDER_FILE)
    proc = run_cli(["fetch", site.url("/"), "--spider", "myspider.py", "-a", "tag=t"], tmp_path, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    item = json.loads(lines[0])
    assert item["tag"] == "t" and item["title"] == "Home"
    assert lines[1:] == [site.url("/a"), site.url("/b")]
    assert not (tmp_path / ".local").exists()  # nothing stored, no service started

    missing = run_cli(["fetch", site.url("/nope")], tmp_path)
    assert missing.returncode == 1 and "http_404" in missing.stderr and "Traceback" not in missing.stderr


def readme_python_example() -> str:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme.split("## From Python", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_from_python_example_runs_as_written(site, tmp_path):
    code = readme_python_example()
    assert "https://quotes.example/" in code and "run(" in code
    code = code.replace("https://quotes.example/", site.url("/")).replace('"quotes.example"', '"127.0.0.1"')
    script = tmp_path / "example.py"
    script.write_text(code)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=clean_env(tmp_path),
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["finished", "3", "pages", "3", "items"]


def test_start_crawl_without_services_fails_at_once(tmp_path):
    code = textwrap.dedent("""
        from crawltasks import start_crawl
        from crawltasks.monitor.health import ServiceDown
        try:
            start_crawl("http://127.0.0.1:9/")
        except ServiceDown as exc:
            print("DOWN", exc)
    """)
    env = {**clean_env(tmp_path), "CRAWLTASKS_MONGO_URL": "mongodb://127.0.0.1:9/"}  # nothing answers there
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("DOWN MongoDB at mongodb://127.0.0.1:9/ is unreachable"), proc.stdout
