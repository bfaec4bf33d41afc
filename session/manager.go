package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/tenurekit/tenure/internal/jsonx"
	"github.com/tenurekit/tenure/session/driver"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of Options.
const (
	// DefaultIdleTimeout is Options.IdleTimeout when zero.
	DefaultIdleTimeout = 30 * time.Minute
	// DefaultAbsoluteTimeout is Options.AbsoluteTimeout when zero.
	DefaultAbsoluteTimeout = 8 * time.Hour
	// DefaultCookieName is CookieOptions.Name when empty. The __Host- prefix
	// makes browsers accept the cookie only with Secure, Path=/ and no
	// Domain, so a sibling subdomain cannot plant or overwrite it.
	DefaultCookieName = "__Host-session"
	// InsecureCookieName is CookieOptions.Name when empty and Insecure is
	// set (plain-HTTP development), where a __Host- cookie cannot work.
	InsecureCookieName = "session"
)

// Options configure a Manager. Nil means the defaults; each field documents
// its own.
type Options struct {
	// IdleTimeout ends a session that was not used for that long (store
	// clock). Each Load refreshes it, never past the absolute deadline.
	// Default 30 minutes (DefaultIdleTimeout).
	IdleTimeout time.Duration
	// AbsoluteTimeout ends a session that long after it was created, however
	// active it is. Rotation keeps it. It may be shorter than IdleTimeout.
	// Default 8 hours (DefaultAbsoluteTimeout).
	AbsoluteTimeout time.Duration
	// Cookie configures the HTTP middleware's cookie.
	Cookie CookieOptions
	// CrossOrigin rejects cross-origin unsafe requests in the middleware
	// before the session is touched. Default http.NewCrossOriginProtection()
	// (configure trusted origins on your own value).
	CrossOrigin *http.CrossOriginProtection
	// ErrorHandler writes the middleware's response when the session cannot
	// be loaded or saved. Default [DefaultErrorHandler].
	ErrorHandler func(w http.ResponseWriter, r *http.Request, err error)
	// Logger receives lifecycle events (create, rotate, revoke, conflicts,
	// store failures) with the session's short ID, never its token. Default:
	// no logging.
	Logger *slog.Logger
	// MeterProvider supplies the instruments tenure.session.operations
	// (attributes store, op, outcome: ok, not_found, conflict, invalid,
	// unavailable, error) and tenure.store.duration (see
	// docs/observability.md). Default: the global provider
	// (otel.GetMeterProvider), so a service that installed an OpenTelemetry
	// SDK gets them without code. Instrumentation never changes a result.
	MeterProvider metric.MeterProvider
	// TracerProvider supplies a span per store call under a recording span
	// (an HTTP server span, for example). Session tokens, IDs and user IDs
	// never become attribute values. Default: the global provider
	// (otel.GetTracerProvider). When both providers are the OpenTelemetry
	// no-op providers, instrumentation is off entirely.
	TracerProvider trace.TracerProvider
}

// CookieOptions configure the session cookie. The zero value is the secure
// default: "__Host-session", Path=/, Secure, HttpOnly, SameSite=Lax, no
// Max-Age or Expires (the cookie ends with the browser session; the store
// enforces the deadlines).
type CookieOptions struct {
	// Name is the cookie name. Default "__Host-session" (DefaultCookieName),
	// or "session" (InsecureCookieName) when Insecure is set.
	Name string
	// Path is the cookie path. Default "/". A __Host- cookie must use "/".
	Path string
	// Domain is the cookie domain. Default none (host-only). A __Host- cookie
	// must have none.
	Domain string
	// Insecure drops the Secure attribute, for development over plain HTTP
	// (http://localhost): browsers drop a Secure cookie set over plain HTTP
	// (Safari even on localhost). It is the one setting plain HTTP needs:
	// with Name left empty the cookie is named "session", since a __Host-
	// cookie must be Secure. Never set it in production.
	Insecure bool
	// SameSite is the SameSite attribute. Default http.SameSiteLaxMode.
	SameSite http.SameSite
	// ScriptReadable drops HttpOnly, so page scripts can read the token.
	// Default false.
	ScriptReadable bool
	// Persistent gives the cookie a Max-Age equal to the time left until the
	// session's absolute deadline (at least one second), so it survives a
	// browser restart and ends with the session. Default false (no Max-Age:
	// the cookie ends with the browser session).
	Persistent bool
}

