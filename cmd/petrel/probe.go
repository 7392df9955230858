package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/pion/ice/v4"
	"github.com/pion/interceptor"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/camera"
	"github.com/petrel-sfu/petrel/camera/probe"
	"github.com/petrel-sfu/petrel/rtc"
)

func init() {
	register("probe", "measure a camera's time-to-stream as a headless WHEP viewer", probeMain)
}

func probeMain(args []string) int {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	server := fs.String("server", "http://127.0.0.1:7880", "Petrel's HTTP address (for a camera id)")
	tok := fs.String("token", os.Getenv("PETREL_TOKEN"), "viewer token (default: signed with the API key)")
	relay := fs.Bool("relay", false, "force the TURN relay (iceTransportPolicy relay)")
	turnTCP := fs.Bool("turn-tcp", false, "with --relay, also use TURN over TCP (default: UDP only)")
	runs := fs.Int("runs", 1, "sessions to open, one after another")
	interval := fs.Duration("interval", 300*time.Millisecond, "pause between sessions (let a cold camera go idle: more than its idle_after)")
	timeout := fs.Duration("timeout", 15*time.Second, "give up on a session after")
	httpLive := fs.Bool("http", false, "measure the HTTP live fallback (live.mp4) instead of WebRTC")
	direct := fs.Bool("direct", false, "a direct session with a WebRTC camera (peer to peer, the server relaying signaling; with --relay through its TURN)")
	noTrickle := fs.Bool("no-trickle", false, "with --direct, gather every candidate before sending the offer (no trickle ICE)")
	loopback := fs.Bool("loopback", false, "gather ICE candidates on 127.0.0.1 only")
	asJSON := fs.Bool("json", false, "print each run and the summary as JSON lines")
	browserCodecs := fs.Bool("browser-codecs", false, "offer the codecs the server forwards to browsers (no H.265, which no browser receives over WebRTC), instead of Pion's defaults")
	key := fs.String("api-key", os.Getenv("PETREL_API_KEY"), "API key (default: development key)")
	secret := fs.String("api-secret", os.Getenv("PETREL_API_SECRET"), "API secret")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: petrel probe [flags] <camera-id | WHEP URL>  (--direct: a camera id)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 || *runs < 1 || (*direct && (*httpLive || strings.Contains(fs.Arg(0), "://"))) {
		fs.Usage()
		return 2
	}
	target := fs.Arg(0)
	endpoint, room := target, ""
	if !strings.Contains(target, "://") {
		room = camera.RoomOf(target)
		endpoint = strings.TrimRight(*server, "/") + "/whep/" + url.PathEscape(room)
	} else if i := strings.Index(target, "/whep/"); i >= 0 {
		room, _ = url.PathUnescape(target[i+len("/whep/"):])
	}
	if *tok == "" {
		keys, apiKey, _, err := loadKeys(*key, *secret)
		if err != nil {
			fmt.Fprintln(os.Stderr, "petrel probe:", err)
			return 1
		}
		c := auth.Claims{Room: room, Grants: auth.Grants{Subscribe: true}}
		c.Subject = fmt.Sprintf("probe-%d", time.Now().UnixNano())
		if *tok, err = keys.Sign(apiKey, c, time.Hour); err != nil {
			fmt.Fprintln(os.Stderr, "petrel probe:", err)
			return 1
		}
	}
	var se webrtc.SettingEngine
	if *loopback {
		se.SetIncludeLoopbackCandidate(true)
		se.SetICEMulticastDNSMode(ice.MulticastDNSModeDisabled)
		se.SetInterfaceFilter(func(n string) bool { return n == "lo" })
		se.SetIPFilter(func(ip net.IP) bool { return ip.IsLoopback() })
		se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4, webrtc.NetworkTypeTCP4})
	}
	if *relay {
		// Pion holds a relay pair back for 2 s by default, hoping for a direct
		// one; with a relay-only policy there is none to wait for (browsers do
		// not wait either), and the wait would be all the probe measured.
		se.SetRelayAcceptanceMinWait(0)
	}
	opts := []func(*webrtc.API){webrtc.WithSettingEngine(se)}
	if *browserCodecs {
		m := &webrtc.MediaEngine{}
		ir := &interceptor.Registry{}
		if err := rtc.RegisterCodecs(m); err != nil {
			fmt.Fprintln(os.Stderr, "petrel probe:", err)
			return 1
		}
		if err := webrtc.RegisterDefaultInterceptors(m, ir); err != nil {
			fmt.Fprintln(os.Stderr, "petrel probe:", err)
			return 1
		}
		opts = append(opts, webrtc.WithMediaEngine(m), webrtc.WithInterceptorRegistry(ir))
	}
	api := webrtc.NewAPI(opts...)
	var results []probe.Result
	failures := 0
	for i := 0; i < *runs; i++ {
		if i > 0 {
			time.Sleep(*interval)
		}
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		var res probe.Result
		var err error
		if *httpLive {
			live := strings.TrimRight(*server, "/") + "/v1/cameras/" + url.PathEscape(strings.TrimPrefix(room, "camera/")) + "/live.mp4"
			res, err = probe.HTTPLive(ctx, live, *tok)
		} else {
			var v *probe.Viewer
			if *direct {
				ws := "ws" + strings.TrimPrefix(strings.TrimRight(*server, "/"), "http") + "/v1/rtc"
				v, err = probe.OpenDirect(ctx, probe.DirectOptions{URL: ws, Token: *tok, Relay: *relay, API: api, NoTrickle: *noTrickle})
			} else {
				v, err = probe.Open(ctx, probe.Options{Endpoint: endpoint, Token: *tok, Relay: *relay, TURNTCP: *turnTCP, API: api})
			}
			if err == nil {
				res, err = v.WaitFirstFrame(ctx)
				v.Close()
			}
		}
		cancel()
		if err != nil {
			failures++
			fmt.Fprintf(os.Stderr, "run %d: %v\n", i+1, err)
			continue
		}
		results = append(results, res)
		if *asJSON {
			b, _ := json.Marshal(map[string]any{"run": i + 1, "result": res})
			fmt.Println(string(b))
		} else {
			fmt.Printf("run %d: first frame %s (ice %s, dtls %s, first rtp %s, via %s)\n", i+1, ms(res.FirstFrame), ms(res.ICEConnected), ms(res.DTLSConnected), ms(res.FirstRTP), res.Candidate)
		}
	}
	if len(results) == 0 {
		fmt.Fprintln(os.Stderr, "petrel probe: no session reached a complete frame")
		return 1
	}
	steps := []struct {
		name string
		get  func(probe.Result) time.Duration
	}{
		{"pc_created", func(r probe.Result) time.Duration { return r.PCCreated }},
		{"offer_created", func(r probe.Result) time.Duration { return r.OfferCreated }},
		{"answer_arrived", func(r probe.Result) time.Duration { return r.AnswerArrived }},
		{"ice_connected", func(r probe.Result) time.Duration { return r.ICEConnected }},
		{"dtls_connected", func(r probe.Result) time.Duration { return r.DTLSConnected }},
		{"first_rtp", func(r probe.Result) time.Duration { return r.FirstRTP }},
		{"first_frame", func(r probe.Result) time.Duration { return r.FirstFrame }},
	}
	summary := map[string]map[string]float64{}
	if !*asJSON {
		fmt.Printf("\n%d of %d sessions reached a complete frame\n%-16s %9s %9s %9s\n", len(results), *runs, "step", "p50", "p90", "max")
	}
	for _, s := range steps {
		var ds []time.Duration
		for _, r := range results {
			if d := s.get(r); d > 0 {
				ds = append(ds, d)
			}
		}
		if len(ds) == 0 {
			continue
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		p50, p90, mx := pct(ds, 50), pct(ds, 90), ds[len(ds)-1]
		summary[s.name] = map[string]float64{"p50": msf(p50), "p90": msf(p90), "max": msf(mx)}
		if !*asJSON {
			fmt.Printf("%-16s %9s %9s %9s\n", s.name, ms(p50), ms(p90), ms(mx))
		}
	}
	if *asJSON {
		b, _ := json.Marshal(map[string]any{"runs": *runs, "ok": len(results), "summary": summary})
		fmt.Println(string(b))
	}
	if failures > 0 {
		return 1
	}
	return 0
}

// pct is the nearest-rank percentile of sorted ds.
func pct(ds []time.Duration, p int) time.Duration {
	i := (p*len(ds) + 99) / 100
	return ds[max(0, min(i-1, len(ds)-1))]
}

func msf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fms", msf(d))
}
