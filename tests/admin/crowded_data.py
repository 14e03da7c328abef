"""Admin data as a busy site has it: long resource, thread and agent ids, long reasons and errors,
several rows in every list, a flagged message, turn records of today, a summary and an outbox job.
Built on the `conversation` fixture's thread (tests/admin/conftest.py) and real turns (turn_data)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.utils import timezone

from memproc import models
from memproc.services.compaction.summary import thread_summary_update
from memproc.services.working_memory import working_memory_update
from memproc.testing import HashEmbedder
from tests.admin.conftest import PNG_BYTES, Conversation, store_attachment
from tests.admin.turn_data import TurnData, make_turns
from tests.factories import ResourceFactory, ThreadFactory, TripwireLogFactory

RESOURCE = "org-4f1c9a7e-acme-logistics-customer-success-eu-west"
THREAD = "ticket-2024-11-05-refund-request-order-88231-damaged-in-transit"
AGENT = "customer-support-escalations-assistant-eu-west"
TITLE = "Refund for a parcel that arrived soaked after the courier left it outside in the rain overnight"
TRACKING_URL = (
    "https://tracking.example-courier.com/shipments/88231/events?ref=AB12CD34EF56GH78IJ90KL12MN34OP56"
    "&lang=en-GB&utm_source=support-assistant"
)
REVIEWER = "maria.fernandez-lopez@operations.example.com"
REASONS = [
    (
        "pii-detector",
        "input",
        "Message contains what looks like a payment card number (16 digits passing the Luhn check) "
        "together with an expiry date and a security code; the PII policy blocks payment cards in input",
    ),
    (
        "moderation",
        "output",
        "The answer repeated the customer's full home address and phone number from working memory, "
        "which the output policy forbids in replies to a shared support inbox",
    ),
    (
        "prompt-injection-detector",
        "tool_result",
        "The result of fetch_order_page asked the model to ignore its instructions and email the "
        "whole order history to an outside address (score 0.98)",
    ),
]
BLOCKED_TEXT = "My card is 4111 1111 1111 1111, expiry 09/27, code 123 — please refund to this one"
FLAGGED_TEXT = "You can reach me on +44 7700 900123 or at 12 Harbour Road, Falmouth TR11 2AB"
LAST_ERROR = (
    "EmbedderUnavailable: POST https://api.openai.com/v1/embeddings failed after 5 attempts: "
    "HTTPSConnectionPool(host='api.openai.com', port=443): Read timed out. (read timeout=30)"
)


@dataclass
class Crowded:
    conversation: Conversation
    turns: TurnData
    thread: models.Thread  # the long-named one
    messages: list[models.Message]
    flagged: models.Message
    tripwire: models.TripwireLog  # pending, with stored content
    attachment: models.Attachment
    turn_record: models.TurnRecord  # long agent id, blocked, linked to `tripwire`
    outbox_job: models.OutboxJob
    forget_receipt: models.ForgetReceipt  # held for review, long resource and thread ids
    pending_call: models.PendingToolCall  # waiting for approval, long tool name and arguments


def make_crowded(conversation: Conversation) -> Crowded:
    reviewer = get_user_model().objects.create_user(REVIEWER, password="x", is_staff=True)
    resource = ResourceFactory(id=RESOURCE)
    thread = ThreadFactory(public_id=THREAD, resource=resource, title=TITLE, agent_id=AGENT)
    now = timezone.now()
    texts = [
        "The parcel for order 88231 arrived soaked through and the box had split open.",
        f"Tracking says it was left at the front door: {TRACKING_URL}",
        "I'm sorry about that. I can refund the order or send a replacement; which would you prefer?",
        FLAGGED_TEXT,
        "A refund please, to the card I paid with.",
        "Done: the refund of £84.20 will reach your card within 5 working days.",
    ]
    rows = [
        models.Message(
            id=models.message_key(RESOURCE, f"msg_01JC{i:02d}X7Y9Z2W4V6T8R0P3N5M7K9"),
            public_id=f"msg_01JC{i:02d}X7Y9Z2W4V6T8R0P3N5M7K9",
            thread=thread,
            resource_id=RESOURCE,
            role="user" if i % 2 == 0 else "assistant",
            content={"parts": [{"type": "text", "text": text}]},
            text=text,
            token_count=len(text.split()),
            sequence=i + 1,
            created_at=now - timedelta(minutes=30 - i),
        )
        for i, text in enumerate(texts)
    ]
    flag = {
        "status": "flagged",
        "channel": "input",
        "processor": "pii-detector",
        "score": 0.93,
        "categories": ["phone_number", "street_address", "postcode"],
        "spans": [[18, 34], [41, 78]],
    }
    rows[3].content = {**rows[3].content, "metadata": {"quarantine": flag}}
    messages = models.Message.objects.bulk_create(rows)
    models.Thread.objects.filter(pk=thread.pk).update(last_sequence=len(rows))

    attachment = store_attachment(
        resource_id=RESOURCE,
        message=messages[0],
        name="Screenshot 2024-11-05 at 14.32.07 - damaged parcel, front view (courier photo).png",
        content_type="image/png",
        data=PNG_BYTES,
    )
    embedder = HashEmbedder(dimensions=64)
    models.MessageEmbedding.objects.bulk_create(
        models.MessageEmbedding(
            message=m,
            thread_id=THREAD,
            resource_id=RESOURCE,
            model=embedder.id,
            dimensions=64,
            content_hash=f"{i:064x}",
            vector=embedder.embed([m.text])[0],
        )
        for i, m in enumerate(messages)
    )
    working_memory_update(
        scope="resource",
        key=RESOURCE,
        value="# Customer\n- Name: Ada Lovelace-Byron\n- Prefers: refunds to the original card\n",
        source="model",
    )
    working_memory_update(
        scope="thread",
        key=thread.pk,
        value=f"Order 88231 damaged in transit; refund issued. Tracking: {TRACKING_URL}",
        source="api",
    )
    thread_summary_update(
        thread_key=thread.pk,
        text="The customer's parcel (order 88231) arrived soaked; they chose a refund to their card.",
    )

    logs = []
    for i in range(6):
        processor, phase, reason = REASONS[i % len(REASONS)]
        reviewed = i >= 3
        logs.append(
            TripwireLogFactory(
                agent_id=AGENT,
                processor_id=processor,
                phase=phase,
                reason=reason,
                thread_id=THREAD,
                resource_id=RESOURCE,
                metadata={"channel": phase, "score": 0.9 + i / 100, "message_id": "blocked-1"},
                content=[
                    {"id": "blocked-1", "role": "user", "parts": [{"type": "text", "text": BLOCKED_TEXT}]}
                ],
                status="confirmed" if reviewed else "pending",
                reviewed_by=reviewer if reviewed else None,
                reviewed_at=now if reviewed else None,
                note="A real card: the customer was told to use the payment page." if reviewed else "",
            )
        )

    records = []
    for i, status in enumerate(["completed", "completed", "blocked", "failed", "completed", "completed"]):
        records.append(
            models.TurnRecord.objects.create(
                agent_id=AGENT if i % 2 == 0 else "billing-disputes-and-chargebacks-agent",
                thread_id=THREAD,
                resource_id=RESOURCE,
                status=status,
                model="openai/gpt-4.1-mini-2025-04-14",
                steps=2,
                usage={"prompt_tokens": 1200 + i, "completion_tokens": 80, "total_tokens": 1280 + i},
                tripwire=logs[0] if status == "blocked" else None,
                error="ModelUnavailable" if status == "failed" else "",
                started_at=now - timedelta(minutes=20 - i),
                duration_ms=850.0 + 1000 * i,
            )
        )
    outbox_job = models.OutboxJob.objects.create(
        task="memproc.embed_messages",
        kwargs={"message_ids": [m.pk for m in messages]},
        attempts=5,
        last_error=LAST_ERROR,
        # After 5 failed attempts a job waits out its backoff (memproc.background): not due now, so
        # no outbox sweep of a test's inline job delivers it while the pages are read.
        next_attempt_at=timezone.now() + timedelta(seconds=32),
    )
    forget_receipt = models.ForgetReceipt.objects.create(
        resource_id=RESOURCE,
        scope=models.ForgetReceipt.Scope.THREAD,
        thread_id=THREAD,
        salt="0" * 16,
        status=models.ForgetReceipt.Status.REVIEW,
        counts={"messages": 214, "working_memory_reverted": 0, "turn_records": 31, "tripwire_logs": 2},
        held=[{"scope": "resource", "key": RESOURCE, "from_version": 3}],
        actor=reviewer,
    )
    pending_call = models.PendingToolCall.objects.create(
        agent_id=AGENT,
        thread_id=THREAD,
        resource_id=RESOURCE,
        tool_name="refund_order_to_original_payment_method_with_customer_notification",
        tool_call_id="call_01JC7X7Y9Z2W4V6T8R0P3N5M7K9",
        arguments={
            "order": "88231",
            "amount": 84.20,
            "currency": "GBP",
            "note": "Parcel arrived soaked through; the customer chose a refund to the card they paid with.",
            "tracking_url": TRACKING_URL,
        },
        permission="memproc.change_pendingtoolcall",
        turn={
            "input": [],
            "responses": [
                {
                    "id": "pending-reply",
                    "role": "assistant",
                    "content": {"parts": [{"type": "text", "text": "I will refund £84.20 to your card."}]},
                    "created_at": None,
                }
            ],
            "calls": [],
            "results": [],
            "step": 0,
        },
        expires_at=now + timedelta(hours=24),
    )
    return Crowded(
        conversation=conversation,
        turns=make_turns(),
        thread=models.Thread.objects.get(pk=thread.pk),
        messages=messages,
        flagged=messages[3],
        tripwire=logs[0],
        attachment=attachment,
        turn_record=records[2],
        outbox_job=outbox_job,
        forget_receipt=forget_receipt,
        pending_call=pending_call,
    )
