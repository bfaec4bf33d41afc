// Package serveapi holds the wire forms of tenure serve's HTTP API, shared
// by the server and the Go client: request and response bodies, problem
// types, and durations as Go duration strings.
package serveapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/ratelimit"
	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/session"
)

// Duration is a time.Duration written as a Go duration string ("1.5s").
// It reads the same strings; an empty string or null is zero.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	// A duration's string needs no escaping.
	s := time.Duration(d).String()
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), nil
}

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if n := len(b); n >= 2 && b[0] == '"' && b[n-1] == '"' && bytes.IndexByte(b[1:n-1], '\\') < 0 {
		s = string(b[1 : n-1]) // a plain string, as durations are
	} else if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"30s\" or \"1m30s\"")
	}
	if s == "" {
		*d = 0
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q does not parse (use forms such as \"30s\" or \"1m30s\")", s)
	}
	*d = Duration(v)
	return nil
}

// Problem types: one per tenure error. The type URI is stable; clients
// match on it.
const (
	TypeHeld         = "urn:tenure:problem:held"
	TypeNotHeld      = "urn:tenure:problem:not_held"
	TypeLost         = "urn:tenure:problem:lost"
	TypeStale        = "urn:tenure:problem:stale"
	TypeMismatch     = "urn:tenure:problem:mismatch"
	TypeInProgress   = "urn:tenure:problem:in_progress"
	TypeConflict     = "urn:tenure:problem:conflict"
	TypeNotFound     = "urn:tenure:problem:not_found"
	TypeInvalid      = "urn:tenure:problem:invalid"
	TypeUnavailable  = "urn:tenure:problem:unavailable"
	TypeUnauthorized = "urn:tenure:problem:unauthorized"
	TypeForbidden    = "urn:tenure:problem:forbidden"
	TypeRateLimited  = "urn:tenure:problem:rate_limited"
	TypeTooLarge     = "urn:tenure:problem:too_large"
	TypeNotSupported = "urn:tenure:problem:not_supported"
	TypeInternal     = "urn:tenure:problem:internal"
)

// ProblemContentType is the media type of error bodies (RFC 9457).
const ProblemContentType = "application/problem+json"

// Problem is an error body (RFC 9457) with tenure's extension members.
type Problem struct {
	Type   string `json:"type" doc:"problem type URI, one per tenure error"`
	Title  string `json:"title" doc:"short summary"`
	Status int    `json:"status" doc:"HTTP status"`
	Detail string `json:"detail,omitempty" doc:"what happened"`
	// TTL is, for held, the holder's remaining time; for in_progress, the
	// claim's remaining time.
	TTL Duration `json:"ttl,omitempty" doc:"held: the holder's remaining time; in_progress: the claim's"`
	// Holder is, for held, the holder's description when it gave one.
	Holder string `json:"holder,omitempty" doc:"held: the holder's description, when it gave one"`
	// Position is, for held, how many waiters are queued ahead of the
	// caller (a free key promised to them has no ttl).
	Position int `json:"position,omitempty" doc:"held: how many waiters are queued ahead of the caller (with no ttl: the key is free but promised to them)"`
	// Fence and Current are, for stale, the refused fence and the greatest
	// admitted one.
	Fence   uint64 `json:"fence,omitempty" doc:"stale: the refused fence"`
	Current uint64 `json:"current,omitempty" doc:"stale: the greatest admitted fence"`
	// Instance names this occurrence, urn:tenure:request:ID, for problems
	// whose cause the server logs instead of answering (unavailable,
	// internal): the server's log line for the request has the same ID.
	Instance string `json:"instance,omitempty" doc:"unavailable, internal: urn:tenure:request:ID; the server's log line with that request ID has the cause"`
}

