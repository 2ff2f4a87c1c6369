// A picture of a real trace in the dashboard (for docs/trace.md): gsliced on the simulated
// driver is given TRACE as the latest trace of a slice, the slice's page draws it in headless
// Chromium, and the page is saved as OUT (PNG). Not a test; run from tests/web:
//
//   GSLICED=build/bin/gsliced GSLICE_SIM_NVML=build/lib/sim/libnvidia-ml.so.1 \
//     node trace_screenshot.js TRACE.json OUT.png [--from MS --to MS] [--hover NAME]
//
// --from/--to: the window, in milliseconds from the trace's first event (default: all of it);
// --hover: a kernel or range name whose first event in the window gets the pointer, so that
// its details show. The slice's name is the trace's own (otherData.gslice.slice) or "train".
'use strict';

const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const {requireEnv, run} = require('./harness');

requireEnv(['GSLICED', 'GSLICE_SIM_NVML']);

const args = process.argv.slice(2);
const flag = (name) => {
  const at = args.indexOf(name);
  if (at < 0) return undefined;
  const v = args[at + 1];
  args.splice(at, 2);
  return v;
};
const fromMs = flag('--from'), toMs = flag('--to'), hoverName = flag('--hover');
if (args.length !== 2) {
  console.error('usage: node trace_screenshot.js TRACE.json OUT.png [--from MS --to MS] [--hover NAME]');
  process.exit(2);
}
const [tracePath, outPath] = args.map((p) => path.resolve(p));
const trace = JSON.parse(fs.readFileSync(tracePath, 'utf8'));
const slice = (trace.otherData && trace.otherData.gslice && trace.otherData.gslice.slice) || 'train';
if (!/^[a-z0-9][a-z0-9-]{0,62}$/.test(slice)) {
  console.error(`the trace names its slice ${JSON.stringify(slice)}, which is not a slice name`);
  process.exit(2);
}

run('trace-screenshot', async (world) => {
  await world.startGsliced();
  const r = await world.call('POST', '/v1/slices', {name: slice, gpus: [{gpu: '0', memory: '16GiB'}]});
  assert.equal(r.status, 201, JSON.stringify(r.json));
  fs.mkdirSync(path.join(world.dir, 'traces'));
  fs.copyFileSync(tracePath, path.join(world.dir, 'traces', `${slice}.json`));
  const context = await world.browser({width: 1600, height: 1100});
  const page = await context.newPage();
  await page.goto(`${world.base}/#token=${world.token}`);
  await page.goto(`${world.base}/#slice=${slice}`);
  await page.waitForSelector('#slice-page[data-trace="loaded"]', {timeout: 60000});
  if (fromMs !== undefined && toMs !== undefined) {
    await page.evaluate(([a, b]) => {
      const t = window.gsliceTimeline;
      t.setView(t.model.start + a, t.model.start + b);
    }, [Number(fromMs) * 1000, Number(toMs) * 1000]);
  }
  if (hoverName) {
    const at = await page.evaluate((name) => window.gsliceTimeline.pointOf(name), hoverName);
    if (at) {
      await page.mouse.move(at.x, at.y);
      await page.waitForSelector('#trace-tooltip:not(.hidden)', {timeout: 5000});
    } else {
      console.error(`no event named ${hoverName} in the window: no pointer`);
    }
  }
  await page.locator('#slice-page').screenshot({path: outPath});
  console.log(`${outPath}: ${(await page.locator('#trace-info').textContent()).trim()}`);
});
