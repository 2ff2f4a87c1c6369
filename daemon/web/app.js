// gslice dashboard: polls gsliced's API every second and draws GPUs, slices, processes
// and projects, with charts of memory and compute over time (canvas, no library). Its
// actions (create, change, suspend, resume, delete) call the same API as the CLI, with the
// caller's token: gsliced decides who may do what, and its messages are shown as they come.
// A slice's page (#slice=NAME) shows the slice and its latest trace as a timeline
// (timeline.js).
'use strict';

const POLL_MS = 1000;
const WINDOW_MS = 10 * 60 * 1000;  // charts keep at most the last ten minutes
const MIN_WINDOW_MS = 60 * 1000;    // and grow to it minute by minute from one
const PALETTE = ['#5fb3f9', '#4cc38a', '#e7b54a', '#ef6b6b', '#b59cff', '#3fd0c9', '#f28fc0',
                 '#a3d65c', '#f0a35e', '#8ea8ff'];

const state = {
  token: null,
  history: [],       // [{time_ms, gpus: {uuid: {...}}, slices: {name: {...}}}]
  lastSample: 0,
  node: null,
  colors: new Map(), // slice name -> color
  gpuKey: '',
  slice: null,       // the slice whose page is open, or null: the node
  timeline: null,    // GsliceTimeline.Timeline on the slice page
  traceOf: null,     // the slice whose trace the timeline shows (or tried to)
};

// ---- API -------------------------------------------------------------------------------

