package driver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/tenurekit/tenure"
	"github.com/tenurekit/tenure/internal/kind"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tenurekit/tenure/internal/jsonx"
)

var (
	// ErrNotFound reports that no live session has the token or ID: it never
	// existed, it expired (idle or absolute deadline, judged on the store's
	// clock), it was revoked, or it was rotated to a new token. A write
	// that gets it changed nothing: a late save never brings a session back.
	ErrNotFound = kind.New("session: not found", tenure.ErrNotFound)
	// ErrConflict reports a write whose expected version is not the stored
	// one: another request saved the session since it was loaded. Nothing
	// was written; load the session again and redo the change.
	ErrConflict = kind.New("session: version conflict", tenure.ErrConflict)
	// ErrUnavailable reports that the store could not be reached or did not
	// answer. It is never "no session": callers must fail closed (the HTTP
	// middleware answers 503). The outcome of a write that was sent is
	// unknown.
	ErrUnavailable = kind.New("session: store unavailable (outcome unknown)", tenure.ErrUnavailable)
	// ErrInvalid reports bad input (user ID, values, token, options).
	// Nothing was written.
	ErrInvalid = kind.New("session: invalid argument", tenure.ErrInvalid)
)

// Limits on what a session.Manager and every Store accept.
const (
	// MaxUserIDLen is the longest user ID in bytes.
	MaxUserIDLen = 255
	// MaxKeyLen is the longest value key in bytes.
	MaxKeyLen = 255
	// MaxDataLen is the longest encoded value map in bytes.
	MaxDataLen = 64 << 10
	// MinTimeout is the shortest idle or absolute timeout.
	MinTimeout = time.Millisecond
	// MaxTimeout is the longest idle or absolute timeout.
	MaxTimeout = 366 * 24 * time.Hour
)

// Record is a session as a Store keeps it. Stores treat Data as opaque
// bytes; times are on the store's clock.
type Record struct {
	// ID is the store key: derived from the token, never the token.
	ID ID
	// UserID is the user the session belongs to.
	UserID string
	// Data is the encoded value map.
	Data []byte
	// Version counts the writes of Data: 1 at creation, one more for each
	// Save and Rotate. Idle refreshes do not change it.
	Version uint64
	// Created is when the session was created (store clock). Rotation keeps
	// it.
	Created time.Time
	// IdleUntil is when the session expires unless used again:
	// min(last use + idle timeout, AbsoluteUntil).
	IdleUntil time.Time
	// AbsoluteUntil is when the session expires whatever its use. Rotation
	// keeps it.
	AbsoluteUntil time.Time
}

