package session

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tenurekit/tenure/session/driver"
)

func (c *CookieOptions) resolve() error {
	if c.Name == "" {
		c.Name = DefaultCookieName
		if c.Insecure {
			c.Name = InsecureCookieName // a __Host- cookie cannot work without Secure
		}
	}
	if c.Path == "" {
		c.Path = "/"
	}
	if c.SameSite == 0 {
		c.SameSite = http.SameSiteLaxMode
	}
	bad := func(why string) error { return fmt.Errorf("%w: cookie %q: %s", ErrInvalid, c.Name, why) }
	for i := 0; i < len(c.Name); i++ {
		if ch := c.Name[i]; ch <= ' ' || ch >= 0x7f || strings.IndexByte("()<>@,;:\\\"/[]?={}", ch) >= 0 {
			return bad("name is not an HTTP token")
		}
	}
	if !strings.HasPrefix(c.Path, "/") {
		return bad("Path must start with \"/\"")
	}
	switch c.SameSite {
	case http.SameSiteDefaultMode, http.SameSiteLaxMode, http.SameSiteStrictMode, http.SameSiteNoneMode:
	default:
		return bad(fmt.Sprintf("unknown SameSite value %d", c.SameSite))
	}
	// net/http drops (and logs) a Path or Domain it cannot write; refuse
	// them here instead.
	if err := (&http.Cookie{Name: c.Name, Value: "x", Path: c.Path, Domain: c.Domain}).Valid(); err != nil {
		return bad(err.Error())
	}
	if strings.HasPrefix(c.Name, "__Host-") && c.Insecure {
		return bad("a __Host- cookie needs Secure, which plain HTTP cannot carry: for plain-HTTP development set only Cookie.Insecure (the name becomes \"" + InsecureCookieName + "\"), or a Name without the __Host- prefix")
	}
	if strings.HasPrefix(c.Name, "__Host-") && (c.Path != "/" || c.Domain != "") {
		return bad("a __Host- cookie needs Path \"/\" and no Domain")
	}
	if strings.HasPrefix(c.Name, "__Secure-") && c.Insecure {
		return bad("a __Secure- cookie needs Secure: with Cookie.Insecure use a Name without the __Secure- prefix")
	}
	if c.SameSite == http.SameSiteNoneMode && c.Insecure {
		return bad("SameSite=None needs Secure")
	}
	return nil
}

// DefaultErrorHandler answers a request whose session could not be loaded
// or saved: 503 with Retry-After for ErrUnavailable (the store is down: the
// request is refused, never served as anonymous), 409 for ErrConflict
// (another request changed the session first), 401 for ErrNotFound (the
// session ended while the request ran, e.g. a logout elsewhere), 500
// otherwise. The body never contains the error's text.
func DefaultErrorHandler(w http.ResponseWriter, _ *http.Request, err error) {
	w.Header().Set("Cache-Control", "no-store")
	switch {
	case errors.Is(err, ErrUnavailable):
		w.Header().Set("Retry-After", "1")
		http.Error(w, "session store unavailable", http.StatusServiceUnavailable)
	case errors.Is(err, ErrConflict):
		http.Error(w, "the session was changed by another request; try again", http.StatusConflict)
	case errors.Is(err, ErrNotFound):
		http.Error(w, "the session has ended", http.StatusUnauthorized)
	default:
		http.Error(w, "session error", http.StatusInternalServerError)
	}
}

type ctxKey struct{}

// reqState is the session state of one request in the middleware.
type reqState struct {
	m         *Manager
	mu        sync.Mutex
	sess      *Session
	setTok    Token // a cookie to set (login, rotation)
	clear     bool  // the cookie to clear (logout, dead token)
	committed bool  // response headers decided
}

