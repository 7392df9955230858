// Cluster placement for the SDK (docs/operations.md): before joining, measure
// the round trip to every node of the cluster and let the cluster pick the node
// with the lowest expected delay to the room; when the node is lost, ask another
// node where to go instead. A server without a cluster answers 404 to
// /v1/cluster/nodes and the SDK simply uses the URL it was given.

export interface ClusterNode {
  id: string;
  url: string;
  ws: string;
  draining: boolean;
}

export interface Placement {
  node: string;
  ws: string;
}

/** The cluster's live nodes as the node at `base` sees them, or null without a cluster. */
export async function clusterNodes(base: string): Promise<ClusterNode[] | null> {
  try {
    const r = await fetch(httpBase(base) + '/v1/cluster/nodes', { cache: 'no-store' });
    if (!r.ok) return null;
    const body = (await r.json()) as { nodes?: ClusterNode[] };
    return Array.isArray(body.nodes) ? body.nodes : null;
  } catch {
    return null;
  }
}

/**
 * Round trip to each node in milliseconds: the best of three small requests to
 * its /healthz (no-cors: only the timing matters, not the response).
 */
export async function measureNodes(nodes: ClusterNode[], tries = 3): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  await Promise.all(
    nodes.map(async (n) => {
      let best = Infinity;
      for (let i = 0; i < tries; i++) {
        const t0 = performance.now();
        try {
          await fetch(n.url + '/healthz', { cache: 'no-store', mode: 'no-cors' });
          best = Math.min(best, performance.now() - t0);
        } catch {
          /* unreachable from here: left out */
        }
      }
      if (best !== Infinity) out[n.id] = best;
    }),
  );
  return out;
}

/**
 * Asks the cluster where a participant of `room` should join: by the measured
 * round trips to the nodes, the nodes' round trips to the room's other
 * participants, and load. With the participant's `token` the cluster records
 * the decision (a join in progress is seen by the next placement) and may
 * re-place the room, moving others with a `reconnect` hint. null without a
 * cluster.
 */
export async function placeParticipant(base: string, room: string, exclude: string[] = [], token = ''): Promise<Placement | null> {
  const nodes = await clusterNodes(base);
  if (!nodes || nodes.length === 0) return null;
  const rtt = await measureNodes(nodes.filter((n) => !exclude.includes(n.id)));
  return askPlace(base, room, rtt, exclude, token);
}

/** Asks the node at `base` for a placement with the given measurements. */
export async function askPlace(
  base: string,
  room: string,
  rtt: Record<string, number>,
  exclude: string[],
  token = '',
): Promise<Placement | null> {
  try {
    const r = await fetch(httpBase(base) + '/v1/cluster/place', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(token ? { room, rtt, exclude, token } : { room, rtt, exclude }),
    });
    if (!r.ok) return null;
    const p = (await r.json()) as Placement;
    return p.ws ? p : null;
  } catch {
    return null;
  }
}

/**
 * After losing node `lost`, asks the other known nodes in turn where to go.
 */
export async function failover(nodes: ClusterNode[], lost: string, room: string): Promise<Placement | null> {
  for (const n of nodes) {
    if (n.id === lost) continue;
    const p = await askPlace(n.url, room, {}, [lost]);
    if (p) return p;
  }
  return null;
}

/** The room a token is for (its `room` claim), '' if it cannot be read. */
export function tokenRoom(token: string): string {
  try {
    const part = token.split('.')[1] ?? '';
    const json = atob(part.replace(/-/g, '+').replace(/_/g, '/').padEnd(Math.ceil(part.length / 4) * 4, '='));
    const room = (JSON.parse(json) as { room?: unknown }).room;
    return typeof room === 'string' ? room : '';
  } catch {
    return '';
  }
}

/** http(s)://host[:port] of a ws(s):// or http(s):// URL. */
export function httpBase(url: string): string {
  const u = new URL(url, typeof location !== 'undefined' ? location.href : undefined);
  const proto = u.protocol === 'wss:' ? 'https:' : u.protocol === 'ws:' ? 'http:' : u.protocol;
  return `${proto}//${u.host}`;
}
