// smsgw portal: the /v1 API client (requests and the event stream), the signed-in key, error
// display, the cursor pager, SMS segment counting and DOM helpers.
// Every request leaves through `send()`, which only calls this server's /v1 routes.
'use strict';

const Portal = (() => {
  const KEY_STORAGE = 'smsgw.api_key';

  // The key lives in sessionStorage (this tab) unless the user asked to be remembered on this
  // browser (localStorage). Never both.
  function apiKey() {
    return sessionStorage.getItem(KEY_STORAGE) || localStorage.getItem(KEY_STORAGE) || '';
  }

  function setApiKey(key, remember) {
    sessionStorage.removeItem(KEY_STORAGE);
    localStorage.removeItem(KEY_STORAGE);
    if (key) (remember ? localStorage : sessionStorage).setItem(KEY_STORAGE, key);
  }

  const enc = encodeURIComponent;

  // A fresh idempotency key: one per form submission (docs/api.md, Messages: request_id).
  function requestId() {
    const bytes = crypto.getRandomValues(new Uint8Array(16));
    return `portal-${[...bytes].map((b) => b.toString(16).padStart(2, '0')).join('')}`;
  }

  // Shows the request the portal just built (never the key), so users can repeat it.
  function recordRequest(method, url, body) {
    const target = document.querySelector('[data-last-request]');
    if (!target) return;
    const lines = [`${method} ${url}`, 'x-api-key: …'];
    if (body !== undefined) {
      lines.push('content-type: application/json', '', JSON.stringify(body, null, 2));
    }
    target.textContent = lines.join('\n');
  }

  function urlOf(path, query) {
    if (!path.startsWith('/v1/')) {
      throw new Error(`the portal only calls /v1 routes, not ${path}`);
    }
    const params = new URLSearchParams();
    for (const [name, value] of Object.entries(query || {})) {
      if (value !== undefined && value !== null && value !== '') params.set(name, String(value));
    }
    return params.toString() ? `${path}?${params}` : path;
  }

  // The one network call of the portal.
  function send(url, init, key) {
    init.headers['x-api-key'] = key === undefined ? apiKey() : key;
    return fetch(url, { cache: 'no-store', credentials: 'omit', redirect: 'error', ...init });
  }

  // Calls a /v1 route and resolves to {ok, status, envelope}; never throws for HTTP errors.
  // A network failure or a body that is not the envelope becomes an error envelope too.
  // `options.key` tries another key than the signed-in one (the sign-in check).
  async function api(method, path, options = {}) {
    const url = urlOf(path, options.query);
    const init = { method, headers: { accept: 'application/json' } };
    if (options.body !== undefined) {
      init.headers['content-type'] = 'application/json';
      init.body = JSON.stringify(options.body);
    }
    recordRequest(method, url, options.body);
    let response;
    try {
      response = await send(url, init, options.key);
    } catch (err) {
      return failure(0, `the server did not answer (${err.message})`);
    }
    let envelope;
    try {
      envelope = await response.json();
    } catch (_) {
      envelope = null;
    }
    if (!envelope || typeof envelope !== 'object' || typeof envelope.status !== 'string') {
      return failure(response.status, `HTTP ${response.status} without a JSON envelope`);
    }
    if (!envelope.data || typeof envelope.data !== 'object') envelope.data = {};
    return { ok: response.ok && envelope.status === 'success', status: response.status, envelope };
  }

  function failure(status, message) {
    return {
      ok: false,
      status,
      envelope: { status: 'error', message, data: {}, error_code: 'network_error' },
    };
  }

  // Reads a server-sent event stream ({path: '/v1/…'}) with fetch (the browser's own SSE client
  // cannot send the key): calls onEvent(name, data) per event until `signal` aborts or the
  // stream ends.
  // Resolves to the HTTP status (0 when the server did not answer).
  async function stream({ path, onEvent, signal }) {
    let response;
    try {
      response = await send(urlOf(path), { method: 'GET', headers: { accept: 'text/event-stream' }, signal });
    } catch (_) {
      return 0;
    }
    if (!response.ok || !response.body) return response.status;
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = '';
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let end;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          let name = 'message';
          const data = [];
          for (const line of block.split('\n')) {
            if (line.startsWith('event:')) name = line.slice(6).trim();
            else if (line.startsWith('data:')) data.push(line.slice(5).trimStart());
          }
          if (!data.length) continue; // a comment such as :keepalive
          let parsed;
          try {
            parsed = JSON.parse(data.join('\n'));
          } catch (_) {
            continue;
          }
          onEvent(name, parsed);
        }
      }
    } catch (_) {
      // aborted or cut: the caller decides whether to open it again
    }
    return response.status;
  }

  // Builds an element: h('li', {class: 'row', onclick: fn}, 'text', child, …). Text is always
  // set as text (message content comes from strangers), never parsed as HTML.
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name.startsWith('on') && typeof value === 'function') {
        el.addEventListener(name.slice(2), value);
      } else if (name === 'class') {
        el.className = value;
      } else if (value === true) {
        el.setAttribute(name, '');
      } else {
        el.setAttribute(name, String(value));
      }
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null || child === false) continue;
      el.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return el;
  }

  function when(timestamp) {
    if (!timestamp) return '';
    const date = new Date(timestamp);
    return Number.isNaN(date.getTime()) ? timestamp : date.toLocaleString();
  }

  function errorBox(name) {
    return document.querySelector(`[data-error="${name}"]`);
  }

  // Plain words for the codes a person meets in the portal; the code itself stays in brackets
  // for integrators.
  const PLAIN = {
    invalid_phone_number: "this doesn't look like a phone number",
    unauthorized: 'this API key was refused',
    rate_limited: 'too many requests: wait a moment and try again',
    network_error: 'the server did not answer: check the connection and try again',
  };

  // The envelope's message, its error_code and data.field (and the fields it names) as one line.
  // Item positions (`recipients[3]`, `contacts[0]`) are shown counted from 1, as forms count
  // lines.
  function describe(envelope) {
    const data = envelope.data || {};
    const plain = PLAIN[envelope.error_code];
    const parts = [plain ? `${plain[0].toUpperCase()}${plain.slice(1)}` : fromOne(envelope.message || 'request failed')];
    if (plain && envelope.message && envelope.error_code !== 'network_error') parts.push(fromOne(envelope.message));
    if (data.field) parts.push(`field: ${fromOne(data.field)}`);
    if (data.status) parts.push(`current status: ${data.status}`);
    if (data.segments) parts.push(`${data.segments} segments of ${data.encoding || '?'}`);
    if (data.window_ends_at) parts.push(`until ${when(data.window_ends_at)}`);
    if (envelope.error_code) parts.push(`(${envelope.error_code})`);
    return parts.join(' · ');
  }

  // `recipients[3].to` → `recipients line 4 .to`: the API counts items from 0, people from 1.
  function fromOne(text) {
    return String(text).replace(/\[(\d+)\]/g, (_, n) => ` line ${Number(n) + 1} `).replace(/ \./g, ' ').trim();
  }

  // Whether the input called `name` holds the field `path`: the same path, or a part of it
  // that ends at a `.` or `[` (`recipients` holds `recipients[3].to`).
  function holds(name, path) {
    if (!name) return false;
    return path === name || (path.startsWith(name) && '.['.includes(path[name.length]));
  }

  // Shows an error envelope in the box next to the form, and marks the input data.field names:
  // the input (by its name or a name in its data-fields) holding the longest part of the path.
  function showError(name, envelope, form) {
    const box = errorBox(name);
    if (box) {
      box.textContent = describe(envelope);
      box.hidden = false;
    }
    if (form && envelope.data && typeof envelope.data.field === 'string') {
      const path = envelope.data.field;
      let best = 0;
      let marked = [];
      for (const input of form.querySelectorAll('[name]')) {
        const names = [input.getAttribute('name'), ...(input.dataset.fields || '').split(' ')];
        const length = Math.max(0, ...names.filter((n) => holds(n, path)).map((n) => n.length));
        if (length === 0 || length < best) continue;
        if (length > best) marked = [];
        best = length;
        marked.push(input);
      }
      for (const input of marked) input.setAttribute('aria-invalid', 'true');
    }
  }

  function clearError(name, form) {
    const box = errorBox(name);
    if (box) {
      box.textContent = '';
      box.hidden = true;
    }
    if (form) {
      for (const input of form.querySelectorAll('[aria-invalid]')) input.removeAttribute('aria-invalid');
    }
  }

  // GSM 03.38: the basic table (1 septet) and the extension table (2 septets).
  const GSM_BASIC = new Set(
    '@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !"#¤%&\'()*+,-./0123456789:;<=>?¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà',
  );
  const GSM_EXTENSION = new Set('\f^{}\\[~]|€');

  // How the server will count a text (docs/api.md, Messages): GSM-7 while every character is
  // in GSM 03.38 (160 a segment, 153 when split), else UCS-2 (70, 67 when split); a character
  // is never split across segments.
  function segments(text) {
    let gsm = true;
    const units = [];
    for (const ch of text) {
      if (GSM_BASIC.has(ch)) units.push(1);
      else if (GSM_EXTENSION.has(ch)) units.push(2);
      else {
        gsm = false;
        break;
      }
    }
    const costs = gsm ? units : [...text].map((ch) => ch.length);
    const [single, part] = gsm ? [160, 153] : [70, 67];
    const total = costs.reduce((a, b) => a + b, 0);
    let count = 0;
    if (total > single) {
      let fill = part;
      for (const cost of costs) {
        if (fill + cost > part) {
          count += 1;
          fill = 0;
        }
        fill += cost;
      }
    } else if (total > 0) {
      count = 1;
    }
    return { encoding: gsm ? 'GSM-7' : 'UCS-2', units: total, segments: count, perSegment: count > 1 ? part : single };
  }

  function counterText(text) {
    const m = segments(text);
    if (m.segments === 0) return 'Empty.';
    return `${m.units} ${m.encoding === 'GSM-7' ? 'characters' : 'UCS-2 units (a character outside GSM-7)'} · ${m.segments} SMS segment${m.segments > 1 ? 's' : ''}`;
  }

  // A cursor-paged list: `limit` and `cursor` in, {<key>: [...], has_more, next_cursor} out.
  // `render(item, pager)` draws one row; `idOf(item)` names it (default: its id).
  class Pager {
    constructor({ path, key, list, more, error, query, render, limit, idOf, onError, empty }) {
      this.path = path;
      this.key = key;
      this.list = list;
      this.more = more;
      this.error = error;
      this.query = query || (() => ({}));
      this.render = render;
      this.limit = limit || 25;
      this.idOf = idOf || ((item) => item.id);
      this.onError = onError || ((envelope) => envelope);
      this.empty = empty || 'Nothing here yet.';
      this.cursor = null;
      this.applied = {};
      this.rows = new Map();
      this.items = new Map();
      this.more.addEventListener('click', () => this.next());
    }

    // Loads the first page again with the filter as it is now, dropping what was shown.
    // Resolves to whether it worked.
    async reset() {
      this.applied = this.query();
      return this.reload();
    }

    async next() {
      const page = await this.fetchPage(this.cursor);
      if (page) this.append(page);
    }

    // Puts items of the first page that are not shown yet on top, and redraws the ones shown
    // (their status may have moved), with the filter last applied (not what is half typed).
    // When the whole first page is new, the list starts again so no gap hides between the new
    // items and the old ones. Resolves to whether it worked.
    async refresh() {
      if (this.rows.size === 0) return this.reload();
      const page = await this.fetchPage(null);
      if (!page) return false;
      const items = page[this.key] || [];
      const fresh = items.filter((item) => !this.rows.has(this.idOf(item)));
      if (page.has_more && fresh.length === items.length) return this.reload();
      for (const item of items) this.update(item, true);
      const empty = this.list.querySelector('li.empty');
      if (empty && fresh.length) empty.remove();
      let anchor = this.list.firstChild;
      for (const item of fresh) {
        const row = this.draw(item);
        this.list.insertBefore(row, anchor);
        anchor = row.nextSibling;
      }
      return true;
    }

    // The first page again with the filter last applied.
    async reload() {
      const page = await this.fetchPage(null);
      if (!page) return false;
      this.list.replaceChildren();
      this.rows.clear();
      this.items.clear();
      this.append(page);
      return true;
    }

    async fetchPage(cursor) {
      const query = { ...this.applied, limit: this.limit };
      if (cursor) query.cursor = cursor;
      const result = await api('GET', this.path, { query });
      if (!result.ok) {
        showError(this.error, this.onError(result.envelope));
        return null;
      }
      clearError(this.error);
      return result.envelope.data;
    }

    draw(item) {
      const row = this.render(item, this);
      this.rows.set(this.idOf(item), row);
      this.items.set(this.idOf(item), item);
      return row;
    }

    append(page) {
      for (const item of page[this.key] || []) this.list.append(this.draw(item));
      this.showEmpty();
      this.cursor = page.has_more ? page.next_cursor : null;
      this.more.hidden = !page.has_more;
    }

    showEmpty() {
      const empty = this.list.querySelector('li.empty');
      if (this.rows.size === 0 && !empty) this.list.append(h('li', { class: 'empty' }, this.empty));
    }

    // Swaps one row for a fresh rendering of its item (after an action or a refresh). A
    // refresh (`soft`) leaves alone a row the user is editing (class `editing`).
    update(item, soft) {
      const old = this.rows.get(this.idOf(item));
      if (!old || (soft && old.classList.contains('editing'))) return;
      old.replaceWith(this.draw(item));
    }

    remove(id) {
      const old = this.rows.get(id);
      if (old) old.remove();
      this.rows.delete(id);
      this.items.delete(id);
      this.showEmpty();
    }
  }

  return {
    api,
    stream,
    apiKey,
    setApiKey,
    requestId,
    enc,
    h,
    when,
    describe,
    showError,
    clearError,
    segments,
    counterText,
    Pager,
  };
})();
