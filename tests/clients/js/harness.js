// The JavaScript real-client suite's set-up (README, Development), as tests/clients/python's
// conftest.py does it: one smsgw server started from the built binary on a free loopback port
// with a temporary SQLite file; a workspace and its keys made with the CLI; two phones paired
// and run by `smsgw phone-sim` (child processes), so sends go all the way to Delivered; and a
// webhook receiver on 127.0.0.1 that verifies the SMSGate signature as a receiver written for
// the SMSGate app does. Nothing leaves the loopback interface.

import { execFileSync, spawn } from 'node:child_process';
import { createHmac, timingSafeEqual } from 'node:crypto';
import { existsSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const BINARY = process.env.SMSGW_BIN ?? path.join(REPO, 'target', 'debug', 'smsgw');

// The numbers of the two phones (fictional North American numbers).
export const SIM_PHONE = '+14155550100';
export const OTHER_PHONE = '+14155550101';
// Recipients.
export const RECIPIENTS = ['+14155550123', '+14155550124'];

const START_TIMEOUT_MS = 30_000;

/** Polls `check` until it returns something truthy (returned), or throws after `timeoutMs`. */
export async function waitUntil(check, { timeoutMs = 15_000, what = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`${what} not met within ${timeoutMs} ms`);
    await sleep(50);
  }
}

/** A refused request: the HTTP status and the parsed body (`{message}` on the client API). */
export class HttpError extends Error {
  constructor(status, body) {
    super(`HTTP ${status}: ${JSON.stringify(body)}`);
    this.status = status;
    this.body = body;
  }
}

