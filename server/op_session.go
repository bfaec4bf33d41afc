package server

import (
	"context"
	"errors"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tenurekit/tenure/internal/serveapi"
	"github.com/tenurekit/tenure/session"
	sessiondriver "github.com/tenurekit/tenure/session/driver"
)

// sessionRef is how a request names a session: by its store ID or by
// its token.
var sessionRef = [][]string{{"id", "token"}}

// exampleSessionID is a store ID for the examples: the shard of a
// user and the SHA-256 of a token, in hex.
const exampleSessionID = "5d362d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"

// listSessionsQuery is the query of listSessions.
type listSessionsQuery struct {
	UserID string `query:"user_id" doc:"the user"`
}

// sessionOps are the operations on sessions: session.Store's calls, and
// session.Manager's Create for a token the server makes.
var sessionOps = []operation{
	&op[serveapi.SessionCreate, serveapi.SessionRecord]{Method: "POST", Path: "/v1/sessions", ID: "createSession",
		Status: 201, Needs: sessionView, Scope: "user_id", Problems: []string{"conflict"}, Handle: createSession,
		Doc: "Create a session: under a given id (data opaque), or with a token the server makes from values (returned once).",
		Example: serveapi.SessionCreate{UserID: "alice", Values: map[string]string{"cart": "3"},
			Idle: serveapi.Duration(30 * time.Minute), Absolute: serveapi.Duration(8 * time.Hour)}},
	&op[serveapi.SessionRef, serveapi.SessionRecord]{Method: "POST", Path: "/v1/sessions/load", ID: "loadSession",
		Needs: sessionView, OneOf: sessionRef, Problems: []string{"not_found"},
		Doc:     "Load a live session by id or token, refreshing its idle deadline when idle is given.",
		Example: serveapi.SessionRef{Token: "BwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyAhIiMkJSYnKA", Idle: serveapi.Duration(30 * time.Minute)},
		Handle: func(ctx context.Context, r *request, in serveapi.SessionRef) (serveapi.SessionRecord, error) {
			return onSession(ctx, r, in, func(id session.ID) (session.Record, error) { return r.s.st.Sessions.Load(ctx, id, in.Idle.D()) })
		}},
	&op[serveapi.SessionRef, serveapi.SessionTouched]{Method: "POST", Path: "/v1/sessions/touch", ID: "touchSession",
		Needs: sessionView, Required: []string{"version", "idle"}, OneOf: sessionRef, Problems: []string{"not_found", "conflict"},
		Doc:     "Refresh the idle deadline of a session at version.",
		Example: serveapi.SessionRef{ID: exampleSessionID, Version: 1, Idle: serveapi.Duration(30 * time.Minute)},
		Handle: func(ctx context.Context, r *request, in serveapi.SessionRef) (serveapi.SessionTouched, error) {
			id, err := r.sessionID(ctx, in)
			if err != nil {
				return serveapi.SessionTouched{}, err
			}
			t, err := r.s.st.Sessions.Touch(ctx, id, in.Version, in.Idle.D())
			return serveapi.SessionTouched{IdleUntil: t}, err
		}},
	&op[serveapi.SessionRef, serveapi.SessionRecord]{Method: "POST", Path: "/v1/sessions/save", ID: "saveSession",
		Needs: sessionView, Required: []string{"version", "idle"}, OneOf: sessionRef, Problems: []string{"not_found", "conflict"},
		Doc:     "Replace a session's data if its version is version (compare-and-set).",
		Example: serveapi.SessionRef{ID: exampleSessionID, Version: 1, Data: []byte(`{"cart":"4"}`), Idle: serveapi.Duration(30 * time.Minute)},
		Handle: func(ctx context.Context, r *request, in serveapi.SessionRef) (serveapi.SessionRecord, error) {
			return onSession(ctx, r, in, func(id session.ID) (session.Record, error) {
				return r.s.st.Sessions.Save(ctx, id, in.Version, in.Data, in.Idle.D())
			})
		}},
	&op[serveapi.SessionRef, serveapi.SessionRecord]{Method: "POST", Path: "/v1/sessions/rotate", ID: "rotateSession",
		Needs: sessionView, Required: []string{"version", "idle", "new_id"}, OneOf: sessionRef, Problems: []string{"not_found", "conflict"},
		Doc:     "Move a session at version to new_id (same user and absolute deadline).",
		Example: serveapi.SessionRef{ID: exampleSessionID, NewID: exampleSessionID[:4] + strings.Repeat("0a1b2c3d", 8), Version: 2, Idle: serveapi.Duration(30 * time.Minute)},
		Handle: func(ctx context.Context, r *request, in serveapi.SessionRef) (serveapi.SessionRecord, error) {
			return onSession(ctx, r, in, func(id session.ID) (session.Record, error) {
				return r.s.st.Sessions.Rotate(ctx, id, session.ID(in.NewID), in.Version, in.Data, in.Idle.D())
			})
		}},
	&op[serveapi.SessionRef, noBody]{Method: "POST", Path: "/v1/sessions/revoke", ID: "revokeSession",
		Needs: sessionView, OneOf: sessionRef, Problems: []string{"not_found"},
		Doc:     "End a session.",
		Example: serveapi.SessionRef{ID: exampleSessionID},
		Handle: func(ctx context.Context, r *request, in serveapi.SessionRef) (noBody, error) {
			id, err := r.sessionID(ctx, in)
			if err != nil {
				return noBody{}, err
			}
			return noBody{}, r.s.st.Sessions.Delete(ctx, id)
		}},
	&op[listSessionsQuery, serveapi.SessionList]{Method: "GET", Path: "/v1/sessions", ID: "listSessions",
		Needs: sessionView, Scope: "user_id", Handle: listSessions,
		Doc:     "A user's live sessions, oldest first.",
		Example: listSessionsQuery{UserID: "alice"}},
	&op[serveapi.UserRef, serveapi.Revoked]{Method: "POST", Path: "/v1/sessions/revoke-user", ID: "revokeUserSessions",
		Needs: sessionView, Scope: "user_id",
		Doc:     "End every session of a user in one atomic step.",
		Example: serveapi.UserRef{UserID: "alice"},
		Handle: func(ctx context.Context, r *request, in serveapi.UserRef) (serveapi.Revoked, error) {
			n, err := r.s.st.Sessions.DeleteUser(ctx, in.UserID)
			return serveapi.Revoked{Removed: n}, err
		}},
	&op[serveapi.SessionValueWrite, noBody]{Method: "POST", Path: "/v1/sessions/write", ID: "writeSessionValue",
		Needs: sessionValueView, OneOf: sessionRef, Problems: []string{"not_found", "conflict"}, Handle: writeSessionValue,
		Doc: "Set a value of the user of a session (by token or id) if the session is live (and at version, when given) when the write lands: " +
			"for a sensitive change (a balance, a role) that must not land once the user logged out, the session is checked at the write, in one atomic step.",
		Example: serveapi.SessionValueWrite{Token: "BwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyAhIiMkJSYnKA", Version: 3, Name: "role", Value: "owner"}},
	&op[sessionValueQuery, serveapi.SessionValue]{Method: "GET", Path: "/v1/sessions/value", ID: "readSessionValue",
		Needs: sessionValueView, Scope: "user_id", Handle: readSessionValue,
		Doc:     "A value of a user that writeSessionValue keeps (present false: never written).",
		Example: sessionValueQuery{UserID: "alice", Name: "role"}},
}

