// Room membership: the other participants and their publications as the server
// reports them, kept as one shown participant per person while a session moves
// to another node (the new session is the successor of the old one: same
// object, tiles and publications, new sids).
import type { ParticipantInfo, TrackInfo } from './protocol.js';
import { RemoteParticipant, RemoteTrackPublication, type RoomEvents } from './roomtypes.js';

export type Emit = <K extends keyof RoomEvents>(event: K, ...args: Parameters<RoomEvents[K]>) => void;

export interface MembersHost {
  emit: Emit;
  /** Our own identity: its sessions elsewhere (we are moving) are not someone else. */
  localIdentity(): string | undefined;
  /** A remote track arrived for a known publication: show it. */
  attach(pub: RemoteTrackPublication, p: RemoteParticipant, track: MediaStreamTrack): void;
}

export class Members {
  readonly participants = new Map<string, RemoteParticipant>();
  // Sessions of an identity already shown (it moves): successor sid -> the participant shown.
  private successorOf = new Map<string, RemoteParticipant>();
  // Tracks that arrived before the server told us who published them.
  private orphanTracks = new Map<string, MediaStreamTrack>();
  // A move in progress: participants that left the old node meanwhile stay
  // shown (frozen) until the new node's session takes them over.
  private moving = false;
  private leftDuringMove = new Set<string>();

  constructor(private host: MembersHost) {}

  get isMoving(): boolean {
    return this.moving;
  }

  /** A participant joined or changed (its track list is authoritative). */
  upsert(info: ParticipantInfo): void {
    if (info.identity === this.host.localIdentity()) return;
    let p = this.participants.get(info.sid);
    const prev = p ? undefined : this.successorOf.get(info.sid) ?? this.byIdentity(info.identity);
    if (prev) {
      // The same person's second session (it moves to another node): keep
      // showing it as one participant; its tracks take over as they arrive.
      prev.successor = info;
      this.successorOf.set(info.sid, prev);
      return;
    }
    if (!p) {
      p = new RemoteParticipant(info);
      this.participants.set(info.sid, p);
      this.host.emit('participantJoined', p);
    } else {
      p.info = info;
      this.host.emit('participantUpdated', p);
    }
    // The track list in ParticipantInfo is authoritative; reconcile with what we hold.
    const listed = new Set<string>();
    for (const t of info.tracks ?? []) {
      listed.add(t.sid);
      const pub = p.tracks.get(t.sid);
      if (!pub) this.addPublication(p, t);
      else if (pub.info.muted !== t.muted) {
        pub.info = t;
        this.host.emit('trackMuted', pub, p, t.muted);
      } else pub.info = t;
    }
    for (const pub of [...p.tracks.values()]) if (!listed.has(pub.sid)) this.removePublication(p, pub);
  }

  /** The participants of a (re)join: those not listed left, unless their successor is here. */
  reconcile(infos: ParticipantInfo[], localSid: string): void {
    const present = new Set<string>();
    for (const info of infos) {
      if (info.sid === localSid) continue;
      present.add(info.sid);
      this.upsert(info);
    }
    for (const p of [...this.participants.values()]) {
      if (present.has(p.sid)) continue;
      // Gone, but its successor is here (it moved nodes): the same tile.
      if (p.successor && present.has(p.successor.sid)) this.promote(p);
      else this.remove(p, 'left');
    }
  }

  left(sid: string, reason: string): void {
    const p = this.participants.get(sid);
    if (p?.successor) this.promote(p);
    else if (p && this.moving) this.leftDuringMove.add(sid);
    else if (p) this.remove(p, reason);
    else {
      const shown = this.successorOf.get(sid);
      this.successorOf.delete(sid);
      if (shown?.successor?.sid === sid) shown.successor = undefined;
    }
  }

  trackPublished(participantSid: string, track: TrackInfo): void {
    const p = this.participants.get(participantSid);
    if (p && !p.tracks.has(track.sid)) this.addPublication(p, track);
    const prev = p ? undefined : this.successorOf.get(participantSid);
    if (prev?.successor) {
      // A moving participant's new session publishes: its track takes over
      // the shown publication of the same kind and source when it arrives.
      const tracks = (prev.successor.tracks ?? []).filter((t) => t.sid !== track.sid);
      prev.successor = { ...prev.successor, tracks: [...tracks, track] };
      const orphan = this.orphanTracks.get(track.sid);
      const pub = orphan && this.takeOver(prev, track.sid);
      if (orphan && pub) {
        this.orphanTracks.delete(track.sid);
        this.host.attach(pub, prev, orphan);
      }
    }
  }

  trackUnpublished(participantSid: string, trackSid: string): void {
    const p = this.participants.get(participantSid);
    const pub = p?.tracks.get(trackSid);
    if (p && pub) this.removePublication(p, pub);
  }

  trackMuted(participantSid: string, trackSid: string, muted: boolean): void {
    const p = this.participants.get(participantSid);
    const pub = p?.tracks.get(trackSid);
    if (p && pub && pub.info.muted !== muted) {
      pub.info = { ...pub.info, muted };
      this.host.emit('trackMuted', pub, p, muted);
    }
  }

  trackSubscribed(participantSid: string, trackSid: string): void {
    const pub = this.participants.get(participantSid)?.tracks.get(trackSid);
    if (pub) pub.subscribed = true;
  }

  trackUnsubscribed(participantSid: string, trackSid: string): void {
    const p = this.participants.get(participantSid);
    const pub = p?.tracks.get(trackSid);
    if (pub) this.dropSubscription(pub, p);
  }

