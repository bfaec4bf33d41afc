// tenure dashboard. Plain JavaScript, no build step, nothing fetched from
// anywhere but this server. The login is an HttpOnly session cookie: this
// script never sees a bearer token. Live views come from one server-sent
// event stream (api/events) whose query says what to watch.
'use strict';
(() => {
  const $ = (id) => document.getElementById(id);
  const base = location.pathname.replace(/[^/]*$/, '');
  const viewKey = 'tenure-dashboard-view';

  // What the page watches (no secrets: prefixes, names, limit shapes).
  const view = Object.assign({ prefix: '', keys: [], user: '', job: '', limits: [] },
    JSON.parse(localStorage.getItem(viewKey) || '{}'));
  const saveView = () => localStorage.setItem(viewKey, JSON.stringify(view));

  let me = null;
  let es = null;
  let paused = false;
  let refreshMs = 1000;

  // ---- helpers ----
  const el = (tag, attrs, ...kids) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      // Styles go through the CSSOM: the page's policy refuses style attributes.
      else if (k === 'style') Object.assign(e.style, v);
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? '' : v);
    }
    for (const kid of kids) if (kid !== null && kid !== undefined) e.append(kid);
    return e;
  };
  // Go duration strings ("1m30.5s", "250ms") to milliseconds.
  const units = { h: 3600e3, m: 60e3, s: 1e3, ms: 1, us: 1e-3, 'µs': 1e-3, ns: 1e-6 };
  const durMs = (d) => {
    if (!d) return 0;
    let ms = 0;
    for (const m of String(d).matchAll(/(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)/g)) ms += parseFloat(m[1]) * units[m[2]];
    return String(d).startsWith('-') ? -ms : ms;
  };
  const fmtMs = (ms) => {
    if (ms <= 0) return '0.0s';
    if (ms < 60e3) return (ms / 1000).toFixed(1) + 's';
    if (ms < 3600e3) return Math.floor(ms / 60e3) + 'm' + String(Math.floor(ms % 60e3 / 1000)).padStart(2, '0') + 's';
    return Math.floor(ms / 3600e3) + 'h' + String(Math.floor(ms % 3600e3 / 60e3)).padStart(2, '0') + 'm';
  };
  // Times of today as hh:mm:ss, others with their date.
  const fmtTime = (t) => {
    if (!t || t.startsWith('0001-')) return '—';
    const d = new Date(t);
    const hms = d.toLocaleTimeString(undefined, { hour12: false });
    if (d.toDateString() === new Date().toDateString()) return hms;
    return d.toLocaleDateString(undefined, { month: 'short', day: 'numeric' }) + ' ' + hms;
  };
  const problemText = (p) => {
    const b = p && p.body;
    if (b && typeof b === 'object') return b.detail || b.title || 'error ' + p.status;
    return 'error ' + (p ? p.status : '');
  };
  const note = (id, text, isError) => {
    const n = $(id);
    n.hidden = !text;
    n.textContent = text || '';
    n.classList.toggle('error', !!isError);
  };
  // Fences are large integers (microseconds since the epoch, and more):
  // shown in groups of three digits, the low six (those that tell two
  // grants apart) emphasised. The exact value is in data-fence, and
  // copying the text gives the plain digits (the groups are spaced by
  // CSS, not by characters).
  const fenceGroups = (n) => {
    const s = String(n);
    const g = [];
    for (let i = s.length; i > 0; i -= 3) g.unshift(s.slice(Math.max(0, i - 3), i));
    return g;
  };
  const setFence = (e, n) => {
    const v = n ? String(n) : '';
    if (e.dataset.fence === v && e.firstChild) return;
    if (!v) { delete e.dataset.fence; e.removeAttribute('title'); e.textContent = '—'; return; }
    e.dataset.fence = v;
    e.title = 'fence ' + v;
    const g = fenceGroups(v);
    e.replaceChildren(...g.map((d, i) => el('span', { class: 'fg' + (i >= g.length - 2 ? ' lo' : ''), text: d })));
  };
  const fenceTd = (n, attrs) => { const td = el('td', Object.assign({ class: 'num fence' }, attrs || {})); setFence(td, n); return td; };
  // In running text: the groups separated by narrow no-break spaces.
  const fenceText = (n) => fenceGroups(n).join('\u202f');

  // confirmAction asks before a destructive action, naming its exact
  // target (fixed when the action was first clicked: later refreshes do
  // not change it). It resolves true if the operator confirmed.
  let confirming = null;
  const confirmAction = ({ title, fields, preview, warn, ok }) => new Promise((resolve) => {
    const d = $('confirm');
    if (confirming) confirming(false);
    $('confirm-title').textContent = title;
    $('confirm-target').replaceChildren(...fields.flatMap(([k, v, testid]) =>
      [el('dt', { text: k }), el('dd', { text: v, 'data-testid': testid ? 'confirm-' + testid : null })]));
    const pre = $('confirm-preview');
    pre.hidden = preview === undefined;
    pre.textContent = preview || '';
    const w = $('confirm-warn');
    w.hidden = !warn;
    w.textContent = warn || '';
    $('confirm-ok').textContent = ok;
    const done = (yes) => {
      if (confirming !== done) return;
      confirming = null;
      if (d.open) d.close();
      resolve(yes);
    };
    confirming = done;
    $('confirm-ok').onclick = () => done(true);
    $('confirm-cancel').onclick = () => done(false);
    d.onclose = () => done(false);
    d.showModal();
    $('confirm-cancel').focus();
  });

  const utf8 = new TextEncoder();
  const b64 = (bytes) => { let s = ''; for (const b of bytes) s += String.fromCharCode(b); return btoa(s); };

  const post = async (path, body) => {
    const r = await fetch(base + path, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
      credentials: 'same-origin',
    });
    let data = null;
    const text = await r.text();
    try { data = text ? JSON.parse(text) : null; } catch { data = null; }
    if (r.status === 401) { location.reload(); }
    return { ok: r.ok, status: r.status, body: data };
  };

  // ---- the stream ----
  const connect = () => {
    if (es) es.close();
    es = null;
    if (paused) return;
    const q = new URLSearchParams();
    q.set('prefix', view.prefix);
    if (me && !me.features.listLeases) q.set('list', '0');
    for (const k of view.keys) q.append('key', k);
    if (view.user) q.set('user', view.user);
    if (view.job) q.set('job', view.job);
    for (const l of view.limits) q.append('limit', JSON.stringify(l));
    es = new EventSource(base + 'api/events?' + q.toString());
    setLive('connecting', '');
    es.addEventListener('snapshot', (ev) => { setLive('live', 'on'); render(JSON.parse(ev.data)); });
    es.addEventListener('logout', () => { es.close(); location.reload(); });
    // Over the token's rate limit: the server read nothing this time.
    es.addEventListener('limited', () => setLive('rate limited', 'off'));
    es.onerror = async () => {
      setLive('reconnecting', 'off');
      if (es && es.readyState === EventSource.CLOSED) {
        const r = await fetch(base + 'api/me', { credentials: 'same-origin' });
        if (r.status === 401) { location.reload(); return; }
        setTimeout(connect, 2000);
      }
    };
  };
  const setLive = (text, cls) => {
    const l = $('live');
    l.textContent = text;
    l.className = 'live ' + cls;
  };

  // ---- leases ----
  // key -> {tr, ttlMs, at, ttl0, held, gone}
  const leases = new Map();
  const renderLeases = (snap) => {
    const infos = new Map();
    if (snap.leases) {
      if (snap.leases.status === 200) {
        note('lease-note', '');
        for (const i of snap.leases.body.leases || []) infos.set(i.key, i);
      } else if (snap.leases.status === 501) {
        note('lease-note', 'This store does not list its leases: watch keys one by one (inspectLease).');
      } else {
        note('lease-note', problemText(snap.leases), true);
      }
    }
    for (const [k, p] of Object.entries(snap.watched || {})) {
      if (p.status === 200) infos.set(k, Object.assign({ watched: true }, p.body));
      else note('lease-note', k + ': ' + problemText(p), true);
    }
    const now = performance.now();
    for (const [key, info] of infos) {
      let row = leases.get(key);
      if (info.held) {
        if (!row || row.gone) {
          if (row) row.tr.remove();
          row = newLeaseRow(key);
          leases.set(key, row);
        }
        row.ttlMs = durMs(info.ttl);
        row.at = now;
        row.ttl0 = Math.max(row.ttl0 || 0, row.ttlMs);
        setFence(row.fenceTd, info.fence);
        row.holderTd.textContent = holderText(info);
        row.stateTd.replaceChildren(el('span', { class: 'pill held', text: 'held' }));
        row.watched = !!info.watched;
      } else if (row && !row.gone) {
        fade(row, now);
      } else if (!row && info.watched) {
        // A watched key that is not held: show it greyed, without fading.
        row = newLeaseRow(key);
        row.gone = true;
        row.watched = true;
        setFence(row.fenceTd, info.fence);
        row.stateTd.replaceChildren(el('span', { class: 'pill released', text: 'free' }));
        row.ttlTd.firstChild.textContent = '—';
        leases.set(key, row);
      }
    }
    // Rows whose key no longer shows up: released or expired.
    for (const [key, row] of leases) if (!infos.has(key) && !row.gone) fade(row, now);
    sortLeases();
    tickLeases();
    $('lease-empty').hidden = [...leases.values()].some((r) => !r.gone || r.watched);
  };
  const holderText = (info) => {
    const h = info.holder;
    if (!h) return '—';
    if (typeof h === 'string') return h;
    return Object.entries(h).map(([k, v]) => k + '=' + v).join(' ');
  };
  const newLeaseRow = (key) => {
    const ttlTd = el('td', { class: 'num ttl', 'data-testid': 'lease-ttl' }, el('span', { text: '' }),
      el('div', { class: 'ttlbar' }, el('i')));
    const tr = el('tr', { class: 'lease-row fresh', 'data-testid': 'lease-row', 'data-key': key });
    const row = {
      tr, ttlTd, ttlMs: 0, at: 0, ttl0: 0, gone: false,
      fenceTd: el('td', { class: 'num fence', 'data-testid': 'lease-fence' }),
      holderTd: el('td', { class: 'mono' }),
      stateTd: el('td', { 'data-testid': 'lease-state' }),
    };
    const unwatch = el('button', {
      type: 'button', class: 'small', text: '×', title: 'stop watching',
      onclick: () => { view.keys = view.keys.filter((k) => k !== key); saveView(); row.tr.remove(); leases.delete(key); connect(); renderDiscover(); },
    });
    tr.append(el('td', { class: 'key', text: key }), row.holderTd, row.fenceTd, ttlTd, row.stateTd,
      el('td', {}, view.keys.includes(key) ? unwatch : null));
    setTimeout(() => tr.classList.remove('fresh'), 800);
    $('lease-rows').append(tr);
    return row;
  };
  // fade marks a lease that stopped being held: expired if its countdown
  // had run out (lost), released if it still had time left.
  const fade = (row, now) => {
    const left = row.ttlMs - (now - row.at);
    const expired = left <= refreshMs * 1.5;
    row.gone = true;
    row.stateTd.replaceChildren(el('span', { class: 'pill ' + (expired ? 'expired' : 'released'), text: expired ? 'expired (lost)' : 'released' }));
    row.ttlTd.firstChild.textContent = '—';
    row.tr.classList.add('gone');
    if (!row.watched) {
      setTimeout(() => {
        if (row.gone) { row.tr.remove(); if (leases.get(row.tr.dataset.key) === row) leases.delete(row.tr.dataset.key); }
        $('lease-empty').hidden = [...leases.values()].some((r) => !r.gone || r.watched);
      }, 6000);
    }
  };
  const sortLeases = () => {
    const body = $('lease-rows');
    const rows = [...body.children].sort((a, b) => a.dataset.key < b.dataset.key ? -1 : a.dataset.key > b.dataset.key ? 1 : 0);
    rows.forEach((r, i) => { if (body.children[i] !== r) body.insertBefore(r, body.children[i]); });
  };
  // The countdown runs between snapshots on the browser's monotonic clock.
  const tickLeases = () => {
    const now = performance.now();
    for (const row of leases.values()) {
      if (row.gone) continue;
      const left = Math.max(0, row.ttlMs - (now - row.at));
      row.ttlTd.firstChild.textContent = fmtMs(left);
      row.ttlTd.dataset.ms = String(Math.round(left));
      row.ttlTd.classList.toggle('low', left < row.ttl0 * 0.25);
      row.ttlTd.lastChild.firstChild.style.width = (row.ttl0 ? Math.min(100, 100 * left / row.ttl0) : 0) + '%';
    }
  };

  // ---- slots ----
  const renderSlots = (snap) => {
    const tl = $('timeline');
    const body = $('slot-rows');
    if (!snap.slots) { tl.replaceChildren(); body.replaceChildren(); note('slot-note', ''); return; }
    if (snap.slots.status !== 200) { note('slot-note', problemText(snap.slots), true); return; }
    const slots = snap.slots.body.slots || [];
    note('slot-note', slots.length ? '' : 'No slot of ' + view.job + ' in the last 24 hours.');
    tl.replaceChildren(...slots.map((s) => el('div', {
      class: 'slot ' + s.state, 'data-testid': 'slot',
      title: fmtTime(s.slot_time) + ' · ' + s.state + ' · ' + s.attempts + ' attempt(s)',
      style: { height: (12 + Math.min(4, s.attempts) * 6) + 'px' },
    })));
    body.replaceChildren(...slots.slice().reverse().map((s) => {
      const hist = s.history || [];
      const errTd = el('td', { class: 'err' }, s.error ? el('span', { class: 'error', text: s.error }) : null,
        s.retry_at ? el('div', { class: 'muted small', text: 'retry at ' + fmtTime(s.retry_at) }) : null,
        hist.length > 1 || (hist.length === 1 && s.attempts > 1)
          ? el('ol', { class: 'attempts', 'data-testid': 'attempts' }, ...hist.map((a) => el('li', { text: attemptText(a) })))
          : null);
      return el('tr', { 'data-testid': 'slot-row' },
        el('td', { class: 'mono time', text: fmtTime(s.slot_time) }),
        el('td', {}, el('span', { class: 'pill ' + s.state, text: s.state })),
        el('td', { class: 'num', text: String(s.attempts) }),
        el('td', { class: 'mono', text: s.node || '—' }),
        fenceTd(s.fence),
        el('td', { class: 'time', text: fmtTime(s.started) }),
        el('td', { class: 'time', text: fmtTime(s.finished) }),
        errTd);
    }));
  };
  // One attempt of a slot's history.
  const attemptText = (a) => [a.outcome, 'on ' + a.node, 'fence ' + fenceText(a.fence),
    a.started ? 'started ' + fmtTime(a.started) : '', a.finished ? 'ended ' + fmtTime(a.finished) : '',
    a.error ? '— ' + a.error : ''].filter(Boolean).join(' · ');

  // ---- sessions ----
  // Rows are kept by session ID: a refresh updates them in place, and a
  // button acts on the session it was made for, whatever moved around it.
  const sessionRows = new Map();
  let sessionCount = 0;
  const renderSessions = (snap) => {
    const body = $('session-rows');
    const empty = $('session-empty');
    const btn = $('revoke-user');
    if (!snap.sessions) { body.replaceChildren(); sessionRows.clear(); empty.hidden = true; btn.hidden = true; return; }
    if (snap.sessions.status !== 200) { note('session-note', problemText(snap.sessions), true); btn.hidden = true; return; }
    if ($('session-note').classList.contains('error')) note('session-note', '');
    const list = snap.sessions.body.sessions || [];
    const seen = new Set();
    const order = list.map((s) => {
      seen.add(s.id);
      let row = sessionRows.get(s.id);
      if (!row) { row = newSessionRow(s); sessionRows.set(s.id, row); }
      row.created.textContent = fmtTime(s.created);
      row.idle.textContent = fmtTime(s.idle_until);
      row.ends.textContent = fmtTime(s.absolute_until);
      row.version.textContent = String(s.version);
      return row.tr;
    });
    for (const [id, row] of sessionRows) if (!seen.has(id)) { row.tr.remove(); sessionRows.delete(id); }
    placeRows(body, order);
    sessionCount = list.length;
    empty.hidden = list.length > 0;
    empty.textContent = 'No live session of ' + view.user + '.';
    btn.hidden = list.length === 0;
    btn.textContent = 'Revoke all ' + list.length + ' session(s) of ' + view.user + '…';
  };
  // placeRows puts rows in order after the first skip children of parent
  // (a table's <thead>), moving only those out of place, and those with
  // moveBefore where the browser has it: a node moved otherwise loses
  // focus and selection.
  const placeRows = (parent, rows, skip = 0) => {
    rows.forEach((r, i) => {
      const at = parent.children[i + skip] || null;
      if (at === r) return;
      if (r.isConnected && parent.moveBefore) parent.moveBefore(r, at);
      else parent.insertBefore(r, at);
    });
  };
  const shortID = (s) => s.short || s.id.slice(0, 12);
  const newSessionRow = (s) => {
    const short = shortID(s);
    const user = s.user_id || view.user;
    const row = {
      created: el('td', { class: 'time' }), idle: el('td', { class: 'time' }), ends: el('td', { class: 'time' }),
      version: el('td', { class: 'num' }),
    };
    const copy = el('button', {
      type: 'button', class: 'small link', text: 'copy', title: 'copy the full session ID',
      onclick: async () => {
        try { await navigator.clipboard.writeText(s.id); copy.textContent = 'copied'; } catch { copy.textContent = 'select'; window.getSelection().selectAllChildren(idTd.firstChild); }
        setTimeout(() => { copy.textContent = 'copy'; }, 1500);
      },
    });
    const idTd = el('td', { class: 'mono sid' },
      el('code', { text: short, title: s.id, 'data-testid': 'session-short' }), ' ', copy);
    const revoke = el('button', {
      type: 'button', class: 'small danger', text: 'Revoke…', 'data-testid': 'revoke-session',
      onclick: async () => {
        // The target is this row's session, fixed now.
        const ok = await confirmAction({
          title: 'Revoke session ' + short + '?',
          fields: [['Session', short, 'session'], ['Full ID', s.id], ['User', user, 'user']],
          warn: 'The user of this session is logged out at once.',
          ok: 'Revoke session ' + short,
        });
        if (!ok) return;
        revoke.disabled = true;
        const r = await post('api/sessions/revoke', { id: s.id });
        if (r.ok || r.status === 404) note('session-note', 'Revoked session ' + short + ' of ' + user + '.');
        else { note('session-note', problemText(r), true); revoke.disabled = false; }
        connect();
        loadDiscover();
      },
    });
    row.tr = el('tr', { 'data-testid': 'session-row', 'data-id': s.id, 'data-short': short },
      idTd, row.created, row.idle, row.ends, row.version, el('td', {}, revoke));
    return row;
  };
  const revokeUser = async () => {
    const btn = $('revoke-user');
    // The user shown now, and how many sessions it had.
    const user = view.user;
    const n = sessionCount;
    const ok = await confirmAction({
      title: 'Revoke every session of ' + user + '?',
      fields: [['User', user, 'user'], ['Live sessions', String(n), 'count']],
      warn: 'Every session of this user ends at once, those made since this list was read included.',
      ok: 'Revoke all sessions of ' + user,
    });
    if (!ok) return;
    btn.disabled = true;
    const r = await post('api/sessions/revoke-user', { user_id: user });
    btn.disabled = false;
    if (r.ok) note('session-note', 'Revoked ' + r.body.removed + ' session(s) of ' + user + '.');
    else note('session-note', problemText(r), true);
    connect();
    loadDiscover();
  };

  // ---- rate limits ----
  const renderLimits = (snap) => {
    const body = $('limit-rows');
    if (!snap.limits) { body.replaceChildren(); return; }
    if (snap.limits.status !== 200) { note('limit-note', problemText(snap.limits), true); return; }
    const ds = snap.limits.body.decisions || [];
    body.replaceChildren(...ds.map((d, i) => {
      const l = view.limits[i] || {};
      const burst = d.limit.burst || d.limit.rate;
      const used = Math.max(0, burst - d.remaining);
      const pct = burst ? Math.min(100, 100 * used / burst) : 0;
      return el('tr', { 'data-testid': 'limit-row' },
        el('td', {}, el('div', { text: (d.limit.name || '(unnamed)') }),
          el('div', { class: 'muted small', text: d.algorithm + ' · ' + d.limit.rate + ' per ' + d.limit.period + (d.limit.burst ? ' · burst ' + d.limit.burst : '') })),
        el('td', { class: 'key', text: l.key || '' }),
        el('td', {}, el('span', { class: 'meter' + (d.allowed ? '' : ' full') }, el('i', { style: { width: pct + '%' } })),
          ' ', el('span', { class: 'pill ' + (d.allowed ? 'ok' : 'limited'), text: d.allowed ? 'allowed' : 'limited' })),
        el('td', { class: 'num', text: String(d.remaining) + ' / ' + burst }),
        el('td', { text: d.allowed ? fmtMs(durMs(d.reset_after)) : 'retry in ' + fmtMs(durMs(d.retry_after)) }),
        el('td', {}, el('button', {
          type: 'button', class: 'small', text: '×', title: 'stop watching',
          onclick: () => { view.limits.splice(i, 1); saveView(); connect(); },
        })));
    }));
  };
  const addLimit = async (e) => {
    e.preventDefault();
    let rr;
    const chosen = chosenLimit();
    if (chosen) {
      // A limit the server's configuration describes, exactly.
      rr = { key: $('lim-key').value.trim(), algorithm: chosen.algorithm,
        limit: { name: chosen.name, rate: chosen.rate, period: chosen.period, burst: chosen.burst } };
    } else {
      const lim = { name: $('lim-name').value.trim(), rate: parseInt($('lim-rate').value, 10) || 0, period: $('lim-period').value.trim() };
      const burst = parseInt($('lim-burst').value, 10);
      if (burst > 0) lim.burst = burst;
      rr = { key: $('lim-key').value.trim(), algorithm: $('lim-alg').value, limit: lim };
    }
    const r = await post('api/rate/peek', { requests: [rr] });
    if (!r.ok) { note('limit-note', problemText(r), true); return; }
    note('limit-note', '');
    if (view.limits.length >= 16) view.limits.shift();
    view.limits.push(rr);
    saveView();
    connect();
  };

  // ---- idempotency ----
  // Each record has its own <tbody> (its row, and the resolve form when
  // open), kept by scope and key: a refresh updates the cells in place and
  // never touches an open form, whose record (and fence) is the one it was
  // opened for.
  const idemRecs = new Map();
  const idemId = (r) => r.scope + '\u0000' + r.key;
  const renderIdem = (snap) => {
    const p = snap.idempotency;
    if (!p) return;
    if (p.status !== 200) { note('idem-note', problemText(p), true); return; }
    const recs = p.body.records || [];
    if (!p.body.admin) {
      note('idem-note', 'This store does not list idempotency records for an operator, nor settle them.');
    }
    const seen = new Set();
    const order = recs.map((rec) => {
      const id = idemId(rec);
      seen.add(id);
      let r = idemRecs.get(id);
      if (!r) { r = newIdemRec(rec); idemRecs.set(id, r); }
      updateIdemRec(r, rec);
      return r.body;
    });
    for (const [id, r] of idemRecs) {
      if (seen.has(id)) continue;
      if (r.form) { r.gone = true; updateIdemForm(r); continue; } // kept until its form closes
      r.body.remove();
      idemRecs.delete(id);
    }
    // Records still listed, in the listing's order, then those kept for
    // their open form.
    for (const r of idemRecs.values()) if (r.gone) order.push(r.body);
    placeRows($('idem-table'), order, 1);
    $('idem-empty').hidden = idemRecs.size > 0 || !p.body.admin;
  };
  const newIdemRec = (rec) => {
    const r = { rec, pinned: null, form: null, gone: false, cells: {} };
    const c = r.cells;
    c.state = el('td', {});
    c.fence = el('td', { class: 'num fence', 'data-testid': 'idem-fence' });
    c.claim = el('td', { class: 'ttl' });
    c.expires = el('td', {});
    c.resolve = el('button', {
      type: 'button', class: 'small', 'data-testid': 'idem-resolve-open',
      title: 'record a result: later requests with the key replay it',
      onclick: () => (r.form ? closeIdemForm(r) : openIdemForm(r)),
    });
    c.release = el('button', {
      type: 'button', class: 'small danger', 'data-testid': 'idem-release',
      title: 'drop the claim: the next request with the key runs again',
      onclick: () => releaseIdem(r),
    });
    r.tr = el('tr', { 'data-testid': 'idem-row', 'data-scope': rec.scope, 'data-key': rec.key },
      el('td', { class: 'key', text: rec.scope }), el('td', { class: 'key', text: rec.key }),
      c.state, c.fence, c.claim, c.expires, el('td', { class: 'acts' }, c.resolve, ' ', c.release));
    r.body = el('tbody', { class: 'idem-rec', 'data-id': idemId(rec) }, r.tr);
    return r;
  };
  const updateIdemRec = (r, rec) => {
    r.rec = rec;
    r.gone = false;
    const c = r.cells;
    const inProgress = rec.state === 'in-progress';
    if (c.state.dataset.state !== rec.state) {
      c.state.dataset.state = rec.state;
      c.state.replaceChildren(el('span', { class: 'pill ' + rec.state, text: rec.state }));
    }
    setFence(c.fence, rec.fence);
    c.claim.textContent = rec.claim_ttl ? fmtMs(durMs(rec.claim_ttl)) : 'expired';
    c.expires.textContent = fmtMs(durMs(rec.expires));
    c.resolve.disabled = !me.operations.completeIdempotency;
    c.release.disabled = !me.operations.releaseIdempotency;
    if (!r.form) c.resolve.textContent = (inProgress ? 'Force resolve' : 'Resolve') + '…';
    c.release.textContent = (inProgress ? 'Force release' : 'Release') + '…';
    if (r.form) updateIdemForm(r);
  };
  // The resolve form: the result (text, sent as its UTF-8 bytes), and the
  // choice to record an empty one.
  const openIdemForm = (r) => {
    r.pinned = Object.assign({}, r.rec);
    const f = {};
    f.value = el('textarea', { rows: '3', placeholder: 'the result later requests with this key replay', spellcheck: 'false', 'data-testid': 'idem-value' });
    f.empty = el('input', { type: 'checkbox', 'data-testid': 'idem-allow-empty' });
    f.count = el('span', { class: 'muted small', 'data-testid': 'idem-bytes', text: '0 bytes' });
    f.note = el('p', { class: 'note', hidden: true, 'data-testid': 'idem-form-note' });
    f.record = el('button', { type: 'button', class: 'small solid', text: 'Review and record…', 'data-testid': 'idem-resolve',
      onclick: () => resolveIdem(r) });
    const edited = () => {
      f.count.textContent = utf8.encode(f.value.value).length + ' bytes';
      if (f.note.dataset.kind === 'empty') { formNote(f, ''); f.note.dataset.kind = ''; }
    };
    f.value.addEventListener('input', edited);
    f.empty.addEventListener('change', edited);
    const p = r.pinned;
    f.tr = el('tr', { class: 'idem-form', 'data-testid': 'idem-form' }, el('td', { colspan: '7' }, el('div', { class: 'formbox' },
      el('div', { class: 'muted small', text: 'Result for ' + p.scope + ' / ' + p.key + ' (fence ' + fenceText(p.fence) + ', ' + p.state + ')' }),
      f.value,
      el('div', { class: 'bar wrap' }, f.count,
        el('label', { title: 'every later request with this key replays an empty answer' }, f.empty, 'record an empty result'),
        f.record,
        el('button', { type: 'button', class: 'small', text: 'Cancel', onclick: () => closeIdemForm(r) })),
      f.note)));
    r.form = f;
    r.cells.resolve.textContent = 'Close form';
    r.body.append(f.tr);
    updateIdemForm(r);
    f.value.focus();
  };
  const closeIdemForm = (r) => {
    if (!r.form) return;
    r.form.tr.remove();
    r.form = null;
    r.pinned = null;
    if (r.gone) { r.body.remove(); idemRecs.delete(idemId(r.rec)); return; }
    r.cells.resolve.textContent = (r.rec.state === 'in-progress' ? 'Force resolve' : 'Resolve') + '…';
  };
  const formNote = (f, text, isError) => {
    f.note.hidden = !text;
    f.note.textContent = text || '';
    f.note.classList.toggle('error', !!isError);
  };
  // updateIdemForm says when the record changed or left the list since
  // the form opened: the form keeps the record it was opened for.
  const updateIdemForm = (r) => {
    const f = r.form;
    if (!f || f.busy) return;
    const p = r.pinned;
    const kind = f.note.dataset.kind || '';
    if (r.gone) {
      formNote(f, 'This record is no longer listed: it was settled or forgotten since this form opened.', true);
      f.note.dataset.kind = 'gone';
      f.record.disabled = true;
    } else if (r.rec.fence !== p.fence || r.rec.state !== p.state) {
      formNote(f, 'The record changed since this form opened (fence ' + fenceText(p.fence) + ' → ' + fenceText(r.rec.fence) +
        ', ' + p.state + ' → ' + r.rec.state + '): recording now is refused. Close the form and open it again to settle the record as it is now.', true);
      f.note.dataset.kind = 'changed';
      f.record.disabled = false;
    } else if (kind === 'gone' || kind === 'changed') {
      formNote(f, '');
      f.note.dataset.kind = '';
      f.record.disabled = false;
    }
  };
  const resolveIdem = async (r) => {
    const f = r.form;
    const p = r.pinned;
    const text = f.value.value;
    const bytes = utf8.encode(text);
    const allowEmpty = f.empty.checked;
    if (bytes.length === 0 && !allowEmpty) {
      formNote(f, 'The result is empty: type the result to record, or tick "record an empty result" if an empty answer is what every retry should get.', true);
      f.note.dataset.kind = 'empty';
      f.value.focus();
      return;
    }
    const preview = bytes.length === 0 ? '(empty)' : text.length > 400 ? text.slice(0, 400) + '…' : text;
    const ok = await confirmAction({
      title: 'Record this result?',
      fields: [['Record', p.scope + ' / ' + p.key, 'record'], ['Fence', fenceText(p.fence)],
        ['State', p.state + ' → completed', 'state'], ['Result', bytes.length + ' bytes' + (bytes.length ? ' of text' : ' (an empty result)'), 'bytes']],
      preview,
      warn: (bytes.length === 0 ? 'An EMPTY result: every later request with this key replays an empty answer. ' : 'Every later request with this key replays exactly this result. ') +
        (p.state === 'in-progress' ? 'The record is in progress: its holder\'s claim is overridden.' : ''),
      ok: bytes.length === 0 ? 'Record an empty result' : 'Record ' + bytes.length + ' bytes',
    });
    if (!ok || r.form !== f) return;
    f.busy = true;
    f.record.disabled = true;
    const body = { scope: p.scope, key: p.key, fence: p.fence, force: p.state === 'in-progress', outcome: { value: b64(bytes) } };
    if (bytes.length === 0) body.allow_empty = true;
    const res = await post('api/idempotency/resolve', body);
    f.busy = false;
    f.record.disabled = false;
    if (!res.ok) { formNote(f, problemText(res), true); return; }
    note('idem-note', 'Recorded ' + bytes.length + ' bytes for ' + p.scope + ' / ' + p.key + '.');
    closeIdemForm(r);
    connect();
  };
  const releaseIdem = async (r) => {
    // The record as listed when the button was clicked.
    const p = Object.assign({}, r.rec);
    const inProgress = p.state === 'in-progress';
    const ok = await confirmAction({
      title: (inProgress ? 'Force release ' : 'Release ') + p.scope + ' / ' + p.key + '?',
      fields: [['Record', p.scope + ' / ' + p.key, 'record'], ['Fence', fenceText(p.fence)], ['State', p.state, 'state']],
      warn: 'The claim is dropped: the next request with this key runs the work again.' + (inProgress ? ' The record is in progress: its holder\'s claim is overridden.' : ''),
      ok: inProgress ? 'Force release' : 'Release',
    });
    if (!ok) return;
    r.cells.release.disabled = true;
    const res = await post('api/idempotency/release', { scope: p.scope, key: p.key, fence: p.fence, force: inProgress });
    r.cells.release.disabled = false;
    if (!res.ok) note('idem-note', problemText(res), true);
    else note('idem-note', 'Released ' + p.scope + ' / ' + p.key + '.');
    connect();
  };

  // ---- elections ----
  // Who leads each election (the leases election/NAME), as the store said.
  const renderElections = (snap) => {
    const p = snap.elections;
    if (!p) return;
    if (p.status !== 200) {
      note('election-note', p.status === 501 ? 'This store does not list its leases.' : problemText(p), p.status !== 501);
      return;
    }
    // The server reads a bounded number of election records and keeps
    // the led ones; next names where it stopped.
    const more = !!p.body.next;
    note('election-note', more ? 'Only the first 2,000 election records were read: the elections led among them are shown. `tenure election list` lists them all.' : '');
    const rows = [];
    for (const i of p.body.leases || []) {
      if (!i.held) continue;
      rows.push(el('tr', { class: 'election-row', 'data-testid': 'election-row', 'data-name': i.key.slice('election/'.length) },
        el('td', { class: 'key', text: i.key.slice('election/'.length) }),
        el('td', { class: 'mono', 'data-testid': 'election-leader', text: holderText(i) }),
        fenceTd(i.fence, { 'data-testid': 'election-fence' }),
        el('td', { class: 'num', text: (durMs(i.ttl) / 1000).toFixed(1) + 's' })));
    }
    $('election-rows').replaceChildren(...rows);
    $('election-empty').hidden = rows.length > 0 || more;
  };

  // ---- discovery ----
  // What the forms can offer (api/discover): jobs, users with live
  // sessions, the configured limits, elections. Read when the page starts,
  // after a revoke, and with the ↻ buttons; the server bounds each list
  // and keeps it to the token's namespaces.
  let disc = null;
  const loadDiscover = async () => {
    let r;
    try { r = await fetch(base + 'api/discover', { credentials: 'same-origin' }); } catch { return; }
    if (r.status === 401) { location.reload(); return; }
    if (!r.ok) return;
    disc = await r.json();
    renderDiscover();
  };
  const limitText = (l) => l.algorithm + ' · ' + l.rate + ' per ' + fmtDur(l.period) + (l.burst && l.burst !== l.rate ? ' · burst ' + l.burst : '');
  // Go durations as the server writes them ("1m0s") without their zero parts.
  const fmtDur = (d) => String(d).replace(/(\D)0s$/, '$1').replace(/(\D)0m$/, '$1') || d;
  const chipBar = (id, what, none, list, chip) => {
    const bar = $(id);
    const kids = [];
    const items = (list && list.items) || [];
    if (items.length) kids.push(el('span', { class: 'what', text: what }), ...items.map(chip));
    else if (list && !list.note) kids.push(el('span', { class: 'what', text: none }));
    if (list && list.truncated) kids.push(el('span', { class: 'what', text: 'and more: type to search' }));
    if (list && list.note && !items.length) kids.push(el('span', { class: 'what', 'data-testid': 'discover-note', text: list.note }));
    if (kids.length && (items.length || none)) kids.push(el('button', { type: 'button', class: 'small link', text: '↻', title: 'read these choices again', 'data-testid': 'discover-refresh', onclick: loadDiscover }));
    bar.replaceChildren(...kids);
    bar.hidden = kids.length === 0;
  };
  const options = (id, values) => $(id).replaceChildren(...values.map(([v, label]) => el('option', { value: v, label })));
  const renderDiscover = () => {
    if (!disc) return;
    chipBar('user-chips', 'Users with live sessions:', 'No user has a live session.', disc.users, (u) => el('button', {
      type: 'button', class: 'chip' + (u.user_id === view.user ? ' on' : ''), 'data-testid': 'user-chip', 'data-user': u.user_id,
      title: u.sessions + ' live session(s)' + (u.newest ? ', newest ' + fmtTime(u.newest) : ''),
      onclick: () => { $('user').value = u.user_id; view.user = u.user_id; saveView(); connect(); renderDiscover(); },
    }, u.user_id, el('span', { class: 'n', text: String(u.sessions) })));
    options('user-options', disc.users.items.map((u) => [u.user_id, u.sessions + ' session(s)']));
    chipBar('job-chips', 'Jobs:', 'No job has run yet.', disc.jobs, (j) => el('button', {
      type: 'button', class: 'chip' + (j.job === view.job ? ' on' : ''), 'data-testid': 'job-chip', 'data-job': j.job,
      title: j.spec ? j.spec + (j.node ? ' (registered by ' + j.node + ')' : '') : 'no registered definition',
      onclick: () => { $('job').value = j.job; view.job = j.job; saveView(); connect(); renderDiscover(); },
    }, j.job));
    options('job-options', disc.jobs.items.map((j) => [j.job, j.spec || '']));
    chipBar('election-chips', 'Watch an election’s lease:', '', disc.elections, (x) => el('button', {
      type: 'button', class: 'chip' + (view.keys.includes(x.key) ? ' on' : ''), 'data-testid': 'election-chip', 'data-key': x.key,
      title: x.held ? 'led by ' + (x.leader || 'a holder without a description') : 'no leader now',
      onclick: () => watchKey(x.key),
    }, x.name));
    options('key-options', disc.elections.items.map((x) => [x.key, x.held ? 'election, led' : 'election']));
    // The configured limits: chosen from a list instead of typed.
    const sel = $('lim-choice');
    const was = sel.value;
    const lims = (disc.limits && disc.limits.items) || [];
    sel.replaceChildren(...lims.map((l) => el('option', { value: l.name, text: l.name + ' — ' + limitText(l) })),
      el('option', { value: '', text: 'enter by hand…' }));
    // The first configured limit, until the operator chose (a limit, or
    // entering one by hand).
    const keep = sel.dataset.chosen === '1' && (was === '' || lims.some((l) => l.name === was));
    sel.value = keep ? was : lims.length ? lims[0].name : '';
    $('lim-choice-label').hidden = lims.length === 0;
    limitChoice();
  };
  const chosenLimit = () => {
    const name = $('lim-choice').value;
    return name && disc ? (disc.limits.items || []).find((l) => l.name === name) : null;
  };
  // limitChoice shows the chosen limit, or the fields to enter one by hand.
  const limitChoice = () => {
    const l = chosenLimit();
    $('lim-manual').hidden = !!l;
    const sum = $('lim-summary');
    sum.hidden = !l;
    sum.textContent = l ? limitText(l) + (l.description ? ' — ' + l.description : '') : '';
  };
  const watchKey = (k) => {
    if (k && !view.keys.includes(k) && view.keys.length < 16) { view.keys.push(k); saveView(); connect(); }
    renderDiscover();
  };

  // ---- render ----
  let snapshots = 0;
  const render = (snap) => {
    const skew = (Date.parse(snap.now) - Date.now()) / 1000;
    $('clock').textContent = 'server ' + new Date(snap.now).toLocaleTimeString() + ' (' + (skew >= 0 ? '+' : '') + skew.toFixed(2) + 's)';
    renderLeases(snap);
    renderElections(snap);
    renderSlots(snap);
    renderSessions(snap);
    renderLimits(snap);
    renderIdem(snap);
    // How many snapshots the page has shown (for anyone who needs to know
    // that a refresh happened).
    document.body.dataset.snapshots = String(++snapshots);
  };

  // ---- wiring ----
  const start = async () => {
    const r = await fetch(base + 'api/me', { credentials: 'same-origin' });
    if (r.status === 401) { location.reload(); return; }
    me = await r.json();
    refreshMs = durMs(me.refresh) || 1000;
    $('who').textContent = me.token;
    $('version').textContent = me.version || '';
    $('lease-prefix').value = view.prefix;
    $('user').value = view.user;
    $('job').value = view.job;
    $('lease-form').addEventListener('submit', (e) => { e.preventDefault(); view.prefix = $('lease-prefix').value.trim(); saveView(); for (const row of leases.values()) row.tr.remove(); leases.clear(); connect(); });
    $('lease-watch-add').addEventListener('click', () => {
      watchKey($('lease-watch').value.trim());
      $('lease-watch').value = '';
    });
    $('lim-choice').addEventListener('change', () => { $('lim-choice').dataset.chosen = '1'; limitChoice(); });
    $('user-form').addEventListener('submit', (e) => { e.preventDefault(); view.user = $('user').value.trim(); saveView(); connect(); renderDiscover(); });
    $('job-form').addEventListener('submit', (e) => { e.preventDefault(); view.job = $('job').value.trim(); saveView(); connect(); renderDiscover(); });
    $('limit-form').addEventListener('submit', addLimit);
    $('revoke-user').addEventListener('click', revokeUser);
    $('pause').addEventListener('click', () => {
      paused = !paused;
      $('pause').textContent = paused ? 'Resume' : 'Pause';
      if (paused) { if (es) es.close(); setLive('paused', 'paused'); } else connect();
    });
    setInterval(tickLeases, 100);
    connect();
    loadDiscover();
  };
  start();
})();
