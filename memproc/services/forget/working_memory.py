"""Taking back what the model wrote into working memory from messages that are forgotten.

A revision's lineage (`turn_id`, `message_ids`) names the turn that wrote it and the messages that
turn saved. When one of them is forgotten, the working memory goes back to its value before that
turn's first change, and the revisions that held the fact go, replaced by one "forget" revision that
holds no old text. When a later revision built on the fact (another turn, a person), memproc cannot
tell what to keep: the change is held for an operator (`held_resolve`, from the admin), and the
receipt says so until then.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import Q

from memproc import models
from memproc.models import public_thread_id

Revision = models.WorkingMemoryRevision
Scope = Revision.Scope


@dataclass(frozen=True, slots=True)
class TakeBack:
    reverted: int
    held: list[dict[str, Any]]


def take_back(
    *,
    resource_id: str,
    thread_keys: Collection[str],
    forgotten: Collection[str],
    whole_threads: Collection[str] = (),
    actor: Any = None,
) -> TakeBack:
    """Reverts or holds the resource's working-memory changes whose lineage names a forgotten
    message key (or, for `whole_threads`, a change made in one of those threads' turns, which also
    catches revisions written before lineage was recorded). Runs in the caller's transaction."""
    forgotten, whole_threads = set(forgotten), set(whole_threads)
    rows = Revision.objects.filter(
        Q(scope=Scope.RESOURCE, key=resource_id) | Q(scope=Scope.THREAD, key__in=list(thread_keys))
    ).values_list("scope", "key", "version", "message_ids", "thread_id")
    versions: dict[tuple[str, str], set[int]] = {}
    touched: dict[tuple[str, str], set[int]] = {}
    for scope, key, version, message_ids, thread_id in rows:
        versions.setdefault((scope, key), set()).add(version)
        if forgotten.intersection(message_ids or ()) or thread_id in whole_threads:
            touched.setdefault((scope, key), set()).add(version)
    reverted, held = 0, []
    for (scope, key), mine in sorted(touched.items()):
        if scope == Scope.THREAD and key in whole_threads:
            continue  # the thread goes, its working memory with it
        first = min(mine)
        later = {v for v in versions[(scope, key)] if v > first} - mine
        if later or not _revert(scope=scope, key=key, from_version=first, actor=actor):
            held.append({"scope": scope, "key": key, "from_version": first})
        else:
            reverted += 1
    return TakeBack(reverted=reverted, held=held)


def held_resolve(*, held: Iterable[dict[str, Any]], keep_current: bool, actor: Any = None) -> int:
    """An operator's decision on held changes: go back to the value before the forgotten turn
    (dropping what was built on it), or keep the current value (corrected by hand first). Either
    way the revisions from the forgotten turn on go, so none of them holds the fact. Returns how
    many were resolved; one that changed meanwhile is tried again from its new state."""
    done = 0
    for entry in held:
        if _revert(
            scope=entry["scope"],
            key=entry["key"],
            from_version=int(entry["from_version"]),
            actor=actor,
            keep_current=keep_current,
        ):
            done += 1
    return done


def _revert(*, scope: str, key: str, from_version: int, actor: Any, keep_current: bool = False) -> bool:
    """Sets the working memory to its value before `from_version` (or keeps it) and replaces the
    revisions from `from_version` on with one "forget" revision; False if it changed meanwhile."""
    owner = models.Thread if scope == Scope.THREAD else models.Resource
    revisions = Revision.objects.filter(scope=scope, key=key)
    current = owner.objects.filter(pk=key).values_list("working_memory", "working_memory_version").first()
    first = revisions.filter(version=from_version).values_list("old", flat=True).first()
    if current is None or first is None:
        return True  # its owner or revision is gone already: nothing holds the fact here
    text, version = current
    value = text if keep_current else first
    swapped = owner.objects.filter(pk=key, working_memory_version=version).update(
        working_memory=value, working_memory_version=version + 1
    )
    if not swapped:
        return False
    revisions.filter(version__gte=from_version).delete()
    Revision.objects.create(
        scope=scope,
        key=key,
        old="",  # what was there is what is forgotten
        new=value,
        version=version + 1,
        source=Revision.Source.FORGET,
        actor=actor if getattr(actor, "is_authenticated", False) else None,
    )
    return True


def shown_key(scope: str, key: str) -> str:
    return public_thread_id(key) if scope == Scope.THREAD else key
