package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Metrics reported next to Metric: CPU time per cycle of this process (the
// contender's client side, including the benchmark loop) and of the server
// (all of redis-server from INFO cpu; the postmaster and all its children
// from /proc, when the server runs on this machine).
const (
	ClientCPUMetric = "client-µs/cycle"
	ServerCPUMetric = "server-µs/cycle"
)

// processCPU returns the user+system CPU time of this process.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU returns the CPU time redis-server has used (INFO cpu).
func (r *redisClients) cpu(ctx context.Context) (time.Duration, error) {
	info, err := r.rueidis.Do(ctx, r.rueidis.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		return 0, err
	}
	var total float64
	found := 0
	for line := range strings.Lines(info) {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "used_cpu_sys" && name != "used_cpu_user") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, err
		}
		total += f
		found++
	}
	if found != 2 {
		return 0, errors.New("bench: INFO cpu without used_cpu_sys and used_cpu_user")
	}
	return time.Duration(total * float64(time.Second)), nil
}

// clockTick is the unit of the CPU times in /proc/PID/stat (USER_HZ, 100 on
// Linux).
const clockTick = 10 * time.Millisecond

// procStat returns the parent pid and the CPU time of pid from
// /proc/PID/stat (utime+stime, plus cutime+cstime when children is set).
func procStat(pid int, children bool) (ppid int, cpu time.Duration, err error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, err
	}
	// The command name is in parentheses and may contain spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("bench: malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); ppid is field 4, utime..cstime 14..17.
	if len(f) < 15 {
		return 0, 0, fmt.Errorf("bench: malformed /proc/%d/stat", pid)
	}
	ppid, _ = strconv.Atoi(f[1])
	last := 12
	if children {
		last = 14
	}
	var ticks int64
	for _, v := range f[11 : last+1] {
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return ppid, time.Duration(ticks) * clockTick, nil
}

// postgresCPU returns the CPU time of the postmaster postmaster and all its
// children, living and exited.
func postgresCPU(postmaster int) (time.Duration, error) {
	_, total, err := procStat(postmaster, true)
	if err != nil {
		return 0, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, cpu, err := procStat(pid, false)
		if err == nil && ppid == postmaster {
			total += cpu
		}
	}
	return total, nil
}

// postmasterPID finds the postmaster of the pool's server when it runs on
// this machine (0 otherwise): the parent of a backend.
func (p *pgClients) postmasterPID(ctx context.Context) int {
	var backend int
	if err := p.pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		return 0
	}
	ppid, _, err := procStat(backend, false)
	if err != nil {
		return 0
	}
	var comm string
	if b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(ppid), "comm")); err == nil {
		comm = strings.TrimSpace(string(b))
	}
	if comm != "postgres" && comm != "postmaster" {
		return 0
	}
	return ppid
}
