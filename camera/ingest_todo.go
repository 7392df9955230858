package camera

// Replaced by the ingest implementations in the next commits.
func (c *Camera) watchWebRTC()       { defer c.done.Done() }
func (c *Camera) webrtcViewers() int { return 0 }
