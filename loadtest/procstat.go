package loadtest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

const clkTck = 100 // USER_HZ on Linux

// ProcSample is a process's CPU time and resident set read from /proc.
type ProcSample struct {
	At  time.Time
	CPU time.Duration // utime + stime
	Sys time.Duration // stime: in the kernel (system calls, and the network stack's work done in them)
	RSS int64         // bytes
}

// ReadProc samples process pid (0 = this process).
func ReadProc(pid int) (ProcSample, error) {
	dir := "/proc/self"
	if pid > 0 {
		dir = "/proc/" + strconv.Itoa(pid)
	}
	s := ProcSample{At: time.Now()}
	b, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return s, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return s, errors.New("stat: no command name")
	}
	f := bytes.Fields(b[i+2:])
	if len(f) < 22 {
		return s, fmt.Errorf("stat: %d fields", len(f))
	}
	// f[0] is field 3 (state): utime and stime are fields 14 and 15, rss 24.
	ut, err1 := strconv.ParseInt(string(f[11]), 10, 64)
	st, err2 := strconv.ParseInt(string(f[12]), 10, 64)
	rss, err3 := strconv.ParseInt(string(f[21]), 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return s, err
	}
	s.CPU = time.Duration(ut+st) * time.Second / clkTck
	s.Sys = time.Duration(st) * time.Second / clkTck
	s.RSS = rss * int64(os.Getpagesize())
	return s, nil
}

// CPUPercent is the CPU used between a and b, in percent of one core.
func CPUPercent(a, b ProcSample) float64 {
	el := b.At.Sub(a.At)
	if el <= 0 {
		return 0
	}
	return 100 * float64(b.CPU-a.CPU) / float64(el)
}

// SysPercent is the part of CPUPercent spent in the kernel.
func SysPercent(a, b ProcSample) float64 {
	el := b.At.Sub(a.At)
	if el <= 0 {
		return 0
	}
	return 100 * float64(b.Sys-a.Sys) / float64(el)
}

// ProcThreads is the number of threads of pid (Janus's thread-per-handle mode
// shows here).
func ProcThreads(pid int) int {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}
