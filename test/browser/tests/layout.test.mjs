// What a user sees of the room app on a laptop (1100×700) and on a phone
// (390×844), in Chromium and Firefox: both tiles, every control button and the
// stats panel (the Connection card) on screen, nothing cut off by its panel,
// no sideways scrolling. Screenshots of each case go to out/layout-*.png.
import test from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { launchChromium, launchFirefox } from '../lib/browsers.mjs';
import { Participant, waitFor, sleep } from '../lib/page.mjs';
import { scenario } from '../lib/scenario.mjs';
import { outDir } from '../lib/server.mjs';

const sizes = [
  { name: 'laptop', width: 1100, height: 700 },
  { name: 'phone', width: 390, height: 844 },
];

// Playwright and Puppeteer name the call differently.
const resize = (page, { width, height }) =>
  typeof page.setViewportSize === 'function' ? page.setViewportSize({ width, height }) : page.setViewport({ width, height });

// Runs in the page: measures what is on screen and returns the problems found.
function measure() {
  const problems = [];
  const de = document.documentElement;
  const vw = de.clientWidth;
  const vh = de.clientHeight;
  const r1 = (n) => Math.round(n);
  const name = (el) =>
    el.id
      ? `#${el.id}`
      : `${el.tagName.toLowerCase()}${[...el.classList].map((c) => `.${c}`).join('')}${el.children.length === 0 ? ` "${el.textContent.trim().slice(0, 24)}"` : ''}`;
  const shown = (el) => el.getClientRects().length > 0 && getComputedStyle(el).visibility !== 'hidden';
  const onScreen = (el, what) => {
    const r = el.getBoundingClientRect();
    if (!(r.width > 0 && r.height > 0)) problems.push(`${what} ${name(el)} has no size (${r1(r.width)}×${r1(r.height)})`);
    else if (r.left < -0.5 || r.top < -0.5 || r.right > vw + 0.5 || r.bottom > vh + 0.5)
      problems.push(`${what} ${name(el)} at x ${r1(r.left)}..${r1(r.right)} y ${r1(r.top)}..${r1(r.bottom)} is not inside the ${vw}×${vh} viewport`);
    return r;
  };
  // An element cut by an ancestor that clips (overflow not visible): the part outside its box is not seen.
  const clippedBy = (el) => {
    const r = el.getBoundingClientRect();
    for (let a = el.parentElement; a && a !== de; a = a.parentElement) {
      if (getComputedStyle(a).overflowX === 'visible' && getComputedStyle(a).overflowY === 'visible') continue;
      const c = a.getBoundingClientRect();
      const left = c.left + a.clientLeft;
      const top = c.top + a.clientTop;
      if (r.left < left - 0.5 || r.right > left + a.clientWidth + 0.5 || r.top < top - 0.5 || r.bottom > top + a.clientHeight + 0.5) return a;
    }
    return null;
  };

  if (de.scrollWidth > de.clientWidth) problems.push(`the document scrolls sideways: scrollWidth ${de.scrollWidth} > ${de.clientWidth}`);

  // What shows first, without scrolling: the tiles and the controls.
  window.scrollTo(0, 0);
  const tiles = [...document.querySelectorAll('#tiles .tile')];
  if (tiles.length !== 2) problems.push(`${tiles.length} tiles, want 2`);
  for (const t of tiles) {
    onScreen(t, 'tile');
    const c = clippedBy(t);
    if (c) problems.push(`tile ${t.dataset.sid} is cut by ${name(c)}`);
  }
  const buttons = [...document.querySelectorAll('#call .controls button')].filter(shown);
  if (buttons.length < 4) problems.push(`${buttons.length} control buttons shown, want 4`);
  const boxes = buttons.map((b) => {
    const r = onScreen(b, 'control');
    const c = clippedBy(b);
    if (c) problems.push(`control ${name(b)} is cut by ${name(c)}`);
    if (b.scrollWidth > b.clientWidth) problems.push(`control ${name(b)}: text wider than the button (${b.scrollWidth} > ${b.clientWidth})`);
    return r;
  });
  for (let i = 0; i < boxes.length; i++) {
    for (let j = i + 1; j < boxes.length; j++) {
      const a = boxes[i];
      const b = boxes[j];
      if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom) problems.push(`controls ${name(buttons[i])} and ${name(buttons[j])} overlap`);
    }
  }

  // The stats panel, scrolled to as a user would if it is below the fold.
  const panel = document.getElementById('stats').closest('.card');
  panel.scrollIntoView({ block: 'nearest' });
  onScreen(panel, 'stats panel');
  const cut = clippedBy(panel);
  if (cut) problems.push(`the stats panel is cut by ${name(cut)}`);

  // Panels whose content is wider than they are: something in them is cut off or scrolls away.
  const panels = [document.querySelector('header'), ...document.querySelectorAll('#tiles, #call .side, #call .side .card, #stats, #call .controls')];
  for (const p of panels) {
    if (shown(p) && p.scrollWidth > p.clientWidth + 1) problems.push(`${name(p)} content is wider than the panel: scrollWidth ${p.scrollWidth} > clientWidth ${p.clientWidth}`);
  }
  // Every cell and line of the stats panel inside it.
  for (const el of panel.querySelectorAll('h3, p, td')) {
    const c = clippedBy(el);
    if (c) problems.push(`${name(el)} in the stats panel is cut by ${name(c)}`);
    const r = el.getBoundingClientRect();
    const pr = panel.getBoundingClientRect();
    if (r.right > pr.right + 0.5) problems.push(`${name(el)} sticks out of the stats panel (${r1(r.right)} > ${r1(pr.right)})`);
  }
  const rows = document.querySelectorAll('#stats tr').length;
  window.scrollTo(0, 0);
  return { problems, viewport: `${window.innerWidth}×${window.innerHeight}`, rows };
}

