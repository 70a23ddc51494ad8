"""The command line before any service: its grammar, the -s/-a/--seeds-file spellings, the mistakes
that end a command at once (exit 2, one line) and how each kind of error becomes an exit status.
All in this process (``main``), with nothing running."""

from __future__ import annotations

import argparse
import re
import signal
import sys

import pytest

from crawltasks import cli
from crawltasks.cli import main
from crawltasks.cli.options import (
    OptionError,
    convert,
    crawl_options,
    locate,
    parse_settings,
    parse_spider_args,
    read_seeds,
    split_pair,
)
from crawltasks.cli.parser import UsageError, build_parser, default_workers, non_negative_float, positive_int
from crawltasks.cli.running import check_worker_flags, resume_command, summary
from crawltasks.monitor.health import Problem, ServiceDown, StateLost
from crawltasks.settings import ENV_BROKER

from . import spiders

pytestmark = pytest.mark.usefixtures("keep_root_logging")  # ``main`` sets up logging for its moment


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --- the grammar ---------------------------------------------------------------------------------
def test_number_types_refuse_words_and_negatives():
    assert positive_int("7") == 7 and non_negative_float("0.5") == 0.5
    for parse, bad in ((positive_int, "x"), (positive_int, "-1"), (non_negative_float, "soon"),
                       (non_negative_float, "-0.1")):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(bad)


