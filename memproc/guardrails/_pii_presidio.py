"""PIIDetector(engine="presidio"): Microsoft Presidio's AnalyzerEngine over a spaCy pipeline finds the
types no rule can: PERSON is a `name`, LOCATION (spaCy's GPE, LOC and FAC: a street, a city, a
country) an `address`, and DATE_TIME a `date_of_birth` only when a birth word ("born", "DOB", "date
of birth", "birthday", "geboren", "né", ...) comes before it in its sentence, within
`BIRTH_CUE_CHARS` characters: any other date is left alone.

Presidio reads the same folded copy the rules do (`memproc.guardrails._normalize.fold`), so a name
with a zero-width space inside is found and its redaction covers what was typed. Its registry holds
only the spaCy recognizer and Presidio's date patterns: the rules claim e-mails, phones, cards and
the rest (and Presidio's e-mail and URL recognizers would try to fetch the public suffix list).
Presidio's context enhancer is left out: it logs the words around each entity at DEBUG.

The engine is built once per PIIDetector (two detectors may name two models), at first use and under
a lock: loading a spaCy pipeline is slow (the large English one carries hundreds of MB of word
vectors), and a detector built at import time must not pay for it. `checked_model` (at construction)
imports nothing: it finds the packages and the model, and never lets Presidio download one (its
spaCy engine calls `spacy.cli.download` for a name that is neither an installed package nor a
directory). A model that is there but does not load is logged once, and the detector runs on its
rules until the process restarts; an analysis that raises is logged each time, masked. Neither fails
the turn.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import os
import re
import threading
from collections.abc import Collection
from pathlib import Path
from typing import Any

from memproc import logs
from memproc.exceptions import ConfigurationError
from memproc.guardrails._normalize import fold
from memproc.guardrails._pii_patterns import DEFAULT_TYPES, Match

logger = logging.getLogger("memproc.guardrails")

ENGINES = ("rules", "presidio")
DEFAULT_MODEL = "en_core_web_lg"  # Presidio's own default
LANGUAGE = "en"
# Our type for each Presidio entity; the rules claim every other type Presidio knows.
ENTITIES = {"name": "PERSON", "address": "LOCATION", "date_of_birth": "DATE_TIME"}
TYPES = tuple(ENTITIES)
INSTALL_HINT = 'pip install "django-memproc[presidio]"'
MODEL_HINT = (
    f"install a spaCy model (`python -m spacy download {DEFAULT_MODEL}`, or pip install its wheel) or "
    "pass presidio_model= the directory of a saved pipeline (`nlp.to_disk(...)`)"
)
# spaCy labels (OntoNotes, and PER/LOC/MISC of the WikiNER models) as Presidio entities; the
# labels ignored are dropped quietly instead of logged as unmapped on every text.
NER_CONFIGURATION = {
    "model_to_presidio_entity_mapping": {
        "PER": "PERSON",
        "PERSON": "PERSON",
        "GPE": "LOCATION",
        "LOC": "LOCATION",
        "FAC": "LOCATION",
        "LOCATION": "LOCATION",
        "DATE": "DATE_TIME",
    },
    "labels_to_ignore": [
        "ORG", "ORGANIZATION", "NORP", "MISC", "TIME", "CARDINAL", "EVENT", "LANGUAGE", "LAW", "MONEY",
        "ORDINAL", "PERCENT", "PRODUCT", "QUANTITY", "WORK_OF_ART",
    ],
}  # fmt: skip

BIRTH_CUE_CHARS = 48
_BIRTH_CUE = re.compile(
    r"(?i)\b(?:born|birth(?:day|date)?|d\.?o\.?b\b\.?|geb(?:oren\b|\.)|n(?:é|ée|ee)\b|nacid[oa]\b"
    r"|naissance|nascimento|nascita|geboortedatum)"
)
_SENTENCE_END = re.compile(r"[.!?](?=\s)")


def default_types(engine: str) -> tuple[str, ...]:
    """What PIIDetector looks for when `types=` is not given: the rules' types, and with Presidio
    the types it finds."""
    return (*DEFAULT_TYPES, *TYPES) if engine == "presidio" else DEFAULT_TYPES


def presidio_recognizer(
    owner: str, *, engine: str, model: Any, types: Collection[str], threshold: float
) -> PresidioRecognizer | None:
    """The Presidio recognizer of engine="presidio" for the chosen `types` (None for "rules"), its
    options checked: ConfigurationError for a model without Presidio, no Presidio type chosen, or a
    missing package or model."""
    if engine != "presidio":
        if model is not None:
            raise ConfigurationError(f"{owner}(presidio_model=...) needs engine='presidio'")
        return None
    wanted = [t for t in TYPES if t in types]
    if not wanted:
        raise ConfigurationError(
            f"{owner}(engine='presidio') finds {', '.join(TYPES)}; types=... chooses none of them"
        )
    checked = checked_model(owner, DEFAULT_MODEL if model is None else model)
    return PresidioRecognizer(model=checked, types=wanted, threshold=threshold, owner=owner)


def checked_model(owner: str, model: Any) -> str:
    """The spaCy model to load (a package name or a directory), checked without importing anything:
    raises ConfigurationError when presidio-analyzer, spaCy or the model is not installed here."""
    if isinstance(model, os.PathLike):
        model = os.fspath(model)
    if not isinstance(model, str) or not model.strip():
        raise ConfigurationError(
            f"{owner}(presidio_model=...) must name a spaCy model package or a model directory, not {model!r}"
        )
    for module, distribution in (("presidio_analyzer", "presidio-analyzer"), ("spacy", "spaCy")):
        if importlib.util.find_spec(module) is None:
            raise ConfigurationError(
                f'{owner}(engine="presidio") needs {distribution}: {INSTALL_HINT}, then {MODEL_HINT}; '
                'or use engine="rules"'
            )
    found = _installed(model)
    if found is None:
        raise ConfigurationError(
            f'{owner}(engine="presidio") found no spaCy model {model!r}, neither an installed package '
            f"nor a directory: {MODEL_HINT}"
        )
    return found


def _installed(model: str) -> str | None:
    """`model` as Presidio must be given it (a user's "~" expanded) when it is a directory or an
    installed package (spaCy's own `is_package` test), else None."""
    path = os.path.expanduser(model)
    if Path(path).exists():
        return path
    try:
        importlib.metadata.distribution(model)
    except importlib.metadata.PackageNotFoundError:
        return None
    return model


class PresidioRecognizer:
    """Where Presidio finds `types` in a text, for one PIIDetector (see the module docstring)."""

    def __init__(self, *, model: str, types: Collection[str], threshold: float, owner: str) -> None:
        self.model = model
        self.entities = [ENTITIES[t] for t in TYPES if t in types]
        self.threshold = threshold
        self.owner = owner
        self._lock = threading.Lock()
        self._analyzer: Any = None
        self._failed = False

    def matches(self, text: str) -> list[Match]:
        """The spans Presidio scores at `threshold` or more, in `text` coordinates; [] (logged) when
        it cannot run. Never raises."""
        folded = fold(text)
        if not folded.text.strip():
            return []
        analyzer = self._analyzer_once()
        if analyzer is None:
            return []
        try:
            results = analyzer.analyze(
                text=folded.text, language=LANGUAGE, entities=self.entities, score_threshold=self.threshold
            )
        except Exception as exc:  # the rules still screen the text; the error may quote it: masked
            logs.failure(
                logger, "memproc: %s: Presidio failed; this text had the rules alone", self.owner, exc=exc
            )
            return []
        matches = []
        for result in results:
            kind = _type_of(result.entity_type, folded.text, result.start)
            if kind is not None and result.end > result.start:
                matches.append(Match(kind, *folded.source_span(result.start, result.end)))
        return matches

    def _analyzer_once(self) -> Any:
        analyzer = self._analyzer
        if analyzer is not None or self._failed:
            return analyzer
        with self._lock:
            if self._analyzer is None and not self._failed:
                try:
                    self._analyzer = build_analyzer(self.model, owner=self.owner)
                except ConfigurationError as exc:
                    self._failed = True
                    logs.failure(
                        logger,
                        "memproc: %s could not load Presidio; it runs on the rules alone until restarted",
                        self.owner,
                        exc=exc,
                    )
            return self._analyzer


def build_analyzer(model: str, *, owner: str) -> Any:
    """Presidio's AnalyzerEngine over the spaCy pipeline `model`: the spaCy recognizer and the date
    patterns, no context enhancer. Raises ConfigurationError when it does not load."""
    if _installed(model) != model:  # gone since the check: Presidio would try to download it
        raise ConfigurationError(f'{owner}(engine="presidio") found no spaCy model {model!r}: {MODEL_HINT}')
    try:
        from presidio_analyzer import AnalyzerEngine, RecognizerRegistry
        from presidio_analyzer.context_aware_enhancers import ContextAwareEnhancer
        from presidio_analyzer.nlp_engine import NlpEngineProvider
        from presidio_analyzer.predefined_recognizers import DateRecognizer

        class NoContext(ContextAwareEnhancer):
            """Scores as the recognizers gave them; the default enhancer logs the words around each
            entity at DEBUG."""

            def __init__(self) -> None:
                super().__init__(0, 0, 0, 0)

            def enhance_using_context(
                self,
                text: str,
                raw_results: list[Any],
                nlp_artifacts: Any,
                recognizers: list[Any],
                context: list[str] | None = None,
            ) -> list[Any]:
                return raw_results

        configuration = {
            "nlp_engine_name": "spacy",
            "models": [{"lang_code": LANGUAGE, "model_name": model}],
            "ner_model_configuration": NER_CONFIGURATION,
        }
        nlp_engine = NlpEngineProvider(nlp_configuration=configuration).create_engine()
        registry = RecognizerRegistry(supported_languages=[LANGUAGE])
        registry.add_nlp_recognizer(nlp_engine=nlp_engine)
        registry.add_recognizer(DateRecognizer(supported_language=LANGUAGE))
        return AnalyzerEngine(
            registry=registry,
            nlp_engine=nlp_engine,
            supported_languages=[LANGUAGE],
            context_aware_enhancer=NoContext(),
        )
    except Exception as exc:
        # spaCy's text is not shown (memproc.redaction): the class and the model say what to check.
        raise ConfigurationError(
            f'{owner}(engine="presidio") could not load the spaCy model {model!r} ({type(exc).__name__}): '
            f"is it a spaCy pipeline (a package or an `nlp.to_disk` directory) for this spaCy version? "
            f"{MODEL_HINT}"
        ) from exc


def _type_of(entity: str, text: str, start: int) -> str | None:
    if entity == "PERSON":
        return "name"
    if entity == "LOCATION":
        return "address"
    if entity == "DATE_TIME" and _after_birth_word(text, start):
        return "date_of_birth"
    return None


def _after_birth_word(text: str, start: int) -> bool:
    """A birth word ends in the `BIRTH_CUE_CHARS` before `start`, on its line, with no sentence end
    after it ("D.O.B. 1985-10-12" counts; "born in Leeds. The meeting is on 12/10" does not)."""
    window = max(text.rfind("\n", 0, start) + 1, start - BIRTH_CUE_CHARS)
    cues = list(_BIRTH_CUE.finditer(text, window, start))
    if not cues:
        return False
    ends = [m.end() for m in _SENTENCE_END.finditer(text, window, start)]
    return not ends or cues[-1].end() >= ends[-1]
