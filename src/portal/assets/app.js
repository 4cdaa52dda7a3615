// smsgw portal: sign-in, the sections (home, conversations, send, campaigns, contacts, phones,
// messages, webhooks, AI replies) and the live status. Each form builds the request the API
// documents and sends it through Portal.api; nothing else reaches the network.
'use strict';

(() => {
  const { api, stream, apiKey, setApiKey, requestId, enc, h, when, showError, clearError, counterText, Pager } = Portal;
  const $ = (selector) => document.querySelector(selector);
  const field = (form, name) => form.elements.namedItem(name);
  const value = (form, name) => (field(form, name).value || '').trim();

  const SECTIONS = ['home', 'conversations', 'send', 'campaigns', 'contacts', 'phones', 'inbox', 'webhooks', 'drafts'];
  // Lists on screen are read again this often (docs/api.md, Portal: 15 s); `?refresh_ms=` on
  // the page's address changes it (at least 200 ms), for tests and for impatient owners.
  const PAGE = new URLSearchParams(location.search);
  const REFRESH_MS = Math.max(200, Number(PAGE.get('refresh_ms')) || 15000);
  // Sections whose lists were loaded with the current key.
  const loaded = new Set();
  // GET /v1/workspace of the signed-in key.
  let workspace = null;
  // The phones of the workspace, by id (kept current by the event stream).
  let phoneList = [];

  // ---- helpers -------------------------------------------------------------------------

  function lines(text) {
    return text.split(/[\n,;]+/).map((w) => w.trim()).filter(Boolean);
  }

  function commaList(text) {
    return text.split(',').map((w) => w.trim()).filter(Boolean);
  }

  // A datetime-local value as an ISO 8601 timestamp with offset (UTC), or undefined.
  function isoFromLocal(text) {
    if (!text) return undefined;
    const date = new Date(text);
    return Number.isNaN(date.getTime()) ? text : date.toISOString();
  }

  // An error found before any request: shown like the API's own envelope.
  function localError(name, form, fieldName, message, code) {
    showError(name, { status: 'error', message, data: fieldName ? { field: fieldName } : {}, error_code: code || 'validation_failed' }, form);
  }

  function showResult(name, ...content) {
    const box = document.querySelector(`[data-result="${name}"]`);
    if (box) box.replaceChildren(h('p', { class: 'ok' }, ...content));
  }

  function clearResult(name) {
    const box = document.querySelector(`[data-result="${name}"]`);
    if (box) box.replaceChildren();
  }

  function badge(text, kind) {
    return h('span', { class: `badge ${kind || ''}` }, text);
  }

  // A button whose action runs once at a time: disabled until the action's promise settles.
  function button(label, onclick, kind) {
    const el = h('button', { type: 'button', class: kind || 'secondary' }, label);
    el.addEventListener('click', async () => {
      if (el.disabled) return;
      el.disabled = true;
      try {
        await onclick();
      } finally {
        el.disabled = false;
      }
    });
    return el;
  }

  // Handles a form's submissions one at a time: the submit buttons are disabled while
  // `handler(form, requestId)` runs and a second submit meanwhile is ignored (a double-click
  // sends once). Each submission has its own request_id; after a failure that may not have
  // reached the server (no answer) the same id is kept until the form is edited, so pressing
  // again cannot create a second copy. Editing the form clears its old error and result lines.
  function guard(form, name, handler) {
    let busy = false;
    let pendingId = null;
    form.addEventListener('input', () => {
      pendingId = null;
      clearError(name, form);
      clearResult(name);
    });
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      if (busy) return;
      busy = true;
      const buttons = [...form.querySelectorAll('button[type="submit"]')];
      for (const b of buttons) b.disabled = true;
      clearError(name, form);
      clearResult(name);
      const id = pendingId || requestId();
      pendingId = id;
      try {
        const result = await handler(form, id);
        if (!result || result.status !== 0) pendingId = null;
        if (isDuplicate(result)) {
          clearError(name, form);
          showResult(name, duplicateText(result));
        }
      } finally {
        busy = false;
        for (const b of buttons) b.disabled = false;
      }
    });
  }

  // 409 duplicate_request: an earlier attempt with this request_id (one the server answered
  // too late to be seen) already created it.
  function isDuplicate(result) {
    return Boolean(result && result.status === 409 && result.envelope.error_code === 'duplicate_request');
  }

  function duplicateText(result) {
    const id = result.envelope.data && result.envelope.data.id;
    return `Already done by your earlier attempt${id ? ` (id ${id})` : ''}: nothing was created twice.`;
  }

  async function copy(text, target) {
    try {
      await navigator.clipboard.writeText(text);
    } catch (_) {
      const range = document.createRange();
      range.selectNodeContents(target);
      const selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
    }
  }

  function displayName(contact) {
    if (!contact) return '';
    return contact.name || [contact.first_name, contact.last_name].filter(Boolean).join(' ');
  }

  // ---- phone numbers as people type them ---------------------------------------------------

  const E164 = /^\+[1-9]\d{6,14}$/;
  const lookups = new Map();

  // The E.164 form of a typed number, through GET /v1/numbers/lookup (the workspace's default
  // country for national numbers): {e164} or {error} in plain words.
  async function normalize(text) {
    const input = text.trim();
    if (!input) return { error: 'a phone number is required' };
    if (E164.test(input)) return { e164: input };
    if (lookups.has(input)) return lookups.get(input);
    const result = await api('GET', '/v1/numbers/lookup', { query: { number: input } });
    let answer;
    if (!result.ok) answer = { error: Portal.describe(result.envelope), status: result.status };
    else if (!result.envelope.data.valid || !result.envelope.data.e164) {
      answer = { error: `"${input}" doesn't look like a phone number${result.envelope.data.reason ? ` (${result.envelope.data.reason})` : ''}` };
    } else answer = { e164: result.envelope.data.e164, info: result.envelope.data };
    if (result.ok) lookups.set(input, answer);
    return answer;
  }

  // Inputs marked data-phone show their normalised form under them when left.
  for (const input of document.querySelectorAll('input[data-phone]')) {
    input.addEventListener('change', async () => {
      const note = input.form.querySelector(`[data-normalized="${input.name}"]`);
      if (!note) return;
      if (!input.value.trim()) {
        note.textContent = '';
        return;
      }
      const answer = await normalize(input.value);
      if (answer.error) note.textContent = answer.error;
      else {
        const info = answer.info;
        note.textContent = `Will be sent as ${answer.e164}${info && info.type ? ` (${info.type.replace(/_/g, ' ')})` : ''}${info && info.premium_rate ? ' · premium rate: costly to text' : ''}`;
      }
      if (input.form.id === 'send-form' && answer.e164) warnOptedOut(answer.e164, 'send-form');
    });
  }

  // Warns when the contact with that number texted STOP (their messages are refused).
  async function warnOptedOut(number, name) {
    const box = document.querySelector(`[data-optout="${name}"]`);
    if (!box) return;
    box.hidden = true;
    const result = await api('GET', '/v1/contacts', { query: { q: number, limit: 5 } });
    if (!result.ok) return;
    const contact = (result.envelope.data.contacts || []).find((c) => c.phone_number === number);
    if (contact && contact.opted_out) {
      box.textContent = `${displayName(contact) || number} texted STOP${contact.opted_out_at ? ` on ${when(contact.opted_out_at)}` : ''}: the message will not be sent.`;
      box.hidden = false;
    }
  }

  // The E.164 form of a form's number input, or null after showing why it is not one.
  async function numberOf(form, name, errorName) {
    const answer = await normalize(value(form, name));
    if (answer.error) {
      localError(errorName, form, name, answer.error, 'invalid_phone_number');
      return null;
    }
    return answer.e164;
  }

  // Live segment counters under message boxes.
  function counter(textarea, name) {
    const out = document.querySelector(`[data-counter="${name}"]`);
    const update = () => {
      out.textContent = counterText(textarea.value);
    };
    textarea.addEventListener('input', update);
    update();
    return update;
  }

  // ---- sign in and sections --------------------------------------------------------------

  const keyForm = $('#key-form');

  function showSignedIn() {
    const signedIn = Boolean(workspace);
    keyForm.hidden = signedIn;
    $('nav.sections').hidden = !signedIn;
    $('main').hidden = !signedIn;
    $('#workspace').hidden = !signedIn;
    if (!signedIn) return;
    $('#workspace-name').textContent = workspace.name || 'workspace';
    const mode = $('#key-mode');
    mode.textContent = workspace.mode === 'live' ? 'live' : 'test mode: nothing is really sent';
    mode.className = `badge ${workspace.mode === 'live' ? 'live' : 'test'}`;
    const form = $('#workspace-form');
    field(form, 'name').value = workspace.name || '';
    // Empty when the workspace follows the server's default (shown as the placeholder).
    const country = field(form, 'default_country');
    country.value = workspace.default_country_set === false ? '' : workspace.default_country || '';
    country.placeholder = workspace.default_country || 'US';
  }

  // Checks a key with GET /v1/workspace before using it: a refused key is never stored.
  async function signIn(key, remember) {
    const result = await api('GET', '/v1/workspace', { key });
    if (!result.ok) return result;
    setApiKey(key, remember);
    workspace = result.envelope.data;
    startOver();
    return result;
  }

  guard(keyForm, 'key-form', async (form) => {
    const key = value(form, 'api_key');
    const result = await signIn(key, field(form, 'remember').checked);
    if (!result.ok) {
      if (result.status === 401) {
        localError('key-form', form, 'api_key', 'This API key was refused: check that it was copied whole and is not revoked.', 'unauthorized');
      } else showError('key-form', result.envelope, form);
      return result;
    }
    form.reset();
    return result;
  });

  $('#key-forget').addEventListener('click', () => {
    setApiKey('');
    workspace = null;
    startOver();
  });

  function startOver() {
    loaded.clear();
    lookups.clear();
    for (const list of document.querySelectorAll('ul.rows')) list.replaceChildren();
    for (const more of document.querySelectorAll('button[id$="-more"]')) more.hidden = true;
    hidePairing();
    hideSigningKey();
    clearAiSettings();
    closeThread();
    showSignedIn();
    live.restart();
    if (workspace) {
      loadPhoneChoices();
      open(current());
    }
  }

  function current() {
    const name = location.hash.slice(1);
    return SECTIONS.includes(name) ? name : 'home';
  }

  function open(name) {
    for (const section of SECTIONS) {
      $(`#${section}`).hidden = section !== name;
      const link = document.querySelector(`nav a[href="#${section}"]`);
      if (section === name) link.setAttribute('aria-current', 'page');
      else link.removeAttribute('aria-current');
    }
    if (workspace && !loaded.has(name)) {
      loaded.add(name);
      LOADERS[name]();
    }
  }

  window.addEventListener('hashchange', () => open(current()));

  // ---- home --------------------------------------------------------------------------------

  // The SVG namespace, read from an empty <svg> in the page (no URL literal in the scripts).
  const SVG = $('#svg-ns').namespaceURI;
  const svg = (tag, attrs, ...children) => {
    const el = document.createElementNS(SVG, tag);
    for (const [name, v] of Object.entries(attrs || {})) el.setAttribute(name, String(v));
    for (const child of children) el.append(child);
    return el;
  };

  async function loadHome() {
    const [overview, daily] = await Promise.all([
      api('GET', '/v1/overview'),
      api('GET', '/v1/stats/daily', { query: { days: 7 } }),
    ]);
    if (!overview.ok) return showError('home', overview.envelope);
    if (!daily.ok) return showError('home', daily.envelope);
    clearError('home');
    const o = overview.envelope.data;
    const today = o.today || {};
    for (const name of ['sent', 'delivered', 'failed', 'received']) {
      document.querySelector(`[data-figure="${name}"]`).textContent = String(today[name] || 0);
    }
    const phones = o.phones || {};
    document.querySelector('[data-figure="phones"]').textContent = `${phones.online || 0} of ${phones.total || 0}`;
    document.querySelector('[data-figure="campaigns"]').textContent = String(o.campaigns_running || 0);
    document.querySelector('[data-figure="webhooks"]').textContent = String(o.webhook_endpoints_failing || 0);
    drawChart(daily.envelope.data.days || []);
  }

  // Grouped bars per day (sent, delivered, failed, received), drawn as inline SVG.
  function drawChart(days) {
    const kinds = ['sent', 'delivered', 'failed', 'received'];
    const width = 700;
    const height = 220;
    const top = 16;
    const bottom = 28;
    const left = 36;
    const max = Math.max(1, ...days.flatMap((d) => kinds.map((k) => d[k] || 0)));
    const slot = (width - left) / Math.max(days.length, 1);
    const bar = Math.max(2, (slot - 12) / kinds.length);
    const scale = (height - top - bottom) / max;
    const chart = svg('svg', { viewBox: `0 0 ${width} ${height}`, class: 'bars', 'aria-hidden': 'true' });
    chart.append(svg('line', { x1: left, x2: width, y1: height - bottom, y2: height - bottom, class: 'axis' }));
    chart.append(svg('text', { x: left - 6, y: top + 4, class: 'label end' }, document.createTextNode(String(max))));
    chart.append(svg('text', { x: left - 6, y: height - bottom, class: 'label end' }, document.createTextNode('0')));
    days.forEach((day, i) => {
      const x0 = left + i * slot + 6;
      kinds.forEach((kind, j) => {
        const n = day[kind] || 0;
        const barHeight = n * scale;
        const rect = svg('rect', { x: x0 + j * bar, y: height - bottom - barHeight, width: bar - 1, height: barHeight, class: kind });
        rect.append(svg('title', {}, document.createTextNode(`${day.date}: ${n} ${kind}`)));
        chart.append(rect);
      });
      const label = new Date(`${day.date}T00:00:00Z`).toLocaleDateString(undefined, { weekday: 'short', timeZone: 'UTC' });
      chart.append(svg('text', { x: x0 + (bar * kinds.length) / 2, y: height - 8, class: 'label middle' }, document.createTextNode(label)));
    });
    $('#chart').replaceChildren(chart);
  }

  guard($('#workspace-form'), 'workspace-form', async (form) => {
    const body = {
      name: value(form, 'name'),
      default_country: value(form, 'default_country').toUpperCase() || null,
    };
    const result = await api('PATCH', '/v1/workspace', { body });
    if (!result.ok) {
      showError('workspace-form', result.envelope, form);
      return result;
    }
    workspace = { ...workspace, ...result.envelope.data };
    lookups.clear();
    showSignedIn();
    showResult('workspace-form', 'Saved.');
    return result;
  });

  // ---- conversations -----------------------------------------------------------------------

  const conversationsFilter = $('#conversations-filter');
  const conversations = new Pager({
    path: '/v1/conversations',
    key: 'conversations',
    list: $('#conversations-list'),
    more: $('#conversations-more'),
    error: 'conversations',
    idOf: (c) => c.number,
    query: () => Object.fromEntries(new FormData(conversationsFilter)),
    render: conversationRow,
    empty: 'No conversations yet: messages you send and receive appear here, one line per customer.',
  });

  conversationsFilter.addEventListener('submit', (event) => {
    event.preventDefault();
    conversations.reset();
  });

  let threadNumber = null;

  function conversationRow(conversation) {
    const last = conversation.last_message || {};
    const name = displayName(conversation.contact);
    const row = h(
      'li',
      { class: `row conversation${conversation.number === threadNumber ? ' selected' : ''}`, tabindex: 0, 'data-number': conversation.number },
      h(
        'div',
        { class: 'meta' },
        h('strong', {}, name || conversation.number),
        name ? ` · ${conversation.number}` : '',
        conversation.pending_drafts ? [' ', badge(`${conversation.pending_drafts} AI draft${conversation.pending_drafts > 1 ? 's' : ''}`, 'status-pending')] : '',
        h('span', { class: 'note' }, ` · ${when(conversation.last_activity_at)}`),
      ),
      h('p', { class: 'content preview-line' }, last.direction === 'outbound' ? 'You: ' : '', last.body || ''),
    );
    const choose = () => openThread(conversation.number);
    row.addEventListener('click', choose);
    row.addEventListener('keydown', (event) => {
      if (event.key === 'Enter') choose();
    });
    return row;
  }

  const thread = $('#thread');
  const threadMessages = $('#thread-messages');
  const replyForm = $('#reply-form');
  const updateReplyCounter = counter(field(replyForm, 'content'), 'reply');
  let threadOlder = null;
  // Drafts whose text the owner is editing keep it across refreshes.
  const draftEdits = new Map();

  async function openThread(number) {
    if (threadNumber !== number) {
      threadNumber = number;
      field(replyForm, 'content').value = '';
      delete field(replyForm, 'from_number').dataset.touched;
      warnOptedOut(number, 'reply');
      updateReplyCounter();
      clearError('reply-form', replyForm);
      draftEdits.clear();
    }
    for (const row of document.querySelectorAll('#conversations-list li.conversation')) {
      row.classList.toggle('selected', row.dataset.number === number);
    }
    return loadThread();
  }

  function closeThread() {
    threadNumber = null;
    thread.hidden = true;
    threadMessages.replaceChildren();
  }

  async function loadThread() {
    if (!threadNumber) return false;
    const result = await api('GET', `/v1/conversations/${enc(threadNumber)}`);
    if (!result.ok) {
      showError('conversations', result.envelope);
      return false;
    }
    const data = result.envelope.data;
    if (data.number !== threadNumber) return false;
    const name = displayName(data.contact);
    $('#thread-title').textContent = name ? `${name} · ${data.number}` : data.number;
    threadMessages.replaceChildren(...(data.messages || []).map(bubble));
    threadOlder = data.has_more ? data.next_cursor : null;
    $('#thread-older').hidden = !threadOlder;
    fillReplyFrom(data.messages || []);
    thread.hidden = false;
    return true;
  }

  $('#thread-older').addEventListener('click', async () => {
    if (!threadOlder) return;
    const result = await api('GET', `/v1/conversations/${enc(threadNumber)}`, { query: { cursor: threadOlder } });
    if (!result.ok) return showError('conversations', result.envelope);
    threadMessages.prepend(...(result.envelope.data.messages || []).map(bubble));
    threadOlder = result.envelope.data.has_more ? result.envelope.data.next_cursor : null;
    $('#thread-older').hidden = !threadOlder;
  });

  // Reply from the number the customer wrote to (or we last wrote from).
  function fillReplyFrom(messages) {
    const input = field(replyForm, 'from_number');
    const last = messages[messages.length - 1];
    const ours = last ? (last.direction === 'inbound' ? last.to_number : last.from_number) : '';
    if (ours && !input.dataset.touched) input.value = ours;
  }
  field(replyForm, 'from_number').addEventListener('input', (event) => {
    event.target.dataset.touched = '1';
  });

  function bubble(message) {
    const inbound = message.direction === 'inbound';
    const text = message.content ?? message.body ?? '';
    const drafts = (message.drafts || []).filter((d) => d.status === 'pending');
    return h(
      'li',
      { class: `bubble ${inbound ? 'inbound' : 'outbound'}`, 'data-message': message.id },
      h('p', { class: 'content' }, text === '' ? h('em', {}, '(text removed by retention)') : text),
      h(
        'p',
        { class: 'note' },
        when(message.created_at),
        inbound ? '' : [' · ', badge(message.status, `status-${message.status}`)],
        message.failure_reason ? ` · ${message.failure_reason}` : '',
      ),
      drafts.map((draft) => draftBox(draft)),
    );
  }

  // An AI draft beside the message it answers: edit, send or discard it.
  function draftBox(draft) {
    const text = h('textarea', { rows: 2, 'aria-label': 'AI draft reply' }, draftEdits.get(draft.id) ?? draft.body ?? draft.content ?? '');
    text.addEventListener('input', () => draftEdits.set(draft.id, text.value));
    return h(
      'div',
      { class: 'draft-box' },
      h('p', { class: 'note' }, 'AI draft reply'),
      text,
      h(
        'div',
        { class: 'actions' },
        button(
          'Send draft',
          async () => {
            const original = draft.body ?? draft.content ?? '';
            const body = text.value !== original ? { content: text.value } : {};
            const result = await api('POST', `/v1/ai/drafts/${enc(draft.id)}/send`, { body });
            if (!result.ok) return showError('reply-form', result.envelope);
            draftEdits.delete(draft.id);
            await loadThread();
            conversations.refresh();
          },
          'primary',
        ),
        button('Discard', async () => {
          const result = await api('POST', `/v1/ai/drafts/${enc(draft.id)}/discard`);
          if (!result.ok) return showError('reply-form', result.envelope);
          draftEdits.delete(draft.id);
          await loadThread();
          conversations.refresh();
        }),
      ),
    );
  }

  guard(replyForm, 'reply-form', async (form, id) => {
    if (!threadNumber) return null;
    const from = await numberOf(form, 'from_number', 'reply-form');
    if (!from) return null;
    const body = {
      from_number: from,
      to_number: threadNumber,
      content: field(form, 'content').value,
      request_id: id,
    };
    const result = await api('POST', '/v1/messages/send', { body });
    if (!result.ok) {
      showError('reply-form', result.envelope, form);
      return result;
    }
    field(form, 'content').value = '';
    updateReplyCounter();
    await loadThread();
    conversations.refresh();
    return result;
  });

  // ---- messages (the integrators' inbox) ---------------------------------------------------

  const inboxFilter = $('#inbox-filter');
  // Messages whose timeline is open: kept open when their row is redrawn by a refresh.
  const timelinesOpen = new Set();
  const inbox = new Pager({
    path: '/v1/messages',
    key: 'messages',
    list: $('#inbox-list'),
    more: $('#inbox-more'),
    error: 'inbox',
    query: () => Object.fromEntries(new FormData(inboxFilter)),
    render: messageRow,
    empty: 'No messages match.',
  });

  inboxFilter.addEventListener('submit', (event) => {
    event.preventDefault();
    inbox.reset().then(stampInbox);
  });

  function stampInbox(ok) {
    if (ok) $('#inbox-updated').textContent = `Updated ${new Date().toLocaleTimeString()}.`;
  }

  async function fillTimeline(message, timeline) {
    const result = await api('GET', `/v1/messages/${enc(message.id)}`);
    if (!result.ok) return showError('inbox', result.envelope);
    timeline.replaceChildren(
      ...(result.envelope.data.events || []).map((e) =>
        h('li', {}, `${when(e.at)} · ${e.type || e.kind} (${e.status})`, e.detail ? ` · ${e.detail}` : ''),
      ),
    );
    timeline.hidden = false;
  }

  function messageRow(message, pager) {
    const timeline = h('ol', { class: 'timeline', hidden: true });
    const outbound = message.direction === 'outbound';
    const actions = [
      button('Timeline', async () => {
        if (timelinesOpen.has(message.id)) {
          timelinesOpen.delete(message.id);
          timeline.hidden = true;
          return;
        }
        timelinesOpen.add(message.id);
        await fillTimeline(message, timeline);
      }),
    ];
    if (timelinesOpen.has(message.id)) fillTimeline(message, timeline);
    if (outbound && message.status === 'queued') {
      actions.push(
        button('Cancel', async () => {
          const result = await api('DELETE', `/v1/messages/${enc(message.id)}`);
          if (!result.ok) return showError('inbox', result.envelope);
          pager.update(result.envelope.data);
        }),
      );
    }
    return h(
      'li',
      { class: `row message ${message.direction}`, 'data-message': message.id },
      h(
        'div',
        { class: 'meta' },
        badge(message.status, `status-${message.status}`),
        ' ',
        outbound ? 'sent ' : 'received ',
        h('strong', {}, message.from_number),
        ' → ',
        h('strong', {}, message.to_number),
        ` · ${when(message.created_at)}`,
        message.segments ? ` · ${message.segments} segment${message.segments > 1 ? 's' : ''} ${message.encoding}` : '',
        message.campaign_id ? ' · campaign' : '',
        message.test_mode ? ' · test' : '',
      ),
      h('p', { class: 'content' }, message.content === '' ? h('em', {}, '(text removed by retention)') : message.content),
      message.failure_reason ? h('p', { class: 'note' }, `Failure: ${message.failure_reason}`) : null,
      h('div', { class: 'actions' }, actions),
      timeline,
    );
  }

  // ---- send --------------------------------------------------------------------------------

  const sendForm = $('#send-form');
  const updateSendCounter = counter(field(sendForm, 'content'), 'send-form');

  guard(sendForm, 'send-form', async (form, id) => {
    const to = await normalize(value(form, 'to_number'));
    if (to.error) {
      localError('send-form', form, 'to_number', to.error, 'invalid_phone_number');
      return to;
    }
    const from = await numberOf(form, 'from_number', 'send-form');
    if (!from) return null;
    const body = {
      from_number: from,
      to_number: to.e164,
      content: field(form, 'content').value,
      request_id: id,
    };
    const scheduled = isoFromLocal(value(form, 'scheduled_for'));
    if (scheduled) body.scheduled_for = scheduled;
    if (value(form, 'device_id')) body.device_id = value(form, 'device_id');
    const result = await api('POST', '/v1/messages/send', { body });
    if (!result.ok) {
      showError('send-form', result.envelope, form);
      return result;
    }
    const message = result.envelope.data;
    field(form, 'content').value = '';
    updateSendCounter();
    showResult(
      'send-form',
      `Accepted for ${message.to_number} (${message.status}) · ${message.segments} segment${message.segments > 1 ? 's' : ''} · `,
      h('a', { href: '#conversations' }, 'see the conversation'),
    );
    loaded.delete('inbox');
    loaded.delete('conversations');
    return result;
  });

  const bulkForm = $('#bulk-form');
  counter(field(bulkForm, 'content'), 'bulk-form');
  guard(bulkForm, 'bulk-form', async (form, id) => {
    const numbers = [];
    for (const [i, text] of lines(field(form, 'to_numbers').value).entries()) {
      const answer = await normalize(text);
      if (answer.error) {
        localError('bulk-form', form, 'to_numbers', `number ${i + 1}: ${answer.error}`, 'invalid_phone_number');
        return answer;
      }
      numbers.push(answer.e164);
    }
    const from = await numberOf(form, 'from_number', 'bulk-form');
    if (!from) return null;
    const body = { from_number: from, to_numbers: numbers, content: field(form, 'content').value, request_id: id };
    const result = await api('POST', '/v1/messages/bulk-send', { body });
    if (!result.ok) {
      showError('bulk-form', result.envelope, form);
      return result;
    }
    showResult('bulk-form', `Accepted ${result.envelope.data.count} message(s).`);
    loaded.delete('inbox');
    loaded.delete('conversations');
    return result;
  });

  // The phone numbers offered in "from" choices and the phones of the device_id choice.
  async function loadPhoneChoices() {
    const result = await api('GET', '/v1/phones', { query: { limit: 100 } });
    if (!result.ok) return;
    phoneList = result.envelope.data.phones || [];
    fillPhoneChoices();
  }

  // "From" inputs offer the phones' numbers, and start with the first one.
  function fillPhoneChoices() {
    const numbers = [...new Set(phoneList.map((p) => p.phone_number))];
    $('#phone-numbers').replaceChildren(...numbers.map((n) => h('option', { value: n })));
    for (const input of document.querySelectorAll('input[name="from_number"]')) {
      if (!input.value && numbers.length) input.value = numbers[0];
    }
    const device = field(sendForm, 'device_id');
    const chosen = device.value;
    device.replaceChildren(
      h('option', { value: '' }, 'any online phone with that number'),
      ...phoneList.map((p) => h('option', { value: p.id }, `${p.name || 'phone'} · ${p.phone_number} · ${p.online ? 'online' : 'offline'}`)),
    );
    device.value = chosen;
  }

  // ---- campaigns ---------------------------------------------------------------------------

  const campaignsFilter = $('#campaigns-filter');
  const campaigns = new Pager({
    path: '/v1/campaigns',
    key: 'campaigns',
    list: $('#campaigns-list'),
    more: $('#campaigns-more'),
    error: 'campaigns',
    query: () => Object.fromEntries(new FormData(campaignsFilter)),
    render: campaignRow,
    empty: 'No campaigns yet.',
  });
  // Campaigns whose recipient list is open (kept open when the card is redrawn).
  const recipientsOpen = new Set();

  campaignsFilter.addEventListener('submit', (event) => {
    event.preventDefault();
    campaigns.reset();
  });

  // Recipients, one a line: `number; name=value; name=value`, numbers normalised.
  async function parseRecipients(text) {
    const recipients = [];
    for (const [i, line] of text.split('\n').entries()) {
      if (!line.trim()) continue;
      const [to, ...pairs] = line.split(';').map((part) => part.trim());
      const number = await normalize(to);
      if (number.error) throw new Error(`line ${i + 1}: ${number.error}`);
      const recipient = { to: number.e164 };
      for (const pair of pairs.filter(Boolean)) {
        const at = pair.indexOf('=');
        if (at < 1) throw new Error(`line ${i + 1}: "${pair}" is not name=value`);
        recipient.vars = recipient.vars || {};
        recipient.vars[pair.slice(0, at).trim()] = pair.slice(at + 1).trim();
      }
      recipients.push(recipient);
    }
    return recipients;
  }

  const campaignForm = $('#campaign-form');
  const preview = $('#campaign-preview');
  // The body previewed and the request_id its creation will carry (one per preview).
  let previewed = null;

  function hidePreview() {
    preview.hidden = true;
    previewed = null;
  }
  campaignForm.addEventListener('input', hidePreview);
  $('#campaign-back').addEventListener('click', hidePreview);

  guard(campaignForm, 'campaign-form', async (form) => {
    hidePreview();
    const from = await numberOf(form, 'from_number', 'campaign-form');
    if (!from) return null;
    const body = {
      name: value(form, 'name'),
      from_number: from,
      body: field(form, 'body').value,
      launch_now: field(form, 'launch_now').checked,
    };
    try {
      const recipients = await parseRecipients(field(form, 'recipients').value);
      if (recipients.length) body.recipients = recipients;
    } catch (err) {
      localError('campaign-form', form, 'recipients', err.message);
      return null;
    }
    const tags = commaList(value(form, 'contact_tags'));
    if (tags.length) body.contact_tags = tags;
    const scheduled = isoFromLocal(value(form, 'scheduled_for'));
    if (scheduled) body.scheduled_for = scheduled;
    const result = await api('POST', '/v1/campaigns/preview', { body });
    if (!result.ok) {
      showError('campaign-form', result.envelope, form);
      return result;
    }
    showPreview(body, result.envelope.data);
    return result;
  });

  function showPreview(body, data) {
    previewed = { body: { ...body, request_id: requestId() } };
    const phone = data.phone ? `${data.phone.phone_number}` : body.from_number;
    const when_ = body.launch_now ? 'as soon as you press Create' : body.scheduled_for ? `at ${when(body.scheduled_for)}` : 'when you launch the draft';
    preview.querySelector('[data-preview="summary"]').textContent =
      `${data.recipient_count} ${data.recipient_count === 1 ? 'person' : 'people'} will be texted from ${phone}, ${when_}` +
      ` · up to ${data.max_segments} SMS segment${data.max_segments === 1 ? '' : 's'} each.`;
    const missing = preview.querySelector('[data-preview="missing"]');
    const count = data.missing_vars_count || (data.missing_vars || []).length;
    if (count) {
      const shown = (data.missing_vars || []).slice(0, 5).map((m) => `${m.to} (no ${m.names.join(', ')})`);
      missing.textContent = `Warning: ${count} recipient${count === 1 ? ' lacks' : 's lack'} a value the text uses, and would get a blank in its place: ${shown.join('; ')}${count > shown.length ? ' …' : ''}.`;
      missing.hidden = false;
    } else missing.hidden = true;
    preview.querySelector('[data-preview="samples"]').replaceChildren(
      ...(data.samples || []).map((s) =>
        h('li', {}, h('strong', {}, s.to), ` · ${s.segments} segment${s.segments === 1 ? '' : 's'} ${s.encoding}`, h('p', { class: 'content' }, s.text)),
      ),
    );
    $('#campaign-confirm').textContent = body.launch_now ? `Create and text ${data.recipient_count} now` : 'Create';
    preview.hidden = false;
  }

  $('#campaign-confirm').addEventListener('click', async (event) => {
    const confirmButton = event.currentTarget;
    if (!previewed || confirmButton.disabled) return;
    confirmButton.disabled = true;
    try {
      const result = await api('POST', '/v1/campaigns', { body: previewed.body });
      if (isDuplicate(result)) showResult('campaign-form', duplicateText(result));
      else if (!result.ok) return showError('campaign-form', result.envelope, campaignForm);
      hidePreview();
      campaignForm.reset();
      await campaigns.reset();
    } finally {
      confirmButton.disabled = false;
    }
  });

  // The control operations of docs/api.md, Campaigns, by the statuses they apply to.
  const CAMPAIGN_ACTIONS = [
    ['Launch', ['draft'], (id) => api('POST', `/v1/campaigns/${enc(id)}/launch`)],
    ['Pause', ['scheduled', 'running'], (id) => api('POST', `/v1/campaigns/${enc(id)}/pause`)],
    ['Resume', ['paused'], (id) => api('POST', `/v1/campaigns/${enc(id)}/resume`)],
    ['Cancel', ['draft', 'scheduled', 'running', 'paused'], (id) => api('POST', `/v1/campaigns/${enc(id)}/cancel`)],
    ['Delete', ['draft', 'completed', 'canceled'], (id) => api('DELETE', `/v1/campaigns/${enc(id)}`)],
  ];

  function campaignRow(campaign, pager) {
    const counts = campaign.counts || {};
    const skipped = campaign.skipped || {};
    const total = counts.total || 0;
    const done = (counts.sent || 0) + (counts.delivered || 0) + (counts.failed || 0) + (counts.canceled || 0);
    const actions = CAMPAIGN_ACTIONS.filter(([, from]) => from.includes(campaign.status)).map(([label, , call]) =>
      button(
        label,
        async () => {
          if (label === 'Cancel' && !confirm(`Cancel the campaign "${campaign.name}"? Unsent messages are canceled.`)) return;
          if (label === 'Launch' && !confirm(`Launch "${campaign.name}"? ${total} people will be texted.`)) return;
          if (label === 'Delete' && !confirm(`Delete the campaign "${campaign.name}" and its recipient list? Sent messages stay.`)) return;
          const result = await call(campaign.id);
          if (!result.ok) {
            showError('campaigns', result.envelope);
            if (result.envelope.error_code === 'invalid_state') {
              const fresh = await api('GET', `/v1/campaigns/${enc(campaign.id)}`);
              if (fresh.ok) pager.update(fresh.envelope.data);
            }
            return;
          }
          clearError('campaigns');
          if (label === 'Delete') pager.remove(campaign.id);
          else pager.update(result.envelope.data);
        },
        label === 'Cancel' || label === 'Delete' ? 'danger' : 'secondary',
      ),
    );
    const recipients = h('details', { class: 'recipients' }, h('summary', {}, 'Recipients'));
    const list = h('ul', { class: 'rows compact' });
    const more = h('button', { type: 'button', class: 'secondary', hidden: true }, 'Load more');
    recipients.append(list, more);
    const recipientPager = new Pager({
      path: `/v1/campaigns/${enc(campaign.id)}/recipients`,
      key: 'recipients',
      list,
      more,
      error: 'campaigns',
      limit: 50,
      idOf: (r) => r.to,
      render: (r) =>
        h(
          'li',
          {},
          badge(r.status, `status-${r.status}`),
          ` ${r.to}`,
          r.skip_reason ? ` · skipped: ${r.skip_reason}` : '',
          r.failure_reason ? ` · ${r.failure_reason}` : '',
        ),
    });
    recipients.addEventListener('toggle', () => {
      if (recipients.open) {
        recipientsOpen.add(campaign.id);
        recipientPager.reset();
      } else {
        recipientsOpen.delete(campaign.id);
      }
    });
    if (recipientsOpen.has(campaign.id)) recipients.open = true;
    return h(
      'li',
      { class: 'row campaign' },
      h(
        'div',
        { class: 'meta' },
        badge(campaign.status, `status-${campaign.status}`),
        ' ',
        h('strong', {}, campaign.name),
        ` · from ${campaign.from_number} · created ${when(campaign.created_at)}`,
        campaign.scheduled_for ? ` · scheduled for ${when(campaign.scheduled_for)}` : '',
        campaign.finished_at ? ` · finished ${when(campaign.finished_at)}` : '',
        campaign.paused_reason === 'daily_quota_exceeded' ? ' · paused: the test-mode daily quota is used up (resume it tomorrow)' : '',
      ),
      h('p', { class: 'content' }, campaign.body),
      h(
        'div',
        { class: 'progress' },
        h('progress', { max: Math.max(total, 1), value: done }),
        ` ${done} of ${total} done · ${counts.delivered || 0} delivered · ${counts.failed || 0} failed · ${counts.queued || 0} queued`,
      ),
      skipped.opted_out || skipped.premium_rate
        ? h('p', { class: 'note' }, `Skipped: ${skipped.opted_out || 0} opted out, ${skipped.premium_rate || 0} premium rate.`)
        : null,
      h('div', { class: 'actions' }, actions),
      recipients,
    );
  }

  // ---- contacts ----------------------------------------------------------------------------

  const contactsFilter = $('#contacts-filter');
  const contacts = new Pager({
    path: '/v1/contacts',
    key: 'contacts',
    list: $('#contacts-list'),
    more: $('#contacts-more'),
    error: 'contacts',
    query: () => Object.fromEntries(new FormData(contactsFilter)),
    render: contactRow,
    empty: 'No contacts match.',
  });

  contactsFilter.addEventListener('submit', (event) => {
    event.preventDefault();
    contacts.reset();
  });

  // Custom fields typed one `key=value` a line; throws on a line that is not.
  function customFields(text) {
    const custom = {};
    for (const [i, line] of text.split('\n').entries()) {
      if (!line.trim()) continue;
      const at = line.indexOf('=');
      if (at < 1) throw new Error(`line ${i + 1} is not key=value`);
      custom[line.slice(0, at).trim()] = line.slice(at + 1).trim();
    }
    return custom;
  }

  guard($('#contact-form'), 'contact-form', async (form, id) => {
    const number = await normalize(value(form, 'phone_number'));
    if (number.error) {
      localError('contact-form', form, 'phone_number', number.error, 'invalid_phone_number');
      return number;
    }
    const body = { phone_number: number.e164, request_id: id };
    for (const name of ['first_name', 'last_name', 'email']) {
      if (value(form, name)) body[name] = value(form, name);
    }
    const tags = commaList(value(form, 'tags'));
    if (tags.length) body.tags = tags;
    try {
      const custom = customFields(field(form, 'custom_fields').value);
      if (Object.keys(custom).length) body.custom_fields = custom;
    } catch (err) {
      localError('contact-form', form, 'custom_fields', err.message);
      return null;
    }
    const result = await api('POST', '/v1/contacts', { body });
    if (!result.ok) {
      showError('contact-form', result.envelope, form);
      return result;
    }
    form.reset();
    form.querySelector('[data-normalized="phone_number"]').textContent = '';
    await contacts.reset();
    return result;
  });

  // RFC 4180 CSV: quoted cells may hold the delimiter, quotes ("") and line breaks. The
  // delimiter is the one of `,` `;` and tab that the header row uses most (spreadsheets in
  // some languages export with `;`).
  function parseCsv(text) {
    const header = text.split(/\r?\n/, 1)[0];
    const count = (d) => header.split(d).length;
    const delimiter = [',', ';', '\t'].reduce((best, d) => (count(d) > count(best) ? d : best), ',');
    const rows = [];
    let row = [];
    let cell = '';
    let quoted = false;
    for (let i = 0; i < text.length; i += 1) {
      const c = text[i];
      if (quoted) {
        if (c === '"' && text[i + 1] === '"') {
          cell += '"';
          i += 1;
        } else if (c === '"') quoted = false;
        else cell += c;
      } else if (c === '"' && cell === '') quoted = true;
      else if (c === delimiter) {
        row.push(cell);
        cell = '';
      } else if (c === '\n' || c === '\r') {
        if (c === '\r' && text[i + 1] === '\n') i += 1;
        row.push(cell);
        rows.push(row);
        row = [];
        cell = '';
      } else cell += c;
    }
    if (cell !== '' || row.length) {
      row.push(cell);
      rows.push(row);
    }
    return rows.filter((r) => r.some((c) => c.trim() !== ''));
  }

  // Column names a spreadsheet export may use, to the import's fields.
  const COLUMNS = {
    phone_number: ['phone', 'phone_number', 'phone number', 'number', 'mobile', 'cell', 'telephone', 'tel'],
    first_name: ['first_name', 'first name', 'firstname', 'given name', 'name'],
    last_name: ['last_name', 'last name', 'lastname', 'surname', 'family name'],
    email: ['email', 'e-mail', 'email address'],
    tags: ['tags', 'tag', 'groups'],
  };

  // The import's items from a CSV whose first row names the columns. Errors name the
  // spreadsheet's row (the header is row 1).
  async function contactsFromCsv(text) {
    const rows = parseCsv(text.replace(/^\uFEFF/, ''));
    if (rows.length < 2) throw new Error('the CSV needs a header row and at least one contact row');
    const header = rows[0].map((c) => c.trim().toLowerCase());
    const columns = header.map((name) => Object.keys(COLUMNS).find((f) => COLUMNS[f].includes(name)) || null);
    if (!columns.includes('phone_number')) {
      throw new Error(`no phone column in the header row (${rows[0].join(', ')}): name it "phone"`);
    }
    const items = [];
    for (const [i, row] of rows.slice(1).entries()) {
      const item = {};
      for (const [j, cell] of row.entries()) {
        const v = cell.trim();
        if (!v || j >= header.length) continue;
        const name = columns[j];
        if (name === 'tags') item.tags = v.split(/[;,|]/).map((t) => t.trim()).filter(Boolean);
        else if (name && !item[name]) item[name] = v;
        else if (!name) {
          item.custom_fields = item.custom_fields || {};
          item.custom_fields[rows[0][j].trim()] = v;
        }
      }
      const number = await normalize(item.phone_number || '');
      if (number.error) throw new Error(`row ${i + 2}: ${number.error}`);
      item.phone_number = number.e164;
      items.push(item);
    }
    return items;
  }

  const importForm = $('#import-form');
  const importPreview = $('#import-preview');
  let importItems = null;

  field(importForm, 'file').addEventListener('change', async (event) => {
    const file = event.target.files[0];
    if (!file) return;
    if (file.size > 5 * 1024 * 1024) {
      localError('import-form', importForm, 'file', 'the file is larger than 5 MB: split it');
      return;
    }
    field(importForm, 'csv').value = await file.text();
    event.target.value = '';
  });
  importForm.addEventListener('input', () => {
    importPreview.hidden = true;
    importItems = null;
  });

  guard(importForm, 'import-form', async (form) => {
    importPreview.hidden = true;
    let items;
    try {
      items = await contactsFromCsv(field(form, 'csv').value);
    } catch (err) {
      localError('import-form', form, 'csv', err.message);
      return null;
    }
    const result = await api('POST', '/v1/contacts/import', { query: { dry_run: true }, body: { contacts: items } });
    if (!result.ok) {
      showError('import-form', result.envelope, form);
      return result;
    }
    importItems = items;
    const data = result.envelope.data;
    importPreview.querySelector('[data-import="summary"]').textContent =
      `${data.created} new contact${data.created === 1 ? '' : 's'} will be created and ${data.updated} updated.`;
    importPreview.querySelector('[data-import="items"]').replaceChildren(
      ...(data.items || []).slice(0, 50).map((item) => {
        const source = items[item.index] || {};
        const name = [source.first_name, source.last_name].filter(Boolean).join(' ');
        return h('li', {}, badge(item.action === 'create' ? 'new' : 'update', item.action === 'create' ? 'status-sent' : 'status-draft'), ` ${item.phone_number}`, name ? ` · ${name}` : '');
      }),
    );
    importPreview.hidden = false;
    return result;
  });

  $('#import-confirm').addEventListener('click', async (event) => {
    const confirmButton = event.currentTarget;
    if (!importItems || confirmButton.disabled) return;
    confirmButton.disabled = true;
    try {
      const result = await api('POST', '/v1/contacts/import', { body: { contacts: importItems } });
      if (!result.ok) return showError('import-form', result.envelope, importForm);
      importPreview.hidden = true;
      importItems = null;
      field(importForm, 'csv').value = '';
      showResult('import-form', `Imported: ${result.envelope.data.created} created, ${result.envelope.data.updated} updated.`);
      await contacts.reset();
    } finally {
      confirmButton.disabled = false;
    }
  });

  function contactRow(contact, pager) {
    const name = displayName(contact);
    const rowError = h('p', { class: 'error', role: 'alert', hidden: true });
    const fail = (envelope) => {
      rowError.textContent = Portal.describe(envelope);
      rowError.hidden = false;
    };
    const patch = async (body) => {
      const result = await api('PATCH', `/v1/contacts/${enc(contact.id)}`, { body });
      if (!result.ok) return fail(result.envelope);
      pager.update(result.envelope.data);
    };
    const edit = h(
      'form',
      { class: 'inline edit', hidden: true },
      h('label', {}, 'First name ', h('input', { name: 'first_name', value: contact.first_name || '' })),
      h('label', {}, 'Last name ', h('input', { name: 'last_name', value: contact.last_name || '' })),
      h('label', {}, 'Email ', h('input', { name: 'email', type: 'email', value: contact.email || '' })),
      h('label', {}, 'Tags ', h('input', { name: 'tags', value: (contact.tags || []).join(', ') })),
      h('button', { type: 'submit' }, 'Save'),
    );
    edit.addEventListener('submit', async (event) => {
      event.preventDefault();
      const save = edit.querySelector('button[type="submit"]');
      if (save.disabled) return;
      save.disabled = true;
      try {
        await patch({
          first_name: value(edit, 'first_name') || null,
          last_name: value(edit, 'last_name') || null,
          email: value(edit, 'email') || null,
          tags: commaList(value(edit, 'tags')),
        });
      } finally {
        save.disabled = false;
      }
    });
    const row = h(
      'li',
      { class: 'row contact', 'data-contact': contact.id },
      h(
        'div',
        { class: 'meta' },
        contact.opted_out ? [badge(`texted STOP ${when(contact.opted_out_at)}`, 'status-failed'), ' '] : null,
        contact.ai_replies === false ? [badge('no AI replies', 'status-offline'), ' '] : null,
        h('strong', {}, name || contact.phone_number),
        name ? ` · ${contact.phone_number}` : '',
        contact.email ? ` · ${contact.email}` : '',
        ...(contact.tags || []).map((tag) => [' ', badge(tag, 'tag')]),
      ),
      Object.keys(contact.custom_fields || {}).length
        ? h('p', { class: 'note' }, Object.entries(contact.custom_fields).map(([k, v]) => `${k}: ${v}`).join(' · '))
        : null,
      h(
        'div',
        { class: 'actions' },
        button('Edit', () => {
          edit.hidden = !edit.hidden;
          row.classList.toggle('editing', !edit.hidden);
        }),
        button(contact.opted_out ? 'Opt back in' : 'Opt out', () => patch({ opted_out: !contact.opted_out })),
        button(contact.ai_replies === false ? 'Allow AI replies' : 'No AI replies', () => patch({ ai_replies: contact.ai_replies === false })),
        button(
          'Delete',
          async () => {
            if (!confirm(`Delete the contact ${name || contact.phone_number}?`)) return;
            const result = await api('DELETE', `/v1/contacts/${enc(contact.id)}`);
            if (!result.ok) return fail(result.envelope);
            pager.remove(contact.id);
          },
          'danger',
        ),
      ),
      edit,
      rowError,
    );
    return row;
  }

  // ---- phones ------------------------------------------------------------------------------

  const phones = new Pager({
    path: '/v1/phones',
    key: 'phones',
    list: $('#phones-list'),
    more: $('#phones-more'),
    error: 'phones',
    render: phoneRow,
    empty: 'No phone paired yet: pair one above.',
  });

  // SIM lines are listed under their device (when both are shown), in slot order.
  function groupLines() {
    const list = $('#phones-list');
    const lines = [...list.querySelectorAll('li.phone.line')];
    lines.sort((a, b) => Number(a.dataset.slot) - Number(b.dataset.slot));
    for (const line of lines) {
      const device = list.querySelector(`li.phone[data-phone-id="${line.dataset.devicePhoneId}"]`);
      if (!device) continue;
      let after = device;
      while (after.nextElementSibling && after.nextElementSibling.dataset.devicePhoneId === line.dataset.devicePhoneId && after.nextElementSibling !== line) {
        after = after.nextElementSibling;
      }
      if (after.nextElementSibling !== line) after.after(line);
    }
  }
  for (const name of ['append', 'refresh', 'update']) {
    const original = phones[name].bind(phones);
    phones[name] = (...args) => {
      const result = original(...args);
      if (result && typeof result.then === 'function') return result.then((value) => { groupLines(); showPhoneAlerts(); return value; });
      groupLines();
      showPhoneAlerts();
      return result;
    };
  }

  // The phone being paired (its id), whose panel turns green when it connects.
  let pairingId = null;

  guard($('#pair-form'), 'pair-form', async (form, id) => {
    const number = await normalize(value(form, 'phone_number'));
    if (number.error) {
      localError('pair-form', form, 'phone_number', number.error, 'invalid_phone_number');
      return number;
    }
    const body = { phone_number: number.e164, request_id: id };
    if (value(form, 'name')) body.name = value(form, 'name');
    const result = await api('POST', '/v1/phones', { body });
    if (!result.ok) {
      showError('pair-form', result.envelope, form);
      return result;
    }
    form.reset();
    form.querySelector('[data-normalized="phone_number"]').textContent = '';
    showPairing(result.envelope.data);
    await phones.reset();
    loadPhoneChoices();
    return result;
  });

  // What each phone app needs: the SMSGate app's API URL and the device token (text and one QR
  // code of both, drawn here by the vendored qrcode-generator), and the WebSocket URL.
  function showPairing(phone) {
    const panel = $('#pairing');
    const pairing = (workspace && workspace.pairing) || {};
    const configured = document.querySelector('meta[name="smsgw-public-url"]');
    const origin = (configured && configured.content) || location.origin;
    const apiUrl = pairing.device_api_url || `${origin}/mobile/v1`;
    const wsUrl = pairing.websocket_url || `${origin.replace(/^http/, 'ws')}/v1/phones/connect`;
    pairingId = phone.id;
    panel.querySelector('[data-pairing="phone"]').textContent = `${phone.name || 'phone'} (${phone.phone_number})`;
    panel.querySelector('[data-pairing="api-url"]').textContent = apiUrl;
    panel.querySelector('[data-pairing="token"]').textContent = phone.device_token;
    panel.querySelector('[data-pairing="websocket-url"]').textContent = wsUrl;
    setPairingState(phone.online);
    drawQr($('#pairing-qr'), `API URL: ${apiUrl}\nToken: ${phone.device_token}`);
    panel.hidden = false;
    panel.scrollIntoView({ block: 'nearest' });
  }

  function setPairingState(online) {
    const state = $('#pairing [data-pairing="state"]');
    state.textContent = online ? 'connected' : 'waiting for the phone';
    state.className = `badge ${online ? 'status-delivered' : 'status-offline'}`;
  }

  function drawQr(target, text) {
    const code = qrcode(0, 'M');
    code.addData(text);
    code.make();
    const n = code.getModuleCount();
    const quiet = 4;
    let path = '';
    for (let r = 0; r < n; r += 1) {
      for (let c = 0; c < n; c += 1) {
        if (code.isDark(r, c)) path += `M${c + quiet} ${r + quiet}h1v1h-1z`;
      }
    }
    const side = n + quiet * 2;
    target.replaceChildren(
      svg('svg', { viewBox: `0 0 ${side} ${side}`, width: 240, height: 240, 'shape-rendering': 'crispEdges' }, svg('rect', { width: side, height: side, class: 'qr-light' }), svg('path', { d: path, class: 'qr-dark' })),
    );
  }

  function hidePairing() {
    const panel = $('#pairing');
    panel.hidden = true;
    pairingId = null;
    panel.querySelector('[data-pairing="token"]').textContent = '';
    $('#pairing-qr').replaceChildren();
  }

  $('#pairing-close').addEventListener('click', hidePairing);
  for (const name of ['token', 'api-url']) {
    document.querySelector(`[data-copy="${name}"]`).addEventListener('click', () => {
      const target = document.querySelector(`[data-pairing="${name}"]`);
      copy(target.textContent, target);
    });
  }

  // Delivery by line (docs/api.md, "Phone stats"): each phone's last 7 days, fetched at most
  // once a minute per phone however often the list redraws, and filled in when they come.
  const lineStats = new Map(); // phone id → { at, data, pending }
  const LINE_STATS_FRESH_MS = 60_000;

  function shortDuration(seconds) {
    if (seconds < 60) return `${seconds < 10 ? seconds.toFixed(1) : Math.round(seconds)} s`;
    if (seconds < 3600) return `${Math.round(seconds / 60)} min`;
    return `${(seconds / 3600).toFixed(1)} h`;
  }

  function showLineStats(target, data) {
    const t = data.totals;
    const parts = [`last 7 days: ${t.sent} sent, ${t.delivered} delivered, ${t.failed} failed`];
    if (t.delivery_rate != null) parts.push(`${Math.round(t.delivery_rate * 100)}% delivered`);
    if (t.median_seconds_to_deliver != null) parts.push(`median ${shortDuration(t.median_seconds_to_deliver)} to deliver`);
    target.textContent = parts.join(' · ');
    target.title = t.failed_by_reason.map((r) => `${r.reason}: ${r.count}`).join('\n');
  }

  function fillLineStats(phoneId, target) {
    const known = lineStats.get(phoneId);
    if (known && known.data) showLineStats(target, known.data);
    if (known && (known.pending || Date.now() - known.at < LINE_STATS_FRESH_MS)) return;
    const entry = { at: Date.now(), data: known && known.data, pending: true };
    lineStats.set(phoneId, entry);
    api('GET', `/v1/phones/${enc(phoneId)}/stats`, { query: { days: 7 } }).then((result) => {
      entry.pending = false;
      if (!result.ok) return;
      entry.data = result.envelope.data;
      const row = $('#phones-list').querySelector(`li.phone[data-phone-id="${phoneId}"] [data-line-stats]`);
      if (row) showLineStats(row, entry.data);
    });
  }

  // An alert episode's kind as the portal says it (docs/api.md, Phones, "Phone health").
  const ALERT_NAMES = { offline: 'offline', low_battery: 'low battery', stalled: 'stalled' };

  // What the device last reported: battery, charging, network.
  function healthText(health) {
    if (!health) return '';
    const parts = [];
    if (health.battery_percent != null) parts.push(`battery ${health.battery_percent}%${health.charging ? ' (charging)' : ''}`);
    if (health.network) parts.push(`network ${health.network}`);
    return parts.length ? ` · ${parts.join(', ')}` : '';
  }

  // The banner over the phones list: every phone with an alerted episode, and the checklist.
  function showPhoneAlerts() {
    const banner = $('#phone-alerts');
    const items = [];
    for (const phone of phones.items.values()) {
      for (const alert of phone.alerts || []) {
        if (!alert.alerted) continue;
        items.push(h('li', {}, h('strong', {}, phone.name || phone.phone_number), ` (${phone.phone_number}): ${ALERT_NAMES[alert.kind] || alert.kind} since ${when(alert.since)}`));
      }
    }
    banner.querySelector('[data-phone-alerts]').replaceChildren(...items);
    banner.hidden = items.length === 0;
  }

  function phoneRow(phone, pager) {
    const rowError = h('p', { class: 'error', role: 'alert', hidden: true });
    const fail = (envelope) => {
      rowError.textContent = Portal.describe(envelope);
      rowError.hidden = false;
    };
    const edit = h(
      'form',
      { class: 'inline edit', hidden: true },
      h('label', {}, 'Name ', h('input', { name: 'name', value: phone.name || '' })),
      h('label', {}, 'Per minute ', h('input', { name: 'per_minute', type: 'number', min: 1, value: phone.pace?.per_minute })),
      h('label', {}, 'Per 30 minutes ', h('input', { name: 'per_30_minutes', type: 'number', min: 1, value: phone.pace?.per_30_minutes })),
      h('label', {}, 'Per day ', h('input', { name: 'per_day', type: 'number', min: 1, placeholder: 'no cap', value: phone.pace?.per_day ?? '' })),
      h('label', {}, 'Jitter (s) ', h('input', { name: 'jitter_seconds', type: 'number', min: 0, max: 3600, value: phone.pace?.jitter_seconds ?? 0 })),
      h('button', { type: 'submit' }, 'Save'),
      button('Server default pace', async () => {
        const result = await api('PATCH', `/v1/phones/${enc(phone.id)}`, { body: { pace: null } });
        if (!result.ok) return fail(result.envelope);
        pager.update(result.envelope.data);
      }),
    );
    edit.addEventListener('submit', async (event) => {
      event.preventDefault();
      rowError.hidden = true;
      const body = {
        name: value(edit, 'name') || null,
        pace: {
          per_minute: Number(value(edit, 'per_minute')),
          per_30_minutes: Number(value(edit, 'per_30_minutes')),
          per_day: value(edit, 'per_day') ? Number(value(edit, 'per_day')) : null,
          jitter_seconds: Number(value(edit, 'jitter_seconds') || 0),
        },
      };
      const result = await api('PATCH', `/v1/phones/${enc(phone.id)}`, { body });
      if (!result.ok) return fail(result.envelope);
      pager.update(result.envelope.data);
      loadPhoneChoices();
    });
    const lineStatsNote = h('p', { class: 'note', 'data-line-stats': '' }, 'last 7 days: …');
    fillLineStats(phone.id, lineStatsNote);
    // A SIM line (docs/api.md, Phones, "SIM lines") rides on its device: no token of its own.
    const device = phone.device_phone_id ? phoneList.find((p) => p.id === phone.device_phone_id) : null;
    const row = h(
      'li',
      {
        class: phone.device_phone_id ? 'row phone line' : 'row phone',
        'data-phone-id': phone.id,
        'data-device-phone-id': phone.device_phone_id || '',
        'data-slot': phone.sim_slot || '',
      },
      h(
        'div',
        { class: 'meta' },
        badge(phone.online ? 'online' : 'offline', phone.online ? 'status-delivered' : 'status-offline'),
        ' ',
        h('strong', {}, phone.name || 'phone'),
        ` · ${phone.phone_number}`,
        phone.pace
          ? ` · pace ${phone.pace.per_minute}/min, ${phone.pace.per_30_minutes}/30 min` +
            (phone.pace.per_day ? `, ${phone.pace.per_day}/day` : '') +
            (phone.pace.jitter_seconds ? `, jitter ≤ ${phone.pace.jitter_seconds} s` : '')
          : '',
        phone.online ? ' · connected now' : phone.last_seen_at ? ` · last seen ${when(phone.last_seen_at)}` : ' · never connected',
        healthText(phone.health),
        ...(phone.alerts || []).map((alert) => [' ', badge(`${ALERT_NAMES[alert.kind] || alert.kind} since ${when(alert.since)}`, alert.alerted ? 'status-failed' : 'status-offline')]),
      ),
      h(
        'p',
        { class: 'note' },
        phone.device_phone_id ? `SIM ${phone.sim_slot} of ${device ? device.phone_number : 'its device'} · ` : '',
        'device_id ',
        h('code', {}, phone.id),
        ` · paired ${when(phone.created_at)}`,
      ),
      lineStatsNote,
      h(
        'div',
        { class: 'actions' },
        button('Edit', () => {
          edit.hidden = !edit.hidden;
          row.classList.toggle('editing', !edit.hidden);
        }),
        phone.device_phone_id ? '' : button('New device token', async () => {
          if (!confirm(`Rotate the token of ${phone.phone_number}? The phone is disconnected until it uses the new one.`)) return;
          const result = await api('POST', `/v1/phones/${enc(phone.id)}/rotate-token`);
          if (!result.ok) return fail(result.envelope);
          showPairing(result.envelope.data);
          pager.update(result.envelope.data);
        }),
        button(
          'Unpair',
          async () => {
            if (!confirm(`Unpair ${phone.phone_number}? Messages pinned to it fail.`)) return;
            const result = await api('DELETE', `/v1/phones/${enc(phone.id)}`);
            if (!result.ok) return fail(result.envelope);
            pager.remove(phone.id);
            loadPhoneChoices();
          },
          'danger',
        ),
      ),
      edit,
      rowError,
    );
    return row;
  }

  // A phone's status changed (event stream or a poll): its row, the pairing panel, choices.
  function phoneStatus(update) {
    if (!update || !update.id) return;
    const known = phones.items.get(update.id);
    if (known && (known.online !== update.online || known.last_seen_at !== update.last_seen_at)) {
      phones.update({ ...known, online: update.online, last_seen_at: update.last_seen_at ?? known.last_seen_at });
    }
    const listed = phoneList.find((p) => p.id === update.id);
    if (listed && listed.online !== update.online) {
      listed.online = update.online;
      fillPhoneChoices();
    }
    if (update.id === pairingId) setPairingState(update.online);
  }

  // ---- live status -------------------------------------------------------------------------

  // The event stream (GET /v1/events/stream) while signed in: phone status at once. When it
  // cannot be opened (or is cut), the open section is polled instead and the stream is tried
  // again later.
  const live = (() => {
    let controller = null;
    let connected = false;
    let generation = 0;

    async function run(mine) {
      let delay = 1000;
      while (mine === generation && workspace) {
        controller = new AbortController();
        const status = await stream({
          path: '/v1/events/stream',
          signal: controller.signal,
          onEvent: (name, data) => {
            connected = true;
            delay = 1000;
            if (name === 'snapshot') for (const p of data.phones || (Array.isArray(data) ? data : [])) phoneStatus(p);
            else if (name === 'phone.status') phoneStatus(data);
            else if (name === 'message.status') messageStatus(data);
          },
        });
        connected = false;
        if (mine !== generation || status === 401) return;
        await new Promise((resolve) => setTimeout(resolve, delay));
        delay = Math.min(delay * 2, 30000);
      }
    }

    return {
      restart() {
        generation += 1;
        if (controller) controller.abort();
        connected = false;
        if (workspace) run(generation);
      },
      get connected() {
        return connected;
      },
    };
  })();

  // A message's status moved: its bubble or row, when shown. A new inbound message brings the
  // open conversations up to date at once.
  let conversationsDue = null;
  function messageStatus(update) {
    if (!update || !update.id) return;
    if (update.direction === 'inbound' && current() === 'conversations' && loaded.has('conversations') && !conversationsDue) {
      conversationsDue = setTimeout(async () => {
        conversationsDue = null;
        await conversations.refresh();
        if (!threadMessages.contains(document.activeElement)) await loadThread();
      }, 300);
    }
    const known = inbox.items.get(update.id);
    if (known && known.status !== update.status) inbox.update({ ...known, status: update.status });
    const bubbleNote = document.querySelector(`#thread-messages [data-message="${CSS.escape(update.id)}"] .badge`);
    if (bubbleNote) {
      bubbleNote.textContent = update.status;
      bubbleNote.className = `badge status-${update.status}`;
    }
  }

  // ---- webhooks ----------------------------------------------------------------------------

  const webhooks = new Pager({
    path: '/v1/webhooks',
    key: 'webhooks',
    list: $('#webhooks-list'),
    more: $('#webhooks-more'),
    error: 'webhooks',
    render: webhookRow,
    empty: 'No webhook endpoints.',
  });
  const deliveriesOpen = new Set();

  guard($('#webhook-form'), 'webhook-form', async (form, id) => {
    const body = {
      url: value(form, 'url'),
      events: [...form.querySelectorAll('input[name="events"]:checked')].map((input) => input.value),
      enabled: field(form, 'enabled').checked,
      request_id: id,
    };
    const numbers = commaList(value(form, 'phone_numbers'));
    if (numbers.length) body.phone_numbers = numbers;
    const result = await api('POST', '/v1/webhooks', { body });
    if (!result.ok) {
      showError('webhook-form', result.envelope, form);
      return result;
    }
    form.reset();
    showSigningKey(result.envelope.data);
    await webhooks.reset();
    return result;
  });

  function showSigningKey(endpoint) {
    const panel = $('#signing-key');
    panel.querySelector('[data-signing="url"]').textContent = endpoint.url;
    panel.querySelector('[data-signing="key"]').textContent = endpoint.signing_key;
    panel.hidden = false;
    panel.scrollIntoView({ block: 'nearest' });
  }

  function hideSigningKey() {
    const panel = $('#signing-key');
    panel.hidden = true;
    panel.querySelector('[data-signing="key"]').textContent = '';
  }

  $('#signing-close').addEventListener('click', hideSigningKey);
  document.querySelector('[data-copy="signing"]').addEventListener('click', () => {
    const target = document.querySelector('[data-signing="key"]');
    copy(target.textContent, target);
  });

  function webhookRow(endpoint, pager) {
    const patch = async (body) => {
      const result = await api('PATCH', `/v1/webhooks/${enc(endpoint.id)}`, { body });
      if (!result.ok) return showError('webhooks', result.envelope);
      pager.update(result.envelope.data);
    };
    const attempts = h('details', { class: 'deliveries' }, h('summary', {}, 'Delivery attempts'));
    const table = h('ul', { class: 'rows compact' });
    const more = h('button', { type: 'button', class: 'secondary', hidden: true }, 'Load more');
    attempts.append(table, more);
    const deliveries = new Pager({
      path: `/v1/webhooks/${enc(endpoint.id)}/deliveries`,
      key: 'deliveries',
      list: table,
      more,
      error: 'webhooks',
      render: (attempt) => attemptRow(endpoint, attempt, deliveries),
      empty: 'No delivery attempts yet.',
    });
    attempts.addEventListener('toggle', () => {
      if (attempts.open) {
        deliveriesOpen.add(endpoint.id);
        deliveries.reset();
      } else deliveriesOpen.delete(endpoint.id);
    });
    if (deliveriesOpen.has(endpoint.id)) attempts.open = true;
    return h(
      'li',
      { class: 'row webhook' },
      h(
        'div',
        { class: 'meta' },
        badge(endpoint.enabled ? 'enabled' : 'disabled', endpoint.enabled ? 'status-delivered' : 'status-offline'),
        ' ',
        h('strong', {}, endpoint.url),
        ` · created ${when(endpoint.created_at)}`,
      ),
      h(
        'p',
        { class: 'note' },
        `Events: ${(endpoint.events || []).join(', ')} · phones: `,
        endpoint.phone_numbers && endpoint.phone_numbers.length ? endpoint.phone_numbers.join(', ') : 'every phone',
      ),
      h(
        'div',
        { class: 'actions' },
        button(endpoint.enabled ? 'Disable' : 'Enable', () => patch({ enabled: !endpoint.enabled })),
        button('New signing key', async () => {
          if (!confirm(`Rotate the signing key of ${endpoint.url}? Later deliveries are signed with the new key.`)) return;
          const result = await api('POST', `/v1/webhooks/${enc(endpoint.id)}/rotate-key`);
          if (!result.ok) return showError('webhooks', result.envelope);
          showSigningKey(result.envelope.data);
        }),
        button(
          'Delete',
          async () => {
            if (!confirm(`Delete the endpoint ${endpoint.url} and its delivery history?`)) return;
            const result = await api('DELETE', `/v1/webhooks/${enc(endpoint.id)}`);
            if (!result.ok) return showError('webhooks', result.envelope);
            pager.remove(endpoint.id);
          },
          'danger',
        ),
      ),
      attempts,
    );
  }

  function attemptRow(endpoint, attempt, pager) {
    const answer = attempt.status_code === null || attempt.status_code === undefined ? 'no answer' : `HTTP ${attempt.status_code}`;
    return h(
      'li',
      {},
      badge(attempt.state, `status-${attempt.state}`),
      ` ${when(attempt.attempted_at)} · ${attempt.event} · attempt ${attempt.attempt} · ${answer}`,
      attempt.error ? ` · ${attempt.error}` : '',
      attempt.error_detail ? ` (${attempt.error_detail})` : '',
      attempt.next_attempt_at ? ` · next attempt ${when(attempt.next_attempt_at)}` : '',
      ' ',
      button('Retry now', async () => {
        const deliveryId = attempt.delivery_id || attempt.id;
        const result = await api('POST', `/v1/webhooks/${enc(endpoint.id)}/deliveries/${enc(deliveryId)}/retry`);
        if (!result.ok) return showError('webhooks', result.envelope);
        clearError('webhooks');
        setTimeout(() => pager.reset(), 1000);
      }),
    );
  }

  // ---- AI settings -------------------------------------------------------------------------

  // The form shows the settings as read; Save replaces them whole (PUT). Each rule row's inputs
  // are named after its index in the request (`rules[2].keywords`, `rules[2].reply`), so an
  // error's data.field marks the input of that rule.
  const aiForm = $('#ai-settings-form');
  const aiRules = $('#ai-rules');

  function renumberRules() {
    for (const [i, row] of [...aiRules.children].entries()) {
      row.querySelector('[data-rule="keywords"]').setAttribute('name', `rules[${i}].keywords`);
      row.querySelector('[data-rule="reply"]').setAttribute('name', `rules[${i}].reply`);
    }
    $('#ai-rules-empty').hidden = aiRules.children.length > 0;
  }

  function ruleRow(rule) {
    const row = h(
      'li',
      { class: 'rule' },
      h(
        'label',
        {},
        'Keywords (comma-separated; a whole word or phrase, any case)',
        h('input', { 'data-rule': 'keywords', value: (rule.keywords || []).join(', '), placeholder: 'hours, opening times' }),
      ),
      h('label', {}, 'Reply', h('textarea', { 'data-rule': 'reply', rows: 2 }, rule.reply || '')),
      button(
        'Remove rule',
        () => {
          row.remove();
          renumberRules();
        },
        'danger',
      ),
    );
    return row;
  }

  function fillAiSettings(settings) {
    field(aiForm, 'enabled').checked = Boolean(settings.enabled);
    field(aiForm, 'mode').value = settings.mode === 'auto' ? 'auto' : 'draft';
    field(aiForm, 'instructions').value = settings.instructions || '';
    aiRules.replaceChildren(...(settings.rules || []).map(ruleRow));
    renumberRules();
  }

  function clearAiSettings() {
    clearError('ai-settings-form', aiForm);
    clearResult('ai-settings-form');
    fillAiSettings({});
  }

  async function loadAiSettings() {
    clearAiSettings();
    const result = await api('GET', '/v1/ai/settings');
    if (!result.ok) return showError('ai-settings-form', result.envelope);
    fillAiSettings(result.envelope.data);
  }

  $('#ai-rule-add').addEventListener('click', () => {
    const row = ruleRow({});
    aiRules.append(row);
    renumberRules();
    row.querySelector('[data-rule="keywords"]').focus();
  });

  guard(aiForm, 'ai-settings-form', async (form) => {
    // Rows left empty are dropped (before numbering, so indexes match the request).
    for (const row of [...aiRules.children]) {
      const keywords = row.querySelector('[data-rule="keywords"]').value.trim();
      if (!keywords && !row.querySelector('[data-rule="reply"]').value.trim()) row.remove();
    }
    renumberRules();
    const body = {
      enabled: field(form, 'enabled').checked,
      mode: field(form, 'mode').value,
      instructions: field(form, 'instructions').value,
      rules: [...aiRules.children].map((row) => ({
        keywords: commaList(row.querySelector('[data-rule="keywords"]').value),
        reply: row.querySelector('[data-rule="reply"]').value,
      })),
    };
    const result = await api('PUT', '/v1/ai/settings', { body });
    if (!result.ok) {
      showError('ai-settings-form', result.envelope, form);
      return result;
    }
    fillAiSettings(result.envelope.data);
    showResult('ai-settings-form', `Saved at ${new Date().toLocaleTimeString()}.`);
    return result;
  });

  // ---- AI drafts -----------------------------------------------------------------------------

  const draftsFilter = $('#drafts-filter');
  const drafts = new Pager({
    path: '/v1/ai/drafts',
    key: 'drafts',
    list: $('#drafts-list'),
    more: $('#drafts-more'),
    error: 'drafts',
    query: () => Object.fromEntries(new FormData(draftsFilter)),
    render: draftRow,
    empty: 'No drafts here: nothing waits for you.',
  });

  draftsFilter.addEventListener('submit', (event) => {
    event.preventDefault();
    drafts.reset();
  });

  function draftRow(draft, pager) {
    const pending = draft.status === 'pending';
    const text = h('textarea', { rows: 3, readonly: !pending, 'aria-label': 'Draft reply' }, draft.content || '');
    const actions = pending
      ? [
          button(
            'Send',
            async () => {
              const body = text.value !== draft.content ? { content: text.value } : {};
              const result = await api('POST', `/v1/ai/drafts/${enc(draft.id)}/send`, { body });
              if (!result.ok) return showError('drafts', result.envelope);
              clearError('drafts');
              pager.remove(draft.id);
              loaded.delete('inbox');
            },
            'primary',
          ),
          button('Discard', async () => {
            const result = await api('POST', `/v1/ai/drafts/${enc(draft.id)}/discard`);
            if (!result.ok) return showError('drafts', result.envelope);
            clearError('drafts');
            pager.remove(draft.id);
          }),
        ]
      : [];
    return h(
      'li',
      { class: `row draft${pending ? ' editing' : ''}` },
      h('div', { class: 'meta' }, badge(draft.status, `status-${draft.status}`), ` reply to ${draft.from_number} from ${draft.to_number} · ${when(draft.created_at)}`),
      text,
      h('div', { class: 'actions' }, actions),
    );
  }

  // ---- start ---------------------------------------------------------------------------------

  const LOADERS = {
    home: loadHome,
    conversations: () => conversations.reset(),
    send: loadPhoneChoices,
    campaigns: () => {
      loadPhoneChoices();
      return campaigns.reset();
    },
    contacts: () => contacts.reset(),
    phones: () => phones.reset(),
    inbox: () => inbox.reset().then(stampInbox),
    webhooks: () => webhooks.reset(),
    drafts: () => {
      loadAiSettings();
      return drafts.reset();
    },
  };

  // What the open section reads again on each tick (lists keep their filter, open timelines
  // and edits). The phones list too: the event stream brings status at once, but a phone or SIM
  // line added elsewhere (the API, another tab) only shows up with a read of the list.
  const REFRESHERS = {
    home: loadHome,
    conversations: async () => {
      await conversations.refresh();
      // Not while the owner types in a draft of the thread (its text and focus would go).
      if (!threadMessages.contains(document.activeElement)) await loadThread();
    },
    campaigns: () => campaigns.refresh(),
    contacts: () => contacts.refresh(),
    phones: async () => {
      await phones.refresh();
      const paired = phones.items.get(pairingId);
      if (paired) setPairingState(paired.online);
    },
    inbox: () => inbox.refresh().then(stampInbox),
    webhooks: () => webhooks.refresh(),
    drafts: () => drafts.refresh(),
  };

  let ticking = false;
  setInterval(async () => {
    const name = current();
    if (!workspace || document.hidden || ticking || !loaded.has(name) || !REFRESHERS[name]) return;
    ticking = true;
    try {
      await REFRESHERS[name]();
    } finally {
      ticking = false;
    }
  }, REFRESH_MS);

  // On entry: a remembered key is checked again before anything is shown with it.
  (async () => {
    const key = apiKey();
    if (!key) return showSignedIn();
    const remembered = Boolean(localStorage.getItem('smsgw.api_key'));
    const result = await signIn(key, remembered);
    if (!result.ok) {
      setApiKey('');
      showSignedIn();
      if (result.status === 401) localError('key-form', keyForm, 'api_key', 'The saved API key was refused (revoked?): sign in again.', 'unauthorized');
      else showError('key-form', result.envelope, keyForm);
    }
  })();
})();
