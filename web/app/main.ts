// The room page: a join form, one tile per participant, media controls, a chat
// and a small stats panel. Everything goes through the SDK, as a user's app would.
import {
  type LocalTrackPublication,
  type RemoteParticipant,
  type StatsSummary,
  PetrelError,
  Room,
} from '../sdk/index.js';
import { joinWt, transportChoice } from './wtcall.js';
import { mountCameraControls } from './ptzui.js';
import { mountCameraPage } from './camera.js';
import { Timeline } from './timeline.js';

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const params = new URLSearchParams(location.search);
const joinForm = $<HTMLFormElement>('join-form');
const joinError = $('join-error');
const call = $('call');
const tiles = $('tiles');
const status = $('status');

let room: Room | null = null;
let roomToken = ''; // the recording timeline authorizes with it
let statsTimer: ReturnType<typeof setInterval> | undefined;

// Exposed for scripting and the browser tests.
declare global {
  interface Window {
    petrel: { Room: typeof Room; room: Room | null; timeline?: Timeline };
  }
}
window.petrel = { Room, room: null };

// ---- joining ------------------------------------------------------------------------

(joinForm.elements.namedItem('room') as HTMLInputElement).value = params.get('room') ?? '';
(joinForm.elements.namedItem('name') as HTMLInputElement).value = params.get('name') ?? '';
(joinForm.elements.namedItem('relay') as HTMLInputElement).checked = params.get('relay') === '1';
(joinForm.elements.namedItem('transport') as HTMLSelectElement).value = transportChoice(params.get('transport'));

// End-to-end encryption: the passphrase lives in the URL fragment (#e2ee=...),
// which the browser never sends to the server.
function e2eePassphrase(): string {
  return new URLSearchParams(location.hash.slice(1)).get('e2ee') ?? '';
}
(joinForm.elements.namedItem('e2ee') as HTMLInputElement).value = e2eePassphrase();
function e2eeTransform(): 'auto' | 'script' | 'streams' {
  const v = params.get('e2eeTransform');
  return v === 'script' || v === 'streams' ? v : 'auto';
}

joinForm.addEventListener('submit', (ev) => {
  ev.preventDefault();
  const data = new FormData(joinForm);
  // Typed into the form: keep it in the fragment, so that a reload or a shared link has it.
  const typed = String(data.get('e2ee') ?? '');
  if (typed !== e2eePassphrase()) {
    const h = new URLSearchParams(location.hash.slice(1));
    if (typed) h.set('e2ee', typed);
    else h.delete('e2ee');
    history.replaceState(null, '', `${location.pathname}${location.search}${h.size ? `#${h}` : ''}`);
  }
  void join(String(data.get('room')), String(data.get('name')), data.get('relay') === 'on');
});

// "Watch over HLS" instead of joining: the room named in the form, as a passive viewer (hls.ts).
$<HTMLButtonElement>('watch-hls').addEventListener('click', () => {
  const name = String(new FormData(joinForm).get('room') ?? '').trim();
  if (!name) {
    joinError.textContent = 'Name the room to watch';
    return;
  }
  const q = new URLSearchParams({ room: name, hls: '1' });
  if (params.get('token')) q.set('token', params.get('token') ?? '');
  location.search = `?${q}`;
});

// ?hls=1 with ?room= or ?camera= plays that room's or camera's HLS egress (hls.ts);
// ?cameras=1 (the wall) and ?camera=<id> (one camera with its time-to-stream) are the camera pages (camera.ts).
if (params.get('hls') === '1' && (params.get('room') || params.get('camera'))) {
  // hls.js is most of the app's size: only an HLS page loads it (a chunk of its own).
  void import('./hls.js').then(({ mountHLSPage }) => mountHLSPage(document.querySelector('main') as HTMLElement, params));
} else if (params.get('cameras') === '1' || params.get('camera')) {
  void mountCameraPage(document.querySelector('main') as HTMLElement, params);
} else if (params.get('token') || params.get('autojoin') === '1') {
  void join(params.get('room') ?? '', params.get('name') ?? '', params.get('relay') === '1');
}

// ?svc=vp9 or av1 publishes the camera as one scalable (L3T3_KEY) encoding.
function svcParam(): 'vp9' | 'av1' | undefined {
  const v = params.get('svc');
  return v === 'vp9' || v === 'av1' ? v : undefined;
}

// ?simulcast=1 forces simulcast on, 0 off; otherwise the SDK decides by room size.
function simulcastParam(): boolean | undefined {
  const v = params.get('simulcast');
  return v === '1' ? true : v === '0' ? false : undefined;
}

async function devToken(roomName: string, name: string): Promise<string> {
  // Identities must be unique in a room; the name need not be.
  const identity = `${name.toLowerCase().replace(/[^a-z0-9]+/g, '-')}-${Math.random().toString(36).slice(2, 7)}`;
  const res = await fetch('/v1/dev/token', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ room: roomName, identity, name }),
  });
  if (!res.ok) {
    throw new Error(
      res.status === 404 || res.status === 403
        ? 'This server does not hand out development tokens: open the page with ?token=…'
        : `token request failed: ${res.status} ${await res.text()}`,
    );
  }
  return ((await res.json()) as { token: string }).token;
}

