// Package pausetest holds the real-process fault test of a paused holder:
// a lease holder process is frozen with SIGSTOP past its lease, the next
// holder takes over and writes, and the frozen process, resumed, writes
// late. The store's fence guard must refuse the late write in every trial;
// the negative control without a guard shows the lost update every time.
// It has only tests.
package pausetest
