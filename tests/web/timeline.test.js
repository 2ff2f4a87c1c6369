// End-to-end test of a slice's page and its timeline: gsliced on the simulated driver serves
// traces written into its state folder (<state dir>/traces/<slice>.json, docs/trace.md); the
// dashboard in headless Chromium draws them. Checks what the timeline shows through the
// model the page exposes (window.gsliceTimeline), not pixels: a row group per process, rows
// for threads (NVTX ranges, API calls, gate and suspended waits nested by depth), GPU streams
// and counters; zooming and panning (buttons, wheel, drag) change the window; hovering shows
// an event's name, duration and arguments; a slice without a trace says how to record one;
// 100k events are drawn culled to the window; a remote run's two processes are drawn with
// arrows from each call to the worker's execution of it. Nothing is fetched from outside gsliced.
// Writes a screenshot to $GSLICE_SCREENSHOT_DIR/trace-dashboard.png (docs/trace.md shows it).
'use strict';

const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const {requireEnv, run, waitFor} = require('./harness');

requireEnv(['GSLICED', 'GSLICE_SIM_NVML']);

const STREAM = 1000000000;  // tid of stream 0 (docs/trace.md)
const MiB = 2 ** 20;

// Metadata naming a process and its threads and streams.
function names(pid, process, threads) {
  const out = [{ph: 'M', name: 'process_name', pid, tid: pid, args: {name: process}}];
  for (const [tid, name] of threads) out.push({ph: 'M', name: 'thread_name', pid, tid, args: {name}});
  return out;
}

// Six training steps of a PyTorch-like program, as the recorder writes them: NVTX ranges
// (step > forward/backward/optimizer) around driver calls, kernels and copies on two streams,
// one launch held at the compute gate, one copy held while the slice was suspended, marks,
// and the utilisation and memory counters. A second process (a data loader) copies.
function trainingTrace(slice) {
  const pid = 4242, worker = 4250, loader = 4343;
  const ev = [
    ...names(pid, `python3 (slice ${slice})`, [[pid, 'python3'], [worker, 'pt_autograd_0'],
                                               [STREAM + 7, 'stream 7'], [STREAM + 13, 'stream 13']]),
    ...names(loader, `python3 (slice ${slice})`, [[loader, 'python3'], [STREAM + 2, 'stream 2']]),
  ];
  const X = (o) => ev.push({ph: 'X', ...o});
  let memory = 2048 * MiB;
  for (let step = 0; step < 6; step++) {
    const t = 1000 + step * 8000;
    X({cat: 'nvtx', name: 'train_step', pid, tid: pid, ts: t, dur: 7600, args: {step}});
    // Input batch: copied on stream 13.
    X({cat: 'api', name: 'cuMemcpyHtoDAsync', pid, tid: pid, ts: t + 10, dur: step === 4 ? 520 : 14,
       args: {bytes: 64 * MiB, stream: 13}});
    if (step === 4) X({cat: 'suspend', name: 'suspended', pid, tid: pid, ts: t + 15, dur: 500, args: {}});
    X({cat: 'memcpy', name: 'HtoD', pid, tid: STREAM + 13, ts: t + (step === 4 ? 540 : 30), dur: 600,
       args: {bytes: 64 * MiB, kind: 'HtoD'}});
    for (const [phase, from, to, kernel, tid] of [['forward', 700, 3300, 'conv2d_fwd_kernel', pid],
                                                  ['backward', 3400, 6500, 'conv2d_bwd_kernel', worker],
                                                  ['optimizer', 6600, 7500, 'adam_update_kernel', pid]]) {
      X({cat: 'nvtx', name: phase, pid, tid, ts: t + from, dur: to - from, args: {}});
      for (let at = from + 20, n = 0; at + 180 < to; n++) {
        // The fourth launch of step 2's forward pass waits 400 µs at the gate (a 50% cap).
        const gated = step === 2 && phase === 'forward' && n === 3;
        const wait = gated ? 400 : 0;
        X({cat: 'api', name: 'cuLaunchKernel', pid, tid, ts: t + at, dur: 6 + wait,
           args: {kernel, stream: 7, grid: [128, 1, 1], block: [256, 1, 1]}});
        if (gated) X({cat: 'gate', name: 'compute gate wait', pid, tid, ts: t + at + 2, dur: wait, args: {cap: '50%'}});
        X({cat: 'kernel', name: kernel, pid, tid: STREAM + 7, ts: t + at + wait + 12, dur: 170,
           args: {grid: [128, 1, 1], block: [256, 1, 1], correlation: step * 1000 + at}});
        at += 220 + wait;
      }
    }
    if (step === 0) {
      X({cat: 'api', name: 'cuMemsetD8Async', pid, tid: pid, ts: t + 650, dur: 5, args: {bytes: 8 * MiB, stream: 7}});
      X({cat: 'memset', name: 'Memset', pid, tid: STREAM + 7, ts: t + 660, dur: 30, args: {bytes: 8 * MiB}});
    }
    X({cat: 'api', name: 'cuStreamSynchronize', pid, tid: pid, ts: t + 7500, dur: 90, args: {stream: 7}});
    ev.push({ph: 'i', s: 't', cat: 'nvtx', name: 'step done', pid, tid: pid, ts: t + 7595, args: {step}});
    // The data loader copies the next batch.
    X({cat: 'api', name: 'cuMemcpyHtoD', pid: loader, tid: loader, ts: t + 2000, dur: 900, args: {bytes: 64 * MiB}});
    X({cat: 'memcpy', name: 'HtoD', pid: loader, tid: STREAM + 2, ts: t + 2010, dur: 880, args: {bytes: 64 * MiB}});
    for (let ms = 0; ms < 8; ms++) {
      ev.push({ph: 'C', name: 'GPU utilisation', pid, tid: pid, ts: t + ms * 1000,
               args: {percent: step === 4 && ms < 2 ? 0 : 55 + ((step * 7 + ms * 13) % 40)}});
    }
    memory += 256 * MiB;
    ev.push({ph: 'C', name: 'slice memory', pid, tid: pid, ts: t, args: {bytes: memory}});
  }
  return {traceEvents: ev, displayTimeUnit: 'ns',
          otherData: {gslice: {version: 1, slice, started_unix_ns: Date.now() * 1e6, dropped_events: 0}}};
}

