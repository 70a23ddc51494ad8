"""The crawl dashboard and Prometheus metrics: ``crawltasks web`` (or ``crawltasks crawl --web``).

Read-only views of what every worker writes to Redis and Mongo, plus the crawl controls
(pause, resume, cancel, retry-failed) behind authentication and XSRF tokens:

  security.py  who may see and act: loopback or basic auth, Host check, XSRF after auth, headers
  data.py      what the pages show, read through Crawl, RedisState, RedisFrontier, MongoStorage
  chart.py     the inline SVG chart of a crawl's time series
  handlers.py  the pages, their JSON, the controls, the health check
  metrics.py   /metrics in the Prometheus text format
  server.py    the Tornado application; serving in the foreground or on a thread
  templates/   server-rendered HTML (one partial per live section); static/  style.css, live.js

Nothing here runs at import: the server starts only when a command asks for it.
"""