// Kinds lists every problem type with its status and title.
var Kinds = []struct {
	Type   string
	Status int
	Title  string
}{
	{TypeHeld, http.StatusConflict, "held by another holder"},
	{TypeNotHeld, http.StatusConflict, "not held"},
	{TypeLost, http.StatusConflict, "lost"},
	{TypeStale, http.StatusConflict, "stale fence"},
	{TypeMismatch, http.StatusUnprocessableEntity, "key reused with different input"},
	{TypeInProgress, http.StatusConflict, "in progress"},
	{TypeConflict, http.StatusConflict, "version conflict"},
	{TypeNotFound, http.StatusNotFound, "not found"},
	{TypeInvalid, http.StatusBadRequest, "invalid argument"},
	{TypeUnavailable, http.StatusServiceUnavailable, "store unavailable (outcome unknown)"},
	{TypeUnauthorized, http.StatusUnauthorized, "missing or unknown bearer token"},
	{TypeForbidden, http.StatusForbidden, "outside the token's namespaces or operations"},
	{TypeRateLimited, http.StatusTooManyRequests, "too many requests for this token"},
	{TypeTooLarge, http.StatusRequestEntityTooLarge, "request body too large"},
	{TypeNotSupported, http.StatusNotImplemented, "the store does not offer this"},
	{TypeInternal, http.StatusInternalServerError, "internal error"},
}

// NewProblem returns the problem of type typ with detail.
func NewProblem(typ, detail string) Problem {
	for _, k := range Kinds {
		if k.Type == typ {
			return Problem{Type: typ, Title: k.Title, Status: k.Status, Detail: detail}
		}
	}
	return Problem{Type: TypeInternal, Title: "internal error", Status: http.StatusInternalServerError, Detail: detail}
}

// ProblemOf maps an error from a primitive's store to its problem: each
// tenure error has exactly one type. Bad input is checked first (nothing
// was written), then an unreachable store (the outcome is unknown).
func ProblemOf(err error) Problem {
	var (
		held  *lease.HeldError
		inpr  *idempotency.InProgressError
		stale *fence.StaleError
	)
	switch {
	case errors.Is(err, lease.ErrInvalid), errors.Is(err, idempotency.ErrInvalid),
		errors.Is(err, ratelimit.ErrInvalid), errors.Is(err, session.ErrInvalid),
		errors.Is(err, schedule.ErrInvalid):
		return NewProblem(TypeInvalid, err.Error())
	case errors.Is(err, lease.ErrUnavailable), errors.Is(err, idempotency.ErrUnavailable),
		errors.Is(err, ratelimit.ErrUnavailable), errors.Is(err, session.ErrUnavailable),
		errors.Is(err, schedule.ErrUnavailable):
		return NewProblem(TypeUnavailable, err.Error())
	case errors.As(err, &held):
		p := NewProblem(TypeHeld, err.Error())
		p.TTL = Duration(held.TTL)
		p.Holder = held.Holder
		p.Position = held.Position
		return p
	case errors.Is(err, lease.ErrHeld):
		return NewProblem(TypeHeld, err.Error())
	case errors.Is(err, lease.ErrNotHeld):
		return NewProblem(TypeNotHeld, err.Error())
	case errors.Is(err, lease.ErrLost), errors.Is(err, idempotency.ErrClaimLost),
		errors.Is(err, ratelimit.ErrPermitLost):
		return NewProblem(TypeLost, err.Error())
	case errors.As(err, &stale):
		p := NewProblem(TypeStale, err.Error())
		p.Fence, p.Current = stale.Fence, stale.Current
		return p
	case errors.Is(err, fence.ErrStale):
		return NewProblem(TypeStale, err.Error())
	case errors.Is(err, idempotency.ErrMismatch):
		return NewProblem(TypeMismatch, err.Error())
	case errors.As(err, &inpr):
		p := NewProblem(TypeInProgress, err.Error())
		p.TTL = Duration(inpr.RetryAfter)
		return p
	case errors.Is(err, session.ErrConflict):
		return NewProblem(TypeConflict, err.Error())
	case errors.Is(err, session.ErrNotFound):
		return NewProblem(TypeNotFound, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return NewProblem(TypeUnavailable, err.Error())
	}
	return NewProblem(TypeInternal, "internal error")
}
