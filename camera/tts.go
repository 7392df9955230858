package camera

import "github.com/petrel-sfu/petrel/sfu"

// Sessions lists the time-to-stream records (steps in ms from the first
// signaling message) of the live and recent viewing sessions of room.
func (g *Gateway) Sessions(room string) []sfu.SessionTimingInfo {
	return g.o.Manager.SessionTimings(room)
}
