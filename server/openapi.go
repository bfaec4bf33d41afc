package server

import (
	"encoding/json"
	"sync"

	"github.com/tenurekit/tenure/internal/serveapi"
)

// opDoc describes one operation for the OpenAPI document.
type opDoc struct {
	summary string
	// request is the body schema (POST) or nil; query lists GET
	// parameters (name: description), required ones first by name in req.
	request string
	query   [][2]string
	req     []string
	// status and response are the success status and its schema ("" for
	// no body).
	status   string
	response string
	// problems are the problem types the operation may answer with
	// besides unauthorized, forbidden, rate_limited, invalid and
	// unavailable.
	problems []string
}

var opDocs = map[string]opDoc{
	"acquireLease": {summary: "Acquire a lease (optionally waiting for a held key: a long poll bounded by max_wait). Without token the server makes one; the response carries it, and it is the client's secret.",
		request: "AcquireLease", status: "200", response: "LeaseGrant", problems: []string{"held"}},
	"renewLease":   {summary: "Extend a lease held by token to ttl from now (store clock).", request: "LeaseToken", status: "200", response: "LeaseGrant", problems: []string{"not_held"}},
	"releaseLease": {summary: "End a lease held by token.", request: "LeaseToken", status: "204", problems: []string{"not_held"}},
	"inspectLease": {summary: "The state of a key, unchanged.", query: [][2]string{{"key", "the lease key"}}, req: []string{"key"}, status: "200", response: "LeaseInfo"},
	"listLeases": {summary: "The keys the store remembers under a prefix, in key order (stores that can list: memory, SQLite).",
		query:  [][2]string{{"prefix", "key prefix (default all the token may see)"}, {"after", "start after this key (the previous page's next)"}, {"limit", "1 to 1000, default 100"}},
		status: "200", response: "LeaseList", problems: []string{"not_supported"}},
	"fencedWrite": {summary: "Set a server-kept value if fence is greater than every fence admitted for name before (the guard for resources without one).",
		request: "FencedWrite", status: "204", problems: []string{"stale", "not_supported"}},
	"fencedRead": {summary: "A server-kept value and the fence that wrote it (fence 0: never written).", query: [][2]string{{"name", "the value's name"}}, req: []string{"name"},
		status: "200", response: "FencedValue", problems: []string{"not_supported"}},
	"beginIdempotency": {summary: "Claim an idempotency record for token, or answer from the live record (claimed, completed, in-progress, abandoned, mismatch).",
		request: "IdemBegin", status: "200", response: "IdemBegun"},
	"renewIdempotency":    {summary: "Extend a claim held by token and fence.", request: "IdemClaim", status: "204", problems: []string{"lost"}},
	"completeIdempotency": {summary: "Record the outcome of the claim held by token and fence.", request: "IdemClaim", status: "204", problems: []string{"lost"}},
	"releaseIdempotency":  {summary: "Drop the claim held by token (the next begin claims anew).", request: "IdemClaim", status: "204", problems: []string{"lost"}},
	"inspectIdempotency": {summary: "An idempotency record, unchanged.", query: [][2]string{{"scope", "the record's scope"}, {"key", "the client's idempotency key"}}, req: []string{"scope", "key"},
		status: "200", response: "IdemRecord"},
	"allowRate": {summary: "Judge up to 16 limits in one atomic step on the store's clock: all are consumed if all allow, none otherwise (peek: nothing is consumed).",
		request: "RateAllow", status: "200", response: "RateDecisions"},
	"resetRate":     {summary: "Forget the state of limits: they are fully available again.", request: "RateReset", status: "204"},
	"acquirePermit": {summary: "Take one of permits concurrency permits on a key for ttl (acquired false when all are held).", request: "Permit", status: "200", response: "PermitGrant"},
	"renewPermit":   {summary: "Extend a held permit to ttl from now.", request: "Permit", status: "200", response: "PermitGrant", problems: []string{"lost"}},
	"releasePermit": {summary: "Free a held permit.", request: "Permit", status: "204", problems: []string{"lost"}},
	"createSession": {summary: "Create a session: under a given id (data opaque), or with a token the server makes from values (returned once).",
		request: "SessionCreate", status: "201", response: "SessionRecord", problems: []string{"conflict"}},
	"loadSession":  {summary: "Load a live session by id or token, refreshing its idle deadline when idle is given.", request: "SessionRef", status: "200", response: "SessionRecord", problems: []string{"not_found"}},
	"touchSession": {summary: "Refresh the idle deadline of a session at version.", request: "SessionRef", status: "200", response: "SessionTouched", problems: []string{"not_found", "conflict"}},
	"saveSession":  {summary: "Replace a session's data if its version is version (compare-and-set).", request: "SessionRef", status: "200", response: "SessionRecord", problems: []string{"not_found", "conflict"}},
	"rotateSession": {summary: "Move a session at version to new_id (same user and absolute deadline).", request: "SessionRef", status: "200", response: "SessionRecord",
		problems: []string{"not_found", "conflict"}},
	"revokeSession":      {summary: "End a session.", request: "SessionRef", status: "204", problems: []string{"not_found"}},
	"listSessions":       {summary: "A user's live sessions, oldest first.", query: [][2]string{{"user_id", "the user"}}, req: []string{"user_id"}, status: "200", response: "SessionList"},
	"revokeUserSessions": {summary: "End every session of a user in one atomic step.", request: "UserRef", status: "200", response: "Revoked"},
	"slotHistory": {summary: "The audit records of a job's slots with from <= slot time < to, oldest first.",
		query: [][2]string{{"job", "the job name"}, {"from", "RFC 3339, default 24h ago"}, {"to", "RFC 3339, default in a minute"}, {"limit", "1 to 1000, default 100"}}, req: []string{"job"},
		status: "200", response: "SlotList"},
}

