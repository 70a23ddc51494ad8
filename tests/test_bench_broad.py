"""The broad-crawl benchmark: the lab is deterministic and reachable, the log analysis counts right,
and the harness runs end to end on a tiny lab. No timing is asserted; no Redis is touched (crawltasks
runs embedded)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

pytest.importorskip("psutil")

from bench import broad, labsite, serverlog  # noqa: E402


def _line(host: str, start: float, end: float, uri: str = "/p/1.html", status: int = 200, conn: int = 1) -> str:
    return f"{host} {end:.3f} {end - start:.3f} 40000 {conn} {status} 12000 {uri}\n"


def test_log_analysis_on_a_hand_made_log(tmp_path: Path):
    a, b = "127.1.0.1", "127.1.0.2"
    lines = [
        _line(a, 100.000, 100.100, "/robots.txt"),
        _line(a, 100.500, 100.600, "/"),  # gap 0.5
        _line(a, 100.900, 101.400),  # gap 0.4 < 0.45: a gap violation
        _line(a, 101.400, 101.500),  # gap 0.5; starts as the one before ends: no overlap
        _line(a, 101.450, 101.700),  # gap 0.05: a violation; 2 in flight (limit 2), fine
        _line(a, 101.460, 101.600),  # gap 0.01: a violation; 3 in flight: one concurrency violation
        _line(b, 100.000, 100.200, "/robots.txt", conn=2),
        _line(b, 100.500, 102.000, "/", status=404, conn=2),  # gap 0.5
        "garbage line\n",
    ]
    log = tmp_path / "access.log"
    log.write_text("".join(lines))
    reqs = serverlog.read_log(log)
    assert len(reqs) == 8 and reqs[0].start == 100.0 and reqs[2].end == 101.4
    got = serverlog.analyze(reqs, delay=0.5, concurrency=2)
    assert got["requests"] == 8 and got["robots_requests"] == 2 and got["hosts"] == 2
    assert got["statuses"] == {"200": 7, "404": 1}
    assert got["busiest_host"] == a and got["busiest_host_requests"] == 6
    assert got["limit_seconds"] == 3.0  # 6 requests x 0.5 s
    assert got["gap_violations"] == 3 and got["concurrency_violations"] == 1
    assert got["min_gap"] == 0.01 and got["p1_gap"] == 0.01 and got["gaps"] == 6
    assert got["max_host_in_flight"] == 3 and got["connections"] == 2
    # In flight: total request time 0.1+0.1+0.5+0.1+0.25+0.14 + 0.2+1.5 = 2.89 s over 100.0 .. 102.0.
    assert got["span_seconds"] == 2.0 and got["mean_in_flight"] == pytest.approx(2.89 / 2, abs=0.01)
    # 101.46: a's three (101.4-101.5, 101.45-101.7, 101.46-101.6) and b's 100.5-102.0.
    assert got["max_in_flight"] == 4


def test_overlap_helpers():
    assert serverlog.max_in_flight([(0, 1), (1, 2), (2, 3)]) == 1  # touching intervals do not overlap
    assert serverlog.max_in_flight([(0, 3), (1, 2), (1.5, 2.5)]) == 3
    assert serverlog.over_limit([(0, 3), (1, 2), (1.5, 2.5), (2.6, 2.7)], 2) == 1
    assert serverlog.over_limit([(0, 1), (0, 1), (0, 1), (0, 1)], 2) == 2
    assert serverlog.percentile([5, 1, 4, 2, 3], 1) == 1 and serverlog.percentile([5, 1, 4, 2, 3], 60) == 3
    assert serverlog.percentile([], 1) is None
    assert serverlog.analyze([], 0.5, 2) == {"requests": 0}
    # Start times are exact to the log's resolution, without float noise.
    r = serverlog.parse_line("127.1.0.1 1795440912.362 0.300 59566 1 200 6 /\n")
    assert r is not None and r.start == 1795440912.062 and r.uri == "/" and r.client_port == 59566


def test_lab_is_deterministic_and_every_page_reachable(tmp_path: Path):
    spec = labsite.LabSpec(hosts=6, pages=21, page_kb=2, port=18000, seed=3)
    a, b = labsite.generate(spec, tmp_path / "a"), labsite.generate(spec, tmp_path / "b")
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
    assert labsite.manifest(a)["hosts"] == 6
    assert labsite.render_page(spec, 0, 1) != labsite.render_page(labsite.LabSpec(hosts=6, pages=21, seed=4), 0, 1)
    assert spec.seeds()[0] == "http://127.1.0.1:18000/" and labsite.host_address(250) == "127.1.1.1"
    cross = 0
    for h, addr in enumerate(spec.addresses):  # from each root, its own host's pages, through its own links
        assert "Disallow: /private/" in (a / addr / "robots.txt").read_text()
        seen, todo = {0}, [0]
        while todo:
            i = todo.pop()
            body = (a / addr / ("index.html" if i == 0 else f"p/{i}.html")).read_text()
            for href in re.findall(r'href="([^"#]+)', body):
                if href.startswith("http://"):
                    assert href.startswith("http://127.1.0.") and ":18000/" in href and f"//{addr}:" not in href
                    cross += 1
                    continue
                j = 0 if href == "/" else int(re.search(r"(\d+)\.html$", href).group(1))
                assert href.startswith("/") or i != 0  # relative hrefs only below /p/
                if j not in seen:
                    seen.add(j)
                    todo.append(j)
        assert seen == set(range(21)), h
    assert cross > 0


def test_table_and_json_of_rows():
    log = {"requests": 41, "robots_requests": 1, "statuses": {"200": 41}, "hosts": 1, "connections": 2,
           "busiest_host": "127.1.0.1", "busiest_host_requests": 41, "limit_seconds": 20.5,
           "mean_in_flight": 1.5, "max_in_flight": 2, "gap_violations": 0, "concurrency_violations": 0,
           "max_host_in_flight": 2, "min_gap": 0.5, "p1_gap": 0.5}
    rows = [broad.BroadRow("crawltasks", 0.1, 40, 20.5, cpu_by_process={"crawltasks.cli": 0.4}, log=log),
            broad.BroadRow("scrapy", 0.1, 40, 41.0, log=log),
            broad.BroadRow("crawltasks", 0.1, 0, 1.0, returncode=1, note="exit 1: boom")]
    table = broad.format_table("t", rows, 0.5, 2)
    assert "2.00x" in table and "100%" in table and "50%" in table and "10.00" in table  # 0.4 s / 40 pages
    assert "exit 1: boom" in table and "gap<0.45s" in table and "conc>2" in table
    d = rows[0].to_dict()
    assert d["pages_per_s"] == 2.0 and d["limit_share"] == 1.0
    assert d["cpu_ms_per_page"] == 10.0 and json.dumps(d)


def test_politeness_flags_reach_both_crawlers(tmp_path: Path):
    args = broad.parse_args([])
    assert args.latency == [0.1, 1.0] and args.hosts == 500 and args.pages_per_host == 40
    cmd = broad.crawltasks_cmd(["http://127.1.0.1:1/"], tmp_path / "o.jsonl", args)
    assert not any(c.startswith("--host-") for c in cmd)  # crawltasks' own defaults: no tuning flag
    args = broad.parse_args(["--delay", "0.2", "--host-concurrency", "3", "--crawltasks-arg=--workers=2"])
    cmd = broad.crawltasks_cmd(["http://127.1.0.1:1/"], tmp_path / "o.jsonl", args)
    assert cmd[-5:] == ["--host-delay", "0.2", "--host-concurrency", "3", "--workers=2"]
    settings = broad.scrapy_settings(args)
    assert settings["DOWNLOAD_DELAY"] == 0.2 and settings["CONCURRENT_REQUESTS_PER_DOMAIN"] == 3
    assert settings["ROBOTSTXT_OBEY"] is True and settings["RANDOMIZE_DOWNLOAD_DELAY"] is False
    with pytest.raises(SystemExit):
        broad.parse_args(["--skip", "wget"])


@pytest.mark.parametrize("server", ["nginx", "python"])
def test_harness_end_to_end_on_a_tiny_lab(tmp_path: Path, server: str):
    out = tmp_path / "result.json"
    tools = {"crawltasks", "scrapy"} if importlib.util.find_spec("scrapy") else {"crawltasks"}  # bench extra
    status = broad.main(["--hosts", "4", "--pages-per-host", "5", "--page-kb", "2", "--latency", "0.05",
                         "--delay", "0.2", "--server", server, "--workdir", str(tmp_path / "work"),
                         "--cache-dir", str(tmp_path / "labs"), "--timeout", "120", "--json", str(out),
                         *(["--skip", "scrapy"] if "scrapy" not in tools else [])])
    doc = json.loads(out.read_text())
    assert doc["lab"]["hosts"] == 4 and doc["lab"]["pages"] == 5
    (run,) = doc["runs"]
    assert run["latency"] == 0.05
    rows = {r["tool"]: r for r in run["rows"]}
    assert set(rows) == tools
    for tool, row in rows.items():
        assert row["server"] in (server, "python")  # nginx without its echo module falls back to python
        assert row["returncode"] == 0, (tool, row["note"])
        assert row["pages"] == 20, tool
        log = row["log"]
        # Every page once (roots through the dupe filter) plus robots.txt of each host, from the server's view.
        assert log["hosts"] == 4 and log["robots_requests"] == 4 and log["statuses"].get("200", 0) >= 24, tool
        assert log["busiest_host_requests"] >= 6 and log["limit_seconds"] == pytest.approx(
            0.2 * log["busiest_host_requests"]), tool
        assert log["max_host_in_flight"] >= 1 and log["max_in_flight"] >= log["max_host_in_flight"]
        assert row["cpu_ms_per_page"] is not None and row["limit_share"] is not None
    assert status == 0