// Manager creates, loads, saves, rotates and revokes sessions in a Store,
// and is the HTTP middleware. It is safe for concurrent use.
type Manager struct {
	store    Store
	idle     time.Duration
	absolute time.Duration
	cookie   CookieOptions
	cop      *http.CrossOriginProtection
	onError  func(w http.ResponseWriter, r *http.Request, err error)
	log      *slog.Logger
}

// New returns a Manager on store with o (nil: defaults). A nil store
// (also a nil pointer in a Store interface) and invalid options give an
// error wrapping ErrInvalid: a timeout outside [MinTimeout, MaxTimeout]
// (negative ones included; zero means the default), a cookie name that is
// not an HTTP token, a Path that does not start with "/" or holds a control
// character or ';', a Domain that is not a domain name, an unknown
// SameSite value, or attributes the cookie's prefix or SameSite=None
// forbid. An IdleTimeout longer than the AbsoluteTimeout is allowed: the
// absolute deadline then ends every session.
func New(store Store, o *Options) (*Manager, error) {
	if isNil(store) {
		return nil, fmt.Errorf("%w: nil store", ErrInvalid)
	}
	if o == nil {
		o = &Options{}
	}
	m := &Manager{
		store: instrument(store, o), idle: o.IdleTimeout, absolute: o.AbsoluteTimeout,
		cookie: o.Cookie, cop: o.CrossOrigin, onError: o.ErrorHandler, log: o.Logger,
	}
	if m.idle == 0 {
		m.idle = DefaultIdleTimeout
	}
	if m.absolute == 0 {
		m.absolute = DefaultAbsoluteTimeout
	}
	if err := driver.ValidateTimeout(m.idle); err != nil {
		return nil, fmt.Errorf("IdleTimeout: %w", err)
	}
	if err := driver.ValidateTimeout(m.absolute); err != nil {
		return nil, fmt.Errorf("AbsoluteTimeout: %w", err)
	}
	if err := m.cookie.resolve(); err != nil {
		return nil, err
	}
	if m.cop == nil {
		m.cop = http.NewCrossOriginProtection()
	}
	if m.onError == nil {
		m.onError = DefaultErrorHandler
	}
	if m.log == nil {
		m.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return m, nil
}

// isNil reports whether s is nil or holds a nil pointer, map, slice,
// channel or function, whose methods would fail at the first call.
func isNil(s Store) bool {
	if s == nil {
		return true
	}
	switch v := reflect.ValueOf(s); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// IdleTimeout returns the Manager's idle timeout.
func (m *Manager) IdleTimeout() time.Duration { return m.idle }

// AbsoluteTimeout returns the Manager's absolute timeout.
func (m *Manager) AbsoluteTimeout() time.Duration { return m.absolute }

// Session is one loaded session: a snapshot of the stored record plus the
// changes made to its values since. Its methods are safe for concurrent
// use. Changes are written by [Manager.Save] (or the middleware at the end
// of the request) with a compare-and-set on the version that was loaded.
type Session struct {
	mu       sync.Mutex
	id       ID
	userID   string
	version  uint64
	created  time.Time
	idle     time.Time
	absolute time.Time
	values   map[string]string
	dirty    bool
}

// ID returns the session's store key (not a credential).
func (s *Session) ID() ID { s.mu.Lock(); defer s.mu.Unlock(); return s.id }

// UserID returns the user the session belongs to.
func (s *Session) UserID() string { return s.userID }

// Version returns the stored version this snapshot is based on.
func (s *Session) Version() uint64 { s.mu.Lock(); defer s.mu.Unlock(); return s.version }

// Created returns when the session was created (store clock).
func (s *Session) Created() time.Time { return s.created }

// IdleUntil returns the idle deadline as of the last load, touch or save.
func (s *Session) IdleUntil() time.Time { s.mu.Lock(); defer s.mu.Unlock(); return s.idle }

// AbsoluteUntil returns the absolute deadline. Rotation keeps it.
func (s *Session) AbsoluteUntil() time.Time { return s.absolute }

// MarshalJSON writes a summary of the session: its ID (not a credential),
// user, version, deadlines in RFC 3339 and how many values it holds, never
// the values themselves (they may be private) and never a token.
func (s *Session) MarshalJSON() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return json.Marshal(sessionSummary{ID: s.id, UserID: s.userID, Version: s.version,
		Created: jsonx.Time(s.created), IdleUntil: jsonx.Time(s.idle), AbsoluteUntil: jsonx.Time(s.absolute),
		Values: len(s.values)})
}

// Get returns the value of key.
func (s *Session) Get(key string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.values[key]
	return v, ok
}

// Values returns a copy of all values.
func (s *Session) Values() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.values)
}

