// Package driver is for store writers; applications use package schedule.
//
// It holds the contract between package schedule and the stores that keep
// scheduled jobs' state (memstore, sqlitestore, pgstore, redisstore,
// etcdstore, or one of your own): the Store interface and the requests
// that cross it (BeginRequest, FinishRequest, MarkRequest,
// RegisterRequest), the lease keys a scheduler claims slots on (ClaimKey,
// RunKey, PermitKey, JobOfKey), the checks every store runs before its
// first write (ValidateName, ValidateID, ValidateFingerprint,
// ValidateNode and the requests' Validate methods), and the rules the
// stores share: the reference decisions ApplyBegin, ApplyFinish and
// ApplyDefinition, the attempt history (BeginAttempt, EndAttempt) and its
// storage form (EncodeHistory, DecodeHistory), and CutError.
//
// The types an application also sees (Record, Attempt, Definition, State,
// Outcome, FinalError, NotDueError, Store) are defined here and
// re-exported by package schedule under the same names, so a value of
// either is a value of the other. The sentinel errors are defined here
// too and are package schedule's: errors.Is(err, schedule.ErrInvalid)
// holds for an error wrapping driver.ErrInvalid.
package driver
