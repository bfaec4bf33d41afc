package serveapi

import (
	"time"
)

// AcquireLease is the body of acquireLease.
type AcquireLease struct {
	Key string `json:"key"`
	// Token is the holder's secret token; empty asks the server to make one
	// (returned in the response, to be kept by the client).
	Token string   `json:"token,omitempty"`
	TTL   Duration `json:"ttl"`
	// Wait is how long to wait for a held key (long poll); 0 answers at once.
	Wait Duration `json:"wait,omitempty"`
	// Holder describes the holder for operators (lease/driver.ValidateHolder);
	// never a secret.
	Holder string `json:"holder,omitempty"`
}

// LeaseGrant is the answer to acquireLease and renewLease.
type LeaseGrant struct {
	Key   string   `json:"key"`
	Token string   `json:"token,omitempty"`
	Fence uint64   `json:"fence"`
	TTL   Duration `json:"ttl"`
}

// LeaseToken is the body of renewLease (with TTL) and releaseLease.
type LeaseToken struct {
	Key   string   `json:"key"`
	Token string   `json:"token"`
	TTL   Duration `json:"ttl,omitempty"`
}

// LeaseInfo is the state of a key.
type LeaseInfo struct {
	Key   string   `json:"key"`
	Held  bool     `json:"held"`
	Fence uint64   `json:"fence"`
	TTL   Duration `json:"ttl,omitempty"`
	// Holder is the holder's description, when it gave one.
	Holder string `json:"holder,omitempty"`
}

// LeaseList is the answer to listLeases.
type LeaseList struct {
	Leases []LeaseInfo `json:"leases"`
	// Next is the key to pass as after for the next page ("" at the end).
	Next string `json:"next,omitempty"`
}

// FencedWrite is the body of fencedWrite. Value is text; ValueBase64 is
// the same for binary values (one of them).
type FencedWrite struct {
	Name        string `json:"name"`
	Fence       uint64 `json:"fence"`
	Value       string `json:"value,omitempty"`
	ValueBase64 []byte `json:"value_base64,omitempty"`
}

// FencedValue is the answer to fencedRead.
type FencedValue struct {
	Name string `json:"name"`
	// Fence is the fence that wrote the value (0: never written).
	Fence       uint64 `json:"fence"`
	Value       string `json:"value"`
	ValueBase64 []byte `json:"value_base64"`
}

// IdemBegin is the body of beginIdempotency.
type IdemBegin struct {
	Scope       string   `json:"scope"`
	Key         string   `json:"key"`
	Fingerprint string   `json:"fingerprint"`
	Token       string   `json:"token"`
	ClaimTTL    Duration `json:"claim_ttl"`
	Retention   Duration `json:"retention"`
	Takeover    bool     `json:"takeover,omitempty"`
}

// IdemOutcome is a recorded result.
type IdemOutcome struct {
	Value   []byte `json:"value,omitempty"`
	Failed  bool   `json:"failed,omitempty"`
	Message string `json:"message,omitempty"`
}

// IdemBegun is the answer to beginIdempotency.
type IdemBegun struct {
	// State is claimed, completed, in-progress, abandoned or mismatch.
	State   string       `json:"state"`
	Fence   uint64       `json:"fence,omitempty"`
	TTL     Duration     `json:"ttl,omitempty"`
	Outcome *IdemOutcome `json:"outcome,omitempty"`
}

// IdemClaim is the body of renewIdempotency, completeIdempotency and
// releaseIdempotency.
type IdemClaim struct {
	Scope     string       `json:"scope"`
	Key       string       `json:"key"`
	Token     string       `json:"token"`
	Fence     uint64       `json:"fence,omitempty"`
	TTL       Duration     `json:"ttl,omitempty"`
	Outcome   *IdemOutcome `json:"outcome,omitempty"`
	Retention Duration     `json:"retention,omitempty"`
}

// IdemRecord is the answer to inspectIdempotency.
type IdemRecord struct {
	Scope       string       `json:"scope"`
	Key         string       `json:"key"`
	Exists      bool         `json:"exists"`
	Completed   bool         `json:"completed"`
	Fingerprint string       `json:"fingerprint,omitempty"`
	Fence       uint64       `json:"fence,omitempty"`
	ClaimTTL    Duration     `json:"claim_ttl,omitempty"`
	Expires     Duration     `json:"expires,omitempty"`
	Outcome     *IdemOutcome `json:"outcome,omitempty"`
}

// StateKey names limiter state (driver.StateKey).
type StateKey struct {
	Group string `json:"group,omitempty"`
	Name  string `json:"name"`
	Kind  string `json:"kind"`
	Key   string `json:"key"`
}

