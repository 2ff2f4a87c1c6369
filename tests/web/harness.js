// What the browser tests share: a gsliced on the simulated driver (TCP with a token, its state
// in a private folder), headless Debian Chromium driven by playwright-core, and polling.
// Everything made lives under one pid-named folder (and /dev/shm paths of the same tag),
// removed by cleanup() whatever happened.
'use strict';

const {spawn} = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

let chromium;
try {
  ({chromium} = require('playwright-core'));
} catch (e) {
  console.error('playwright-core is not installed: run `npm ci` in tests/web (scripts/setup does)');
  process.exit(1);
}

const CHROMIUM = process.env.GSLICE_CHROMIUM || '/usr/bin/chromium';

// Exits with a message unless each of `vars` is set (ctest sets them).
function requireEnv(vars) {
  for (const v of vars) {
    if (!process.env[v]) {
      console.error(`${v} is not set: run this test through ctest (tests/daemon/CMakeLists.txt sets it)`);
      process.exit(1);
    }
  }
  if (!fs.existsSync(CHROMIUM)) {
    console.error(`${CHROMIUM} not found: install Debian's chromium (scripts/setup does)`);
    process.exit(1);
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitFor(what, fn, timeoutMs = 20000) {
  const until = Date.now() + timeoutMs;
  let last;
  while (Date.now() < until) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    await sleep(100);
  }
  throw new Error(`timed out waiting for ${what} (last: ${last})`);
}

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const {port} = s.address();
      s.close(() => resolve(port));
    });
  });
}

// A test's private world, named `gslice-test-<pid>-<what>`.
class World {
  constructor(what) {
    this.tag = `gslice-test-${process.pid}-${what}`;
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), `${this.tag}-`));
    this.ledger = `/dev/shm/${this.tag}-ledger`;
    this.simState = `/dev/shm/${this.tag}-sim`;
    this.board = `/dev/shm/${this.tag}-suspend-board`;
    this.env = {...process.env, GSLICE_SIM_STATE: this.simState, GSLICE_SUSPEND_BOARD: this.board};
    this.children = [];
  }

  // Starts `gsliced --sim` serving TCP with a fresh token; its database (and so its state
  // folder, where traces live) is this world's folder. Resolves once it answers.
  async startGsliced() {
    const port = await freePort();
    this.base = `http://127.0.0.1:${port}`;
    this.token = crypto.randomBytes(24).toString('hex');
    fs.writeFileSync(path.join(this.dir, 'token'), this.token + '\n', {mode: 0o600});
    fs.writeFileSync(path.join(this.dir, 'gsliced.toml'), [
      `socket = "${this.dir}/api.sock"`,
      `database = "${this.dir}/gsliced.db"`,
      `ledger = "${this.ledger}"`,
      `tcp = "127.0.0.1:${port}"`,
      `token_file = "${this.dir}/token"`,
      'sample_interval_ms = 250',
    ].join('\n') + '\n');
    const log = fs.openSync(path.join(this.dir, 'gsliced.log'), 'a');
    const daemon = spawn(process.env.GSLICED, ['--config', path.join(this.dir, 'gsliced.toml'), '--sim'],
                         {env: this.env, stdio: ['ignore', log, log]});
    this.children.push(daemon);
    await waitFor('gsliced to answer', async () => (await this.call('GET', '/healthz')).status === 200);
  }

  // Calls gsliced's API with the token; resolves to {status, json}.
  async call(method, p, body) {
    const headers = {Authorization: `Bearer ${this.token}`, 'Content-Type': 'application/json'};
    const res = await fetch(this.base + p, {method, headers, body: body && JSON.stringify(body)});
    return {status: res.status, json: await res.json()};
  }

  // Headless Chromium with a fresh profile in this world's folder.
  async browser(viewport = {width: 1440, height: 1000}) {
    this.context = await chromium.launchPersistentContext(path.join(this.dir, 'chromium'), {
      executablePath: CHROMIUM,
      headless: true,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
             '--disable-background-networking', '--disable-component-update', '--disable-sync'],
      viewport,
      deviceScaleFactor: 1,
    });
    return this.context;
  }

  log() {
    try { return fs.readFileSync(path.join(this.dir, 'gsliced.log'), 'utf8'); } catch (e) { return ''; }
  }

  async cleanup() {
    if (this.context) await this.context.close().catch(() => {});
    for (const c of this.children) {
      try { c.kill('SIGTERM'); } catch (e) { /* gone */ }
    }
    for (const f of [this.ledger, this.simState, this.board]) fs.rmSync(f, {recursive: true, force: true});
    fs.rmSync(this.dir, {recursive: true, force: true});
  }
}

// Runs `body(world)`, then cleans up; exits 1 with gsliced's log on failure.
function run(what, body) {
  const world = new World(what);
  body(world).then(async () => {
    await world.cleanup();
    console.log(`${what} test passed`);
  }, async (e) => {
    console.error(e);
    console.error(world.log());
    await world.cleanup();
    process.exit(1);
  });
}

module.exports = {freePort, requireEnv, run, sleep, waitFor};
