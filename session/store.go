package session

import "github.com/tenurekit/tenure/session/driver"

var (
	// ErrNotFound reports that no live session has the token or ID: it never
	// existed, it expired (idle or absolute deadline, judged on the store's
	// clock), it was revoked, or it was rotated to a new token. A write
	// that gets it changed nothing: a late save never brings a session back.
	ErrNotFound = driver.ErrNotFound
	// ErrConflict reports a write whose expected version is not the stored
	// one: another request saved the session since it was loaded. Nothing
	// was written; load the session again and redo the change.
	ErrConflict = driver.ErrConflict
	// ErrUnavailable reports that the store could not be reached or did not
	// answer. It is never "no session": callers must fail closed (the HTTP
	// middleware answers 503). The outcome of a write that was sent is
	// unknown.
	ErrUnavailable = driver.ErrUnavailable
	// ErrInvalid reports bad input (user ID, values, token, options).
	// Nothing was written.
	ErrInvalid = driver.ErrInvalid
)

// Limits on what a Manager and every Store accept.
const (
	// MaxUserIDLen is the longest user ID in bytes.
	MaxUserIDLen = driver.MaxUserIDLen
	// MaxKeyLen is the longest value key in bytes.
	MaxKeyLen = driver.MaxKeyLen
	// MaxDataLen is the longest encoded value map in bytes.
	MaxDataLen = driver.MaxDataLen
	// MinTimeout is the shortest idle or absolute timeout.
	MinTimeout = driver.MinTimeout
	// MaxTimeout is the longest idle or absolute timeout.
	MaxTimeout = driver.MaxTimeout
)

// Record is a session as a Store keeps it (package driver's Record). Stores
// treat Data as opaque bytes; times are on the store's clock.
//
//	type Record struct {
//		ID            ID        // the store key, derived from the token, never the token
//		UserID        string    // the user the session belongs to
//		Data          []byte    // the encoded value map
//		Version       uint64    // 1 at creation, one more per Save and Rotate
//		Created       time.Time // kept by Rotate
//		IdleUntil     time.Time // min(last use + idle timeout, AbsoluteUntil)
//		AbsoluteUntil time.Time // the end whatever the use; kept by Rotate
//	}
type Record = driver.Record

// Store is the contract every backend implements (see package
// session/driver for the full contract): every call is one atomic step
// judged on the store's own clock, and no write but Create and Rotate ever
// creates a record, so a late write never revives a session.
type Store = driver.Store

// sessionSummary is the JSON form of a session: no token and no values,
// which may be private; values says how many there are.
type sessionSummary struct {
	ID            ID      `json:"id"`
	UserID        string  `json:"user_id"`
	Version       uint64  `json:"version"`
	Created       *string `json:"created,omitempty"`
	IdleUntil     *string `json:"idle_until,omitempty"`
	AbsoluteUntil *string `json:"absolute_until,omitempty"`
	DataBytes     int     `json:"data_bytes,omitempty"`
	Values        int     `json:"values,omitempty"`
}