test('the room app at 1100×700 and 390×844 shows tiles, controls and the stats panel unclipped, in Chromium and Firefox', { timeout: 90_000 }, () =>
  scenario('layout', async ({ server, own, watch }) => {
    const [chromium, firefox] = await Promise.all([launchChromium(), launchFirefox()]);
    own(chromium);
    own(firefox);
    const c = watch(new Participant('chromium', await chromium.newPage()));
    const f = watch(new Participant('firefox', await firefox.newPage()));
    await Promise.all([
      c.join(server.base, await server.token('layout', 'chromium')),
      f.join(server.base, await server.token('layout', 'firefox')),
    ]);
    await Promise.all([c.seesVideoOf(f), f.seesVideoOf(c)]);
    // The panel with its real content: a row per track, both directions, with live numbers.
    for (const p of [c, f]) {
      await waitFor(p.page, `${p.label}'s stats panel to list the four tracks`, () =>
        document.querySelectorAll('#stats tr').length >= 4 && /↓ [1-9]\d* kbps/.test(document.getElementById('bitrate').textContent));
    }

    mkdirSync(outDir, { recursive: true });
    const failures = [];
    for (const size of sizes) {
      for (const p of [c, f]) {
        await resize(p.page, size);
        // Layout after a resize settles within a frame or two; the stats refresh once a second.
        await sleep(300);
        const m = await p.page.evaluate(measure);
        await p.page.screenshot({ path: `${outDir}layout-${p.label}-${size.width}x${size.height}.png` });
        assert.equal(m.viewport, `${size.width}×${size.height}`, `${p.label}: the viewport was resized`);
        if (m.problems.length) failures.push(`${p.label} ${size.name} ${m.viewport}:\n  ${m.problems.join('\n  ')}`);
      }
    }
    assert.equal(failures.length, 0, `what a user would see cut off or misplaced (screenshots: out/layout-*.png):\n${failures.join('\n')}`);
  }));
