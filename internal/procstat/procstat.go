// Package procstat reads a process's CPU time from /proc, for the load
// generator and the benchmarks that report CPU per decision.
package procstat

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Sample is a process's CPU time so far, as /proc/PID/stat counts it.
type Sample struct {
	CPU       time.Duration // utime + stime
	StartTime string        // field 22: tells a restarted process from the one measured before
}

// Read reads utime and stime (fields 14 and 15, in clock ticks) of
// /proc/PID/stat, for the whole process (every thread, dead ones too).
// ticksPerSecond is ClockTicks().
func Read(pid int, ticksPerSecond int64) (Sample, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Sample{}, fmt.Errorf("process CPU: %w", err)
	}
	// The command name (field 2) is in parentheses and may hold spaces or
	// parentheses itself: the fields after it start after the last ')'.
	end := bytes.LastIndexByte(b, ')')
	if end < 0 {
		return Sample{}, fmt.Errorf("process CPU: /proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[end+1:])) // f[0] is field 3
	if len(f) < 20 {
		return Sample{}, fmt.Errorf("process CPU: /proc/%d/stat: %d fields", pid, len(f)+2)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return Sample{}, fmt.Errorf("process CPU: /proc/%d/stat: %q is not a tick count", pid, s)
		}
		ticks += n
	}
	return Sample{CPU: time.Duration(ticks) * time.Second / time.Duration(ticksPerSecond), StartTime: f[19]}, nil
}

// atClockTick is AT_CLKTCK, the auxiliary-vector entry that
// sysconf(_SC_CLK_TCK) returns.
const atClockTick = 17

// ClockTicks returns the kernel's clock ticks per second (USER_HZ), the
// unit of /proc/PID/stat's CPU times, from the auxiliary vector the kernel
// gave this process (so without cgo); 100, Linux's value everywhere, if it
// cannot be read.
func ClockTicks() int64 {
	b, err := os.ReadFile("/proc/self/auxv")
	if err != nil {
		return 100
	}
	word := strconv.IntSize / 8
	for off := 0; off+2*word <= len(b); off += 2 * word {
		var key, val uint64
		if word == 8 {
			key, val = binary.NativeEndian.Uint64(b[off:]), binary.NativeEndian.Uint64(b[off+8:])
		} else {
			key, val = uint64(binary.NativeEndian.Uint32(b[off:])), uint64(binary.NativeEndian.Uint32(b[off+4:]))
		}
		if key == 0 {
			break
		}
		if key == atClockTick && val > 0 {
			return int64(val)
		}
	}
	return 100
}