// FromContext returns the session of the request whose context is ctx, or
// nil for an anonymous request (no cookie, or one naming no live session)
// or a context that did not pass through the middleware.
func FromContext(ctx context.Context) *Session {
	st, _ := ctx.Value(ctxKey{}).(*reqState)
	if st == nil {
		return nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.sess
}

// Handler is the HTTP middleware. For each request it:
//
//  1. refuses cross-origin unsafe requests with 403 (Options.CrossOrigin),
//     before the session is read or written;
//  2. loads the session named by the cookie, refreshing its idle deadline;
//     a cookie naming no live session makes the request anonymous and is
//     cleared; a store that cannot be reached gives 503 (ErrorHandler), never
//     an anonymous request. A request may carry several cookies of the
//     session's name (a browser sends every cookie whose path and domain
//     match, the most specific path first, and a sibling host can plant
//     a cookie that is not __Host-): the middleware tries the well-formed
//     ones in order, at most [MaxSessionCookies], and uses the first that
//     names a live session. It clears the cookie only if every cookie of
//     the name was tried and none is live, so a forged or stale cookie
//     next to a valid one never logs the user out; past the limit the
//     request is anonymous and no cookie is cleared;
//  3. runs next with the session in the request context ([FromContext]);
//  4. before the response's headers go out (first Write, WriteHeader or
//     Flush, or when next returns), saves changed values with a
//     compare-and-set on the loaded version. If that fails (ErrConflict,
//     ErrNotFound after a logout elsewhere, ErrUnavailable) next's response
//     is discarded and ErrorHandler answers instead;
//  5. sets or clears the cookie as Login, Logout and Renew asked, with
//     Cache-Control: no-store on every response that does.
//
// Every response it lets through (all but the 403 of step 1) carries
// Vary: Cookie, so a shared cache keys it on the cookie.
func (m *Manager) Handler(next http.Handler) http.Handler {
	return m.cop.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serve(w, r, next)
	}))
}

// MaxSessionCookies is how many well-formed cookies of the session's name
// the middleware tries, in the order the request lists them, before it
// treats the request as anonymous.
const MaxSessionCookies = 4

func (m *Manager) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	addVaryCookie(w.Header())
	st := &reqState{m: m}
	sess, clear, err := m.fromCookies(r)
	if err != nil {
		m.onError(w, r, err)
		return
	}
	st.sess, st.clear = sess, clear
	r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, st))
	sw := &responseWriter{ResponseWriter: w, st: st, r: r}
	next.ServeHTTP(sw, r)
	sw.commit()
}

// fromCookies loads the session named by the request's cookies of the
// session's name. It tries each well-formed one in order, at most
// MaxSessionCookies of them, and returns the first live session. clear
// reports that every cookie of the name was looked at and none names a live
// session: only then is the cookie cleared, so a forged or stale cookie sent
// next to a valid one never logs the user out. A store failure is returned
// as is: the request is refused, never served as anonymous.
func (m *Manager) fromCookies(r *http.Request) (sess *Session, clear bool, err error) {
	tried, seen := 0, false
	for _, c := range r.CookiesNamed(m.cookie.Name) {
		if c.Value == "" {
			continue
		}
		seen = true
		tok, err := ParseToken(c.Value)
		if err != nil {
			continue
		}
		if tried == MaxSessionCookies {
			return nil, false, nil // not all were tried: clear none
		}
		tried++
		s, err := m.Load(r.Context(), tok)
		switch {
		case err == nil:
			return s, false, nil
		case !errors.Is(err, ErrNotFound):
			return nil, false, err
		}
	}
	return nil, seen, nil
}

// addVaryCookie adds Cookie to the Vary header unless it is there: the
// response depends on the session cookie, so a shared cache must not serve
// it to another client.
func addVaryCookie(h http.Header) {
	for _, v := range h.Values("Vary") {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f == "*" || strings.EqualFold(f, "Cookie") {
				return
			}
		}
	}
	h.Add("Vary", "Cookie")
}

// responseWriter saves the session and sets the cookie before the first
// byte of the response goes out.
type responseWriter struct {
	http.ResponseWriter
	st     *reqState
	r      *http.Request
	done   bool
	failed bool // the save failed: next's response is discarded
}

// commit saves changes and writes the cookie headers, once. It reports
// whether next's response may go out.
func (w *responseWriter) commit() bool {
	if w.done {
		return !w.failed
	}
	w.done = true
	st := w.st
	st.mu.Lock()
	st.committed = true
	sess := st.sess
	st.mu.Unlock()
	m := st.m
	if sess != nil && sess.Modified() {
		if err := m.Save(w.r.Context(), sess); err != nil {
			w.failed = true
			if errors.Is(err, ErrNotFound) {
				st.setTok, st.clear = Token{}, true
			}
			w.cookies(sess)
			m.onError(w.ResponseWriter, w.r, err)
			return false
		}
	}
	w.cookies(sess)
	return true
}

