// A rate-limited UDP relay in front of the server's embedded TURN port: a real
// bandwidth limit for one browser, on loopback, without root. The browser is
// made to use it as its TURN server (see throughShaper) with relay-only ICE, so
// every packet of its media, both peer connections, crosses this relay.
//
// Downstream (TURN server to browser) goes through a token bucket that drains a
// drop-tail queue, like a slow access link: packets wait while the queue holds
// less than `queueMs` of traffic at the current rate and are dropped beyond
// that, so a sender that overshoots sees both rising delay and loss, which is
// what a congestion controller reacts to. Upstream is passed as it comes.
import dgram from 'node:dgram';

export async function startShaper({ target, kbps, queueMs = 250, host = '127.0.0.1' }) {
  const front = dgram.createSocket('udp4');
  const flows = new Map(); // client "addr:port" -> { up: socket, queue, bytes }
  let rate = kbps * 1000; // bits per second
  let tokens = 0; // bits
  let last = process.hrtime.bigint();
  const stats = { forwarded: 0, dropped: 0, bytes: 0 };
  let closed = false;

  const queued = () => {
    let n = 0;
    for (const f of flows.values()) n += f.bytes;
    return n;
  };

  // busy: packets were waiting since the last refill. Then the link was
  // sending all along and has earned the whole interval, however late this
  // process's timer fired (on a loaded machine, tens of ms); otherwise it was
  // idle, and an idle link does not save up: a burst of at most 20 ms.
  const refill = (busy) => {
    const now = process.hrtime.bigint();
    const dt = Number(now - last) / 1e9;
    last = now;
    tokens = busy ? Math.min(tokens + rate * dt, rate) : Math.min(tokens + rate * dt, rate * 0.02 + 12_000);
  };

  // Sends queued packets as far as the tokens reach, flows round-robin.
  let timer = null;
  const drain = () => {
    const busy = timer !== null;
    timer = null;
    if (closed) return;
    refill(busy);
    let progressed = true;
    while (progressed) {
      progressed = false;
      for (const f of flows.values()) {
        const pkt = f.queue[0];
        if (!pkt || tokens < pkt.length * 8) continue;
        f.queue.shift();
        f.bytes -= pkt.length;
        tokens -= pkt.length * 8;
        stats.forwarded++;
        stats.bytes += pkt.length;
        front.send(pkt, f.port, f.addr);
        progressed = true;
      }
    }
    if (queued() > 0) timer = setTimeout(drain, 2);
  };

  front.on('message', (msg, rinfo) => {
    const key = `${rinfo.address}:${rinfo.port}`;
    let f = flows.get(key);
    if (!f) {
      const up = dgram.createSocket('udp4');
      f = { up, queue: [], bytes: 0, addr: rinfo.address, port: rinfo.port };
      flows.set(key, f);
      const flow = f;
      up.on('message', (down) => {
        if (closed) return;
        if (flow.bytes + down.length > (rate / 8) * (queueMs / 1000) + 3_000) {
          stats.dropped++;
          return;
        }
        flow.queue.push(down);
        flow.bytes += down.length;
        if (!timer) drain();
      });
      up.on('error', () => {});
      up.bind(0, host);
    }
    f.up.send(msg, target, host);
  });
  front.on('error', () => {});
  await new Promise((resolve) => front.bind(0, host, resolve));

  return {
    port: front.address().port,
    stats: () => ({ ...stats, queuedBytes: queued(), kbps: rate / 1000 }),
    setRate(k) {
      refill(queued() > 0);
      rate = k * 1000;
    },
    close() {
      closed = true;
      clearTimeout(timer);
      for (const f of flows.values()) f.up.close();
      front.close();
    },
  };
}

// Makes the page's peer connections use the shaper as their only TURN server
// (UDP; the TURN-over-TCP URL is removed, as ICE-TCP would bypass the relay).
// Call before the page loads the app; join with { relay: true }.
export function throughShaper(page, turnPort, shaperPort) {
  return page.addInitScript(
    ([from, to]) => {
      const Orig = window.RTCPeerConnection;
      const rewrite = (cfg) => {
        if (!cfg?.iceServers) return cfg;
        const iceServers = cfg.iceServers
          .map((s) => ({
            ...s,
            urls: [].concat(s.urls)
              .filter((u) => !/transport=tcp/.test(u))
              .map((u) => u.replace(`:${from}?`, `:${to}?`).replace(new RegExp(`:${from}$`), `:${to}`)),
          }))
          .filter((s) => s.urls.length > 0);
        return { ...cfg, iceServers };
      };
      function Shaped(cfg, ...rest) {
        return new Orig(rewrite(cfg), ...rest);
      }
      Shaped.prototype = Orig.prototype;
      Object.setPrototypeOf(Shaped, Orig);
      const setConfiguration = Orig.prototype.setConfiguration;
      Orig.prototype.setConfiguration = function (cfg) {
        return setConfiguration.call(this, rewrite(cfg));
      };
      window.RTCPeerConnection = Shaped;
    },
    [turnPort, shaperPort],
  );
}
