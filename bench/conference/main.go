// Command conference measures what Petrel's conferencing selectivity saves and
// how fast it reacts, with Pion clients of the room protocol on 127.0.0.1 and a
// Petrel server in a separate process (bench/cmd/benchserver, `petrel serve`
// plus a pprof port), so that the server's CPU time counts nothing else.
//
//	-mode lastn      P participants each publish video and receive everyone;
//	                 the server runs with --last-n N for each N of -lastn.
//	-mode simulcast  P publishers with three encodings (q/h/f) against P with
//	                 one (f only); every receiver shows one participant on
//	                 stage (quality high) and the others as 320x180 thumbnails.
//	-mode switch     one simulcast publisher, R receivers that alternate between
//	                 quality low and high; the delay from sending the request to
//	                 the first complete frame of the new layer.
//
// Media is synthetic VP8 (keyframe every second or when the server asks,
// -kbps at -fps, no audio: audio is forwarded to everyone whatever Last-N or
// simulcast say, and 50 packets/s per audio subscription would cost the two
// shared cores more than the video being measured). Egress is what the
// receivers get: RTP bytes as decrypted (header and payload), over a steady
// window; server CPU is utime+stime from /proc over the same window.
//
// Output: one JSON object per run on stdout (bench/conference/run.sh collects
// them), progress on stderr.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pion/ice/v4"
	"github.com/pion/interceptor"
	"github.com/pion/rtcp"
	"github.com/pion/rtp"
	"github.com/pion/sdp/v3"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/bench/internal/benchkit"
	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/loadtest"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/rtc"
)

const (
	apiKey    = benchkit.APIKey
	apiSecret = benchkit.APISecret
	mtu       = 1100
)

var (
	serverBin = flag.String("server", "", "benchserver binary (built by run.sh)")
	mode      = flag.String("mode", "lastn", "lastn, simulcast or switch")
	nPeers    = flag.Int("n", 30, "participants (lastn), publishers (simulcast)")
	lastNs    = flag.String("lastn", "0,3,5,8", "lastn: the room's Last-N values to measure (0: off)")
	kbps      = flag.Int("kbps", 150, "video bitrate of the top (or only) layer, kbit/s")
	fps       = flag.Int("fps", 30, "frames per second")
	warmup    = flag.Duration("warmup", 4*time.Second, "wait after everyone receives before the window")
	window    = flag.Duration("duration", 15*time.Second, "steady measurement window")
	receivers = flag.Int("receivers", 3, "switch: receivers")
	switches  = flag.Int("switches", 20, "switch: layer changes per receiver")
	label     = flag.String("label", "", "free text copied into each JSON result")
)

func main() {
	flag.Parse()
	log.SetFlags(log.Ltime)
	log.SetPrefix("conference: ")
	if *serverBin == "" {
		log.Fatal("-server is required (go build -o X ./bench/cmd/benchserver)")
	}
	var err error
	switch *mode {
	case "lastn":
		for _, f := range strings.Split(*lastNs, ",") {
			n, convErr := strconv.Atoi(strings.TrimSpace(f))
			if convErr != nil {
				log.Fatalf("-lastn: %v", convErr)
			}
			if err = lastN(n); err != nil {
				break
			}
		}
	case "simulcast":
		for _, sc := range []bool{false, true} {
			if err = simulcast(sc); err != nil {
				break
			}
		}
	case "switch":
		err = switchDelay()
	default:
		err = fmt.Errorf("unknown mode %q", *mode)
	}
	if err != nil {
		log.Fatal(err)
	}
}

