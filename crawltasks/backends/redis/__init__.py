"""The ports' implementations in Redis, shared by every worker (the frontier is ``frontier.py``)."""
