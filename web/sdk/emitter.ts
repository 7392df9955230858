// A minimal typed event emitter: the SDK must run in any browser without a
// Node-style EventEmitter, and DOM EventTarget loses the listener argument types.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Listener = (...args: any[]) => void;

export class Emitter<Events extends { [K in keyof Events]: Listener }> {
  private listeners = new Map<keyof Events, Set<Listener>>();

  on<K extends keyof Events>(event: K, fn: Events[K]): this {
    let set = this.listeners.get(event);
    if (!set) this.listeners.set(event, (set = new Set()));
    set.add(fn);
    return this;
  }

  off<K extends keyof Events>(event: K, fn: Events[K]): this {
    this.listeners.get(event)?.delete(fn);
    return this;
  }

  once<K extends keyof Events>(event: K, fn: Events[K]): this {
    const wrapped = ((...args: Parameters<Events[K]>) => {
      this.off(event, wrapped);
      fn(...args);
    }) as Events[K];
    return this.on(event, wrapped);
  }

  protected emit<K extends keyof Events>(event: K, ...args: Parameters<Events[K]>): void {
    for (const fn of [...(this.listeners.get(event) ?? [])]) {
      try {
        fn(...args);
      } catch (err) {
        // A broken listener must not break the SDK's own state handling.
        console.error(`petrel: ${String(event)} listener failed`, err);
      }
    }
  }
}