// Store is the contract every backend implements. Every call is one atomic
// step judged on the store's own clock (Redis TIME, PostgreSQL
// clock_timestamp(), the process owning a SQLite file or memory store): a
// record is live while now < IdleUntil and now < AbsoluteUntil, and every
// read checks both, whatever the store's own expiry cleanup (TTLs, sweeps)
// has done so far. A refresh sets IdleUntil = min(now + idle,
// AbsoluteUntil) and never touches AbsoluteUntil. No write ever creates a
// record except Create and Rotate (with a fresh ID), so a write that comes
// late never revives a revoked, expired or rotated session.
//
// Stores validate their input with [ValidateRecord] and the Validate
// functions before their first write, wrap transport failures in
// ErrUnavailable, and are safe for concurrent use.
type Store interface {
	// Create inserts a record with rec's ID, UserID and Data at Version 1,
	// Created = now, AbsoluteUntil = now + absolute and IdleUntil =
	// min(now + idle, AbsoluteUntil), and returns it. It never overwrites:
	// an ID that exists gives ErrConflict. It is atomic with respect to
	// DeleteUser of the same user.
	Create(ctx context.Context, rec Record, idle, absolute time.Duration) (Record, error)
	// Load returns the live record id and, if idle > 0, refreshes its idle
	// deadline in the same step (the returned record has the new one).
	// ErrNotFound if no live record has id.
	Load(ctx context.Context, id ID, idle time.Duration) (Record, error)
	// Touch refreshes the idle deadline of the live record id if its
	// Version is version, and returns the new deadline. ErrNotFound if not
	// live, ErrConflict if live at another version.
	Touch(ctx context.Context, id ID, version uint64, idle time.Duration) (time.Time, error)
	// Save replaces Data of the live record id if its Version is version,
	// increments Version and refreshes the idle deadline, and returns the
	// record. ErrNotFound if not live, ErrConflict if live at another
	// version.
	Save(ctx context.Context, id ID, version uint64, data []byte, idle time.Duration) (Record, error)
	// Rotate moves the live record old at version to the new ID newID in one
	// step: the new record has the same UserID, Created and AbsoluteUntil,
	// Data data, Version version+1 and a refreshed idle deadline; old is
	// gone. ErrNotFound if old is not live, ErrConflict if it is at another
	// version (or newID exists). It is atomic with respect to DeleteUser.
	Rotate(ctx context.Context, old, newID ID, version uint64, data []byte, idle time.Duration) (Record, error)
	// Delete removes the record id. ErrNotFound if there was no live one
	// (an expired record is removed too).
	Delete(ctx context.Context, id ID) error
	// DeleteUser removes every record of userID in one atomic step with
	// respect to Create and Rotate: a record created or rotated while it
	// runs is either removed or created after it. It returns how many live
	// records it removed.
	DeleteUser(ctx context.Context, userID string) (int, error)
	// List returns the live records of userID, oldest first, without
	// refreshing them, through a per-user index (never a scan of all
	// sessions).
	List(ctx context.Context, userID string) ([]Record, error)
}

// MaxUserList is the most users one UserLister.Users call returns.
const MaxUserList = 1000

// UserInfo is a user with live sessions, as UserLister lists it.
type UserInfo struct {
	UserID string
	// Sessions is how many live sessions the user has; Newest is when the
	// newest of them was created (store clock).
	Sessions int
	Newest   time.Time
}

// UserLister is implemented by stores that can list the users that have
// live sessions (memstore, sqlitestore, pgstore). It is optional: a Store
// without it still meets the contract, and callers check for it with a
// type assertion. tenure serve's dashboard uses it to offer the users it
// can show.
type UserLister interface {
	// Users returns the users with at least one live session whose ID
	// starts with prefix and sorts after after (byte order; "" starts at
	// the first), in user ID order, at most limit of them (1 to
	// MaxUserList), how many live sessions each has and when the newest
	// was created, without refreshing any session.
	Users(ctx context.Context, prefix, after string, limit int) ([]UserInfo, error)
}

// ValidateUserList checks the arguments of UserLister.Users. Errors wrap
// ErrInvalid.
func ValidateUserList(prefix, after string, limit int) error {
	if limit < 1 || limit > MaxUserList {
		return fmt.Errorf("%w: user list limit %d out of range [1, %d]", ErrInvalid, limit, MaxUserList)
	}
	for _, s := range []string{prefix, after} {
		if len(s) > MaxUserIDLen || !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
			return fmt.Errorf("%w: user list prefix or start is not a user ID prefix (at most %d bytes of UTF-8 without NUL)", ErrInvalid, MaxUserIDLen)
		}
	}
	return nil
}

// ValidateUserID checks a user ID: 1 to MaxUserIDLen bytes of valid UTF-8
// without NUL.
func ValidateUserID(userID string) error {
	switch {
	case userID == "":
		return fmt.Errorf("%w: empty user ID", ErrInvalid)
	case len(userID) > MaxUserIDLen:
		return fmt.Errorf("%w: user ID is %d bytes, longer than %d", ErrInvalid, len(userID), MaxUserIDLen)
	case !utf8.ValidString(userID):
		return fmt.Errorf("%w: user ID is not valid UTF-8", ErrInvalid)
	}
	for i := 0; i < len(userID); i++ {
		if userID[i] == 0 {
			return fmt.Errorf("%w: user ID contains NUL", ErrInvalid)
		}
	}
	return nil
}

