// The dashboard's timeline model (daemon/web/timeline.js) without a browser: how a Chrome
// trace becomes processes, rows and depth lanes. The browser test (timeline.test.js) checks
// the drawing and the interaction; this one pins the model's invariants on many shapes of
// input, quickly: within a lane events are disjoint and sorted (what culling relies on), an
// event sits one lane below the innermost event open at its start, B/E pairs, instants and
// counters are read, defaults name unnamed threads and streams, and a non-trace is refused.
'use strict';

const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const vm = require('node:vm');

const source = fs.readFileSync(path.join(__dirname, '../../daemon/web/timeline.js'), 'utf8');
const sandbox = {};
vm.createContext(sandbox);
vm.runInContext(source + '\nthis.GsliceTimeline = GsliceTimeline;', sandbox);
const {buildModel, fmtTime, fmtTick, STREAM_TID_BASE} = sandbox.GsliceTimeline;
// Values made in the sandbox, as plain values of this realm (for deepEqual).
const plain = (x) => JSON.parse(JSON.stringify(x));

// A small deterministic generator (tests must not depend on Math.random).
function random(seed) {
  let s = seed >>> 0;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
}

// Nesting, whatever the order of the file: a range, a call inside it, a wait inside the call.
{
  const m = buildModel({traceEvents: [
    {ph: 'X', cat: 'gate', name: 'compute gate wait', pid: 1, tid: 1, ts: 120, dur: 50},
    {ph: 'X', cat: 'api', name: 'cuLaunchKernel', pid: 1, tid: 1, ts: 110, dur: 70},
    {ph: 'X', cat: 'nvtx', name: 'forward', pid: 1, tid: 1, ts: 100, dur: 200},
    {ph: 'X', cat: 'api', name: 'cuLaunchKernel', pid: 1, tid: 1, ts: 200, dur: 5},
    {ph: 'i', s: 't', cat: 'nvtx', name: 'mark', pid: 1, tid: 1, ts: 250},
    {ph: 'X', cat: 'kernel', name: 'k', pid: 1, tid: STREAM_TID_BASE + 3, ts: 190, dur: 40},
  ]});
  assert.equal(m.processes.length, 1);
  const [thread, stream] = m.processes[0].tracks;
  assert.equal(thread.kind, 'thread');
  assert.equal(thread.name, 'main thread 1', 'an unnamed main thread');
  assert.equal(stream.kind, 'stream');
  assert.equal(stream.name, 'stream 3', 'an unnamed stream is named by its index');
  const depth = {};
  thread.lanes.forEach((lane, d) => lane.events.forEach((e) => { depth[e.name + '@' + e.ts] = d; }));
  assert.deepEqual(depth, {'forward@0': 0, 'cuLaunchKernel@10': 1, 'compute gate wait@20': 2,
                           'cuLaunchKernel@100': 1, 'mark@150': 1}, 'times from the first event');
  assert.equal(m.end, 200);
  assert.equal(thread.lanes[1].events.find((e) => e.name === 'mark').instant, true);
}

// A remote run's merged trace (docs/trace.md, "Remote programs"): the client's call encloses
// its network slices, the worker's served request encloses its driver call, even at equal
// times; the flow between them is kept with both ends; the two processes keep their own rows.
{
  const m = buildModel({traceEvents: [
    {ph: 'M', name: 'process_name', pid: 10, args: {name: 'python3 (remote client, worker pid 20)'}},
    {ph: 'M', name: 'process_name', pid: 20, args: {name: 'gslice-remoted (slice remote-7)'}},
    {ph: 'M', name: 'thread_name', pid: 20, tid: 21, args: {name: 'serving lane 0'}},
    {ph: 'X', cat: 'network', name: 'request: network + queue', pid: 10, tid: 10, ts: 100, dur: 30},
    {ph: 'X', cat: 'network', name: 'reply: network', pid: 10, tid: 10, ts: 170, dur: 30},
    {ph: 's', cat: 'remote', name: 'remote call', id: 42, pid: 10, tid: 10, ts: 100},
    {ph: 'X', cat: 'remote', name: 'cuMemAlloc_v2', pid: 10, tid: 10, ts: 100, dur: 100, args: {seq: 5}},
    {ph: 'X', cat: 'api', name: 'cuMemAlloc_v2', pid: 20, tid: 21, ts: 130, dur: 40},
    {ph: 'f', bp: 'e', cat: 'remote', name: 'remote call', id: 42, pid: 20, tid: 21, ts: 130},
    {ph: 'X', cat: 'remote', name: 'serve cuMemAlloc_v2', pid: 20, tid: 21, ts: 130, dur: 40, args: {seq: 5}},
  ], otherData: {gslice: {version: 1, slice: 'remote-7', clock_uncertainty_ns: 9000}}});
  assert.deepEqual(plain(m.processes.map((p) => p.name)),
                   ['python3 (remote client, worker pid 20)', 'gslice-remoted (slice remote-7)']);
  const lanes = (p) => plain(m.processes[p].tracks[0].lanes.map((l) => l.events.map((e) => e.cat + ':' + e.name)));
  assert.deepEqual(lanes(0), [['remote:cuMemAlloc_v2'],
                              ['network:request: network + queue', 'network:reply: network']]);
  assert.equal(m.processes[1].tracks[0].name, 'serving lane 0');
  assert.deepEqual(lanes(1), [['remote:serve cuMemAlloc_v2'], ['api:cuMemAlloc_v2']]);
  // The flow joins the call to the execution, times from the first event.
  assert.deepEqual(plain(m.flows), [{from: {pid: 10, tid: 10, ts: 0}, to: {pid: 20, tid: 21, ts: 30}}]);
  assert.equal(m.maxFlowSpan, 30);
}

