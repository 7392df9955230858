// Camera controls for a camera view: PTZ (arrows and zoom held down move the
// camera, presets), talk-back (the viewer's microphone to the camera's
// loudspeaker), and digital zoom/dewarping of the picture (dptz.ts). PTZ and
// talk are requests on the data channel to the camera (topics ptz and talk,
// docs/ptz.md); the picture tools never leave the browser.
import type { DataMessage, LocalTrackPublication, Room } from '../sdk/index.js';
import { DigitalPTZ } from './dptz.js';

const CAMERA = 'camera';
const textDecoder = new TextDecoder();

interface Reply {
  id?: number | string | null;
  result?: Record<string, unknown>;
  error?: string;
  event?: string;
  reason?: string;
}

/** Request/reply over the data channel to the camera's identity. */
export class CameraRPC {
  private next = 1;
  private waiting = new Map<string, { resolve: (r: Record<string, unknown>) => void; reject: (e: Error) => void; timer: ReturnType<typeof setTimeout> }>();
  private readonly onData = (m: DataMessage) => this.receive(m);
  /** Unsolicited messages (e.g. {"event":"ended"} on topic talk). */
  onEvent: (topic: string, r: Reply) => void = () => {};

  constructor(readonly room: Room) {
    room.on('dataReceived', this.onData);
  }

  close(): void {
    this.room.off('dataReceived', this.onData);
    for (const w of this.waiting.values()) {
      clearTimeout(w.timer);
      w.reject(new Error('closed'));
    }
    this.waiting.clear();
  }

  request(topic: string, body: Record<string, unknown>, timeoutMs = 10_000): Promise<Record<string, unknown>> {
    const id = this.next++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(`${topic}/${id}`);
        reject(new Error(`${topic} ${String(body.op ?? body.method ?? '')}: no answer from the camera`));
      }, timeoutMs);
      this.waiting.set(`${topic}/${id}`, { resolve, reject, timer });
      // Controls mount as soon as the camera is announced, which is before the
      // data channels exist: retry sending until they do or the request times out.
      const send = () =>
        this.room.sendData(JSON.stringify({ id, ...body }), { topic, to: [CAMERA] }).catch((err: Error) => {
          if (!this.waiting.has(`${topic}/${id}`)) return;
          if (/not connected/.test(err.message)) {
            setTimeout(send, 200);
            return;
          }
          clearTimeout(timer);
          this.waiting.delete(`${topic}/${id}`);
          reject(err);
        });
      void send();
    });
  }

  private receive(m: DataMessage): void {
    if (m.from !== CAMERA || !m.topic) return;
    let r: Reply;
    try {
      r = JSON.parse(m.text ?? textDecoder.decode(m.payload)) as Reply;
    } catch {
      return;
    }
    if (r.id === undefined || r.id === null) {
      this.onEvent(m.topic, r);
      return;
    }
    const key = `${m.topic}/${r.id}`;
    const w = this.waiting.get(key);
    if (!w) return;
    this.waiting.delete(key);
    clearTimeout(w.timer);
    if (r.error) w.reject(new Error(r.error));
    else w.resolve(r.result ?? {});
  }
}

export interface CameraControls {
  readonly rpc: CameraRPC;
  readonly dptz: DigitalPTZ;
  destroy(): void;
}

const ARROWS: [string, string, number, number][] = [
  ['ptz-up', '▲', 0, 1],
  ['ptz-left', '◀', -1, 0],
  ['ptz-right', '▶', 1, 0],
  ['ptz-down', '▼', 0, -1],
];

/**
 * Adds the controls under container for the camera whose picture is video.
 * Speed is the velocity (0..1) that held arrows move at.
 */