func obj(required []string, props map[string]any) map[string]any {
	m := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		m["required"] = required
	}
	return m
}

func str(desc string) map[string]any { return map[string]any{"type": "string", "description": desc} }
func integer(desc string) map[string]any {
	return map[string]any{"type": "integer", "minimum": 0, "description": desc}
}
func boolean(desc string) map[string]any {
	return map[string]any{"type": "boolean", "description": desc}
}
func ref(name string) map[string]any { return map[string]any{"$ref": "#/components/schemas/" + name} }
func dur(desc string) map[string]any { return ref("Duration") }
func b64(desc string) map[string]any {
	return map[string]any{"type": "string", "contentEncoding": "base64", "description": desc}
}
func ts(desc string) map[string]any {
	return map[string]any{"type": "string", "format": "date-time", "description": desc}
}
func arr(items any) map[string]any { return map[string]any{"type": "array", "items": items} }

var schemas = map[string]any{
	"Duration": map[string]any{"type": "string", "description": "a Go duration string: \"250ms\", \"30s\", \"1m30s\"", "examples": []string{"30s"}},
	"Problem": map[string]any{"type": "object", "required": []string{"type", "title", "status"}, "properties": map[string]any{
		"type": str("problem type URI, one per tenure error"), "title": str("short summary"), "status": integer("HTTP status"),
		"detail": str("what happened"), "ttl": dur("held: the holder's remaining time; in_progress: the claim's"),
		"fence": integer("stale: the refused fence"), "current": integer("stale: the greatest admitted fence"),
		"holder": str("held: the holder's description, when it gave one"),
	}},
	"AcquireLease": obj([]string{"key", "ttl"}, map[string]any{"key": str("lease key (1 to 512 bytes of UTF-8)"),
		"token": str("the holder's secret token (visible ASCII); empty: the server makes one"), "ttl": dur("lease time"),
		"wait":   dur("how long to wait for a held key (0: answer at once)"),
		"holder": str("a description of the holder for operators (node, purpose; at most 128 bytes; never a secret)")}),
	"LeaseGrant": obj([]string{"key", "fence", "ttl"}, map[string]any{"key": str(""), "token": str("the holder's token (acquire only): keep it secret"),
		"fence": integer("fencing token: strictly greater than every fence granted for the key before"), "ttl": dur("time granted")}),
	"LeaseToken": obj([]string{"key", "token"}, map[string]any{"key": str(""), "token": str("the holder's token"), "ttl": dur("renew: new lease time")}),
	"LeaseInfo": obj([]string{"key", "held", "fence"}, map[string]any{"key": str(""), "held": boolean("a lease is in force"),
		"fence": integer("current or last fence"), "ttl": dur("remaining time when held"),
		"holder": str("the holder's description, when it gave one")}),
	"LeaseList": obj([]string{"leases"}, map[string]any{"leases": arr(ref("LeaseInfo")), "next": str("after value of the next page; absent at the end")}),
	"FencedWrite": obj([]string{"name", "fence"}, map[string]any{"name": str("value name"), "fence": integer("the writer's lease fence"),
		"value": str("the value as text"), "value_base64": b64("the value as bytes (instead of value)")}),
	"FencedValue": obj([]string{"name", "fence", "value", "value_base64"}, map[string]any{"name": str(""), "fence": integer("the fence that wrote it (0: never written)"),
		"value": str("the value when it is UTF-8 text"), "value_base64": b64("the value")}),
	"IdemBegin": obj([]string{"scope", "key", "fingerprint", "token", "claim_ttl", "retention"}, map[string]any{"scope": str("principal and operation"),
		"key": str("client key (1 to 255 printable ASCII)"), "fingerprint": str("digest of the request's input"), "token": str("this attempt's claim token"),
		"claim_ttl": dur("claim time"), "retention": dur("how long the record is kept"), "takeover": boolean("take over an abandoned claim")}),
	"IdemOutcome": obj(nil, map[string]any{"value": b64("the result"), "failed": boolean("a final error"), "message": str("the final error's text")}),
	"IdemBegun": obj([]string{"state"}, map[string]any{"state": map[string]any{"type": "string", "enum": []string{"claimed", "completed", "in-progress", "abandoned", "mismatch"}},
		"fence": integer("claimed: the claim's fence; abandoned: the abandoned claim's"), "ttl": dur("claimed: claim time; in-progress: the holder's remaining time"),
		"outcome": ref("IdemOutcome")}),
	"IdemClaim": obj([]string{"scope", "key", "token"}, map[string]any{"scope": str(""), "key": str(""), "token": str("the claim's token"),
		"fence": integer("the claim's fence (renew, complete)"), "ttl": dur("renew: claim time"), "outcome": ref("IdemOutcome"),
		"retention": dur("complete: retention from now")}),
	"IdemRecord": obj([]string{"scope", "key", "exists", "completed"}, map[string]any{"scope": str(""), "key": str(""), "exists": boolean(""),
		"completed": boolean(""), "fingerprint": str(""), "fence": integer(""), "claim_ttl": dur(""), "expires": dur("remaining retention"), "outcome": ref("IdemOutcome")}),
	"StateKey": obj([]string{"name", "kind", "key"}, map[string]any{"group": str(""), "name": str("limit name"),
		"kind": str("g GCRA, f fixed window, l sliding log, w sliding window, p permits"), "key": str("the caller's key")}),
	"Limit": obj([]string{"rate", "period"}, map[string]any{"name": str("limit name (letters, digits, . _ -); default from rate and period"),
		"rate": integer("units per period"), "period": dur("the period"), "burst": integer("GCRA bucket size (default rate)")}),
	"RateRequest": obj([]string{"limit"}, map[string]any{"key": str("the caller's key (or state)"), "state": ref("StateKey"),
		"algorithm": map[string]any{"type": "string", "enum": []string{"gcra", "fixed-window", "sliding-log", "sliding-window"}, "default": "gcra"},
		"limit":     ref("Limit"), "n": integer("cost, default 1")}),
	"RateAllow": obj([]string{"requests"}, map[string]any{"requests": arr(ref("RateRequest")), "peek": boolean("judge without consuming")}),
	"RateDecision": obj([]string{"allowed", "remaining", "limit", "algorithm", "at", "state"}, map[string]any{"allowed": boolean(""), "remaining": integer(""),
		"retry_after": dur("denied: until the same request would pass"), "reset_after": dur("until the limit is fully available"),
		"limit": ref("Limit"), "algorithm": str(""), "at": ts("the store's clock"), "state": ref("StateKey")}),
	"RateDecisions": obj([]string{"allowed", "decisions"}, map[string]any{"allowed": boolean("every request allowed"), "decisions": arr(ref("RateDecision"))}),
	"RateReset":     obj([]string{"requests"}, map[string]any{"requests": arr(ref("RateRequest"))}),
	"Permit": obj(nil, map[string]any{"state": ref("StateKey"), "key": str("the caller's key (with name)"), "name": str("limit name"),
		"id": str("the permit's id (acquire: empty makes one)"), "permits": integer("acquire: permits on the key"), "ttl": dur("permit time")}),
	"PermitGrant": obj([]string{"id", "acquired", "in_use", "at"}, map[string]any{"id": str(""), "acquired": boolean(""), "fence": integer(""),
		"in_use": integer(""), "retry_after": dur(""), "ttl": dur(""), "at": ts("the store's clock")}),
	"SessionCreate": obj([]string{"user_id", "idle", "absolute"}, map[string]any{"id": str("store ID (SHA-256 of a token the client made)"), "user_id": str(""),
		"data": b64("opaque data (with id)"), "values": map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}, "description": "values (without id)"},
		"idle": dur("idle timeout"), "absolute": dur("absolute timeout")}),
	"SessionRef": obj(nil, map[string]any{"id": str("store ID"), "token": str("or the session token"), "version": integer("expected version"),
		"data": b64("save, rotate: new data"), "idle": dur("idle timeout to refresh with"), "new_id": str("rotate: the new store ID")}),
	"SessionRecord": obj([]string{"id", "user_id", "version", "created", "idle_until", "absolute_until"}, map[string]any{"id": str(""), "user_id": str(""),
		"data": b64(""), "version": integer(""), "created": ts(""), "idle_until": ts(""), "absolute_until": ts(""),
		"token": str("createSession without id: the new token, given once")}),
	"SessionTouched": obj([]string{"idle_until"}, map[string]any{"idle_until": ts("")}),
	"SessionList":    obj([]string{"sessions"}, map[string]any{"sessions": arr(ref("SessionRecord"))}),
	"UserRef":        obj([]string{"user_id"}, map[string]any{"user_id": str("")}),
	"Revoked":        obj([]string{"removed"}, map[string]any{"removed": integer("live sessions removed")}),
	"SlotRecord": map[string]any{"type": "object", "required": []string{"job", "slot_id", "state", "attempts"}, "properties": map[string]any{
		"job": str(""), "slot_id": str(""), "slot_time": ts(""), "state": str("running, done, failed, skipped, missed"), "node": str(""),
		"attempts": integer(""), "fence": integer(""), "started": ts(""), "finished": ts(""), "error": str(""), "retry_at": ts("")}},
	"SlotList": obj([]string{"slots"}, map[string]any{"slots": arr(ref("SlotRecord"))}),
}

