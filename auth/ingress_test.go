package auth

import (
	"errors"
	"strings"
	"testing"
)

// A stream key allows exactly its room and identity, publish only, over its
// kind; it stops working when deleted; tokens and unknown keys are told apart.
func TestIngressKeyGrants(t *testing.T) {
	k := NewIngressKeys()
	in, err := k.Create(IngressRTMP, "stage", "obs", "OBS")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(in.Key, "sk_") || len(in.Key) < 32 || strings.Contains(in.Key, ".") {
		t.Fatalf("key %q", in.Key)
	}
	other, _ := k.Create(IngressRTMP, "stage", "obs2", "")
	if other.Key == in.Key || other.ID == in.ID {
		t.Fatal("two ingresses share a key or id")
	}
	c, got, ok, err := k.Verify(in.Key, IngressRTMP)
	if err != nil || !ok || got.ID != in.ID {
		t.Fatalf("verify: %v %v %+v", ok, err, got)
	}
	if c.Room != "stage" || c.Identity() != "obs" || c.Name != "OBS" ||
		c.Grants != (Grants{Publish: true}) {
		t.Fatalf("claims %+v", c)
	}
	if _, _, ok, err := k.Verify(in.Key, IngressSRT); !ok || !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("an rtmp key over srt: %v %v", ok, err)
	}
	if _, _, ok, err := k.Verify("sk_"+strings.Repeat("a", 32), IngressRTMP); !ok || !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("unknown key: %v %v", ok, err)
	}
	if _, _, ok, _ := k.Verify("eyJ.a.b", IngressRTMP); ok {
		t.Fatal("a token taken for a stream key")
	}
	if _, ok := k.Delete(in.ID); !ok || k.Exists(in.ID) {
		t.Fatal("delete")
	}
	if _, _, _, err := k.Verify(in.Key, IngressRTMP); err == nil {
		t.Fatal("a deleted key still works")
	}
	if l := k.List(); len(l) != 1 || l[0].ID != other.ID {
		t.Fatalf("list %+v", l)
	}
}

func TestIngressCreateRefuses(t *testing.T) {
	k := NewIngressKeys()
	for _, c := range [][3]string{
		{"webrtc", "stage", "obs"},
		{IngressRTMP, "", "obs"},
		{IngressRTMP, "stage", ""},
		{IngressSRT, "stage", strings.Repeat("x", 200)},
	} {
		if _, err := k.Create(c[0], c[1], c[2], ""); !errors.Is(err, ErrBadIngress) {
			t.Errorf("%q: %v", c, err)
		}
	}
	if _, err := k.Create(IngressRTMP, "stage", "Camera", ""); !errors.Is(err, ErrReserved) {
		t.Fatalf("reserved identity: %v", err)
	}
}
