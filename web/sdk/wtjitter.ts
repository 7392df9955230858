// Time-based jitter buffer for WebTransport media: frames arrive whole (a
// datagram frame once reassembled, a stream frame once its stream ends), out of
// order and late; they leave in frame order at their playout time, which is the
// sender's media clock mapped onto ours plus a target delay that follows the
// measured jitter. A frame that is still missing when its playout deadline
// passes is given up: the frames after it are released, and for video the
// decoder needs a keyframe, which the caller requests (`needKeyframe`).
//
// Pure logic with an injected clock, so it is unit-tested in Node.

export interface JitterFrame<T> {
  /**
   * MoQT position: a video group is a GOP (object 0 the keyframe, objects
   * consecutive), an audio frame is a group of its own. A gap inside a group is a
   * lost frame; a new group may follow any object of the previous one.
   */
  group: number;
  object: number;
  /** Sender's media time, milliseconds. */
  tsMs: number;
  key: boolean;
  data: T;
}

export interface JitterOptions {
  /** Lowest target delay added to the transit estimate (ms). */
  minDelayMs?: number;
  /** Highest target delay: frames are never held longer than this (ms). */
  maxDelayMs?: number;
  /**
   * Video frames depend on the previous one: after a gap nothing decodes until a
   * keyframe. Audio frames stand alone.
   */
  video?: boolean;
}

export interface JitterStats {
  /** Frames released to the decoder. */
  released: number;
  /** Frames that came after their playout deadline, or were skipped waiting for a keyframe. */
  late: number;
  dropped: number;
  /** Frame ids never received before their deadline. */
  lost: number;
  /** Current target delay (ms). */
  targetMs: number;
  /** Inter-arrival jitter estimate (ms, RFC 3550 style). */
  jitterMs: number;
}

// Groups up to 2^32 and objects up to 2^20 fit one ordering key exactly.
const OBJ = 2 ** 20;
const keyOf = (group: number, object: number) => group * OBJ + object;

type Held<T> = JitterFrame<T> & { arrived: number };

export class JitterBuffer<T> {
  private readonly frames = new Map<number, Held<T>>();
  private last = -1; // ordering key of the last frame released; -1 before the first
  // offset = local arrival time − media time, the smallest seen recently: the
  // transit of the fastest frame, against which the others' lateness is measured.
  private offset = Number.NaN;
  private offsetAt = 0;
  private jitter = 0;
  private lastTransit = Number.NaN;
  private waitingKey: boolean;
  private minDelay: number;
  private repairMs = 0;
  private readonly maxDelay: number;
  private readonly video: boolean;
  readonly stats: JitterStats = { released: 0, late: 0, dropped: 0, lost: 0, targetMs: 0, jitterMs: 0 };
  /** Set when the decoder needs a keyframe; the owner clears it after asking. */
  needKeyframe = false;

  constructor(opts: JitterOptions = {}) {
    this.minDelay = opts.minDelayMs ?? 10;
    this.maxDelay = opts.maxDelayMs ?? 400;
    this.video = opts.video ?? true;
    this.waitingKey = this.video;
    this.stats.targetMs = this.minDelay;
  }

  /** Raises the floor for every frame (the old way to make room for a retransmission). */
  setMinDelay(ms: number): void {
    this.minDelay = Math.min(this.maxDelay, ms);
  }

  /**
   * How much longer than its playout time a frame behind a gap waits for the
   * missing one while a retransmission is on its way (0: none is). Only frames
   * that cannot be decoded before the repair are held; frames in order play at
   * the jitter target, so a repair costs latency only while it is needed.
   */
  setRepairMs(ms: number): void {
    this.repairMs = Math.max(0, Math.min(this.maxDelay, ms));
  }

  /** The current repair allowance (ms). */
  get repair(): number {
    return this.repairMs;
  }

  /**
   * Target delay beyond the fastest transit: a multiple of the jitter, bounded.
   * Video uses a small multiple: a frame that comes after its playout time is
   * still shown at once when it is next in order (only a frame overtaken by a
   * later one is dropped), so holding every frame for the worst case would buy
   * smoothness with latency. Audio, played on a clock, gets more.
   */
  get targetMs(): number {
    return Math.min(this.maxDelay, Math.max(this.minDelay, (this.video ? 1.5 : 4) * this.jitter));
  }

