// The room protocol as a WebTransport session receives it: the room's events
// track (one JSON object per group, each group on its own stream) read, put
// back in group order, and applied to the participants and their tracks.
import type { ParticipantInfo, TrackInfo } from './protocol.js';
import { WireError } from './wtbytes.js';
import { type StreamReader, streamObjects } from './wtstream.js';

/** A track another participant publishes, as the events track announced it. */
export interface WtTrackInfo extends TrackInfo {
  moqTrack?: string;
}

export interface WtParticipant {
  sid: string;
  identity: string;
  name: string;
  tracks: Map<string, WtTrackInfo>;
}

export interface WtDataMessage {
  from?: string;
  fromSid?: string;
  topic?: string;
  text?: string;
  payload: Uint8Array;
}

export type EventMessage = Record<string, unknown>;

const dec = new TextDecoder();

/** Objects of the events track: each is one JSON message. */
export async function readEventObjects(r: StreamReader, hasExt: boolean, onObject: (json: EventMessage) => void): Promise<void> {
  // Events need no metadata: the extension headers are skipped.
  for await (const o of streamObjects(r, hasExt, 1 << 20)) {
    let json: unknown;
    try {
      json = JSON.parse(dec.decode(o.payload));
    } catch {
      throw new WireError('event object is not JSON');
    }
    if (json && typeof json === 'object') onObject(json as EventMessage);
  }
}

/**
 * Puts events back in group order: their streams may overtake each other. A
 * `joined` event starts the order; a group missing for `gapMs` (its stream
 * reset?) is skipped so that it cannot stall the room state.
 */
export class EventOrder {
  private queue = new Map<number, EventMessage>();
  private next = -1;
  private gapTimer?: ReturnType<typeof setTimeout>;

  constructor(
    private readonly apply: (m: EventMessage) => void,
    private readonly gapMs = 500,
  ) {}

  push(group: number, m: EventMessage): void {
    if (this.next < 0 || m.type === 'joined') this.next = group;
    this.queue.set(group, m);
    this.flush();
  }

  private flush(): void {
    clearTimeout(this.gapTimer);
    while (this.queue.has(this.next)) {
      const m = this.queue.get(this.next)!;
      this.queue.delete(this.next);
      this.next++;
      this.apply(m);
    }
    if (this.queue.size) {
      this.gapTimer = setTimeout(() => {
        this.next = Math.min(...this.queue.keys());
        this.flush();
      }, this.gapMs);
    }
  }

  close(): void {
    clearTimeout(this.gapTimer);
    this.queue.clear();
  }
}

/** What the roster reports as events change it. */
export interface RosterHooks {
  /** The room state arrived (`joined`). */
  joined(): void;
  participantJoined(p: WtParticipant): void;
  participantLeft(p: WtParticipant): void;
  trackPublished(t: WtTrackInfo, p: WtParticipant): void;
  /** Called after the track left the participant's map. */
  trackUnpublished(t: WtTrackInfo, p: WtParticipant): void;
  data(m: WtDataMessage): void;
}

/** The other participants and their tracks, kept from the room's events (ordered by EventOrder). */
export class WtRoster {
  /** Our own participant sid, from `joined`. */
  participantSid = '';
  readonly participants = new Map<string, WtParticipant>(); // by sid

  constructor(private readonly on: RosterHooks) {}

  apply(m: EventMessage): void {
    switch (m.type) {
      case 'joined': {
        this.participantSid = String(m.participantSid ?? '');
        for (const info of (m.participants as ParticipantInfo[] | null) ?? []) {
          if (info.sid === this.participantSid) continue;
          const p = this.participantOf(info);
          this.on.participantJoined(p);
          this.addTracks(p, info);
        }
        this.on.joined();
        break;
      }
      case 'participantJoined': {
        const info = m.participant as ParticipantInfo;
        if (info.sid === this.participantSid) break;
        const known = this.participants.has(info.sid);
        const p = this.participantOf(info);
        if (!known) this.on.participantJoined(p);
        this.addTracks(p, info);
        break;
      }
      case 'participantUpdated': {
        const info = m.participant as ParticipantInfo;
        const p = this.participants.get(info.sid);
        if (p) this.addTracks(p, info);
        break;
      }
      case 'participantLeft': {
        const p = this.participants.get(String(m.participantSid));
        if (!p) break;
        for (const t of [...p.tracks.values()]) this.removeTrack(p, t.sid);
        this.participants.delete(p.sid);
        this.on.participantLeft(p);
        break;
      }
      case 'trackPublished': {
        const p = this.participants.get(String(m.participantSid));
        if (p) this.addTrack(p, m.track as WtTrackInfo);
        break;
      }
      case 'trackUnpublished': {
        const p = this.participants.get(String(m.participantSid));
        if (p) this.removeTrack(p, String(m.trackSid));
        break;
      }
      case 'data': {
        const payload = Uint8Array.from(atob(String(m.payload ?? '')), (c) => c.charCodeAt(0));
        this.on.data({
          from: m.from as string | undefined,
          fromSid: m.fromSid as string | undefined,
          topic: m.topic as string | undefined,
          text: m.text ? dec.decode(payload) : undefined,
          payload,
        });
        break;
      }
    }
  }

  private participantOf(info: ParticipantInfo): WtParticipant {
    let p = this.participants.get(info.sid);
    if (!p) {
      p = { sid: info.sid, identity: info.identity, name: info.name || info.identity, tracks: new Map() };
      this.participants.set(info.sid, p);
    }
    return p;
  }

  private addTracks(p: WtParticipant, info: ParticipantInfo): void {
    for (const t of info.tracks ?? []) this.addTrack(p, t as WtTrackInfo);
  }

  private addTrack(p: WtParticipant, t: WtTrackInfo): void {
    if (p.tracks.has(t.sid)) return;
    p.tracks.set(t.sid, t);
    this.on.trackPublished(t, p);
  }

  private removeTrack(p: WtParticipant, sid: string): void {
    const t = p.tracks.get(sid);
    if (!t) return;
    p.tracks.delete(sid);
    this.on.trackUnpublished(t, p);
  }
}
