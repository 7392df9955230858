package rtc

import "github.com/pion/transport/v5/packetio"

// PacketBuffer is a packetio.Buffer as the io.ReadWriteCloser that
// SettingEngine.BufferFactory returns. Since pion/transport/v5 the buffer
// itself reads and writes with packet attributes; pion/srtp uses the
// *WithAttributes methods when a buffer has them, so they are kept.
type PacketBuffer struct{ *packetio.Buffer }

func (b PacketBuffer) Read(p []byte) (int, error) {
	n, _, err := b.Buffer.Read(p, nil)
	return n, err
}

func (b PacketBuffer) Write(p []byte) (int, error) { return b.Buffer.Write(p, nil) }

func (b PacketBuffer) ReadWithAttributes(p []byte, a packetio.Attributes) (int, packetio.Attributes, error) {
	return b.Buffer.Read(p, a)
}

func (b PacketBuffer) WriteWithAttributes(p []byte, a packetio.Attributes) (int, error) {
	return b.Buffer.Write(p, a)
}
