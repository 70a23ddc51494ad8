"""Item processors end to end on the twins (a whole crawl in this process): the validator and the
dedupe filter (its keys in the runtime's ItemKeys), counted per processor in the crawl's stats; a
failing processor costs only its item."""

from crawltasks import start_crawl
from crawltasks.backends.memory.driver import run_crawl
from crawltasks.items import Dedupe, DropItem, Required
from crawltasks.stages.itempipes import load_processor

from .sites import FAST, on_twins, page, twin_site


def products(*rows: tuple[str, str, str]) -> str:
    return "".join(f'<li class="product" data-sku="{s}" data-price="{p}">{t}</li>' for s, t, p in rows)


def shop_routes() -> dict:
    return {
        "/": page("shop", ["/2", "/3"], products(("a", "Apple", "1.5"), ("b", "Banana", "2"))),  # 2 valid
        "/2": page("shop", [], products(("a", "Apple", "1.5"), ("c", "", "3"))),  # a again, c has no title
        "/3": page("shop", [], products(("b", "Banana", "2"), ("d", "Date", "n/a"), ("e", "Elder", "4.25"))),
    }


def test_validator_and_dedupe_filter_counted_per_processor(crawl_id):
    server = twin_site(shop_routes())
    rt = on_twins(server)
    try:
        crawl = start_crawl(server.url("/"), spider="test-products", crawl_id=crawl_id, rt=rt,
                            item_pipelines=[{"class": "crawltasks.items.Dedupe", "fields": ["sku"]}], **FAST)
        assert run_crawl(rt, crawl, timeout=60), crawl.stats()
    finally:
        rt.close()
    items = crawl.items()
    assert sorted(i["sku"] for i in items) == ["a", "b", "e"]
    assert all(isinstance(i["price"], float) and i["title"] for i in items)
    stats = crawl.stats()
    assert stats["items"] == 7
    assert stats["items_dropped_required"] == 2  # c (no title) and d (price "n/a")
    assert stats["items_dropped_dedupe"] == 2  # a and b, the second time
    assert stats["items_dropped"] == 4 and stats.get("items_failed", 0) == 0
    assert rt.item_keys.count(crawl_id) == 3


def test_a_failing_processor_fails_its_item_and_the_crawl_goes_on(crawl_id):
    server = twin_site(shop_routes())
    rt = on_twins(server)
    try:
        crawl = start_crawl(server.url("/"), spider="test-products", crawl_id=crawl_id, rt=rt,
                            item_pipelines=[{"class": "tests.spiders.Explode", "sku": "b"}], **FAST)
        assert run_crawl(rt, crawl, timeout=60), crawl.stats()
    finally:
        rt.close()
    items = crawl.items()
    assert sorted(i["sku"] for i in items) == ["a", "a", "e"]  # the same item on two pages: two documents
    assert all(i["checked"] for i in items)
    stats = crawl.stats()
    assert stats["items_failed_explode"] == 2 and stats["items_failed"] == 2
    assert stats["stored"] == 3 and stats["failed"] == 0  # the pages are not the items' failures


def test_fail_fast_off_lets_the_item_go_on(crawl_id):
    server = twin_site(shop_routes())
    rt = on_twins(server)
    try:
        crawl = start_crawl(server.url("/"), spider="test-products", crawl_id=crawl_id, rt=rt, item_fail_fast=False,
                            item_pipelines=[{"class": "tests.spiders.Explode", "sku": "b"}], **FAST)
        assert run_crawl(rt, crawl, timeout=60), crawl.stats()
    finally:
        rt.close()
    assert sorted(i["sku"] for i in crawl.items()) == ["a", "a", "b", "b", "e"]
    assert crawl.stats()["items_failed_explode"] == 2


def test_required_rules():
    check = Required(fields={"title": str, "price": float})
    assert check.process_item({"title": "x", "price": 3}, None)["price"] == 3  # an int is a float in JSON
    for bad in ({"price": 1.0}, {"title": "", "price": 1.0}, {"title": "x", "price": "1"},
                {"title": "x", "price": True}):
        try:
            check.process_item(bad, None)
        except DropItem:
            continue
        raise AssertionError(f"{bad} passed")
    assert Required(["sku"]).process_item({"sku": 0}, None) == {"sku": 0}


def test_specs_load_from_paths_dicts_classes_and_instances():
    assert isinstance(load_processor({"class": "crawltasks.items:Dedupe", "fields": ["x"]}), Dedupe)
    one = Required(["a"])
    copied = load_processor(one)
    assert isinstance(copied, Required) and copied is not one
    assert isinstance(load_processor({"class": "crawltasks.items.Required", "fields": ["a"]}), Required)