  /** The local time at which a frame with this media time plays. */
  playoutAt(tsMs: number): number {
    return tsMs + this.offset + this.targetMs;
  }

  /** Adds a complete frame. Returns false when it is too late or a duplicate. */
  push(f: JitterFrame<T>, now: number): boolean {
    const transit = now - f.tsMs;
    // The minimum transit over the last few seconds: a path that gets shorter
    // moves it down at once, a longer one moves it up once the old minimum aged.
    if (Number.isNaN(this.offset) || transit < this.offset) {
      this.offset = transit;
      this.offsetAt = now;
    } else if (now - this.offsetAt > 5_000) {
      this.offset += 0.5 * (transit - this.offset);
      this.offsetAt = now;
    }
    if (!Number.isNaN(this.lastTransit)) {
      this.jitter += (Math.abs(transit - this.lastTransit) - this.jitter) / 16;
      this.stats.jitterMs = this.jitter;
    }
    this.lastTransit = transit;
    this.stats.targetMs = this.targetMs;

    const k = keyOf(f.group, f.object);
    if (k <= this.last) {
      this.stats.late++;
      return false;
    }
    if (this.frames.has(k)) return false;
    this.frames.set(k, { ...f, arrived: now });
    return true;
  }

  // Whether f may follow the last released frame without a gap.
  private follows(f: Held<T>): boolean {
    if (this.last < 0) return f.key || !this.video;
    const lastGroup = Math.floor(this.last / OBJ);
    if (f.group === lastGroup) return f.object === this.last - lastGroup * OBJ + 1;
    // A new group starts with its object 0: a keyframe for video.
    return f.group > lastGroup && f.object === 0 && (f.key || !this.video);
  }

  private oldest(): [number, Held<T>] | undefined {
    let best: [number, Held<T>] | undefined;
    for (const e of this.frames) if (!best || e[0] < best[0]) best = e;
    return best;
  }

  /** The frames to decode now, in order. Call on every arrival and on a timer. */
  pop(now: number): JitterFrame<T>[] {
    const out: JitterFrame<T>[] = [];
    for (;;) {
      const o = this.oldest();
      if (!o) return out;
      const [k, f] = o;
      if (!this.waitingKey && this.follows(f)) {
        if (now < this.playoutAt(f.tsMs)) return out;
        this.release(k, f, out);
        continue;
      }
      if (this.waitingKey && (f.key || !this.video) && f.object === 0) {
        // The keyframe that restarts decoding.
        if (now < this.playoutAt(f.tsMs)) return out;
        this.waitingKey = false;
        this.release(k, f, out);
        continue;
      }
      // A gap before the oldest frame held: wait for the missing frame until the
      // oldest is due, plus the repair allowance while a retransmission can come.
      if (now < this.playoutAt(f.tsMs) + this.repairMs) return out;
      if (!this.waitingKey) {
        const lastGroup = this.last < 0 ? f.group : Math.floor(this.last / OBJ);
        this.stats.lost += f.group === lastGroup ? Math.max(1, f.object - (this.last - lastGroup * OBJ) - 1) : 1;
      }
      if (!this.video) {
        this.release(k, f, out);
        continue;
      }
      // Video: what follows a gap does not decode; skip to the next keyframe.
      this.waitingKey = true;
      this.needKeyframe = true;
      this.frames.delete(k);
      this.last = k;
      this.stats.dropped++;
    }
  }

  private release(k: number, f: Held<T>, out: JitterFrame<T>[]): void {
    this.frames.delete(k);
    this.last = k;
    this.stats.released++;
    out.push(f);
  }

  /** How many frames are held. */
  get size(): number {
    return this.frames.size;
  }

  /** The earliest time pop() may return something (for the owner's timer). */
  nextDue(): number | undefined {
    const o = this.oldest();
    if (!o) return undefined;
    const due = this.playoutAt(o[1].tsMs);
    return !this.waitingKey && !this.follows(o[1]) ? due + this.repairMs : due;
  }
}