// problemStatus returns the status and short name of a problem type.
func problemStatus(name string) (string, string) {
	for _, k := range serveapi.Kinds {
		if k.Type == "urn:tenure:problem:"+name {
			return itoa(k.Status), k.Type
		}
	}
	panic("server: unknown problem " + name)
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

var (
	openapiOnce sync.Once
	openapiDoc  []byte
)

// OpenAPI returns the API's OpenAPI 3.1 document (served at
// /v1/openapi.json).
func OpenAPI() []byte {
	openapiOnce.Do(func() { openapiDoc = buildOpenAPI() })
	return openapiDoc
}

func problemResponse(desc string) map[string]any {
	return map[string]any{"description": desc, "content": map[string]any{serveapi.ProblemContentType: map[string]any{"schema": ref("Problem")}}}
}

func buildOpenAPI() []byte {
	paths := map[string]map[string]any{}
	for _, rt := range routes {
		d, ok := opDocs[rt.OperationID]
		if !ok {
			panic("server: no OpenAPI description for " + rt.OperationID)
		}
		op := map[string]any{"operationId": rt.OperationID, "summary": d.summary, "security": []any{map[string]any{"bearer": []string{}}}}
		resp := map[string]any{}
		if d.response != "" {
			resp[d.status] = map[string]any{"description": "success", "content": map[string]any{"application/json": map[string]any{"schema": ref(d.response)}}}
		} else {
			resp[d.status] = map[string]any{"description": "success, no body"}
		}
		for _, p := range append([]string{"unauthorized", "forbidden", "rate_limited", "invalid", "unavailable"}, d.problems...) {
			st, typ := problemStatus(p)
			if r, ok := resp[st].(map[string]any); ok {
				r["description"] = r["description"].(string) + ", " + typ
				continue
			}
			resp[st] = problemResponse(typ)
		}
		if d.request != "" {
			resp["413"] = problemResponse("urn:tenure:problem:too_large")
			op["requestBody"] = map[string]any{"required": true, "content": map[string]any{"application/json": map[string]any{"schema": ref(d.request)}}}
		}
		op["responses"] = resp
		var params []any
		for _, q := range d.query {
			req := false
			for _, r := range d.req {
				req = req || r == q[0]
			}
			params = append(params, map[string]any{"name": q[0], "in": "query", "required": req, "description": q[1], "schema": map[string]any{"type": "string"}})
		}
		if params != nil {
			op["parameters"] = params
		}
		if paths[rt.Path] == nil {
			paths[rt.Path] = map[string]any{}
		}
		paths[rt.Path][lower(rt.Method)] = op
	}
	plain := func(id, summary, ct string) map[string]any {
		return map[string]any{"get": map[string]any{"operationId": id, "summary": summary, "security": []any{},
			"responses": map[string]any{"200": map[string]any{"description": "ok", "content": map[string]any{ct: map[string]any{"schema": map[string]any{"type": "string"}}}}}}}
	}
	paths["/healthz"] = plain("health", "The process is up.", "text/plain")
	paths["/readyz"] = plain("ready", "The store answers (503 when it does not).", "text/plain")
	paths["/readyz"]["get"].(map[string]any)["responses"].(map[string]any)["503"] = map[string]any{"description": "the store does not answer"}
	paths["/metrics"] = plain("metrics", "tenure's metrics in the Prometheus text format.", "text/plain")
	paths["/v1/openapi.json"] = plain("openapi", "This document.", "application/json")
	doc := map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{"title": "tenure serve", "version": "1",
			"description": "Leases with fencing tokens, fenced values, idempotency records, rate limits, sessions and slot history over HTTP. " +
				"Every operation calls the same library API a Go caller would; errors are application/problem+json with one type per tenure error."},
		"servers":    []any{map[string]any{"url": "/"}},
		"paths":      paths,
		"components": map[string]any{"schemas": schemas, "securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}}},
		"security":   []any{map[string]any{"bearer": []string{}}},
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		panic(err)
	}
	return b
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
