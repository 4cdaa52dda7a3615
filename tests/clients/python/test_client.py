"""The official SMSGate Python client (android-sms-gateway, unmodified) against smsgw's client
API (docs/compat.md): the sync client over requests and httpx, the async client over aiohttp
and httpx, with Basic and Bearer credentials."""

import asyncio
import contextlib
import datetime
import time

import pytest
import requests

from android_sms_gateway import (
    APIClient,
    AsyncAPIClient,
    DeviceSettings,
    HealthStatus,
    LimitPeriod,
    Message,
    MessagesQueryFilter,
    ProcessState,
    QueryPagination,
    SettingsMessages,
    SettingsWebhooks,
    SmsReceivedPayload,
    TextMessage,
    Webhook,
    WebhookEvent,
)
from android_sms_gateway.ahttp import AiohttpAsyncHttpClient, HttpxAsyncHttpClient
from android_sms_gateway.errors import APIError
from android_sms_gateway.http import HttpxHttpClient, RequestsHttpClient

from conftest import PACED_PHONE, RECIPIENTS, wait_until

SIGNING_KEY = "client-suite-signing-key"

SYNC_BACKENDS = {"requests": RequestsHttpClient, "httpx": HttpxHttpClient}
ASYNC_BACKENDS = {"aiohttp": AiohttpAsyncHttpClient, "httpx": HttpxAsyncHttpClient}


def credentials(server, key, auth):
    """(login, password): Basic with the workspace id as login, or Bearer (no login)."""
    return (server.workspace, key) if auth == "basic" else (None, key)


@contextlib.contextmanager
def sync_client(server, backend, auth, key=None):
    """The sync client over the named backend (entered here: a given backend is not entered
    by the client)."""
    login, password = credentials(server, key or server.live_key, auth)
    with SYNC_BACKENDS[backend]() as http:
        with APIClient(login, password, base_url=server.client_url, http=http) as client:
            yield client


@contextlib.asynccontextmanager
async def async_client(server, backend, auth, key=None):
    login, password = credentials(server, key or server.live_key, auth)
    async with ASYNC_BACKENDS[backend]() as http:
        async with AsyncAPIClient(
            login, password, base_url=server.client_url, http_client=http
        ) as client:
            yield client


def text(body, device_id, *numbers):
    """A text message routed to one phone (without `device_id` smsgw may pick either)."""
    return Message(
        phone_numbers=list(numbers or RECIPIENTS[:1]),
        text_message=TextMessage(text=body),
        device_id=device_id,
    )


def is_delivery_for(webhook_id, message_id, event):
    return lambda body: (
        body.get("webhookId") == webhook_id
        and body.get("event") == event
        and body.get("payload", {}).get("messageId") == message_id
    )


# --- sync client -------------------------------------------------------------------------


@pytest.mark.parametrize("backend,auth", [("requests", "basic"), ("httpx", "bearer")])
def test_sync_client(server, receiver, backend, auth):
    receiver.key = SIGNING_KEY
    with sync_client(server, backend, auth) as client:
        # Health (answered without credentials upstream; the client sends them anyway).
        health = client.health_check()
        assert health.status in (HealthStatus.PASS, HealthStatus.WARN)
        assert client.liveness_check().status == HealthStatus.PASS

        # Devices: both paired phones, dates parsed by the client.
        devices = {d.id: d for d in client.list_devices()}
        assert server.sim_phone_id in devices and server.paced_phone_id in devices
        assert devices[server.sim_phone_id].name

        # Settings: the signing key is stored and never shown.
        client.update_settings(
            DeviceSettings(
                messages=SettingsMessages(limit_period=LimitPeriod.PER_DAY, limit_value=100),
                webhooks=SettingsWebhooks(signing_key=SIGNING_KEY, retry_count=3),
            )
        )
        client.patch_settings(DeviceSettings(messages=SettingsMessages(limit_value=5)))
        settings = client.get_settings()
        assert settings.messages.limit_period == LimitPeriod.PER_DAY
        assert settings.messages.limit_value == 5
        assert settings.webhooks.retry_count == 3
        assert settings.webhooks.signing_key is None

        # A webhook created through the client, delivered and verified on the receiver.
        hook = client.create_webhook(
            Webhook(id=None, url=receiver.url, event=WebhookEvent.SMS_DELIVERED)
        )
        assert hook.id and hook.url == receiver.url and hook.event == WebhookEvent.SMS_DELIVERED
        assert hook.id in {w.id for w in client.get_webhooks()}

        # Send to two recipients and follow the state to Delivered.
        sent = client.send(text(f"sync {backend}", server.sim_phone_id, *RECIPIENTS))
        assert sent.state in (ProcessState.Pending, ProcessState.Processed)
        assert sorted(r.phone_number for r in sent.recipients) == sorted(RECIPIENTS)
        state = wait_until(
            lambda: (s := client.get_state(sent.id)).state == ProcessState.Delivered and s,
            what=f"message {sent.id} Delivered",
        )
        assert all(r.state == ProcessState.Delivered for r in state.recipients)
        assert "Delivered" in (state.states or {})
        for number in RECIPIENTS:
            verified, headers, body = receiver.wait_for(
                lambda b, n=number: is_delivery_for(hook.id, sent.id, "sms:delivered")(b)
                and b["payload"]["phoneNumber"] == n
            )
            assert verified, f"signature of {body} did not verify"
            assert headers["content-type"] == "application/json"

        # List and filter.
        delivered = client.get_messages(
            query=MessagesQueryFilter(
                state="Delivered",
                device_id=server.sim_phone_id,
                from_=datetime.datetime.utcnow() - datetime.timedelta(minutes=10),
            ),
            pagination=QueryPagination(limit=100),
            sort="-created_at",
        )
        assert sent.id in {m.id for m in delivered}
        assert all(m.state == ProcessState.Delivered for m in delivered)
        assert len(client.get_messages(pagination=QueryPagination(limit=1))) == 1

        # Cancel: a message for the paced phone stays Pending.
        waiting = client.send(text("to cancel", server.paced_phone_id))
        assert waiting.state == ProcessState.Pending
        client.cancel_message(waiting.id)
        assert client.get_state(waiting.id).state == ProcessState.Cancelled
        # Cancelling again: 409. The requests backend raises requests' own HTTPError on DELETE.
        with pytest.raises((APIError, requests.HTTPError)) as refused:
            client.cancel_message(waiting.id)
        status = getattr(refused.value, "status_code", None) or refused.value.response.status_code
        assert status == 409

        client.delete_webhook(hook.id)
        assert hook.id not in {w.id for w in client.get_webhooks()}