// Limit is a quota (ratelimit.Limit).
type Limit struct {
	Name   string   `json:"name,omitempty"`
	Rate   int      `json:"rate"`
	Period Duration `json:"period"`
	Burst  int      `json:"burst,omitempty"`
}

// RateRequest is one limit to judge. Either State (the exact state key a
// Go limiter computed) or Key (the caller's key; the server derives the
// state key of a single limiter) is set.
type RateRequest struct {
	Key       string    `json:"key,omitempty"`
	State     *StateKey `json:"state,omitempty"`
	Algorithm string    `json:"algorithm,omitempty"`
	Limit     Limit     `json:"limit"`
	N         *int      `json:"n,omitempty"`
}

// RateAllow is the body of allowRate.
type RateAllow struct {
	Requests []RateRequest `json:"requests"`
	// Peek judges without consuming anything.
	Peek bool `json:"peek,omitempty"`
}

// RateDecision is one decision.
type RateDecision struct {
	Allowed    bool      `json:"allowed"`
	Remaining  int       `json:"remaining"`
	RetryAfter Duration  `json:"retry_after,omitempty"`
	ResetAfter Duration  `json:"reset_after,omitempty"`
	Limit      Limit     `json:"limit"`
	Algorithm  string    `json:"algorithm"`
	At         time.Time `json:"at"`
	State      StateKey  `json:"state"`
}

// RateDecisions is the answer to allowRate.
type RateDecisions struct {
	// Allowed is true when every request was allowed.
	Allowed   bool           `json:"allowed"`
	Decisions []RateDecision `json:"decisions"`
}

// RateReset is the body of resetRate.
type RateReset struct {
	Requests []RateRequest `json:"requests"`
}

// Permit is the body of acquirePermit, renewPermit and releasePermit.
// Either State or Key and Name are set.
type Permit struct {
	State *StateKey `json:"state,omitempty"`
	Key   string    `json:"key,omitempty"`
	Name  string    `json:"name,omitempty"`
	// ID is the permit's id; empty on acquirePermit asks the server to
	// make one.
	ID      string   `json:"id,omitempty"`
	Permits int      `json:"permits,omitempty"`
	TTL     Duration `json:"ttl,omitempty"`
}

// PermitGrant is the answer to acquirePermit and renewPermit.
type PermitGrant struct {
	ID         string    `json:"id"`
	Acquired   bool      `json:"acquired"`
	Fence      uint64    `json:"fence,omitempty"`
	InUse      int       `json:"in_use"`
	RetryAfter Duration  `json:"retry_after,omitempty"`
	TTL        Duration  `json:"ttl,omitempty"`
	At         time.Time `json:"at"`
}

// SessionCreate is the body of createSession. With ID set it stores the
// record under ID (a client that made the token itself); without, the
// server makes a token (returned once) from Values.
type SessionCreate struct {
	ID       string            `json:"id,omitempty"`
	UserID   string            `json:"user_id"`
	Data     []byte            `json:"data,omitempty"`
	Values   map[string]string `json:"values,omitempty"`
	Idle     Duration          `json:"idle"`
	Absolute Duration          `json:"absolute"`
}

// SessionRef names a session by its ID or by its token (one of them) and
// carries the arguments of the operation.
type SessionRef struct {
	ID      string   `json:"id,omitempty"`
	Token   string   `json:"token,omitempty"`
	Version uint64   `json:"version,omitempty"`
	Data    []byte   `json:"data,omitempty"`
	Idle    Duration `json:"idle,omitempty"`
	// NewID is the ID the record moves to (rotateSession).
	NewID string `json:"new_id,omitempty"`
}

// SessionRecord is a session as the store keeps it.
type SessionRecord struct {
	ID            string    `json:"id"`
	UserID        string    `json:"user_id"`
	Data          []byte    `json:"data,omitempty"`
	Version       uint64    `json:"version"`
	Created       time.Time `json:"created"`
	IdleUntil     time.Time `json:"idle_until"`
	AbsoluteUntil time.Time `json:"absolute_until"`
	// Token is set only by createSession when the server made the token.
	Token string `json:"token,omitempty"`
}

// SessionTouched is the answer to touchSession.
type SessionTouched struct {
	IdleUntil time.Time `json:"idle_until"`
}

// SessionList is the answer to listSessions.
type SessionList struct {
	Sessions []SessionRecord `json:"sessions"`
}

// UserRef is the body of revokeUserSessions.
type UserRef struct {
	UserID string `json:"user_id"`
}

// Revoked is the answer to revokeUserSessions.
type Revoked struct {
	Removed int `json:"removed"`
}
