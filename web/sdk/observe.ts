// Adaptive subscription: reports how a video element is shown (size, visibility).
import type { TrackSettings } from './roomtypes.js';

// Watches one video element for adaptive subscription: its shown size in device
// pixels (debounced, resizes come in bursts) and whether anyone can see it (page
// visible and element on screen). Reports only changes. Pausing waits until the
// video has stayed hidden a moment: tiles reflow when people join, and each
// pause/resume costs a keyframe. Resuming is at once.
const PAUSE_AFTER_MS = 1_000;

export class VideoObserver {
  private resize: ResizeObserver;
  private intersect: IntersectionObserver;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private pauseTimer: ReturnType<typeof setTimeout> | undefined;
  private onScreen = true;
  private sent: { width?: number; height?: number; paused?: boolean } = {};
  constructor(
    private el: HTMLElement,
    private report: (s: TrackSettings) => void,
    private debounceMs = 300,
  ) {
    this.resize = new ResizeObserver(() => this.schedule());
    this.resize.observe(el);
    this.intersect = new IntersectionObserver((entries) => {
      // An element not laid out yet (no size) says nothing about being seen.
      for (const e of entries) if (e.boundingClientRect.width > 0 && e.boundingClientRect.height > 0) this.onScreen = e.isIntersecting;
      this.update();
    });
    this.intersect.observe(el);
    document.addEventListener('visibilitychange', this.update);
  }
  private schedule(): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(this.update, this.debounceMs);
  }
  private hidden(): boolean {
    return document.visibilityState === 'hidden' || !this.onScreen;
  }
  private update = (): void => {
    const hidden = this.hidden();
    clearTimeout(this.pauseTimer);
    if (hidden && !this.sent.paused) {
      this.pauseTimer = setTimeout(() => this.apply(this.hidden()), PAUSE_AFTER_MS);
      return;
    }
    this.apply(hidden);
  };
  private apply(paused: boolean): void {
    const scale = window.devicePixelRatio || 1;
    const width = Math.round(this.el.clientWidth * scale);
    const height = Math.round(this.el.clientHeight * scale);
    const s: TrackSettings = {};
    if (paused !== (this.sent.paused ?? false)) s.paused = paused;
    // A hidden element has no size worth reporting: keep the last one.
    if (!paused && width > 0 && height > 0 && (width !== this.sent.width || height !== this.sent.height)) {
      s.width = width;
      s.height = height;
    }
    if (Object.keys(s).length === 0) return;
    this.sent = { ...this.sent, ...s };
    this.report(s);
  }
  stop(): void {
    clearTimeout(this.timer);
    clearTimeout(this.pauseTimer);
    this.resize.disconnect();
    this.intersect.disconnect();
    document.removeEventListener('visibilitychange', this.update);
  }
}
