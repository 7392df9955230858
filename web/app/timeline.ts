// The recording timeline under a camera view (or over a room recording played
// back in room recording/<id>): recorded ranges from
// GET /v1/cameras/{id}/recordings (a room recording: the "ranges" message), scrubbing (seeks while dragging, throttled to
// one in flight), play/pause, rate, frame step and back to live. Playback comes
// over the viewer's own connection: data messages on topic "playback" to the
// camera (docs/protocol.md), answered by a track of participant
// "playback-<identity>" that only this viewer sees (docs/recording.md).
import type { DataMessage, RemoteParticipant, RemoteTrackPublication, Room } from '../sdk/index.js';

export interface TimelineOptions {
  room: Room;
  /** The camera; absent for a room recording (room recording/<id>), which has no live view. */
  camera?: string;
  /** The token the room was joined with: it authorizes the recordings list. */
  token: string;
  /**
   * The camera's video element: it shows the playback track, and live again
   * after "live". A room recording's tracks are shown by the page (one
   * publication each of participant playback-<identity>).
   */
  video?: HTMLVideoElement;
  /** HTTP base of the server (default: this page's origin). */
  base?: string;
  /** How far back the bar reaches (ms, default one hour). */
  windowMs?: number;
}

interface Reply {
  id: number;
  ok?: boolean;
  error?: string;
  t?: number;
  state?: 'playing' | 'paused';
  rate?: number;
  ranges?: Range[];
}

export interface Range {
  from: number;
  to: number;
}

const RATES = [0.25, 0.5, 1, 2, 4, 8];

// Styles live here so the timeline works on any page, not only the app's.
const CSS = `
.timeline { display: flex; flex-direction: column; gap: 4px; font: 13px system-ui, sans-serif; }
.timeline-controls { display: flex; gap: 6px; align-items: center; }
.timeline-controls button, .timeline-controls select { padding: 2px 8px; }
.timeline-label { margin-left: auto; opacity: 0.8; }
.timeline-bar { width: 100%; height: 28px; cursor: pointer; touch-action: none; }
`;
function injectStyle(): void {
  if (document.getElementById('petrel-timeline-css')) return;
  const s = document.createElement('style');
  s.id = 'petrel-timeline-css';
  s.textContent = CSS;
  document.head.append(s);
}
const TOPIC = 'playback';

export class Timeline {
  readonly el: HTMLElement;
  /** Recorded ranges (Unix ms), refreshed every few seconds. */
  ranges: Range[] = [];
  /** Wall-clock time of the frame on screen in playback, undefined when live. */
  position?: number;
  state: 'live' | 'playing' | 'paused' = 'live';
  rate = 1;
  /** Called after every change of position or state. */
  onchange?: (t: Timeline) => void;

  private o: Required<Omit<TimelineOptions, 'base' | 'camera' | 'video'>> & { base: string; camera?: string; video?: HTMLVideoElement };
  private bar: HTMLCanvasElement;
  private label: HTMLSpanElement;
  private playBtn: HTMLButtonElement;
  private rateSel: HTMLSelectElement;
  private nextId = 1;
  private pending = new Map<number, (r: Reply) => void>();
  private liveStream?: MediaStream | null;
  private playbackTrack?: MediaStreamTrack;
  private dragging = false;
  private seekInFlight = false;
  private seekQueued?: number;
  private timer?: ReturnType<typeof setInterval>;
  private offs: (() => void)[] = [];

