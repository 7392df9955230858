package camera

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/camera/emulator"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/rtc"
	"github.com/petrel-sfu/petrel/session"
	"github.com/petrel-sfu/petrel/sfu"
)

// viewer is a participant of the camera's room that talks to the gateway over
// the room's data path, as a browser would.
type viewer struct {
	p   *sfu.Participant
	mu  sync.Mutex
	got []map[string]any
	ch  chan struct{}
}

// joinViewer joins a viewer whose token holds every grant a camera room has.
func joinViewer(t *testing.T, mgr *sfu.Manager, room, identity string) *viewer {
	t.Helper()
	return joinViewerWith(t, mgr, sfu.LocalOptions{Room: room, Identity: identity,
		Grants: auth.Grants{Publish: true, Subscribe: true, PublishData: true, PTZ: true}})
}

func joinViewerWith(t *testing.T, mgr *sfu.Manager, opt sfu.LocalOptions) *viewer {
	t.Helper()
	p, err := mgr.JoinLocal(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close("test over") })
	v := &viewer{p: p, ch: make(chan struct{}, 256)}
	p.OnData(func(_ bool, h sfu.DataHeader, payload []byte) {
		var m map[string]any
		if json.Unmarshal(payload, &m) != nil {
			t.Errorf("reply on %s is not JSON: %s", h.Topic, payload)
			return
		}
		m["_topic"], m["_from"] = h.Topic, h.From
		v.mu.Lock()
		v.got = append(v.got, m)
		v.mu.Unlock()
		select {
		case v.ch <- struct{}{}:
		default:
		}
	})
	return v
}

func (v *viewer) send(topic, msg string) {
	v.p.PublishData(true, topic, []string{Identity}, []byte(msg))
}

// await returns the first message on topic matching ok.
func (v *viewer) await(t *testing.T, topic string, ok func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		v.mu.Lock()
		for _, m := range v.got {
			if m["_topic"] == topic && ok(m) {
				v.mu.Unlock()
				return m
			}
		}
		v.mu.Unlock()
		select {
		case <-v.ch:
		case <-deadline:
			v.mu.Lock()
			defer v.mu.Unlock()
			t.Fatalf("no matching %s message; got %v", topic, v.got)
		}
	}
}

func withID(id float64) func(map[string]any) bool {
	return func(m map[string]any) bool { return m["id"] == id }
}

// startGateway runs a gateway with one RTSP camera at rtspURL (device control
// needs no video: the ingest may fail and retry meanwhile) wired to the given
// ONVIF endpoint; the audio backchannel is on the camera's RTSP URL.
func startGateway(t *testing.T, onvifURL, rtspURL string) (*sfu.Manager, *Camera) {
	t.Helper()
	mgr := sfu.NewManager(config.Default(), nil, slog.Default())
	g := New(Options{Manager: mgr, Loopback: true})
	t.Cleanup(g.Close)
	if rtspURL == "" {
		rtspURL = "rtsp://127.0.0.1:1/none"
	}
	cam, err := g.Add(Config{ID: "door", Name: "Door", RTSP: rtspURL,
		ONVIF: config.ONVIF{URL: onvifURL, User: "admin", Password: "pw"}})
	if err != nil {
		t.Fatal(err)
	}
	return mgr, cam
}

