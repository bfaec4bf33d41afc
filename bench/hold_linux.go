package bench

import (
	"syscall"
	"time"
)

// holdFor keeps the calling goroutine's thread asleep in the kernel for d
// (nanosleep(2)), the contended key's hold. time.Sleep ends on the Go
// runtime's network poller, whose timeout has millisecond resolution on
// Linux: a 2 ms sleep then lasted 2.2 to 2.6 ms depending on what else woke
// the process meanwhile (a contender whose waiters get replies during the
// hold held the key longer than one whose waiters wait silently), so the
// hold, meant to be the same for every contender, was not. The thread
// sleeps alone; the runtime runs the other goroutines on other threads.
func holdFor(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for {
		err := syscall.Nanosleep(&ts, &ts)
		if err != syscall.EINTR {
			return
		}
	}
}
