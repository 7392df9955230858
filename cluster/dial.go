package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/pion/webrtc/v4"
)

// Links are set up like WHIP: the dialing node POSTs its offer to the other's
// /v1/cluster/link and gets the answer in the response, with every candidate in
// the SDP (no trickle). The request carries a token made with the cluster
// secret for that request alone (linktoken.go), so only nodes of this cluster
// can open a link and a captured request cannot be sent again; DTLS then
// secures the media with the fingerprints the exchange carried.

type linkRequest struct {
	From    string `json:"from"`
	Started int64  `json:"started"`
	SDP     string `json:"sdp"`
}

type linkAnswer struct {
	SDP string `json:"sdp"`
}

// ensureLink dials peer unless a link is up or being made.
func (n *Node) ensureLink(peer NodeInfo) {
	n.mu.Lock()
	if l := n.links[peer.ID]; (l != nil) || n.dialing[peer.ID] {
		n.mu.Unlock()
		return
	}
	n.dialing[peer.ID] = true
	n.mu.Unlock()
	go func() {
		defer func() {
			n.mu.Lock()
			delete(n.dialing, peer.ID)
			n.mu.Unlock()
		}()
		if err := n.dial(peer); err != nil {
			mLinkFailures.Inc()
			n.log.Warn("node link failed", "peer", peer.ID, "err", err)
		}
	}()
}

func (n *Node) dial(peer NodeInfo) error {
	pc, err := n.engine.NewLinkPC()
	if err != nil {
		return err
	}
	l := newLink(n, peer.ID, pc)
	l.peerStarted = peer.Started
	ordered := true
	ctl, err := pc.CreateDataChannel("ctl", &webrtc.DataChannelInit{Ordered: &ordered})
	if err != nil {
		_ = pc.Close()
		return err
	}
	unordered, zero := false, uint16(0)
	media, err := pc.CreateDataChannel("media", &webrtc.DataChannelInit{Ordered: &unordered, MaxRetransmits: &zero})
	if err != nil {
		_ = pc.Close()
		return err
	}
	l.attach(ctl)
	l.attach(media)
	offer, err := pc.CreateOffer(nil)
	if err != nil {
		_ = pc.Close()
		return err
	}
	sdp, err := localDescription(pc, offer)
	if err != nil {
		_ = pc.Close()
		return err
	}
	body, _ := json.Marshal(linkRequest{From: n.id, Started: n.started.UnixNano(), SDP: sdp})
	ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
	defer cancel()
	base, err := n.linkURL(peer)
	if err != nil {
		_ = pc.Close()
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+linkPath, bytes.NewReader(body))
	if err != nil {
		_ = pc.Close()
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+signLink(n.secret, n.id, http.MethodPost, linkPath, body, time.Now()))
	resp, err := n.http.Do(req)
	if err != nil {
		_ = pc.Close()
		return err
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, 256<<10))
	if resp.StatusCode != http.StatusOK {
		_ = pc.Close()
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(rb)))
	}
	var ans linkAnswer
	if err := json.Unmarshal(rb, &ans); err != nil {
		_ = pc.Close()
		return fmt.Errorf("answer: %w", err)
	}
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: ans.SDP}); err != nil {
		_ = pc.Close()
		return fmt.Errorf("answer: %w", err)
	}
	n.addLink(l)
	select {
	case <-l.up:
		return nil
	case <-l.closed:
		return errors.New("link closed before it came up")
	case <-time.After(10 * time.Second):
		l.close("timeout")
		return errors.New("link did not come up in 10 s")
	}
}

// addLink records l, replacing an older link to the same peer (it restarted).
func (n *Node) addLink(l *Link) {
	n.mu.Lock()
	old := n.links[l.peer]
	n.links[l.peer] = l
	n.mu.Unlock()
	if old != nil && old != l {
		old.close("replaced")
	}
}

func localDescription(pc *webrtc.PeerConnection, d webrtc.SessionDescription) (string, error) {
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(d); err != nil {
		return "", err
	}
	select {
	case <-gathered:
	case <-time.After(5 * time.Second):
		return "", errors.New("ICE gathering did not complete")
	}
	return pc.LocalDescription().SDP, nil
}

// linkPath is the endpoint of link offers; maxLinkRequest bounds one (an
// offer with two data channels and every candidate is a few KiB).
const (
	linkPath       = "/v1/cluster/link"
	maxLinkRequest = 256 << 10
)

// serveLink answers a peer's link offer.
func (n *Node) serveLink(w http.ResponseWriter, r *http.Request) {
	if n.tls != nil && r.TLS == nil {
		httpErr(w, http.StatusForbidden, "node links come over TLS here (cluster.tls)")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxLinkRequest+1))
	if err != nil || len(body) > maxLinkRequest {
		httpErr(w, http.StatusRequestEntityTooLarge, "a link request is at most 256 KiB")
		return
	}
	var req linkRequest
	if err := json.Unmarshal(body, &req); err != nil || req.From == "" || req.SDP == "" {
		httpErr(w, http.StatusBadRequest, "a link request is JSON {from, sdp}")
		return
	}
	tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	now := time.Now()
	from, id, until, err := checkLink(n.secret, tok, r.Method, r.URL.Path, body, now)
	if err == nil && from != req.From {
		err = errors.New("the link token is for another node")
	}
	if err == nil {
		err = n.used.use(id, until, now)
	}
	if err != nil {
		// Anyone can send these: a few lines, then one in a thousand.
		if k := n.linkRefusals.Add(1); k <= 5 || k%1000 == 0 {
			n.log.Warn("node link refused", "from", req.From, "remote", r.RemoteAddr, "err", err, "refused", k)
		}
		httpErr(w, http.StatusUnauthorized, err.Error())
		return
	}
	if req.From == n.id {
		httpErr(w, http.StatusConflict, "a node does not link to itself")
		return
	}
	pc, err := n.engine.NewLinkPC()
	if err != nil {
		httpErr(w, http.StatusInternalServerError, err.Error())
		return
	}
	l := newLink(n, req.From, pc)
	l.peerStarted = req.Started
	pc.OnDataChannel(l.attach)
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: req.SDP}); err != nil {
		_ = pc.Close()
		httpErr(w, http.StatusBadRequest, "offer: "+err.Error())
		return
	}
	ans, err := pc.CreateAnswer(nil)
	if err != nil {
		_ = pc.Close()
		httpErr(w, http.StatusBadRequest, "answer: "+err.Error())
		return
	}
	sdp, err := localDescription(pc, ans)
	if err != nil {
		_ = pc.Close()
		httpErr(w, http.StatusInternalServerError, err.Error())
		return
	}
	n.addLink(l)
	n.log.Info("node link accepted", "peer", req.From)
	writeJSON(w, linkAnswer{SDP: sdp})
}

func httpErr(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
