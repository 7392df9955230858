package sctptune

import (
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/pion/webrtc/v4"
)

func TestSet(t *testing.T) {
	tests := []struct {
		kv   string
		ok   bool
		want func(Tuning) bool
	}{
		{"mincwnd=262144", true, func(x Tuning) bool { return x.MinCwnd == 262144 }},
		{"replay=4096", true, func(x Tuning) bool { return x.DTLSReplayWindow == 4096 }},
		{"high=1048576", true, func(x Tuning) bool { return x.SendHigh == 1<<20 }},
		{"zerochecksum=1", true, func(x Tuning) bool { return x.ZeroChecksum }},
		{"mincwnd", false, nil},
		{"bogus=1", false, nil},
		{"rcvbuf=lots", false, nil},
	}
	for _, tc := range tests {
		x := Default
		err := x.Set(tc.kv)
		if (err == nil) != tc.ok {
			t.Errorf("Set(%q) error %v, want ok %v", tc.kv, err, tc.ok)
			continue
		}
		if tc.ok && !tc.want(x) {
			t.Errorf("Set(%q) gave %+v", tc.kv, x)
		}
	}
}

func TestPetrelBuildsAnAPI(t *testing.T) {
	var se webrtc.SettingEngine
	TuneSCTP(&se)
	pc, err := webrtc.NewAPI(webrtc.WithSettingEngine(se)).NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	pc.Close()
	if Petrel.SendHigh <= Petrel.SendLow || Petrel.MessageSize <= 0 {
		t.Errorf("watermarks %d/%d, message size %d", Petrel.SendHigh, Petrel.SendLow, Petrel.MessageSize)
	}
}

func TestSocketBuffersBeyondRmemMax(t *testing.T) {
	c, err := ListenUDP(&net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, _ := c.SyscallConn()
	var got int
	rc.Control(func(fd uintptr) { got, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF) })
	// The kernel reports twice what was set; without root only rmem_max
	// applies, so only root is held to the full size.
	if os.Geteuid() == 0 && got < 8<<20 {
		t.Errorf("SO_RCVBUF = %d, want >= 8 MiB", got)
	}
	if got < 200<<10 {
		t.Errorf("SO_RCVBUF = %d, smaller than the kernel default", got)
	}
}
