//go:build !linux

package bench

import "time"

// holdFor sleeps d, the contended key's hold (see hold_linux.go).
func holdFor(d time.Duration) { time.Sleep(d) }
