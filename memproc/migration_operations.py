"""Migration operations that only do something on PostgreSQL."""

from __future__ import annotations

from typing import Any

from django.db import migrations


class CreateVectorExtension(migrations.operations.base.Operation):
    """`CREATE EXTENSION IF NOT EXISTS vector` on PostgreSQL; nothing on other databases."""

    reversible = True
    reduces_to_sql = True

    def state_forwards(self, app_label: str, state: Any) -> None:
        pass

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute("CREATE EXTENSION IF NOT EXISTS vector")

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        pass  # other apps may use the extension; leave it

    def describe(self) -> str:
        return "Creates the pgvector extension (PostgreSQL only)"