// The viewer's microphone (G.711 µ-law, a 440 Hz tone) reaches the camera's
// loudspeaker through the ONVIF backchannel; the floor is one talker's.
func TestBackchannelAudioReachesCamera(t *testing.T) {
	bc := emulator.NewBackchannel("PCMU")
	bcURL, err := bc.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	mgr, cam := startGateway(t, "", bcURL)
	alice := joinViewer(t, mgr, cam.Room(), "alice")
	bob := joinViewer(t, mgr, cam.Room(), "bob")

	alice.send("talk", `{"id":1,"op":"start"}`)
	r := alice.await(t, "talk", withID(1))
	if res, _ := r["result"].(map[string]any); res == nil || res["codec"] != webrtc.MimeTypePCMU {
		t.Fatalf("talk start: %v", r)
	}
	bob.send("talk", `{"id":1,"op":"start"}`)
	if r := bob.await(t, "talk", withID(1)); !strings.Contains(r["error"].(string), "alice is talking") {
		t.Fatalf("second talker: %v", r)
	}
	if cam.Talking() != "alice" {
		t.Fatalf("floor held by %q", cam.Talking())
	}

	mic, err := alice.p.PublishLocal(sfu.LocalTrackOptions{
		Info:  protocol.TrackInfo{Kind: "audio", Source: "microphone", SSRC: 0x1234},
		Codec: sfu.Codec{MimeType: webrtc.MimeTypePCMU, ClockRate: 8000, Channels: 1, PayloadType: 0},
	})
	if err != nil {
		t.Fatal(err)
	}
	const packets = 100 // 2 s of 20 ms packets
	phase := 0.0
	for i := 0; i < packets; i++ {
		payload := make([]byte, 160)
		for j := range payload {
			payload[j] = emulator.ULawEncode(int16(3000 * math.Sin(phase)))
			phase += 2 * math.Pi * 440 / 8000
		}
		pkt := rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 0, SequenceNumber: uint16(i), Timestamp: uint32(i * 160), SSRC: 0x1234}, Payload: payload}
		if err := mic.WritePacket(&pkt); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // a tenth of the queue per ms is plenty; keeps the queues shallow
	}
	st := bc.WaitPackets(packets*8/10, 15*time.Second)
	if st.Sessions != 1 || st.Packets < packets*8/10 || st.PayloadType != 0 {
		t.Fatalf("camera loudspeaker got %+v, want about %d PCMU packets in one session", st, packets)
	}
	if st.LoudPackets < st.Packets*9/10 || st.RMS < 1500 || st.RMS > 2500 {
		t.Fatalf("camera loudspeaker got %+v: want the tone (RMS about 2120), not silence", st)
	}
	if st.Bytes != st.Packets*160 {
		t.Fatalf("payload bytes %d for %d packets: payloads altered", st.Bytes, st.Packets)
	}

	alice.send("talk", `{"id":2,"op":"stop"}`)
	if r := alice.await(t, "talk", withID(2)); r["error"] != nil {
		t.Fatalf("talk stop: %v", r)
	}
	alice.await(t, "talk", func(m map[string]any) bool { return m["event"] == "ended" })
	if cam.Talking() != "" {
		t.Fatalf("floor still held by %q", cam.Talking())
	}
	// Now bob may talk.
	bob.send("talk", `{"id":3,"op":"start"}`)
	if r := bob.await(t, "talk", withID(3)); r["result"] == nil {
		t.Fatalf("bob after alice stopped: %v", r)
	}
}

// A viewer whose microphone is Opus while the camera takes G.711 is told so.
func TestBackchannelCodecMismatch(t *testing.T) {
	bc := emulator.NewBackchannel("PCMU")
	bcURL, err := bc.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	mgr, cam := startGateway(t, "", bcURL)
	v := joinViewer(t, mgr, cam.Room(), "v")
	if _, err := v.p.PublishLocal(sfu.LocalTrackOptions{Info: protocol.TrackInfo{Kind: "audio", Source: "microphone", SSRC: 9},
		Codec: sfu.Codec{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2, PayloadType: 111}}); err != nil {
		t.Fatal(err)
	}
	v.send("talk", `{"id":1,"op":"start"}`)
	v.await(t, "talk", withID(1))
	end := v.await(t, "talk", func(m map[string]any) bool { return m["event"] == "ended" })
	if !strings.Contains(end["reason"].(string), "camera takes audio/PCMU") {
		t.Fatalf("ended: %v", end)
	}
}

