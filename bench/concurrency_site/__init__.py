"""The Django site bench/concurrency.py serves: memproc's API, one agent on the loopback model, and a
baseline view streaming the same model without memproc (views.py).

It is an app as well as a site, so memproc's autodiscovery finds its `agents.py` and Django its
`concurrency_setup` command. Everything that must agree between the benchmark and the server
processes comes from environment variables (see settings.py).
"""
