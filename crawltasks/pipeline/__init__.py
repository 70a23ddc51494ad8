"""The three stages as plain functions over the messages of ``models``; the Celery tasks are thin wrappers.

admit_stage  -> requests for this process's fetch engine (crawltasks.engine), and those decided at once
parse_stage  <- [Fetched] (the engine's message, through ``Sender.send_results``)
             -> ``models.Parsed`` (crawl_id, pages, items, item_tickets, records, skipped, body_keys); follow-ups
                scheduled
store_stage  <- ``Parsed`` -> bulk writes (one document per key), then the tickets are finished in Redis (and
                completion may fire)

Between stages the messages travel as JSON (``to_dict``/``from_dict``; the tasks unpack them).

A request ends in exactly one outcome: stored, failed or skipped. Failures and the skips worth
explaining (robots, hooks) are recorded in the failures collection with their reason (``reasons``).
Whatever the spider's code does, it costs only the request it was given: its exceptions end that
request (``spider_error``, ``hook_error``), a spider the worker cannot load fails the crawl's requests
(``spider_not_found``), and a page that kills its worker process ends ``worker_lost`` (``custody``).
"""


from .admit import admit_stage
from .outcomes import cancel, crawl_is_stopping, record_doc
from .parsing import parse_stage
from .storing import store_stage

__all__ = ["admit_stage", "cancel", "crawl_is_stopping", "parse_stage", "record_doc", "store_stage"]
