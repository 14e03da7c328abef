"""Where a turn runs.

`engine` is the turn as a generator of stream events and effects (`effects`): it does no I/O of its
own. Beside it, `start` builds the turn from its input and its thread, `loop` runs the model and the
tools (`tools` runs one call). The drivers perform the effects: `sync` in the calling thread
(`Agent.generate`/`stream`), `aio` on an event loop with blocking steps in worker threads
(`agenerate`/`astream`), and `asgi` for a view, in the request's thread under WSGI and without
blocking under ASGI. `commit` is the one save path of a turn's writes, `records` its TurnRecord.
`stream_policy` decides when a streamed turn's events may reach the client.
"""
