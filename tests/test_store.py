"""The store on a real MongoDB-protocol server: inserts first, upserts only what is already there."""

from __future__ import annotations

import uuid

import pytest

from crawltasks.storage.mongo import FAILURES, ITEMS, PAGES, MongoStorage


@pytest.fixture
def storage(mongo_url: str):
    db = f"store_{uuid.uuid4().hex[:8]}"
    s = MongoStorage.from_url(mongo_url, db, flush_size=10_000)
    yield s
    s.client.drop_database(db)
    s.client.close()


def page(crawl: str, i: int, **fields) -> dict:
    return {"crawl_id": crawl, "fp": f"{i:040x}", "url": f"http://127.0.0.1/p/{i}", "status": 200, **fields}


def test_new_documents_are_written_once_and_callers_dicts_are_untouched(storage: MongoStorage) -> None:
    docs = [page("c1", i) for i in range(50)]
    storage.add(PAGES, docs)
    assert storage.flush() == 50
    assert all("_id" not in d for d in docs)
    assert storage.count(PAGES, "c1") == 50
    assert sorted(d["url"] for d in storage.pages("c1")) == sorted(f"http://127.0.0.1/p/{i}" for i in range(50))


def test_a_replay_overwrites_instead_of_duplicating(storage: MongoStorage) -> None:
    storage.add(PAGES, [page("c1", i, title="old") for i in range(20)])
    storage.flush()
    # A replayed batch: half already stored (now with new fields), half new.
    storage.add(PAGES, [page("c1", i, title="new") for i in range(10, 30)])
    storage.flush()
    by_url = {d["url"]: d for d in storage.pages("c1")}
    assert len(by_url) == 30 and storage.count(PAGES, "c1") == 30
    assert [by_url[f"http://127.0.0.1/p/{i}"]["title"] for i in (0, 9, 10, 19, 20, 29)] == \
        ["old", "old", "new", "new", "new", "new"]
    assert all("_id" not in d for d in by_url.values())


def test_the_same_key_twice_in_one_flush_keeps_the_last(storage: MongoStorage) -> None:
    storage.add(ITEMS, [page("c2", 1, price=1), page("c2", 2, price=2), page("c2", 1, price=3)])
    storage.flush()
    prices = sorted(d["price"] for d in storage.items("c2"))
    assert prices == [2, 3]


def test_keys_are_per_crawl(storage: MongoStorage) -> None:
    storage.add(PAGES, [page("a", 1), page("b", 1)])
    storage.flush()
    assert storage.count(PAGES, "a") == storage.count(PAGES, "b") == 1


def test_a_crawl_named_like_a_prefix_of_another_sees_only_its_own(storage: MongoStorage) -> None:
    storage.add(PAGES, [page("a", 1), page("a:b", 2), page("a;", 3)])
    storage.add(FAILURES, [page("a", 4, reason="http_404"), page("a:b", 5, reason="http_404")])
    storage.flush()
    assert [d["fp"] for d in storage.pages("a")] == [f"{1:040x}"]
    assert [d["fp"] for d in storage.failures("a", "http_404")] == [f"{4:040x}"]
    assert storage.count(PAGES, "a:b") == 1
    storage.delete_failures("a", [f"{4:040x}", f"{5:040x}"])
    assert storage.count(FAILURES, "a") == 0 and storage.count(FAILURES, "a:b") == 1


def test_writes_wait_for_the_journal_unless_the_url_chooses(mongo_url: str) -> None:
    assert MongoStorage.from_url(mongo_url).client.write_concern.document == {"j": True}
    assert MongoStorage.from_url(mongo_url + "?journal=false").client.write_concern.document == {"j": False}
    assert MongoStorage.from_url(mongo_url + "?w=majority").client.write_concern.document == {"w": "majority"}


def test_what_a_flush_acknowledged_survives_the_store_being_killed(tmp_path) -> None:
    """A page counts as stored once its flush returns: kill -9 the store right after, restart it on
    the same data, and every acknowledged document is there."""
    from crawltasks.local.embedded import MongoProcess

    server = MongoProcess(tmp_path / "data", tmp_path / "log")
    storage = MongoStorage.from_url(server.start(), "durable", flush_size=10_000)
    try:
        for batch in range(5):
            storage.add(PAGES, [page("c", batch * 200 + i, html="x" * 2000) for i in range(200)])
            assert storage.flush() == 200
        server.proc.kill()
        server.proc.wait(10)
        server.start()
        assert storage.count(PAGES, "c") == 1000
    finally:
        storage.client.close()
        server.stop()