// At equal start and length an NVTX range encloses the API call, which encloses its wait.
{
  const m = buildModel({traceEvents: ['gate', 'api', 'nvtx'].map((cat) =>
    ({ph: 'X', cat, name: cat, pid: 1, tid: 2, ts: 5, dur: 10}))});
  assert.deepEqual(plain(m.processes[0].tracks[0].lanes.map((l) => l.events[0].cat)), ['nvtx', 'api', 'gate']);
}

// B/E pairs are ranges; counters keep every key; metadata names and orders.
{
  const m = buildModel({traceEvents: [
    {ph: 'M', name: 'process_name', pid: 9, tid: 9, args: {name: 'python3 (slice a)'}},
    {ph: 'M', name: 'thread_name', pid: 9, tid: 11, args: {name: 'worker'}},
    {ph: 'B', name: 'outer', cat: 'nvtx', pid: 9, tid: 11, ts: 0, args: {a: 1}},
    {ph: 'B', name: 'inner', cat: 'nvtx', pid: 9, tid: 11, ts: 2},
    {ph: 'E', pid: 9, tid: 11, ts: 4},
    {ph: 'E', pid: 9, tid: 11, ts: 10, args: {b: 2}},
    {ph: 'E', pid: 9, tid: 11, ts: 11},  // unmatched: skipped
    {ph: 'C', name: 'slice memory', pid: 9, tid: 9, ts: 3, args: {bytes: 10}},
    {ph: 'C', name: 'slice memory', pid: 9, tid: 9, ts: 1, args: {bytes: 30}},
    {ph: 's', name: 'flow', pid: 9, tid: 11, ts: 1, id: 1},  // a flow without its end: not drawn
    {ph: 'X', name: 'main', pid: 9, tid: 9, ts: 0, dur: 1},
  ], otherData: {gslice: {version: 1, slice: 'a', dropped_events: 3}}});
  const p = m.processes[0];
  assert.equal(p.name, 'python3 (slice a)');
  assert.deepEqual(plain(p.tracks.map((t) => t.kind + ':' + t.name)), ['thread:main thread 9', 'thread:worker', 'counter:slice memory']);
  const worker = p.tracks[1];
  assert.deepEqual(plain(worker.lanes.map((l) => [l.events[0].name, l.events[0].dur])), [['outer', 10], ['inner', 2]]);
  assert.deepEqual({...worker.lanes[0].events[0].args}, {a: 1, b: 2});
  const counter = p.tracks[2];
  assert.deepEqual([...counter.times], [1, 3], 'counter samples in time order');
  assert.deepEqual([...counter.series[0].values], [30, 10]);
  assert.equal(counter.series[0].max, 30);
  assert.equal(m.skipped, 1);
  assert.equal(m.flows.length, 0);
  assert.equal(m.info.dropped_events, 3);
}

// Many random nestings: lanes are sorted and disjoint, and each event's lane is the number of
// events open at its start on the stack (the innermost open one is one lane up).
for (let seed = 1; seed <= 20; seed++) {
  const rnd = random(seed);
  const events = [];
  for (let i = 0; i < 2000; i++) {
    const ts = Math.floor(rnd() * 100000) / 10;
    events.push({ph: rnd() < 0.05 ? 'i' : 'X', cat: ['api', 'nvtx', 'gate'][i % 3], name: 'e' + (i % 7),
                 pid: 1 + (i % 2), tid: 100 + (i % 3), ts, dur: Math.floor(rnd() * rnd() * 5000) / 10});
  }
  const m = buildModel({traceEvents: events});
  let seen = 0;
  for (const p of m.processes) {
    for (const t of p.tracks) {
      for (const lane of t.lanes) {
        for (let i = 0; i < lane.events.length; i++) {
          seen++;
          assert.equal(lane.starts[i], lane.events[i].ts);
          assert.equal(lane.ends[i], lane.events[i].ts + lane.events[i].dur);
          if (i > 0) assert.ok(lane.ends[i - 1] <= lane.starts[i], `seed ${seed}: lane events overlap`);
        }
      }
      // Every event below lane 0 has one in the lane above still open when it starts.
      t.lanes.forEach((lane, d) => {
        if (d === 0) return;
        const above = t.lanes[d - 1];
        for (const e of lane.events) {
          assert.ok(above.events.some((a) => a.ts <= e.ts && a.ts + a.dur > e.ts ||
                                             (a.ts === e.ts && a.dur >= e.dur)),
                    `seed ${seed}: ${JSON.stringify(e)} has nothing open above it`);
        }
      });
    }
  }
  assert.equal(seen, 2000);
}

// Not a trace: a clear error.
assert.throws(() => buildModel({events: []}), /not a Chrome trace: it has no traceEvents array/);
// A bare array is a trace too (Chrome's older form).
assert.equal(buildModel([{ph: 'X', name: 'a', pid: 1, tid: 1, ts: 0, dur: 1}]).events, 1);

assert.deepEqual([0.85, 12.5, 3420, 1.2e6, 0].map(fmtTime), ['850 ns', '12.5 µs', '3.42 ms', '1.2 s', '0']);
// Ruler ticks: neighbours differ however far into the trace the window is.
assert.deepEqual([12800000, 12805000, 12810000].map((t) => fmtTick(t, 5000)), ['12.800 s', '12.805 s', '12.810 s']);
assert.deepEqual([812500, 813000].map((t) => fmtTick(t, 500)), ['812.5 ms', '813.0 ms']);
assert.equal(fmtTick(2000000, 1000000), '2 s');
assert.equal(fmtTick(250, 50), '250 µs');
console.log('timeline model test passed');
