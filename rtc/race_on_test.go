//go:build race

package rtc

// raceOn: the race detector allocates on its own, so allocation counts do not hold.
const raceOn = true