  constructor(container: HTMLElement, opts: TimelineOptions) {
    this.o = { windowMs: 3600_000, ...opts, base: opts.base ?? location.origin };
    if (this.o.camera === undefined) this.state = 'paused'; // a recording has no live view
    injectStyle();
    this.el = document.createElement('div');
    this.el.className = 'timeline';
    this.el.innerHTML = `
      <div class="timeline-controls">
        <button type="button" data-act="play" title="Play / pause">▶</button>
        <button type="button" data-act="step" title="Next frame">⏭</button>
        <select data-act="rate" title="Playback rate">${RATES.map((r) => `<option value="${r}"${r === 1 ? ' selected' : ''}>${r}×</option>`).join('')}</select>
        <button type="button" data-act="live" title="Back to live">● live</button>
        <span class="timeline-label">live</span>
      </div>
      <canvas class="timeline-bar" height="28"></canvas>`;
    container.append(this.el);
    this.bar = this.el.querySelector('canvas')!;
    this.label = this.el.querySelector('.timeline-label')!;
    this.playBtn = this.el.querySelector('[data-act=play]')!;
    this.rateSel = this.el.querySelector('select')!;

    this.playBtn.onclick = () => void (this.state === 'playing' ? this.pause() : this.play()).catch(this.report);
    (this.el.querySelector('[data-act=step]') as HTMLButtonElement).onclick = () => void this.step().catch(this.report);
    (this.el.querySelector('[data-act=live]') as HTMLButtonElement).onclick = () => void this.live().catch(this.report);
    this.rateSel.onchange = () => void this.setRate(Number(this.rateSel.value)).catch(this.report);
    this.bar.onpointerdown = (ev) => {
      this.dragging = true;
      this.bar.setPointerCapture(ev.pointerId);
      this.scrubTo(ev);
    };
    this.bar.onpointermove = (ev) => this.dragging && this.scrubTo(ev);
    this.bar.onpointerup = (ev) => {
      this.dragging = false;
      this.scrubTo(ev);
    };

    const onData = (m: DataMessage) => this.onData(m);
    const onTrack = (track: MediaStreamTrack, _pub: RemoteTrackPublication, p: RemoteParticipant | undefined) => {
      if (this.o.camera !== undefined && track.kind === 'video' && p?.identity === `playback-${this.identity()}`) {
        this.playbackTrack = track;
        if (this.state !== 'live') this.showPlayback();
      }
    };
    this.o.room.on('dataReceived', onData);
    this.o.room.on('trackSubscribed', onTrack);
    this.offs.push(() => this.o.room.off('dataReceived', onData), () => this.o.room.off('trackSubscribed', onTrack));
    if (this.o.camera === undefined) (this.el.querySelector('[data-act=live]') as HTMLElement).hidden = true;
    new ResizeObserver(() => this.draw()).observe(this.bar);
    void this.refresh();
    this.timer = setInterval(() => void this.refresh(), 5000);
  }

  /** Fetches the recorded ranges. */
  async refresh(): Promise<Range[]> {
    if (this.o.camera === undefined) {
      // A room recording: its participant answers over the data channel.
      const r = await this.request({ op: 'ranges' }).catch(() => undefined);
      if (r?.ranges) this.ranges = r.ranges;
      this.draw();
      return this.ranges;
    }
    try {
      const res = await fetch(`${this.o.base}/v1/cameras/${encodeURIComponent(this.o.camera)}/recordings`, {
        headers: { Authorization: `Bearer ${this.o.token}` },
      });
      if (res.ok) this.ranges = ((await res.json()) as { ranges: Range[] }).ranges;
    } catch {
      /* the next refresh retries */
    }
    this.draw();
    return this.ranges;
  }

  /** Shows the frame at wall-clock time t (Unix ms); keeps playing if playing. */
  async seek(t: number): Promise<Reply> {
    const r = await this.request({ op: 'seek', t: Math.round(t) });
    this.enterPlayback(r);
    return r;
  }

  /** Plays from t, or from where it is. */
  async play(from?: number): Promise<Reply> {
    if (from === undefined && this.state === 'live') from = this.ranges.at(-1)?.from;
    const r = await this.request(from === undefined ? { op: 'play' } : { op: 'play', from: Math.round(from) });
    this.enterPlayback(r);
    return r;
  }

  async pause(): Promise<Reply> {
    const r = await this.request({ op: 'pause' });
    this.enterPlayback(r);
    return r;
  }

  async step(): Promise<Reply> {
    const r = await this.request({ op: 'step' });
    this.enterPlayback(r);
    return r;
  }

  async setRate(rate: number): Promise<Reply> {
    const r = await this.request({ op: 'rate', rate });
    this.rate = rate;
    this.update();
    return r;
  }

  /** Ends playback and shows the live stream again. */
  async live(): Promise<void> {
    if (this.state === 'live') return;
    await this.request({ op: 'stop' }).catch(() => undefined);
    this.state = 'live';
    this.position = undefined;
    this.playbackTrack = undefined;
    if (this.liveStream !== undefined && this.o.video) this.o.video.srcObject = this.liveStream;
    this.liveStream = undefined;
    this.update();
  }

  close(): void {
    clearInterval(this.timer);
    for (const off of this.offs) off();
    this.el.remove();
  }

  private identity(): string {
    return this.o.room.localParticipant?.identity ?? '';
  }

