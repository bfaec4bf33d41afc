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
        row.fenceTd.textContent = String(info.fence);
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
        row.fenceTd.textContent = info.fence ? String(info.fence) : '—';
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
      fenceTd: el('td', { class: 'num', 'data-testid': 'lease-fence' }),
      holderTd: el('td', { class: 'mono' }),
      stateTd: el('td', { 'data-testid': 'lease-state' }),
    };
    const unwatch = el('button', {
      type: 'button', class: 'small', text: '×', title: 'stop watching',
      onclick: () => { view.keys = view.keys.filter((k) => k !== key); saveView(); row.tr.remove(); leases.delete(key); connect(); },
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
      const errTd = el('td', {}, s.error ? el('span', { class: 'error', text: s.error }) : null,
        s.retry_at ? el('div', { class: 'muted small', text: 'retry at ' + fmtTime(s.retry_at) }) : null,
        hist.length > 1 || (hist.length === 1 && s.attempts > 1)
          ? el('ol', { class: 'attempts', 'data-testid': 'attempts' }, ...hist.map((a) => el('li', { text: attemptText(a) })))
          : null);
      return el('tr', { 'data-testid': 'slot-row' },
        el('td', { class: 'mono time', text: fmtTime(s.slot_time) }),
        el('td', {}, el('span', { class: 'pill ' + s.state, text: s.state })),
        el('td', { class: 'num', text: String(s.attempts) }),
        el('td', { class: 'mono', text: s.node || '—' }),
        el('td', { class: 'num', text: s.fence ? String(s.fence) : '—' }),
        el('td', { class: 'time', text: fmtTime(s.started) }),
        el('td', { class: 'time', text: fmtTime(s.finished) }),
        errTd);
    }));
  };
  // One attempt of a slot's history.
  const attemptText = (a) => [a.outcome, 'on ' + a.node, 'fence ' + a.fence,
    a.started ? 'started ' + fmtTime(a.started) : '', a.finished ? 'ended ' + fmtTime(a.finished) : '',
    a.error ? '— ' + a.error : ''].filter(Boolean).join(' · ');

  // ---- sessions ----
  let revokeArmed = null;
  const renderSessions = (snap) => {
    const body = $('session-rows');
    const empty = $('session-empty');
    const btn = $('revoke-user');
    if (!snap.sessions) { body.replaceChildren(); empty.hidden = true; btn.hidden = true; return; }
    if (snap.sessions.status !== 200) { note('session-note', problemText(snap.sessions), true); btn.hidden = true; return; }
    note('session-note', '');
    const list = snap.sessions.body.sessions || [];
    body.replaceChildren(...list.map((s) => el('tr', { 'data-testid': 'session-row', 'data-id': s.id },
      el('td', { class: 'mono', text: s.id.slice(0, 12) + '…', title: 'session ID (the SHA-256 of its token; never the token)' }),
      el('td', { class: 'time', text: fmtTime(s.created) }),
      el('td', { class: 'time', text: fmtTime(s.idle_until) }),
      el('td', { class: 'time', text: fmtTime(s.absolute_until) }),
      el('td', { class: 'num', text: String(s.version) }),
      el('td', {}, el('button', {
        type: 'button', class: 'small danger', text: 'Revoke', 'data-testid': 'revoke-session',
        onclick: async (e) => {
          e.target.disabled = true;
          const r = await post('api/sessions/revoke', { id: s.id });
          if (!r.ok && r.status !== 404) note('session-note', problemText(r), true);
          connect();
        },
      })))));
    empty.hidden = list.length > 0;
    empty.textContent = 'No live session of ' + view.user + '.';
    btn.hidden = list.length === 0;
    if (!revokeArmed) btn.textContent = 'Revoke all ' + list.length + ' session(s) of ' + view.user;
  };
  const revokeUser = async () => {
    const btn = $('revoke-user');
    if (!revokeArmed) {
      btn.classList.add('confirm');
      btn.textContent = 'Click again to revoke every session of ' + view.user;
      revokeArmed = setTimeout(() => { revokeArmed = null; btn.classList.remove('confirm'); }, 5000);
      return;
    }
    clearTimeout(revokeArmed);
    revokeArmed = null;
    btn.classList.remove('confirm');
    btn.disabled = true;
    const r = await post('api/sessions/revoke-user', { user_id: view.user });
    btn.disabled = false;
    if (r.ok) note('session-note', 'Revoked ' + r.body.removed + ' session(s).');
    else note('session-note', problemText(r), true);
    connect();
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
    const lim = { name: $('lim-name').value.trim(), rate: parseInt($('lim-rate').value, 10) || 0, period: $('lim-period').value.trim() };
    const burst = parseInt($('lim-burst').value, 10);
    if (burst > 0) lim.burst = burst;
    const rr = { key: $('lim-key').value.trim(), algorithm: $('lim-alg').value, limit: lim };
    const r = await post('api/rate/peek', { requests: [rr] });
    if (!r.ok) { note('limit-note', problemText(r), true); return; }
    note('limit-note', '');
    if (view.limits.length >= 16) view.limits.shift();
    view.limits.push(rr);
    saveView();
    connect();
  };

  // ---- idempotency ----
  const renderIdem = (snap) => {
    const body = $('idem-rows');
    const p = snap.idempotency;
    if (!p) return;
    if (p.status !== 200) { note('idem-note', problemText(p), true); return; }
    const recs = p.body.records || [];
    if (!p.body.admin) {
      note('idem-note', 'This store does not list idempotency records for an operator, nor settle them.');
    } else if (!$('idem-note').classList.contains('error')) {
      note('idem-note', '');
    }
    const canResolve = me.operations.completeIdempotency;
    const canRelease = me.operations.releaseIdempotency;
    body.replaceChildren(...recs.map((rec) => {
      const value = el('input', { placeholder: 'result', class: 'short', title: 'the result to record (text)' });
      const settle = async (path, extra, btn) => {
        btn.disabled = true;
        const r = await post(path, Object.assign({ scope: rec.scope, key: rec.key, fence: rec.fence, force: rec.state === 'in-progress' }, extra));
        if (!r.ok) note('idem-note', problemText(r), true); else note('idem-note', '');
        connect();
      };
      const inProgress = rec.state === 'in-progress';
      return el('tr', { 'data-testid': 'idem-row' },
        el('td', { class: 'key', text: rec.scope }),
        el('td', { class: 'key', text: rec.key }),
        el('td', {}, el('span', { class: 'pill ' + rec.state, text: rec.state })),
        el('td', { class: 'num', text: String(rec.fence) }),
        el('td', { class: 'ttl', text: rec.claim_ttl ? fmtMs(durMs(rec.claim_ttl)) : 'expired' }),
        el('td', { text: fmtMs(durMs(rec.expires)) }),
        el('td', {}, value, ' ',
          el('button', {
            type: 'button', class: 'small', text: inProgress ? 'Force resolve' : 'Resolve', disabled: !canResolve,
            title: 'record this result: later requests with the key replay it',
            onclick: (e) => settle('api/idempotency/resolve', { outcome: { value: btoa(unescape(encodeURIComponent(value.value))) } }, e.target),
          }), ' ',
          el('button', {
            type: 'button', class: 'small danger', text: inProgress ? 'Force release' : 'Release', disabled: !canRelease,
            title: 'drop the claim: the next request with the key runs again',
            onclick: (e) => settle('api/idempotency/release', {}, e.target),
          })));
    }));
    $('idem-empty').hidden = recs.length > 0 || !p.body.admin;
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
    note('election-note', '');
    const rows = [];
    for (const i of p.body.leases || []) {
      if (!i.held) continue;
      rows.push(el('tr', { class: 'election-row', 'data-testid': 'election-row', 'data-name': i.key.slice('election/'.length) },
        el('td', { class: 'key', text: i.key.slice('election/'.length) }),
        el('td', { class: 'mono', 'data-testid': 'election-leader', text: holderText(i) }),
        el('td', { class: 'num', 'data-testid': 'election-fence', text: String(i.fence) }),
        el('td', { class: 'num', text: (durMs(i.ttl) / 1000).toFixed(1) + 's' })));
    }
    $('election-rows').replaceChildren(...rows);
    $('election-empty').hidden = rows.length > 0;
  };

  // ---- render ----
  const render = (snap) => {
    const skew = (Date.parse(snap.now) - Date.now()) / 1000;
    $('clock').textContent = 'server ' + new Date(snap.now).toLocaleTimeString() + ' (' + (skew >= 0 ? '+' : '') + skew.toFixed(2) + 's)';
    renderLeases(snap);
    renderElections(snap);
    renderSlots(snap);
    renderSessions(snap);
    renderLimits(snap);
    renderIdem(snap);
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
      const k = $('lease-watch').value.trim();
      if (k && !view.keys.includes(k) && view.keys.length < 16) { view.keys.push(k); saveView(); connect(); }
      $('lease-watch').value = '';
    });
    $('user-form').addEventListener('submit', (e) => { e.preventDefault(); view.user = $('user').value.trim(); saveView(); connect(); });
    $('job-form').addEventListener('submit', (e) => { e.preventDefault(); view.job = $('job').value.trim(); saveView(); connect(); });
    $('limit-form').addEventListener('submit', addLimit);
    $('revoke-user').addEventListener('click', revokeUser);
    $('pause').addEventListener('click', () => {
      paused = !paused;
      $('pause').textContent = paused ? 'Resume' : 'Pause';
      if (paused) { if (es) es.close(); setLive('paused', 'paused'); } else connect();
    });
    setInterval(tickLeases, 100);
    connect();
  };
  start();
})();