// The address's fragment as parameters: "#token=…&slice=train" (decoded as URI components,
// so a token keeps its "+").
function hashParams() {
  const params = new Map();
  for (const part of location.hash.replace(/^#/, '').split('&')) {
    const eq = part.indexOf('=');
    if (eq > 0) {
      try { params.set(part.slice(0, eq), decodeURIComponent(part.slice(eq + 1))); } catch (e) { /* malformed */ }
    }
  }
  return params;
}

function loadToken() {
  const params = hashParams();
  if (params.has('token')) {
    sessionStorage.setItem('gslice-token', params.get('token'));
    params.delete('token');
    const rest = [...params].map(([k, v]) => k + '=' + encodeURIComponent(v)).join('&');
    history.replaceState(null, '', location.pathname + (rest ? '#' + rest : ''));
  }
  state.token = sessionStorage.getItem('gslice-token');
}

async function api(path) {
  const headers = {};
  if (state.token) headers['Authorization'] = 'Bearer ' + state.token;
  const res = await fetch(path, {headers, cache: 'no-store'});
  if (res.status === 401) {
    const err = new Error('token needed');
    err.unauthorized = true;
    throw err;
  }
  if (!res.ok) throw new Error(path + ': HTTP ' + res.status);
  return res.json();
}

// Calls the API to change something; resolves to {ok, status, json}. gsliced's refusal
// ("error") is what the person sees, word for word as `gslice` prints it.
async function act(method, path, body) {
  const headers = {'Content-Type': 'application/json'};
  if (state.token) headers['Authorization'] = 'Bearer ' + state.token;
  const res = await fetch(path, {method, headers, cache: 'no-store', body: body === undefined ? undefined : JSON.stringify(body)});
  let json = {};
  try { json = await res.json(); } catch (e) { /* no body */ }
  return {ok: res.ok, status: res.status, json};
}

function showMessage(ok, text) {
  const m = document.getElementById('action-message');
  m.textContent = text;
  m.className = 'message ' + (ok ? 'ok' : 'error');
}

// Runs one action and reports it; the next poll shows its effect.
async function runAction(what, method, path, body) {
  try {
    const r = await act(method, path, body);
    if (r.ok) {
      showMessage(true, what + ': done' + (r.json.note ? ' · ' + r.json.note : ''));
    } else {
      showMessage(false, what + ': ' + (r.json.error || 'HTTP ' + r.status));
    }
    return r;
  } catch (e) {
    showMessage(false, what + ': gsliced not reachable (' + e.message + ')');
    return {ok: false};
  }
}

// A percentage field: "" stays unchanged (undefined), "none" or "0" is 0, "30%" stays text.
function percentField(value) {
  const v = value.trim();
  if (v === '') return undefined;
  return v === 'none' ? 0 : v;
}

async function onCreate(ev) {
  ev.preventDefault();
  const f = ev.target.elements;
  const gpu = {gpu: f.gpu.value, memory: f.memory.value.trim()};
  const share = percentField(f.compute.value);
  if (share !== undefined) gpu.compute = share;
  const body = {class: f.class.value, gpus: [gpu]};
  if (f.name.value.trim()) body.name = f.name.value.trim();
  if (f.user.value.trim()) body.user = f.user.value.trim();  // another owner: admins only
  const r = await runAction('create ' + (body.name || 'slice'), 'POST', '/v1/slices', body);
  if (r.ok) { f.name.value = ''; f.memory.value = ''; f.compute.value = ''; }
}

function openResize(name) {
  const dialog = document.getElementById('resize-dialog');
  const form = document.getElementById('resize-form');
  form.reset();
  form.dataset.slice = name;
  document.getElementById('resize-name').textContent = name;
  dialog.showModal();
}

async function onResize(ev) {
  const form = ev.target;
  const dialog = document.getElementById('resize-dialog');
  if (ev.submitter && ev.submitter.value === 'cancel') return;  // the dialog closes itself
  ev.preventDefault();
  const f = form.elements;
  const body = {};
  const memory = f.memory.value.trim();
  if (memory) body.memory = memory.includes(',') ? memory.split(',').map((m) => m.trim()) : memory;
  for (const field of ['compute_cap', 'compute_share']) {
    const v = percentField(f[field].value);
    if (v !== undefined) body[field] = v;
  }
  if (f.class.value) body.class = f.class.value;
  if (f.make_room.checked) body.make_room = true;
  const name = form.dataset.slice;
  const r = await runAction('change ' + name, 'PATCH', '/v1/slices/' + encodeURIComponent(name), body);
  if (r.ok) dialog.close();
}

async function onSliceAction(ev) {
  const button = ev.target.closest('button[data-action]');
  if (!button) return;
  const name = button.closest('tr').dataset.slice;
  const action = button.dataset.action;
  const path = '/v1/slices/' + encodeURIComponent(name);
  if (action === 'resize') {
    openResize(name);
  } else if (action === 'delete') {
    if (!confirm('Delete slice ' + name + '? Its processes keep running with the limits they have until they exit.')) return;
    await runAction('delete ' + name, 'DELETE', path);
  } else {
    await runAction(action + ' ' + name, 'POST', path + '/' + action);
  }
}

// ---- formatting ------------------------------------------------------------------------

function fmtBytes(n) {
  if (n === null || n === undefined) return '-';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  const digits = v >= 100 || i === 0 || Number.isInteger(v) ? 0 : 1;
  return v.toFixed(digits) + ' ' + units[i];
}

function fmtPct(r) {
  if (r === null || r === undefined) return '-';
  const p = r * 100;
  return (Math.abs(p - Math.round(p)) < 0.05 ? p.toFixed(0) : p.toFixed(1)) + '%';
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

function colorOf(name) {
  if (!state.colors.has(name)) state.colors.set(name, PALETTE[state.colors.size % PALETTE.length]);
  return state.colors.get(name);
}

function bar(used, total, reserved) {
  const b = el('div', {class: 'bar'});
  const fill = el('div', {class: 'fill'});
  fill.style.width = (total > 0 ? Math.min(100, 100 * used / total) : 0) + '%';
  b.append(fill);
  if (reserved !== undefined && total > 0) {
    const r = el('div', {class: 'reserved'});
    r.style.width = Math.min(100, 100 * reserved / total) + '%';
    b.append(r);
  }
  return b;
}

// ---- charts ----------------------------------------------------------------------------

// series: [{label, color, points: [[t, v]], fill}]; opts: {yMax, fmt, now}
function drawChart(canvas, series, opts) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight;
  if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
  }
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  const left = 64, right = 10, top = 8, bottom = 20;
  const pw = w - left - right, ph = h - top - bottom;
  const now = opts.now;
  const span = state.history.length ? now - state.history[0].time_ms : 0;
  const windowMs = Math.min(WINDOW_MS, Math.max(MIN_WINDOW_MS, Math.ceil(span / 60000) * 60000));
  const t0 = now - windowMs;
  let yMax = opts.yMax || 0;
  for (const s of series) for (const [, v] of s.points) if (v > yMax) yMax = v;
  if (!(yMax > 0)) yMax = 1;
  const x = (t) => left + pw * (t - t0) / windowMs;
  const y = (v) => top + ph * (1 - v / yMax);

  ctx.font = '11px system-ui, sans-serif';
  ctx.strokeStyle = '#263240';
  ctx.fillStyle = '#7d8b99';
  ctx.lineWidth = 1;
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  for (let i = 0; i <= 4; i++) {
    const v = yMax * i / 4;
    const yy = Math.round(y(v)) + 0.5;
    ctx.beginPath(); ctx.moveTo(left, yy); ctx.lineTo(left + pw, yy); ctx.stroke();
    ctx.fillText(opts.fmt(v), left - 6, yy);
  }
  ctx.textAlign = 'center';
  ctx.textBaseline = 'top';
  for (let i = 0; i <= 4; i++) {
    const ago = windowMs * i / 4;
    const label = i === 0 ? 'now' : ago >= 60000 ? '-' + +(ago / 60000).toFixed(1) + 'm' : '-' + ago / 1000 + 's';
    ctx.fillText(label, Math.max(left + 12, Math.min(left + pw - 12, x(now - ago))), top + ph + 5);
  }
  for (const s of series) {
    const pts = s.points.filter(([t]) => t >= t0);
    if (pts.length === 0) continue;
    ctx.strokeStyle = s.color;
    ctx.lineWidth = 2;
    ctx.beginPath();
    pts.forEach(([t, v], i) => (i ? ctx.lineTo(x(t), y(v)) : ctx.moveTo(x(t), y(v))));
    ctx.stroke();
    if (s.fill) {
      ctx.lineTo(x(pts[pts.length - 1][0]), y(0));
      ctx.lineTo(x(pts[0][0]), y(0));
      ctx.closePath();
      ctx.globalAlpha = 0.15;
      ctx.fillStyle = s.color;
      ctx.fill();
      ctx.globalAlpha = 1;
    }
  }
}

