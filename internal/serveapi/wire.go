package serveapi

import (
	"encoding/json"
	"time"
)

// The struct tags of these types describe the API in its OpenAPI
// document, which the server builds from them: json names a field, doc
// describes it, and a field without omitempty or omitzero is one the
// server requires in a request and always writes in a response.

// AcquireLease is the body of acquireLease.
type AcquireLease struct {
	Key string `json:"key" doc:"lease key (1 to 512 bytes of UTF-8)"`
	// Token is the holder's secret token; empty asks the server to make one
	// (returned in the response, to be kept by the client).
	Token string   `json:"token,omitempty" doc:"the holder's secret token (visible ASCII, up to 128 bytes); left out, the server makes one"`
	TTL   Duration `json:"ttl" doc:"lease time"`
	// Wait is how long to wait for a held key (long poll); 0 answers at once.
	Wait Duration `json:"wait,omitempty" doc:"how long to wait for a held key, up to the server's max_wait (default 0: answer at once)"`
	// Holder describes the holder for operators (lease/driver.ValidateHolder);
	// never a secret.
	Holder string `json:"holder,omitempty" doc:"a description of the holder for operators (node, purpose; at most 128 bytes; never a secret)"`
	// Stay keeps a place in the key's queue of waiters: a refused caller
	// waits behind those queued before it, keeps its place with each
	// attempt under the same token made within stay, and is served in
	// arrival order (lease/driver.Queuer). 0: a plain acquire.
	Stay Duration `json:"stay,omitempty" doc:"keep a place in the key's queue of waiters for this long when refused (attempts with the same token within it keep the place; served in arrival order); default 0: no place"`
}

// LeaseGrant is the answer to acquireLease and renewLease.
type LeaseGrant struct {
	Key   string   `json:"key" doc:"the lease key"`
	Token string   `json:"token,omitempty" doc:"acquireLease: the holder's token; keep it secret"`
	Fence uint64   `json:"fence" doc:"fencing token: strictly greater than every fence granted for the key before"`
	TTL   Duration `json:"ttl" doc:"time granted"`
}

// LeaseToken is the body of renewLease (with TTL) and releaseLease.
type LeaseToken struct {
	Key   string   `json:"key" doc:"the lease key"`
	Token string   `json:"token" doc:"the holder's token"`
	TTL   Duration `json:"ttl,omitempty" doc:"renewLease: the new lease time"`
}

// LeaseInfo is the state of a key.
type LeaseInfo struct {
	Key   string   `json:"key" doc:"the lease key"`
	Held  bool     `json:"held" doc:"a lease is in force"`
	Fence uint64   `json:"fence" doc:"the current or last fence (0: never granted)"`
	TTL   Duration `json:"ttl,omitempty" doc:"the remaining time, when held"`
	// Holder is the holder's description, when it gave one.
	Holder string `json:"holder,omitempty" doc:"the holder's description, when it gave one"`
}

// LeaseList is the answer to listLeases.
type LeaseList struct {
	Leases []LeaseInfo `json:"leases" doc:"the keys in key order"`
	// Next is the key to pass as after for the next page ("" at the end).
	Next string `json:"next,omitempty" doc:"the after of the next page; absent at the end"`
}

// FencedWrite is the body of fencedWrite. Value is text; ValueBase64 is
// the same for binary values (one of them).
type FencedWrite struct {
	Name        string `json:"name" doc:"the value's name"`
	Fence       uint64 `json:"fence" doc:"the writer's lease fence"`
	Value       string `json:"value,omitempty" doc:"the value as text"`
	ValueBase64 []byte `json:"value_base64,omitempty" doc:"the value as bytes (instead of value)"`
}

// FencedHolderWrite is the body of fencedHolderWrite: the writer's lease
// (key, token and fence as acquireLease answered them) and the value.
// Value is text; ValueBase64 is the same for binary values (one of them).
type FencedHolderWrite struct {
	Name        string `json:"name" doc:"the value's name"`
	Key         string `json:"key" doc:"the writer's lease key"`
	Token       string `json:"token" doc:"the writer's lease token"`
	Fence       uint64 `json:"fence" doc:"the writer's lease fence"`
	Value       string `json:"value,omitempty" doc:"the value as text"`
	ValueBase64 []byte `json:"value_base64,omitempty" doc:"the value as bytes (instead of value)"`
}

// FencedValue is the answer to fencedRead.
type FencedValue struct {
	Name string `json:"name" doc:"the value's name"`
	// Fence is the fence that wrote the value (0: never written).
	Fence       uint64 `json:"fence" doc:"the fence that wrote it (0: never written)"`
	Value       string `json:"value" doc:"the value when it is UTF-8 text (else empty)"`
	ValueBase64 []byte `json:"value_base64" doc:"the value"`
}

