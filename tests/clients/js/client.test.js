// The official SMSGate JavaScript client (npm android-sms-gateway, pinned, unmodified) against
// smsgw's client API (docs/compat.md), over a fetch-based HTTP client as its README shows:
// send, state, webhooks, devices, health, settings, logs, and the inbox export's path. The client sends
// Basic credentials only (the workspace id as login, an API key as password).

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import Client, { HealthStatus, ProcessState, WebHookEventType } from 'android-sms-gateway';

import {
  HttpError,
  RECIPIENTS,
  Receiver,
  fetchHttpClient,
  startServer,
  waitUntil,
} from './harness.js';

const SIGNING_KEY = 'js-client-suite-signing-key';

let server;
let receiver;
let client;

before(async () => {
  server = await startServer();
  receiver = new Receiver();
  await receiver.listen();
  receiver.key = SIGNING_KEY;
  client = new Client(server.workspace, server.liveKey, fetchHttpClient, server.clientUrl);
});

after(async () => {
  await receiver?.close();
  await server?.stop();
});

/** A status the client reads (its HTTP client throws the refusal). */
async function refusal(promise) {
  const error = await promise.then(
    () => assert.fail('expected a refusal'),
    (e) => e,
  );
  assert.ok(error instanceof HttpError, String(error));
  return error;
}

test('health answers pass or warn with its checks', async () => {
  const health = await client.getHealth();
  assert.ok([HealthStatus.Pass, HealthStatus.Warn].includes(health.status), health.status);
  assert.equal(typeof health.checks, 'object');
});

test('devices: both connected phones, seen now', async () => {
  const devices = await client.getDevices();
  const byId = new Map(devices.map((d) => [d.id, d]));
  for (const id of [server.simPhoneId, server.otherPhoneId]) {
    const device = byId.get(id);
    assert.ok(device, `${id} in ${JSON.stringify(devices)}`);
    assert.ok(device.name);
    // A connected phone is heard from now (docs/compat.md, Devices).
    const lastSeen = Date.parse(device.lastSeen);
    assert.ok(Date.now() - lastSeen < 60_000, `lastSeen ${device.lastSeen}`);
    assert.ok(!Number.isNaN(Date.parse(device.createdAt)));
  }
  // A phone paired and never connected is removed through the client.
  const { data } = await server.api('POST', '/v1/phones', { phone_number: '+14155550102' });
  assert.ok((await client.getDevices()).some((d) => d.id === data.id));
  await client.deleteDevice(data.id);
  assert.ok(!(await client.getDevices()).some((d) => d.id === data.id));
  assert.equal((await refusal(client.deleteDevice(data.id))).status, 404);
});

test('settings: snake_case sections stored, the signing key never shown', async () => {
  // The settings document has the server's snake_case keys; the client passes it through.
  await client.updateSettings({
    messages: { limit_period: 'PerDay', limit_value: 100 },
    webhooks: { signing_key: SIGNING_KEY, retry_count: 3 },
  });
  await client.patchSettings({ messages: { limit_value: 5 } });
  const settings = await client.getSettings();
  assert.equal(settings.messages.limit_period, 'PerDay');
  assert.equal(settings.messages.limit_value, 5);
  assert.equal(settings.webhooks.retry_count, 3);
  assert.equal(settings.webhooks.signing_key, undefined);
  // The client's camelCase typing (`limitPeriod`) is refused, naming the field, and changes
  // nothing.
  const refused = await refusal(client.patchSettings({ messages: { limitPeriod: 'PerHour' } }));
  assert.equal(refused.status, 400);
  assert.match(refused.body.message, /limitPeriod/);
  assert.equal((await client.getSettings()).messages.limit_period, 'PerDay');
});