function legend(container, items) {
  container.replaceChildren(...items.map(({label, color}) => {
    const sw = el('span', {class: 'swatch'});
    sw.style.background = color;
    return el('span', {}, sw, label);
  }));
}

// ---- rendering -------------------------------------------------------------------------

// How a GPU is shared: MPS (for which uid) or time-sliced, the reason on hover.
function sharingStat(sharing) {
  if (!sharing) return el('span', {});
  const mps = sharing.substrate === 'mps';
  const cls = sharing.mps_class && sharing.mps_class !== 'any' ? ', ' + sharing.mps_class : '';
  const text = !mps ? 'time-sliced' : sharing.mps_uid === null ? 'MPS (free)' : 'MPS (uid ' + sharing.mps_uid + cls + ')';
  const why = sharing.why + (mps && sharing.mps_uid_why ? '; ' + sharing.mps_uid_why : '');
  return el('span', {class: 'sharing', title: why}, 'sharing ', el('b', {text: text}));
}

function renderGpus(node) {
  const box = document.getElementById('gpus');
  const key = node.gpus.map((g) => g.uuid).join(',');
  if (key !== state.gpuKey) {
    state.gpuKey = key;
    box.replaceChildren(...node.gpus.map((g) => {
      const card = el('div', {class: 'card gpu', 'data-uuid': g.uuid});
      card.append(
          el('div', {class: 'gpu-head'},
             el('span', {class: 'name', text: 'GPU ' + g.index + ' · ' + g.name}),
             el('span', {class: 'uuid', text: g.uuid})),
          el('div', {class: 'stats'}),
          el('canvas', {class: 'chart', 'data-unit': 'bytes'}),
          el('div', {class: 'legend'}));
      return card;
    }));
  }
  for (const g of node.gpus) {
    const card = box.querySelector('[data-uuid="' + CSS.escape(g.uuid) + '"]');
    const stats = card.querySelector('.stats');
    stats.replaceChildren(
        el('span', {}, 'memory ', el('b', {text: fmtBytes(g.memory_used_bytes) + ' / ' + fmtBytes(g.memory_total_bytes)})),
        el('span', {}, 'guaranteed ', el('b', {text: fmtBytes(g.guaranteed_memory_bytes) + ', ' + fmtPct(g.guaranteed_compute)})),
        el('span', {}, 'utilisation ', el('b', {text: fmtPct(g.utilization)})),
        el('span', {}, 'slices ', el('b', {text: String(g.slices)})),
        sharingStat(g.sharing));
    const memPoints = [], slicePoints = [], utilPoints = [];
    for (const s of state.history) {
      const p = s.gpus[g.uuid];
      if (!p) continue;
      memPoints.push([s.time_ms, p.memory_used_bytes]);
      slicePoints.push([s.time_ms, p.slices_memory_used_bytes]);
      if (p.utilization !== null) utilPoints.push([s.time_ms, p.utilization * g.memory_total_bytes]);
    }
    const series = [
      {label: 'memory used (driver)', color: '#5fb3f9', points: memPoints, fill: true},
      {label: 'held by slices', color: '#b59cff', points: slicePoints, fill: true},
      {label: 'utilisation (0–100% of the axis)', color: '#4cc38a', points: utilPoints},
    ];
    drawChart(card.querySelector('canvas'), series,
              {yMax: g.memory_total_bytes, fmt: fmtBytes, now: node.time_ms});
    legend(card.querySelector('.legend'), series);
  }
}

