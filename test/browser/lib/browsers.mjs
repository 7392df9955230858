// Launches the system browsers: Chromium through playwright-core, Firefox ESR through
// puppeteer-core over WebDriver BiDi (Playwright cannot drive a stock Firefox).
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

export async function launchFirefox() {
  const browser = await puppeteer.launch({
    browser: 'firefox',
    executablePath: process.env.FIREFOX_BIN ?? '/usr/bin/firefox-esr',
    headless: true,
    protocol: 'webDriverBiDi',
    timeout: 30_000,
    extraPrefsFirefox: {
      'media.navigator.streams.fake': true,
      'media.navigator.permission.disabled': true,
      'media.peerconnection.ice.loopback': true,
      'media.peerconnection.ice.obfuscate_host_addresses': false,
      'media.autoplay.default': 0,
    },
  });
  return {
    name: 'firefox',
    async newPage() {
      const page = await browser.newPage();
      await page.setViewport({ width: 1100, height: 700 });
      return page;
    },
    close: () => browser.close().catch(() => {}),
  };
}
