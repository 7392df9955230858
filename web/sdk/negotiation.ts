// Serializes offer/answer rounds on one peer connection. A round asked for while
// another is in flight is folded into a single follow-up round, so a burst of
// publishTrack calls costs at most two negotiations and never overlaps.

export class Serializer {
  private running: Promise<void> | null = null;
  private again = false;
  private iceRestart = false;

  // `round` runs one complete negotiation; it gets whether to ICE-restart.
  constructor(private round: (iceRestart: boolean) => Promise<void>) {}

  // Resolves when a round that started after this call has finished.
  negotiate(opts: { iceRestart?: boolean } = {}): Promise<void> {
    if (opts.iceRestart) this.iceRestart = true;
    this.again = true;
    if (!this.running) {
      this.running = this.loop().finally(() => {
        this.running = null;
      });
    }
    return this.running;
  }

  private async loop(): Promise<void> {
    while (this.again) {
      this.again = false;
      const iceRestart = this.iceRestart;
      this.iceRestart = false;
      await this.round(iceRestart);
    }
  }
}

// Runs tasks one after another; used for the subscriber side, where the server
// offers and each offer must be fully answered before the next is applied.
export class TaskQueue {
  private tail: Promise<unknown> = Promise.resolve();

  run<T>(task: () => Promise<T>): Promise<T> {
    const next = this.tail.then(task, task);
    this.tail = next.catch(() => {});
    return next;
  }
}

// Remote candidates that arrive before the remote description are held until it
// is set, instead of failing addIceCandidate.
export class CandidateBuffer {
  private held: RTCIceCandidateInit[] = [];

  constructor(private pc: () => RTCPeerConnection | null) {}

  async add(c: RTCIceCandidateInit | null): Promise<void> {
    const pc = this.pc();
    if (!pc) return;
    if (!pc.remoteDescription) {
      if (c) this.held.push(c);
      return;
    }
    await addCandidate(pc, c);
  }

  async flush(): Promise<void> {
    const pc = this.pc();
    const held = this.held;
    this.held = [];
    if (!pc) return;
    for (const c of held) await addCandidate(pc, c);
  }

  clear(): void {
    this.held = [];
  }
}

async function addCandidate(pc: RTCPeerConnection, c: RTCIceCandidateInit | null): Promise<void> {
  try {
    // null / empty candidate marks the end of candidates for this generation.
    await pc.addIceCandidate(c && c.candidate ? c : undefined);
  } catch (err) {
    // A candidate of an older ICE generation after a restart is expected to fail.
    console.debug('petrel: addIceCandidate failed', err);
  }
}