// IdemBegin is the body of beginIdempotency.
type IdemBegin struct {
	Scope       string       `json:"scope" doc:"principal and operation"`
	Key         string       `json:"key" doc:"the client's key (1 to 255 bytes of printable ASCII)"`
	Fingerprint string       `json:"fingerprint,omitempty" doc:"digest of the request's input (visible ASCII; default: computed from request, else empty)"`
	Request     *IdemRequest `json:"request,omitempty" doc:"the HTTP request the key guards: the server computes the fingerprint the Go middleware uses (not with fingerprint)"`
	Token       string       `json:"token,omitempty" doc:"this attempt's claim token (default: the server makes one and answers it)"`
	ClaimTTL    Duration     `json:"claim_ttl,omitempty" doc:"claim time (default 30s)"`
	Retention   Duration     `json:"retention,omitempty" doc:"how long the record is kept (default 24h)"`
	Takeover    bool         `json:"takeover,omitempty" doc:"take over an abandoned claim"`
}

// IdemRequest is an HTTP request whose canonical fingerprint the server
// computes: idempotency.Fingerprint(method, uri, content_type, body), the
// one the Go middleware records.
type IdemRequest struct {
	Method      string `json:"method" doc:"the request's method (POST)"`
	URI         string `json:"uri" doc:"the request URI: path and query, as sent (/charges?currency=eur)"`
	ContentType string `json:"content_type,omitempty" doc:"the request's Content-Type header"`
	Body        []byte `json:"body,omitempty" doc:"the request's body (base64)"`
}

// IdemOutcome is a recorded result.
type IdemOutcome struct {
	Value   []byte `json:"value,omitempty" doc:"the result"`
	Failed  bool   `json:"failed,omitempty" doc:"the result is a final error"`
	Message string `json:"message,omitempty" doc:"the final error's text"`
}

// IdemBegun is the answer to beginIdempotency.
type IdemBegun struct {
	// State is claimed, completed, in-progress, abandoned or mismatch.
	State   string       `json:"state" doc:"how the record answered"`
	Fence   uint64       `json:"fence,omitempty" doc:"claimed: the claim's fence; abandoned: the abandoned claim's"`
	TTL     Duration     `json:"ttl,omitempty" doc:"claimed: the claim time; in-progress: the holder's remaining time"`
	Outcome *IdemOutcome `json:"outcome,omitempty" doc:"completed: the recorded result"`
	// Token is the claim's token when the server made it (begin without
	// a token).
	Token string `json:"token,omitempty" doc:"claimed: the claim's token, when the server made it"`
	// Fingerprint is the one the record was claimed with, when the server
	// computed it.
	Fingerprint string `json:"fingerprint,omitempty" doc:"the fingerprint the server computed from request"`
}

// IdemClaim is the body of renewIdempotency, completeIdempotency and
// releaseIdempotency.
type IdemClaim struct {
	Scope     string       `json:"scope" doc:"the record's scope"`
	Key       string       `json:"key" doc:"the client's key"`
	Token     string       `json:"token" doc:"the claim's token"`
	Fence     uint64       `json:"fence,omitempty" doc:"renew, complete: the claim's fence"`
	TTL       Duration     `json:"ttl,omitempty" doc:"renew: the claim time from now"`
	Outcome   *IdemOutcome `json:"outcome,omitempty" doc:"complete: the result to record"`
	Retention Duration     `json:"retention,omitempty" doc:"complete: how long the record is kept from now"`
}

// IdemRecord is the answer to inspectIdempotency.
type IdemRecord struct {
	Scope       string       `json:"scope" doc:"the record's scope"`
	Key         string       `json:"key" doc:"the client's key"`
	Exists      bool         `json:"exists" doc:"the store keeps a record"`
	Completed   bool         `json:"completed" doc:"the record holds a result"`
	Fingerprint string       `json:"fingerprint,omitempty" doc:"the claim's or result's fingerprint"`
	Fence       uint64       `json:"fence,omitempty" doc:"the last claim's fence"`
	ClaimTTL    Duration     `json:"claim_ttl,omitempty" doc:"the live claim's remaining time"`
	Expires     Duration     `json:"expires,omitempty" doc:"the remaining retention"`
	Outcome     *IdemOutcome `json:"outcome,omitempty" doc:"the recorded result, when completed"`
}

// StateKey names limiter state (driver.StateKey).
type StateKey struct {
	Group string `json:"group,omitempty" doc:"the limit group, if any"`
	Name  string `json:"name" doc:"the limit name"`
	Kind  string `json:"kind" doc:"g GCRA, f fixed window, l sliding log, w sliding window, p permits"`
	Key   string `json:"key" doc:"the caller's key"`
}