async function join(roomName: string, name: string, relay: boolean): Promise<void> {
  joinError.textContent = '';
  const submit = joinForm.querySelector('button') as HTMLButtonElement;
  submit.disabled = true;
  try {
    const token = params.get('token') || (await devToken(roomName, name));
    // WebTransport instead of WebRTC: the form's choice or ?transport=wt-datagram|wt-stream.
    const transport = transportChoice(new FormData(joinForm).get('transport')?.toString());
    if (transport !== 'webrtc') {
      // Never send in the clear what the user asked to encrypt.
      if (e2eePassphrase()) throw new Error('End-to-end encryption works over WebRTC only: choose WebRTC or clear the passphrase');
      await joinWt(token, transport === 'wt-stream' ? 'stream' : 'datagram', {
        addTile,
        removeTile: (sid) => tileOf(sid)?.remove(),
        setStatus,
        note,
        showConnection,
        showDevices: (current) => void listDevices(current),
        onLeft: (reason) => {
          tiles.replaceChildren();
          call.hidden = true;
          joinForm.hidden = false;
          if (reason !== 'left') joinError.textContent = `Disconnected: ${reason}`;
        },
      });
      joinForm.hidden = true;
      call.hidden = false;
      return;
    }
    const r = new Room();
    roomToken = token;
    wireRoom(r);
    setStatus('connecting…');
    await r.connect(location.origin, token, {
      name: name || undefined,
      iceTransportPolicy: relay ? 'relay' : 'all',
      // ?p2p=0 keeps a 1:1 call on the server (the SFU path), e.g. to test it.
      p2p: params.get('p2p') !== '0',
      // ?e2eeTransform=streams|script picks the browser API (tests of Chromium's older one).
      e2ee: e2eePassphrase() ? { passphrase: e2eePassphrase(), transform: e2eeTransform() } : undefined,
    });
    $('e2ee-badge').hidden = !r.e2ee;
    room = r;
    window.petrel.room = r;
    $('room-name').textContent = r.room?.name ?? roomName;
    joinForm.hidden = true;
    call.hidden = false;
    addTile(r.localParticipant?.sid ?? 'local', `${r.localParticipant?.name || name || r.localParticipant?.identity} (you)`, true);
    statsTimer = setInterval(() => void refreshStats(r), 1000);
    // Media is optional: a participant without camera or microphone still
    // joins. A recording's viewer (room recording/<id>) only watches.
    if (!/^recording\//.test(r.room?.name ?? roomName)) {
      await r.publishCamera({ simulcast: simulcastParam(), svc: svcParam() }).catch((err) => note(`camera: ${describe(err)}`));
      await r.publishMicrophone().catch((err) => note(`microphone: ${describe(err)}`));
    }
    updateControls();
    // Labels are only readable once the user allowed the devices, so list them now.
    await listDevices();
  } catch (err) {
    joinError.textContent = describe(err);
    setStatus('not connected');
  } finally {
    submit.disabled = false;
  }
}