function renderSliceCharts(node) {
  const names = node.slices.map((s) => s.name);
  const mem = [], comp = [];
  for (const name of names) {
    const color = colorOf(name);
    const m = [], c = [];
    for (const s of state.history) {
      const p = s.slices[name];
      if (!p) continue;
      m.push([s.time_ms, p.memory_used_bytes]);
      if (p.compute_used !== null) c.push([s.time_ms, p.compute_used]);
    }
    mem.push({label: name, color, points: m});
    comp.push({label: name, color, points: c});
  }
  const maxLimit = Math.max(0, ...node.slices.map((s) => s.memory_limit_bytes));
  drawChart(document.getElementById('slice-memory-chart'), mem,
            {yMax: maxLimit, fmt: fmtBytes, now: node.time_ms});
  drawChart(document.getElementById('slice-compute-chart'), comp,
            {yMax: 1, fmt: fmtPct, now: node.time_ms});
  legend(document.getElementById('slice-memory-legend'), mem);
  legend(document.getElementById('slice-compute-legend'), comp);
}

function renderGpuChoices(node) {
  const select = document.getElementById('create-gpu');
  const key = node.gpus.map((g) => g.uuid).join(',');
  if (select.dataset.key === key) return;  // keep the person's choice
  select.dataset.key = key;
  select.replaceChildren(...node.gpus.map((g) => el('option', {value: String(g.index), text: g.index + ' · ' + g.name + ' · ' + fmtBytes(g.memory_total_bytes)})));
}

function renderTables(node) {
  renderGpuChoices(node);
  const gpuIndex = new Map(node.gpus.map((g) => [g.uuid, g.index]));
  const body = document.querySelector('#slices tbody');
  body.replaceChildren(...node.slices.map((s) => {
    const share = s.gpus.map((g) => (g.compute_share > 0 ? fmtPct(g.compute_share) : '-')).join(', ');
    const sw = el('span', {class: 'swatch'});
    sw.style.background = colorOf(s.name);
    const memCell = el('td', {class: 'wide'}, bar(s.memory_used_bytes, s.memory_limit_bytes),
                       el('div', {class: 'bar-label', text: fmtBytes(s.memory_used_bytes) + ' / ' + fmtBytes(s.memory_limit_bytes)}));
    const activity = s.activity || s.state;
    const stateCell = el('td', {}, el('span', {class: 'badge ' + activity, text: activity}));
    if (s.last_error) stateCell.title = s.last_error;
    const row = el('tr', {'data-slice': s.name},
        el('td', {}, el('a', {class: 'slice-link', href: '#slice=' + encodeURIComponent(s.name),
                              title: 'its page: details and timeline'}, el('b', {text: s.name})),
           // A remote slice (a gslice-remoted worker): its client, and whether it holds the GPU.
           ...(s.remote ? [' ', el('span', {class: 'badge remote', text: 'remote · ' + s.remote.state,
                                            title: 'client ' + s.remote.client})] : [])),
        el('td', {text: s.user}), el('td', {text: s.project}),
        el('td', {class: 'class-' + s.class, text: s.class,
                  // Guaranteed: the share of its solo speed opportunistic work must leave it.
                  title: s.protect == null ? '' : 'protected at ' + fmtPct(s.protect) + ' of its solo speed'}),
        stateCell,
        // Each GPU, marked where the slice uses its MPS server; why on hover.
        el('td', {text: s.gpus.map((g) => (gpuIndex.has(g.uuid) ? gpuIndex.get(g.uuid) : g.uuid) +
                                          (g.sharing === 'mps' ? ' · MPS' : '')).join(', '),
                  title: s.gpus.map((g) => g.sharing_why || '').filter((w) => w).join('\n')}),
        memCell, el('td', {text: (s.compute_used === null ? '-' : fmtPct(s.compute_used)) + ' / ' + share}),
        el('td', {text: String(s.processes.length)}),
        el('td', {class: 'actions'},
           el('button', {type: 'button', 'data-action': 'resize', text: 'Change'}),
           s.state === 'suspended'
               ? el('button', {type: 'button', 'data-action': 'resume', text: 'Resume'})
               : el('button', {type: 'button', 'data-action': 'suspend', text: 'Suspend'}),
           el('button', {type: 'button', 'data-action': 'delete', text: 'Delete'})));
    return row;
  }));
  document.getElementById('no-slices').classList.toggle('hidden', node.slices.length > 0);
  document.getElementById('slice-count').textContent = '(' + node.slices.length + ')';

  const procs = [];
  for (const s of node.slices) for (const p of s.processes) procs.push([p, s]);
  document.querySelector('#processes tbody').replaceChildren(...procs.map(([p, s]) => el('tr', {},
      el('td', {text: String(p.pid)}), el('td', {text: s.name}),
      el('td', {text: gpuIndex.has(p.gpu) ? 'GPU ' + gpuIndex.get(p.gpu) : (p.gpu || '-')}),
      el('td', {text: fmtBytes(p.memory_used_bytes)}))));
  document.getElementById('no-processes').classList.toggle('hidden', procs.length > 0);

  document.querySelector('#projects tbody').replaceChildren(...node.projects.map((p) => el('tr', {},
      el('td', {}, el('b', {text: p.name})), el('td', {text: String(p.priority)}),
      el('td', {text: fmtBytes(p.guaranteed_memory_bytes) + ' / ' + (p.memory_quota_bytes ? fmtBytes(p.memory_quota_bytes) : 'no quota')}),
      el('td', {text: p.guaranteed_compute.toFixed(2) + ' / ' + (p.compute_quota ? p.compute_quota.toFixed(2) + ' GPUs' : 'no quota')}),
      el('td', {text: String(p.slices)}))));
  document.getElementById('ledger').textContent = node.ledger;
}

