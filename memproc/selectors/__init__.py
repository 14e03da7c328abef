"""Reads, by concern; selectors never write. `messages` and `threads` serve a turn, the API and the
admin; `turns` the turn records; `filters` the metadata filters both lists share; `stats` the admin's
figures; `export` what a purge or an export of one resource covers."""
