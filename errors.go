package tenure

import "errors"

// The kinds of error every primitive's errors belong to. Each primitive
// keeps its own sentinels (lease.ErrInvalid, session.ErrNotFound, …), with
// messages that name it, and each of them also matches its kind here with
// errors.Is, so code that handles several primitives, or a store
// constructor's error, needs one check per kind:
//
//	if errors.Is(err, tenure.ErrUnavailable) { … } // any primitive's store could not answer
//
// The kinds are never returned bare: an error from tenure is always a
// primitive's sentinel (or a typed error) wrapping one of them.
var (
	// ErrInvalid: an argument or option is out of its documented range;
	// nothing was written. lease.ErrInvalid, idempotency.ErrInvalid,
	// ratelimit.ErrInvalid, session.ErrInvalid, schedule.ErrInvalid,
	// retention.ErrInvalid, client.ErrInvalid and the store constructors'
	// refusals are of this kind.
	ErrInvalid = errors.New("tenure: invalid argument")
	// ErrUnavailable: the store could not be reached or did not answer in
	// time; the outcome of a write is unknown. Every primitive's
	// ErrUnavailable is of this kind.
	ErrUnavailable = errors.New("tenure: store unavailable (outcome unknown)")
	// ErrNotFound: no such record (session.ErrNotFound,
	// idempotency.ErrNotFound, schedule.ErrNotFound).
	ErrNotFound = errors.New("tenure: not found")
	// ErrConflict: the record changed since the caller read it
	// (session.ErrConflict, idempotency.ErrChanged).
	ErrConflict = errors.New("tenure: changed since read")
	// ErrLost: the caller's grant ended, so what it guarded was not done
	// (lease.ErrNotHeld and lease.ErrLost, idempotency.ErrClaimLost,
	// ratelimit.ErrPermitLost).
	ErrLost = errors.New("tenure: grant lost")
	// ErrStale: a fence below one already admitted was refused
	// (fence.ErrStale, which schedule.ErrStale is).
	ErrStale = errors.New("tenure: stale fence")
)