// Set sets key to value. The change is written by the next Save.
func (s *Session) Set(key, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.values == nil {
		s.values = map[string]string{}
	}
	s.values[key] = value
	s.dirty = true
}

// Delete removes key. The change is written by the next Save.
func (s *Session) Delete(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.values[key]; ok {
		delete(s.values, key)
		s.dirty = true
	}
}

// Modified reports whether values changed since the session was loaded
// or last saved.
func (s *Session) Modified() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.dirty }

func fromRecord(r Record) (*Session, error) {
	values, err := decodeValues(r.Data)
	if err != nil {
		return nil, err
	}
	return &Session{
		id: r.ID, userID: r.UserID, version: r.Version,
		created: r.Created, idle: r.IdleUntil, absolute: r.AbsoluteUntil, values: values,
	}, nil
}

// encodeValues validates values and encodes them (JSON, keys sorted).
func encodeValues(values map[string]string) ([]byte, error) {
	for _, k := range slices.Sorted(maps.Keys(values)) {
		v := values[k]
		if k == "" || len(k) > MaxKeyLen {
			return nil, fmt.Errorf("%w: value key must be 1 to %d bytes", ErrInvalid, MaxKeyLen)
		}
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, fmt.Errorf("%w: value keys and values must be valid UTF-8", ErrInvalid)
		}
	}
	if values == nil {
		values = map[string]string{}
	}
	b, err := json.Marshal(values)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := driver.ValidateData(b); err != nil {
		return nil, err
	}
	return b, nil
}

func decodeValues(b []byte) (map[string]string, error) {
	values := map[string]string{}
	if len(b) == 0 {
		return values, nil
	}
	if err := json.Unmarshal(b, &values); err != nil {
		return nil, fmt.Errorf("session: stored data is corrupt: %w", err)
	}
	return values, nil
}

// Create starts a session for userID with values (which may be nil) and
// returns its token, to be given to the client once, and the session. The
// idle and absolute deadlines start now on the store's clock.
func (m *Manager) Create(ctx context.Context, userID string, values map[string]string) (Token, *Session, error) {
	if err := driver.ValidateUserID(userID); err != nil {
		return Token{}, nil, err
	}
	data, err := encodeValues(values)
	if err != nil {
		return Token{}, nil, err
	}
	tok := newToken(userShard(userID))
	rec, err := m.store.Create(ctx, Record{ID: TokenID(tok), UserID: userID, Data: data}, m.idle, m.absolute)
	if err != nil {
		m.failed(ctx, "create", TokenID(tok), err)
		return Token{}, nil, err
	}
	s, err := fromRecord(rec)
	if err != nil {
		return Token{}, nil, err
	}
	m.log.DebugContext(ctx, "session created", "session", rec.ID.Short(), "user", userID)
	return tok, s, nil
}

// Load returns the live session of tok and refreshes its idle deadline in
// the same atomic step (to min(now + IdleTimeout, absolute deadline), store
// clock). ErrNotFound if tok names no live session; ErrUnavailable if the
// store cannot tell.
func (m *Manager) Load(ctx context.Context, tok Token) (*Session, error) {
	id := TokenID(tok)
	if id == "" {
		return nil, fmt.Errorf("%w: not a session token", ErrInvalid)
	}
	rec, err := m.store.Load(ctx, id, m.idle)
	if err != nil {
		m.failed(ctx, "load", id, err)
		return nil, err
	}
	return fromRecord(rec)
}

// Touch refreshes the idle deadline of s without reading or writing its
// values, if the stored session is still at s's version. ErrNotFound if it
// ended; ErrConflict if it was saved since s was loaded (load it again).
func (m *Manager) Touch(ctx context.Context, s *Session) error {
	if s == nil {
		return fmt.Errorf("%w: nil session", ErrInvalid)
	}
	id, version := s.ID(), s.Version()
	until, err := m.store.Touch(ctx, id, version, m.idle)
	if err != nil {
		m.failed(ctx, "touch", id, err)
		return err
	}
	s.mu.Lock()
	if s.id == id {
		s.idle = until
	}
	s.mu.Unlock()
	return nil
}

