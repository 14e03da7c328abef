"""The API tests' fixtures (a user who owns their resource, registered test agents, clients), for the
security tests that attack the HTTP API the same way."""

from tests.api.conftest import (  # noqa: F401 - fixtures, found by pytest under these names
    agent,
    make_agent,
    model,
    other_resource,
    other_thread,
    other_user,
    owner_client,
    resource,
    thread,
    user,
)