// ValidateData checks encoded session data: at most MaxDataLen bytes.
func ValidateData(data []byte) error {
	if len(data) > MaxDataLen {
		return fmt.Errorf("%w: session data is %d bytes, longer than %d", ErrInvalid, len(data), MaxDataLen)
	}
	return nil
}

// ValidateTimeout checks an idle or absolute timeout: MinTimeout to
// MaxTimeout.
func ValidateTimeout(d time.Duration) error {
	if d < MinTimeout || d > MaxTimeout {
		return fmt.Errorf("%w: timeout %v out of range [%v, %v]", ErrInvalid, d, MinTimeout, MaxTimeout)
	}
	return nil
}

// ValidateVersion checks an expected version: versions start at 1.
func ValidateVersion(v uint64) error {
	if v == 0 || v > 1<<62 {
		return fmt.Errorf("%w: version %d out of range", ErrInvalid, v)
	}
	return nil
}

// ValidateRecord checks what Create stores: ID, user ID, data and timeouts.
func ValidateRecord(rec Record, idle, absolute time.Duration) error {
	if err := rec.ID.Validate(); err != nil {
		return err
	}
	if err := ValidateUserID(rec.UserID); err != nil {
		return err
	}
	if err := ValidateData(rec.Data); err != nil {
		return err
	}
	if err := ValidateTimeout(idle); err != nil {
		return err
	}
	return ValidateTimeout(absolute)
}

// Live reports whether r is live at now: now is before both deadlines.
func (r Record) Live(now time.Time) bool {
	return now.Before(r.IdleUntil) && now.Before(r.AbsoluteUntil)
}

// sessionSummary is the JSON form of a session: no token (a Record never
// holds one) and no values, which may be private; data_bytes says how much
// is stored.
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

// MarshalJSON writes a summary of the record: its ID (not a credential),
// user, version and deadlines in RFC 3339, and the size of its data, never
// the data itself.
func (r Record) MarshalJSON() ([]byte, error) {
	return json.Marshal(sessionSummary{r.ID, r.UserID, r.Version, jsonx.Time(r.Created),
		jsonx.Time(r.IdleUntil), jsonx.Time(r.AbsoluteUntil), len(r.Data), 0})
}

// Session ID layout: the 2-byte shard of the session's user, then the
// SHA-256 of its token, both in lower-case hex.
const (
	shardLen  = 2
	shardHex  = 2 * shardLen
	digestHex = 2 * sha256.Size
	idLen     = shardHex + digestHex
)

// ID is the key of a session in a store: the shard of its user (4 hex
// digits), then the hex SHA-256 of its token (64 hex digits). It names a
// session for listing and revoking; it is not a credential.
type ID string

// Validate checks the form of id: 68 lower-case hex digits.
func (id ID) Validate() error {
	if len(id) != idLen {
		return fmt.Errorf("%w: session ID must be %d hex digits", ErrInvalid, idLen)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return fmt.Errorf("%w: session ID must be lower-case hex", ErrInvalid)
		}
	}
	return nil
}

// Shard returns the shard part of id (its first 4 hex digits): the same for
// every session of one user, see [UserShard]. Stores that partition data
// (Redis Cluster hash tags) keep a user's sessions and index together by it.
func (id ID) Shard() string {
	if len(id) < shardHex {
		return ""
	}
	return string(id[:shardHex])
}

// Short returns the first 12 hex digits of the digest part of id, enough to
// tell sessions apart in logs.
func (id ID) Short() string {
	if len(id) != idLen {
		return ""
	}
	return string(id[shardHex : shardHex+12])
}

// UserShard returns the shard of userID (4 hex digits): the first two bytes
// of a SHA-256 of the user ID. Every session ID of the user starts with it.
func UserShard(userID string) string {
	sum := sha256.Sum256([]byte("tenure/session/user\x00" + userID))
	return hex.EncodeToString(sum[:shardLen])
}
