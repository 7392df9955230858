package integration

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	srt "github.com/datarhei/gosrt"

	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/serverapi"
	"github.com/petrel-sfu/petrel/webhook"
)

// An ingress made through the server API: ffmpeg publishes over RTMP with
// its stream key and a viewer receives the video; the list shows it
// publishing; a wrong key (and the RTMP key over SRT) is refused with a log
// line; deleting the ingress disconnects ffmpeg; a signature-checking
// webhook receiver sees ingress_started then ingress_ended. The same key
// flow over SRT follows.
func TestIngressStreamKeys(t *testing.T) {
	needSRT(t)
	recv := &hookReceiver{t: t}
	hooks := httptest.NewServer(recv)
	t.Cleanup(hooks.Close)
	e, logs, _ := startIngest(t, func(c *config.Config) {
		c.Webhook.URLs = []string{hooks.URL + "/petrel"}
		c.Webhook.Backoff = 50 * time.Millisecond
	})
	api := serverapi.New(e.url, apiKey, apiSecret)
	ctx := ctxT(t, 40*time.Second)

	in, err := api.CreateIngress(ctx, protocol.CreateIngress{Kind: "rtmp", Room: "stage", Identity: "obs", Name: "OBS"})
	if err != nil {
		t.Fatal(err)
	}
	if in.ID == "" || len(in.StreamKey) < 32 || strings.Contains(in.StreamKey, ".") || in.State != protocol.IngressInactive {
		t.Fatalf("created %+v", in)
	}
	if want := "rtmp://" + e.srv.Ingest.Addr() + "/live"; in.URL != want {
		t.Fatalf("url %q, want %q", in.URL, want)
	}
	// Refusals of the create call.
	for _, bad := range []protocol.CreateIngress{{Kind: "whip", Room: "stage", Identity: "x"}, {Kind: "rtmp", Identity: "x"},
		{Kind: "srt", Room: "stage", Identity: "camera"}} {
		var ae *serverapi.Error
		if _, err := api.CreateIngress(ctx, bad); !errors.As(err, &ae) || ae.Status/100 != 4 {
			t.Errorf("create %+v: %v", bad, err)
		}
	}

	viewer := e.join("stage", "viewer")
	cmd := ffmpegPublish(t, in.URL+"/"+in.StreamKey, 30)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	_, waitPackets := countVideo(t, viewer)
	waitPackets("from the ingress", 30)

	list, err := api.ListIngress(ctx)
	if err != nil || len(list) != 1 || list[0].ID != in.ID || list[0].State != protocol.IngressPublishing || list[0].Since < in.Since {
		t.Fatalf("list while publishing: %+v %v", list, err)
	}

	// A wrong key over RTMP, the RTMP key over SRT: refused.
	wrong := ffmpegPublish(t, in.URL+"/sk_"+strings.Repeat("a", 32), 3)
	done := make(chan error, 1)
	go func() { done <- wrong.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("ffmpeg published with a wrong stream key")
		}
	case <-time.After(8 * time.Second):
		t.Fatal("the server did not refuse a wrong stream key")
	}
	cfg := srt.DefaultConfig()
	cfg.StreamId = in.StreamKey
	if c, err := srt.Dial("srt", e.srv.Ingest.SRTAddr(), cfg); err == nil {
		c.Close()
		t.Fatal("an RTMP stream key was taken over SRT")
	}
	if !logged(logs, "ingest publisher refused") || !strings.Contains(logs.String(), "unknown stream key") {
		t.Fatalf("no refusal of the wrong key in the log:\n%s", logs.String())
	}

	// The same key again: the second publisher replaces the first in the
	// room, and the ingress stays publishing when the first one's end comes.
	second := ffmpegPublish(t, in.URL+"/"+in.StreamKey, 30)
	exited2 := make(chan error, 1)
	go func() { exited2 <- second.Wait() }()
	select {
	case <-exited:
	case <-time.After(8 * time.Second):
		t.Fatal("the first publisher was not replaced by the second with the same key")
	}
	time.Sleep(300 * time.Millisecond)
	if list, err := api.ListIngress(ctx); err != nil || len(list) != 1 || list[0].State != protocol.IngressPublishing {
		t.Fatalf("list after the replacement: %+v %v", list, err)
	}

	if err := api.DeleteIngress(ctx, in.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited2:
	case <-time.After(8 * time.Second):
		t.Fatal("ffmpeg still publishing after its ingress was deleted")
	}
	var ae *serverapi.Error
	if err := api.DeleteIngress(ctx, in.ID); !errors.As(err, &ae) || ae.Status != 404 || ae.Code != "not_found" {
		t.Fatalf("deleting again: %v", err)
	}
	if list, err := api.ListIngress(ctx); err != nil || len(list) != 0 {
		t.Fatalf("list after delete: %+v %v", list, err)
	}

	// SRT: the URL carries the key as its stream id.
	sin, err := api.CreateIngress(ctx, protocol.CreateIngress{Kind: "srt", Room: "stage", Identity: "obs-srt"})
	if err != nil {
		t.Fatal(err)
	}
	if u, err := url.Parse(sin.URL); err != nil || u.Scheme != "srt" || u.Query().Get("streamid") != sin.StreamKey {
		t.Fatalf("srt url %q: %v", sin.URL, err)
	}
	viewer2 := e.join("stage", "viewer2")
	srtCmd := ffmpegPublish(t, sin.URL+"&mode=caller&latency=120000", 30)
	srtExited := make(chan error, 1)
	go func() { srtExited <- srtCmd.Wait() }()
	// viewer2 also gets tracks of no one else: the RTMP publisher is gone.
	_, waitSRT := countVideo(t, viewer2)
	waitSRT("from the SRT ingress", 30)
	if err := api.DeleteIngress(ctx, sin.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-srtExited:
	case <-time.After(10 * time.Second):
		t.Fatal("the SRT ffmpeg still publishing after its ingress was deleted")
	}

	// The receiver: for each ingress its starts and ends, one of each per
	// publisher, the last an end with the ingress inactive; the replaced RTMP
	// publisher's end may come before or after its successor's start.
	byID := map[string][]string{}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		clear(byID)
		n := 0
		for _, ev := range recv.events() {
			if !strings.HasPrefix(ev.Event, "ingress_") {
				continue
			}
			info, _ := ev.IngressInfo.(map[string]any)
			if info["streamKey"] != nil || info["url"] != nil || info["room"] != "stage" || ev.Room == nil || ev.Room.Name != "stage" {
				t.Fatalf("%s: ingressInfo %v, room %+v", ev.Event, info, ev.Room)
			}
			id, _ := info["id"].(string)
			byID[id] = append(byID[id], fmt.Sprint(ev.Event, " ", info["kind"], " ", info["identity"], " ", info["state"]))
			n++
		}
		if n >= 6 {
			break
		}
	}
	started, ended := webhook.IngressStarted+" rtmp obs publishing", webhook.IngressEnded+" rtmp obs inactive"
	rtmp := byID[in.ID]
	// The replaced one's end says publishing if its successor had started.
	var starts, ends int
	for _, e := range rtmp {
		switch e {
		case started:
			starts++
		case ended, webhook.IngressEnded + " rtmp obs publishing":
			ends++
		}
	}
	if len(rtmp) != 4 || rtmp[0] != started || rtmp[3] != ended || starts != 2 || ends != 2 {
		t.Fatalf("RTMP ingress events:\n%s", strings.Join(rtmp, "\n"))
	}
	srtEvents := byID[sin.ID]
	if strings.Join(srtEvents, ",") != webhook.IngressStarted+" srt obs-srt publishing,"+webhook.IngressEnded+" srt obs-srt inactive" {
		t.Fatalf("SRT ingress events:\n%s", strings.Join(srtEvents, "\n"))
	}
}
