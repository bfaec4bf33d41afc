// Package driver is for store writers; applications use package session.
//
// It holds the contract between package session and the stores that keep
// sessions (memstore, sqlitestore, pgstore, redisstore, or one of your
// own): the Store interface and the values that cross it (Record, ID), the
// checks every store runs before its first write (ValidateRecord,
// ValidateUserID, ValidateData, ValidateTimeout, ValidateVersion and
// ID.Validate), and UserShard, the shard of a user that every session ID
// of the user starts with (stores that partition data keep a user's
// sessions and index together by it).
//
// The types an application also sees (Store, Record, ID), the limits and
// the sentinel errors are defined here and re-exported by package session
// under the same names, so a value of either is a value of the other, and
// errors.Is(err, session.ErrInvalid) holds for an error wrapping
// ErrInvalid.
package driver