// PTZ and the HTTP tunnel through the gateway: data messages from a viewer in
// the camera's room reach the emulator, replies come back to that viewer only.
func TestDeviceTopicsThroughGateway(t *testing.T) {
	emu := emulator.NewONVIF("admin", "pw")
	u, err := emu.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer emu.Close()
	mgr, cam := startGateway(t, u, "")
	_ = cam
	v := joinViewer(t, mgr, cam.Room(), "v")
	other := joinViewer(t, mgr, cam.Room(), "other")
	v.send("ptz", `{"id":1,"op":"relative","pan":0.5,"tilt":-0.5}`)
	if r := v.await(t, "ptz", withID(1)); r["error"] != nil || r["_from"] != Identity {
		t.Fatalf("ptz relative: %v", r)
	}
	if c, ok := emu.WaitCommand("RelativeMove", 5*time.Second); !ok || *c.Pan != 0.5 || *c.Tilt != -0.5 {
		t.Fatalf("emulator got %+v", emu.Commands())
	}
	v.send("ptz", `{"id":2,"op":"fly"}`)
	if r := v.await(t, "ptz", withID(2)); !strings.Contains(r["error"].(string), "unknown op") {
		t.Fatalf("unknown op: %v", r)
	}
	v.send("http", `{"id":3,"method":"GET","path":"/axis-cgi/param.cgi"}`)
	if r := v.await(t, "http", withID(3)); r["error"] == nil {
		t.Fatalf("tunnel without http.base configured: %v", r)
	}
	other.mu.Lock()
	n := len(other.got)
	other.mu.Unlock()
	if n != 0 {
		t.Fatalf("replies leaked to another viewer: %v", other.got)
	}
}

// Only a sender whose token holds the ptz grant may use the ptz, talk and
// http topics, whatever its transport: a participant inside the server (a
// WebTransport session, or even the server's own) is refused without it.
func TestControlNeedsGrant(t *testing.T) {
	mgr := testManager(t)
	g := New(Options{Manager: mgr, Loopback: true})
	defer g.Close()
	cam, err := g.Add(Config{ID: "c", RTSP: "rtsp://127.0.0.1:1/none"})
	if err != nil {
		t.Fatal(err)
	}
	data := auth.Grants{Subscribe: true, PublishData: true}
	ptz := data
	ptz.PTZ = true
	for _, tc := range []struct {
		id     string
		g      auth.Grants
		origin sfu.Origin
	}{{"plain", data, sfu.Client}, {"internal", data, sfu.Server}, {"operator", ptz, sfu.Client}} {
		v := joinViewerWith(t, mgr, sfu.LocalOptions{Room: cam.Room(), Identity: tc.id, Grants: tc.g, Origin: tc.origin})
		for i, topic := range []string{"ptz", "talk", "http"} {
			v.send(topic, fmt.Sprintf(`{"id":%d,"op":"stop","method":"GET","path":"/"}`, i))
			r := v.await(t, topic, withID(float64(i)))
			refused := strings.Contains(fmt.Sprint(r["error"]), "no ptz grant")
			if refused == tc.g.PTZ {
				t.Errorf("%s (ptz grant %v) on %s: %v", tc.id, tc.g.PTZ, topic, r)
			}
		}
	}
}

