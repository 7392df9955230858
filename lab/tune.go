package lab

import (
	"github.com/pion/webrtc/v4"
)

// SCTPTuning is how Petrel configures its SCTP associations and how its
// senders keep a data channel's buffer full. The zero value is Pion's
// default behaviour.
type SCTPTuning struct {
	// MaxReceiveBuffer is the receive window advertised to the peer. Pion's
	// default of 1 MiB caps a transfer at 1 MiB per RTT: 105 Mbit/s at
	// 80 ms.
	MaxReceiveBuffer uint32
	// SendHigh and SendLow are the sender's bufferedAmount watermarks:
	// write while below High, resume when it falls to Low. Pion counts
	// unacknowledged bytes in bufferedAmount, so High is also a cap on the
	// bytes in flight and must exceed the bandwidth-delay product.
	SendHigh, SendLow uint64
	// MessageSize is the bulk write size.
	MessageSize int
}

// DefaultTuning is Pion's defaults with the watermarks of Pion's flow
// control example (1 MiB / 512 KiB): what an application gets without
// thinking about it.
var DefaultTuning = SCTPTuning{SendHigh: 1 << 20, SendLow: 512 << 10, MessageSize: 64 << 10}

// PetrelTuning is what Petrel uses; see docs/benchmarks.md for how it
// compares with TCP.
var PetrelTuning = SCTPTuning{
	MaxReceiveBuffer: 16 << 20,
	SendHigh:         16 << 20,
	SendLow:          8 << 20,
	MessageSize:      64 << 10,
}

// TuneSCTP applies Petrel's SCTP settings to a SettingEngine. The server
// calls it when it builds its webrtc.API; senders should also use
// PetrelTuning's watermarks.
func TuneSCTP(se *webrtc.SettingEngine) { PetrelTuning.Apply(se) }

// Apply sets the association-level options of t on se.
func (t SCTPTuning) Apply(se *webrtc.SettingEngine) {
	if t.MaxReceiveBuffer > 0 {
		se.SetSCTPMaxReceiveBufferSize(t.MaxReceiveBuffer)
	}
}
