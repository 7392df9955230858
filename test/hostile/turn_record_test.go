package hostile

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Eyevinn/mp4ff/mp4"
	"github.com/bluenviron/gortsplib/v4/pkg/format/rtph264"
)

// freeUDPPair is a port p with p and p+1 free for UDP (RTP and RTCP).
func freeUDPPair(t *testing.T) int {
	t.Helper()
	for i := 0; i < 50; i++ {
		a, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		p := a.LocalAddr().(*net.UDPAddr).Port
		b, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: p + 1})
		a.Close()
		if err == nil {
			b.Close()
			if p%2 == 0 {
				return p
			}
		}
	}
	t.Fatal("no free UDP port pair")
	return 0
}

// annexBAccessUnits splits an Annex-B stream into access units: a picture's
// first slice (first_mb_in_slice 0) or a parameter set after a slice starts
// the next one. Parameter sets stay in band, as a camera sends them.
func annexBAccessUnits(b []byte) [][][]byte {
	var nals [][]byte
	for _, n := range bytes.Split(b, []byte{0, 0, 1}) {
		n = bytes.TrimRight(n, "\x00")
		if len(n) > 0 {
			nals = append(nals, n)
		}
	}
	var aus [][][]byte
	var au [][]byte
	slices := false
	for _, n := range nals {
		t := n[0] & 0x1f
		vcl := t == 1 || t == 5
		if slices && (!vcl || n[1]&0x80 != 0) {
			aus = append(aus, au)
			au, slices = nil, false
		}
		au = append(au, n)
		slices = slices || vcl
	}
	if len(au) > 0 {
		aus = append(aus, au)
	}
	return aus
}

// TestRTPPushInBandParameterSetsRecorded: an RTP-push camera with no
// sprop_parameter_sets, whose SPS/PPS come only in band before each IDR, is
// recorded.
func TestRTPPushInBandParameterSetsRecorded(t *testing.T) {
	clip, err := os.ReadFile("../../loadtest/testdata/clip.h264")
	if err != nil {
		t.Fatal(err)
	}
	aus := annexBAccessUnits(clip)
	port := freeUDPPair(t)
	s := Start(t, Options{YAML: fmt.Sprintf("cameras:\n  - id: push\n    rtp:\n      port: %d\nrecording:\n  dir: rec\n  segment: 1s\n", port)})
	s.WaitLog(t, "rtp push listening", 5*time.Second)

	conn, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	enc := &rtph264.Encoder{PayloadType: 96, PayloadMaxSize: 1200, PacketizationMode: 1}
	if err := enc.Init(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(s.Dir, "rec", "push")
	// The clip is 30 fps with a keyframe each second; 6 s of it make segments.
	var ts uint32
	tick := time.NewTicker(time.Second / 30)
	defer tick.Stop()
	for i := 0; i < 180; i++ {
		pkts, err := enc.Encode(aus[i%len(aus)])
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pkts {
			p.Timestamp = ts
			b, _ := p.Marshal()
			if _, err := conn.Write(b); err != nil {
				t.Fatal(err)
			}
		}
		ts += 3000
		<-tick.C
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		segs := segmentFiles(dir)
		if len(segs) >= 2 {
			checkSPS(t, filepath.Join(dir, segs[0]), clip)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d segments in %s after 6 s of H.264 with in-band SPS/PPS\n%s", len(segs), dir, s.Logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	s.Healthy(t)
}

// checkSPS: the segment's avcC holds the stream's SPS intact.
func checkSPS(t *testing.T, path string, clip []byte) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mf, err := mp4.DecodeFile(f)
	if err != nil || mf.Init == nil {
		t.Fatalf("segment %s: %v", path, err)
	}
	avcx := mf.Init.Moov.Trak.Mdia.Minf.Stbl.Stsd.AvcX
	if avcx == nil || avcx.AvcC == nil || len(avcx.AvcC.SPSnalus) == 0 {
		t.Fatalf("segment %s has no avcC SPS", path)
	}
	if sps := avcx.AvcC.SPSnalus[0]; !bytes.Contains(clip, append([]byte{0, 0, 1}, sps...)) {
		t.Fatalf("segment %s: SPS %x is not the stream's", path, sps)
	}
}

// segmentFiles lists the non-empty MP4 segments in dir.
func segmentFiles(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		if info, err := e.Info(); err == nil && strings.HasSuffix(e.Name(), ".mp4") && info.Size() > 0 {
			out = append(out, e.Name())
		}
	}
	return out
}