def test_received_sms_reaches_a_webhook_in_the_app_shape(server, receiver):
    receiver.key = SIGNING_KEY
    with sync_client(server, "httpx", "bearer", key=server.test_key) as client:
        client.patch_settings(DeviceSettings(webhooks=SettingsWebhooks(signing_key=SIGNING_KEY)))
        hook = client.create_webhook(
            Webhook(id="suite-received", url=receiver.url, event=WebhookEvent.SMS_RECEIVED)
        )
        assert hook.id == "suite-received"
        server.api.call(
            "POST",
            "/v1/test/inbound",
            server.test_key,
            {"from_number": RECIPIENTS[0], "to_number": PACED_PHONE, "content": "hello back"},
        )
        verified, _, body = receiver.wait_for(
            lambda b: b.get("webhookId") == "suite-received"
            and b["payload"].get("message") == "hello back"
        )
        assert verified
        payload = SmsReceivedPayload.from_dict(body["payload"])
        assert payload.sender == RECIPIENTS[0]
        assert payload.message == "hello back"
        assert payload.received_at.tzinfo is not None
        client.delete_webhook(hook.id)


# --- async client ------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("backend,auth", [("aiohttp", "bearer"), ("httpx", "basic")])
async def test_async_client(server, receiver, backend, auth):
    receiver.key = SIGNING_KEY
    async with async_client(server, backend, auth) as client:
        health = await client.health_check()
        assert health.status in (HealthStatus.PASS, HealthStatus.WARN)
        assert server.sim_phone_id in {d.id for d in await client.list_devices()}

        await client.patch_settings(
            DeviceSettings(webhooks=SettingsWebhooks(signing_key=SIGNING_KEY))
        )
        settings = await client.get_settings()
        assert settings.webhooks is None or settings.webhooks.signing_key is None

        hook = await client.create_webhook(
            Webhook(id=None, url=receiver.url, event=WebhookEvent.SMS_SENT)
        )
        sent = await client.send(text(f"async {backend}", server.sim_phone_id))
        deadline = time.monotonic() + 15
        while (state := await client.get_state(sent.id)).state != ProcessState.Delivered:
            assert time.monotonic() < deadline, f"still {state.state}"
            await asyncio.sleep(0.05)
        verified, _, body = await asyncio.to_thread(
            receiver.wait_for, is_delivery_for(hook.id, sent.id, "sms:sent")
        )
        assert verified, f"signature of {body} did not verify"
        assert body["payload"]["partsCount"] == 1

        listed = await client.get_messages(
            query=MessagesQueryFilter(state="Delivered"), pagination=QueryPagination(limit=100)
        )
        assert sent.id in {m.id for m in listed}

        waiting = await client.send(text("to cancel", server.paced_phone_id))
        await client.cancel_message(waiting.id)
        assert (await client.get_state(waiting.id)).state == ProcessState.Cancelled
        with pytest.raises(APIError) as refused:
            await client.cancel_message(waiting.id)
        assert refused.value.status_code == 409

        await client.delete_webhook(hook.id)
        assert hook.id not in {w.id for w in await client.get_webhooks()}
