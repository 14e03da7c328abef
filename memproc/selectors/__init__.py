"""Reads, by concern; selectors never write. `messages` and `threads` serve a turn, the API and the
admin; `turns` the turn records; `filters` the metadata filters both lists share; `stats` the admin's
figures; `export` what a purge or an export of one resource covers."""

# Until the turn engine's imports name the modules (issue 33's move of memproc/turns/ in progress).
from memproc.selectors.messages import message_ids_from  # noqa: F401
from memproc.selectors.threads import thread_key_for  # noqa: F401
