"""The OpenAPI document: valid OpenAPI 3, every endpoint, request and response bodies described."""

from __future__ import annotations

import re

import pytest
from openapi_spec_validator import validate

from tests.api.conftest import API

pytestmark = pytest.mark.django_db

ENDPOINTS = {
    "": {"get"},
    "threads/{id}/turns/": {"get"},
    "agents/": {"get"},
    "agents/{id}/": {"get"},
    "agents/{id}/generate/": {"post"},
    "agents/{id}/stream/": {"post"},
    "threads/": {"get", "post"},
    "threads/{id}/": {"get", "patch", "delete"},
    "threads/{id}/messages/": {"get"},
    "threads/{id}/clone/": {"post"},
    "threads/{id}/branch/": {"post"},
    "threads/{id}/archive/": {"post"},
    "threads/{id}/unarchive/": {"post"},
    "resources/{id}/export/": {"get"},
    "threads/{id}/working-memory/": {"get", "put"},
    "resources/{id}/working-memory/": {"get", "put"},
    "tripwires/": {"get"},
    "tripwires/{id}/": {"get"},
    "tripwires/{id}/review/": {"post"},
    "pending/": {"get"},
    "pending/{id}/": {"get"},
    "pending/{id}/approve/": {"post"},
    "pending/{id}/reject/": {"post"},
    "pending/{id}/result/": {"post"},
    "attachments/{id}/": {"get"},
    "attachments/{id}/download/": {"get"},
    "memory/": {"get"},
    "memory/fields/{name}/": {"put"},
    "memory/fields/{name}/pin/": {"post"},
    "memory/fields/{name}/unpin/": {"post"},
    "memory/messages/{id}/exclude/": {"post"},
    "memory/messages/{id}/include/": {"post"},
    "memory/forget/": {"post"},
    "memory/threads/{id}/forget/": {"post"},
}
HTTP_METHODS = {"get", "put", "post", "patch", "delete"}


@pytest.fixture
def document(api_client) -> dict:
    response = api_client.get(API + "schema/", {"format": "json"})
    assert response.status_code == 200
    return response.json()


def test_the_document_is_valid_openapi_3(document):
    validate(document)
    assert document["openapi"].startswith("3.")
    assert document["info"]["title"] == "memproc API"


def test_generating_the_document_raises_no_warnings(api_client):
    from drf_spectacular.drainage import GENERATOR_STATS

    GENERATOR_STATS.reset()
    assert api_client.get(API + "schema/").status_code == 200
    assert not GENERATOR_STATS, "drf-spectacular warned while describing memproc's API"


def test_every_endpoint_and_method_is_described(document):
    described = {
        path.removeprefix(API): {m for m in ops if m in HTTP_METHODS}
        for path, ops in document["paths"].items()
    }
    assert described == ENDPOINTS


def test_every_operation_documents_its_bodies_and_errors(document):
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if method not in HTTP_METHODS:
                continue
            where = f"{method.upper()} {path}"
            assert operation.get("summary"), where
            if method in ("post", "put", "patch"):
                assert operation["requestBody"]["content"], where
            ok = [code for code in operation["responses"] if code.startswith("2")]
            assert ok, where
            for code in ok:
                if code != "204":
                    assert operation["responses"][code]["content"], where
            if path != API:
                assert {"401", "403"} <= set(operation["responses"]), where


def test_the_stream_is_described_as_server_sent_events(document):
    responses = document["paths"][API + "agents/{id}/stream/"]["post"]["responses"]
    assert set(responses["200"]["content"]) == {"text/event-stream"}
    assert responses["400"]["content"]["application/json"]


def test_errors_share_one_shape(document):
    error = document["components"]["schemas"]["Error"]
    assert set(error["properties"]) == {"detail", "code"}


def test_swagger_ui_is_served(api_client):
    response = api_client.get(API + "docs/")
    assert response.status_code == 200
    assert b"swagger" in response.content.lower()


def test_project_views_stay_out_of_the_document():
    from memproc.api.schema import memproc_endpoints

    class Foreign:
        __module__ = "shop.views"

    class Own:
        __module__ = "memproc.api.views.threads"

    def callback(cls):
        def view():
            return None

        view.cls = cls
        return view

    kept = memproc_endpoints([("/shop/", "", "GET", callback(Foreign)), ("/t/", "", "GET", callback(Own))])
    assert [e[0] for e in kept] == ["/t/"]


def test_the_id_pattern_names_every_unprintable_character():
    """NON_PRINTABLE (the ids' "printable", which the schema's pattern spells) is Unicode's controls,
    formats, surrogates, private use and separators but the space, by Unicode 15.0 (Python 3.12): on
    a Python with another Unicode database, only code points that database leaves unassigned differ."""
    import sys
    import unicodedata

    from memproc.api.serializers.fields import NON_PRINTABLE

    listed = {code for a, b in NON_PRINTABLE for code in range(a, b + 1)}
    unprintable = {
        code
        for code in range(sys.maxunicode + 1)
        if code != 0x20 and unicodedata.category(chr(code)) in {"Cc", "Cf", "Cs", "Co", "Zs", "Zl", "Zp"}
    }
    if unicodedata.unidata_version == "15.0.0":  # the version the table was written from
        assert listed == unprintable
    else:  # another Python's database: they may differ only on code points it has not assigned
        assert all(unicodedata.category(chr(code)) == "Cn" for code in listed ^ unprintable)


def test_the_multipart_turn_form_describes_files_as_uploads_and_text_as_not_blank(document):
    form = document["components"]["schemas"]["GenerateUpload"]["properties"]
    assert form["files"]["items"] == {"type": "string", "format": "binary"}
    assert (form["messages"]["minLength"], form["messages"]["pattern"]) == (1, r"\S")


@pytest.mark.django_db
@pytest.mark.parametrize("text", ["", " ", "\n\t"])
@pytest.mark.parametrize("form", ["json", "multipart"])
def test_text_the_schema_calls_blank_is_refused(document, owner_client, agent, model, text, form):
    """The schema's rule for a message's text (a character other than whitespace) is the server's."""
    variants = document["components"]["schemas"]["GenerateRequest"]["properties"]["messages"]["oneOf"]
    assert not re.search(variants[0]["pattern"], text)
    response = owner_client.post(API + "agents/api-test/generate/", {"messages": text}, format=form)
    assert response.status_code == 400 and "messages" in response.json()
    assert model.calls == 0
