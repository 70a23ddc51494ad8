"""Late starts told to the shared gate from a thread of their own.

A request that reaches the wire a little after its slot was granted moves its host's next start to a
delay from when it really went out; another worker may be granted that host's next slot one delay
after the grant, so the news has to reach Redis well within that delay. The engine's control thread is
the wrong messenger: it shares the interpreter lock with hundreds of fetch threads and does every
other round trip, and on a busy two-core machine one of its rounds was measured taking up to a
second. This thread does nothing else, and tells what gathered while it was away in one round trip.
"""

from __future__ import annotations

import logging
import threading
from queue import Empty, SimpleQueue

import redis

from ..ports import HostGate

log = logging.getLogger("crawltasks")

_STOP = ("", -1.0)


class LateStarts:
    """Tells ``gate`` of late starts as they come, many in one round trip."""

    def __init__(self, gate: HostGate) -> None:
        self.gate = gate
        self._queue: SimpleQueue[tuple[str, float]] = SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="late-starts", daemon=True)
        self._thread.start()

    def tell(self, host: str, delay: float) -> None:
        """A request of ``host`` went out late just now: its next start may not come before ``delay``."""
        self._queue.put((host, delay))

    def stop(self, timeout: float = 5.0) -> None:
        """Tell what is queued, then end the thread."""
        self._queue.put(_STOP)
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            told = [self._queue.get()]
            try:
                while len(told) < 1000:
                    told.append(self._queue.get_nowait())
            except Empty:
                pass
            stopping = _STOP in told
            told = [start for start in told if start != _STOP]
            if told:
                try:
                    self.gate.exchange((), (), started=told)
                except redis.RedisError as exc:  # the next grant may come early: nothing else is at stake
                    log.warning("could not tell the gate of %d late starts: %r", len(told), exc)
            if stopping:
                return