  /** A track arrived on the subscriber connection (msid: participant and track sid). */
  trackArrived(participantSid: string, trackSid: string, track: MediaStreamTrack): void {
    const p = this.participants.get(participantSid) ?? this.successorOf.get(participantSid);
    const pub = p?.tracks.get(trackSid) ?? (p?.successor?.sid === participantSid ? this.takeOver(p, trackSid) : undefined);
    if (!p || !pub) {
      this.orphanTracks.set(trackSid, track);
      return;
    }
    this.host.attach(pub, p, track);
  }

  /** A move starts: who leaves the old node meanwhile stays shown until it ends. */
  startMove(): void {
    this.moving = true;
  }

  endMove(): void {
    if (!this.moving) return;
    this.moving = false;
    for (const sid of [...this.leftDuringMove]) {
      const p = this.participants.get(sid);
      if (p?.successor) this.promote(p);
      else if (p) this.remove(p, 'left');
    }
    this.leftDuringMove.clear();
  }

  /**
   * We moved to another node whose participants are `infos`: everyone shown
   * becomes their session there (same identity), or leaves; newcomers join. Of
   * two sessions of one identity there (a mirror of someone still moving, and
   * their new session), the earlier is shown and the later succeeds it when it leaves.
   */
  adoptNode(infos: Iterable<ParticipantInfo>, localIdentity: string): void {
    this.orphanTracks.clear();
    const stale = new Set(this.participants.keys());
    const order = [...infos].sort((a, b) => (a.joinedAt ?? 0) - (b.joinedAt ?? 0));
    for (const info of order) {
      if (info.identity === localIdentity) continue;
      const shown = this.byIdentity(info.identity);
      if (shown && stale.has(shown.sid)) {
        shown.successor = info;
        this.successorOf.set(info.sid, shown);
        this.promote(shown);
      } else this.upsert(info);
    }
    for (const sid of stale) {
      const p = this.participants.get(sid);
      if (p?.successor) this.promote(p);
      else if (p) this.remove(p, 'left');
    }
    this.leftDuringMove.clear();
  }

  /** Every remote track unsubscribed (the connections that carried them are gone). */
  dropSubscriptions(): void {
    for (const p of this.participants.values()) for (const pub of p.tracks.values()) this.dropSubscription(pub, p);
  }

  clearOrphans(): void {
    this.orphanTracks.clear();
  }

  /** The room closes: subscriptions end and nobody is left, without participantLeft events. */
  clear(): void {
    this.dropSubscriptions();
    this.participants.clear();
    this.orphanTracks.clear();
  }

  private byIdentity(identity: string): RemoteParticipant | undefined {
    for (const p of this.participants.values()) if (p.identity === identity) return p;
    return undefined;
  }

  // The publication of p that the successor's track `trackSid` replaces (same
  // kind and source, not yet taken over), re-keyed to the new track; a new
  // publication if there is none.
  private takeOver(p: RemoteParticipant, trackSid: string): RemoteTrackPublication | undefined {
    const t = p.successor?.tracks?.find((x) => x.sid === trackSid);
    if (!t) return undefined;
    const taken = new Set((p.successor?.tracks ?? []).map((x) => x.sid));
    for (const pub of p.tracks.values()) {
      if (taken.has(pub.sid) || pub.kind !== t.kind || pub.source !== t.source) continue;
      p.tracks.delete(pub.sid);
      pub.info = t;
      p.tracks.set(t.sid, pub);
      return pub;
    }
    const pub = new RemoteTrackPublication(t, p.sid);
    p.tracks.set(t.sid, pub);
    this.host.emit('trackPublished', pub, p);
    return pub;
  }

  // The old session of a moving participant is gone: the shown participant
  // becomes its successor (same object, tiles and publications, new sids).
  private promote(p: RemoteParticipant): void {
    const info = p.successor;
    if (!info) return;
    const oldSid = p.sid;
    for (const t of info.tracks ?? []) if (!p.tracks.has(t.sid)) this.takeOver(p, t.sid);
    p.successor = undefined;
    this.successorOf.delete(info.sid);
    this.leftDuringMove.delete(oldSid);
    this.participants.delete(oldSid);
    p.info = info;
    this.participants.set(info.sid, p);
    for (const pub of p.tracks.values()) pub.participantSid = info.sid;
    this.host.emit('participantMoved', p, oldSid);
    this.upsert(info);
  }

  private remove(p: RemoteParticipant, reason: string): void {
    for (const pub of [...p.tracks.values()]) this.removePublication(p, pub);
    this.participants.delete(p.sid);
    this.host.emit('participantLeft', p, reason);
  }

  private addPublication(p: RemoteParticipant, info: TrackInfo): void {
    const pub = new RemoteTrackPublication(info, p.sid);
    p.tracks.set(info.sid, pub);
    this.host.emit('trackPublished', pub, p);
    const orphan = this.orphanTracks.get(info.sid);
    if (orphan) {
      this.orphanTracks.delete(info.sid);
      this.host.attach(pub, p, orphan);
    }
  }

  private removePublication(p: RemoteParticipant, pub: RemoteTrackPublication): void {
    this.dropSubscription(pub, p);
    p.tracks.delete(pub.sid);
    this.host.emit('trackUnpublished', pub, p);
  }

  private dropSubscription(pub: RemoteTrackPublication, p: RemoteParticipant | undefined): void {
    pub.subscribed = false;
    const track = pub.track;
    pub.track = undefined;
    pub.sfuTrack = undefined;
    if (track) this.host.emit('trackUnsubscribed', track, pub, p);
  }
}
