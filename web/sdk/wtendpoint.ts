// Where and how a WebTransport session connects: the URL and the development
// certificate's hash for a Petrel origin, and the room and identity a token names.
import { PetrelError } from './protocol.js';

/** Where a session connects (the part of WtConnectOptions that concerns it). */
export interface WtEndpointOptions {
  /** The WebTransport URL (default: the origin's host and port, path /v1/moq). */
  url?: string;
  /** Skip fetching the development certificate hash (production certificate). */
  noCertHash?: boolean;
}

/** Room name and identity from a token's claims (not verified here: the server does). */
export function tokenClaims(token: string): { room: string; identity: string } {
  try {
    const b64 = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    const c = JSON.parse(atob(b64 + '='.repeat((4 - (b64.length % 4)) % 4)));
    return { room: String(c.room ?? ''), identity: String(c.sub ?? '') };
  } catch {
    throw new PetrelError('bad_token', 'the token is not a JWT');
  }
}

/** The WebTransport URL and development certificate hash for a Petrel origin. */
export async function wtEndpoint(origin: string, o: WtEndpointOptions = {}): Promise<{ url: string; hashes?: WebTransportHash[] }> {
  const u = new URL(origin);
  // Chromium resolves localhost to ::1 first, where the QUIC listener may not be.
  const host = u.hostname === 'localhost' ? '127.0.0.1' : u.hostname;
  const url = o.url ?? `https://${host}:${u.port || (u.protocol === 'https:' ? '443' : '80')}/v1/moq`;
  if (o.noCertHash) return { url };
  const res = await fetch(new URL('/v1/wt-cert-hash', origin));
  if (res.status === 404) return { url }; // a configured certificate: no hash to pin
  if (!res.ok) throw new PetrelError('webtransport', `certificate hash: HTTP ${res.status}`);
  const j = (await res.json()) as { algorithm: string; value: string };
  const raw = Uint8Array.from(atob(j.value), (c) => c.charCodeAt(0));
  return { url, hashes: [{ algorithm: j.algorithm || 'sha-256', value: raw }] };
}