func emit(v map[string]any) {
	v["mode"] = *mode
	v["label"] = *label
	v["kbps"] = *kbps
	v["fps"] = *fps
	v["at"] = time.Now().UTC().Format(time.RFC3339)
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

// ---- Last-N --------------------------------------------------------------------

func lastN(n int) error {
	s, err := startServer(*nPeers+5, "--last-n", strconv.Itoa(n))
	if err != nil {
		return err
	}
	defer s.stop()
	room := "lastn"
	stop := make(chan struct{})
	defer close(stop)
	var rx rxCounter
	peers := make([]*client.Client, *nPeers)
	defer closeAll(peers)
	pubAPI := publisherAPI()
	err = benchkit.Parallel(*nPeers, func(i int) error {
		c, err := join(s, room, fmt.Sprintf("p%02d", i), pubAPI)
		if err != nil {
			return err
		}
		peers[i] = c
		go rx.receive(c, nil)
		src, err := newSource(c, []layerSpec{{rid: "", kbps: *kbps}}, *fps)
		if err != nil {
			return err
		}
		if _, err := src.publish(context.Background(), c, nil); err != nil {
			return err
		}
		go src.run(stop)
		return nil
	})
	if err != nil {
		return err
	}
	// Everyone receives what Last-N gives it: with N, each receiver gets N videos.
	want := *nPeers - 1
	if n > 0 && n < want {
		want = n
	}
	if err := rx.waitStreams(*nPeers*want, 60*time.Second); err != nil {
		return fmt.Errorf("last-n %d: %w", n, err)
	}
	time.Sleep(*warmup)
	m, err := measure(s, &rx, *window)
	if err != nil {
		return err
	}
	m["lastN"] = n
	m["participants"] = *nPeers
	m["streamsExpected"] = *nPeers * want
	emit(m)
	log.Printf("last-n %d: %.0f kbit/s out, server %.1f%% CPU, %d streams flowing", n, m["egressKbps"], m["serverCPU"], m["streamsFlowing"])
	return nil
}

// ---- simulcast vs single layer ----------------------------------------------------

// Layers as the SDK sends them: quarter, half and full resolution at 1/10, 1/3
// and all of the top bitrate.
func layersFor(sc bool) []layerSpec {
	if !sc {
		return []layerSpec{{rid: "", kbps: *kbps}}
	}
	return []layerSpec{{rid: "q", kbps: *kbps / 10}, {rid: "h", kbps: *kbps / 3}, {rid: "f", kbps: *kbps}}
}

func simulcast(sc bool) error {
	s, err := startServer(*nPeers + 5)
	if err != nil {
		return err
	}
	defer s.stop()
	room := "simulcast"
	stop := make(chan struct{})
	defer close(stop)
	var rx rxCounter
	peers := make([]*client.Client, *nPeers)
	defer closeAll(peers)
	api := publisherAPI()
	sids := make([]string, *nPeers)
	err = benchkit.Parallel(*nPeers, func(i int) error {
		c, err := join(s, room, fmt.Sprintf("p%02d", i), api)
		if err != nil {
			return err
		}
		peers[i] = c
		go rx.receive(c, nil)
		src, err := newSource(c, layersFor(sc), *fps)
		if err != nil {
			return err
		}
		sid, err := src.publish(context.Background(), c, []protocol.LayerInfo{
			{RID: "q", Width: 320, Height: 180}, {RID: "h", Width: 640, Height: 360}, {RID: "f", Width: 1280, Height: 720}})
		if err != nil {
			return err
		}
		sids[i] = sid
		go src.run(stop)
		return nil
	})
	if err != nil {
		return err
	}
	if err := rx.waitStreams(*nPeers*(*nPeers-1), 60*time.Second); err != nil {
		return err
	}
	// Every receiver: participant 0 on stage (participant 1 for participant 0),
	// everyone else in 320x180 thumbnails. The same requests go to the
	// single-layer room, where the server cannot act on them.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = benchkit.Parallel(*nPeers, func(i int) error {
		stage := 0
		if i == 0 {
			stage = 1
		}
		for j, sid := range sids {
			if j == i {
				continue
			}
			req := protocol.UpdateTrackSettings{TrackSid: sid, Width: 320, Height: 180}
			if j == stage {
				req = protocol.UpdateTrackSettings{TrackSid: sid, Quality: protocol.QualityHigh}
			}
			if _, err := peers[i].Request(ctx, req); err != nil {
				return fmt.Errorf("updateTrackSettings: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	time.Sleep(*warmup)
	m, err := measure(s, &rx, *window)
	if err != nil {
		return err
	}
	m["simulcast"] = sc
	m["publishers"] = *nPeers
	emit(m)
	log.Printf("simulcast=%v: %.0f kbit/s out, %.0f kbit/s in, server %.1f%% CPU", sc, m["egressKbps"], m["ingressKbps"], m["serverCPU"])
	return nil
}

// ---- layer switch delay -------------------------------------------------------------

func switchDelay() error {
	s, err := startServer(*receivers + 5)
	if err != nil {
		return err
	}
	defer s.stop()
	room := "switch"
	stop := make(chan struct{})
	defer close(stop)
	api := publisherAPI()
	pub, err := join(s, room, "publisher", api)
	if err != nil {
		return err
	}
	defer pub.Close()
	src, err := newSource(pub, layersFor(true), *fps)
	if err != nil {
		return err
	}
	sid, err := src.publish(context.Background(), pub, []protocol.LayerInfo{
		{RID: "q", Width: 320, Height: 180}, {RID: "h", Width: 640, Height: 360}, {RID: "f", Width: 1280, Height: 720}})
	if err != nil {
		return err
	}
	go src.run(stop)

	var mu sync.Mutex
	var delays []float64
	var keyWaits []float64
	err = benchkit.Parallel(*receivers, func(i int) error {
		c, err := join(s, room, fmt.Sprintf("r%02d", i), leanAPI())
		if err != nil {
			return err
		}
		defer c.Close()
		frames := make(chan frameSeen, 256)
		var rx rxCounter
		go rx.receive(c, frames)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		// Start low, wait until it is flowing.
		if err := rx.waitStreams(1, 20*time.Second); err != nil {
			return fmt.Errorf("receiver %d: %w", i, err)
		}
		if _, err := c.Request(ctx, protocol.UpdateTrackSettings{TrackSid: sid, Quality: protocol.QualityLow}); err != nil {
			return err
		}
		if _, err := waitLayer(frames, 0, time.Time{}, 10*time.Second); err != nil {
			return fmt.Errorf("receiver %d: %w", i, err)
		}
		q := []string{"low", "medium", "high"}
		for k := 0; k < *switches; k++ {
			to := 2 // alternate low <-> high
			if k%2 == 1 {
				to = 0
			}
			time.Sleep(time.Duration(700+137*i) * time.Millisecond) // receivers out of step
			drainFrames(frames)
			sent := time.Now()
			if err := c.Send(protocol.UpdateTrackSettings{TrackSid: sid, Quality: protocol.VideoQuality(q[to])}); err != nil {
				return err
			}
			f, err := waitLayer(frames, to, sent, 5*time.Second)
			if err != nil {
				return fmt.Errorf("receiver %d switch %d to %s: %w", i, k, q[to], err)
			}
			mu.Lock()
			delays = append(delays, float64(f.at.Sub(sent).Microseconds())/1000)
			keyWaits = append(keyWaits, float64(f.at.Sub(f.firstAt).Microseconds())/1000)
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return err
	}
	slices.Sort(delays)
	emit(map[string]any{
		"receivers": *receivers, "switches": len(delays),
		"medianMs": pct(delays, 0.5), "p90Ms": pct(delays, 0.9), "minMs": delays[0], "maxMs": delays[len(delays)-1],
		"delaysMs": delays, "frameSpreadMedianMs": median(keyWaits),
		"pliResponse": true,
	})
	log.Printf("switch: median %.1f ms, p90 %.1f ms over %d switches", pct(delays, 0.5), pct(delays, 0.9), len(delays))
	return nil
}

type frameSeen struct {
	layer   int
	key     bool
	at      time.Time // the frame's last packet (marker bit) arrived
	firstAt time.Time // its first packet arrived
}

func drainFrames(ch chan frameSeen) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// waitLayer returns the first complete frame of layer that starts with a
// keyframe, sent after `after`: the first frame of the new layer a decoder can
// show.
func waitLayer(ch chan frameSeen, layer int, after time.Time, within time.Duration) (frameSeen, error) {
	deadline := time.After(within)
	for {
		select {
		case f := <-ch:
			if f.layer == layer && f.key && !f.firstAt.Before(after) {
				return f, nil
			}
		case <-deadline:
			return frameSeen{}, fmt.Errorf("no keyframe of layer %d within %v", layer, within)
		}
	}
}

func pct(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p * float64(len(sorted)-1))
	return sorted[i]
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v) == 0 {
		return 0
	}
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// ---- measuring ---------------------------------------------------------------------

// measure reads the receivers' bytes and the server's CPU and ingress over d.
func measure(s *server, rx *rxCounter, d time.Duration) (map[string]any, error) {
	b0 := rx.bytes.Load()
	in0, err := s.metric("petrel_bytes_total", "in")
	if err != nil {
		return nil, err
	}
	c0, err := loadtest.ReadProc(s.cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	time.Sleep(d)
	c1, err := loadtest.ReadProc(s.cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	el := c1.At.Sub(c0.At).Seconds()
	b1 := rx.bytes.Load()
	in1, err := s.metric("petrel_bytes_total", "in")
	if err != nil {
		return nil, err
	}
	return map[string]any{
		"egressKbps":     float64(b1-b0) * 8 / el / 1000,
		"ingressKbps":    (in1 - in0) * 8 / el / 1000, // /metrics, coarse (batches of 128 packets per track)
		"serverCPU":      loadtest.CPUPercent(c0, c1),
		"windowSec":      el,
		"streamsFlowing": rx.flowing(),
	}, nil
}

// rxCounter counts what a set of receivers get.
type rxCounter struct {
	bytes   atomic.Int64
	packets atomic.Int64
	streams atomic.Int64 // streams that delivered at least one packet in the last second
	mu      sync.Mutex
	last    map[*webrtc.TrackRemote]*atomic.Int64
}

func (r *rxCounter) flowing() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	now := time.Now().UnixNano()
	for _, t := range r.last {
		if now-t.Load() < int64(time.Second) {
			n++
		}
	}
	return n
}

func (r *rxCounter) waitStreams(n int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if r.flowing() >= n {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%d of %d streams flowing after %v", r.flowing(), n, within)
}

// receive reads every track the client gets; with frames, it reports each
// complete frame's layer (the synthetic source writes it into the payload).
func (r *rxCounter) receive(c *client.Client, frames chan frameSeen) {
	for {
		select {
		case tr := <-c.Tracks:
			last := &atomic.Int64{}
			r.mu.Lock()
			if r.last == nil {
				r.last = map[*webrtc.TrackRemote]*atomic.Int64{}
			}
			r.last[tr.Remote] = last
			r.mu.Unlock()
			go func() {
				buf := make([]byte, 1500)
				for {
					if _, _, err := tr.Receiver.Read(buf); err != nil {
						return
					}
				}
			}()
			go func() {
				buf := make([]byte, 1500)
				var p rtp.Packet
				var cur frameSeen
				inFrame := false
				for {
					k, _, err := tr.Remote.Read(buf)
					if err != nil {
						return
					}
					now := time.Now()
					last.Store(now.UnixNano())
					r.packets.Add(1)
					r.bytes.Add(int64(k))
					if frames == nil {
						continue
					}
					if p.Unmarshal(buf[:k]) != nil || len(p.Payload) < 6 {
						continue
					}
					if p.Payload[0]&0x10 != 0 { // S: a frame starts
						cur = frameSeen{layer: int(p.Payload[5]), key: p.Payload[4]&0x01 == 0, firstAt: now}
						inFrame = true
					}
					if p.Marker && inFrame {
						cur.at = now
						select {
						case frames <- cur:
						default:
						}
						inFrame = false
					}
				}
			}()
		case <-c.Done():
			return
		}
	}
}

// ---- synthetic simulcast source ---------------------------------------------------------

type layerSpec struct {
	rid  string
	kbps int
}

// source writes VP8-shaped frames for each layer: a 4-byte payload descriptor
// with a 15-bit picture ID, then a frame whose first byte says key or inter
// frame and whose second byte is the layer index (how receivers tell layers
// apart). Keyframes are 5x an inter frame, every second, or at the next frame
// after the server asks (PLI/FIR) for that layer, as an encoder would.
type source struct {
	layers  []layerSpec
	tracks  []*webrtc.TrackLocalStaticRTP
	sender  *webrtc.RTPSender
	fps     int
	midID   uint8
	ridID   uint8
	mid     string
	wantKey []atomic.Bool
	ssrcs   []uint32
}

func newSource(c *client.Client, layers []layerSpec, fps int) (*source, error) {
	s := &source{layers: layers, fps: fps, wantKey: make([]atomic.Bool, len(layers))}
	vp8 := webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000}
	id := fmt.Sprintf("cam-%p", s)
	for _, l := range layers {
		var opts []func(*webrtc.TrackLocalStaticRTP)
		if l.rid != "" {
			opts = append(opts, webrtc.WithRTPStreamID(l.rid))
		}
		tr, err := webrtc.NewTrackLocalStaticRTP(vp8, id, "stream-"+id, opts...)
		if err != nil {
			return nil, err
		}
		s.tracks = append(s.tracks, tr)
	}
	return s, nil
}

func (s *source) publish(ctx context.Context, c *client.Client, infos []protocol.LayerInfo) (string, error) {
	req := protocol.PublishTrack{Cid: s.tracks[0].ID(), Kind: protocol.KindVideo, Source: protocol.SourceCamera, Width: 1280, Height: 720}
	if len(s.layers) > 1 {
		req.Layers = infos[:len(s.layers)]
	}
	r, err := c.Request(ctx, req)
	if err != nil {
		return "", err
	}
	ti, _ := r["track"].(map[string]any)
	sid, _ := ti["sid"].(string)
	sender, err := c.Pub.AddTrack(s.tracks[0])
	if err != nil {
		return "", err
	}
	for _, t := range s.tracks[1:] {
		if err := sender.AddEncoding(t); err != nil {
			return "", err
		}
	}
	s.sender = sender
	if err := c.NegotiatePublisher(ctx, false); err != nil {
		return "", err
	}
	for _, x := range sender.GetParameters().HeaderExtensions {
		switch x.URI {
		case sdp.SDESMidURI:
			s.midID = uint8(x.ID)
		case sdp.SDESRTPStreamIDURI:
			s.ridID = uint8(x.ID)
		}
	}
	for _, tr := range c.Pub.GetTransceivers() {
		if tr.Sender() == sender {
			s.mid = tr.Mid()
		}
	}
	for _, e := range sender.GetParameters().Encodings {
		s.ssrcs = append(s.ssrcs, uint32(e.SSRC))
	}
	if len(s.layers) > 1 && (s.midID == 0 || s.ridID == 0) {
		return "", errors.New("mid/rid header extensions not negotiated")
	}
	// Pion delivers each encoding's RTCP on its own reader.
	for _, l := range s.layers {
		go s.readRTCP(l.rid)
	}
	return sid, nil
}

// readRTCP turns the server's keyframe requests into keyframes of that layer.
func (s *source) readRTCP(rid string) {
	buf := make([]byte, 1500)
	for {
		var n int
		var err error
		if rid == "" {
			n, _, err = s.sender.Read(buf)
		} else {
			n, _, err = s.sender.ReadSimulcast(buf, rid)
		}
		if err != nil {
			return
		}
		pkts, err := rtcp.Unmarshal(buf[:n])
		if err != nil {
			continue
		}
		for _, p := range pkts {
			var media uint32
			switch k := p.(type) {
			case *rtcp.PictureLossIndication:
				media = k.MediaSSRC
			case *rtcp.FullIntraRequest:
				media = k.MediaSSRC
			default:
				continue
			}
			for i, ssrc := range s.ssrcs {
				if ssrc == media || len(s.ssrcs) == 1 {
					s.wantKey[i].Store(true)
				}
			}
		}
	}
}

func (s *source) run(stop chan struct{}) {
	period := time.Second / time.Duration(s.fps)
	tick := time.NewTicker(period)
	defer tick.Stop()
	seq := make([]uint16, len(s.layers))
	var ts uint32
	var pic uint16
	payload := make([]byte, mtu+16)
	var pkt rtp.Packet
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		ts += uint32(90000 / s.fps)
		pic = (pic + 1) & 0x7fff
		for i, l := range s.layers {
			// Bytes per frame so that a second (one keyframe of 5 units, fps-1
			// inter frames of 1) makes the layer's rate.
			unit := l.kbps * 1000 / 8 / (s.fps + 4)
			key := n%s.fps == 0 || s.wantKey[i].Swap(false)
			size := unit
			if key {
				size = 5 * unit
			}
			size = max(size, 8)
			for off := 0; off < size; off += mtu {
				chunk := min(mtu, size-off)
				desc := []byte{0x80, 0x80, 0x80 | byte(pic>>8), byte(pic)}
				if off == 0 {
					desc[0] |= 0x10 // S
				}
				p := payload[:4+chunk]
				copy(p, desc)
				for j := 4; j < len(p); j++ {
					p[j] = byte(j)
				}
				if off == 0 {
					p[4] = 0x01 // inter
					if key {
						p[4] = 0x00
					}
					p[5] = byte(i)
				}
				pkt.Header = rtp.Header{Version: 2, SequenceNumber: seq[i], Timestamp: ts, Marker: off+chunk >= size}
				if s.ridID != 0 && l.rid != "" {
					_ = pkt.Header.SetExtension(s.midID, []byte(s.mid))
					_ = pkt.Header.SetExtension(s.ridID, []byte(l.rid))
				}
				pkt.Payload = p
				_ = s.tracks[i].WriteRTP(&pkt)
				seq[i]++
			}
		}
	}
}

// ---- clients and server -------------------------------------------------------------

func join(s *server, room, id string, api *webrtc.API) (*client.Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.Join(ctx, "ws://"+s.http+"/v1/rtc", s.token(room, id), client.Options{Name: id, API: api})
	if err != nil {
		return nil, fmt.Errorf("%s join: %w", id, err)
	}
	return c, nil
}

func closeAll(cs []*client.Client) {
	for _, c := range cs {
		if c != nil {
			c.Close()
		}
	}
}

func baseSettings() webrtc.SettingEngine {
	var se webrtc.SettingEngine
	se.SetIncludeLoopbackCandidate(true)
	se.SetICEMulticastDNSMode(ice.MulticastDNSModeDisabled)
	se.SetInterfaceFilter(func(n string) bool { return n == "lo" })
	se.SetIPFilter(func(ip net.IP) bool { return ip.IsLoopback() })
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	se.SetFireOnTrackBeforeFirstRTP(true)
	return se
}

// leanAPI: Petrel's codecs and nothing else (no interceptors: no NACKs, reports
// or congestion feedback), so that the clients' CPU, which shares the machine
// with the server, stays small.
func leanAPI() *webrtc.API {
	m := &webrtc.MediaEngine{}
	if err := rtc.RegisterCodecs(m); err != nil {
		panic(err)
	}
	return webrtc.NewAPI(webrtc.WithSettingEngine(baseSettings()), webrtc.WithMediaEngine(m), webrtc.WithInterceptorRegistry(&interceptor.Registry{}))
}

// publisherAPI adds the mid/rid header extensions simulcast needs.
func publisherAPI() *webrtc.API {
	m := &webrtc.MediaEngine{}
	if err := rtc.RegisterCodecs(m); err != nil {
		panic(err)
	}
	if err := webrtc.ConfigureSimulcastExtensionHeaders(m); err != nil {
		panic(err)
	}
	return webrtc.NewAPI(webrtc.WithSettingEngine(baseSettings()), webrtc.WithMediaEngine(m), webrtc.WithInterceptorRegistry(&interceptor.Registry{}))
}

type server struct {
	cmd  *exec.Cmd
	http string
	logf *os.File
}

func startServer(maxParticipants int, extra ...string) (*server, error) {
	logf, err := os.CreateTemp("", "conference-server-*.log")
	if err != nil {
		return nil, err
	}
	args := append([]string{"--loopback", "--http", "127.0.0.1:0", "--rtc-udp-port", "0", "--rtc-tcp-port", "0",
		"--turn=false", "--api-key", apiKey, "--log-level", "warn",
		"--max-participants", strconv.Itoa(maxParticipants), "--joins-per-second", "1000", "--joins-per-ip", "0", "--max-conns-per-ip", "0", "--messages-per-second", "1000"}, extra...)
	cmd := exec.Command(*serverBin, args...)
	cmd.Env = append(os.Environ(), "PETREL_API_SECRET="+apiSecret)
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, logf: logf}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "READY "); ok {
				for _, f := range strings.Fields(rest) {
					if v, ok := strings.CutPrefix(f, "http="); ok {
						s.http = v
					}
				}
				ready <- nil
				_, _ = io.Copy(io.Discard, out)
				return
			}
		}
		ready <- errors.New("benchserver exited before READY")
	}()
	select {
	case err := <-ready:
		if err != nil {
			s.stop()
			return nil, err
		}
	case <-time.After(20 * time.Second):
		s.stop()
		return nil, errors.New("benchserver not ready in 20s")
	}
	return s, nil
}

func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(8 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
	s.logf.Close()
	os.Remove(s.logf.Name())
}

func (s *server) metric(name, dir string) (float64, error) {
	return benchkit.Metric(s.http, name, dir)
}

func (s *server) token(room, identity string) string {
	return benchkit.Token(room, identity, true)
}
