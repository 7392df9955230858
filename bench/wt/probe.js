// In-page side of the WebTransport vs WebRTC comparison (bench/wt/peer.mjs
// injects it into both pages; the browser test uses it too).
//
// Publisher: a 640x480 canvas drawn 30 times a second. Each picture is a pure
// function of its timestamp t (ms since the epoch): moving gray bars and a moving
// disc, plus t itself as a barcode in the top 48 rows (36 bits of t and a
// 4-bit check, 40 blocks of 32x24 px, black or white: robust to any codec at
// any bitrate that still shows a picture).
//
// Subscriber: every rendered frame (requestVideoFrameCallback) is drawn to a
// canvas and its barcode read back: glass-to-glass latency = now − t (both
// pages on one machine share the clock). Every 6th frame the picture is
// compared with the source picture regenerated from t: PSNR of the luma
// below the barcode, at 160x120. Freezes follow WebRTC's definition (a gap
// longer than max(3 × mean interval, mean + 150 ms)).
(() => {
  const W = 640;
  const H = 480;
  const BAR_H = 48;
  const BITS = 40;

  function draw(ctx, t) {
    const phase = (t / 1000) % 1000;
    for (let i = 0; i < 16; i++) {
      // Gray levels only: a luma comparison is then blind to the colour matrix
      // (BT.601 / BT.709) each path converts with, and sees the codec alone.
      const level = 15 + (((i * 22 + phase * 40) % 360) / 360) * 70;
      ctx.fillStyle = `hsl(0 0% ${level.toFixed(1)}%)`;
      ctx.fillRect(i * 40, BAR_H, 40, H - BAR_H);
    }
    // Texture that scrolls and changes: blocks of pseudo-random gray (a hash of
    // block and time), so the encoder needs a realistic bitrate (a flat picture
    // would cost a few kbit/s and hide every bandwidth limit).
    const k = Math.floor(t / 2000);
    const shift = Math.floor(t / 25) % 32;
    for (let j = 0; j < 6; j++) {
      for (let i = -1; i < 20; i++) {
        const h = (Math.imul(i + Math.floor(t / 800), 73856093) ^ Math.imul(j, 19349663) ^ Math.imul(k, 83492791)) >>> 0;
        const g = 40 + (h % 176);
        ctx.fillStyle = `rgb(${g},${g},${g})`;
        ctx.fillRect(i * 32 + shift, H - 200 + j * 24, 32, 24);
      }
    }
    const x = ((t / 8) % (W + 160)) - 80;
    const y = BAR_H + 80 + Math.sin(t / 700) * 120;
    ctx.fillStyle = '#f4f4f4';
    ctx.beginPath();
    ctx.arc(x, y + 60, 70, 0, Math.PI * 2);
    ctx.fill();
    ctx.fillStyle = '#101010';
    ctx.fillRect((t / 3) % W, H - 60, 50, 50);
    // The barcode: bit i (LSB first) of v = (t mod 2^36) << 4 | check.
    const low = t % 2 ** 36;
    const v = low * 16 + check(low);
    let rest = v;
    for (let i = 0; i < BITS; i++) {
      const bit = rest % 2;
      rest = Math.floor(rest / 2);
      ctx.fillStyle = bit ? '#ffffff' : '#000000';
      ctx.fillRect((i % 20) * 32, Math.floor(i / 20) * 24, 32, 24);
    }
  }

  function check(low) {
    let c = 0;
    let x = low;
    for (let i = 0; i < 9; i++) {
      c = (c + (x % 16)) % 16;
      x = Math.floor(x / 16);
    }
    return c;
  }

  // Reads t back from a 640-wide RGBA strip of the top 48 rows; null if unreadable.
  function readStamp(data) {
    let v = 0;
    for (let i = BITS - 1; i >= 0; i--) {
      const cx = (i % 20) * 32 + 16;
      const cy = Math.floor(i / 20) * 24 + 12;
      let sum = 0;
      for (let dy = -4; dy <= 4; dy += 2) {
        for (let dx = -6; dx <= 6; dx += 3) {
          const o = ((cy + dy) * W + cx + dx) * 4;
          sum += data[o] * 0.299 + data[o + 1] * 0.587 + data[o + 2] * 0.114;
        }
      }
      v = v * 2 + (sum / 25 > 128 ? 1 : 0);
    }
    const low = Math.floor(v / 16);
    if (v % 16 !== check(low)) return null;
    // Restore the high bits from our own clock (the stamp is at most minutes old).
    const now = Date.now();
    const base = now - (now % 2 ** 36);
    let t = base + low;
    if (t > now + 60_000) t -= 2 ** 36;
    return t;
  }

  function luma(d) {
    const out = new Float32Array(d.length / 4);
    for (let i = 0, j = 0; i < d.length; i += 4, j++) out[j] = d[i] * 0.299 + d[i + 1] * 0.587 + d[i + 2] * 0.114;
    return out;
  }

  function psnr(a, b, skipRows, w) {
    let se = 0;
    let n = 0;
    for (let i = skipRows * w; i < a.length; i++) {
      const e = a[i] - b[i];
      se += e * e;
      n++;
    }
    const mse = se / n;
    return mse === 0 ? 99 : 10 * Math.log10((255 * 255) / mse);
  }

  /** Starts the source; returns the canvas track. */
  function source(fps = 30) {
    const c = document.createElement('canvas');
    c.width = W;
    c.height = H;
    const ctx = c.getContext('2d');
    const stream = c.captureStream(0);
    const track = stream.getVideoTracks()[0];
    const state = { drawn: 0, track, canvas: c };
    draw(ctx, Date.now());
    state.timer = setInterval(() => {
      draw(ctx, Date.now());
      state.drawn++;
      track.requestFrame();
    }, 1000 / fps);
    window.__probeSource = state;
    return track;
  }

  /** Measures a video element until stop(); returns the summary. */
  function measure(video) {
    const grab = document.createElement('canvas');
    grab.width = W;
    grab.height = H;
    const g = grab.getContext('2d', { willReadFrequently: true });
    const small = document.createElement('canvas');
    small.width = 160;
    small.height = 120;
    const sg = small.getContext('2d', { willReadFrequently: true });
    const ref = document.createElement('canvas');
    ref.width = W;
    ref.height = H;
    const rg = ref.getContext('2d');
    const refSmall = document.createElement('canvas');
    refSmall.width = 160;
    refSmall.height = 120;
    const rsg = refSmall.getContext('2d', { willReadFrequently: true });
    const m = {
      frames: 0, stamped: 0, unreadable: 0, repeats: 0, lat: [], psnr: [], intervals: [], last: 0, lastStamp: 0,
      firstFrameAt: 0, width: 0, height: 0, stopped: false,
    };
    const onFrame = (now, meta) => {
      if (m.stopped) return;
      const wall = Date.now();
      m.frames++;
      if (m.last) m.intervals.push(now - m.last);
      m.last = now;
      if (!m.firstFrameAt) m.firstFrameAt = performance.now();
      m.width = meta.width;
      m.height = meta.height;
      g.drawImage(video, 0, 0, W, H);
      const t = readStamp(g.getImageData(0, 0, W, BAR_H).data);
      if (t === null) m.unreadable++;
      else if (t === m.lastStamp) m.repeats++;
      else {
        m.stamped++;
        m.lastStamp = t;
        m.lat.push(wall - t);
        if (m.stamped % 6 === 0) {
          sg.drawImage(grab, 0, 0, 160, 120);
          draw(rg, t);
          rsg.drawImage(ref, 0, 0, 160, 120);
          m.psnr.push(psnr(luma(sg.getImageData(0, 0, 160, 120).data), luma(rsg.getImageData(0, 0, 160, 120).data), 12, 160));
        }
      }
      video.requestVideoFrameCallback(onFrame);
    };
    video.requestVideoFrameCallback(onFrame);
    return {
      m,
      reset() {
        Object.assign(m, { frames: 0, stamped: 0, unreadable: 0, repeats: 0, lat: [], psnr: [], intervals: [], last: 0, resetAt: performance.now() });
      },
      summary() {
        const seconds = (performance.now() - (m.resetAt ?? 0)) / 1000;
        const q = (a, p) => {
          if (!a.length) return null;
          const s = [...a].sort((x, y) => x - y);
          return s[Math.min(s.length - 1, Math.floor(p * s.length))];
        };
        // Freezes as WebRTC's freezeCount: against the running mean of the intervals before.
        let freezes = 0;
        let freezeMs = 0;
        let sum = 0;
        m.intervals.forEach((d, i) => {
          const mean = i ? sum / i : 33;
          if (i >= 3 && d > Math.max(3 * mean, mean + 150)) {
            freezes++;
            freezeMs += d;
          }
          sum += d;
        });
        const gap = m.last ? performance.now() - m.last : seconds * 1000;
        if (gap > 500) {
          freezes++; // frozen at the end of the window
          freezeMs += gap;
        }
        return {
          seconds,
          renderedFps: m.frames / seconds,
          uniqueFps: m.stamped / seconds,
          latP50: q(m.lat, 0.5),
          latP95: q(m.lat, 0.95),
          psnr: q(m.psnr, 0.5),
          freezes,
          freezeMs,
          unreadable: m.unreadable,
          width: m.width,
          height: m.height,
        };
      },
      stop() {
        m.stopped = true;
      },
    };
  }

  window.probe = { draw, readStamp, source, measure, W, H };
})();
