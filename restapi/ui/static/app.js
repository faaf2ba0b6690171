// Throttle operator dashboard: a thin client of the REST API on the same
// origin. The API key lives in this tab's sessionStorage only (nothing
// persistent, no cookie, never in the URL) and is sent as X-API-Key.
'use strict';

(function () {
  const KEY_STORE = 'throttle.apiKey';
  const STATS_EVERY_MS = 2000;
  const DESCRIPTORS_EVERY_MS = 10000;
  const SLOTS = 60; // samples the chart shows (2 minutes at 2 s)
  const SVG = 'http://www.w3.org/2000/svg';
  // The engine's algorithms, in its order: the rule form's one list
  // (TestAlgorithmsMatchEngine compares it with algorithms.Algorithms).
  const ALGORITHMS = ['fixed_window', 'sliding_window', 'token_bucket', 'gcra'];
  // A limit's scopes, the default first (TestScopesMatchEngine compares
  // them with algorithms.ScopeRegional and ScopeGlobal).
  const SCOPES = ['regional', 'global'];

  const $ = (id) => document.getElementById(id);
  const nf = new Intl.NumberFormat('en-US');
  const fmt = (n) => nf.format(n);

  let state = fresh();

  function fresh() {
    return {
      key: '', me: null, timers: [], lastTotals: null, lastIdents: new Map(), lastAt: 0,
      samples: [], editing: null, rules: [],
    };
  }

  // ---- API -------------------------------------------------------------

  class APIError extends Error {
    constructor(status, code, message) { super(message); this.status = status; this.code = code; }
  }

  async function api(method, path, body, key) {
    const headers = { 'X-API-Key': key || state.key };
    const init = { method, headers, cache: 'no-store', credentials: 'omit', referrerPolicy: 'no-referrer' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let res;
    try {
      res = await fetch(path, init);
    } catch (e) {
      throw new APIError(0, 'NETWORK', 'the server cannot be reached');
    }
    let data = null;
    try { data = await res.json(); } catch (e) { /* no JSON body */ }
    if (!res.ok) {
      const msg = data && data.error ? data.error : res.status + ' ' + res.statusText;
      throw new APIError(res.status, data && data.code ? data.code : 'HTTP_' + res.status, msg);
    }
    return data;
  }

  function describe(err) {
    return err.code && err.code !== 'NETWORK' ? err.message + ' (' + err.code + ')' : err.message;
  }

  // ---- DOM helpers -----------------------------------------------------

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else if (k === 'style') e.style.cssText = v; // CSSOM: allowed by the page's CSP
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v);
    }
    for (const c of children) {
      if (c !== null && c !== undefined) e.append(c);
    }
    return e;
  }

  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function showError(id, err) {
    const p = $(id);
    if (!err) { p.hidden = true; p.textContent = ''; return; }
    p.textContent = typeof err === 'string' ? err : describe(err);
    p.hidden = false;
  }

  let toastTimer = 0;
  function toast(msg, bad) {
    const t = $('toast');
    t.textContent = msg;
    t.className = bad ? 'toast bad' : 'toast';
    t.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => { t.hidden = true; }, 3500);
  }

  function timeOf(iso) {
    const d = new Date(iso);
    return isNaN(d) ? '' : d.toLocaleTimeString('en-GB', { hour12: false });
  }

  function dateTimeOf(iso) {
    const d = new Date(iso);
    if (isNaN(d)) return '';
    return d.toLocaleDateString('en-CA') + ' ' + d.toLocaleTimeString('en-GB', { hour12: false });
  }

  function ago(iso) {
    const s = Math.max(0, Math.round((Date.now() - new Date(iso).getTime()) / 1000));
    if (s < 5) return 'just now';
    if (s < 60) return s + ' s ago';
    if (s < 3600) return Math.floor(s / 60) + ' min ago';
    if (s < 86400) return Math.floor(s / 3600) + ' h ago';
    return Math.floor(s / 86400) + ' d ago';
  }

  // Two clicks delete: the first arms the button, the second confirms.
  function confirmButton(label, onConfirm) {
    const b = el('button', { type: 'button', class: 'btn small danger', text: label });
    let armed = 0;
    b.addEventListener('click', () => {
      if (!armed) {
        b.textContent = 'Confirm';
        armed = setTimeout(() => { armed = 0; b.textContent = label; }, 4000);
        return;
      }
      clearTimeout(armed);
      armed = 0;
      onConfirm();
    });
    return b;
  }

  // ---- session ---------------------------------------------------------

  async function signIn(key, quiet) {
    showError('login-error', null);
    let me;
    try {
      me = await api('GET', '/me', undefined, key);
    } catch (err) {
      if (err.status === 401) sessionStorage.removeItem(KEY_STORE);
      if (!quiet || err.status !== 401) showError('login-error', err);
      return;
    }
    state.key = key;
    state.me = me;
    sessionStorage.setItem(KEY_STORE, key);
    $('api-key').value = '';
    $('client-name').textContent = me.name;
    $('client-domain').textContent = me.domain || 'none';
    $('login').hidden = true;
    $('dashboard').hidden = false;
    $('session').hidden = false;
    $('app').dataset.state = 'signed-in';
    drawChart();
    await Promise.all([loadRules(), loadExemptions(), loadKeys(), pollStats(), loadDescriptors()]);
    state.timers.push(setInterval(pollStats, STATS_EVERY_MS));
    state.timers.push(setInterval(loadDescriptors, DESCRIPTORS_EVERY_MS));
    $('app').dataset.state = 'ready';
  }

  function signOut(message) {
    for (const t of state.timers) clearInterval(t);
    sessionStorage.removeItem(KEY_STORE);
    state = fresh();
    $('dashboard').hidden = true;
    $('session').hidden = true;
    $('login').hidden = false;
    $('app').dataset.state = 'signed-out';
    for (const id of ['rules', 'exemptions', 'identifiers', 'keys']) $(id).tBodies[0].replaceChildren();
    $('key-minted').hidden = true;
    closeRuleForm();
    showError('login-error', message || null);
    $('api-key').focus();
  }

  // A key that stops working (client gone, key rotated) signs the tab out.
  function handleAuth(err) {
    if (err.status === 401) {
      signOut('The API key is no longer accepted: ' + describe(err));
      return true;
    }
    return false;
  }

  // ---- stats and chart -------------------------------------------------

  async function pollStats() {
    if (!state.me) return;
    let s;
    try {
      s = await api('GET', '/stats/' + encodeURIComponent(state.me.client_id) + '?top=10');
    } catch (err) {
      if (handleAuth(err)) return;
      $('live').classList.add('stale');
      $('live-text').textContent = 'not updating: ' + err.message;
      return;
    }
    const now = Date.now();
    const interval = state.lastAt ? (now - state.lastAt) / 1000 : 0;
    const prev = state.lastTotals;
    const sample = { at: now, allowed: 0, rejected: 0 };
    if (prev) {
      sample.allowed = Math.max(0, s.allowed - prev.allowed);
      sample.rejected = Math.max(0, s.rejected - prev.rejected);
    }
    state.samples.push(sample);
    if (state.samples.length > SLOTS) state.samples.shift();
    state.lastTotals = { allowed: s.allowed, rejected: s.rejected };
    state.lastAt = now;

    $('live').classList.remove('stale');
    $('live-text').textContent = 'live · ' + new Date(now).toLocaleTimeString('en-GB', { hour12: false });
    renderStats(s, sample, interval);
    renderIdentifiers(s.top_identifiers || [], interval);
    drawChart();
  }

  function renderStats(s, sample, interval) {
    $('stat-total').textContent = fmt(s.total_checks);
    $('stat-allowed').textContent = fmt(s.allowed);
    $('stat-rejected').textContent = fmt(s.rejected);
    $('stat-ratio').textContent = s.total_checks ? (100 * s.rejected / s.total_checks).toFixed(1) + '%' : '0%';
    const algos = Object.entries(s.by_algorithm || {}).filter(([, n]) => n > 0).map(([a, n]) => a.replace('_', ' ') + ' ' + fmt(n));
    $('stat-algos').textContent = algos.length ? algos.join(' · ') : 'no checks yet';
    const rate = (n) => interval > 0 ? fmt(Math.round(60 * n / interval)) + ' / min now' : '';
    $('stat-allowed-rate').textContent = rate(sample.allowed);
    $('stat-rejected-rate').textContent = rate(sample.rejected);
  }

  function renderIdentifiers(list, interval) {
    const body = $('identifiers').tBodies[0];
    const rows = list.map((u) => {
      const prev = state.lastIdents.get(u.identifier);
      const delta = prev === undefined ? 0 : Math.max(0, u.total_checks - prev);
      const share = u.total_checks ? u.rejected / u.total_checks : 0;
      const rate = interval > 0 && prev !== undefined ? fmt(Math.round(60 * delta / interval)) + '/min' : '–';
      return el('tr', { 'data-identifier': u.identifier },
        el('td', { class: 'ident', title: u.identifier, text: u.identifier }),
        el('td', { class: 'num', text: fmt(u.total_checks) }),
        el('td', { class: 'num', text: fmt(u.allowed) }),
        el('td', { class: 'num' + (u.rejected ? ' rejected' : ''), text: fmt(u.rejected) }),
        el('td', {}, el('div', { class: 'share-bar', title: (100 * share).toFixed(1) + '% rejected' },
          el('span', { style: 'width:' + (100 * share).toFixed(1) + '%' }))),
        el('td', { class: 'num', text: rate }),
        el('td', { class: 'muted seen', title: dateTimeOf(u.last_seen_at), text: ago(u.last_seen_at) }));
    });
    body.replaceChildren(...rows);
    $('identifiers-empty').hidden = list.length > 0;
    state.lastIdents = new Map(list.map((u) => [u.identifier, u.total_checks]));
  }

  // niceStep is the smallest 1, 2 or 5 × 10^k that is at least v.
  function niceStep(v) {
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  function clock(ms) {
    return new Date(ms).toLocaleTimeString('en-GB', { hour12: false });
  }

  // drawChart draws one stacked bar per poll interval (allowed below,
  // rejected above), the newest at the right, SLOTS intervals wide. The
  // sums of what it shows are in the element's data-allowed and
  // data-rejected.
  function drawChart() {
    const box = $('chart');
    const W = 1000, H = 230, L = 44, R = 8, T = 10, B = 26;
    const samples = state.samples;
    const allowed = samples.reduce((a, s) => a + s.allowed, 0);
    const rejected = samples.reduce((a, s) => a + s.rejected, 0);
    box.dataset.allowed = String(allowed);
    box.dataset.rejected = String(rejected);
    box.dataset.samples = String(samples.length);
    $('chart-allowed').textContent = fmt(allowed);
    $('chart-rejected').textContent = fmt(rejected);
    $('chart-span').textContent = 'last ' + (SLOTS * STATS_EVERY_MS / 60000) + ' min, per ' + STATS_EVERY_MS / 1000 + ' s';

    const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: 'none' });
    const peak = Math.max(1, ...samples.map((s) => s.allowed + s.rejected));
    const step = Math.max(1, niceStep(peak / 4));
    const max = step * Math.max(1, Math.ceil(peak / step));
    const plotW = W - L - R, plotH = H - T - B;
    const y = (v) => T + plotH - (v / max) * plotH;
    for (let v = 0; v <= max; v += step) {
      root.append(svg('line', { class: 'grid-line', x1: L, x2: W - R, y1: y(v), y2: y(v) }));
      root.append(svg('text', { class: 'axis-label', x: L - 8, y: y(v) + 4, 'text-anchor': 'end' }, fmt(v)));
    }
    const slot = plotW / SLOTS;
    const barW = Math.max(2, slot * 0.7);
    const first = SLOTS - samples.length;
    samples.forEach((s, i) => {
      const x = L + (first + i) * slot + (slot - barW) / 2;
      if (s.allowed > 0) {
        root.append(svg('rect', { class: 'bar-ok', x, width: barW, y: y(s.allowed), height: y(0) - y(s.allowed) }));
      }
      if (s.rejected > 0) {
        const top = s.allowed + s.rejected;
        root.append(svg('rect', { class: 'bar-bad', x, width: barW, y: y(top), height: y(s.allowed) - y(top) }));
      }
    });
    // Clock times every 10 slots, counted back from the newest sample.
    const newest = samples.length ? samples[samples.length - 1].at : Date.now();
    for (let k = 0; k < SLOTS; k += 10) {
      const x = L + (SLOTS - 1 - k) * slot + slot / 2;
      root.append(svg('line', { class: 'grid-line', x1: x, x2: x, y1: y(0), y2: y(0) + 4 }));
      root.append(svg('text', { class: 'axis-label', x, y: H - 8, 'text-anchor': k === 0 ? 'end' : 'middle' },
        clock(newest - k * STATS_EVERY_MS)));
    }
    if (allowed + rejected === 0) {
      root.append(svg('text', { class: 'placeholder', x: L + plotW / 2, y: T + plotH / 2, 'text-anchor': 'middle' },
        'Waiting for /check calls: each bar is one ' + STATS_EVERY_MS / 1000 + '-second interval'));
    }
    box.replaceChildren(root);
  }

  // ---- rules -----------------------------------------------------------

  function descriptorsText(list) {
    return (list || []).map((d) => (d.value ? d.key + '=' + d.value : d.key)).join(', ');
  }

  function parseDescriptors(text) {
    const out = [];
    for (const part of text.split(',')) {
      const p = part.trim();
      if (!p) continue;
      const i = p.indexOf('=');
      if (i < 0) out.push({ key: p });
      else out.push({ key: p.slice(0, i).trim(), value: p.slice(i + 1).trim() });
    }
    return out;
  }

  // limitsOf is every limit of a rule: its rate_limits, or its own one.
  function limitsOf(r) {
    if (r.rate_limits && r.rate_limits.length) return r.rate_limits;
    return [{ algorithm: r.algorithm, limit: r.limit, window: r.window, refill_rate: r.refill_rate, always_count: r.always_count, accuracy: r.accuracy, scope: r.scope }];
  }

  // perLimit is a table cell with one line per limit of the rule.
  function perLimit(limits, attrs, line) {
    return el('td', attrs, ...limits.map((l, i) => el('div', { class: 'limit-line', 'data-limit': String(i) }, ...line(l))));
  }

  // listOf is a list reply: a bare array, or, from a server run with
  // LIST_RESPONSE_FORMAT=object, the array under name.
  function listOf(reply, name) {
    return Array.isArray(reply) ? reply : (reply && reply[name]) || [];
  }

  // loadOverrides returns each rule of one limit's overrides, by rule name.
  async function loadOverrides(rules) {
    const pairs = await Promise.all(rules.filter((r) => !r.rate_limits).map(async (r) => {
      try {
        return [r.name, await api('GET', '/rules/' + encodeURIComponent(r.name) + '/overrides')];
      } catch (err) {
        return [r.name, []];
      }
    }));
    return Object.fromEntries(pairs);
  }

  // overridesCell shows a rule's overrides: identifier (or prefix*) → limit.
  function overridesCell(r, overrides) {
    const list = overrides[r.name] || [];
    if (!list.length) return el('td', {}, el('span', { class: 'muted', text: '–' }));
    // Two parts that each keep to one line, so a narrow cell breaks it after the arrow.
    return el('td', {}, ...list.map((o) => el('span', { class: 'override', 'data-override': o.identifier,
      title: 'this identifier' + (o.identifier.endsWith('*') ? ' prefix' : '') + "'s own limit" },
    el('span', { text: o.identifier + ' →' }), ' ',
    el('span', {}, fmt(o.limit) + (o.window ? ' / ' + fmt(o.window) + ' s' : ''),
      el('button', { type: 'button', class: 'override-del', title: 'remove this override', text: '×',
        onclick: () => deleteOverride(r.name, o.identifier) })))));
  }

  async function deleteOverride(rule, identifier) {
    try {
      await api('DELETE', '/rules/' + encodeURIComponent(rule) + '/overrides/' + encodeURIComponent(identifier));
    } catch (err) {
      if (!handleAuth(err)) toast('Override: ' + describe(err), true);
      return;
    }
    toast('Override of ' + identifier + ' on ' + rule + ' removed');
    await loadRules();
  }

  async function loadRules() {
    let rules, overrides;
    try {
      rules = listOf(await api('GET', '/rules/list'), 'rules');
      overrides = await loadOverrides(rules);
    } catch (err) {
      if (!handleAuth(err)) toast('Rules: ' + describe(err), true);
      return;
    }
    state.rules = rules;
    const body = $('rules').tBodies[0];
    body.replaceChildren(...rules.map((r) => { const limits = limitsOf(r); return el('tr', { 'data-rule': r.name, class: state.editing === r.name ? 'editing' : '' },
      el('td', {}, el('strong', { text: r.name }),
        r.rate_limits ? el('span', { class: 'limit-count', text: limits.length + ' limits, all must admit' }) : null),
      perLimit(limits, {}, (l) => [
        r.rate_limits ? el('span', { class: 'limit-name', text: l.name || r.name + '[' + limits.indexOf(l) + ']' }) : null,
        r.rate_limits ? ' ' : null,
        el('span', { class: 'pill ' + l.algorithm, text: l.algorithm })]),
      perLimit(limits, { 'data-field': 'accuracy' }, (l) => [accuracyTag(l.accuracy)]),
      perLimit(limits, { 'data-field': 'scope' }, (l) => [scopeTag(l.scope)]),
      perLimit(limits, { class: 'num', 'data-field': 'limit' }, (l) => [fmt(l.limit), l.always_count ? ' ' : null,
        l.always_count ? el('span', { class: 'badge always', title: 'counts every hit, even past the limit', text: 'always counts' }) : null]),
      perLimit(limits, { class: 'num' }, (l) => [l.window ? fmt(l.window) + ' s' : '–']),
      perLimit(limits, { class: 'num' }, (l) => [l.refill_rate ? String(l.refill_rate) : '–']),
      overridesCell(r, overrides),
      el('td', {}, ...(r.descriptors && r.descriptors.length
        ? r.descriptors.map((d) => el('span', { class: 'desc-entry', text: d.value ? d.key + '=' + d.value : d.key }))
        : [el('span', { class: 'muted', text: '–' })])),
      el('td', { class: 'actions' },
        el('button', { type: 'button', class: 'btn small', 'data-action': 'edit', text: 'Edit', onclick: () => openRuleForm(r) }),
        confirmButton('Delete', () => deleteRule(r.name)))); }));
    $('rules-empty').hidden = rules.length > 0;
  }

  // accuracyTag shows a limit's accuracy: exact, or approximate (decided
  // from memory, synced to Redis in the background).
  function accuracyTag(accuracy) {
    const a = accuracy || 'exact';
    return el('span', { class: 'accuracy ' + a, text: a,
      title: a === 'approximate' ? 'decided from memory, synced to Redis in the background' : 'every decision on the shared count' });
  }

  // scopeTag shows a limit's scope: regional, or global (one budget for
  // every region, in the Redis they share).
  function scopeTag(scope) {
    const s = scope || SCOPES[0];
    return el('span', { class: 'scope ' + s, text: s,
      title: s === 'global' ? "one budget for every region, counted in the Redis they share (GLOBAL_REDIS_URL)" : "counted in this region's counters" });
  }

  // accuracySelect is a select of a limit's accuracy, exact first.
  function accuracySelect(attrs) {
    return el('select', attrs, ...['exact', 'approximate'].map((a) => el('option', { value: a, text: a })));
  }

  function openRuleForm(rule) {
    const form = $('rule-form');
    form.reset();
    showError('rule-error', null);
    state.editing = rule ? rule.name : null;
    $('rule-form-title').textContent = rule ? 'Edit rule ' + rule.name : 'New rule';
    $('rule-submit').textContent = rule ? 'Save changes' : 'Create rule';
    $('rule-name').disabled = !!rule;
    $('rule-limits').replaceChildren();
    if (rule) {
      $('rule-name').value = rule.name;
      $('rule-descriptors').value = descriptorsText(rule.descriptors);
    }
    for (const l of rule ? limitsOf(rule) : [null]) addLimitRow(l);
    for (const tr of $('rules').tBodies[0].rows) tr.classList.toggle('editing', !!rule && tr.dataset.rule === rule.name);
    form.hidden = false;
    (rule ? $('rule-limits').querySelector('[data-field="limit"]') : $('rule-name')).focus();
  }

  function closeRuleForm() {
    $('rule-form').hidden = true;
    state.editing = null;
    for (const tr of $('rules').tBodies[0].rows) tr.classList.remove('editing');
  }

  // addLimitRow adds the form's row of one limit of the rule, filled
  // from l when given. The first row is the rule's limit; each more makes
  // the rule one of rate_limits, with an optional name and a Remove button.
  function addLimitRow(l) {
    const rows = $('rule-limits');
    const i = rows.children.length;
    const input = (field, attrs) => el('input', Object.assign({ 'data-field': field }, attrs));
    const algorithm = el('select', { 'data-field': 'algorithm' },
      el('option', { value: '', text: 'client default' }),
      ...ALGORITHMS.map((a) => el('option', { value: a, text: a })));
    const accuracy = accuracySelect({ 'data-field': 'accuracy',
      title: 'approximate: decided from memory and synced to Redis in the background, within a bounded error (fixed_window and sliding_window; it matters with Redis only)' });
    const scope = el('select', { 'data-field': 'scope',
      title: 'global: one budget for every region, counted in the Redis they share (GLOBAL_REDIS_URL), decided from memory; approximate, fixed_window and sliding_window only' },
    ...SCOPES.map((s) => el('option', { value: s, text: s })));
    // A global limit is approximate: choosing global chooses it too.
    scope.addEventListener('change', () => { if (scope.value === 'global') accuracy.value = 'approximate'; });
    const always = input('always_count', { type: 'checkbox' });
    const row = el('div', { class: 'limit-row', 'data-limit': String(i) },
      i ? el('label', {}, 'Limit ' + (i + 1) + ' name', input('name', { maxlength: '100', placeholder: 'optional, e.g. daily' }))
        : el('span', { class: 'limit-title', text: 'Limit' }),
      el('label', {}, 'Algorithm', algorithm),
      el('label', {}, 'Accuracy', accuracy),
      el('label', {}, 'Scope', scope),
      el('label', {}, 'Limit', input('limit', { type: 'number', min: '1', step: '1', required: '', placeholder: i ? '1000' : '100' })),
      el('label', {}, 'Window (s)', input('window', { type: 'number', min: '1', step: '1', placeholder: i ? '86400' : '60' })),
      el('label', {}, 'Refill rate (/s)', input('refill_rate', { type: 'number', min: '0', step: 'any', placeholder: 'token_bucket only' })),
      el('label', { class: 'check', title: 'charge costs reported after the response even past the limit' }, always, 'Always count'),
      i ? el('button', { type: 'button', class: 'btn small danger', text: 'Remove', onclick: () => { row.remove(); renumberLimitRows(); } }) : null);
    if (l) {
      if (i) row.querySelector('[data-field="name"]').value = l.name || '';
      algorithm.value = l.algorithm || '';
      row.querySelector('[data-field="limit"]').value = l.limit;
      row.querySelector('[data-field="window"]').value = l.window || '';
      row.querySelector('[data-field="refill_rate"]').value = l.refill_rate || '';
      always.checked = !!l.always_count;
      accuracy.value = l.accuracy || 'exact';
      scope.value = l.scope || SCOPES[0];
    }
    rows.append(row);
    rows.dataset.count = String(rows.children.length);
    return row;
  }

  // renumberLimitRows numbers the rows again after one was removed (the
  // first, the rule's own limit, is never removed).
  function renumberLimitRows() {
    const rows = $('rule-limits');
    [...rows.children].forEach((row, k) => {
      row.dataset.limit = String(k);
      if (k) row.querySelector('label').firstChild.textContent = 'Limit ' + (k + 1) + ' name';
    });
    rows.dataset.count = String(rows.children.length);
  }

  async function submitRule(ev) {
    ev.preventDefault();
    showError('rule-error', null);
    const num = (v) => (v.trim() === '' ? undefined : Number(v));
    const limitOf = (alg, limit, window, refill, always, accuracy, scope, name) => {
      const l = {};
      if (name) l.name = name;
      if (alg) l.algorithm = alg;
      l.limit = num(limit);
      if (num(window) !== undefined) l.window = num(window);
      if (num(refill) !== undefined) l.refill_rate = num(refill);
      if (always) l.always_count = true;
      // exact is the default, but not global's: sent so the server says why not.
      if (accuracy !== 'exact' || scope !== SCOPES[0]) l.accuracy = accuracy;
      if (scope !== SCOPES[0]) l.scope = scope; // regional is the default
      return l;
    };
    const limits = [...$('rule-limits').children].map((row) => {
      const f = (name) => row.querySelector('[data-field="' + name + '"]');
      return limitOf(f('algorithm').value, f('limit').value, f('window').value, f('refill_rate').value, f('always_count').checked,
        f('accuracy').value, f('scope').value, f('name') ? f('name').value.trim() : '');
    });
    const body = limits.length > 1 ? { rate_limits: limits } : limits[0];
    const desc = parseDescriptors($('rule-descriptors').value);
    if (desc.length) body.descriptors = desc;
    const editing = state.editing;
    try {
      if (editing) {
        await api('PUT', '/rules/' + encodeURIComponent(editing), body);
      } else {
        body.name = $('rule-name').value.trim();
        await api('POST', '/rules', body);
      }
    } catch (err) {
      if (!handleAuth(err)) showError('rule-error', err);
      return;
    }
    closeRuleForm();
    toast(editing ? 'Rule ' + editing + ' saved' : 'Rule ' + body.name + ' created');
    await loadRules();
  }

  async function deleteRule(name) {
    try {
      await api('DELETE', '/rules/' + encodeURIComponent(name));
    } catch (err) {
      if (!handleAuth(err)) toast('Delete ' + name + ': ' + describe(err), true);
      return;
    }
    if (state.editing === name) closeRuleForm();
    toast('Rule ' + name + ' deleted');
    await loadRules();
  }

  // ---- exemptions ------------------------------------------------------

  async function loadExemptions() {
    let list;
    try {
      list = listOf(await api('GET', '/exemptions/list'), 'exemptions');
    } catch (err) {
      if (!handleAuth(err)) toast('Exemptions: ' + describe(err), true);
      return;
    }
    $('exemptions').tBodies[0].replaceChildren(...list.map((x) => el('tr', { 'data-exemption': x.identifier },
      el('td', { class: 'ident', title: x.identifier, text: x.identifier }),
      el('td', { text: x.reason || '–', class: x.reason ? '' : 'muted' }),
      el('td', { class: 'muted', text: dateTimeOf(x.created_at) }),
      el('td', { class: 'actions' }, confirmButton('Remove', () => deleteExemption(x.identifier))))));
    $('exemptions-empty').hidden = list.length > 0;
  }

  async function submitExemption(ev) {
    ev.preventDefault();
    showError('exemption-error', null);
    const body = { identifier: $('exemption-identifier').value.trim() };
    const reason = $('exemption-reason').value.trim();
    if (reason) body.reason = reason;
    try {
      await api('POST', '/exemptions', body);
    } catch (err) {
      if (!handleAuth(err)) showError('exemption-error', err);
      return;
    }
    $('exemption-form').reset();
    toast(body.identifier + ' is exempt');
    await loadExemptions();
  }

  async function deleteExemption(identifier) {
    try {
      await api('DELETE', '/exemptions/' + encodeURIComponent(identifier));
    } catch (err) {
      if (!handleAuth(err)) toast('Remove ' + identifier + ': ' + describe(err), true);
      return;
    }
    toast(identifier + ' is no longer exempt');
    await loadExemptions();
  }

  // ---- check-only keys -------------------------------------------------

  async function loadKeys() {
    let list;
    try {
      list = listOf(await api('GET', '/keys'), 'keys');
    } catch (err) {
      if (!handleAuth(err)) toast('Keys: ' + describe(err), true);
      return;
    }
    $('keys').tBodies[0].replaceChildren(...list.map((k) => el('tr', { 'data-key': k.id },
      el('td', { class: 'ident', title: k.id, text: k.id }),
      el('td', { text: k.scope }),
      el('td', { class: 'muted', text: dateTimeOf(k.created_at) }),
      el('td', { class: 'actions' }, confirmButton('Revoke', () => revokeKey(k.id))))));
    $('keys-empty').hidden = list.length > 0;
  }

  async function mintKey() {
    showError('key-error', null);
    let k;
    try {
      k = await api('POST', '/keys', { scope: 'check' });
    } catch (err) {
      if (!handleAuth(err)) showError('key-error', err);
      return;
    }
    $('key-secret').textContent = k.api_key;
    $('key-snippet').textContent = "const res = await fetch('" + location.origin + "/check', {\n" +
      "  method: 'POST',\n" +
      "  headers: { 'X-API-Key': '" + k.api_key + "', 'Content-Type': 'application/json' },\n" +
      "  body: JSON.stringify({ identifier: userId, limit: 100, window: 60 }),\n" +
      '});\n' +
      'const { allowed, retry_after } = await res.json();';
    $('key-minted').hidden = false;
    await loadKeys();
  }

  async function revokeKey(id) {
    try {
      await api('DELETE', '/keys/' + encodeURIComponent(id));
    } catch (err) {
      if (!handleAuth(err)) toast('Revoke ' + id + ': ' + describe(err), true);
      return;
    }
    toast('Key ' + id + ' revoked');
    $('key-minted').hidden = true;
    await loadKeys();
  }

  // ---- descriptors -----------------------------------------------------

  async function loadDescriptors() {
    if (!state.me) return;
    let d;
    try {
      d = await api('GET', '/descriptors');
    } catch (err) {
      if (!handleAuth(err)) toast('Descriptors: ' + describe(err), true);
      return;
    }
    const badge = $('desc-badge');
    const facts = [['Domain', d.domain ? el('code', { text: d.domain }) : el('span', { class: 'muted', text: 'none' })]];
    if (!d.domain) {
      badge.textContent = 'no domain';
      badge.className = 'badge off';
      facts.push(['Source', document.createTextNode('Your client has no Envoy domain: the operator grants them (ADMIN_API_KEY or CLAIMABLE_DOMAINS at registration).')]);
    } else if (!d.configured) {
      badge.textContent = 'no YAML directory';
      badge.className = 'badge off';
      facts.push(['Source', document.createTextNode('This server has no DESCRIPTORS_DIR: your rules with descriptors decide Envoy requests on your domain.')]);
    } else {
      badge.textContent = d.valid ? 'loaded' : 'reload failed';
      badge.className = 'badge ' + (d.valid ? 'ok' : 'bad');
      facts.push(['Source', document.createTextNode(d.yaml
        ? "The operator's YAML names this domain: it decides its Envoy requests, and your client loses the domain"
        : 'No YAML file names this domain: your rules with descriptors apply')]);
      if (d.loaded_at) facts.push(['Loaded', document.createTextNode(dateTimeOf(d.loaded_at))]);
      if (d.checked_at) facts.push(['Checked', document.createTextNode(dateTimeOf(d.checked_at) + ' (' + ago(d.checked_at) + ')')]);
      if (!d.valid) {
        facts.push(['Status', document.createTextNode('A descriptor file (or the directory) failed to load; the last good configuration is still serving.')]);
      }
    }
    $('desc-facts').replaceChildren(...facts.flatMap(([k, v]) => [el('dt', { text: k }), el('dd', {}, v)]));
  }

  // ---- wiring ----------------------------------------------------------

  document.addEventListener('DOMContentLoaded', () => {
    $('login-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const key = $('api-key').value.trim();
      if (key) signIn(key, false);
    });
    $('signout').addEventListener('click', () => signOut());
    $('rule-new').addEventListener('click', () => openRuleForm(null));
    $('rule-add-limit').addEventListener('click', () => addLimitRow(null).querySelector('input').focus());
    $('rule-cancel').addEventListener('click', closeRuleForm);
    $('rule-form').addEventListener('submit', submitRule);
    $('exemption-form').addEventListener('submit', submitExemption);
    $('key-new').addEventListener('click', mintKey);
    const saved = sessionStorage.getItem(KEY_STORE);
    if (saved) signIn(saved, true);
    else $('api-key').focus();
  });
})();