// ---- a slice's page -----------------------------------------------------------------

function route() {
  const name = hashParams().get('slice');
  state.slice = name || null;
  document.getElementById('overview').classList.toggle('hidden', !!state.slice);
  document.getElementById('slice-page').classList.toggle('hidden', !state.slice);
  if (!state.slice) return;
  document.getElementById('slice-title').textContent = state.slice;
  if (state.node) renderSlicePage(state.node);
  if (state.traceOf !== state.slice) loadTrace(state.slice);
  else if (state.timeline) state.timeline.request();
}

function renderSlicePage(node) {
  if (!state.slice) return;
  const s = node.slices.find((x) => x.name === state.slice);
  const badge = document.getElementById('slice-badge');
  const summary = document.getElementById('slice-summary');
  if (!s) {
    badge.className = 'badge failed';
    badge.textContent = 'gone';
    summary.replaceChildren(el('span', {text: 'gsliced has no slice named ' + state.slice + ' (any more).'}));
    return;
  }
  const activity = s.activity || s.state;
  badge.className = 'badge ' + activity;
  badge.textContent = activity;
  const gpuIndex = new Map(node.gpus.map((g) => [g.uuid, g.index]));
  const item = (label, value) => el('span', {}, label + ' ', el('b', {text: value}));
  summary.replaceChildren(
      item('user', s.user), item('project', s.project), item('class', s.class),
      item('GPUs', s.gpus.map((g) => (gpuIndex.has(g.uuid) ? gpuIndex.get(g.uuid) : g.uuid)).join(', ')),
      item('memory', fmtBytes(s.memory_used_bytes) + ' / ' + fmtBytes(s.memory_limit_bytes)),
      item('compute', s.compute_used === null ? '-' : fmtPct(s.compute_used)),
      item('processes', s.processes.length ? s.processes.map((p) => p.pid).join(', ') : 'none'));
}

function showTraceState(which, text) {
  document.getElementById('trace-empty').classList.toggle('hidden', which !== 'none');
  document.getElementById('trace-error').classList.toggle('hidden', which !== 'error');
  document.getElementById('trace-view').classList.toggle('hidden', which !== 'loaded');
  if (which === 'error') document.getElementById('trace-error').textContent = text;
  if (which === 'none') document.getElementById('trace-empty-reason').textContent = text || '';
  document.getElementById('slice-page').dataset.trace = which;
}

