//go:build !race

package rtc

const raceOn = false
