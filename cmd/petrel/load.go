package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/petrel-sfu/petrel/loadtest"
)

func init() {
	register("load", "WebRTC load generator: many lean peers against Petrel, WHIP/WHEP, Janus or LiveKit (docs/load.md)", loadMain)
}

func loadMain(args []string) int {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	var c loadtest.Config
	fs.StringVar(&c.Scenario, "scenario", "stream", "echo, room, stream, whip, whep or mix")
	fs.StringVar(&c.Target, "target", "petrel", "petrel, whip (any WHIP/WHEP server), janus or livekit (room and stream)")
	fs.StringVar(&c.URL, "url", "http://127.0.0.1:7880", "petrel, livekit: the server's HTTP base; janus: its WebSocket or HTTP API")
	fs.StringVar(&c.WHIPURL, "whip", "", "target whip: the WHIP endpoint")
	fs.StringVar(&c.WHEPURL, "whep", "", "target whip: the WHEP endpoint")
	fs.StringVar(&c.Token, "token", "", "target whip: bearer token")
	fs.StringVar(&c.APIKey, "api-key", os.Getenv("PETREL_API_KEY"), "petrel, livekit: API key to sign tokens (empty: petrel's development token endpoint; livekit's development key devkey)")
	fs.StringVar(&c.Secret, "api-secret", os.Getenv("PETREL_API_SECRET"), "petrel, livekit: API secret (livekit with no key: its development secret)")
	fs.StringVar(&c.Room, "room", "load", "room name (prefix for per-peer rooms)")
	fs.StringVar(&c.Proto, "proto", "ws", "petrel: ws (room protocol) or whip (WHIP publisher, WHEP viewers)")
	fs.IntVar(&c.Peers, "n", 10, "viewers, subscribers, echo peers or WHIP publishers")
	fs.IntVar(&c.Publishers, "publishers", 1, "room: publishers")
	fs.IntVar(&c.Talkers, "talkers", 3, "mix: participants who speak (the -audio source); the others send Opus silence")
	fs.Float64Var(&c.Rate, "rate", 20, "new peers per second")
	fs.IntVar(&c.Parallel, "parallel", 16, "peer setups in flight at once")
	fs.DurationVar(&c.Duration, "duration", 20*time.Second, "steady state after the ramp")
	fs.DurationVar(&c.Warmup, "warmup", 3*time.Second, "wait after the ramp before the steady window")
	fs.StringVar(&c.Video, "video", "synthetic", "video source: synthetic, a .ivf or .h264 file, rtp:ADDR (VP8), rtp-h264:ADDR, none")
	fs.StringVar(&c.Audio, "audio", "synthetic", "audio source: synthetic, an .ogg file, rtp:ADDR (Opus), none")
	fs.IntVar(&c.Kbps, "kbps", 500, "synthetic video bitrate")
	fs.IntVar(&c.TargetPID, "pid", 0, "target server PID for CPU and RSS sampling (0: none)")
	fs.BoolVar(&c.JanusStreaming, "janus-streaming", false, "janus stream: use the Streaming plugin (an RTP mountpoint the generator creates and feeds) instead of VideoRoom")
	fs.BoolVar(&c.PionRead, "pion-read", false, "receive through Pion's track reader goroutines instead of counting packets inside the SRTP session (slower; for comparison)")
	fs.StringVar(&c.Peer, "peer", "lean", "WHEP viewers: lean (own socket, hand-made ICE, DTLS and SRTP; no Pion PeerConnection) or pion")
	fs.DurationVar(&c.LeanPoll, "lean-poll", time.Millisecond, "lean viewers: put every viewer on one shared loopback socket (an address of 127/8 each) drained with recvmmsg(2) by one goroutine at this interval, which it adds to the delay at most (a loopback -bind only; elsewhere, and with 0, a socket and a reader goroutine per viewer)")
	fs.StringVar(&c.Bind, "bind", "127.0.0.1", "local address peers gather on")
	jsonOut := fs.String("json", "", "write results as JSON to this file")
	report := fs.String("report", "", "write report.md, samples and PNG plots into this directory")
	quiet := fs.Bool("q", false, "no live progress line")
	cpuprofile := fs.String("cpuprofile", "", "write the generator's CPU profile of the whole run to this file")
	controller := fs.String("controller", "", "controller mode: serve the WebSocket protocol of docs/load.md on this address (e.g. 127.0.0.1:7890) instead of running a scenario")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: petrel load [flags]\n\nExamples:\n"+
			"  petrel load -scenario stream -n 200 -rate 20 -pid $(pidof petrel) -json out.json -report out/\n"+
			"  petrel load -scenario room -publishers 3 -n 30\n"+
			"  petrel load -scenario mix -n 50 -api-key KEY -api-secret SECRET -pid $(pidof petrel)\n"+
			"  petrel load -target livekit -url http://127.0.0.1:7880 -scenario stream -n 20 -pid $(pidof livekit-server)\n"+
			"  petrel load -target whip -scenario whep -whip http://127.0.0.1:8889/cam/whip -whep http://127.0.0.1:8889/cam/whep -n 50\n"+
			"  petrel load -controller 127.0.0.1:7890\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *controller != "" {
		if err := loadtest.ServeController(ctx, *controller, loadtest.ControllerOptions{Bind: c.Bind, Log: os.Stderr}); err != nil {
			fmt.Fprintln(os.Stderr, "petrel load:", err)
			return 1
		}
		return 0
	}
	if !*quiet {
		c.Progress = os.Stderr
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "petrel load:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "petrel load:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	res, err := loadtest.Run(ctx, c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "petrel load:", err)
		return 1
	}
	fmt.Println(loadtest.SummaryTable(res))
	if *jsonOut != "" {
		if err := loadtest.WriteJSON(res, *jsonOut); err != nil {
			fmt.Fprintln(os.Stderr, "petrel load:", err)
			return 1
		}
	}
	if *report != "" {
		if err := loadtest.WriteReport(res, *report); err != nil {
			fmt.Fprintln(os.Stderr, "petrel load:", err)
			return 1
		}
	}
	if res.Error != "" {
		fmt.Fprintln(os.Stderr, "petrel load:", res.Error)
		return 1
	}
	return 0
}
