"""The benchmark harness on a tiny site: the generator is deterministic and the table/JSON code works.

No timing is asserted: the benchmark's figures are for people to read.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("psutil")

from bench import run, site  # noqa: E402


def test_site_generator_is_deterministic(tmp_path: Path):
    spec = site.SiteSpec(pages=30, links=8, page_kb=2, seed=7)
    a = site.generate(spec, tmp_path / "a")
    b = site.generate(spec, tmp_path / "b")
    assert site.digest(a) == site.digest(b)
    other = site.generate(site.SiteSpec(pages=30, links=8, page_kb=2, seed=8), tmp_path / "a")
    assert site.digest(other) != site.digest(a)
    assert site.manifest(a)["pages"] == 30
    # Reused, not regenerated, when asked again.
    assert site.generate(spec, tmp_path / "a") == a


def test_every_page_is_reachable_from_the_seed(tmp_path: Path):
    spec = site.SiteSpec(pages=60, links=6, page_kb=1)
    root = site.generate(spec, tmp_path)
    seen, todo = {0}, [0]
    while todo:
        html = (root / "p" / f"{todo.pop()}.html").read_text()
        for target in re.findall(r'href="(?:\./|/p/)?(\d+)\.html', html):
            if int(target) not in seen:
                seen.add(int(target))
                todo.append(int(target))
    assert seen == set(range(60))


def test_page_shape_follows_the_options():
    spec = site.SiteSpec(pages=1000, links=20, page_kb=12)
    body = site.render_page(spec, 5)
    assert 11 * 1024 < len(body) < 13 * 1024
    assert body.count(b"<a href=") == 20
    big = site.render_big_page(site.SiteSpec.big(pages=300), 3)
    assert 100 * 1024 <= len(big) <= 310 * 1024
    assert big.count(b"<a ") > 300


def test_table_shows_ratios_against_peers():
    rows = [run.Row("crawltasks", 1000, 2.0, 120.0, 200.0, crawl_seconds=1.5,
                    redis_commands={"evalsha": 3000, "lpush": 250}, celery_messages=250),
            run.Row("scrapy", 1000, 10.0, 90.0, 90.0), run.Row("wget", 1000, 1.0, 5.0, 5.0)]
    table = run.format_table("site: test", rows)
    assert "5.00x" in table  # 500 pages/s against 100
    assert "0.50x" in table  # against wget's 1000
    assert "Redis commands/page 3.2" in table and "Celery messages/page 0.250" in table
    d = rows[0].to_dict()
    assert d["pages_per_s"] == 500.0 and d["redis_commands_per_page"] == 3.25


def test_harness_runs_crawltasks_on_a_tiny_site(tmp_path: Path):
    out = tmp_path / "result.json"
    status = run.main(["--pages", "30", "--links", "5", "--page-kb", "2", "--site", "pages",
                       "--skip", "scrapy,wget", "--server", "python", "--workers", "2",
                       "--workdir", str(tmp_path / "work"), "--cache-dir", str(tmp_path / "sites"),
                       "--timeout", "120", "--json", str(out)])
    assert status == 0
    doc = json.loads(out.read_text())
    (result,) = doc["sites"]
    assert result["server"] == "python"
    (row,) = result["rows"]
    assert row["tool"] == "crawltasks" and row["returncode"] == 0
    assert row["pages"] == 30 and row["server_requests"] >= 30
    assert row["peak_worker_mb"] > 0 and row["seconds"] > 0
    assert row["redis_commands_per_page"] > 0
    assert row["celery_messages"] > 0