// Limit is a quota (ratelimit.Limit).
type Limit struct {
	Name   string   `json:"name,omitempty" doc:"limit name (letters, digits, . _ -); default made from rate and period"`
	Rate   int      `json:"rate" doc:"units per period"`
	Period Duration `json:"period" doc:"the period"`
	Burst  int      `json:"burst,omitempty" doc:"GCRA bucket size (default rate)"`
}

// RateRequest is one limit to judge. Either State (the exact state key a
// Go limiter computed) or Key (the caller's key; the server derives the
// state key of a single limiter) is set.
type RateRequest struct {
	Key       string    `json:"key,omitempty" doc:"the caller's key (the server derives the state key)"`
	State     *StateKey `json:"state,omitempty" doc:"the exact state key a Go limiter computed"`
	Algorithm string    `json:"algorithm,omitempty" doc:"the algorithm"`
	Limit     *Limit    `json:"limit,omitempty" doc:"the limit (resetRate with state: not needed)"`
	N         *int      `json:"n,omitempty" doc:"cost (default 1)"`
}

// TheLimit returns r's limit, the zero Limit when it has none.
func (r RateRequest) TheLimit() Limit {
	if r.Limit == nil {
		return Limit{}
	}
	return *r.Limit
}

// RateAllow is the body of allowRate.
type RateAllow struct {
	Requests []RateRequest `json:"requests" doc:"the limits to judge together"`
	// Peek judges without consuming anything.
	Peek bool `json:"peek,omitempty" doc:"judge without consuming anything"`
}

// RateDecision is one decision.
type RateDecision struct {
	Allowed    bool      `json:"allowed" doc:"the units were admitted (peek: would be)"`
	Remaining  int       `json:"remaining" doc:"units the limit would still admit now"`
	RetryAfter Duration  `json:"retry_after,omitempty" doc:"denied: until the same request would pass"`
	ResetAfter Duration  `json:"reset_after,omitempty" doc:"until the limit is fully available"`
	Limit      Limit     `json:"limit" doc:"the limit as normalized"`
	Algorithm  string    `json:"algorithm" doc:"the algorithm"`
	At         time.Time `json:"at" doc:"the store's clock"`
	State      StateKey  `json:"state" doc:"the state key judged"`
}

// RateDecisions is the answer to allowRate.
type RateDecisions struct {
	// Allowed is true when every request was allowed.
	Allowed   bool           `json:"allowed" doc:"every request was allowed"`
	Decisions []RateDecision `json:"decisions" doc:"one per request, in order"`
}

// RateReset is the body of resetRate.
type RateReset struct {
	Requests []RateRequest `json:"requests" doc:"the limits to forget"`
}

// Permit is the body of acquirePermit, renewPermit and releasePermit.
// Either State or Key and Name are set.
type Permit struct {
	State *StateKey `json:"state,omitempty" doc:"the exact state key"`
	Key   string    `json:"key,omitempty" doc:"the caller's key (with name)"`
	Name  string    `json:"name,omitempty" doc:"the limit name (with key)"`
	// ID is the permit's id; empty on acquirePermit asks the server to
	// make one.
	ID      string   `json:"id,omitempty" doc:"the permit's id (acquirePermit: left out, the server makes one)"`
	Permits int      `json:"permits,omitempty" doc:"acquirePermit: the permits on the key"`
	TTL     Duration `json:"ttl,omitempty" doc:"acquirePermit, renewPermit: the permit time"`
}

// PermitGrant is the answer to acquirePermit and renewPermit.
type PermitGrant struct {
	ID         string    `json:"id" doc:"the permit's id"`
	Acquired   bool      `json:"acquired" doc:"the permit is held"`
	Fence      uint64    `json:"fence,omitempty" doc:"the permit's fence"`
	InUse      int       `json:"in_use" doc:"permits held on the key"`
	RetryAfter Duration  `json:"retry_after,omitempty" doc:"not acquired: until a permit may be free"`
	TTL        Duration  `json:"ttl,omitempty" doc:"the permit time"`
	At         time.Time `json:"at" doc:"the store's clock"`
}

// SessionCreate is the body of createSession. With ID set it stores the
// record under ID (a client that made the token itself); without, the
// server makes a token (returned once) from Values.
type SessionCreate struct {
	ID       string            `json:"id,omitempty" doc:"store ID (the SHA-256 of a token the client made, after its user's shard); left out, the server makes the token"`
	UserID   string            `json:"user_id" doc:"the user"`
	Data     []byte            `json:"data,omitempty" doc:"opaque data (with id)"`
	Values   map[string]string `json:"values,omitempty" doc:"the session's values (without id)"`
	Idle     Duration          `json:"idle" doc:"idle timeout"`
	Absolute Duration          `json:"absolute" doc:"absolute timeout"`
}

