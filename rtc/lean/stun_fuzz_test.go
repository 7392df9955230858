package lean

import (
	"net/netip"
	"testing"

	"github.com/pion/stun/v4"
)

// FuzzBinding decodes arbitrary datagrams as the session server's demultiplexer
// does and checks them as binding requests: nothing panics, and a request
// that passes is one for the ufrag with the password's integrity.
func FuzzBinding(f *testing.F) {
	good, err := stun.Build(stun.BindingRequest, stun.TransactionID, stun.NewUsername("local:remote"),
		stun.RawAttribute{Type: stun.AttrUseCandidate}, stun.NewShortTermIntegrity("password"), stun.Fingerprint)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good.Raw)
	f.Add(good.Raw[:len(good.Raw)-8])
	f.Add([]byte{0, 1, 0, 0, 0x21, 0x12, 0xa4, 0x42, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Fuzz(func(t *testing.T, b []byte) {
		m := &stun.Message{Raw: append([]byte(nil), b...)}
		if m.Decode() != nil {
			return
		}
		LocalUfrag(m)
		_, err := CheckBinding(m, "local", "password")
		if err != nil {
			return
		}
		if stun.NewShortTermIntegrity("password").Check(m) != nil {
			t.Fatal("a request without the password's integrity passed")
		}
		if _, err := BindingSuccess(m, netip.MustParseAddrPort("127.0.0.1:9"), "password"); err != nil {
			t.Fatal(err)
		}
	})
}
