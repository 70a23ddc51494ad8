"""The exceptions of crawltasks: one tree with one base, so that a caller can catch "anything of
ours" (``CrawltasksError``) or one family, and the command line can turn each family into its one
line and exit status. Leaves live beside the code that raises them; each keeps the builtin base it
had (``InvalidURL`` is still a ``ValueError``), so existing ``except`` clauses hold.

    CrawltasksError
    ├── ConfigError        what the user gave cannot work
    │   ├── cli.parser.UsageError
    │   ├── cli.options.OptionError (ValueError)
    │   ├── storage.feeds.FeedError (ValueError)
    │   └── spiders.SpiderNotFound (LookupError)
    ├── ServiceError       a service, the crawl's state or a local process is not there
    │   ├── monitor.health.ServiceDown (RuntimeError)
    │   ├── monitor.health.StateLost (RuntimeError)
    │   ├── local.embedded.EmbeddedError (RuntimeError)
    │   └── local.workers.WorkersGone (RuntimeError)
    ├── FetchError         one request cannot be fetched: it ends with a reason (``reasons.py``)
    │   ├── urls.InvalidURL (ValueError)
    │   ├── http.guard.Refused, http.guard.ResolutionFailed
    │   ├── http.fetch.TooSlow, http.fetch.BadFraming
    │   └── http.identity.ProviderError (ValueError)
    ├── SpiderError        the user's code failed
    │   ├── stages.outcomes.HookFailed
    │   ├── stages.callbacks.NoSuchCallback (AttributeError)
    │   └── cli.trypage.PageError (RuntimeError)
    └── Instruction        raised by a spider to steer the crawl: not failures
        ├── spiders.StopCrawl
        └── items.DropItem
"""

from __future__ import annotations


class CrawltasksError(Exception):
    """Every exception crawltasks raises on purpose."""


class ConfigError(CrawltasksError):
    """A command line, an option, a feed or a spider reference that cannot work."""


class ServiceError(CrawltasksError):
    """Redis, the broker, MongoDB, the crawl's state or a local worker process is not there."""


class FetchError(CrawltasksError):
    """One request cannot be fetched; it ends failed with a reason."""


class SpiderError(CrawltasksError):
    """The user's spider, hook or callback failed."""


class Instruction(CrawltasksError):
    """Raised by user code to steer the crawl (stop it, drop an item): not a failure."""