// A WebRTC camera (a peer in its room) hears the talker only: while alice
// talks the camera is subscribed to her microphone and to no other viewer's,
// and after she stops to none.
func TestTalkWebRTCCameraFloor(t *testing.T) {
	mgr := testManager(t)
	g := New(Options{Manager: mgr, Loopback: true})
	defer g.Close()
	cam, err := g.Add(Config{ID: "wcam", WebRTC: true})
	if err != nil {
		t.Fatal(err)
	}
	mic := func(v *viewer, ssrc uint32) *sfu.LocalTrack {
		lt, err := v.p.PublishLocal(sfu.LocalTrackOptions{Info: protocol.TrackInfo{Kind: "audio", Source: "microphone", SSRC: ssrc},
			Codec: sfu.Codec{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2, PayloadType: 111}})
		if err != nil {
			t.Fatal(err)
		}
		return lt
	}
	alice := joinViewer(t, mgr, cam.Room(), "alice")
	bob := joinViewer(t, mgr, cam.Room(), "bob")
	aliceMic, bobMic := mic(alice, 1), mic(bob, 2)
	// The camera peer joins as a WebRTC participant that subscribes to everything.
	c := &auth.Claims{Room: cam.Room(), Grants: auth.Grants{Subscribe: true, Publish: true, PublishData: true, Camera: true}, RegisteredClaims: jwt.RegisteredClaims{Subject: Identity}}
	peer, err := mgr.Join(c, sfu.JoinOptions{AutoSubscribe: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close("done")
	peer.Start()
	subs := func(lt *sfu.LocalTrack) int { return len(lt.Publication().Subscribers()) }
	waitSubs := func(what string, a, b int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for subs(aliceMic) != a || subs(bobMic) != b {
			if time.Now().After(deadline) {
				t.Fatalf("%s: camera subscribed to alice %d, bob %d; want %d, %d", what, subs(aliceMic), subs(bobMic), a, b)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitSubs("auto-subscribed before anyone talks", 1, 1)

	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan string, 1)
	go func() { ended <- cam.talk(ctx, "alice", json.RawMessage("1")) }()
	waitSubs("alice talking", 1, 0)
	cancel()
	if r := <-ended; r != "stopped" {
		t.Fatalf("talk ended: %s", r)
	}
	waitSubs("after alice stopped", 0, 0)
}

// testEngine makes a WebRTC engine on free loopback ports, closed at the end.
// testManager is a manager on loopback with the server's session server
// (a WebRTC camera joins the room as a client does).
func testManager(t *testing.T) *sfu.Manager {
	t.Helper()
	cfg := config.Default()
	cfg.Loopback = true
	cfg.RTC.UDPPort, cfg.RTC.TCPPort = 0, -1
	eng, err := rtc.NewEngine(cfg, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	srv, err := session.Start(cfg, eng, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return sfu.NewManager(cfg, session.NewTransport(srv, sfu.MaxDataMessage(cfg)), slog.Default())
}

// A WebRTC camera that answers ptz itself (no ONVIF declared) gets only the
// requests of senders with the ptz grant: the gateway refuses the others, the
// device never sees them.
func TestWebRTCCameraTopicsNeedGrant(t *testing.T) {
	mgr := testManager(t)
	g := New(Options{Manager: mgr, Loopback: true})
	defer g.Close()
	cam, err := g.Add(Config{ID: "w", WebRTC: true})
	if err != nil {
		t.Fatal(err)
	}
	device := joinViewerWith(t, mgr, sfu.LocalOptions{Room: cam.Room(), Identity: Identity,
		Grants: auth.Grants{Publish: true, Subscribe: true, PublishData: true, Camera: true}})
	plain := joinViewerWith(t, mgr, sfu.LocalOptions{Room: cam.Room(), Identity: "plain", Grants: auth.Grants{Subscribe: true, PublishData: true}})
	op := joinViewer(t, mgr, cam.Room(), "operator")
	plain.send("ptz", `{"id":1,"op":"move"}`)
	if r := plain.await(t, "ptz", withID(1)); !strings.Contains(fmt.Sprint(r["error"]), "no ptz grant") {
		t.Fatalf("without the grant: %v", r)
	}
	op.send("ptz", `{"id":2,"op":"move"}`)
	if r := device.await(t, "ptz", withID(2)); r["_from"] != "operator" {
		t.Fatalf("the device got %v", r)
	}
	device.mu.Lock()
	defer device.mu.Unlock()
	for _, m := range device.got {
		if m["_from"] == "plain" {
			t.Fatalf("the device got a request from a sender without the grant: %v", m)
		}
	}
}