func (w *responseWriter) cookies(sess *Session) {
	st, c := w.st, w.st.m.cookie
	var ck *http.Cookie
	switch {
	case !st.setTok.IsZero():
		ck = &http.Cookie{Value: st.setTok.Reveal()}
		if c.Persistent && sess != nil {
			ck.MaxAge = max(int(time.Until(sess.AbsoluteUntil())/time.Second), 1)
		}
	case st.clear:
		ck = &http.Cookie{MaxAge: -1}
	default:
		return
	}
	ck.Name, ck.Path, ck.Domain = c.Name, c.Path, c.Domain
	ck.Secure, ck.HttpOnly, ck.SameSite = !c.Insecure, !c.ScriptReadable, c.SameSite
	h := w.ResponseWriter.Header()
	h.Add("Set-Cookie", ck.String())
	h.Set("Cache-Control", "no-store")
}

func (w *responseWriter) WriteHeader(code int) {
	if w.commit() {
		w.ResponseWriter.WriteHeader(code)
	}
}

func (w *responseWriter) Write(b []byte) (int, error) {
	if !w.commit() {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// Flush commits the session, then flushes if the underlying writer can.
func (w *responseWriter) Flush() {
	if w.commit() {
		http.NewResponseController(w.ResponseWriter).Flush()
	}
}

// Unwrap returns the underlying writer (for http.ResponseController). Bytes
// written to it directly bypass the session commit.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

var errNoMiddleware = errors.New("session: the request did not pass through Manager.Handler")
var errCommitted = errors.New("session: the response has started; the cookie can no longer change")

func (m *Manager) state(r *http.Request) (*reqState, error) {
	st, _ := r.Context().Value(ctxKey{}).(*reqState)
	if st == nil || st.m != m {
		return nil, errNoMiddleware
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.committed {
		return nil, errCommitted
	}
	return st, nil
}

// Login ends the request's current session, if any, and starts a new one
// for userID with values: a new token goes into the cookie, so a token
// planted in the browser before login never becomes authenticated (session
// fixation). Call it before writing the response. The new session is the
// request's session from now on.
func (m *Manager) Login(w http.ResponseWriter, r *http.Request, userID string, values map[string]string) (*Session, error) {
	st, err := m.state(r)
	if err != nil {
		return nil, err
	}
	if err := driver.ValidateUserID(userID); err != nil {
		return nil, err
	}
	if old := FromContext(r.Context()); old != nil {
		if err := m.Revoke(r.Context(), old.ID()); err != nil && !errors.Is(err, ErrNotFound) {
			return nil, err
		}
	}
	tok, s, err := m.Create(r.Context(), userID, values)
	st.mu.Lock()
	defer st.mu.Unlock()
	if err != nil {
		st.sess, st.clear = nil, true // the old session is gone in any case
		return nil, err
	}
	st.sess, st.setTok, st.clear = s, tok, false
	return s, nil
}

// Logout revokes the request's session, if any, and clears the cookie. The
// request is anonymous from now on. Revoking a session that already ended
// is not an error.
func (m *Manager) Logout(w http.ResponseWriter, r *http.Request) error {
	st, err := m.state(r)
	if err != nil {
		return err
	}
	if old := FromContext(r.Context()); old != nil {
		if err := m.Revoke(r.Context(), old.ID()); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.sess, st.setTok, st.clear = nil, Token{}, true
	return nil
}

// Renew rotates the request's session (saving its changes in the same
// step) and puts the new token in the cookie: call it on a privilege change
// that is not a login. The absolute deadline stays. ErrNotFound if the
// request has no session.
func (m *Manager) Renew(w http.ResponseWriter, r *http.Request) error {
	st, err := m.state(r)
	if err != nil {
		return err
	}
	s := FromContext(r.Context())
	if s == nil {
		return ErrNotFound
	}
	tok, err := m.Rotate(r.Context(), s)
	if err != nil {
		return err
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.setTok, st.clear = tok, false
	return nil
}