// 100k events: 50k launches on one thread and their 50k kernels on one stream, over a second.
function largeTrace(slice) {
  const pid = 777;
  const ev = names(pid, `python3 (slice ${slice})`, [[pid, 'python3'], [STREAM + 1, 'stream 1']]);
  for (let i = 0; i < 50000; i++) {
    const ts = 100 + i * 20;
    ev.push({ph: 'X', cat: 'api', name: 'cuLaunchKernel', pid, tid: pid, ts, dur: 4, args: {kernel: `k${i % 10}`, stream: 1}});
    ev.push({ph: 'X', cat: 'kernel', name: `k${i % 10}`, pid, tid: STREAM + 1, ts: ts + 5, dur: 12, args: {i}});
  }
  return {traceEvents: ev, displayTimeUnit: 'ns',
          otherData: {gslice: {version: 1, slice, started_unix_ns: Date.now() * 1e6, dropped_events: 1234}}};
}

// A remote run as `gslice run --remote --trace` merges it (docs/trace.md, "Remote programs"):
// the client's calls with their network slices and flows, the worker's served requests around
// its driver calls, and its kernels, on the client's clock.
function remoteTrace(slice) {
  const client = 5100, worker = 5200, lane = 5203;
  const ev = [
    ...names(client, 'python3 (remote client, worker pid 5200)', [[client, 'python3']]),
    ...names(worker, `gslice-remoted (slice ${slice})`, [[lane, 'serving lane 0'], [STREAM + 1, 'stream 1']]),
  ];
  for (let i = 0; i < 20; i++) {
    const t = 1000 + i * 500, seq = i + 2;
    ev.push({ph: 'X', cat: 'remote', name: 'cuStreamSynchronize', pid: client, tid: client, ts: t, dur: 400,
             args: {mode: 'round trip', lane: 0, seq, worker_us: 300, network_queue_us: 100}});
    ev.push({ph: 'X', cat: 'network', name: 'request: network + queue', pid: client, tid: client, ts: t, dur: 60});
    ev.push({ph: 'X', cat: 'network', name: 'reply: network', pid: client, tid: client, ts: t + 360, dur: 40});
    ev.push({ph: 's', cat: 'remote', name: 'remote call', id: seq, pid: client, tid: client, ts: t});
    ev.push({ph: 'f', bp: 'e', cat: 'remote', name: 'remote call', id: seq, pid: worker, tid: lane, ts: t + 60});
    ev.push({ph: 'X', cat: 'remote', name: 'serve cuStreamSynchronize', pid: worker, tid: lane, ts: t + 60, dur: 300,
             args: {seq, lane: 0, client_pid: client, client_tid: client}});
    ev.push({ph: 'X', cat: 'api', name: 'cuStreamSynchronize', pid: worker, tid: lane, ts: t + 61, dur: 298});
    ev.push({ph: 'X', cat: 'kernel', name: 'gemm', pid: worker, tid: STREAM + 1, ts: t + 20, dur: 330,
             args: {stream: 1, device: 0}});
  }
  return {traceEvents: ev, displayTimeUnit: 'ns',
          otherData: {gslice: {version: 1, slice, started_unix_ns: Date.now() * 1e6, dropped_events: 0,
                               clock_uncertainty_ns: 9000}}};
}

