// Reconnection: ICE restarts when a peer connection's path fails, and the loop
// that resumes a session whose signaling socket dropped (or joins anew once the
// server no longer knows it, or on another node of a cluster).
import { FATAL_CODES, PetrelError, type PcTarget } from './protocol.js';

export const ICE_DISCONNECTED_GRACE_MS = 5_000;
/** How long to try resuming after the socket drops (the server keeps a session for 20 s). */
export const RECONNECT_WINDOW_MS = 20_000;

/**
 * Watches both peer connections' ICE state: a failed path is restarted at once,
 * a disconnected one only if it does not recover by itself (a brief loss).
 */
export class IceWatch {
  private timers: Partial<Record<PcTarget, ReturnType<typeof setTimeout>>> = {};

  constructor(
    /** Whether restarts are wanted now (the room is connected on this session). */
    private active: () => boolean,
    private restart: (target: PcTarget) => void,
  ) {}

  watch(pc: RTCPeerConnection, target: PcTarget): void {
    pc.oniceconnectionstatechange = () => {
      const state = pc.iceConnectionState;
      clearTimeout(this.timers[target]);
      if (!this.active()) return;
      if (state === 'failed') this.restart(target);
      else if (state === 'disconnected') {
        this.timers[target] = setTimeout(() => {
          if (pc.iceConnectionState === 'disconnected') this.restart(target);
        }, ICE_DISCONNECTED_GRACE_MS);
      }
    };
  }

  stop(): void {
    for (const t of Object.values(this.timers)) clearTimeout(t);
    this.timers = {};
  }
}

/** What the reconnect loop needs from the room. */
export interface ReconnectHost {
  windowMs: number;
  /** Still reconnecting (not left, not finished meanwhile). */
  reconnecting(): boolean;
  /** One attempt: open the socket (resuming, or joining anew) and restore the session. */
  attempt(): Promise<void>;
  /** The server no longer knows this session: the next attempt joins as a new participant. */
  forgetResume(): void;
  /** Ends the room with this reason. */
  finish(reason: string): void;
  /** The node itself may be gone (no answer at all): in a cluster, pick another one. */
  failover(): Promise<void>;
}

export interface Clock {
  now(): number;
  sleep(ms: number): Promise<void>;
}

const realClock: Clock = { now: () => Date.now(), sleep: (ms) => new Promise((r) => setTimeout(r, ms)) };

/**
 * Retries with growing pauses (from firstDelay, doubling up to 2 s) until an
 * attempt succeeds, the room leaves the reconnecting state, a fatal error comes,
 * or the window passes (then the room finishes with 'reconnect_failed').
 * Resolves true when an attempt succeeded.
 */
export async function reconnectLoop(host: ReconnectHost, firstDelay = 250, clock: Clock = realClock): Promise<boolean> {
  const deadline = clock.now() + host.windowMs;
  let delay = firstDelay;
  while (clock.now() < deadline && host.reconnecting()) {
    await clock.sleep(delay);
    delay = Math.max(delay, 125);
    delay = Math.min(delay * 2, 2_000);
    if (!host.reconnecting()) return false;
    try {
      await host.attempt();
      return true;
    } catch (err) {
      if (err instanceof PetrelError && err.code === 'not_found') {
        host.forgetResume(); // the resume window has passed: rejoin next
      } else if (err instanceof PetrelError && FATAL_CODES.has(err.code)) {
        host.finish(err.code);
        return false;
      }
      console.info('petrel: reconnect attempt failed', err);
      if (!(err instanceof PetrelError)) await host.failover();
    }
  }
  if (host.reconnecting()) host.finish('reconnect_failed');
  return false;
}
