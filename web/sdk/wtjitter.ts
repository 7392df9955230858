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
  /** Consecutive per track (a gap is a lost frame). */
  id: number;
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

export class JitterBuffer<T> {
  private readonly frames = new Map<number, JitterFrame<T> & { arrived: number }>();
  private next = -1; // the id expected next; -1 until the first keyframe (video) or frame
  private newest = -1;
  // offset = local arrival time − media time, the smallest seen recently: the
  // transit of the fastest frame, against which the others' lateness is measured.
  private offset = Number.NaN;
  private offsetAt = 0;
  private jitter = 0;
  private lastTransit = Number.NaN;
  private waitingKey: boolean;
  private readonly minDelay: number;
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

  /** Target delay beyond the fastest transit: four times the jitter, bounded. */
  get targetMs(): number {
    return Math.min(this.maxDelay, Math.max(this.minDelay, 4 * this.jitter));
  }

  /** The local time at which a frame with this media time plays. */
  playoutAt(tsMs: number): number {
    return tsMs + this.offset + this.targetMs;
  }

  /** Adds a complete frame. Returns false when it is too late or a duplicate. */
  push(f: JitterFrame<T>, now: number): boolean {
    const transit = now - f.tsMs;
    // The minimum transit over the last few seconds: a clock offset that drifts
    // or a path that gets shorter moves it down at once, a longer path moves it
    // up once the old minimum has aged out.
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

    if (this.next >= 0 && f.id < this.next) {
      this.stats.late++;
      return false;
    }
    if (this.frames.has(f.id)) return false;
    this.frames.set(f.id, { ...f, arrived: now });
    if (f.id > this.newest) this.newest = f.id;
    return true;
  }

  /** The frames to decode now, in order. Call on every arrival and on a timer. */
  pop(now: number): JitterFrame<T>[] {
    const out: JitterFrame<T>[] = [];
    for (;;) {
      if (this.next < 0 || this.waitingKey) {
        // Start (or restart) at the oldest keyframe held; drop what precedes it.
        let key: (JitterFrame<T> & { arrived: number }) | undefined;
        for (const f of this.frames.values()) if ((f.key || !this.video) && (!key || f.id < key.id)) key = f;
        if (!key) {
          // Nothing to start from: shed frames that are past their deadline.
          for (const [id, f] of this.frames) {
            if (now > this.playoutAt(f.tsMs) + this.maxDelay) {
              this.frames.delete(id);
              this.stats.dropped++;
            }
          }
          if (this.video && this.frames.size > 0) this.needKeyframe = true;
          return out;
        }
        for (const [id] of this.frames) {
          if (id < key.id) {
            this.frames.delete(id);
            this.stats.dropped++;
          }
        }
        this.next = key.id;
        this.waitingKey = false;
      }
      const f = this.frames.get(this.next);
      if (f) {
        if (now < this.playoutAt(f.tsMs)) return out;
        this.frames.delete(this.next);
        this.next++;
        this.stats.released++;
        out.push(f);
        continue;
      }
      // The next frame is missing. Give it up once a later frame is due, i.e.
      // once waiting longer would delay frames we already hold past their time.
      let later: (JitterFrame<T> & { arrived: number }) | undefined;
      for (const g of this.frames.values()) if (g.id > this.next && (!later || g.id < later.id)) later = g;
      if (!later || now < this.playoutAt(later.tsMs)) return out;
      this.stats.lost += later.id - this.next;
      if (this.video) {
        this.waitingKey = true;
        this.needKeyframe = true;
      } else {
        this.next = later.id;
      }
    }
  }

  /** How many frames are held. */
  get size(): number {
    return this.frames.size;
  }

  /** The earliest time pop() may return something (for the owner's timer). */
  nextDue(): number | undefined {
    let t: number | undefined;
    for (const f of this.frames.values()) {
      const p = this.playoutAt(f.tsMs);
      if (t === undefined || p < t) t = p;
    }
    return t;
  }
}