run('timeline', async (world) => {
  await world.startGsliced();
  for (const s of [
    {name: 'train', user: 'alice', gpus: [{gpu: '0', memory: '8GiB', compute: '50%'}]},
    {name: 'fresh', user: 'bob', gpus: [{gpu: '1', memory: '2GiB'}]},
    {name: 'big', user: 'carol', gpus: [{gpu: '1', memory: '2GiB'}]},
    {name: 'remote-7', user: 'dave', gpus: [{gpu: '0', memory: '1GiB'}]},
  ]) {
    const r = await world.call('POST', '/v1/slices', s);
    assert.equal(r.status, 201, JSON.stringify(r.json));
  }
  // As the recorder leaves them: beside gsliced's database, mode 0640.
  const traces = path.join(world.dir, 'traces');
  fs.mkdirSync(traces);
  for (const [slice, trace] of [['train', trainingTrace('train')], ['big', largeTrace('big')],
                                 ['remote-7', remoteTrace('remote-7')]]) {
    fs.writeFileSync(path.join(traces, `${slice}.json`), JSON.stringify(trace), {mode: 0o640});
  }
  assert.equal((await world.call('GET', '/v1/slices/train/trace')).json.otherData.gslice.slice, 'train');

  const context = await world.browser();
  const page = await context.newPage();
  const problems = [];
  const base = world.base;
  page.on('request', (req) => {
    if (!req.url().startsWith(base + '/')) problems.push(`request outside gsliced: ${req.url()}`);
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => m.type() === 'error' && problems.push(`console error: ${m.text()}`));
  const notFound = [];
  page.on('response', (r) => {
    if (r.status() < 400) return;
    if (r.status() === 404 && r.url() === `${base}/v1/slices/fresh/trace`) notFound.push(r.url());
    else problems.push(`HTTP ${r.status()} for ${r.url()}`);
  });

  // From the node's page to the slice's, by its link.
  await page.goto(`${base}/#token=${world.token}`);
  await page.locator('#slices tr[data-slice="train"] a.slice-link').click();
  assert.equal(page.url(), `${base}/#slice=train`);
  await page.waitForSelector('#slice-page[data-trace="loaded"]', {timeout: 10000});
  assert.ok(await page.locator('#overview').isHidden(), 'the slice page replaces the node overview');
  assert.equal(await page.locator('#slice-title').textContent(), 'train');
  assert.match(await page.locator('#slice-summary').textContent(), /user alice.*memory 0 B \/ 8 GiB/);
  assert.match(await page.locator('#trace-info').textContent(), /\d+ events · 2 processes · 47\.6 ms · recorded /);

  // The rows: one group per process, its threads, streams and counters.
  const rows = await page.evaluate(() => window.gsliceTimeline.rows());
  const summary = rows.map((r) => `${r.kind}:${r.name}`);
  assert.deepEqual(summary, [
    'process:python3 (slice train) · pid 4242',
    'thread:python3', 'thread:pt_autograd_0', 'stream:stream 7', 'stream:stream 13',
    'counter:GPU utilisation', 'counter:slice memory',
    'process:python3 (slice train) · pid 4343',
    'thread:python3', 'stream:stream 2',
  ]);
  const main = rows[1];
  assert.equal(main.tid, 4242);
  // train_step > forward > cuLaunchKernel > compute gate wait: four lanes.
  assert.equal(main.lanes, 4, JSON.stringify(main));
  assert.equal(rows[3].tid, 1000000007);
  assert.equal(await page.locator('#trace-rows li').count(), rows.length, 'the rows as text for screen readers');
  // Nesting by time, whatever the order of the file.
  const depths = await page.evaluate(() => {
    const out = {};
    const t = window.gsliceTimeline.model.processes[0].tracks[0];
    t.lanes.forEach((lane, d) => lane.events.forEach((e) => { out[e.name] = Math.max(out[e.name] ?? 0, d); }));
    return out;
  });
  assert.deepEqual([depths.train_step, depths.forward, depths.cuLaunchKernel, depths['compute gate wait'],
                    depths.suspended], [0, 1, 2, 3, 2], JSON.stringify(depths));

  // Zoom and pan change the window.
  const view = () => page.evaluate(() => ({...window.gsliceTimeline.view}));
  const span = (v) => v.end - v.start;
  const full = await view();
  assert.ok(full.start <= 0 && full.end >= 47600, JSON.stringify(full));
  await page.locator('button[data-trace="zoom-in"]').click();
  await page.locator('button[data-trace="zoom-in"]').click();
  const zoomed = await view();
  assert.ok(Math.abs(span(zoomed) - span(full) / 4) < 1e-6 * span(full), JSON.stringify({full, zoomed}));
  await page.locator('button[data-trace="pan-right"]').click();
  const panned = await view();
  assert.ok(Math.abs(panned.start - zoomed.start - span(zoomed) / 4) < 1e-6 * span(full), JSON.stringify({zoomed, panned}));
  // The wheel zooms about the pointer: the time under it stays put.
  const box = await page.locator('#trace-canvas').boundingBox();
  const x = box.x + 210 + (box.width - 210) * 0.75;
  await page.mouse.move(x, box.y + 10);
  const before = await view();
  await page.mouse.wheel(0, -400);
  const after = await waitFor('the wheel to zoom', async () => {
    const v = await view();
    return span(v) < span(before) * 0.9 && v;
  });
  const under = (v) => v.start + span(v) * 0.75;
  assert.ok(Math.abs(under(after) - under(before)) < span(before) * 0.01, JSON.stringify({before, after}));
  // Dragging 200 pixels left shows later times.
  const k = span(after) / (box.width - 210);
  await page.mouse.down();
  await page.mouse.move(x - 200, box.y + 10, {steps: 5});
  await page.mouse.up();
  const dragged = await view();
  assert.ok(Math.abs(dragged.start - after.start - 200 * k) < 2 * k, JSON.stringify({after, dragged}));
  assert.equal(await page.locator('#trace-canvas').getAttribute('data-view-start'), String(dragged.start));
  await page.locator('button[data-trace="fit"]').click();
  assert.deepEqual(await view(), full);

  // Hover: name, duration and arguments of the event under the pointer.
  await page.evaluate(() => window.gsliceTimeline.setView(17000, 19500));  // step 2's gated launch
  const hover = async (name, tid) => {
    const p = await page.evaluate(([n, t]) => window.gsliceTimeline.pointOf(n, undefined, t), [name, tid]);
    assert.ok(p, `${name} is visible`);
    await page.mouse.move(p.x, p.y);
    await page.waitForSelector('#trace-tooltip:not(.hidden)', {timeout: 5000});
    return {text: await page.locator('#trace-tooltip').textContent(),
            hovered: await page.evaluate(() => window.gsliceTimeline.hovered)};
  };
  let h = await hover('compute gate wait', 4242);
  assert.equal(h.hovered.name, 'compute gate wait');
  assert.equal(h.hovered.cat, 'gate');
  assert.match(h.text, /compute gate wait.*gate · python3.*duration 400 µs.*cap: 50%/s);
  h = await hover('conv2d_fwd_kernel', 1000000007);
  assert.match(h.text, /conv2d_fwd_kernel.*kernel · stream 7.*duration 170 µs.*grid: \[128,1,1\]/s);
  assert.equal(h.hovered.row, 'stream 7');
  h = await hover('cuLaunchKernel', 4242);
  assert.match(h.text, /kernel: conv2d_fwd_kernel.*stream: 7/s);
  await page.mouse.move(box.x + 5, box.y + 5);  // the label column: nothing
  await page.waitForSelector('#trace-tooltip.hidden', {state: 'attached', timeout: 5000});

  // A click on a process's header folds its rows, another unfolds them.
  const header = async (pid) => {
    const r = (await page.evaluate(() => window.gsliceTimeline.rows())).find((x) => x.kind === 'process' && x.pid === pid);
    const c = await page.locator('#trace-canvas').boundingBox();
    await page.mouse.click(c.x + 60, c.y + r.y + r.height / 2);
    return page.evaluate(() => window.gsliceTimeline.rows());
  };
  const folded = await header(4343);
  assert.equal(folded.length, rows.length - 2, 'the loader\'s two rows are folded');
  assert.ok(folded.find((r) => r.pid === 4343).collapsed);
  const unfolded = await header(4343);
  assert.deepEqual(unfolded.map((r) => r.name), rows.map((r) => r.name));

  // The picture for docs/trace.md: two steps, a kernel's details showing.
  await page.evaluate(() => window.gsliceTimeline.setView(16500, 26000));
  await hover('conv2d_fwd_kernel', 1000000007);
  const shotDir = process.env.GSLICE_SCREENSHOT_DIR || world.dir;
  fs.mkdirSync(shotDir, {recursive: true});
  const shot = path.join(shotDir, 'trace-dashboard.png');
  await page.locator('#slice-page').screenshot({path: shot});
  assert.ok(fs.statSync(shot).size > 20000, 'the screenshot has content');
  console.log(`screenshot: ${shot}`);

  // A slice with no trace: what to run.
  await page.goto(`${base}/#slice=fresh`);
  await page.waitForSelector('#slice-page[data-trace="none"]', {timeout: 10000});
  assert.equal(await page.locator('#trace-command').textContent(), 'gslice trace fresh --seconds 10');
  assert.ok(await page.locator('#trace-view').isHidden());
  assert.equal(notFound.length, 1, 'the page asked once');

  // 100k events: drawn culled to the window (at most a rectangle per pixel per lane).
  await page.goto(`${base}/#slice=big`);
  await page.waitForSelector('#slice-page[data-trace="loaded"]', {timeout: 20000});
  assert.match(await page.locator('#trace-info').textContent(), /100000 events · 1 process .*1234 dropped/);
  const drawn = () => page.evaluate(() => new Promise((resolve) =>
    requestAnimationFrame(() => requestAnimationFrame(() => resolve({...window.gsliceTimeline.lastDraw})))));
  const width = (await page.locator('#trace-canvas').boundingBox()).width;
  const whole = await drawn();
  assert.ok(whole.rects > 0 && whole.rects <= 2 * (width - 210) + 10, `whole trace: ${JSON.stringify(whole)}`);
  await page.evaluate(() => window.gsliceTimeline.setView(500000, 500400));  // 400 µs: 20 launches, 20 kernels
  const narrow = await drawn();
  assert.ok(narrow.rects >= 38 && narrow.rects <= 44, `400 µs window: ${JSON.stringify(narrow)}`);
  h = await hover('k5', 1000000001);
  assert.match(h.text, /k5.*kernel · stream 1.*duration 12 µs/s);

  // A remote run: the client and its worker, each call above its network slices, each served
  // request above the worker's driver call.
  await page.goto(`${base}/#slice=remote-7`);
  await page.waitForSelector('#slice-page[data-trace="loaded"]', {timeout: 10000});
  assert.match(await page.locator('#trace-info').textContent(), /\d+ events · 2 processes/);
  const remoteRows = await page.evaluate(() => window.gsliceTimeline.rows());
  assert.deepEqual(remoteRows.map((r) => `${r.kind}:${r.name}:${r.lanes ?? ''}`), [
    'process:python3 (remote client, worker pid 5200) · pid 5100:0', 'thread:python3:2',
    'process:gslice-remoted (slice remote-7) · pid 5200:0', 'thread:serving lane 0:2', 'stream:stream 1:1',
  ]);
  // Each call's flow to the worker's execution of it is an arrow between the two rows.
  assert.equal((await drawn()).flows, 20);
  await page.evaluate(() => window.gsliceTimeline.setView(0, 400));  // the first call only
  assert.equal((await drawn()).flows, 1);

  // Back to the node.
  await page.locator('#back-link').click();
  await page.waitForSelector('#overview:not(.hidden)');
  assert.ok(await page.locator('#slice-page').isHidden());

  // The expected 404 is logged by Chromium as a console error; nothing else may be.
  const rest = problems.filter((p) => !/status of 404 \(Not Found\)/.test(p));
  assert.deepEqual(rest, [], 'no errors and no request outside gsliced');
});