// SessionRef names a session by its ID or by its token (one of them) and
// carries the arguments of the operation.
type SessionRef struct {
	ID      string   `json:"id,omitempty" doc:"the store ID"`
	Token   string   `json:"token,omitempty" doc:"or the session token"`
	Version uint64   `json:"version,omitempty" doc:"the expected version"`
	Data    []byte   `json:"data,omitempty" doc:"saveSession, rotateSession: the new data"`
	Idle    Duration `json:"idle,omitempty" doc:"the idle timeout to refresh with (loadSession: left out, no refresh)"`
	// NewID is the ID the record moves to (rotateSession).
	NewID string `json:"new_id,omitempty" doc:"rotateSession: the new store ID"`
}

// SessionValueWrite is the body of writeSessionValue: a value of the
// user of the session Token (or ID) names, written only if the session is
// live (and, with Version, still at that version) when the write lands.
// Value is text; ValueBase64 is the same for binary values (one of them).
type SessionValueWrite struct {
	Token       string `json:"token,omitempty" doc:"the session token of the request that makes the change"`
	ID          string `json:"id,omitempty" doc:"or the session's store ID"`
	Version     uint64 `json:"version,omitempty" doc:"the session version the request loaded (left out or 0: any version)"`
	Name        string `json:"name" doc:"the value's name (up to 255 bytes of UTF-8 without control characters)"`
	Value       string `json:"value,omitempty" doc:"the value as text"`
	ValueBase64 []byte `json:"value_base64,omitempty" doc:"the value as bytes (instead of value; up to 1 MiB)"`
}

// SessionValue is the answer to readSessionValue.
type SessionValue struct {
	UserID      string `json:"user_id" doc:"the user"`
	Name        string `json:"name" doc:"the value's name"`
	Present     bool   `json:"present" doc:"whether the value was ever written"`
	Value       string `json:"value" doc:"the value when it is UTF-8 text (else empty)"`
	ValueBase64 []byte `json:"value_base64" doc:"the value"`
}

// SessionRecord is a session as the store keeps it.
type SessionRecord struct {
	ID            string    `json:"id" doc:"the store ID"`
	UserID        string    `json:"user_id" doc:"the user"`
	Data          []byte    `json:"data,omitempty" doc:"the session's data"`
	Version       uint64    `json:"version" doc:"the version, 1 at creation and one more with every save"`
	Created       time.Time `json:"created"`
	IdleUntil     time.Time `json:"idle_until" doc:"the idle deadline"`
	AbsoluteUntil time.Time `json:"absolute_until" doc:"the absolute deadline"`
	// Token is set only by createSession when the server made the token.
	Token string `json:"token,omitempty" doc:"createSession without id: the new token, given once"`
}

// SessionTouched is the answer to touchSession.
type SessionTouched struct {
	IdleUntil time.Time `json:"idle_until" doc:"the new idle deadline"`
}

// SessionList is the answer to listSessions.
type SessionList struct {
	Sessions []SessionRecord `json:"sessions" doc:"the live sessions, oldest first"`
}

// UserRef is the body of revokeUserSessions.
type UserRef struct {
	UserID string `json:"user_id" doc:"the user"`
}

// Revoked is the answer to revokeUserSessions.
type Revoked struct {
	Removed int `json:"removed" doc:"live sessions removed"`
}

// Batch is the body of batch: calls of other operations, served together
// and answered in order.
type Batch struct {
	Calls []BatchCall `json:"calls" doc:"the calls, at most max_batch_calls; each is served as its operation's own request would be"`
}

// BatchCall is one call of a batch.
type BatchCall struct {
	Operation string          `json:"operation" doc:"the operation ID of a POST operation that answers at once (an acquire without wait, a rate decision, ...)"`
	Body      json.RawMessage `json:"body" doc:"the operation's request body"`
}

// BatchResults is the answer to batch.
type BatchResults struct {
	Results []BatchResult `json:"results" doc:"one per call, in order"`
}

// BatchResult is the answer to one call of a batch: the operation's status
// with its body, or its problem.
type BatchResult struct {
	Status  int             `json:"status" doc:"the HTTP status the call's own request would have had"`
	Body    json.RawMessage `json:"body,omitempty" doc:"a 200: the operation's answer"`
	Problem *Problem        `json:"problem,omitempty" doc:"a 4xx or 5xx: the call's problem"`
}
