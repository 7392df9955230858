// Launches the system browsers: Chromium through playwright-core, Firefox ESR through
// puppeteer-core over WebDriver BiDi (Playwright cannot drive a stock Firefox).
import { cpSync, mkdtempSync, renameSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import puppeteer from 'puppeteer-core';

const chromiumArgs = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--use-fake-device-for-media-stream',
  '--use-fake-ui-for-media-stream',
  '--no-first-run',
  '--disable-component-update',
  '--disable-sync',
  // Play remote audio without a click, as a user who clicked Join would hear it.
  '--autoplay-policy=no-user-gesture-required',
  // Pages without camera permission would otherwise announce their host
  // candidates over multicast DNS on the network: tests stay on loopback.
  '--disable-features=WebRtcHideLocalIpsWithMdns',
];

export async function launchChromium() {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM_BIN ?? '/usr/bin/chromium',
    args: chromiumArgs,
    timeout: 30_000,
  });
  return {
    name: 'chromium',
    // One context per participant: separate storage, like separate people.
    async newPage() {
      const ctx = await browser.newContext({ viewport: { width: 1100, height: 700 } });
      return ctx.newPage();
    },
    close: () => browser.close().catch(() => {}),
  };
}

const firefoxBin = process.env.FIREFOX_BIN ?? '/usr/bin/firefox-esr';
const firefoxPrefs = {
  'media.navigator.streams.fake': true,
  'media.navigator.permission.disabled': true,
  'media.peerconnection.ice.loopback': true,
  'media.peerconnection.ice.obfuscate_host_addresses': false,
  'media.autoplay.default': 0,
};
const launchFirefoxIn = (userDataDir) => puppeteer.launch({
  browser: 'firefox',
  executablePath: firefoxBin,
  headless: true,
  protocol: 'webDriverBiDi',
  timeout: 30_000,
  userDataDir,
  extraPrefsFirefox: firefoxPrefs,
});

// A new profile's first start spends seconds on one-time work before the
// WebDriver BiDi session begins; a copy of a profile that started once skips
// it (launch 4.6 -> 2.5 s here). One such profile per Firefox build, made by
// whichever test needs it first.
async function firefoxProfile() {
  const built = statSync(firefoxBin).mtimeMs;
  const template = join(tmpdir(), `petrel-firefox-profile-${Math.round(built)}`);
  try {
    statSync(join(template, 'prefs.js'));
  } catch {
    const making = mkdtempSync(join(tmpdir(), 'petrel-firefox-profile-new-'));
    await (await launchFirefoxIn(making)).close();
    try {
      renameSync(making, template);
    } catch {
      rmSync(making, { recursive: true, force: true }); // another test made it first
    }
  }
  const dir = mkdtempSync(join(tmpdir(), 'petrel-firefox-'));
  cpSync(template, dir, { recursive: true });
  return dir;
}

export async function launchFirefox() {
  const dir = await firefoxProfile();
  const browser = await launchFirefoxIn(dir);
  return {
    name: 'firefox',
    async newPage() {
      const page = await browser.newPage();
      await page.setViewport({ width: 1100, height: 700 });
      return page;
    },
    close: async () => {
      await browser.close().catch(() => {});
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
