package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/camera/emulator"
	"github.com/petrel-sfu/petrel/rtc"
)

func init() {
	register("camera", "camera tools: emulate (an RTSP test camera), webrtc (a WebRTC test camera)", cameraMain)
}

func cameraMain(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: petrel camera emulate|webrtc [flags]")
		return 2
	}
	switch args[0] {
	case "emulate":
		return cameraEmulate(args[1:])
	case "webrtc":
		return cameraWebRTC(args[1:])
	}
	fmt.Fprintf(os.Stderr, "petrel camera: unknown tool %q (emulate, webrtc)\n", args[0])
	return 2
}

// loadOrMakeClip loads the test clip from dir, generating it with
// scripts/make-test-clip.sh when it is missing and the script is at hand.
// loadOrMakeClip loads the clip in dir, generating it first when clip.h264 (or,
// with needAAC, clip.aac) is missing.
func loadOrMakeClip(dir string, needAAC, needH265 bool) (*emulator.Clip, error) {
	_, err := os.Stat(filepath.Join(dir, "clip.h264"))
	if needAAC && err == nil {
		_, err = os.Stat(filepath.Join(dir, "clip.aac"))
	}
	if needH265 && err == nil {
		_, err = os.Stat(filepath.Join(dir, "clip.h265"))
	}
	if err != nil {
		script := "scripts/make-test-clip.sh"
		if _, serr := os.Stat(script); serr != nil {
			return nil, fmt.Errorf("no clip in %s: run scripts/make-test-clip.sh %s", dir, dir)
		}
		if out, err := exec.Command("bash", script, dir).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("make-test-clip.sh: %v: %s", err, out)
		}
	}
	return emulator.LoadClip(dir)
}

func waitSignal() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
}

func cameraEmulate(args []string) int {
	fs := flag.NewFlagSet("camera emulate", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8554", "RTSP listen address")
	clipDir := fs.String("clip", filepath.Join(os.TempDir(), "petrel-clip"), "test clip directory (generated if missing)")
	noAudio := fs.Bool("no-audio", false, "video only")
	inBand := fs.Bool("in-band-params", false, "send SPS/PPS before each IDR too")
	audio := fs.String("audio", "g711", "audio codec: g711 (mu-law), aac (MPEG4-GENERIC) or aac-latm (MP4A-LATM)")
	video := fs.String("video", "h264", "video codec: h264 or h265")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *audio != "g711" && *audio != "aac" && *audio != "aac-latm" {
		fmt.Fprintln(os.Stderr, "petrel camera emulate: --audio must be g711, aac or aac-latm")
		return 2
	}
	if *video != "h264" && *video != "h265" {
		fmt.Fprintln(os.Stderr, "petrel camera emulate: --video must be h264 or h265")
		return 2
	}
	clip, err := loadOrMakeClip(*clipDir, *audio != "g711", *video == "h265")
	if err != nil {
		fmt.Fprintln(os.Stderr, "petrel camera emulate:", err)
		return 1
	}
	e, err := emulator.Start(emulator.Options{Addr: *addr, Clip: clip, NoAudio: *noAudio, InBandParams: *inBand, Audio: *audio, H265: *video == "h265",
		Log: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		fmt.Fprintln(os.Stderr, "petrel camera emulate:", err)
		return 1
	}
	fmt.Println(e.URL())
	waitSignal()
	e.Close()
	return 0
}

func cameraWebRTC(args []string) int {
	fs := flag.NewFlagSet("camera webrtc", flag.ContinueOnError)
	url := fs.String("url", "ws://127.0.0.1:7880/v1/rtc", "Petrel's WebSocket URL")
	tok := fs.String("token", os.Getenv("PETREL_TOKEN"), "the camera's token (POST /v1/cameras/{id}/token)")
	clipDir := fs.String("clip", filepath.Join(os.TempDir(), "petrel-clip"), "test clip directory (generated if missing)")
	maxDirect := fs.Int("max-direct", emulator.DefaultMaxDirect, "direct sessions served at once (viewers beyond go through the SFU; 0: none)")
	loopback := fs.Bool("loopback", false, "gather ICE candidates on 127.0.0.1 only (the server's and the direct sessions' connections)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *tok == "" {
		fmt.Fprintln(os.Stderr, "petrel camera webrtc: --token is required")
		return 2
	}
	clip, err := loadOrMakeClip(*clipDir, false, false)
	if err != nil {
		fmt.Fprintln(os.Stderr, "petrel camera webrtc:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	o := emulator.WebRTCOptions{URL: *url, Token: *tok, Clip: clip, MaxDirect: *maxDirect,
		Log: func(msg string, args ...any) { slog.Info(msg, args...) }}
	if o.MaxDirect == 0 {
		o.MaxDirect = -1 // the flag's 0 means none; the option's 0 means the default
	}
	if *loopback {
		o.Tune = func(se *webrtc.SettingEngine) {
			rtc.OnlyAddress(se, net.IPv4(127, 0, 0, 1))
			se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
		}
	}
	cam, err := emulator.StartWebRTC(ctx, o)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "petrel camera webrtc:", err)
		return 1
	}
	fmt.Println("publishing; Ctrl-C to stop")
	waitSignal()
	cam.Close()
	return 0
}