async function request(method, url, body, headers) {
  const response = await fetch(url, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
  const text = await response.text();
  const parsed = text ? JSON.parse(text) : undefined;
  if (!response.ok) throw new HttpError(response.status, parsed);
  return parsed;
}

/**
 * The HTTP client the official client is given (it brings none): fetch, JSON in and out, a
 * non-2xx answer thrown as {@link HttpError}, an empty body (204) as `undefined`.
 */
export const fetchHttpClient = {
  get: (url, headers) => request('GET', url, undefined, headers),
  post: (url, body, headers) => request('POST', url, body, headers),
  put: (url, body, headers) => request('PUT', url, body, headers),
  patch: (url, body, headers) => request('PATCH', url, body, headers),
  delete: (url, headers) => request('DELETE', url, undefined, headers),
};

/** smsgw's own `/v1` API (set-up only: pairing phones). */
function v1(base, key) {
  return (method, route, body) =>
    request(method, base + route, body, { 'x-api-key': key, 'content-type': 'application/json' });
}

async function waitForLine(file, pattern, child) {
  const deadline = Date.now() + START_TIMEOUT_MS;
  while (Date.now() < deadline) {
    const text = existsSync(file) ? readFileSync(file, 'utf8') : '';
    const match = text.match(pattern);
    if (match) return match;
    if (child.exitCode !== null) throw new Error(`process exited with ${child.exitCode}:\n${text}`);
    await sleep(50);
  }
  throw new Error(`no line matching ${pattern} within ${START_TIMEOUT_MS} ms`);
}

/**
 * Starts the server and the phones; resolves to what the tests need and a `stop()` that ends
 * every child process and removes the temporary directory.
 */
export async function startServer() {
  if (!existsSync(BINARY)) throw new Error(`${BINARY} is missing: run \`cargo build\` first`);
  const dir = mkdtempSync(path.join(os.tmpdir(), 'smsgw-js-clients-'));
  const env = {
    ...process.env,
    SMSGW_DATABASE__URL: `sqlite://${path.join(dir, 'smsgw.db')}?mode=rwc`,
    SMSGW_SERVER__BIND: '127.0.0.1:0',
    // The webhook receiver listens on http://127.0.0.1.
    SMSGW_WEBHOOKS__ALLOW_INSECURE_TARGETS: 'true',
    SMSGW_LOG__LEVEL: 'warn',
  };
  const created = execFileSync(BINARY, ['workspace', 'create', '--name', 'js-client-suite'], {
    env,
    encoding: 'utf8',
    timeout: 60_000,
  });
  const field = (name) => created.match(new RegExp(`${name}: (\\S+)`))[1];
  const workspace = field('workspace');
  const liveKey = field('live key');
  const testKey = field('test key');

  const children = [];
  const stop = async () => {
    for (const child of children.reverse()) {
      if (child.exitCode === null) {
        const exited = new Promise((resolve) => child.once('exit', resolve));
        child.kill('SIGTERM');
        await Promise.race([exited, sleep(10_000).then(() => child.kill('SIGKILL'))]);
      }
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const start = (args, log) => {
    const out = openSync(path.join(dir, log), 'w');
    const child = spawn(BINARY, args, { env, stdio: ['ignore', out, out] });
    children.push(child);
    return child;
  };
  try {
    const serve = start(['serve'], 'serve.log');
    const base = (await waitForLine(path.join(dir, 'serve.log'), /listening on (http:\/\/[0-9.:]+)/, serve))[1];
    const api = v1(base, liveKey);
    const phones = {};
    for (const number of [SIM_PHONE, OTHER_PHONE]) {
      const { data } = await api('POST', '/v1/phones', { phone_number: number });
      phones[number] = data.id;
      const log = `phone-sim-${number}.log`;
      const sim = start(
        ['phone-sim', '--server', base, '--token', data.device_token, '--deliver-after-ms', '50'],
        log,
      );
      await waitUntil(
        async () => {
          if (sim.exitCode !== null) {
            throw new Error(`phone-sim exited:\n${readFileSync(path.join(dir, log), 'utf8')}`);
          }
          return (await api('GET', `/v1/phones/${data.id}`)).data.online;
        },
        { timeoutMs: START_TIMEOUT_MS, what: `phone-sim of ${number} online` },
      );
    }
    return {
      base,
      clientUrl: `${base}/3rdparty/v1`,
      workspace,
      liveKey,
      testKey,
      api,
      simPhoneId: phones[SIM_PHONE],
      otherPhoneId: phones[OTHER_PHONE],
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

/**
 * A webhook receiver written the way one for the SMSGate app is: it recomputes
 * HMAC-SHA256(signing key, raw body + X-Timestamp) and compares it with X-Signature.
 */
export class Receiver {
  constructor() {
    this.key = '';
    this.deliveries = []; // {verified, headers, body}
    this.server = http.createServer((req, res) => {
      const chunks = [];
      req.on('data', (chunk) => chunks.push(chunk));
      req.on('end', () => {
        const raw = Buffer.concat(chunks);
        const timestamp = req.headers['x-timestamp'] ?? '';
        const signature = Buffer.from(req.headers['x-signature'] ?? '');
        const expected = Buffer.from(
          createHmac('sha256', this.key).update(raw).update(timestamp).digest('hex'),
        );
        const fresh = Math.abs(Date.now() / 1000 - Number(timestamp || 0)) < 300;
        const verified =
          signature.length === expected.length && timingSafeEqual(signature, expected) && fresh;
        this.deliveries.push({ verified, headers: req.headers, body: JSON.parse(raw.toString()) });
        res.writeHead(verified ? 200 : 401).end();
      });
    });
  }

  /** Listens on a free loopback port; `url` is then the hook's URL. */
  async listen() {
    await new Promise((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${this.server.address().port}/hook`;
  }

  /** The first delivery whose JSON body satisfies `predicate`. */
  async waitFor(predicate, timeoutMs = 15_000) {
    try {
      return await waitUntil(() => this.deliveries.find((d) => predicate(d.body)), {
        timeoutMs,
        what: 'a matching delivery',
      });
    } catch (error) {
      const got = JSON.stringify(this.deliveries.map((d) => d.body));
      throw new Error(`${error.message}; got ${got}`);
    }
  }

  close() {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(resolve));
  }
}