test('send: followed to Delivered, each recipient signed on the webhooks', async () => {
  const sentHook = await client.registerWebhook({ url: receiver.url, event: WebHookEventType.SmsSent });
  const deliveredHook = await client.registerWebhook({
    id: 'js-delivered',
    url: receiver.url,
    event: WebHookEventType.SmsDelivered,
  });
  assert.equal(deliveredHook.id, 'js-delivered');
  assert.equal(deliveredHook.event, WebHookEventType.SmsDelivered);
  const hooks = new Set((await client.getWebhooks()).map((w) => w.id));
  assert.ok(hooks.has(sentHook.id) && hooks.has(deliveredHook.id), [...hooks].join());

  const sent = await client.send({ message: 'hello from js', phoneNumbers: RECIPIENTS });
  assert.ok([ProcessState.Pending, ProcessState.Processed].includes(sent.state), sent.state);
  assert.deepEqual(sent.recipients.map((r) => r.phoneNumber).sort(), [...RECIPIENTS].sort());
  const state = await waitUntil(
    async () => {
      const s = await client.getState(sent.id);
      return s.state === ProcessState.Delivered && s;
    },
    { what: `message ${sent.id} Delivered` },
  );
  assert.ok(state.recipients.every((r) => r.state === ProcessState.Delivered));
  assert.ok([server.simPhoneId, server.otherPhoneId].includes(state.deviceId), state.deviceId);

  for (const [hook, event] of [
    [sentHook, 'sms:sent'],
    [deliveredHook, 'sms:delivered'],
  ]) {
    for (const number of RECIPIENTS) {
      const { verified, headers, body } = await receiver.waitFor(
        (b) =>
          b.webhookId === hook.id &&
          b.event === event &&
          b.payload?.messageId === sent.id &&
          b.payload?.phoneNumber === number,
      );
      assert.ok(verified, `signature of ${JSON.stringify(body)} did not verify`);
      assert.equal(headers['content-type'], 'application/json');
      assert.equal(body.deviceId, state.deviceId);
    }
  }

  await client.deleteWebhook(sentHook.id);
  await client.deleteWebhook(deliveredHook.id);
  const left = (await client.getWebhooks()).map((w) => w.id);
  assert.ok(!left.includes(sentHook.id) && !left.includes(deliveredHook.id), left.join());
});

test('logs: the timeline of the messages sent, within the range asked', async () => {
  const to = new Date(Date.now() + 60_000);
  const from = new Date(Date.now() - 10 * 60_000);
  const logs = await client.getLogs(from, to);
  assert.ok(logs.length > 0, 'the send above left entries');
  assert.ok(logs.some((entry) => entry.context?.event === 'delivered'), JSON.stringify(logs));
  for (const entry of logs) {
    const at = Date.parse(entry.createdAt);
    assert.ok(at >= from.getTime() && at <= to.getTime(), entry.createdAt);
  }
  assert.deepEqual(await client.getLogs(new Date('2020-01-01'), new Date('2020-01-02')), []);
});

test('inbox export: the path the client posts to is not routed, as upstream', async () => {
  // exportInbox posts to /inbox/export; upstream and smsgw route /inbox/refresh and
  // /messages/inbox/export (docs/compat.md, Inbox).
  const request = {
    deviceId: server.simPhoneId,
    since: new Date(Date.now() - 24 * 3600_000),
    until: new Date(),
  };
  assert.equal((await refusal(client.exportInbox(request))).status, 404);
});

test('a test key sends through the simulated phone', async () => {
  const test = new Client(server.workspace, server.testKey, fetchHttpClient, server.clientUrl);
  const sent = await test.send({ message: 'test mode', phoneNumbers: [RECIPIENTS[0]] });
  const state = await waitUntil(
    async () => {
      const s = await test.getState(sent.id);
      return s.state === ProcessState.Delivered && s;
    },
    { what: `test message ${sent.id} Delivered` },
  );
  assert.equal(state.recipients[0].phoneNumber, RECIPIENTS[0]);
  // The live key does not see it.
  assert.equal((await refusal(client.getState(sent.id))).status, 404);
});