// sessionValueQuery is the query of readSessionValue.
type sessionValueQuery struct {
	UserID string `query:"user_id" doc:"the user"`
	Name   string `query:"name" doc:"the value's name"`
}

// writeSessionValue checks the input, finds the session's user (a load
// that refreshes nothing) and writes the value checked against the
// session. A token is turned into the session's ID at once and appears in
// no answer or log.
func writeSessionValue(ctx context.Context, r *request, in serveapi.SessionValueWrite) (noBody, error) {
	if in.Value != "" && in.ValueBase64 != nil {
		return noBody{}, invalidf("give value or value_base64, not both")
	}
	if in.Token == "" && in.ID == "" {
		return noBody{}, invalidf("give the token (or the id) of the session that makes the change")
	}
	v := in.ValueBase64
	if v == nil {
		v = []byte(in.Value)
	}
	if err := serveapi.ValidateSessionName(in.Name); err != nil {
		return noBody{}, err
	}
	if len(v) > serveapi.MaxSessionValueLen {
		return noBody{}, invalidf("the value is %d bytes, larger than %d", len(v), serveapi.MaxSessionValueLen)
	}
	id, err := refID(serveapi.SessionRef{ID: in.ID, Token: in.Token})
	if err != nil {
		return noBody{}, err
	}
	rec, err := r.s.st.Sessions.Load(ctx, id, 0)
	if err != nil {
		return noBody{}, err
	}
	if err := r.guard("user", rec.UserID); err != nil {
		return noBody{}, err
	}
	return noBody{}, r.s.st.SessionValues.SessionWrite(ctx, id, in.Version, rec.UserID, in.Name, v)
}

