package lease

import (
	"os"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/tenurekit/tenure/lease/driver"
)

// Limits on what a Store accepts. Every Store validates its input before
// its first write (see package lease/driver), so a bad key, token or TTL
// changes nothing.
const (
	// MaxKeyLen is the longest key in bytes.
	MaxKeyLen = driver.MaxKeyLen
	// MaxTokenLen is the longest token in bytes.
	MaxTokenLen = driver.MaxTokenLen
	// MinTTL is the shortest lease a Store grants.
	MinTTL = driver.MinTTL
	// MaxTTL is the longest lease a Store grants. Longer work keeps a shorter
	// lease alive (see [Locker.Do]) so that a dead holder frees it quickly.
	MaxTTL = driver.MaxTTL
	// MaxHolderLen is the longest holder description in bytes.
	MaxHolderLen = driver.MaxHolderLen
)

var (
	// ErrHeld reports that another holder has the key. The error returned
	// is a *HeldError carrying the holder's remaining time.
	ErrHeld = driver.ErrHeld
	// ErrNotHeld reports that the token does not hold the key (any more):
	// it expired, was released, or another holder took it.
	ErrNotHeld = driver.ErrNotHeld
	// ErrLost reports that a lease ended before its holder released it:
	// renewal failed or its validity ran out.
	ErrLost = driver.ErrLost
	// ErrInvalid reports bad input (key, token or TTL). Nothing was written.
	ErrInvalid = driver.ErrInvalid
	// ErrUnavailable reports that the store could not be reached or did not
	// answer. The outcome of a write that was sent is unknown: it may have
	// been applied. Writes are idempotent per token, so retrying with the same
	// token reconciles them.
	ErrUnavailable = driver.ErrUnavailable
)

// Store is the contract every backend implements (see package lease/driver
// for the full contract). Stores judge expiry on their own clock, never the
// caller's.
type Store = driver.Store

// Grant is what a store returns when it grants or renews a lease (package
// driver's Grant, which documents how stores count the TTL):
//
//	type Grant struct {
//		Fence uint64        // above every fence granted for the key before; renewals keep it
//		TTL   time.Duration // the time the store really granted
//	}
type Grant = driver.Grant

// Info describes a key as the store sees it (package driver's Info):
//
//	type Info struct {
//		Key    string
//		Held   bool          // a lease on Key is in force now
//		Fence  uint64        // the holder's fence, or the last one remembered (0 if none)
//		TTL    time.Duration // the holder's remaining time (0 when not held)
//		Holder string        // the holder's description, never its token
//	}
type Info = driver.Info

// HeldError is returned by Acquire when another holder has the key;
// errors.Is(err, ErrHeld) holds for it.
type HeldError = driver.HeldError

// DefaultHolder is the holder description a Locker gives when
// Options.Holder is empty: the host name and the process ID
// ("host-1234"), cut to MaxHolderLen bytes.
func DefaultHolder() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	host = strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) {
			return -1
		}
		return r
	}, host)
	pid := "-" + strconv.Itoa(os.Getpid())
	for len(host)+len(pid) > MaxHolderLen {
		_, n := utf8.DecodeLastRuneInString(host)
		host = host[:len(host)-n]
	}
	return host + pid
}
