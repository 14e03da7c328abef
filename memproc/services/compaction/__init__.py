"""Compaction of long threads (`Memory(compaction=...)`): the background job that folds messages into
a thread's stored summary, edits of the summary, and the reads a turn makes of it.

Modules: `job` (scheduling a fold and running it), `summarizers` (what writes a fold's new text),
`summary` (the stored summary: the reads a turn makes of it, and an operator's edits).
"""
