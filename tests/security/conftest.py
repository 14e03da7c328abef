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
