// The WebCodecs ends of the WebTransport media path: a camera or microphone
// track is read frame by frame (MediaStreamTrackProcessor), encoded (VP8 or
// H.264 video, Opus audio) and handed on as encoded frames; on the receiving
// side encoded frames are decoded and written into a MediaStreamTrackGenerator,
// so the result is an ordinary MediaStreamTrack an app shows in a <video>.
// Transport-free: wt.ts moves the frames.

/** One encoded frame as it travels: a VP8/H.264 picture or an Opus packet. */
export interface EncodedMediaFrame {
  key: boolean;
  /** Media time, milliseconds (capture time for video, sample time for audio). */
  tsMs: number;
  data: Uint8Array;
}

// Chromium's breakout-box classes are not in TypeScript's DOM library.
interface TrackProcessor<T> {
  readable: ReadableStream<T>;
}
interface TrackGenerator extends MediaStreamTrack {
  writable: WritableStream<VideoFrame | AudioData>;
}
declare const MediaStreamTrackProcessor: { new <T>(init: { track: MediaStreamTrack }): TrackProcessor<T> };
declare const MediaStreamTrackGenerator: { new (init: { kind: 'audio' | 'video' }): TrackGenerator };

/** True where this browser can carry media over WebTransport (Chromium today). */
export function webTransportMediaSupported(): boolean {
  const g = globalThis as Record<string, unknown>;
  return !!(g.WebTransport && g.VideoEncoder && g.AudioEncoder && g.MediaStreamTrackProcessor && g.MediaStreamTrackGenerator);
}

export type VideoCodecName = 'vp8' | 'h264';

/** The WebCodecs codec string for a video codec name. */
export function codecString(c: VideoCodecName): string {
  // Constrained baseline 3.1, as Petrel's WebRTC side offers (profile-level-id 42e01f).
  return c === 'h264' ? 'avc1.42e01f' : 'vp8';
}

const asError = (e: unknown): Error => (e instanceof Error ? e : new Error(String(e)));

/**
 * The read loop both sources share: frames from the track's processor, each
 * handed to `handle` and closed after it, errors reported, until closed.
 */
abstract class TrackSource<T extends VideoFrame | AudioData> {
  private reader?: ReadableStreamDefaultReader<T>;
  private closed = false;

  constructor(
    readonly track: MediaStreamTrack,
    protected readonly onError: (e: Error) => void,
  ) {}

  start(): void {
    const processor = new MediaStreamTrackProcessor<T>({ track: this.track });
    this.reader = processor.readable.getReader();
    void this.pump();
  }

  /** Encodes (or skips) one captured frame; the frame is closed after. */
  protected abstract handle(frame: T): void;
  protected abstract get encoder(): { close(): void } | undefined;

  private async pump(): Promise<void> {
    const reader = this.reader!;
    while (!this.closed) {
      let r: ReadableStreamReadResult<T>;
      try {
        r = await reader.read();
      } catch {
        return;
      }
      if (r.done) return;
      try {
        this.handle(r.value);
      } catch (e) {
        this.onError(asError(e));
      } finally {
        r.value.close();
      }
    }
  }

  close(): void {
    this.closed = true;
    void this.reader?.cancel().catch(() => {});
    try {
      this.encoder?.close();
    } catch {
      /* already closed */
    }
  }
}

export interface VideoEncodeOptions {
  codec?: VideoCodecName;
  bitrate?: number;
  framerate?: number;
  /** Seconds between keyframes when nobody asks for one. */
  keyframeIntervalS?: number;
}

/**
 * Reads a video track, encodes it and calls `onFrame` for every encoded frame.
 * Frames are skipped rather than queued when the encoder falls behind (a slow
 * CPU), so latency stays bounded and the frame rate drops instead.
 */
export class VideoSource extends TrackSource<VideoFrame> {
  private enc?: VideoEncoder;
  private keyRequested = true;
  private lastKey = 0;
  private width = 0;
  private height = 0;
  private scale = 1;
  private bitrate: number;
  private readonly codec: VideoCodecName;
  private readonly framerate: number;
  private readonly keyInterval: number;
  /** Frames captured, encoded, and skipped because the encoder was behind. */
  readonly counters = { captured: 0, encoded: 0, skipped: 0, bytes: 0 };

  constructor(
    track: MediaStreamTrack,
    private readonly onFrame: (f: EncodedMediaFrame) => void,
    o: VideoEncodeOptions = {},
    onError: (e: Error) => void = () => {},
  ) {
    super(track, onError);
    this.codec = o.codec ?? 'h264';
    this.bitrate = o.bitrate ?? 800_000;
    this.framerate = o.framerate ?? 30;
    this.keyInterval = (o.keyframeIntervalS ?? 10) * 1000;
  }

