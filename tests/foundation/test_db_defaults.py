"""Columns added after the first release have a database default, so rows written by raw SQL or COPY
that name only the older columns (a site's own loader, the benchmarks' COPY) still insert."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models.fields import NOT_PROVIDED

from memproc import models

pytestmark = pytest.mark.django_db


def test_a_resource_row_without_its_newer_columns_gets_their_defaults():
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO memproc_resource (id, working_memory, working_memory_version, metadata, created_at,"
            " updated_at) VALUES (%s, '', 0, '{}', %s, %s)",
            ["raw-1", "2024-01-01 00:00:00+00:00", "2024-01-01 00:00:00+00:00"],
        )
    assert models.Resource.objects.get(pk="raw-1").pinned_fields == []


@pytest.mark.parametrize(
    ("model", "fields"), [(models.Resource, ["pinned_fields"]), (models.Message, ["recall_excluded"])]
)
def test_the_columns_the_memory_view_added_have_a_database_default(model, fields):
    for name in fields:
        field = model._meta.get_field(name)
        assert field.db_default is not NOT_PROVIDED, f"{model.__name__}.{name} needs db_default"