def test_default_workers_is_one_more_than_the_cores(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    assert default_workers() == 5
    monkeypatch.setattr("os.cpu_count", lambda: None)
    assert default_workers() == 2


def test_the_parser_reads_every_command_and_data_dir_on_either_side():
    p = build_parser()
    args = p.parse_args(["crawl", "http://a.test/", "--max-depth", "2", "--host-delay", "0.25", "--dedupe", "bloom",
                         "--allowed-domain", "a.test", "--allowed-domain", "b.test", "--fetch-threads", "9",
                         "-s", "max_pages=5", "-a", "cat=books", "--data-dir", "/tmp/after"])
    assert (args.command, args.urls, args.max_depth, args.host_delay) == ("crawl", ["http://a.test/"], 2, 0.25)
    assert args.allowed_domains == ["a.test", "b.test"] and args.fetch_concurrency == 9
    assert args.set == ["max_pages=5"] and args.spider_arg == ["cat=books"] and args.data_dir == "/tmp/after"
    assert p.parse_args(["--data-dir", "/tmp/before", "list"]).data_dir == "/tmp/before"
    for command in ("pause", "resume", "cancel", "close"):
        assert vars(p.parse_args([command, "c-1"])).items() >= {"command": command, "crawl_id": "c-1"}.items()
    web = p.parse_args(["web", "--port", "0", "--basic-auth", "u:p"])
    assert (web.host, web.port, web.basic_auth, web.refresh) == ("127.0.0.1", 0, "u:p", 2.0)
    retry = p.parse_args(["retry-failed", "c-1", "--reason", "http_500", "--no-worker", "--detach"])
    assert (retry.reason, retry.no_worker, retry.detach, retry.quiet) == ("http_500", True, True, False)


def test_a_parser_mistake_is_one_line_naming_help():
    says = r"^argument --workers: expected a whole number, got 'many' \(see 'crawltasks crawl --help'\)$"
    with pytest.raises(UsageError, match=says):
        build_parser().parse_args(["crawl", "--workers", "many"])


# --- -s, -a, --seeds-file ----------------------------------------------------------------------
@pytest.mark.parametrize(("name", "raw", "value"), [
    ("max_pages", "100", 100), ("host_delay", "1", 1.0), ("host_delay", "0.5", 0.5),
    ("obey_robots", "off", False), ("obey_robots", "Yes", True), ("max_depth", "none", None),
    ("user_agent", '"quoted"', "quoted"), ("user_agent", "plain words", "plain words"), ("user_agent", "12", "12"),
    ("allowed_domains", "a.test, b.test,", ["a.test", "b.test"]), ("allowed_domains", '["x.test"]', ["x.test"]),
    ("headers", '{"X-A": "1"}', {"X-A": "1"}),
])
def test_option_values_take_their_fields_types(name, raw, value):
    assert convert(name, raw) == value


@pytest.mark.parametrize(("name", "raw", "says"), [
    ("obey_robots", "maybe", "expected true or false"), ("max_pages", "1.5", "expected int"),
    ("max_pages", "true", "expected int"), ("host_delay", "fast", "expected float"),
    ("headers", "[1]", "expected dict"),
])
def test_option_values_of_the_wrong_type_are_refused(name, raw, says):
    with pytest.raises(OptionError, match=says):
        convert(name, raw)


def test_settings_pairs_are_named_known_and_checked_as_a_whole():
    assert parse_settings(None) == {} and parse_settings(["max_pages=3", "obey_robots=false"]) == {
        "max_pages": 3, "obey_robots": False}
    for pairs, says in ((["max_pages"], "expects NAME=VALUE"), (["=3"], "expects NAME=VALUE"),
                        (["spider=x"], "use --spider"), (["spider_args=x"], "use -a NAME=VALUE"),
                        (["no_such=1"], "unknown crawl option"), (["dedupe=sometimes"], "^-s: ")):
        with pytest.raises(OptionError, match=says):
            parse_settings(pairs)
    assert split_pair(" k = v=w", "-a") == ("k", " v=w")


def test_spider_arguments_are_strings_with_usable_names():
    assert parse_spider_args(["cat=books", "n=3"]) == {"cat": "books", "n": "3"}
    for bad in ("not-a-name=1", "crawl_id=x"):
        with pytest.raises(OptionError, match="not a usable argument name"):
            parse_spider_args([bad])


def test_seeds_file_skips_blanks_and_comments_and_reads_stdin(tmp_path, monkeypatch):
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("# shop\nhttp://a.test/\n\n  http://b.test/x  \n#http://c.test/\n")
    assert read_seeds(str(seeds)) == ["http://a.test/", "http://b.test/x"] and read_seeds(None) == []
    monkeypatch.setattr(sys, "stdin", _Lines("http://d.test/\n"))
    assert read_seeds("-") == ["http://d.test/"]
    with pytest.raises(OptionError, match="--seeds-file: No such file or directory: .*missing.txt"):
        read_seeds(str(tmp_path / "missing.txt"))


class _Lines:
    def __init__(self, text: str) -> None:
        self.text = text

    def read(self) -> str:
        return self.text

    def readline(self) -> str:
        line, _, self.text = self.text.partition("\n")
        return line + "\n"


def test_dedicated_flags_win_over_settings_and_spider_args_ride_along():
    args = build_parser().parse_args(["crawl", "http://a.test/", "-s", "max_depth=5", "-s", "max_pages=9",
                                      "--max-depth", "1", "-a", "cat=books", "--store-text"])
    assert crawl_options(args) == {"max_depth": 1, "max_pages": 9, "store_text": True,
                                   "spider_args": {"cat": "books"}}
    assert crawl_options(build_parser().parse_args(["crawl", "http://a.test/"])) == {}


def test_locate_finds_a_spider_by_name_or_says_why_not(monkeypatch):
    monkeypatch.setenv("CRAWLTASKS_SPIDER_MODULES", "tests.spiders")
    assert locate(None) is None
    assert locate("test-titles") is spiders.TitleSpider
    assert locate("tests.spiders:ProductSpider") is spiders.ProductSpider
    with pytest.raises(OptionError, match="^--spider: "):
        locate("no-such-spider")


# --- mistakes end the command before any service ------------------------------------------------
@pytest.mark.parametrize(("argv", "says"), [
    ([], "give a command"),
    (["crawl"], "give at least one URL"),
    (["crawl", "ftp://a.test/"], "ftp://a.test/"),
    (["crawl", "http://a.test/", "--detach"], "--detach goes with --no-worker"),
    (["crawl", "http://a.test/", "-s", "max_pages=lots"], "-s max_pages: expected int"),
    (["crawl", "http://a.test/", "--output", "pages.xml"], "unknown output format '.xml'"),
    (["crawl", "http://a.test/", "--items", "/no/such/dir/items.jsonl"], "--items .*: no directory"),
    (["crawl", "http://a.test/", "--spider", "no-such-spider"], "--spider: "),
    (["crawl", "--seeds-file", "/no/such/seeds.txt"], "--seeds-file: "),
    (["stats", "c-1", "--watch", "--json"], "--watch and --json do not go together"),
    (["fetch", "gopher://a.test/"], "gopher://a.test/"),
    (["web", "--host", "0.0.0.0"], "refusing to listen on 0.0.0.0 without authentication"),
    (["retry-failed", "c-1", "--detach"], "--detach goes with --no-worker"),
    (["crawl", "--workers", "-2", "http://a.test/"], "expected a number >= 0"),
])
def test_a_mistake_is_one_line_and_exit_status_2(capsys, monkeypatch, argv, says):
    monkeypatch.delenv(ENV_BROKER, raising=False)
    monkeypatch.delenv("CRAWLTASKS_WEB_AUTH", raising=False)
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "", err
    assert err.startswith("crawltasks: error: ") and err.count("\n") == 1
    assert re.search(says, err), err


def test_no_worker_needs_a_configured_broker(capsys, monkeypatch):
    monkeypatch.delenv(ENV_BROKER, raising=False)
    args = argparse.Namespace(detach=False, no_worker=True)
    with pytest.raises(UsageError, match=f"--no-worker needs external workers: set {ENV_BROKER}"):
        check_worker_flags(args)
    monkeypatch.setenv(ENV_BROKER, "redis://127.0.0.1:6379/0")
    check_worker_flags(args)


def test_a_bad_seeds_password_is_not_printed(capsys):
    code, _, err = run(capsys, "crawl", "ftp://user:hunter2@a.test/")
    assert code == 2 and "hunter2" not in err


# --- errors and exit statuses ----------------------------------------------------------------------
@pytest.mark.parametrize(("error", "code", "says"), [
    (ServiceDown(Problem("Redis", "redis://h:6379", "refused", "CRAWLTASKS_REDIS_URL")), 3,
     "Redis at redis://h:6379 is unreachable (refused); check that it runs and that CRAWLTASKS_REDIS_URL names it"),
    (StateLost("c-9"), 4, "continue it with 'crawltasks --data-dir /d crawl --crawl-id c-9'"),
    (KeyboardInterrupt(), 130, "crawltasks: interrupted"),
    (RuntimeError("boom at http://u:secret@h/"), 1, "crawltasks: error: RuntimeError: boom at http://"),
])
def test_each_kind_of_error_has_its_exit_status(capsys, monkeypatch, error, code, says):
    def failing(args: argparse.Namespace) -> int:
        raise error

    monkeypatch.setitem(cli.COMMANDS, "list", failing)
    monkeypatch.delenv("CRAWLTASKS_DEBUG", raising=False)
    got, _, err = run(capsys, "--data-dir", "/d", "list")
    assert got == code and says in err and "secret" not in err


def test_debug_shows_the_traceback(monkeypatch):
    def failing(args: argparse.Namespace) -> int:
        raise RuntimeError("a bug")

    monkeypatch.setitem(cli.COMMANDS, "list", failing)
    monkeypatch.setenv("CRAWLTASKS_DEBUG", "1")
    with pytest.raises(RuntimeError, match="a bug"):
        main(["list"])


def test_entry_exits_with_mains_status_and_sigterm_interrupts(monkeypatch, capsys):
    exits = []

    def exit_now(code: int) -> None:
        exits.append(code)
        raise SystemExit(code)

    monkeypatch.setattr(sys, "argv", ["crawltasks"])
    monkeypatch.setattr(cli.os, "_exit", exit_now)
    before = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit):
            cli.entry()
        assert signal.getsignal(signal.SIGTERM) is cli._terminated
    finally:
        signal.signal(signal.SIGTERM, before)
    assert exits == [2] and "give a command" in capsys.readouterr().err
    with pytest.raises(KeyboardInterrupt):
        cli._terminated(signal.SIGTERM, None)


def test_version_is_printed(capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("crawltasks ")


# --- what the crawl command says ---------------------------------------------------------------------
def test_the_summary_line_and_the_resume_command():
    stats = {"crawl_id": "c-1", "state": "finished", "elapsed": 4.0, "scheduled": 10, "stored": 8, "failed": 1,
             "skipped": 1, "duplicates": 3, "filtered": 0, "retried": 2, "pending": 0}
    assert summary(stats) == ("crawl c-1 finished in 4.0s (2.0 pages/s): scheduled 10  stored 8  failed 1  "
                              "skipped 1  duplicates 3  filtered 0  retried 2  pending 0")
    assert "(0.0 pages/s)" in summary({**stats, "elapsed": 0})
    assert resume_command(argparse.Namespace(data_dir="/my data"), "c 1") == (
        "crawltasks --data-dir '/my data' crawl --crawl-id 'c 1'")
    assert resume_command(argparse.Namespace(), "c-1") == "crawltasks crawl --crawl-id c-1"