  get codecName(): VideoCodecName {
    return this.codec;
  }

  get encodedSize(): { width: number; height: number } {
    return { width: this.width, height: this.height };
  }

  protected get encoder(): VideoEncoder | undefined {
    return this.enc;
  }

  /** The next frame is encoded as a keyframe (a subscriber lost one or joined). */
  requestKeyframe(): void {
    this.keyRequested = true;
  }

  /** Applies a rate decision; a new scale reconfigures the encoder at the next frame. */
  setRate(bitrate: number, scale = this.scale): void {
    // configure() may rebuild the encoder (a stall of a frame or more), so small
    // steps up wait; a cut of 10% or more, or a new scale, applies at once.
    const now = performance.now();
    const change = (bitrate - this.bitrate) / this.bitrate;
    if (scale === this.scale && (Math.abs(change) < 0.1 || (change > 0 && now - this.lastConfigure < 2_000))) return;
    this.lastConfigure = now;
    this.bitrate = bitrate;
    this.scale = scale;
    if (this.enc && this.width) this.configure(this.srcW, this.srcH);
  }

  private srcW = 0;
  private srcH = 0;
  private lastConfigure = 0;

  private configure(srcW: number, srcH: number): void {
    this.srcW = srcW;
    this.srcH = srcH;
    // Even dimensions: H.264 needs them and VP8 encoders prefer them.
    const w = Math.max(2, Math.round(srcW / this.scale / 2) * 2);
    const h = Math.max(2, Math.round(srcH / this.scale / 2) * 2);
    const cfg: VideoEncoderConfig = {
      codec: codecString(this.codec),
      width: w,
      height: h,
      bitrate: this.bitrate,
      framerate: this.framerate,
      latencyMode: 'realtime',
    };
    // Annex B: the server packetizes H.264 into RTP (RFC 6184) from start codes.
    if (this.codec === 'h264') (cfg as VideoEncoderConfig & { avc: { format: string } }).avc = { format: 'annexb' };
    if (!this.enc) {
      this.enc = new VideoEncoder({
        output: (chunk) => {
          const data = new Uint8Array(chunk.byteLength);
          chunk.copyTo(data);
          this.counters.encoded++;
          this.counters.bytes += data.byteLength;
          this.onFrame({ key: chunk.type === 'key', tsMs: Math.round(chunk.timestamp / 1000), data });
        },
        error: (e) => this.onError(asError(e)),
      });
    }
    const resized = w !== this.width || h !== this.height;
    this.enc.configure(cfg);
    this.width = w;
    this.height = h;
    // A reconfigured encoder starts a new stream: its next frame must be a keyframe.
    if (resized) this.keyRequested = true;
  }

  protected handle(frame: VideoFrame): void {
    this.counters.captured++;
    if (frame.displayWidth !== this.srcW || frame.displayHeight !== this.srcH || !this.enc) {
      this.configure(frame.displayWidth, frame.displayHeight);
    }
    const enc = this.enc!;
    // One frame in the encoder at most: a queue there is pure latency.
    if (enc.state !== 'configured' || enc.encodeQueueSize > 1) {
      this.counters.skipped++;
      return;
    }
    const now = performance.now();
    const key = this.keyRequested || now - this.lastKey > this.keyInterval;
    if (key) {
      this.keyRequested = false;
      this.lastKey = now;
    }
    enc.encode(frame, { keyFrame: key });
  }
}

/** Reads a microphone track and encodes it as Opus, 20 ms per frame. */
export class AudioSource extends TrackSource<AudioData> {
  private enc?: AudioEncoder;
  readonly counters = { encoded: 0, bytes: 0 };

  constructor(
    track: MediaStreamTrack,
    private readonly onFrame: (f: EncodedMediaFrame) => void,
    private readonly bitrate = 32_000,
    onError: (e: Error) => void = () => {},
  ) {
    super(track, onError);
  }

  protected get encoder(): AudioEncoder | undefined {
    return this.enc;
  }

