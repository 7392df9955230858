"""The server side of the interop tests: where the Petrel started by run.sh is,
how to get tokens from it, and the WHIP/WHEP HTTP exchange as a user's client
does it (standard library only, so the GStreamer viewer can share it under the
system Python)."""

import array
import json
import math
import os
import re
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass, field


def env(name):
    v = os.environ.get(name)
    if not v:
        raise RuntimeError(f"{name} is not set: run the interop tests with test/interop/run.sh")
    return v


def base_url():
    return env("PETREL_INTEROP_URL").rstrip("/")


def token(room, identity, publish=False, subscribe=False, ttl=None):
    """A join token made by `petrel token`, the way an operator makes one."""
    args = [env("PETREL_BIN"), "token", "--room", room, "--identity", identity]
    if ttl:
        args.append("--ttl=" + ttl)
    if publish:
        args.append("--publish")
    if subscribe:
        args.append("--subscribe")
    out = subprocess.run(args, check=True, capture_output=True, text=True, timeout=10)
    return out.stdout.strip()


_admin = None


def admin_token():
    global _admin
    if _admin is None:
        out = subprocess.run(
            [env("PETREL_BIN"), "token", "--admin", "--identity", "interop-admin"],
            check=True, capture_output=True, text=True, timeout=10,
        )
        _admin = out.stdout.strip()
    return _admin


def published(room, identity):
    """{kind: mimeType} of what identity has published in room, from the admin
    API (as an operator checks that an encoder is live); {} if not there."""
    r = request(
        "GET", f"{base_url()}/v1/admin/rooms/{room}/participants/{identity}",
        headers={"Authorization": "Bearer " + admin_token()},
    )
    if r.status == 404:
        return {}
    if r.status != 200:
        raise RuntimeError(f"admin API: {r.status} {r.body}")
    return {t["kind"]: t.get("mimeType", "") for t in r.json()["participant"].get("tracks") or []}


def track_sids(room, identity):
    """{kind: track sid} of what identity has published in room (admin API)."""
    r = request(
        "GET", f"{base_url()}/v1/admin/rooms/{room}/participants/{identity}",
        headers={"Authorization": "Bearer " + admin_token()},
    )
    if r.status != 200:
        raise RuntimeError(f"admin API: {r.status} {r.body}")
    return {t["kind"]: t["sid"] for t in r.json()["participant"].get("tracks") or []}


@dataclass
class Response:
    status: int
    headers: object  # http.client.HTTPMessage: case-insensitive, as HTTP headers are
    body: str
    link: list = field(default_factory=list)

    def json(self):
        return json.loads(self.body)


def request(method, url, body=None, headers=None, timeout=10):
    """One HTTP request that returns the response whatever its status."""
    data = body.encode() if isinstance(body, str) else body
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return Response(r.status, r.headers, r.read().decode(), r.headers.get_all("Link") or [])
    except urllib.error.HTTPError as e:
        return Response(e.code, e.headers, e.read().decode(), e.headers.get_all("Link") or [])


def post_sdp(kind, room, tok, offer, content_type="application/sdp", query=""):
    """POST /whip/{room} or /whep/{room} with an SDP offer."""
    headers = {"Content-Type": content_type}
    if tok is not None:
        headers["Authorization"] = "Bearer " + tok
    return request("POST", f"{base_url()}/{kind}/{room}{query}", offer, headers)


def delete(location, tok):
    url = location if location.startswith("http") else base_url() + location
    return request("DELETE", url, None, {"Authorization": "Bearer " + tok})


def candidates(sdp):
    """The a=candidate lines of an SDP, as lists of fields."""
    out = []
    for line in sdp.splitlines():
        if line.startswith("a=candidate:"):
            out.append(line[len("a=candidate:"):].split())
    return out


def candidate_addresses(sdp):
    return sorted({c[4] for c in candidates(sdp)})


def candidate_transports(sdp):
    return sorted({c[2].lower() for c in candidates(sdp)})


def require_loopback(sdp, what):
    """Refuse to signal an SDP offering anything but 127.0.0.0/8: the tests must
    send nothing to the machine's other addresses, so this is checked before the
    offer leaves, not after the call."""
    addrs = candidate_addresses(sdp)
    if not addrs:
        raise RuntimeError(f"{what} has no ICE candidates")
    others = [a for a in addrs if not a.startswith("127.")]
    if others:
        raise RuntimeError(f"{what} offers non-loopback candidates {others}")


def tone(pcm, rate, channels):
    """[frequency in Hz, RMS] of the first channel of signed 16-bit PCM, the
    frequency from zero crossings (enough for the test's pure tones)."""
    a = array.array("h")
    a.frombytes(pcm[: len(pcm) - len(pcm) % 2])
    x = a[::channels]
    if len(x) < 2:
        return [0, 0]
    crossings = sum(1 for i in range(1, len(x)) if (x[i - 1] < 0) != (x[i] < 0))
    rms = math.sqrt(sum(v * v for v in x) / len(x))
    return [round(crossings / 2 * rate / len(x)), round(rms)]


def strip_candidates(sdp):
    """The SDP as a trickling client sends it: no candidates yet."""
    keep = [l for l in sdp.splitlines() if not l.startswith(("a=candidate:", "a=end-of-candidates"))]
    return "\r\n".join(keep) + "\r\n"


def sdpfrag(offer, cands):
    """An application/trickle-ice-sdpfrag (RFC 8840) for the first m-section of
    offer (the bundle transport): its ICE credentials, mid and candidates."""
    lines = offer.splitlines()
    ufrag = next(l for l in lines if l.startswith("a=ice-ufrag:"))
    pwd = next(l for l in lines if l.startswith("a=ice-pwd:"))
    mline = next(l for l in lines if l.startswith("m="))
    mid = next(l for l in lines if l.startswith("a=mid:"))
    out = [ufrag, pwd, mline, mid]
    out += [c if c.startswith("a=") else "a=" + c for c in cands]
    out.append("a=end-of-candidates")
    return "\r\n".join(out) + "\r\n"


def patch(location, tok, body, etag=None):
    url = location if location.startswith("http") else base_url() + location
    headers = {"Authorization": "Bearer " + tok, "Content-Type": "application/trickle-ice-sdpfrag"}
    if etag:
        headers["If-Match"] = etag
    return request("PATCH", url, body, headers)


def ice_servers(links):
    """The ICE servers of WHIP/WHEP Link headers (RFC 9725 section 4.6):
    [{"urls", "username", "credential"}]."""
    out = []
    for link in links:
        for part in re.split(r",\s*(?=<)", link):
            m = re.match(r"<([^>]+)>(.*)", part.strip())
            if not m:
                continue
            params = dict(re.findall(r'([\w-]+)="([^"]*)"', m.group(2)))
            if params.get("rel") == "ice-server":
                out.append({"urls": m.group(1), "username": params.get("username"), "credential": params.get("credential")})
    return out
