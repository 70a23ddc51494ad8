"""The Storage port's contract: every test runs on MongoStorage (the session's MongoDB-protocol
server, a database of its own per test) and on MemoryStorage, its twin. What the twin copies of the
real one is pinned here, so a test written against the twin says what the store does."""

from __future__ import annotations

import inspect
import json
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from crawltasks.backends.memory.storage import MemoryStorage
from crawltasks.ports import Storage
from crawltasks.storage.feeds import export
from crawltasks.storage.mongo import FAILURES, ITEMS, PAGES, MongoStorage, export_crawl

Make = Callable[..., Storage]


@pytest.fixture(params=["mongo", "memory"])
def make(request: pytest.FixtureRequest) -> Iterator[Make]:
    """A factory of storages of one kind (``flush_size`` etc. as keywords), all emptied after."""
    made: list[tuple[Storage, str]] = []

    def build(**kwargs: object) -> Storage:
        kwargs.setdefault("flush_size", 10_000)
        if request.param == "memory":
            return MemoryStorage(**kwargs)
        db = f"contract_{uuid.uuid4().hex[:10]}"
        storage = MongoStorage.from_url(request.getfixturevalue("mongo_url"), db, **kwargs)
        made.append((storage, db))
        return storage

    yield build
    for storage, db in made:
        storage.client.drop_database(db)
        storage.close()


@pytest.fixture
def storage(make: Make) -> Storage:
    return make()


def page(crawl: str, i: int, **fields: object) -> dict:
    return {"crawl_id": crawl, "fp": f"{i:040x}", "url": f"http://127.0.0.1/p/{i}", **fields}


def fail(crawl: str, i: int, reason: str | None, **fields: object) -> dict:
    doc = page(crawl, i, outcome="failed", **fields)
    return doc if reason is None else {**doc, "reason": reason}


def urls(docs) -> list[str]:
    return [d["url"] for d in docs]


def u(i: int) -> str:
    return f"http://127.0.0.1/p/{i}"


# --- the port -------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [MongoStorage, MemoryStorage])
def test_both_have_every_method_of_the_port_with_its_parameters(cls: type) -> None:
    for name, method in inspect.getmembers(Storage, inspect.isfunction):
        if not name.startswith("_"):
            assert list(inspect.signature(getattr(cls, name)).parameters) == \
                list(inspect.signature(method).parameters), name


# --- writes ---------------------------------------------------------------------------------------
def test_added_documents_show_only_once_flushed_and_the_callers_dicts_stay_as_they_were(storage: Storage) -> None:
    docs = [page("c", i, status=200) for i in range(5)]
    storage.add(PAGES, docs)
    assert storage.count(PAGES, "c") == 0 and list(storage.pages("c")) == []
    assert storage.flush() == 5
    assert storage.flush() == 0
    assert all("_id" not in d for d in docs)
    assert list(storage.pages("c")) == [page("c", i, status=200) for i in range(5)]


def test_a_full_buffer_flushes_itself(make: Make) -> None:
    storage = make(flush_size=3)
    storage.add(PAGES, [page("c", 1), page("c", 2)])
    assert storage.count(PAGES, "c") == 0
    storage.add(ITEMS, [page("c", 3)])  # the buffer counts every collection
    assert storage.count(PAGES, "c") == 2 and storage.count(ITEMS, "c") == 1


def test_an_old_buffer_flushes_on_the_next_add(make: Make) -> None:
    storage = make(flush_interval=0.0)
    storage.add(PAGES, [page("c", 1)])
    assert storage.count(PAGES, "c") == 1


def test_a_key_written_again_replaces_its_fields_keeps_the_others_and_its_place(storage: Storage) -> None:
    storage.add(PAGES, [page("c", i, title="old", extra=i) for i in range(4)])
    storage.flush()
    storage.add(PAGES, [page("c", 1, title="new", checked=True), page("c", 9, title="new")])
    storage.flush()
    docs = list(storage.pages("c"))
    assert urls(docs) == [u(0), u(1), u(2), u(3), u(9)]
    assert docs[1] == {**page("c", 1, title="new", extra=1), "checked": True}
    assert [d["title"] for d in docs] == ["old", "new", "old", "old", "new"]
    assert storage.count(PAGES, "c") == 5


def test_the_same_key_twice_in_one_flush_keeps_the_last(storage: Storage) -> None:
    storage.add(ITEMS, [page("c", 1, price=1, a=1), page("c", 2, price=2), page("c", 1, price=3)])
    assert storage.flush() == 3
    assert list(storage.items("c")) == [page("c", 1, price=3, a=1), page("c", 2, price=2)]


