// End-to-end test of gsliced's dashboard: starts gsliced on the simulated driver (TCP with a
// token), gives it slices with live usage, opens the page in headless Chromium and checks
// what a person would see: GPU cards, charts that draw, slice states (running, idle,
// throttled), processes, live updates, the token prompt, and no request leaving gsliced; then
// acts from the page: creates, changes, suspends, resumes and deletes a slice in which a
// program runs on the simulated driver, with gsliced's own messages for what it refuses.
// Writes a screenshot to $GSLICE_SCREENSHOT_DIR/dashboard.png.
'use strict';

const assert = require('node:assert/strict');
const {spawn} = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const {freePort, requireEnv, sleep, waitFor} = require('./harness');

let chromium;
try {
  ({chromium} = require('playwright-core'));
} catch (e) {
  console.error('playwright-core is not installed: run `npm ci` in tests/web (scripts/setup does)');
  process.exit(1);
}
requireEnv(['GSLICED', 'GSLICE_SIM_NVML', 'GSLICE_SLICE_USER', 'GSLICE_CLI', 'GSLICE_TEST_CLIENT']);
const CHROMIUM = process.env.GSLICE_CHROMIUM || '/usr/bin/chromium';
if (!fs.existsSync(CHROMIUM)) {
  console.error(`${CHROMIUM} not found: install Debian's chromium (scripts/setup does)`);
  process.exit(1);
}

const GiB = 2 ** 30;
const tag = `gslice-test-${process.pid}-web`;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), `${tag}-`));
const ledger = `/dev/shm/${tag}-ledger`;
const simState = `/dev/shm/${tag}-sim`;
const board = `/dev/shm/${tag}-suspend-board`;
const children = [];


function cleanup() {
  for (const c of children) {
    try { c.kill('SIGTERM'); } catch (e) { /* gone */ }
  }
  for (const f of [ledger, simState, board]) fs.rmSync(f, {recursive: true, force: true});
  fs.rmSync(dir, {recursive: true, force: true});
}

