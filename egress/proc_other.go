//go:build !linux

package egress

import "os/exec"

// dieWithServer: only Linux has a parent-death signal.
func dieWithServer(*exec.Cmd) {}