  protected handle(data: AudioData): void {
    if (!this.enc) {
      this.enc = new AudioEncoder({
        output: (chunk) => {
          const b = new Uint8Array(chunk.byteLength);
          chunk.copyTo(b);
          this.counters.encoded++;
          this.counters.bytes += b.byteLength;
          this.onFrame({ key: true, tsMs: Math.round(chunk.timestamp / 1000), data: b });
        },
        error: (e) => this.onError(asError(e)),
      });
      // The server's RTP side speaks Opus at 48 kHz; Opus resamples anything else.
      this.enc.configure({ codec: 'opus', sampleRate: data.sampleRate, numberOfChannels: Math.min(2, data.numberOfChannels), bitrate: this.bitrate });
    }
    if (this.enc.state === 'configured') this.enc.encode(data);
  }
}

/**
 * Decodes encoded frames into a MediaStreamTrack. A decode error resets the
 * decoder and calls `onKeyframeNeeded`: the next keyframe starts it again.
 */
export class MediaSink {
  readonly track: MediaStreamTrack;
  private readonly writer: WritableStreamDefaultWriter<VideoFrame | AudioData>;
  private codec: string;
  private videoDecoder?: VideoDecoder;
  private audioDecoder?: AudioDecoder;
  private waitKey = true;
  readonly counters = { decoded: 0, rendered: 0, errors: 0, skipped: 0 };
  /** Called with each decoded video frame before it is rendered (the frame is closed after). */
  onVideoFrame?: (f: VideoFrame) => void;

  constructor(
    readonly kind: 'audio' | 'video',
    codec: string,
    private readonly onKeyframeNeeded: () => void,
  ) {
    this.codec = codec;
    const gen = new MediaStreamTrackGenerator({ kind });
    this.track = gen;
    this.writer = gen.writable.getWriter();
    this.setup();
  }

  private setup(): void {
    if (this.kind === 'video') {
      this.videoDecoder = new VideoDecoder({
        output: (frame) => {
          this.counters.decoded++;
          try {
            this.onVideoFrame?.(frame);
          } catch {
            /* the observer's problem */
          }
          // Render only when the track keeps up; a frame queued behind others is stale.
          if ((this.writer.desiredSize ?? 1) > 0) {
            this.counters.rendered++;
            this.writer.write(frame).catch(() => {});
          } else {
            this.counters.skipped++;
            frame.close();
          }
        },
        error: () => this.fail(),
      });
      const cfg: VideoDecoderConfig = { codec: this.codec === 'h264' ? codecString('h264') : this.codec, optimizeForLatency: true };
      this.videoDecoder.configure(cfg);
    } else {
      this.audioDecoder = new AudioDecoder({
        output: (data) => {
          this.counters.decoded++;
          this.writer.write(data).catch(() => {});
        },
        error: () => this.fail(),
      });
      this.audioDecoder.configure({ codec: 'opus', sampleRate: 48_000, numberOfChannels: 2 });
      this.waitKey = false;
    }
  }

  private fail(): void {
    this.counters.errors++;
    // A closed decoder cannot be reset: make a new one and wait for a keyframe.
    this.videoDecoder = undefined;
    this.audioDecoder = undefined;
    this.waitKey = this.kind === 'video';
    try {
      this.setup();
    } catch {
      return;
    }
    if (this.kind === 'video') this.onKeyframeNeeded();
  }

  /** Decodes one frame (in order; the jitter buffer has made sure of that). */
  decode(f: EncodedMediaFrame): void {
    try {
      if (this.videoDecoder) {
        if (this.waitKey && !f.key) return;
        this.waitKey = false;
        if (this.videoDecoder.state !== 'configured') return;
        this.videoDecoder.decode(new EncodedVideoChunk({ type: f.key ? 'key' : 'delta', timestamp: f.tsMs * 1000, data: f.data }));
      } else if (this.audioDecoder?.state === 'configured') {
        this.audioDecoder.decode(new EncodedAudioChunk({ type: 'key', timestamp: f.tsMs * 1000, data: f.data }));
      }
    } catch {
      this.fail();
    }
  }

  /** The publisher's codec changed (or was first learned): a fresh decoder for it. */
  reconfigure(codec: string): void {
    if (codec === this.codec) return;
    this.codec = codec;
    try {
      this.videoDecoder?.close();
      this.audioDecoder?.close();
    } catch {
      /* already closed */
    }
    this.videoDecoder = undefined;
    this.audioDecoder = undefined;
    this.waitKey = this.kind === 'video';
    this.setup();
  }

  /** After frames were lost: skip to the next keyframe. */
  resync(): void {
    if (this.kind === 'video') this.waitKey = true;
  }

  close(): void {
    try {
      this.videoDecoder?.close();
      this.audioDecoder?.close();
    } catch {
      /* already closed */
    }
    this.track.stop();
  }
}