  private request(body: Record<string, unknown>): Promise<Reply> {
    const id = this.nextId++;
    return new Promise<Reply>((resolve, reject) => {
      const timeout = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`playback ${String(body.op)}: no answer`));
      }, 10_000);
      this.pending.set(id, (r) => {
        clearTimeout(timeout);
        if (r.error) reject(new Error(r.error));
        else resolve(r);
      });
      this.o.room.sendData(JSON.stringify({ id, ...body }), { to: ['camera'], topic: TOPIC }).catch((err: Error) => {
        this.pending.delete(id);
        clearTimeout(timeout);
        reject(err);
      });
    });
  }

  private onData(m: DataMessage): void {
    if (m.topic !== TOPIC) return;
    let r: Reply & { event?: string };
    try {
      // The server's messages are JSON bytes without the text flag.
      r = JSON.parse(m.text ?? new TextDecoder().decode(m.payload));
    } catch {
      return;
    }
    if (r.event) {
      if (this.state === 'live') return;
      if (typeof r.t === 'number') this.position = r.t;
      if (r.state) this.state = r.state;
      this.update();
      return;
    }
    const done = this.pending.get(r.id);
    if (done) {
      this.pending.delete(r.id);
      done(r);
    }
  }

  private enterPlayback(r: Reply): void {
    if (this.state === 'live' && this.o.video) {
      this.liveStream = this.o.video.srcObject as MediaStream | null;
      this.showPlayback();
    }
    if (typeof r.t === 'number') this.position = r.t;
    this.state = r.state ?? 'paused';
    if (r.rate) this.rate = r.rate;
    this.update();
  }

  private showPlayback(): void {
    if (this.o.video && this.playbackTrack && (this.o.video.srcObject as MediaStream | null)?.getVideoTracks()[0] !== this.playbackTrack) {
      this.o.video.srcObject = new MediaStream([this.playbackTrack]);
      void this.o.video.play().catch(() => undefined);
    }
  }

  // Scrubbing: one seek in flight at a time, the latest position queued, so a
  // fast drag never builds a backlog and the last position always wins.
  private scrubTo(ev: PointerEvent): void {
    const t = this.timeAt(ev.offsetX);
    this.position = t;
    this.draw();
    if (this.seekInFlight) {
      this.seekQueued = t;
      return;
    }
    this.seekInFlight = true;
    void this.seek(t)
      .catch(this.report)
      .finally(() => {
        this.seekInFlight = false;
        const q = this.seekQueued;
        this.seekQueued = undefined;
        if (q !== undefined) this.scrubTo({ offsetX: this.xAt(q) } as PointerEvent);
      });
  }

  private span(): [number, number] {
    if (this.o.camera === undefined) {
      // A room recording: the bar is the recording.
      const a = this.ranges[0]?.from ?? 0;
      return [a, this.ranges.at(-1)?.to ?? a + 1];
    }
    const now = Date.now();
    const last = this.ranges.at(-1)?.to ?? now;
    const to = Math.max(now, last);
    const first = this.ranges[0]?.from ?? to - this.o.windowMs;
    return [Math.max(first, to - this.o.windowMs), to];
  }

  private timeAt(x: number): number {
    const [a, b] = this.span();
    const w = this.bar.clientWidth || 1;
    return a + (Math.min(Math.max(x, 0), w) / w) * (b - a);
  }

  private xAt(t: number): number {
    const [a, b] = this.span();
    return ((t - a) / (b - a || 1)) * (this.bar.clientWidth || 1);
  }

  private update(): void {
    this.playBtn.textContent = this.state === 'playing' ? '⏸' : '▶';
    this.rateSel.value = String(this.rate);
    this.label.textContent =
      this.state === 'live' || this.position === undefined ? (this.o.camera === undefined ? 'recording' : 'live') : `${new Date(this.position).toLocaleTimeString()} · ${this.state}`;
    this.el.dataset.state = this.state;
    if (this.position !== undefined) this.el.dataset.position = String(this.position);
    this.draw();
    this.onchange?.(this);
  }

  private draw(): void {
    const c = this.bar;
    const w = c.clientWidth;
    if (!w) return;
    if (c.width !== w) c.width = w;
    const g = c.getContext('2d')!;
    g.clearRect(0, 0, w, c.height);
    g.fillStyle = '#2a2f3a';
    g.fillRect(0, 8, w, 12);
    g.fillStyle = '#3b82f6';
    for (const r of this.ranges) {
      const x0 = this.xAt(r.from);
      const x1 = this.xAt(r.to);
      if (x1 >= 0 && x0 <= w) g.fillRect(Math.max(x0, 0), 8, Math.max(x1 - x0, 1), 12);
    }
    if (this.position !== undefined && this.state !== 'live') {
      g.fillStyle = '#f59e0b';
      g.fillRect(this.xAt(this.position) - 1, 2, 3, 24);
    }
  }

  private report = (err: Error): void => {
    this.label.textContent = err.message;
  };
}
