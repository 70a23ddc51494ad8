"""The three stages as plain functions over the messages of ``models``; the Celery tasks are thin wrappers.

admit.admit_stage    -> requests for this process's fetch engine (engine.py), and those decided at once
parsing.parse_stage  <- [Fetched] (the engine's message, through ``Sender.send_results``)
                     -> ``models.Parsed`` (pages, items, tickets, records, skipped, body keys); follow-ups
                        scheduled
storing.store_stage  <- ``Parsed`` -> bulk writes (one document per key), then the tickets are finished
                        in Redis (and completion may fire); what to write and finish is decided first
                        (storedecision.decide_store -> ``StoreDecision``)

Between stages the messages travel as JSON (``to_dict``/``from_dict``; the tasks unpack them).

A request ends in exactly one outcome: stored, failed or skipped. Failures and the skips worth
explaining (robots, hooks) are recorded in the failures collection with their reason (``reasons``).
Whatever the spider's code does, it costs only the request it was given: its exceptions end that
request (``spider_error``, ``hook_error``), a spider the worker cannot load fails the crawl's requests
(``spider_not_found``), and a page that kills its worker process ends ``worker_lost`` (``custody``).
"""