// Fetches the slice's latest trace (GET /v1/slices/NAME/trace) into the timeline.
async function loadTrace(name) {
  state.traceOf = name;
  const info = document.getElementById('trace-info');
  info.textContent = 'loading…';
  document.getElementById('trace-command').textContent = 'gslice trace ' + name + ' --seconds 10';
  showTraceState('loading');
  state.timeline.clear();
  let res, text;
  try {
    const headers = {};
    if (state.token) headers['Authorization'] = 'Bearer ' + state.token;
    res = await fetch('/v1/slices/' + encodeURIComponent(name) + '/trace', {headers, cache: 'no-store'});
    text = await res.text();
  } catch (e) {
    if (state.traceOf !== name) return;
    info.textContent = '';
    showTraceState('error', 'gsliced not reachable (' + e.message + ')');
    return;
  }
  if (state.traceOf !== name) return;  // another slice's page opened meanwhile
  if (!res.ok) {
    let message = 'HTTP ' + res.status;
    try { message = JSON.parse(text).error || message; } catch (e) { /* not JSON */ }
    info.textContent = '';
    // 404 for a slice that exists: none recorded yet.
    if (res.status === 404 && !/no slice named/.test(message)) showTraceState('none', '');
    else showTraceState('error', message);
    return;
  }
  try {
    showTraceState('loaded');
    state.timeline.setTrace(JSON.parse(text));
  } catch (e) {
    info.textContent = '';
    showTraceState('error', 'the trace of ' + name + ' cannot be shown: ' + e.message);
    return;
  }
  const m = state.timeline.model;
  const parts = [m.events + ' events', m.processes.length + (m.processes.length === 1 ? ' process' : ' processes'),
                 GsliceTimeline.fmtTime(m.end - m.start)];
  if (m.info.started_unix_ns) parts.push('recorded ' + new Date(m.info.started_unix_ns / 1e6).toLocaleString());
  if (m.info.dropped_events) parts.push(m.info.dropped_events + ' dropped (the ring was full)');
  info.textContent = '· ' + parts.join(' · ');
}

function onTraceButton(ev) {
  const button = ev.target.closest('button[data-trace]');
  if (!button) return;
  const t = state.timeline;
  const action = button.dataset.trace;
  if (action === 'reload') loadTrace(state.slice);
  else if (action === 'zoom-in') t.zoomBy(0.5);
  else if (action === 'zoom-out') t.zoomBy(2);
  else if (action === 'pan-left') t.panBy(-0.25);
  else if (action === 'pan-right') t.panBy(0.25);
  else if (action === 'fit') t.fit();
}

function setStatus(kind, text) {
  const s = document.getElementById('status');
  s.dataset.state = kind;
  document.getElementById('status-text').textContent = text;
}

// ---- loop ------------------------------------------------------------------------------

async function poll() {
  try {
    const [node, hist] = await Promise.all([api('/v1/node'), api('/v1/history?since=' + state.lastSample)]);
    for (const s of hist.samples) {
      if (s.time_ms > state.lastSample) {
        state.history.push(s);
        state.lastSample = s.time_ms;
      }
    }
    const cutoff = node.time_ms - WINDOW_MS;
    while (state.history.length && state.history[0].time_ms < cutoff) state.history.shift();
    state.node = node;
    document.getElementById('token-form').classList.add('hidden');
    renderGpus(node);
    renderSliceCharts(node);
    renderTables(node);
    renderSlicePage(node);
    setStatus('live', 'live · ' + new Date(node.time_ms).toLocaleTimeString());
    document.body.dataset.updated = String(node.time_ms);
  } catch (e) {
    if (e.unauthorized) {
      document.getElementById('token-form').classList.remove('hidden');
      setStatus('down', 'token needed');
    } else {
      setStatus('down', 'gsliced not reachable (' + e.message + ')');
    }
  }
  setTimeout(poll, POLL_MS);
}

document.addEventListener('DOMContentLoaded', () => {
  loadToken();
  document.getElementById('token-entry').addEventListener('submit', (ev) => {
    ev.preventDefault();
    state.token = document.getElementById('token-input').value.trim();
    sessionStorage.setItem('gslice-token', state.token);  // the next poll uses it
    if (state.slice) loadTrace(state.slice);
  });
  window.addEventListener('resize', () => state.node && (renderGpus(state.node), renderSliceCharts(state.node)));
  document.getElementById('create-form').addEventListener('submit', onCreate);
  document.getElementById('resize-form').addEventListener('submit', onResize);
  document.querySelector('#slices tbody').addEventListener('click', onSliceAction);
  state.timeline = new GsliceTimeline.Timeline(document.getElementById('trace-view'));
  window.gsliceTimeline = state.timeline;
  document.querySelector('.timeline-toolbar').addEventListener('click', onTraceButton);
  window.addEventListener('hashchange', route);
  route();
  poll();
});