def test_a_key_already_stored_written_twice_in_one_flush_keeps_the_last(storage: Storage) -> None:
    storage.add(PAGES, [page("c", 1, v=0)])
    storage.flush()
    storage.add(PAGES, [page("c", 1, v=1), page("c", 1, v=2)])
    storage.flush()
    assert [d["v"] for d in storage.pages("c")] == [2]


def test_pages_items_and_failures_are_apart(storage: Storage) -> None:
    storage.add(PAGES, [page("c", 1, kind="page")])
    storage.add(ITEMS, [page("c", 1, kind="item")])
    storage.add(FAILURES, [fail("c", 1, "http_404")])
    storage.flush()
    assert [d["kind"] for d in storage.pages("c")] == ["page"]
    assert [d["kind"] for d in storage.items("c")] == ["item"]
    assert [d["reason"] for d in storage.failures("c")] == ["http_404"]
    assert [storage.count(name, "c") for name in (PAGES, ITEMS, FAILURES)] == [1, 1, 1]


def test_a_crawl_named_like_a_prefix_of_another_sees_only_its_own(storage: Storage) -> None:
    storage.add(PAGES, [page("a", 1), page("a:b", 2), page("a;", 3), page("b", 1)])
    storage.add(FAILURES, [fail("a", 4, "http_404"), fail("a:b", 5, "http_404")])
    storage.flush()
    assert [d["fp"] for d in storage.pages("a")] == [f"{1:040x}"]
    assert [d["fp"] for d in storage.failures("a", "http_404")] == [f"{4:040x}"]
    assert [storage.count(PAGES, c) for c in ("a", "a:b", "a;", "b", "z")] == [1, 1, 1, 1, 0]
    assert storage.failure_counts("a") == {"http_404": 1}


def test_values_are_copied_in_and_out(storage: Storage) -> None:
    doc = page("c", 1, tags=("x", "y"), meta={"n": [1, 2]})
    storage.add(PAGES, [doc])
    storage.flush()
    doc["meta"]["n"].append(3)
    [read] = storage.pages("c")
    assert read["tags"] == ["x", "y"] and read["meta"] == {"n": [1, 2]}
    read["meta"]["n"].append(4)
    assert next(storage.pages("c"))["meta"] == {"n": [1, 2]}


