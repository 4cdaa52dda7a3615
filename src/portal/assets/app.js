// smsgw portal: the sections (inbox, send, phones, contacts, campaigns, webhooks, AI drafts
// and their settings).
// Each form builds the request the API documents and sends it through Portal.api.
'use strict';

(() => {
  const { api, apiKey, setApiKey, enc, h, when, showError, clearError, Pager } = Portal;
  const $ = (selector) => document.querySelector(selector);
  const field = (form, name) => form.elements.namedItem(name);
  const value = (form, name) => (field(form, name).value || '').trim();

  const SECTIONS = ['inbox', 'send', 'phones', 'contacts', 'campaigns', 'webhooks', 'drafts'];
  // The inbox and running campaigns are read again this often (docs/api.md, Operations: 15 s).
  const REFRESH_MS = 15000;
  // Sections whose lists were loaded with the current key.
  const loaded = new Set();

  // ---- helpers -------------------------------------------------------------------------

  // Comma, semicolon, space or newline separated words.
  function words(text) {
    return text.split(/[\s,;]+/).map((w) => w.trim()).filter(Boolean);
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
  function localError(name, form, fieldName, message) {
    showError(name, { status: 'error', message, data: { field: fieldName }, error_code: 'validation_failed' }, form);
  }

  function showResult(name, ...content) {
    const box = document.querySelector(`[data-result="${name}"]`);
    if (box) box.replaceChildren(h('p', { class: 'ok' }, ...content));
  }

  function badge(text, kind) {
    return h('span', { class: `badge ${kind || ''}` }, text);
  }

  function button(label, onclick, kind) {
    return h('button', { type: 'button', class: kind || 'secondary', onclick }, label);
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

  // ---- API key and sections --------------------------------------------------------------

  function showKeyState() {
    const key = apiKey();
    const mode = $('#key-mode');
    mode.hidden = !key;
    mode.textContent = key.startsWith('sk_test_') ? 'test mode' : key.startsWith('sk_live_') ? 'live mode' : 'key set';
    mode.className = `badge ${key.startsWith('sk_live_') ? 'live' : 'test'}`;
    $('#no-key').hidden = Boolean(key);
  }

  function current() {
    const name = location.hash.slice(1);
    return SECTIONS.includes(name) ? name : 'inbox';
  }

  function open(name) {
    for (const section of SECTIONS) {
      $(`#${section}`).hidden = section !== name;
      const link = document.querySelector(`nav a[href="#${section}"]`);
      if (section === name) link.setAttribute('aria-current', 'page');
      else link.removeAttribute('aria-current');
    }
    if (apiKey() && !loaded.has(name)) {
      loaded.add(name);
      LOADERS[name]();
    }
  }

  $('#key-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const input = $('#api-key');
    const key = input.value.trim();
    if (!key) return;
    setApiKey(key);
    input.value = '';
    startOver();
  });

  $('#key-forget').addEventListener('click', () => {
    setApiKey('');
    startOver();
  });

  function startOver() {
    loaded.clear();
    for (const list of document.querySelectorAll('ul.rows')) list.replaceChildren();
    for (const more of document.querySelectorAll('button[id$="-more"]')) more.hidden = true;
    hidePairing();
    hideSigningKey();
    clearAiSettings();
    showKeyState();
    if (apiKey()) loadPhoneChoices();
    open(current());
  }

  window.addEventListener('hashchange', () => open(current()));

  // ---- inbox -----------------------------------------------------------------------------

  const inboxFilter = $('#inbox-filter');
  const inbox = new Pager({
    path: '/v1/messages',
    key: 'messages',
    list: $('#inbox-list'),
    more: $('#inbox-more'),
    error: 'inbox',
    query: () => Object.fromEntries(new FormData(inboxFilter)),
    render: messageRow,
  });

  inboxFilter.addEventListener('submit', (event) => {
    event.preventDefault();
    inbox.reset().then(stampInbox);
  });

  function stampInbox() {
    $('#inbox-updated').textContent = `Updated ${new Date().toLocaleTimeString()}.`;
  }

  function messageRow(message, pager) {
    const timeline = h('ol', { class: 'timeline', hidden: true });
    const outbound = message.direction === 'outbound';
    const actions = [
      button('Timeline', async () => {
        if (!timeline.hidden) {
          timeline.hidden = true;
          return;
        }
        const result = await api('GET', `/v1/messages/${enc(message.id)}`);
        if (!result.ok) return showError('inbox', result.envelope);
        timeline.replaceChildren(
          ...(result.envelope.data.events || []).map((e) =>
            h('li', {}, `${when(e.at)} · ${e.type || e.kind} (${e.status})`, e.detail ? ` · ${e.detail}` : ''),
          ),
        );
        timeline.hidden = false;
      }),
    ];
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
      { class: `row message ${message.direction}` },
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

  // ---- send ------------------------------------------------------------------------------

  const sendForm = $('#send-form');
  field(sendForm, 'content').addEventListener('input', (event) => {
    sendForm.querySelector('[data-count="content"]').textContent = String([...event.target.value].length);
  });

  sendForm.addEventListener('submit', async (event) => {
    event.preventDefault();
    clearError('send-form', sendForm);
    const body = {
      from_number: value(sendForm, 'from_number'),
      to_number: value(sendForm, 'to_number'),
      content: field(sendForm, 'content').value,
    };
    const scheduled = isoFromLocal(value(sendForm, 'scheduled_for'));
    if (scheduled) body.scheduled_for = scheduled;
    if (value(sendForm, 'request_id')) body.request_id = value(sendForm, 'request_id');
    if (value(sendForm, 'device_id')) body.device_id = value(sendForm, 'device_id');
    const result = await api('POST', '/v1/messages/send', { body });
    if (!result.ok) return showError('send-form', result.envelope, sendForm);
    const message = result.envelope.data;
    showResult(
      'send-form',
      `Accepted (${message.status}): `,
      h('code', {}, message.id),
      ` · ${message.segments} segment${message.segments > 1 ? 's' : ''} ${message.encoding} · expires ${when(message.expires_at)}`,
    );
    field(sendForm, 'content').value = '';
    field(sendForm, 'request_id').value = '';
    loaded.delete('inbox');
  });

  const bulkForm = $('#bulk-form');
  bulkForm.addEventListener('submit', async (event) => {
    event.preventDefault();
    clearError('bulk-form', bulkForm);
    const body = {
      from_number: value(bulkForm, 'from_number'),
      to_numbers: words(field(bulkForm, 'to_numbers').value),
      content: field(bulkForm, 'content').value,
    };
    const result = await api('POST', '/v1/messages/bulk-send', { body });
    if (!result.ok) return showError('bulk-form', result.envelope, bulkForm);
    showResult('bulk-form', `Accepted ${result.envelope.data.count} message(s).`);
    loaded.delete('inbox');
  });

  // The phone numbers offered in "from" fields and the phones of the device_id choice.
  async function loadPhoneChoices() {
    const result = await api('GET', '/v1/phones', { query: { limit: 100 } });
    if (!result.ok) return;
    const phones = result.envelope.data.phones || [];
    const numbers = [...new Set(phones.map((p) => p.phone_number))];
    $('#phone-numbers').replaceChildren(...numbers.map((n) => h('option', { value: n })));
    field(sendForm, 'device_id').replaceChildren(
      h('option', { value: '' }, 'any online phone with that number'),
      ...phones.map((p) =>
        h('option', { value: p.id }, `${p.name || 'phone'} · ${p.phone_number} · ${p.online ? 'online' : 'offline'}`),
      ),
    );
  }

  // ---- phones ----------------------------------------------------------------------------

  const phones = new Pager({
    path: '/v1/phones',
    key: 'phones',
    list: $('#phones-list'),
    more: $('#phones-more'),
    error: 'phones',
    render: phoneRow,
  });

  const pairForm = $('#pair-form');
  pairForm.addEventListener('submit', async (event) => {
    event.preventDefault();
    clearError('pair-form', pairForm);
    const body = { phone_number: value(pairForm, 'phone_number') };
    if (value(pairForm, 'name')) body.name = value(pairForm, 'name');
    const result = await api('POST', '/v1/phones', { body });
    if (!result.ok) return showError('pair-form', result.envelope, pairForm);
    pairForm.reset();
    showPairing(result.envelope.data);
    phones.reset();
    loadPhoneChoices();
  });

  // The device token as text and as a QR code (drawn by the server at /portal/qr.svg).
  function showPairing(phone) {
    const panel = $('#pairing');
    panel.querySelector('[data-pairing="phone"]').textContent = `${phone.name || 'phone'} (${phone.phone_number})`;
    // server.public_url when configured (the server fills the page's meta tag), else this page's origin.
    const configured = document.querySelector('meta[name="smsgw-public-url"]');
    const server = (configured && configured.content) || location.origin;
    panel.querySelector('[data-pairing="server"]').textContent = server;
    // The SMSGate Android app takes the device API's base: the server plus the page's suffix.
    panel.querySelector('[data-pairing="smsgate-server"]').textContent = server;
    panel.querySelector('[data-pairing="token"]').textContent = phone.device_token;
    panel.querySelector('[data-pairing="qr"]').src = `/portal/qr.svg?data=${enc(phone.device_token)}`;
    panel.hidden = false;
    panel.scrollIntoView({ block: 'nearest' });
  }

  function hidePairing() {
    const panel = $('#pairing');
    panel.hidden = true;
    panel.querySelector('[data-pairing="token"]').textContent = '';
    panel.querySelector('[data-pairing="qr"]').removeAttribute('src');
  }

  $('#pairing-close').addEventListener('click', hidePairing);
  document.querySelector('[data-copy="token"]').addEventListener('click', () => {
    const target = document.querySelector('[data-pairing="token"]');
    copy(target.textContent, target);
  });

  function phoneRow(phone, pager) {
    const edit = h(
      'form',
      { class: 'inline', hidden: true },
      h('label', {}, 'Name ', h('input', { name: 'name', value: phone.name || '' })),
      h('label', {}, 'Per minute ', h('input', { name: 'per_minute', type: 'number', min: 1, value: phone.pace?.per_minute })),
      h('label', {}, 'Per 30 minutes ', h('input', { name: 'per_30_minutes', type: 'number', min: 1, value: phone.pace?.per_30_minutes })),
      h('button', { type: 'submit' }, 'Save'),
      button('Server default pace', async () => {
        const result = await api('PATCH', `/v1/phones/${enc(phone.id)}`, { body: { pace: null } });
        if (!result.ok) return showError('phones', result.envelope, edit);
        pager.update(result.envelope.data);
      }),
    );
    edit.addEventListener('submit', async (event) => {
      event.preventDefault();
      clearError('phones', edit);
      const body = {
        name: value(edit, 'name') || null,
        pace: {
          per_minute: Number(value(edit, 'per_minute')),
          per_30_minutes: Number(value(edit, 'per_30_minutes')),
        },
      };
      const result = await api('PATCH', `/v1/phones/${enc(phone.id)}`, { body });
      if (!result.ok) return showError('phones', result.envelope, edit);
      pager.update(result.envelope.data);
      loadPhoneChoices();
    });
    return h(
      'li',
      { class: 'row phone' },
      h(
        'div',
        { class: 'meta' },
        badge(phone.online ? 'online' : 'offline', phone.online ? 'status-delivered' : 'status-offline'),
        ' ',
        h('strong', {}, phone.name || 'phone'),
        ` · ${phone.phone_number}`,
        phone.pace ? ` · pace ${phone.pace.per_minute}/min, ${phone.pace.per_30_minutes}/30 min` : '',
        phone.last_seen_at ? ` · last seen ${when(phone.last_seen_at)}` : ' · never connected',
      ),
      h('p', { class: 'note' }, 'device_id ', h('code', {}, phone.id), ` · paired ${when(phone.created_at)}`),
      h(
        'div',
        { class: 'actions' },
        button('Edit', () => {
          edit.hidden = !edit.hidden;
        }),
        button('New device token', async () => {
          if (!confirm(`Rotate the token of ${phone.phone_number}? The phone is disconnected until it uses the new one.`)) return;
          const result = await api('POST', `/v1/phones/${enc(phone.id)}/rotate-token`);
          if (!result.ok) return showError('phones', result.envelope);
          showPairing(result.envelope.data);
          pager.update(result.envelope.data);
        }),
        button(
          'Unpair',
          async () => {
            if (!confirm(`Unpair ${phone.phone_number}? Messages pinned to it fail.`)) return;
            const result = await api('DELETE', `/v1/phones/${enc(phone.id)}`);
            if (!result.ok) return showError('phones', result.envelope);
            pager.remove(phone.id);
            loadPhoneChoices();
          },
          'danger',
        ),
      ),
      edit,
    );
  }

  // ---- contacts --------------------------------------------------------------------------

  const contactsFilter = $('#contacts-filter');
  const contacts = new Pager({
    path: '/v1/contacts',
    key: 'contacts',
    list: $('#contacts-list'),
    more: $('#contacts-more'),
    error: 'contacts',
    query: () => Object.fromEntries(new FormData(contactsFilter)),
    render: contactRow,
  });

  contactsFilter.addEventListener('submit', (event) => {
    event.preventDefault();
    contacts.reset();
  });

  const contactForm = $('#contact-form');
  contactForm.addEventListener('submit', async (event) => {
    event.preventDefault();
    clearError('contact-form', contactForm);
    const body = { phone_number: value(contactForm, 'phone_number') };
    for (const name of ['first_name', 'last_name', 'email']) {
      if (value(contactForm, name)) body[name] = value(contactForm, name);
    }
    const tags = commaList(value(contactForm, 'tags'));
    if (tags.length) body.tags = tags;
    const custom = {};
    const lines = field(contactForm, 'custom_fields').value.split('\n');
    for (const [i, line] of lines.entries()) {
      if (!line.trim()) continue;
      const at = line.indexOf('=');
      if (at < 1) return localError('contact-form', contactForm, 'custom_fields', `line ${i + 1} is not key=value`);
      custom[line.slice(0, at).trim()] = line.slice(at + 1).trim();
    }
    if (Object.keys(custom).length) body.custom_fields = custom;
    const result = await api('POST', '/v1/contacts', { body });
    if (!result.ok) return showError('contact-form', result.envelope, contactForm);
    contactForm.reset();
    contacts.reset();
  });

  const importForm = $('#import-form');
  importForm.addEventListener('submit', async (event) => {
    event.preventDefault();
    clearError('import-form', importForm);
    const items = [];
    for (const line of field(importForm, 'contacts').value.split('\n')) {
      if (!line.trim()) continue;
      const [phone, first, last, email, tags] = line.split(',').map((cell) => cell.trim());
      const item = { phone_number: phone };
      if (first) item.first_name = first;
      if (last) item.last_name = last;
      if (email) item.email = email;
      if (tags) item.tags = tags.split(';').map((t) => t.trim()).filter(Boolean);
      items.push(item);
    }
    const result = await api('POST', '/v1/contacts/import', { body: { contacts: items } });
    if (!result.ok) return showError('import-form', result.envelope, importForm);
    showResult('import-form', `${result.envelope.data.created} created, ${result.envelope.data.updated} updated.`);
    contacts.reset();
  });

  function contactRow(contact, pager) {
    const name = [contact.first_name, contact.last_name].filter(Boolean).join(' ');
    const patch = async (body) => {
      const result = await api('PATCH', `/v1/contacts/${enc(contact.id)}`, { body });
      if (!result.ok) return showError('contacts', result.envelope);
      pager.update(result.envelope.data);
    };
    return h(
      'li',
      { class: 'row contact' },
      h(
        'div',
        { class: 'meta' },
        contact.opted_out ? badge(`opted out ${when(contact.opted_out_at)}`, 'status-failed') : null,
        contact.ai_replies === false ? badge('no AI replies', 'status-offline') : null,
        ' ',
        h('strong', {}, contact.phone_number),
        name ? ` · ${name}` : '',
        contact.email ? ` · ${contact.email}` : '',
        ...(contact.tags || []).map((tag) => [' ', badge(tag, 'tag')]),
      ),
      Object.keys(contact.custom_fields || {}).length
        ? h('p', { class: 'note' }, Object.entries(contact.custom_fields).map(([k, v]) => `${k}: ${v}`).join(' · '))
        : null,
      h(
        'div',
        { class: 'actions' },
        button(contact.opted_out ? 'Opt back in' : 'Opt out', () => patch({ opted_out: !contact.opted_out })),
        button(contact.ai_replies === false ? 'Allow AI replies' : 'No AI replies', () =>
          patch({ ai_replies: contact.ai_replies === false }),
        ),
        button(
          'Delete',
          async () => {
            if (!confirm(`Delete the contact ${contact.phone_number}?`)) return;
            const result = await api('DELETE', `/v1/contacts/${enc(contact.id)}`);
            if (!result.ok) return showError('contacts', result.envelope);
            pager.remove(contact.id);
          },
          'danger',
        ),
      ),
    );
  }

  // ---- campaigns -------------------------------------------------------------------------

  const campaignsFilter = $('#campaigns-filter');
  const campaigns = new Pager({
    path: '/v1/campaigns',
    key: 'campaigns',
    list: $('#campaigns-list'),
    more: $('#campaigns-more'),
    error: 'campaigns',
    query: () => Object.fromEntries(new FormData(campaignsFilter)),
    render: campaignRow,
  });
  // Campaigns whose recipient list is open (kept open when the card is redrawn).
  const recipientsOpen = new Set();

  campaignsFilter.addEventListener('submit', (event) => {
    event.preventDefault();
    campaigns.reset();
  });

  // Recipients, one a line: `+number; name=value; name=value`.
  function parseRecipients(text) {
    const recipients = [];
    for (const [i, line] of text.split('\n').entries()) {
      if (!line.trim()) continue;
      const [to, ...pairs] = line.split(';').map((part) => part.trim());
      const recipient = { to };
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
  campaignForm.addEventListener('submit', async (event) => {
    event.preventDefault();
    clearError('campaign-form', campaignForm);
    const body = {
      name: value(campaignForm, 'name'),
      from_number: value(campaignForm, 'from_number'),
      body: field(campaignForm, 'body').value,
      launch_now: field(campaignForm, 'launch_now').checked,
    };
    try {
      const recipients = parseRecipients(field(campaignForm, 'recipients').value);
      if (recipients.length) body.recipients = recipients;
    } catch (err) {
      return localError('campaign-form', campaignForm, 'recipients', err.message);
    }
    const tags = commaList(value(campaignForm, 'contact_tags'));
    if (tags.length) body.contact_tags = tags;
    const scheduled = isoFromLocal(value(campaignForm, 'scheduled_for'));
    if (scheduled) body.scheduled_for = scheduled;
    const result = await api('POST', '/v1/campaigns', { body });
    if (!result.ok) return showError('campaign-form', result.envelope, campaignForm);
    campaignForm.reset();
    campaigns.reset();
  });

  // The control operations of docs/api.md, Campaigns, by the statuses they apply to.
  const CAMPAIGN_ACTIONS = [
    ['Launch', ['draft'], (id) => api('POST', `/v1/campaigns/${enc(id)}/launch`)],
    ['Pause', ['scheduled', 'running'], (id) => api('POST', `/v1/campaigns/${enc(id)}/pause`)],
    ['Resume', ['paused'], (id) => api('POST', `/v1/campaigns/${enc(id)}/resume`)],
    ['Cancel', ['draft', 'scheduled', 'running', 'paused'], (id) => api('POST', `/v1/campaigns/${enc(id)}/cancel`)],
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
          const result = await call(campaign.id);
          if (!result.ok) {
            showError('campaigns', result.envelope);
            // The campaign moved on meanwhile (e.g. completed): show where it is now.
            if (result.envelope.error_code === 'invalid_state') {
              const fresh = await api('GET', `/v1/campaigns/${enc(campaign.id)}`);
              if (fresh.ok) pager.update(fresh.envelope.data);
            }
            return;
          }
          clearError('campaigns');
          pager.update(result.envelope.data);
        },
        label === 'Cancel' ? 'danger' : 'secondary',
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
          r.message_id ? h('span', { class: 'note' }, ` · message ${r.message_id}`) : '',
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
        campaign.started_at ? ` · started ${when(campaign.started_at)}` : '',
        campaign.finished_at ? ` · finished ${when(campaign.finished_at)}` : '',
      ),
      h('p', { class: 'content' }, campaign.body),
      h(
        'div',
        { class: 'progress' },
        h('progress', { max: Math.max(total, 1), value: done }),
        ` ${done} of ${total} done · ${counts.delivered || 0} delivered · ${counts.sent || 0} sent · ` +
          `${counts.queued || 0} queued · ${counts.pending || 0} pending · ${counts.failed || 0} failed · ` +
          `${counts.canceled || 0} canceled`,
      ),
      h('p', { class: 'note' }, `Skipped: ${skipped.opted_out || 0} opted out, ${skipped.premium_rate || 0} premium rate.`),
      h('div', { class: 'actions' }, actions),
      recipients,
    );
  }

  // Reads running and scheduled campaigns again so their progress moves.
  async function refreshCampaigns() {
    for (const campaign of [...campaigns.items.values()]) {
      if (!['running', 'scheduled'].includes(campaign.status)) continue;
      const result = await api('GET', `/v1/campaigns/${enc(campaign.id)}`);
      if (result.ok) campaigns.update(result.envelope.data);
    }
  }

  // ---- webhooks --------------------------------------------------------------------------

  const webhooks = new Pager({
    path: '/v1/webhooks',
    key: 'webhooks',
    list: $('#webhooks-list'),
    more: $('#webhooks-more'),
    error: 'webhooks',
    render: webhookRow,
  });

  const webhookForm = $('#webhook-form');
  webhookForm.addEventListener('submit', async (event) => {
    event.preventDefault();
    clearError('webhook-form', webhookForm);
    const body = {
      url: value(webhookForm, 'url'),
      events: [...webhookForm.querySelectorAll('input[name="events"]:checked')].map((input) => input.value),
      enabled: field(webhookForm, 'enabled').checked,
    };
    const numbers = words(value(webhookForm, 'phone_numbers'));
    if (numbers.length) body.phone_numbers = numbers;
    const result = await api('POST', '/v1/webhooks', { body });
    if (!result.ok) return showError('webhook-form', result.envelope, webhookForm);
    webhookForm.reset();
    showSigningKey(result.envelope.data);
    webhooks.reset();
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
    });
    attempts.addEventListener('toggle', () => {
      if (attempts.open) deliveries.reset();
    });
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
      attempt.duration_ms !== undefined && attempt.duration_ms !== null ? ` · ${attempt.duration_ms} ms` : '',
      attempt.next_attempt_at ? ` · next attempt ${when(attempt.next_attempt_at)}` : '',
      ' ',
      button('Retry now', async () => {
        const deliveryId = attempt.delivery_id || attempt.id;
        const result = await api('POST', `/v1/webhooks/${enc(endpoint.id)}/deliveries/${enc(deliveryId)}/retry`);
        if (!result.ok) return showError('webhooks', result.envelope);
        clearError('webhooks');
        // The attempt runs at once; its row appears when it is recorded.
        setTimeout(() => pager.reset(), 1000);
      }),
    );
  }

  // ---- AI settings -----------------------------------------------------------------------

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
    $('[data-result="ai-settings-form"]').replaceChildren();
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

  aiForm.addEventListener('submit', async (event) => {
    event.preventDefault();
    clearError('ai-settings-form', aiForm);
    $('[data-result="ai-settings-form"]').replaceChildren();
    // Rows left empty are dropped (before numbering, so indexes match the request).
    for (const row of [...aiRules.children]) {
      const keywords = row.querySelector('[data-rule="keywords"]').value.trim();
      if (!keywords && !row.querySelector('[data-rule="reply"]').value.trim()) row.remove();
    }
    renumberRules();
    const body = {
      enabled: field(aiForm, 'enabled').checked,
      mode: field(aiForm, 'mode').value,
      instructions: field(aiForm, 'instructions').value,
      rules: [...aiRules.children].map((row) => ({
        keywords: commaList(row.querySelector('[data-rule="keywords"]').value),
        reply: row.querySelector('[data-rule="reply"]').value,
      })),
    };
    const result = await api('PUT', '/v1/ai/settings', { body });
    if (!result.ok) return showError('ai-settings-form', result.envelope, aiForm);
    fillAiSettings(result.envelope.data);
    showResult('ai-settings-form', `Saved at ${new Date().toLocaleTimeString()}.`);
  });

  // ---- AI drafts -------------------------------------------------------------------------

  const draftsFilter = $('#drafts-filter');
  const drafts = new Pager({
    path: '/v1/ai/drafts',
    key: 'drafts',
    list: $('#drafts-list'),
    more: $('#drafts-more'),
    error: 'drafts',
    query: () => Object.fromEntries(new FormData(draftsFilter)),
    render: draftRow,
  });

  draftsFilter.addEventListener('submit', (event) => {
    event.preventDefault();
    drafts.reset();
  });

  function draftRow(draft, pager) {
    const pending = draft.status === 'pending';
    const text = h('textarea', { rows: 3, readonly: !pending }, draft.content || '');
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
      { class: 'row draft' },
      h(
        'div',
        { class: 'meta' },
        badge(draft.status, `status-${draft.status}`),
        ` reply to ${draft.from_number} from ${draft.to_number} · ${when(draft.created_at)}`,
      ),
      text,
      h('div', { class: 'actions' }, actions),
    );
  }

  // ---- start -----------------------------------------------------------------------------

  const LOADERS = {
    inbox: () => inbox.reset().then(stampInbox),
    send: loadPhoneChoices,
    phones: () => phones.reset(),
    contacts: () => contacts.reset(),
    campaigns: () => campaigns.reset(),
    webhooks: () => webhooks.reset(),
    drafts: () => {
      loadAiSettings();
      drafts.reset();
    },
  };

  setInterval(() => {
    if (!apiKey() || document.hidden) return;
    const name = current();
    if (name === 'inbox' && loaded.has('inbox')) inbox.refresh().then(stampInbox);
    if (name === 'campaigns' && loaded.has('campaigns')) refreshCampaigns();
  }, REFRESH_MS);

  showKeyState();
  if (apiKey()) loadPhoneChoices();
  open(current());
})();
