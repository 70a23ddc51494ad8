"""The exceptions of crawltasks: one tree with one base, so that a caller can catch "anything of
ours" (``CrawltasksError``) or one family, and the command line can turn each family into its one
line and exit status. Leaves live beside the code that raises them; each keeps the builtin base it
had (``InvalidURL`` is still a ``ValueError``), so existing ``except`` clauses hold.

    CrawltasksError
    ├── ConfigError        what the user gave cannot work
    │   ├── cli.parser.UsageError
    │   ├── cliopts.OptionError (ValueError)
    │   ├── feeds.FeedError (ValueError)
    │   └── spiders.SpiderNotFound (LookupError)
    ├── ServiceError       a service, the crawl's state or a local process is not there
    │   ├── health.ServiceDown (RuntimeError)
    │   ├── health.StateLost (RuntimeError)
    │   ├── embedded.EmbeddedError (RuntimeError)
    │   └── localworkers.WorkersGone (RuntimeError)
    ├── FetchError         one request cannot be fetched: it ends with a reason (``reasons.py``)
    │   ├── urls.InvalidURL (ValueError)
    │   ├── guard.Refused, guard.ResolutionFailed
    │   ├── fetch.TooSlow, fetch.BadFraming
    │   └── identity.ProviderError (ValueError)
    ├── SpiderError        the user's code failed
    │   ├── pipeline.outcomes.HookFailed
    │   ├── callbacks.NoSuchCallback (AttributeError)
    │   └── trypage.PageError (RuntimeError)
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
