"""The docs' "Querying with the ORM" snippet (docs/guides/stored-data.md) runs as written and finds what it
says it finds."""

from __future__ import annotations

import re

import pytest

from memproc import Memory
from memproc.messages import Message
from memproc.models import TripwireLog
from tests.factories import TripwireLogFactory
from tests.foundation.test_readme_verbatim import ROOT

# Examples run here, in the suite's database; `readme-test` marks the install steps that
# tests/foundation/test_readme_verbatim.py follows in a fresh site.
PAGE = ROOT / "docs" / "guides" / "stored-data.md"
EXAMPLE = re.compile(r"<!-- readme-example: queries -->\n```python\n(?P<body>.*?)\n```", re.S)

pytestmark = pytest.mark.django_db


def test_the_readme_queries_run_and_find_the_rows() -> None:
    memory = Memory(working_memory={"scope": "thread"})
    memory.create_thread(resource_id="user-42", thread_id="support-1")
    memory.create_thread(resource_id="user-7", thread_id="support-1")  # the same id, another user
    memory.save_messages(
        [Message.create("user", "hello"), Message.create("assistant", "hi", id="m7")],
        thread_id="support-1",
        resource_id="user-42",
        embed=False,
    )
    memory.save_messages(  # the same message id, another user: theirs
        [Message.create("user", "not this one", id="m7")], thread_id="support-1", resource_id="user-7"
    )
    memory.update_working_memory("# Notes\n- likes tea", thread_id="support-1", resource_id="user-42")
    TripwireLogFactory(status=TripwireLog.Status.PENDING)
    found: dict = {}
    exec(EXAMPLE.search(PAGE.read_text())["body"], found)
    assert [t.public_id for t in found["threads"]] == ["support-1"]
    assert found["thread"].resource_id == "user-42"
    assert [m.text for m in found["history"]] == ["hello", "hi"]
    assert found["recent"].count() == 2
    assert (found["message"].public_id, found["message"].text) == ("m7", "hi")
    assert "likes tea" in found["notes"]
    assert found["pending"].count() == 1