// Save writes the values of s if the stored session is still at the version
// s was loaded at (compare-and-set), and refreshes its idle deadline. It
// writes even when nothing changed, which confirms that s is still current.
// ErrConflict if another save came first; ErrNotFound if the session ended
// (revoked, rotated away, expired): a late save never revives it.
func (m *Manager) Save(ctx context.Context, s *Session) error {
	if s == nil {
		return fmt.Errorf("%w: nil session", ErrInvalid)
	}
	s.mu.Lock()
	id, version := s.id, s.version
	data, err := encodeValues(s.values)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	rec, err := m.store.Save(ctx, id, version, data, m.idle)
	if err != nil {
		m.failed(ctx, "save", id, err)
		return err
	}
	s.mu.Lock()
	if s.id == id && s.version == version {
		s.version, s.idle = rec.Version, rec.IdleUntil
		// Values changed while the save was in flight stay marked.
		cur, _ := encodeValues(s.values)
		s.dirty = string(cur) != string(data)
	}
	s.mu.Unlock()
	return nil
}

// Rotate gives s a new token, in one atomic step with saving its values
// (compare-and-set on its version): the old token is dead at once, the new
// session keeps the user, the creation time and the absolute deadline. Call
// it on every privilege change. The new token is returned, to be given to
// the client.
func (m *Manager) Rotate(ctx context.Context, s *Session) (Token, error) {
	if s == nil {
		return Token{}, fmt.Errorf("%w: nil session", ErrInvalid)
	}
	s.mu.Lock()
	old, version := s.id, s.version
	data, err := encodeValues(s.values)
	s.mu.Unlock()
	if err != nil {
		return Token{}, err
	}
	tok := newToken(userShard(s.userID))
	rec, err := m.store.Rotate(ctx, old, TokenID(tok), version, data, m.idle)
	if err != nil {
		m.failed(ctx, "rotate", old, err)
		return Token{}, err
	}
	s.mu.Lock()
	s.id, s.version, s.idle = rec.ID, rec.Version, rec.IdleUntil
	cur, _ := encodeValues(s.values)
	s.dirty = string(cur) != string(data)
	s.mu.Unlock()
	m.log.DebugContext(ctx, "session rotated", "session", old.Short(), "to", rec.ID.Short(), "user", rec.UserID)
	return tok, nil
}

// Revoke ends the session id at once (logout). ErrNotFound if it had
// already ended.
func (m *Manager) Revoke(ctx context.Context, id ID) error {
	if err := id.Validate(); err != nil {
		return err
	}
	if err := m.store.Delete(ctx, id); err != nil {
		m.failed(ctx, "revoke", id, err)
		return err
	}
	m.log.DebugContext(ctx, "session revoked", "session", id.Short())
	return nil
}

// RevokeUser ends every session of userID in one atomic step: sessions
// created or rotated while it runs are ended too, or were created after
// it. It returns how many live sessions it ended.
func (m *Manager) RevokeUser(ctx context.Context, userID string) (int, error) {
	if err := driver.ValidateUserID(userID); err != nil {
		return 0, err
	}
	n, err := m.store.DeleteUser(ctx, userID)
	if err != nil {
		m.failed(ctx, "revoke user", "", err)
		return 0, err
	}
	m.log.InfoContext(ctx, "user sessions revoked", "user", userID, "sessions", n)
	return n, nil
}

// List returns the live sessions of userID, oldest first, without
// refreshing them. It reads the store's per-user index, never all sessions.
func (m *Manager) List(ctx context.Context, userID string) ([]*Session, error) {
	if err := driver.ValidateUserID(userID); err != nil {
		return nil, err
	}
	recs, err := m.store.List(ctx, userID)
	if err != nil {
		m.failed(ctx, "list", "", err)
		return nil, err
	}
	out := make([]*Session, 0, len(recs))
	for _, r := range recs {
		s, err := fromRecord(r)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// failed logs a store failure worth noticing (not a plain not-found).
func (m *Manager) failed(ctx context.Context, op string, id ID, err error) {
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrInvalid):
	case errors.Is(err, ErrConflict):
		m.log.InfoContext(ctx, "session write conflict", "op", op, "session", id.Short())
	default:
		m.log.WarnContext(ctx, "session store failed", "op", op, "session", id.Short(), "err", err)
	}
}