func readSessionValue(ctx context.Context, r *request, in sessionValueQuery) (serveapi.SessionValue, error) {
	if err := serveapi.ValidateSessionValue(in.UserID, in.Name, nil); err != nil {
		return serveapi.SessionValue{}, err
	}
	v, ok, err := r.s.st.SessionValues.SessionRead(ctx, in.UserID, in.Name)
	if err != nil {
		return serveapi.SessionValue{}, err
	}
	out := serveapi.SessionValue{UserID: in.UserID, Name: in.Name, Present: ok, ValueBase64: v}
	if out.ValueBase64 == nil {
		out.ValueBase64 = []byte{}
	}
	if utf8.Valid(v) {
		out.Value = string(v)
	}
	return out, nil
}

func sessionOut(rec session.Record) serveapi.SessionRecord {
	return serveapi.SessionRecord{ID: string(rec.ID), UserID: rec.UserID, Data: rec.Data, Version: rec.Version,
		Created: rec.Created, IdleUntil: rec.IdleUntil, AbsoluteUntil: rec.AbsoluteUntil}
}

func createSession(ctx context.Context, r *request, in serveapi.SessionCreate) (serveapi.SessionRecord, error) {
	st := r.s.st.Sessions
	if in.ID != "" {
		if in.Values != nil {
			return serveapi.SessionRecord{}, invalidf("values are for a session the server makes the token of; with id, give data")
		}
		rec, err := st.Create(ctx, session.Record{ID: session.ID(in.ID), UserID: in.UserID, Data: in.Data}, in.Idle.D(), in.Absolute.D())
		return sessionOut(rec), err
	}
	if in.Data != nil {
		return serveapi.SessionRecord{}, invalidf("data is for a session stored under a given id; without id, give values")
	}
	for _, d := range []time.Duration{in.Idle.D(), in.Absolute.D()} {
		if err := sessiondriver.ValidateTimeout(d); err != nil {
			return serveapi.SessionRecord{}, err
		}
	}
	// The server records the operation itself (apiTelemetry): the
	// Manager records nothing.
	m, err := session.New(st, &session.Options{IdleTimeout: in.Idle.D(), AbsoluteTimeout: in.Absolute.D(), Logger: r.s.log,
		MeterProvider: metricnoop.NewMeterProvider(), TracerProvider: tracenoop.NewTracerProvider()})
	if err != nil {
		return serveapi.SessionRecord{}, err
	}
	tok, _, err := m.Create(ctx, in.UserID, in.Values)
	if err != nil {
		return serveapi.SessionRecord{}, err
	}
	rec, err := st.Load(ctx, session.TokenID(tok), 0)
	if err != nil {
		return serveapi.SessionRecord{}, err
	}
	out := sessionOut(rec)
	out.Token = tok.Reveal()
	return out, nil
}

// sessionID resolves a reference to a session ID and checks, for a token
// limited to some namespaces, that the session's user lies in them (a
// read that refreshes nothing).
func (r *request) sessionID(ctx context.Context, ref serveapi.SessionRef) (session.ID, error) {
	id, err := refID(ref)
	if err != nil {
		return "", err
	}
	if !r.p.allows("") {
		rec, err := r.s.st.Sessions.Load(ctx, id, 0)
		switch {
		case errors.Is(err, session.ErrNotFound):
			// Nothing to protect; the operation answers not found.
		case err != nil:
			return "", err
		default:
			if err := r.guard("user", rec.UserID); err != nil {
				return "", err
			}
		}
	}
	return id, nil
}

// refID returns the session ID a reference names: its ID, or the ID of
// its token. An error never carries the token.
func refID(ref serveapi.SessionRef) (session.ID, error) {
	var id session.ID
	switch {
	case ref.ID != "" && ref.Token != "":
		return "", invalidf("give id or token, not both")
	case ref.Token != "":
		tok, err := session.ParseToken(ref.Token)
		if err != nil {
			return "", err
		}
		id = session.TokenID(tok)
	default:
		id = session.ID(ref.ID)
	}
	if err := id.Validate(); err != nil {
		return "", err
	}
	return id, nil
}

// onSession resolves the session ref names and answers with the record
// f returns for it.
func onSession(ctx context.Context, r *request, ref serveapi.SessionRef, f func(session.ID) (session.Record, error)) (serveapi.SessionRecord, error) {
	id, err := r.sessionID(ctx, ref)
	if err != nil {
		return serveapi.SessionRecord{}, err
	}
	rec, err := f(id)
	if err != nil {
		return serveapi.SessionRecord{}, err
	}
	return sessionOut(rec), nil
}

func listSessions(ctx context.Context, r *request, in listSessionsQuery) (serveapi.SessionList, error) {
	recs, err := r.s.st.Sessions.List(ctx, in.UserID)
	if err != nil {
		return serveapi.SessionList{}, err
	}
	out := serveapi.SessionList{Sessions: make([]serveapi.SessionRecord, 0, len(recs))}
	for _, rec := range recs {
		out.Sessions = append(out.Sessions, sessionOut(rec))
	}
	return out, nil
}
