"""Fixtures shared by the security tests: a scripted model and a user who owns their resource."""

from __future__ import annotations

from typing import Any

import pytest

from memproc.testing import ScriptedModel
from tests.factories import ResourceFactory, UserFactory


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel([f"answer {i}" for i in range(20)])


@pytest.fixture
def user(db: None) -> Any:
    user = UserFactory()
    ResourceFactory(id=str(user.pk))
    return user


class BlackHole(tuple):
    """(host, port), and `accepted`: how many connections the endpoint took so far."""

    accepted = 0


@pytest.fixture
def black_hole() -> Any:
    """A TCP endpoint that accepts connections and never answers: a BlackHole (host, port)."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                peer, _ = server.accept()
            except OSError:
                continue
            held.append(peer)  # read nothing, answer nothing
            endpoint.accepted += 1

    endpoint = BlackHole(server.getsockname())
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield endpoint
    stop.set()
    thread.join(2)
    for peer in held:
        peer.close()
    server.close()