export function mountCameraControls(room: Room, video: HTMLVideoElement, container: HTMLElement, speed = 0.5): CameraControls {
  addStyle();
  const rpc = new CameraRPC(room);
  const dptz = new DigitalPTZ(video);
  const bar = document.createElement('div');
  bar.className = 'camera-controls';
  const status = document.createElement('span');
  status.className = 'ptz-status';
  const show = (text: string, error = false) => {
    status.textContent = text;
    status.classList.toggle('error', error);
  };
  const fail = (err: unknown) => show(err instanceof Error ? err.message : String(err), true);
  const button = (id: string, label: string, title: string) => {
    const b = document.createElement('button');
    b.type = 'button';
    b.id = id;
    b.textContent = label;
    b.title = title;
    return b;
  };

  // Held buttons: a continuous move renewed before its timeout, stop on release.
  let held: ReturnType<typeof setInterval> | undefined;
  const hold = (b: HTMLButtonElement, move: Record<string, number>) => {
    const start = (e: PointerEvent) => {
      if (e.button !== 0) return;
      e.preventDefault();
      b.setPointerCapture?.(e.pointerId);
      const send = () => rpc.request('ptz', { op: 'move', ...move, timeout: 1 }).then(() => show('moving')).catch(fail);
      void send();
      clearInterval(held);
      held = setInterval(send, 500);
    };
    const end = () => {
      if (held === undefined) return;
      clearInterval(held);
      held = undefined;
      void rpc.request('ptz', { op: 'stop' }).then(() => show('stopped')).catch(fail);
    };
    b.addEventListener('pointerdown', start);
    b.addEventListener('pointerup', end);
    b.addEventListener('pointercancel', end);
    b.addEventListener('lostpointercapture', end);
  };

  const pad = document.createElement('span');
  pad.className = 'ptz-pad';
  for (const [id, label, pan, tilt] of ARROWS) {
    const b = button(id, label, 'hold to move the camera');
    hold(b, { pan: pan * speed, tilt: tilt * speed });
    pad.append(b);
  }
  const zoomIn = button('ptz-zoom-in', '+', 'hold to zoom the camera in');
  const zoomOut = button('ptz-zoom-out', '−', 'hold to zoom the camera out');
  hold(zoomIn, { zoom: speed });
  hold(zoomOut, { zoom: -speed });
  pad.append(zoomIn, zoomOut);

  // Presets.
  const presets = document.createElement('select');
  presets.id = 'ptz-presets';
  presets.title = 'camera presets';
  const go = button('ptz-preset-go', 'Go', 'move to the preset');
  const save = button('ptz-preset-save', 'Save…', 'store the current position as a preset');
  const loadPresets = async () => {
    const r = await rpc.request('ptz', { op: 'preset.list' });
    const list = (r.presets as { token: string; name: string }[] | undefined) ?? [];
    presets.replaceChildren(...list.map((p) => new Option(p.name || p.token, p.token)));
  };
  go.addEventListener('click', () => {
    if (!presets.value) return;
    void rpc.request('ptz', { op: 'preset.goto', preset: presets.value }).then(() => show(`preset ${presets.selectedOptions[0]?.text ?? ''}`)).catch(fail);
  });
  save.addEventListener('click', () => {
    const name = prompt('Preset name')?.trim();
    if (!name) return;
    void rpc.request('ptz', { op: 'preset.set', name }).then(loadPresets).then(() => show(`saved ${name}`)).catch(fail);
  });

  // Talk-back: ask for the floor, publish the microphone in the codec the
  // camera takes, unpublish on stop or when the gateway ends the session.
  const talk = button('ptz-talk', 'Talk', 'speak through the camera');
  let mic: LocalTrackPublication | null = null;
  const stopMic = async () => {
    const m = mic;
    mic = null;
    talk.classList.remove('on');
    talk.textContent = 'Talk';
    if (m) await room.unpublishTrack(m.sid).catch(() => {});
  };
  talk.addEventListener('click', () => {
    void (async () => {
      if (talk.classList.contains('on')) {
        await rpc.request('talk', { op: 'stop' }).catch(() => {});
        await stopMic();
        show('talk ended');
        return;
      }
      try {
        talk.classList.add('on');
        talk.textContent = 'Stop talking';
        const r = await rpc.request('talk', { op: 'start' });
        const codec = typeof r.codec === 'string' && r.codec !== 'any' ? r.codec : undefined;
        const stream = await navigator.mediaDevices.getUserMedia({ audio: { echoCancellation: true, noiseSuppression: true } });
        mic = await room.publishTrack(stream.getAudioTracks()[0], { source: 'microphone', name: 'talk', codec });
        show(`talking (${codec ?? 'opus'})`);
      } catch (err) {
        await rpc.request('talk', { op: 'stop' }).catch(() => {});
        await stopMic();
        fail(err);
      }
    })();
  });
  rpc.onEvent = (topic, r) => {
    if (topic === 'talk' && r.event === 'ended') {
      void stopMic();
      show(`talk ended: ${r.reason ?? ''}`, r.reason !== 'stopped');
    }
  };

  // Picture tools.
  const dzIn = button('dptz-in', '🔍+', 'digital zoom in (or mouse wheel on the picture)');
  const dzOut = button('dptz-out', '🔍−', 'digital zoom out (double-click the picture resets)');
  dzIn.addEventListener('click', () => dptz.zoomBy(1.25));
  dzOut.addEventListener('click', () => dptz.zoomBy(0.8));
  const dewarpLabel = document.createElement('label');
  const dewarp = document.createElement('input');
  dewarp.type = 'checkbox';
  dewarp.id = 'dptz-dewarp';
  dewarp.addEventListener('change', () => {
    if (!dptz.setDewarp(dewarp.checked)) {
      dewarp.checked = false;
      fail(new Error('dewarping needs WebGL'));
    }
  });
  dewarpLabel.append(dewarp, ' Dewarp');

  bar.append(pad, presets, go, save, talk, dzIn, dzOut, dewarpLabel, status);
  container.append(bar);
  void loadPresets().catch((err: Error) => {
    // A camera without PTZ (or a token without the grant) says so here.
    show(err.message, true);
  });

  return {
    rpc,
    dptz,
    destroy() {
      clearInterval(held);
      void stopMic();
      rpc.close();
      dptz.destroy();
      bar.remove();
    },
  };
}

// The controls' look, kept with them (the shared stylesheet stays untouched).
function addStyle(): void {
  if (document.getElementById('ptzui-style')) return;
  const st = document.createElement('style');
  st.id = 'ptzui-style';
  st.textContent = `
.camera-controls { position: absolute; left: 0; right: 0; bottom: 0; display: flex; flex-wrap: wrap; gap: 4px;
  align-items: center; padding: 4px; background: rgba(0,0,0,.45); font-size: 12px; z-index: 2; }
.camera-controls button { min-width: 28px; padding: 2px 6px; }
.camera-controls button.on { background: #c0392b; color: #fff; }
.camera-controls .ptz-pad { display: inline-flex; gap: 2px; }
.camera-controls .ptz-status { color: #ddd; margin-left: auto; }
.camera-controls .ptz-status.error { color: #ff8a80; }`;
  document.head.append(st);
}
