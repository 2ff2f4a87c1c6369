// gslice dashboard: a slice's trace (docs/trace.md, Chrome trace event JSON) as a zoomable,
// pannable timeline, drawn on a canvas by this file alone (no library, nothing fetched).
//
// Layout: one group per process (its process_name), in it one track per host thread (API
// calls, compute gate waits, suspended waits and NVTX ranges, nested by time into depth
// lanes), one per GPU stream (tid >= STREAM_TID_BASE: kernels, copies, sets) and one per
// counter ("GPU utilisation", "slice memory").
//
// Large traces stay responsive: within a lane events never overlap, so they are sorted by
// start and by end alike; drawing binary-searches the first visible one and, where events
// are narrower than a pixel, draws one pixel for all that end in it and jumps past them. A
// frame draws at most about (visible lanes x canvas width) rectangles, whatever the trace
// holds. Only tracks in the scrolled-to part of the canvas are drawn.
//
// For tests and scripts, the instance is window.gsliceTimeline: rows(), view, zoomBy(),
// panBy(), fit(), hovered, lastDraw, pointOf() (timeline.test.js uses them).
'use strict';

const GsliceTimeline = (() => {
  const STREAM_TID_BASE = 1000000000;
  const LABEL_W = 210;    // the label column, in CSS pixels
  const LANE_H = 18;      // one depth lane of a thread or stream track
  const FLOW_MAX = 400;   // flow arrows drawn at most (more in the window: zoom in to see them)
  const TRACK_PAD = 6;    // below each track
  const PROCESS_H = 24;   // a process's header row
  const COUNTER_H = 42;
  const RULER_H = 26;
  const MIN_SPAN_US = 0.01;  // the narrowest window: 10 ns
  const CATEGORY_COLORS = {
    api: ['#4f7cac', '#5a88b8', '#46709c'],
    gate: ['#e7b54a'],
    suspend: ['#9d7ef0'],
    memcpy: ['#ef6b6b', '#e0595f', '#f28080'],
    memset: ['#3fd0c9'],
    remote: ['#6f93c8', '#7b9fd4', '#6386bb'],  // a remote client's calls, its worker's served requests
    network: ['#8a8f98'],                        // a remote call's time outside the worker
  };
  const NAMED_PALETTE = ['#4cc38a', '#5fb3f9', '#a3d65c', '#3fd0c9', '#8ea8ff', '#f28fc0',
                         '#f0a35e', '#b59cff', '#6fd6a8', '#7fc4ff', '#c9d65c', '#ff9f8e'];

  // ---- the model ----------------------------------------------------------------------

  function hashOf(text) {
    let h = 2166136261;
    for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16777619);
    return h >>> 0;
  }

  function colorOf(cat, name) {
    const fixed = CATEGORY_COLORS[cat];
    const palette = fixed || NAMED_PALETTE;  // kernels and NVTX ranges: a colour per name
    return palette[hashOf(name) % palette.length];
  }

  // Order within a track: by start; a longer event first, so that it encloses the shorter
  // ones that start with it; at equal times NVTX ranges enclose a remote client's calls and
  // a worker's served requests, which enclose API calls and network slices, which enclose
  // gate and suspended waits.
  const CATEGORY_RANK = {nvtx: 0, remote: 1, api: 2, network: 2, gate: 3, suspend: 3};

  // Assigns depth lanes by nesting: an event goes one below the innermost event still open
  // at its start. Within a lane events are disjoint: an event takes lane d only after the
  // one before it in d ended.
  function layoutLanes(events) {
    events.sort((a, b) => a.ts - b.ts || b.dur - a.dur ||
                          (CATEGORY_RANK[a.cat] ?? 4) - (CATEGORY_RANK[b.cat] ?? 4));
    const stack = [];
    const lanes = [];
    for (const e of events) {
      while (stack.length && stack[stack.length - 1].ts + stack[stack.length - 1].dur <= e.ts) stack.pop();
      e.depth = stack.length;
      (lanes[e.depth] || (lanes[e.depth] = [])).push(e);
      stack.push(e);
    }
    return lanes.map((list) => {
      const starts = new Float64Array(list.length);
      const ends = new Float64Array(list.length);
      list.forEach((e, i) => { starts[i] = e.ts; ends[i] = e.ts + e.dur; });
      return {events: list, starts, ends};
    });
  }

  // The first index whose value in `sorted` is >= x.
  function lowerBound(sorted, x) {
    let lo = 0, hi = sorted.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (sorted[mid] < x) lo = mid + 1; else hi = mid;
    }
    return lo;
  }

  // Builds the model from a parsed trace: {processes: [{pid, name, tracks}], start, end,
  // events, info}. Times become microseconds from the trace's first event. Events this view
  // does not draw (flows, async, objects) are counted in `skipped`.
  function buildModel(trace) {
    const list = Array.isArray(trace) ? trace : trace && trace.traceEvents;
    if (!Array.isArray(list)) throw new Error('not a Chrome trace: it has no traceEvents array');
    const processes = new Map();
    const processOf = (pid) => {
      if (!processes.has(pid)) {
        processes.set(pid, {pid, name: '', sortIndex: 0, threads: new Map(), counters: new Map()});
      }
      return processes.get(pid);
    };
    const threadOf = (p, tid) => {
      if (!p.threads.has(tid)) {
        const stream = tid >= STREAM_TID_BASE;
        p.threads.set(tid, {kind: stream ? 'stream' : 'thread', pid: p.pid, tid, name: '',
                            sortIndex: 0, raw: []});
      }
      return p.threads.get(tid);
    };
    let t0 = Infinity, t1 = -Infinity, count = 0, skipped = 0;
    const open = new Map();  // "pid:tid" -> B events awaiting their E
    const flowEnds = new Map();  // "cat:id" -> {from, to}: flow events (ph s, f), drawn as arrows
    for (const e of list) {
      if (!e || typeof e !== 'object') { skipped++; continue; }
      const pid = Number(e.pid) || 0;
      const tid = Number(e.tid) || 0;
      const ph = e.ph;
      if (ph === 'M') {
        const arg = e.args || {};
        if (e.name === 'process_name') processOf(pid).name = String(arg.name ?? '');
        else if (e.name === 'process_sort_index') processOf(pid).sortIndex = Number(arg.sort_index) || 0;
        else if (e.name === 'thread_name') threadOf(processOf(pid), tid).name = String(arg.name ?? '');
        else if (e.name === 'thread_sort_index') threadOf(processOf(pid), tid).sortIndex = Number(arg.sort_index) || 0;
        continue;
      }
      const ts = Number(e.ts);
      if (!Number.isFinite(ts)) { skipped++; continue; }
      const name = String(e.name ?? '');
      const cat = String(e.cat ?? '');
      if (ph === 'X' || ph === 'i' || ph === 'I' || ph === 'R') {
        const dur = ph === 'X' ? Math.max(0, Number(e.dur) || 0) : 0;
        threadOf(processOf(pid), tid).raw.push({ts, dur, name, cat, args: e.args, instant: ph !== 'X'});
        t0 = Math.min(t0, ts);
        t1 = Math.max(t1, ts + dur);
        count++;
      } else if (ph === 'B') {
        const key = pid + ':' + tid;
        if (!open.has(key)) open.set(key, []);
        open.get(key).push({ts, name, cat, args: e.args});
      } else if (ph === 'E') {
        const begun = (open.get(pid + ':' + tid) || []).pop();
        if (!begun) { skipped++; continue; }
        const args = begun.args || e.args ? {...(begun.args || {}), ...(e.args || {})} : undefined;
        threadOf(processOf(pid), tid).raw.push({ts: begun.ts, dur: Math.max(0, ts - begun.ts), name: begun.name,
                                                cat: begun.cat, args, instant: false});
        t0 = Math.min(t0, begun.ts);
        t1 = Math.max(t1, ts);
        count++;
      } else if (ph === 's' || ph === 'f') {
        const key = String(e.cat ?? '') + ':' + String(e.id ?? '');
        if (!flowEnds.has(key)) flowEnds.set(key, {});
        flowEnds.get(key)[ph === 's' ? 'from' : 'to'] = {pid, tid, ts};
      } else if (ph === 'C') {
        const p = processOf(pid);
        if (!p.counters.has(name)) p.counters.set(name, []);
        p.counters.get(name).push({ts, args: e.args || {}});
        t0 = Math.min(t0, ts);
        t1 = Math.max(t1, ts);
        count++;
      } else {
        skipped++;
      }
    }
    if (!(t0 <= t1)) { t0 = 0; t1 = 0; }
    const out = [];
    for (const p of processes.values()) {
      const tracks = [];
      const threads = [...p.threads.values()].filter((t) => t.raw.length > 0);
      // Host threads (the main thread first), then streams by index.
      threads.sort((a, b) => (a.kind === b.kind ? 0 : a.kind === 'thread' ? -1 : 1) ||
                             a.sortIndex - b.sortIndex || (b.tid === p.pid) - (a.tid === p.pid) || a.tid - b.tid);
      for (const t of threads) {
        for (const e of t.raw) e.ts -= t0;
        const name = t.name || (t.kind === 'stream' ? 'stream ' + (t.tid - STREAM_TID_BASE)
                                                    : (t.tid === p.pid ? 'main thread ' : 'thread ') + t.tid);
        tracks.push({kind: t.kind, pid: p.pid, tid: t.tid, name, lanes: layoutLanes(t.raw), events: t.raw.length});
      }
      for (const [name, samples] of [...p.counters.entries()].sort(([a], [b]) => a.localeCompare(b))) {
        samples.sort((a, b) => a.ts - b.ts);
        const keys = [...new Set(samples.flatMap((s) => Object.keys(s.args)))];
        const times = Float64Array.from(samples, (s) => s.ts - t0);
        const series = keys.map((key) => {
          const values = Float64Array.from(samples, (s) => Number(s.args[key]) || 0);
          return {key, values, max: values.reduce((m, v) => Math.max(m, v), 0)};
        });
        tracks.push({kind: 'counter', pid: p.pid, tid: null, name, times, series, events: samples.length});
      }
      if (tracks.length === 0) continue;
      out.push({pid: p.pid, name: p.name || 'process ' + p.pid, sortIndex: p.sortIndex, tracks});
    }
    out.sort((a, b) => a.sortIndex - b.sortIndex || a.pid - b.pid);
    // Flows with both ends (a remote call and the worker's execution of it), by their start;
    // maxSpan bounds how far before a window a flow that reaches into it can start.
    const flows = [];
    let maxSpan = 0;
    for (const f of flowEnds.values()) {
      if (!f.from || !f.to) continue;
      f.from.ts -= t0;
      f.to.ts -= t0;
      flows.push(f);
      maxSpan = Math.max(maxSpan, Math.abs(f.to.ts - f.from.ts));
    }
    flows.sort((a, b) => a.from.ts - b.from.ts);
    const gslice = (trace && trace.otherData && trace.otherData.gslice) || {};
    return {processes: out, start: 0, end: t1 - t0, events: count, skipped, info: gslice, flows, maxFlowSpan: maxSpan};
  }

  // ---- formatting ---------------------------------------------------------------------

  // Microseconds for people: "850 ns", "12.5 µs", "3.42 ms", "1.20 s".
  function fmtTime(us) {
    const a = Math.abs(us);
    if (a === 0) return '0';
    if (a < 1) return +(us * 1000).toPrecision(3) + ' ns';
    if (a < 1000) return +us.toPrecision(3) + ' µs';
    if (a < 1e6) return +(us / 1000).toPrecision(3) + ' ms';
    return +(us / 1e6).toPrecision(4) + ' s';
  }

  // A ruler tick at `us`, ticks `step` apart: the unit fmtTime would choose, with as many
  // decimals as the step needs for neighbouring ticks to differ ("12.805 s" beside "12.810 s").
  function fmtTick(us, step) {
    const a = Math.abs(us);
    if (a === 0) return '0';
    const [scale, unit] = a < 1 ? [1e-3, 'ns'] : a < 1000 ? [1, 'µs'] : a < 1e6 ? [1000, 'ms'] : [1e6, 's'];
    const decimals = Math.min(6, Math.max(0, Math.ceil(-Math.log10(step / scale) - 1e-9)));
    return (us / scale).toFixed(decimals) + ' ' + unit;
  }

  function fmtValue(key, v) {
    if (/bytes/i.test(key)) {
      const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
      let i = 0;
      while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
      return +v.toFixed(v >= 100 || i === 0 ? 0 : 1) + ' ' + units[i];
    }
    if (/percent/i.test(key)) return +v.toFixed(1) + '%';
    return String(+v.toPrecision(6));
  }

  // A tick step of 1, 2 or 5 times a power of ten giving ticks about `minPx` apart.
  function tickStep(pxPerUs, minPx) {
    const raw = minPx / pxPerUs;
    const pow = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 5, 10]) if (m * pow >= raw) return m * pow;
    return 10 * pow;
  }

  // ---- the view -----------------------------------------------------------------------

  class Timeline {
    // root: the element holding .trace-ruler, .trace-scroll > canvas, .trace-tooltip.
    constructor(root) {
      this.root = root;
      this.ruler = root.querySelector('.trace-ruler');
      this.scroller = root.querySelector('.trace-scroll');
      this.canvas = root.querySelector('.trace-canvas');
      this.tooltip = root.querySelector('.trace-tooltip');
      this.rowList = root.querySelector('.trace-rows');
      this.model = null;
      this.tracks = [];  // laid out: {..., y, height, process}
      this.view = {start: 0, end: 1};
      this.hovered = null;
      this.lastDraw = {rects: 0, instants: 0, tracks: 0, flows: 0};
      this.pending = false;
      this.drag = null;
      this.collapsed = new Set();  // pids whose rows are folded into their header
      this.bind();
    }

    // Shows `trace` (parsed JSON); throws when it is not a Chrome trace.
    setTrace(trace) {
      this.model = buildModel(trace);
      this.collapsed.clear();
      this.layout();
      this.fit();
    }

    clear() {
      this.model = null;
      this.tracks = [];
      this.hide();
      if (this.rowList) this.rowList.replaceChildren();
      this.request();
    }

    layout() {
      this.tracks = [];
      let y = 0;
      const items = [];
      for (const p of this.model.processes) {
        const collapsed = this.collapsed.has(p.pid);
        this.tracks.push({kind: 'process', pid: p.pid, tid: null, name: p.name + ' · pid ' + p.pid, y,
                          height: PROCESS_H, collapsed, hidden: collapsed ? p.tracks.length : 0});
        y += PROCESS_H;
        for (const t of collapsed ? [] : p.tracks) {
          const height = t.kind === 'counter' ? COUNTER_H : Math.max(1, t.lanes.length) * LANE_H + TRACK_PAD;
          this.tracks.push({...t, y, height, process: p.name});
          y += height;
        }
      }
      this.contentHeight = y;
      if (this.rowList) {
        // The rows as text, for screen readers (the canvas says nothing to them).
        for (const t of this.tracks) {
          items.push(Object.assign(document.createElement('li'), {textContent: t.kind + ': ' + t.name}));
          items[items.length - 1].dataset.kind = t.kind;
        }
        this.rowList.replaceChildren(...items);
      }
    }

    // What is drawn, one entry per row: {kind, pid, tid, name, lanes, events, y, height}.
    rows() {
      return this.tracks.map((t) => ({kind: t.kind, pid: t.pid, tid: t.tid, name: t.name, process: t.process,
                                      collapsed: !!t.collapsed,
                                      lanes: t.lanes ? t.lanes.length : 0, events: t.events || 0,
                                      y: t.y, height: t.height}));
    }

    plotWidth() { return Math.max(1, this.scroller.clientWidth - LABEL_W); }

    setView(start, end) {
      if (!this.model) return;
      const total = Math.max(this.model.end - this.model.start, MIN_SPAN_US);
      const margin = total * 0.02;
      let span = Math.min(Math.max(end - start, MIN_SPAN_US), total + 2 * margin);
      start = Math.min(Math.max(start, this.model.start - margin), this.model.end + margin - span);
      this.view = {start, end: start + span};
      this.canvas.dataset.viewStart = String(this.view.start);
      this.canvas.dataset.viewEnd = String(this.view.end);
      this.request();
    }

    fit() {
      if (!this.model) return;
      const total = this.model.end - this.model.start;
      const margin = Math.max(total * 0.01, MIN_SPAN_US);
      this.setView(this.model.start - margin, this.model.end + margin);
    }

    // Zooms by `factor` (< 1: in) keeping the time at `frac` (0..1 across the plot) in place.
    zoomBy(factor, frac = 0.5) {
      const {start, end} = this.view;
      const at = start + (end - start) * frac;
      const span = (end - start) * factor;
      this.setView(at - span * frac, at - span * frac + span);
    }

    // Pans by `frac` of the window (> 0: later).
    panBy(frac) {
      const span = this.view.end - this.view.start;
      this.setView(this.view.start + span * frac, this.view.end + span * frac);
    }

    request() {
      if (this.pending) return;
      this.pending = true;
      requestAnimationFrame(() => { this.pending = false; this.draw(); });
    }

    // Sizes a canvas for the device's pixels; returns its context in CSS pixels.
    prepare(canvas, w, h) {
      const dpr = window.devicePixelRatio || 1;
      canvas.style.height = h + 'px';
      if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
        canvas.width = Math.round(w * dpr);
        canvas.height = Math.round(h * dpr);
      }
      const ctx = canvas.getContext('2d');
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, w, h);
      return ctx;
    }

    draw() {
      const w = this.scroller.clientWidth;
      if (!this.model || w === 0) return;
      const pw = this.plotWidth();
      const {start, end} = this.view;
      const k = pw / (end - start);
      const X = (t) => LABEL_W + (t - start) * k;
      this.drawRuler(w, k);

      const ctx = this.prepare(this.canvas, w, this.contentHeight);
      const top = this.scroller.scrollTop, bottom = top + this.scroller.clientHeight;
      const stats = {rects: 0, instants: 0, tracks: 0};
      ctx.font = '11px system-ui, sans-serif';
      ctx.textBaseline = 'middle';
      for (const t of this.tracks) {
        if (t.y + t.height < top || t.y > bottom) continue;
        stats.tracks++;
        if (t.kind === 'process') {
          ctx.fillStyle = '#1d2631';
          ctx.fillRect(0, t.y, w, t.height);
          ctx.fillStyle = '#d8e0e8';
          ctx.font = '600 12px system-ui, sans-serif';
          const label = (t.collapsed ? '▸ ' : '▾ ') + t.name;
          ctx.fillText(label, 8, t.y + t.height / 2);
          if (t.collapsed) {
            const right = 8 + ctx.measureText(label).width + 14;
            ctx.fillStyle = '#7d8b99';
            ctx.font = '11px system-ui, sans-serif';
            ctx.fillText(t.hidden + ' rows folded: click to show them', right, t.y + t.height / 2);
          }
          ctx.font = '11px system-ui, sans-serif';
          continue;
        }
        ctx.save();
        ctx.beginPath();
        ctx.rect(LABEL_W, t.y, pw, t.height);
        ctx.clip();
        if (t.kind === 'counter') this.drawCounter(ctx, t, X, start, end, stats);
        else this.drawLanes(ctx, t, X, start, end, k, stats);
        ctx.restore();
        // Label column and the line under the track.
        ctx.fillStyle = '#7d8b99';
        ctx.fillText(this.clipText(ctx, t.name, LABEL_W - 24), 16, t.y + Math.min(t.height, LANE_H + 2) / 2);
        ctx.strokeStyle = '#263240';
        ctx.beginPath();
        ctx.moveTo(0, t.y + t.height - 0.5);
        ctx.lineTo(w, t.y + t.height - 0.5);
        ctx.stroke();
      }
      ctx.strokeStyle = '#263240';
      ctx.beginPath();
      ctx.moveTo(LABEL_W - 0.5, 0);
      ctx.lineTo(LABEL_W - 0.5, this.contentHeight);
      ctx.stroke();
      this.drawFlows(ctx, X, start, end, pw, stats);
      this.lastDraw = stats;
      this.canvas.dataset.rects = String(stats.rects);
    }

    // Flow arrows (a remote call to the worker's execution of it) between the first lanes of
    // their rows, for flows in the window while there are few enough to tell apart; none into
    // a folded process.
    drawFlows(ctx, X, start, end, pw, stats) {
      stats.flows = 0;
      const flows = this.model.flows || [];
      if (flows.length === 0) return;
      const rowY = new Map();
      for (const t of this.tracks) {
        if (t.kind === 'thread' || t.kind === 'stream') rowY.set(t.pid + ':' + t.tid, t.y + LANE_H / 2);
      }
      let lo = 0, hi = flows.length;
      const first = start - this.model.maxFlowSpan;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (flows[mid].from.ts < first) lo = mid + 1; else hi = mid;
      }
      const shown = [];
      for (let i = lo; i < flows.length && flows[i].from.ts <= end; i++) {
        const f = flows[i];
        if (Math.max(f.from.ts, f.to.ts) < start) continue;
        const y1 = rowY.get(f.from.pid + ':' + f.from.tid), y2 = rowY.get(f.to.pid + ':' + f.to.tid);
        if (y1 === undefined || y2 === undefined) continue;
        shown.push([X(f.from.ts), y1, X(f.to.ts), y2]);
        if (shown.length > FLOW_MAX) return;
      }
      ctx.save();
      ctx.beginPath();
      ctx.rect(LABEL_W, 0, pw, this.contentHeight);
      ctx.clip();
      ctx.strokeStyle = 'rgba(216, 224, 232, 0.55)';
      ctx.fillStyle = 'rgba(216, 224, 232, 0.75)';
      for (const [x1, y1, x2, y2] of shown) {
        ctx.beginPath();
        ctx.moveTo(x1, y1);
        ctx.lineTo(x2, y2);
        ctx.stroke();
        const a = Math.atan2(y2 - y1, x2 - x1);
        ctx.beginPath();
        ctx.moveTo(x2, y2);
        ctx.lineTo(x2 - 6 * Math.cos(a - 0.4), y2 - 6 * Math.sin(a - 0.4));
        ctx.lineTo(x2 - 6 * Math.cos(a + 0.4), y2 - 6 * Math.sin(a + 0.4));
        ctx.fill();
      }
      ctx.restore();
      stats.flows = shown.length;
    }

    drawRuler(w, k) {
      const ctx = this.prepare(this.ruler, w, RULER_H);
      const {start, end} = this.view;
      ctx.fillStyle = '#121920';
      ctx.fillRect(0, 0, w, RULER_H);
      ctx.font = '11px system-ui, sans-serif';
      ctx.fillStyle = '#7d8b99';
      ctx.textBaseline = 'middle';
      ctx.fillText('window ' + fmtTime(end - start), 8, RULER_H / 2);
      const step = tickStep(k, 90);
      ctx.strokeStyle = '#3a4756';
      for (let t = Math.ceil(start / step) * step; t <= end; t += step) {
        const x = Math.round(LABEL_W + (t - start) * k) + 0.5;
        ctx.beginPath();
        ctx.moveTo(x, RULER_H - 7);
        ctx.lineTo(x, RULER_H);
        ctx.stroke();
        ctx.fillText(Math.abs(t) < step / 1e6 ? '0' : fmtTick(t, step), x + 3, RULER_H / 2 - 2);
      }
    }

    clipText(ctx, text, width) {
      if (width < 12) return '';
      if (ctx.measureText(text).width <= width) return text;
      let n = Math.max(0, Math.floor(text.length * width / ctx.measureText(text).width) - 1);
      while (n > 0 && ctx.measureText(text.slice(0, n) + '…').width > width) n--;
      return n > 0 ? text.slice(0, n) + '…' : '';
    }

    drawLanes(ctx, t, X, start, end, k, stats) {
      t.lanes.forEach((lane, depth) => {
        const y = t.y + depth * LANE_H + 1;
        const h = LANE_H - 2;
        const n = lane.events.length;
        // The first event that ends at or after the window's start (lane.ends is sorted).
        let i = lowerBound(lane.ends, start);
        let lastPx = -Infinity;  // the last pixel column filled for narrow events
        while (i < n && lane.starts[i] <= end) {
          const e = lane.events[i];
          if (e.instant) {
            const x = X(e.ts);
            ctx.fillStyle = colorOf(e.cat, e.name);
            ctx.beginPath();
            ctx.moveTo(x - 4, y);
            ctx.lineTo(x + 4, y);
            ctx.lineTo(x, y + 7);
            ctx.closePath();
            ctx.fill();
            stats.instants++;
            i++;
            continue;
          }
          const x0 = X(lane.starts[i]);
          const x1 = X(lane.ends[i]);
          if (x1 - x0 >= 1) {
            ctx.fillStyle = colorOf(e.cat, e.name);
            const left = Math.max(x0, LABEL_W - 1), right = Math.min(x1, LABEL_W + this.plotWidth() + 1);
            ctx.fillRect(left, y, right - left, h);
            stats.rects++;
            if (right - left > 30) {
              ctx.fillStyle = '#0b1015';
              const label = this.clipText(ctx, e.name, right - left - 8);
              if (label) ctx.fillText(label, left + 4, y + h / 2 + 0.5);
            }
            i++;
            continue;
          }
          // Narrower than a pixel: one pixel for every event that ends within it (an event
          // that began in a pixel already filled takes the next one).
          const px = Math.max(Math.floor(x0), lastPx + 1);
          ctx.fillStyle = colorOf(e.cat, e.name);
          ctx.fillRect(px, y, 1, h);
          stats.rects++;
          lastPx = px;
          i = Math.max(i + 1, lowerBound(lane.ends, start + (px + 1 - LABEL_W) / k));
        }
      });
    }

    drawCounter(ctx, t, X, start, end, stats) {
      const s = t.series[0];
      if (!s) return;
      const base = t.y + t.height - 4, h = t.height - 10;
      const max = s.max > 0 ? s.max : 1;
      const n = t.times.length;
      let i = Math.max(0, lowerBound(t.times, start) - 1);
      ctx.fillStyle = 'rgba(95,179,249,.35)';
      ctx.strokeStyle = '#5fb3f9';
      ctx.beginPath();
      ctx.moveTo(X(t.times[i]), base);
      let lastPx = -Infinity, right = X(t.times[i]);
      for (; i < n && t.times[i] <= end; i++) {
        const x = X(t.times[i]);
        // A value holds until the next sample; the last one until the end of the trace.
        const nextX = X(i + 1 < n ? t.times[i + 1] : this.model.end);
        // Steps narrower than a pixel: one per pixel (the first value in it stands for them).
        if (Math.floor(x) === lastPx && Math.floor(nextX) === lastPx) continue;
        lastPx = Math.floor(x);
        const y = base - h * s.values[i] / max;
        ctx.lineTo(x, y);
        ctx.lineTo(nextX, y);
        right = nextX;
        stats.rects++;
      }
      ctx.lineTo(right, base);
      ctx.closePath();
      ctx.fill();
      ctx.fillStyle = '#7d8b99';
      ctx.fillText('max ' + fmtValue(s.key, s.max), LABEL_W + 6, t.y + 8);
    }

    // ---- pointing ---------------------------------------------------------------------

    // The event (or counter sample) under canvas point (x, y), or null.
    hitTest(x, y) {
      if (!this.model || x < LABEL_W) return null;
      const track = this.tracks.find((t) => y >= t.y && y < t.y + t.height);
      if (!track || track.kind === 'process') return null;
      const k = this.plotWidth() / (this.view.end - this.view.start);
      const time = this.view.start + (x - LABEL_W) / k;
      if (track.kind === 'counter') {
        const i = lowerBound(track.times, time + 1e-9) - 1;
        if (i < 0) return null;
        const args = {};
        for (const s of track.series) args[s.key] = s.values[i];
        return {track, event: {name: track.name, cat: 'counter', ts: track.times[i], dur: 0, args, counter: true}};
      }
      const lane = track.lanes[Math.floor((y - track.y) / LANE_H)];
      if (!lane) return null;
      const slack = 3 / k;  // three pixels either side
      let i = lowerBound(lane.ends, time - slack);
      let best = null, bestDist = Infinity;
      for (; i < lane.events.length && lane.starts[i] <= time + slack; i++) {
        const dist = time < lane.starts[i] ? lane.starts[i] - time : time > lane.ends[i] ? time - lane.ends[i] : 0;
        if (dist < bestDist) { best = lane.events[i]; bestDist = dist; }
        if (dist === 0) break;
      }
      return best ? {track, event: best} : null;
    }

    // Page coordinates of the middle of the first event named `name` (optionally in the row
    // of pid/tid), scrolled into view and within the window; null when none is visible.
    pointOf(name, pid, tid) {
      for (const t of this.tracks) {
        if (!t.lanes || (pid !== undefined && t.pid !== pid) || (tid !== undefined && t.tid !== tid)) continue;
        for (let d = 0; d < t.lanes.length; d++) {
          const e = t.lanes[d].events.find((ev) => ev.name === name &&
                                                ev.ts + ev.dur >= this.view.start && ev.ts <= this.view.end);
          if (!e) continue;
          const k = this.plotWidth() / (this.view.end - this.view.start);
          const mid = Math.max(this.view.start, Math.min(this.view.end, e.ts + e.dur / 2));
          const y = t.y + d * LANE_H + LANE_H / 2;
          if (y < this.scroller.scrollTop || y > this.scroller.scrollTop + this.scroller.clientHeight) {
            this.scroller.scrollTop = Math.max(0, y - this.scroller.clientHeight / 2);
          }
          const box = this.canvas.getBoundingClientRect();
          return {x: box.left + LABEL_W + (mid - this.view.start) * k, y: box.top + y};
        }
      }
      return null;
    }

    showTooltip(hit, clientX, clientY) {
      const e = hit.event;
      this.hovered = {name: e.name, cat: e.cat, ts: e.ts, dur: e.dur, args: e.args || {}, row: hit.track.name,
                      pid: hit.track.pid, tid: hit.track.tid};
      const lines = [];
      const head = document.createElement('b');
      head.textContent = e.name || '(unnamed)';
      lines.push(head);
      const where = e.counter ? 'counter' : (e.cat || 'event') + ' · ' + hit.track.name;
      lines.push(where);
      if (e.counter) {
        lines.push('at ' + fmtTime(e.ts));
        for (const [key, v] of Object.entries(e.args)) lines.push(key + ': ' + fmtValue(key, v));
      } else {
        lines.push(e.instant ? 'at ' + fmtTime(e.ts) : 'duration ' + fmtTime(e.dur) + ' · at ' + fmtTime(e.ts));
        const args = Object.entries(e.args || {});
        for (const [key, v] of args.slice(0, 12)) {
          const text = typeof v === 'string' ? v : JSON.stringify(v);
          lines.push(key + ': ' + (text.length > 120 ? text.slice(0, 119) + '…' : text));
        }
        if (args.length > 12) lines.push('… ' + (args.length - 12) + ' more');
      }
      this.tooltip.replaceChildren(...lines.map((l) => {
        const div = document.createElement('div');
        div.append(l);
        return div;
      }));
      this.tooltip.classList.remove('hidden');
      const box = this.root.getBoundingClientRect();
      const left = Math.min(clientX - box.left + 14, box.width - this.tooltip.offsetWidth - 4);
      this.tooltip.style.left = Math.max(0, left) + 'px';
      this.tooltip.style.top = (clientY - box.top + 16) + 'px';
    }

    // Folds or unfolds the rows of process `pid`.
    toggle(pid) {
      if (!this.collapsed.delete(pid)) this.collapsed.add(pid);
      this.layout();
      this.hide();
      this.request();
    }

    hide() {
      this.hovered = null;
      if (this.tooltip) this.tooltip.classList.add('hidden');
    }

    bind() {
      const c = this.canvas;
      const point = (ev) => {
        const box = c.getBoundingClientRect();
        return {x: ev.clientX - box.left, y: ev.clientY - box.top};
      };
      c.addEventListener('wheel', (ev) => {
        if (!this.model) return;
        ev.preventDefault();
        const {x} = point(ev);
        const frac = Math.min(1, Math.max(0, (x - LABEL_W) / this.plotWidth()));
        const dx = ev.shiftKey ? ev.deltaY : ev.deltaX;
        if (Math.abs(dx) > Math.abs(ev.shiftKey ? 0 : ev.deltaY)) {
          this.panBy(dx / this.plotWidth());
        } else {
          this.zoomBy(Math.exp(ev.deltaY * 0.002), frac);
        }
        this.hide();
      }, {passive: false});
      c.addEventListener('mousedown', (ev) => {
        if (!this.model || ev.button !== 0) return;
        this.drag = {x: ev.clientX, y: ev.clientY, start: this.view.start, end: this.view.end};
        c.classList.add('dragging');
        ev.preventDefault();
      });
      window.addEventListener('mousemove', (ev) => {
        if (!this.drag) return;
        const k = (this.drag.end - this.drag.start) / this.plotWidth();
        const shift = (this.drag.x - ev.clientX) * k;
        this.setView(this.drag.start + shift, this.drag.end + shift);
      });
      window.addEventListener('mouseup', (ev) => {
        // A click (no drag) on a process's header folds or unfolds its rows.
        if (this.drag && Math.abs(ev.clientX - this.drag.x) < 3 && Math.abs(ev.clientY - this.drag.y) < 3) {
          const {y} = point(ev);
          const header = this.tracks.find((t) => t.kind === 'process' && y >= t.y && y < t.y + t.height);
          if (header) this.toggle(header.pid);
        }
        this.drag = null;
        c.classList.remove('dragging');
      });
      c.addEventListener('mousemove', (ev) => {
        if (this.drag) return;
        const {x, y} = point(ev);
        const hit = this.hitTest(x, y);
        if (hit) this.showTooltip(hit, ev.clientX, ev.clientY); else this.hide();
      });
      c.addEventListener('mouseleave', () => this.hide());
      c.addEventListener('keydown', (ev) => {
        const keys = {w: () => this.zoomBy(0.8), s: () => this.zoomBy(1.25), '+': () => this.zoomBy(0.8),
                      '-': () => this.zoomBy(1.25), a: () => this.panBy(-0.2), d: () => this.panBy(0.2),
                      ArrowLeft: () => this.panBy(-0.2), ArrowRight: () => this.panBy(0.2), 0: () => this.fit()};
        const f = keys[ev.key];
        if (f && this.model) { f(); ev.preventDefault(); }
      });
      this.scroller.addEventListener('scroll', () => this.request());
      window.addEventListener('resize', () => this.request());
    }
  }

  return {Timeline, buildModel, fmtTime, fmtTick, STREAM_TID_BASE};
})();
