package egress

import (
	"os/exec"
	"syscall"
)

// dieWithServer makes the kernel kill ffmpeg if the server dies first: it
// would otherwise hold the streaming service's connection open, idle.
func dieWithServer(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