async function main() {
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const token = crypto.randomBytes(24).toString('hex');
  fs.writeFileSync(path.join(dir, 'token'), token + '\n', {mode: 0o600});
  fs.writeFileSync(path.join(dir, 'gsliced.toml'), [
    `socket = "${dir}/api.sock"`,
    `database = "${dir}/gsliced.db"`,
    `ledger = "${ledger}"`,
    `tcp = "127.0.0.1:${port}"`,
    `token_file = "${dir}/token"`,
    'sample_interval_ms = 250',
  ].join('\n') + '\n');
  const env = {...process.env, GSLICE_SIM_STATE: simState, GSLICE_SUSPEND_BOARD: board};
  const log = fs.openSync(path.join(dir, 'gsliced.log'), 'a');
  // --sim: the simulated driver's NVML and checkpoint API (suspend and resume work).
  const daemon = spawn(process.env.GSLICED, ['--config', path.join(dir, 'gsliced.toml'), '--sim'],
                       {env, stdio: ['ignore', log, log]});
  children.push(daemon);
  daemon.on('exit', (code) => {
    if (code !== null && code !== 0) console.error(fs.readFileSync(path.join(dir, 'gsliced.log'), 'utf8'));
  });

  const auth = {Authorization: `Bearer ${token}`, 'Content-Type': 'application/json'};
  const call = async (method, p, body) => {
    const res = await fetch(base + p, {method, headers: auth, body: body && JSON.stringify(body)});
    const json = await res.json();
    return {status: res.status, json};
  };
  await waitFor('gsliced to answer', async () => (await call('GET', '/healthz')).status === 200);

  const {json: {gpus}} = await call('GET', '/v1/gpus');
  assert.equal(gpus.length, 2, 'the sim has two GPUs');
  assert.equal((await call('POST', '/v1/projects', {name: 'vision', memory_quota: '16GiB', priority: 5})).status, 201);
  for (const s of [
    {name: 'train', user: 'alice', gpus: [{gpu: '0', memory: '8GiB', compute: '50%'}]},
    {name: 'notebook', user: 'bob', project: 'vision', gpus: [{gpu: '1', memory: '4GiB', compute: '25%'}]},
    {name: 'scratch', user: 'carol', class: 'opportunistic', gpus: [{gpu: '0', memory: '6GiB'}]},
  ]) {
    const r = await call('POST', '/v1/slices', s);
    assert.equal(r.status, 201, JSON.stringify(r.json));
  }
  // Processes at work: "train" holds 6 GiB and keeps its GPU 45% busy; "scratch" (opportunistic,
  // same GPU) holds 3 GiB, so guaranteed work running beside it makes it "throttled".
  for (const args of [['train', gpus[0].uuid, 6 * GiB, 0.45], ['scratch', gpus[0].uuid, 3 * GiB, 0.2, 'opportunistic']]) {
    children.push(spawn(process.env.GSLICE_SLICE_USER, [ledger, ...args.map(String)], {env, stdio: 'inherit'}));
  }

  // A fresh profile (playwright passes it as --user-data-dir).
  const context = await chromium.launchPersistentContext(path.join(dir, 'chromium'), {
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: {width: 1440, height: 1000},
    deviceScaleFactor: 1,
  });
  try {
    const page = await context.newPage();
    const problems = [];
    page.on('request', (req) => {
      if (!req.url().startsWith(base + '/')) problems.push(`request outside gsliced: ${req.url()}`);
    });
    page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
    // Refused actions answer 4xx on purpose (their messages are checked below); reads never may.
    page.on('response', (r) => r.status() >= 400 && r.request().method() === 'GET' &&
                               problems.push(`HTTP ${r.status()} for ${r.url()}`));
    page.on('console', (m) => m.type() === 'error' && problems.push(`console error: ${m.text()}`));

    await page.goto(`${base}/#token=${token}`);
    assert.equal(await page.title(), 'gslice · node dashboard');
    await page.waitForSelector('#slices tbody tr[data-slice="train"]');
    assert.equal(await page.locator('#gpus .gpu').count(), 2, 'one card per GPU');
    assert.match(await page.locator('#gpus .gpu').first().textContent(), new RegExp(gpus[0].uuid));
    assert.equal(page.url(), `${base}/`, 'the token leaves the address bar');

    const badge = (slice) => page.locator(`#slices tr[data-slice="${slice}"] .badge`).textContent();
    await waitFor('train to run', async () => (await badge('train')) === 'running');
    await waitFor('scratch to be throttled', async () => (await badge('scratch')) === 'throttled');
    assert.equal(await badge('notebook'), 'idle');
    await waitFor('train to hold 6 GiB', async () =>
      (await page.locator('#slices tr[data-slice="train"]').textContent()).includes('6 GiB / 8 GiB'));
    assert.equal(await page.locator('#processes tbody tr').count(), 2);
    await waitFor('compute used to show', async () =>
      /\d+(\.\d)?% \/ 50%/.test(await page.locator('#slices tr[data-slice="train"]').textContent()));
    assert.match(await page.locator('#projects').textContent(), /vision.*5.*4 GiB \/ 16 GiB/s);

    // Charts draw: count coloured pixels on the canvases after some samples.
    await sleep(Number(process.env.GSLICE_DASHBOARD_SETTLE_MS || 5000));
    const inked = await page.evaluate(() => [...document.querySelectorAll('canvas.chart')].map((c) => {
      const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      let n = 0;
      for (let i = 0; i < d.length; i += 4) {
        const [r, g, b, a] = [d[i], d[i + 1], d[i + 2], d[i + 3]];
        if (a > 200 && (Math.abs(r - g) > 40 || Math.abs(g - b) > 40)) n++;  // a coloured series, not grey axes
      }
      return n;
    }));
    assert.equal(inked.length, 4, 'two GPU charts and two slice charts');
    // GPU 0 (where slices hold memory) and both slice charts draw their series; GPU 1 has
    // nothing on it and draws flat lines.
    for (const i of [0, 2, 3]) assert.ok(inked[i] > 60, `chart ${i} draws its series (coloured pixels: ${inked})`);

    // Live: a slice created now appears without a reload, and goes when deleted.
    assert.equal((await call('POST', '/v1/slices', {name: 'live-1', user: 'dave', gpus: ['1'], memory: '1GiB'})).status, 201);
    await page.waitForSelector('#slices tr[data-slice="live-1"]', {timeout: 5000});
    assert.equal((await call('DELETE', '/v1/slices/live-1')).status, 200);
    await page.waitForSelector('#slices tr[data-slice="live-1"]', {state: 'detached', timeout: 5000});

    // Acting from the page, as the token's holder (an admin, as the API says).
    page.on('dialog', (d) => d.accept());  // "Delete slice …?"
    const message = () => page.locator('#action-message').textContent();
    const row = (slice) => page.locator(`#slices tr[data-slice="${slice}"]`);
    const create = page.locator('#create-form');
    const fillCreate = async (memory) => {
      await create.locator('input[name="name"]').fill('web-1');
      await create.locator('input[name="user"]').fill('erin');
      await create.locator('select[name="gpu"]').selectOption('0');
      await create.locator('input[name="memory"]').fill(memory);
      await create.locator('button[type="submit"]').click();
    };
    // Refused: the message is gsliced's, word for word as the CLI prints it; nothing is made.
    const refusedCreate = {name: 'web-1', user: 'erin', class: 'guaranteed', gpus: [{gpu: '0', memory: '10GiB'}]};
    const refusal = (await call('POST', '/v1/slices', refusedCreate)).json.error;
    assert.match(refusal, /8 GiB guaranteed memory free, asked 10 GiB/);
    await fillCreate('10GiB');
    await waitFor('the refusal', async () => (await message()) === `create web-1: ${refusal}`);
    assert.equal((await call('GET', '/v1/slices/web-1')).status, 404);
    await fillCreate('1GiB');
    await waitFor('the slice to be made', async () => (await message()) === 'create web-1: done');
    await page.waitForSelector('#slices tr[data-slice="web-1"]', {timeout: 5000});
    assert.equal((await call('GET', '/v1/slices/web-1')).json.user, 'erin');

    // A program runs in it (gslice run --name takes the slice from gsliced).
    const programEnv = {...env, GSLICE_SOCKET: `${dir}/api.sock`, GSLICE_LEDGER: ledger, GSLICE_CONTEXT_OVERHEAD: '0'};
    if (process.env.GSLICE_TEST_ASAN_RUNTIME) {
      // Under the sanitize preset the shims are instrumented: the ASan runtime goes first.
      Object.assign(programEnv, {LD_PRELOAD: process.env.GSLICE_TEST_ASAN_RUNTIME, ASAN_OPTIONS: 'detect_leaks=0'});
    }
    const program = spawn(process.env.GSLICE_CLI, ['run', '--sim', '--name', 'web-1', '--', process.env.GSLICE_TEST_CLIENT, 'watch'],
                          {env: programEnv, stdio: ['pipe', 'pipe', 'inherit']});
    children.push(program);
    let out = '';
    program.stdout.on('data', (d) => { out += d; });
    const ask = async (command) => {
      const before = out.length;
      program.stdin.write(command + '\n');
      await waitFor(`the program to answer ${command}`, async () => out.length > before && out.endsWith('\n'));
      return out.slice(before).trim();
    };
    await waitFor('the program to start', async () => out.startsWith('ready\n'));
    assert.equal(await ask('alloc 536870912'), 'ok');
    await waitFor('its process to show', async () => (await row('web-1').textContent()).includes('512 MiB / 1 GiB'));

    // Change: the running program sees the new limit.
    const change = async (fields) => {
      await row('web-1').locator('button[data-action="resize"]').click();
      const form = page.locator('#resize-form');
      for (const [field, value] of Object.entries(fields)) {
        if (field === 'make_room') await form.locator('input[name="make_room"]').check();
        else await form.locator(`[name="${field}"]`).fill(value);
      }
      await form.locator('button[value="apply"]').click();
    };
    await change({memory: '3GiB', compute_cap: '50%'});
    await waitFor('the change', async () => (await message()) === 'change web-1: done');
    assert.match(await ask('info'), new RegExp(`^total=${3 * GiB} `));
    assert.equal((await call('GET', '/v1/slices/web-1')).json.gpus[0].compute_cap, 0.5);
    await waitFor('the new limit to show', async () => (await row('web-1').textContent()).includes('/ 3 GiB'));
    // A shrink below what it holds: gsliced's refusal, and nothing changes.
    await change({memory: '256MiB'});
    await waitFor('the refused shrink', async () =>
      /^change web-1: slice 'web-1' holds 512 MiB on GPU 0 .*nothing changed/.test(await message()));
    await page.locator('#resize-form button[value="cancel"]').click();
    assert.match(await ask('info'), new RegExp(`^total=${3 * GiB} `));
    // Suspend and resume.
    await row('web-1').locator('button[data-action="suspend"]').click();
    await waitFor('the suspension', async () => (await message()) === 'suspend web-1: done');
    await waitFor('the badge', async () => (await row('web-1').locator('.badge').textContent()) === 'suspended');
    await row('web-1').locator('button[data-action="resume"]').click();
    await waitFor('the resumption', async () => (await message()) === 'resume web-1: done');
    await waitFor('the badge', async () => (await row('web-1').locator('.badge').textContent()) !== 'suspended');
    assert.equal(await ask('free'), 'freed');
    // Delete.
    await row('web-1').locator('button[data-action="delete"]').click();
    await waitFor('the deletion', async () => (await message()) === 'delete web-1: done');
    await page.waitForSelector('#slices tr[data-slice="web-1"]', {state: 'detached', timeout: 5000});
    program.stdin.end();

    const shotDir = process.env.GSLICE_SCREENSHOT_DIR || dir;
    fs.mkdirSync(shotDir, {recursive: true});
    const shot = path.join(shotDir, 'dashboard.png');
    await page.screenshot({path: shot, fullPage: true});
    assert.ok(fs.statSync(shot).size > 20000, 'the screenshot has content');
    console.log(`screenshot: ${shot}`);

    // Chromium logs each refused action's answer (the two 409s above) as a console error.
    const refused = problems.filter((p) => /status of 409 \(Conflict\)/.test(p));
    assert.equal(refused.length, 2, `the two refusals: ${problems}`);
    assert.deepEqual(problems.filter((p) => !refused.includes(p)), [], 'no errors and no request outside gsliced');

    // Without the token (a new tab has no session storage) the page asks for it, shows no data.
    const anonPage = await context.newPage();
    await anonPage.goto(`${base}/`);
    await anonPage.waitForSelector('#token-form:not(.hidden)', {timeout: 5000});
    assert.equal(await anonPage.locator('#slices tbody tr').count(), 0);
    assert.equal(await anonPage.locator('#status-text').textContent(), 'token needed');
    // and offers no action: without the token the API allows none.
    assert.equal(await anonPage.locator('#slices button').count(), 0);
    const anonymous = await anonPage.evaluate(async () =>
      (await fetch('/v1/slices/train', {method: 'DELETE'})).status);
    assert.equal(anonymous, 401);
    assert.equal((await call('GET', '/v1/slices/train')).status, 200);

  } finally {
    await context.close();
  }
}

main().then(() => {
  cleanup();
  console.log('dashboard test passed');
}, (e) => {
  console.error(e);
  try { console.error(fs.readFileSync(path.join(dir, 'gsliced.log'), 'utf8')); } catch (_) { /* none */ }
  cleanup();
  process.exit(1);
});