def test_writes_from_many_threads_all_land(make: Make) -> None:
    storage = make(flush_size=7)

    def store(t: int) -> None:
        for n in range(5):
            storage.add(PAGES, [page("c", t * 100 + n * 4 + k) for k in range(4)])
            storage.add(FAILURES, [fail("c", t * 100 + n, "timeout")])
            storage.flush()

    threads = [threading.Thread(target=store, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert storage.count(PAGES, "c") == 120 and storage.count(FAILURES, "c") == 30


# --- reads ----------------------------------------------------------------------------------------
def failures_of(storage: Storage) -> None:
    storage.add(FAILURES, [fail("c", 1, "http_404"), fail("c", 2, "timeout"), fail("c", 3, "http_404"),
                           fail("c", 4, "http_404"), fail("c", 5, None), fail("d", 6, "timeout")])
    storage.flush()


def test_failures_by_reason_and_their_counts(storage: Storage) -> None:
    failures_of(storage)
    assert sorted(urls(storage.failures("c"))) == [u(1), u(2), u(3), u(4), u(5)]
    assert sorted(urls(storage.failures("c", ""))) == sorted(urls(storage.failures("c", None)))
    assert urls(storage.failures("c", "http_404")) == [u(1), u(3), u(4)]
    assert list(storage.failures("c", "dns")) == []
    assert storage.failure_counts("c") == {"http_404": 3, "timeout": 1, "None": 1}
    assert storage.failure_counts("nothing") == {}


def test_failure_samples_and_pages(storage: Storage) -> None:
    failures_of(storage)
    assert storage.failure_samples("c", ["http_404", "timeout", "dns"], per_reason=2) == \
        {"http_404": [u(1), u(3)], "timeout": [u(2)], "dns": []}
    assert urls(storage.failures_page("c", "http_404", 1, 1)) == [u(3)]
    assert urls(storage.failures_page("c", "http_404", 2, 5)) == [u(4)]
    assert storage.failures_page("c", "timeout", 0, 1) == [fail("c", 2, "timeout")]
    pages = [urls(storage.failures_page("c", None, skip, 2)) for skip in (0, 2, 4)]
    assert [len(p) for p in pages] == [2, 2, 1] and sorted(sum(pages, [])) == [u(1), u(2), u(3), u(4), u(5)]
    assert len(storage.failures_page("c", None, 0, 0)) == 5  # 0: no limit
    assert storage.failures_page("c", None, 9, 5) == []


def test_latest_is_newest_first_and_a_rewritten_key_keeps_its_place(storage: Storage) -> None:
    storage.add(PAGES, [page("c", i, status=200, title=f"t{i}") for i in (3, 0, 4, 1, 2)] + [page("d", 9)])
    storage.flush()
    storage.add(PAGES, [page("c", 0, status=304)])
    storage.flush()
    assert urls(storage.latest(PAGES, "c", 3)) == [u(2), u(1), u(4)]
    assert urls(storage.latest(PAGES, "c", 10)) == [u(2), u(1), u(4), u(0), u(3)]
    assert storage.latest(PAGES, "c", 2, ["url", "status", "missing"]) == \
        [{"url": u(2), "status": 200}, {"url": u(1), "status": 200}]
    assert storage.latest(PAGES, "c", 1) == [page("c", 2, status=200, title="t2")]
    assert storage.latest(ITEMS, "c") == []


def test_internal_fields_are_only_for_a_scan(storage: Storage) -> None:
    found = [{"url": "http://127.0.0.1/next", "depth": 1}]
    storage.add(PAGES, [page("c", 1, status=200, discovered=found, request_fp="r1"), page("c", 2, status=200)])
    storage.add(FAILURES, [fail("c", 3, "http_500", ticket="t3", discovered=[])])
    storage.flush()
    for docs in (list(storage.pages("c")), storage.latest(PAGES, "c"), storage.latest(PAGES, "c", 5, ["discovered"]),
                 list(storage.failures("c")), storage.failures_page("c", None, 0, 5)):
        assert docs and not any("discovered" in d or "request_fp" in d or "_id" in d for d in docs)
    assert list(storage.scan(PAGES, "c", ["fp", "request_fp"])) == \
        [{"fp": f"{1:040x}", "request_fp": "r1"}, {"fp": f"{2:040x}"}]
    assert list(storage.scan(PAGES, "c", ["discovered"], having="discovered")) == [{"discovered": found}]
    assert list(storage.scan(FAILURES, "c", ["discovered"], having="discovered")) == [{"discovered": []}]
    assert list(storage.scan(FAILURES, "c", ["fp", "ticket", "outcome"])) == \
        [{"fp": f"{3:040x}", "outcome": "failed", "ticket": "t3"}]
    assert list(storage.scan(PAGES, "other", ["fp"])) == []


# --- changes --------------------------------------------------------------------------------------
def test_touch_pages_stamps_stored_pages_only(storage: Storage) -> None:
    storage.add(PAGES, [page("old", 1), page("old", 2), page("new", 1)])
    storage.flush()
    storage.touch_pages([("old", f"{1:040x}"), ("old", f"{7:040x}"), ("gone", f"{1:040x}")], "2024-01-02T03:04:05")
    storage.touch_pages([], "never")
    assert [d.get("checked_at") for d in storage.pages("old")] == ["2024-01-02T03:04:05", None]
    assert "checked_at" not in next(storage.pages("new"))
    assert storage.count(PAGES, "old") == 2 and storage.count(PAGES, "gone") == 0


def test_delete_failures_forgets_only_those_of_the_crawl(storage: Storage) -> None:
    failures_of(storage)
    storage.add(FAILURES, [fail("d", 2, "timeout")])
    storage.flush()
    storage.delete_failures("c", [f"{2:040x}", f"{3:040x}", f"{6:040x}"])
    storage.delete_failures("c", [])
    assert sorted(urls(storage.failures("c"))) == [u(1), u(4), u(5)]
    assert storage.count(FAILURES, "d") == 2


def test_delete_crawl_takes_its_documents_and_record_only(storage: Storage) -> None:
    for crawl in ("a", "a:b"):
        storage.add(PAGES, [page(crawl, 1)])
        storage.add(ITEMS, [page(crawl, 2)])
        storage.add(FAILURES, [fail(crawl, 3, "timeout")])
        storage.save_crawl(crawl, {"seeds": [u(1)]}, 1.0)
    storage.flush()
    storage.delete_crawl("a")
    storage.delete_crawl("never")
    assert [storage.count(name, "a") for name in (PAGES, ITEMS, FAILURES)] == [0, 0, 0]
    assert [storage.count(name, "a:b") for name in (PAGES, ITEMS, FAILURES)] == [1, 1, 1]
    assert storage.crawl_record("a") is None and storage.crawl_record("a:b") is not None


# --- the crawls' records --------------------------------------------------------------------------
def test_a_crawl_record_ends_once_and_a_restart_reopens_it(storage: Storage) -> None:
    assert storage.crawl_record("c") is None
    storage.crawl_ended("c", "finished")  # no record: nothing to end
    assert storage.crawl_record("c") is None and storage.unfinished_crawls() == []
    storage.save_crawl("c", {"options": {"max_pages": 5}, "seeds": [u(1)]}, 100.0)
    storage.save_crawl("d", {"options": {}}, 200.0)
    assert storage.crawl_record("c") == {"_id": "c", "options": {"max_pages": 5}, "seeds": [u(1)], "started_at": 100.0}
    storage.crawl_ended("c", "cancelled")
    ended = storage.crawl_record("c")
    assert ended["state"] == "cancelled" and ended["finished_at"] > 1e9
    storage.crawl_ended("c", "finished")
    assert storage.crawl_record("c") == ended
    assert storage.unfinished_crawls() == [{"_id": "d", "started_at": 200.0}]
    storage.save_crawl("c", {"options": {"max_pages": 9}}, 300.0)
    assert storage.crawl_record("c") == {"_id": "c", "options": {"max_pages": 9}, "seeds": [u(1)],
                                         "started_at": 100.0, "state": "cancelled"}
    assert sorted(r["_id"] for r in storage.unfinished_crawls()) == ["c", "d"]


# --- export ---------------------------------------------------------------------------------------
# A crawl's documents are written in key order here: the only order every server reads them back in
# (a MongoDB reads them by ``_id``, the embedded store and the twin in the order first written).
def crawl_to_export(storage: Storage) -> None:
    storage.add(PAGES, [page("c", 1, status=404, title=None), page("d", 5, status=200),
                        page("c", 2, status=200, title="Ünïcode", discovered=[{"url": u(3)}])])
    storage.add(ITEMS, [page("c", 7, price=1.5, tags=["a", "b"]), page("c", 8, price=2)])
    storage.flush()
    storage.add(PAGES, [page("c", 2, status=304, title="again")])
    storage.flush()


EXPORTED = [
    {"crawl_id": "c", "url": u(1), "status": 404, "title": None},
    {"crawl_id": "c", "url": u(2), "status": 304, "title": "again"},
    {"crawl_id": "c", "url": u(7), "price": 1.5, "tags": ["a", "b"]},
    {"crawl_id": "c", "url": u(8), "price": 2},
]


def test_export_crawl_writes_json_lines(storage: Storage, tmp_path: Path) -> None:
    crawl_to_export(storage)
    assert export_crawl(storage, "c", str(tmp_path / "all.jsonl")) == (2, 2)
    text = (tmp_path / "all.jsonl").read_text(encoding="utf-8")
    assert text == "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in EXPORTED)
    assert export_crawl(storage, "c", str(tmp_path / "pages.jsonl"), items=False) == (2, 0)
    assert (tmp_path / "pages.jsonl").read_text(encoding="utf-8") == "".join(text.splitlines(True)[:2])


def test_feeds_export_tags_and_splits(storage: Storage, tmp_path: Path) -> None:
    crawl_to_export(storage)
    assert export(storage, "c", str(tmp_path / "both.jsonl")) == (2, 2)
    lines = [json.loads(line) for line in (tmp_path / "both.jsonl").read_text(encoding="utf-8").splitlines()]
    assert lines == [{"type": t, **d} for t, d in zip(["page", "page", "item", "item"], EXPORTED, strict=True)]
    assert export(storage, "c", str(tmp_path / "p.csv"), str(tmp_path / "i.json")) == (2, 2)
    assert json.loads((tmp_path / "i.json").read_text(encoding="utf-8")) == EXPORTED[2:]
    assert (tmp_path / "p.csv").read_text(encoding="utf-8").splitlines()[0] == "crawl_id,url,status,title"


def test_both_give_the_same_bytes_for_the_same_writes(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """The export of one sequence of writes, byte for byte, from each implementation."""
    db = f"contract_{uuid.uuid4().hex[:10]}"
    mongo = MongoStorage.from_url(request.getfixturevalue("mongo_url"), db, flush_size=4)
    try:
        outputs = []
        for n, storage in enumerate((mongo, MemoryStorage(flush_size=4))):
            crawl_to_export(storage)
            storage.add(PAGES, [page("c", 10 + i, n=i, nested={"k": [i, None]}) for i in range(9)])
            storage.add(ITEMS, [page("c", 7, price=9)])
            storage.flush()
            export_crawl(storage, "c", str(tmp_path / f"{n}.jsonl"))
            outputs.append((tmp_path / f"{n}.jsonl").read_bytes())
        assert outputs[0] == outputs[1] and outputs[0].count(b"\n") == 13
    finally:
        mongo.client.drop_database(db)
        mongo.close()
