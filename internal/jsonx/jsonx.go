// Package jsonx holds the JSON forms tenure's state values share: times in
// RFC 3339 (UTC, with the store's precision), durations as Go duration
// strings ("1m30s"), and zero times left out.
package jsonx

import "time"

// Time returns t in RFC 3339 with nanoseconds, in UTC, or nil for the zero
// time (left out with omitempty).
func Time(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(time.RFC3339Nano)
	return &s
}

// Duration returns d as a Go duration string ("1m30s", "250ms"), or "" for
// zero (left out with omitempty).
func Duration(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}