function wireRoom(r: Room): void {
  r.on('connectionStateChanged', (s) => setStatus(s));
  r.on('participantJoined', (p) => {
    // A recording played back to us: the timeline shows it in the camera's tile.
    if (p.identity.startsWith('playback-')) return;
    // An audio-mixed room's mixer is the room's sound, not a person: no tile.
    if (p.audioMix) {
      $('mix-badge').hidden = false;
      return;
    }
    const tile = addTile(p.sid, p.name, false);
    // In a camera room the camera gets PTZ, talk-back and picture tools (ptzui.ts).
    if (p.identity === 'camera' && /^camera\//.test(r.room?.name ?? '')) mountCameraControls(r, tile.querySelector('video') as HTMLVideoElement, tile);
    // ...and the recording timeline (timeline.ts).
    const camRoom = /^camera\/(.+)$/.exec(r.room?.name ?? '');
    if (p.identity === 'camera' && camRoom) {
      window.petrel.timeline?.close();
      window.petrel.timeline = new Timeline(tile, { room: r, camera: camRoom[1], token: roomToken, video: tile.querySelector('video') as HTMLVideoElement });
    }
    // A room recording plays back in room recording/<id>: its participant
    // "camera" answers the timeline, the tracks come as playback tiles.
    if (p.identity === 'camera' && /^recording\//.test(r.room?.name ?? '')) {
      tile.querySelector('video')?.remove();
      window.petrel.timeline?.close();
      window.petrel.timeline = new Timeline(tile, { room: r, token: roomToken });
    }
  });
  r.on('participantUpdated', (p) => updateLabel(p));
  // Moved to another node (a drain): the same tile, under the new sid; its
  // tracks follow by trackSubscribed and swap on their first frame.
  r.on('participantMoved', (p, oldSid) => {
    const tile = tileOf(oldSid);
    if (tile) tile.dataset.sid = p.sid;
    const screen = tileOf(`${oldSid}/screen`);
    if (screen) screen.dataset.sid = `${p.sid}/screen`;
    if (pinned.delete(oldSid)) {
      pinned.add(p.sid);
      void sendPins();
    }
  });
  r.on('participantLeft', (p) => {
    if (p.audioMix) $('mix-badge').hidden = true;
    tileOf(p.sid)?.remove();
    if (pinned.delete(p.sid)) void sendPins();
  });
  r.on('trackSubscribed', (track, pub, p) => {
    if (p?.identity.startsWith('playback-')) {
      // A camera's recording: the timeline shows it in the camera's tile. A
      // room recording's: one tile per recorded participant (the track's name).
      if (/^recording\//.test(r.room?.name ?? '')) showRecorded(pub.info.name || pub.sid, track, pub.sid);
      return;
    }
    if (p?.audioMix) {
      // The mix of everyone else: played outside the tiles.
      playAudio($('room-audio'), track, pub.sid);
      return;
    }
    const tile = tileOf(pub.participantSid) ?? addTile(pub.participantSid, p?.name ?? '', false);
    if (track.kind === 'video') {
      // Screen shares get their own tile so that the camera stays visible.
      const target = pub.source === 'screen' ? addTile(`${pub.participantSid}/screen`, `${p?.name ?? ''} (screen)`, false) : tile;
      const video = target.querySelector('video') as HTMLVideoElement;
      showVideo(video, track, pub.sid);
      // Adaptive subscription: the layer that fits the tile, nothing while unseen.
      r.observeVideo(pub.sid, video);
    } else {
      playAudio(tile, track, pub.sid);
    }
    if (p) updateLabel(p);
  });
  r.on('trackUnsubscribed', (_track, pub) => {
    document.querySelectorAll(`[data-track-sid="${pub.sid}"]`).forEach((el) => {
      if (!(el instanceof HTMLVideoElement)) {
        el.remove();
        return;
      }
      pendingSwap.get(el)?.(); // the tile's next track is waiting for its first frame: show it now
      if (el.dataset.trackSid !== pub.sid) return;
      room?.unobserveVideo(el);
      el.srcObject = null;
      if (pub.source === 'screen') el.closest('.tile')?.remove();
    });
  });
  r.on('trackMuted', (_pub, p) => updateLabel(p));
  // A tile whose frames do not decrypt says so instead of freezing.
  r.on('e2eeStateChanged', (pub, p) => {
    const tile = tileOf(pub.source === 'screen' ? `${pub.participantSid}/screen` : pub.participantSid);
    if (!tile) return;
    const failing = [...(p?.tracks.values() ?? [pub])].map((t) => t.e2eeState).find((s) => s && s !== 'ok');
    let banner = tile.querySelector<HTMLElement>('.e2ee-error');
    tile.dataset.e2ee = failing ?? 'ok';
    if (!failing) return banner?.remove();
    if (!banner) {
      banner = document.createElement('div');
      banner.className = 'e2ee-error';
      banner.setAttribute('role', 'status');
      tile.append(banner);
    }
    banner.textContent = failing === 'missing_key' ? 'Cannot decrypt: no key for this participant' : 'Cannot decrypt: wrong encryption key';
  });
  // A video this browser cannot decode (e.g. H.264 High): the tile says so.
  r.on('trackUnsupported', (pub) => {
    if (pub.kind !== 'video') return;
    const tile = tileOf(pub.source === 'screen' ? `${pub.participantSid}/screen` : pub.participantSid);
    if (!tile || tile.querySelector('.codec-error')) return;
    const banner = document.createElement('div');
    banner.className = 'e2ee-error codec-error';
    banner.setAttribute('role', 'status');
    banner.textContent = `Cannot play this video: the browser does not decode ${pub.info.mimeType}`;
    tile.append(banner);
  });
  r.on('mediaPathChanged', (path) => {
    const el = $('media-path');
    el.dataset.path = path;
    el.textContent = path === 'p2p' ? 'direct (p2p)' : 'via server';
  });
  r.on('dominantSpeakerChanged', (sid) => {
    tiles.querySelectorAll('.tile.speaking').forEach((t) => t.classList.remove('speaking'));
    tileOf(sid)?.classList.add('speaking');
  });
  r.on('localTrackPublished', (pub) => {
    if (pub.kind === 'video' && pub.source === 'camera') {
      const video = tileOf(r.localParticipant?.sid ?? 'local')?.querySelector('video');
      if (video) video.srcObject = new MediaStream([pub.track]);
    }
    updateControls();
  });
  r.on('localTrackUnpublished', () => updateControls());
  r.on('dataReceived', (msg) => {
    if (msg.topic === 'chat' && msg.text !== undefined) {
      addMessage(msg.participant?.name ?? msg.from ?? '?', msg.text);
    }
  });
  r.on('connectionQuality', (q) => {
    const el = $('quality');
    el.dataset.q = q;
    el.textContent = `quality: ${q}`;
  });
  r.on('reconnecting', () => note('connection lost, reconnecting…'));
  r.on('reconnected', () => {
    // After a full reconnect we are a new participant with a new sid.
    const own = tiles.querySelector<HTMLElement>('.tile[data-local]');
    if (own && r.localParticipant) own.dataset.sid = r.localParticipant.sid;
    if (r.room) $('room-name').textContent = r.room.name;
    note('reconnected');
  });
  r.on('roomMoved', (room) => note(`moved to room ${room} by an administrator`));
  r.on('disconnected', (reason) => {
    clearInterval(statsTimer);
    tiles.replaceChildren();
    $('room-audio').replaceChildren();
    $('mix-badge').hidden = true;
    call.hidden = true;
    joinForm.hidden = false;
    room = null;
    window.petrel.room = null;
    if (reason !== 'client_leave') joinError.textContent = `Disconnected: ${reason}`;
  });
}

// ---- tiles --------------------------------------------------------------------------

// A tile playing one publication that gets another (a camera republished with
// simulcast when the room grew) keeps the old picture until the new track's first
// frame arrives (its unmute), instead of going blank meanwhile. The same
// publication on another path (SFU / direct) switches at once, as before.
//
// A tile never goes back from a publication to one this page saw before it
// while the newer one plays: a waiting swap whose unmute (or timeout) comes late
// is dropped then, as is a track that ended while it waited. In a move to
// another node the relay of the other's new stream through the old node waits
// for its first frame until about when we leave; its late unmute must not swap
// the tile back to it after the new node's track was shown (it ends with the
// old connection: frozen for good). Order, not arrival, decides: when a third
// joins a 1:1 call the camera's simulcast republish waits while the old
// publication comes back from the direct path to the SFU, and that re-show must
// neither call off the wait nor replace the republish if that is shown first.
const pendingSwap = new WeakMap<HTMLVideoElement, () => void>();
// The streams showVideo made for tiles (others, as a recording's playback, are replaced whole).
const tileStreams = new WeakSet<MediaStream>();
// Firefox keeps showing nothing when the track a playing stream holds is
// swapped inside it (a room of Chromium and Firefox: the republished
// simulcast camera never appeared): there a new stream is set instead.
const swapsInPlace = !navigator.userAgent.includes('Firefox');
const SWAP_WAIT_MS = 5_000;
const firstSeen = new Map<string, number>();

function seenOrder(trackSid: string): number {
  let n = firstSeen.get(trackSid);
  if (n === undefined) {
    n = firstSeen.size;
    firstSeen.set(trackSid, n);
  }
  return n;
}

function showVideo(video: HTMLVideoElement, track: MediaStreamTrack, trackSid: string): void {
  const order = seenOrder(trackSid);
  const shownTrack = (): MediaStreamTrack | undefined =>
    video.srcObject instanceof MediaStream ? video.srcObject.getVideoTracks()[0] : undefined;
  // Whether the tile plays a newer publication than this track's.
  const outdated = (): boolean => {
    const shown = shownTrack();
    const sid = video.dataset.trackSid;
    return !!shown && shown.readyState === 'live' && !!sid && sid !== trackSid && seenOrder(sid) > order;
  };
  let timer: ReturnType<typeof setTimeout> | undefined;
  // Stop waiting: no timer, no unmute listener, no pending swap.
  const stopWaiting = (): void => {
    clearTimeout(timer);
    track.removeEventListener('unmute', later);
    if (pendingSwap.get(video) === show) pendingSwap.delete(video);
  };
  // show is also called when the shown publication goes (trackUnsubscribed).
  const show = (): void => {
    stopWaiting();
    if (track.readyState !== 'live') return;
    // The tile's stream gets the new track in place of the old: the player and
    // its last frame stay (a new srcObject reloads the element, a blank of
    // hundreds of ms on a busy machine, as in a move to another node).
    const stream = video.srcObject instanceof MediaStream ? video.srcObject : null;
    if (stream && tileStreams.has(stream) && swapsInPlace) {
      // Added first: the stream is never without video (the player would reset).
      if (!stream.getVideoTracks().includes(track)) stream.addTrack(track);
      for (const t of stream.getVideoTracks()) if (t !== track) stream.removeTrack(t);
    } else {
      const fresh = new MediaStream([track]);
      tileStreams.add(fresh);
      video.srcObject = fresh;
    }
    video.dataset.trackSid = trackSid;
  };
  const later = (): void => (outdated() ? stopWaiting() : show());
  const shown = shownTrack();
  const playing = shown && shown.readyState === 'live' && !shown.muted && video.dataset.trackSid !== trackSid;
  if (!playing || !track.muted) {
    later();
    return;
  }
  pendingSwap.set(video, show);
  track.addEventListener('unmute', later);
  timer = setTimeout(later, SWAP_WAIT_MS);
}

function tileOf(sid: string): HTMLElement | null {
  return tiles.querySelector(`.tile[data-sid="${CSS.escape(sid)}"]`);
}

// showRecorded puts a played-back room recording's track in the tile of the
// participant who published it.
function showRecorded(identity: string, track: MediaStreamTrack, trackSid: string): void {
  const tile = addTile(`recorded/${identity}`, identity, false);
  if (track.kind === 'video') {
    showVideo(tile.querySelector('video') as HTMLVideoElement, track, trackSid);
    return;
  }
  playAudio(tile, track, trackSid);
}

// Plays a remote audio track in an audio element of `parent`.
function playAudio(parent: HTMLElement, track: MediaStreamTrack, sid: string): void {
  // Moving between the SFU and the direct path brings another track for the same publication.
  parent.querySelectorAll(`audio[data-track-sid="${CSS.escape(sid)}"]`).forEach((a) => a.remove());
  const audio = document.createElement('audio');
  audio.autoplay = true;
  audio.dataset.trackSid = sid;
  audio.srcObject = new MediaStream([track]);
  parent.append(audio);
  // Autoplay rules can block sound until the user clicks something.
  audio.play().catch(() => ($('audio-unlock').hidden = false));
}

function addTile(sid: string, name: string, local: boolean): HTMLElement {
  const existing = tileOf(sid);
  if (existing) return existing;
  const tile = document.createElement('div');
  tile.className = 'tile';
  tile.dataset.sid = sid;
  if (local) tile.dataset.local = '1';
  const video = document.createElement('video');
  video.autoplay = true;
  video.playsInline = true;
  video.muted = true; // sound plays through separate audio elements
  const label = document.createElement('span');
  label.className = 'label';
  label.textContent = name;
  const readout = document.createElement('span');
  readout.className = 'readout';
  tile.append(video, label, readout);
  if (!local && !sid.includes('/')) {
    const pin = document.createElement('button');
    pin.className = 'pin';
    pin.type = 'button';
    pin.textContent = 'Pin';
    pin.title = 'Always receive this participant and show them large';
    pin.addEventListener('click', () => void togglePin(sid));
    tile.append(pin);
  }
  if (local) tiles.prepend(tile);
  else tiles.append(tile);
  return tile;
}

// Pinned participants are received whatever Last-N says and shown on stage (large).
const pinned = new Set<string>();

async function togglePin(sid: string): Promise<void> {
  if (pinned.has(sid)) pinned.delete(sid);
  else pinned.add(sid);
  const tile = tileOf(sid);
  tile?.classList.toggle('pinned', pinned.has(sid));
  const button = tile?.querySelector('.pin');
  if (button) button.textContent = pinned.has(sid) ? 'Unpin' : 'Pin';
  await sendPins();
}

async function sendPins(): Promise<void> {
  try {
    await room?.pin([...pinned]);
  } catch (err) {
    note(`pin: ${describe(err)}`);
  }
}

function updateLabel(p: RemoteParticipant): void {
  const label = tileOf(p.sid)?.querySelector('.label');
  if (!label) return;
  label.textContent = p.name;
  const mic = [...p.tracks.values()].find((t) => t.kind === 'audio' && t.source === 'microphone');
  label.classList.toggle('mic-off', !!mic?.muted);
}

// ---- controls -----------------------------------------------------------------------

function localBySource(source: string): LocalTrackPublication | undefined {
  return [...(room?.localTracks.values() ?? [])].find((t) => t.source === source);
}

function updateControls(): void {
  const mic = localBySource('microphone');
  const cam = localBySource('camera');
  const screen = localBySource('screen');
  setButton('mic', !mic || mic.muted ? 'Unmute' : 'Mute', !mic || mic.muted);
  setButton('camera', !cam || cam.muted ? 'Start camera' : 'Stop camera', !cam || cam.muted);
  setButton('screen', screen ? 'Stop sharing' : 'Share screen', !!screen);
}

function setButton(id: string, text: string, off: boolean): void {
  const b = $<HTMLButtonElement>(id);
  b.textContent = text;
  b.classList.toggle('off', off);
}

async function toggle(source: 'microphone' | 'camera'): Promise<void> {
  if (!room) return;
  const pub = localBySource(source);
  if (!pub) await (source === 'camera' ? room.publishCamera() : room.publishMicrophone());
  else {
    // The track is muted locally at once; show that without waiting for the server.
    const done = room.muteTrack(pub.sid, !pub.muted);
    updateControls();
    await done;
  }
  updateControls();
}

$('mic').addEventListener('click', () => void toggle('microphone').catch((e) => note(describe(e))));
$('camera').addEventListener('click', () => void toggle('camera').catch((e) => note(describe(e))));
$('screen').addEventListener('click', async () => {
  if (!room) return;
  try {
    const pub = localBySource('screen');
    if (pub) await room.unpublishTrack(pub.sid);
    else await room.publishScreen();
  } catch (err) {
    note(`screen share: ${describe(err)}`);
  }
  updateControls();
});
$('audio-unlock').addEventListener('click', () => {
  document.querySelectorAll('audio').forEach((a) => void a.play().catch(() => {}));
  $('audio-unlock').hidden = true;
});
$('leave').addEventListener('click', () => void room?.disconnect());

$<HTMLFormElement>('chat-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const input = (ev.target as HTMLFormElement).elements.namedItem('text') as HTMLInputElement;
  const text = input.value.trim();
  if (!text || !room) return;
  input.value = '';
  room
    .sendData(text, { topic: 'chat' })
    .then(() => addMessage('you', text))
    .catch((err) => note(`chat: ${describe(err)}`));
});

// ---- devices ------------------------------------------------------------------------

// inUse: the devices of a session without a Room (WebTransport), else the Room's tracks'.
let inUse: { camera?: string; microphone?: string } | undefined;

async function listDevices(current?: { camera?: string; microphone?: string }): Promise<void> {
  if (current) inUse = current;
  const devices = await navigator.mediaDevices.enumerateDevices().catch(() => []);
  for (const [kind, id, source] of [
    ['videoinput', 'camera-select', 'camera'],
    ['audioinput', 'mic-select', 'microphone'],
  ] as const) {
    const select = $<HTMLSelectElement>(id);
    const current = inUse ? inUse[source] : localBySource(source)?.track.getSettings().deviceId;
    // A WebTransport session publishes once: its devices are shown, not switched.
    select.disabled = inUse !== undefined;
    select.replaceChildren(
      ...devices
        .filter((d) => d.kind === kind)
        .map((d, i) => new Option(d.label || `${kind} ${i + 1}`, d.deviceId, false, d.deviceId === current)),
    );
  }
}

// Switching a device publishes a new track from it in place of the old one.
async function switchDevice(source: 'camera' | 'microphone', deviceId: string): Promise<void> {
  if (!room) return;
  const old = localBySource(source);
  if (old) await room.unpublishTrack(old.sid);
  if (source === 'camera') {
    await room.publishCamera({ resolution: { deviceId: { exact: deviceId }, width: 1280, height: 720 }, simulcast: simulcastParam(), svc: svcParam() });
  } else {
    await room.publishMicrophone({ deviceId: { exact: deviceId } });
  }
  updateControls();
}

$<HTMLSelectElement>('camera-select').addEventListener('change', (ev) =>
  void switchDevice('camera', (ev.target as HTMLSelectElement).value).catch((e) => note(`camera: ${describe(e)}`)),
);
$<HTMLSelectElement>('mic-select').addEventListener('change', (ev) =>
  void switchDevice('microphone', (ev.target as HTMLSelectElement).value).catch((e) => note(`microphone: ${describe(e)}`)),
);
navigator.mediaDevices?.addEventListener('devicechange', () => void listDevices());

// ---- readouts -----------------------------------------------------------------------

function addMessage(from: string, text: string): void {
  const li = document.createElement('li');
  const who = document.createElement('b');
  who.textContent = `${from}: `;
  li.append(who, text);
  $('messages').append(li);
  li.scrollIntoView({ block: 'nearest' });
}

function note(text: string): void {
  const li = document.createElement('li');
  li.className = 'note';
  li.textContent = text;
  $('messages').append(li);
}

function setStatus(text: string): void {
  status.textContent = text;
}

async function refreshStats(r: Room): Promise<void> {
  let s: StatsSummary;
  try {
    s = await r.getStats();
  } catch {
    return;
  }
  const rtt = s.rttMs !== undefined ? ` · RTT ${Math.round(s.rttMs)} ms` : '';
  const path = s.subscriber ?? s.publisher;
  const via = path ? ` · ${path.localType}/${path.protocol}` : '';
  const rows = s.tracks.map((t) => {
    const who =
      t.direction === 'outbound' ? 'you' : (r.participants.get(t.participantSid)?.name ?? t.participantSid.slice(0, 8));
    const video =
      t.kind === 'video'
        ? `${t.frameWidth ?? 0}×${t.frameHeight ?? 0} ${Math.round(t.framesPerSecond ?? 0)}fps ${t.framesDecoded ?? t.framesEncoded ?? 0}f`
        : '';
    return [who, `${t.direction === 'outbound' ? '↑' : '↓'} ${t.kind}`, kbps(t.bitrate), video, t.packetsLost ? `lost ${t.packetsLost}` : ''];
  });
  // Per tile: the layer (size, frame rate) and bitrate of the video received.
  // While a 1:1 call is direct, the idle SFU stream of the same track is not what shows.
  const shown = new Map<string, (typeof s.tracks)[number]>();
  for (const t of s.tracks) {
    if (t.direction !== 'inbound' || t.kind !== 'video' || !t.trackSid) continue;
    if (!shown.has(t.trackSid) || t.path === r.mediaPath) shown.set(t.trackSid, t);
  }
  for (const t of shown.values()) {
    const video = tiles.querySelector<HTMLVideoElement>(`video[data-track-sid="${CSS.escape(t.trackSid)}"]`);
    const readout = video?.parentElement?.querySelector('.readout');
    if (!readout) continue;
    readout.textContent = `${t.frameWidth ?? 0}×${t.frameHeight ?? 0} ${Math.round(t.framesPerSecond ?? 0)}fps ${kbps(t.bitrate)}${t.path === 'p2p' ? ' p2p' : ''}`;
  }
  showConnection(s.quality, `↑ ${kbps(s.bitrateOut)} ↓ ${kbps(s.bitrateIn)}${rtt}${via}`, rows);
}

/** The connection panel: quality, the bitrate line and a row per track (WebRTC and WebTransport alike). */
function showConnection(quality: string, line: string, rows: string[][]): void {
  const q = $('quality');
  q.dataset.q = quality;
  q.textContent = `quality: ${quality}`;
  $('bitrate').textContent = line;
  $('stats').replaceChildren(
    ...rows.map((cells) => {
      const tr = document.createElement('tr');
      for (const c of cells) {
        const td = document.createElement('td');
        td.textContent = c;
        tr.append(td);
      }
      return tr;
    }),
  );
}

function kbps(bps: number): string {
  return bps >= 1e6 ? `${(bps / 1e6).toFixed(1)} Mbps` : `${Math.round(bps / 1000)} kbps`;
}

function describe(err: unknown): string {
  if (err instanceof PetrelError) return err.message;
  if (err instanceof Error) return err.message;
  return String(err);
}
