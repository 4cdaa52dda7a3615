// smsgw portal: the /v1 API client, error display, cursor pager and DOM helpers.
// Every request leaves through `api()`, which only calls this server's /v1 routes.
'use strict';

const Portal = (() => {
  const KEY_STORAGE = 'smsgw.api_key';

  function apiKey() {
    return sessionStorage.getItem(KEY_STORAGE) || '';
  }

  function setApiKey(key) {
    if (key) {
      sessionStorage.setItem(KEY_STORAGE, key);
    } else {
      sessionStorage.removeItem(KEY_STORAGE);
    }
  }

  const enc = encodeURIComponent;

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

  // Calls a /v1 route and resolves to {ok, status, envelope}; never throws for HTTP errors.
  // A network failure or a body that is not the envelope becomes an error envelope too.
  async function api(method, path, options = {}) {
    if (!path.startsWith('/v1/')) {
      throw new Error(`the portal only calls /v1 routes, not ${path}`);
    }
    const params = new URLSearchParams();
    for (const [name, value] of Object.entries(options.query || {})) {
      if (value !== undefined && value !== null && value !== '') params.set(name, String(value));
    }
    const url = params.toString() ? `${path}?${params}` : path;
    const headers = { 'x-api-key': apiKey(), accept: 'application/json' };
    const init = { method, headers, cache: 'no-store', credentials: 'omit', redirect: 'error' };
    if (options.body !== undefined) {
      headers['content-type'] = 'application/json';
      init.body = JSON.stringify(options.body);
    }
    recordRequest(method, url, options.body);
    let response;
    try {
      response = await fetch(url, init);
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

  // The envelope's message, its error_code and data.field (and the fields it names) as one line.
  function describe(envelope) {
    const data = envelope.data || {};
    const parts = [envelope.message || 'request failed'];
    if (data.field) parts.push(`field: ${data.field}`);
    if (data.status) parts.push(`current status: ${data.status}`);
    if (data.id) parts.push(`id: ${data.id}`);
    if (data.segments) parts.push(`${data.segments} segments of ${data.encoding || '?'}`);
    if (data.window_ends_at) parts.push(`until ${when(data.window_ends_at)}`);
    if (envelope.error_code) parts.push(`(${envelope.error_code})`);
    return parts.join(' · ');
  }

  // Whether the input called `name` holds the field `path`: the same path, or a part of it
  // that ends at a `.` or `[` (`recipients` holds `recipients[3].to`).
  function holds(name, path) {
    if (!name) return false;
    return path === name || (path.startsWith(name) && '.['.includes(path[name.length]));
  }

  // Shows an error envelope in the box next to the form, and marks the input data.field names:
  // the input (by its name or a name in its data-fields) holding the longest part of the path.
  // `recipients[3].to` marks the `recipients` input; `rules[2].keywords[0]` marks the
  // `rules[2].keywords` input, or the `rules` fieldset when the form has no such input.
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

  // A cursor-paged list: `limit` and `cursor` in, {<key>: [...], has_more, next_cursor} out.
  // `render(item, pager)` draws one row; `idOf(item)` names it (default: its id).
  class Pager {
    constructor({ path, key, list, more, error, query, render, limit, idOf, onError }) {
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
      this.cursor = null;
      this.rows = new Map();
      this.items = new Map();
      this.more.addEventListener('click', () => this.next());
    }

    // Loads the first page again, dropping what was shown.
    async reset() {
      this.cursor = null;
      const page = await this.fetchPage(null);
      if (!page) return;
      this.list.replaceChildren();
      this.rows.clear();
      this.items.clear();
      this.append(page);
    }

    async next() {
      const page = await this.fetchPage(this.cursor);
      if (page) this.append(page);
    }

    // Puts items of the first page that are not shown yet on top, and redraws the ones shown
    // (their status may have moved). When the whole first page is new, the list starts again
    // so no gap hides between the new items and the old ones.
    async refresh() {
      if (this.rows.size === 0) return this.reset();
      const page = await this.fetchPage(null);
      if (!page) return;
      const items = page[this.key] || [];
      const fresh = items.filter((item) => !this.rows.has(this.idOf(item)));
      if (page.has_more && fresh.length === items.length) return this.reset();
      for (const item of items) this.update(item);
      let anchor = this.list.firstChild;
      for (const item of fresh) {
        const row = this.draw(item);
        this.list.insertBefore(row, anchor);
        anchor = row.nextSibling;
      }
    }

    async fetchPage(cursor) {
      const query = { ...this.query(), limit: this.limit };
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
      if (this.rows.size === 0) {
        this.list.append(h('li', { class: 'empty' }, 'Nothing here yet.'));
      }
      this.cursor = page.has_more ? page.next_cursor : null;
      this.more.hidden = !page.has_more;
    }

    // Swaps one row for a fresh rendering of its item (after an action or a refresh).
    update(item) {
      const old = this.rows.get(this.idOf(item));
      if (old) old.replaceWith(this.draw(item));
    }

    remove(id) {
      const old = this.rows.get(id);
      if (old) old.remove();
      this.rows.delete(id);
      this.items.delete(id);
    }
  }

  return { api, apiKey, setApiKey, enc, h, when, describe, showError, clearError, Pager };
})();
