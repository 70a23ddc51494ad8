"""The ports' implementations in Redis, shared by every worker (the frontier is ``redisfrontier.py``)."""
