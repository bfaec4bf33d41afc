package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tenurekit/tenure/session"
	sessiondriver "github.com/tenurekit/tenure/session/driver"
)

// Sessions returns the store's session.Store view. Every call holds one
// lock, so each is atomic; deadlines are judged on Options.Clock. Expired
// records are dropped when a call finds them, and every call that writes
// (Create, Load, Touch, Save, Rotate) also checks the next few records of a
// round-robin sweep and drops those that expired, with their per-user index
// entries: memory follows the live sessions even when clients never come
// back, at a bounded cost per call.
func (s *Store) Sessions() session.Store { return sessions{s.sessionState()} }

// sweepPerWrite is how many records of the sweep queue each writing call
// checks. Each call adds at most one entry, so the sweep goes round the
// queue faster than it grows and the queue holds at most about twice the
// live records.
const sweepPerWrite = 2

type sessionState struct {
	now   func() time.Time
	mu    sync.Mutex
	recs  map[session.ID]*session.Record
	users map[string]map[session.ID]struct{} // the per-user index
	// sweep holds the ID of every record (and of some records already
	// gone), in the order the sweep checks them; sweep[head:] is pending.
	sweep []session.ID
	head  int
}

func (s *Store) sessionState() *sessionState {
	return s.view("session", func() any {
		return &sessionState{now: s.now, recs: map[session.ID]*session.Record{}, users: map[string]map[session.ID]struct{}{}}
	}).(*sessionState)
}

// SetSessionDeadlines overwrites the idle and absolute deadlines of the
// session record id, as a person editing the store by hand would (the
// lab's absolute-deadline experiment sets the absolute deadline in the
// past on purpose). It is a test hook; it reports whether the record
// exists.
func (s *Store) SetSessionDeadlines(id session.ID, idleUntil, absoluteUntil time.Time) bool {
	st := s.sessionState()
	st.mu.Lock()
	defer st.mu.Unlock()
	r := st.recs[id]
	if r == nil {
		return false
	}
	r.IdleUntil, r.AbsoluteUntil = idleUntil, absoluteUntil
	return true
}

type sessions struct{ st *sessionState }

func copyRec(r *session.Record) session.Record {
	c := *r
	c.Data = slices.Clone(r.Data)
	return c
}

// live returns the live record id, dropping it if it expired. The caller
// holds mu.
func (st *sessionState) live(id session.ID, now time.Time) *session.Record {
	r := st.recs[id]
	if r == nil {
		return nil
	}
	if !r.Live(now) {
		st.drop(r)
		return nil
	}
	return r
}

func (st *sessionState) drop(r *session.Record) {
	delete(st.recs, r.ID)
	if idx := st.users[r.UserID]; idx != nil {
		delete(idx, r.ID)
		if len(idx) == 0 {
			delete(st.users, r.UserID)
		}
	}
}

// sweepSome checks the next few records of the sweep queue: an expired one
// is dropped, a live one goes to the back of the queue, an ID whose record
// is gone leaves it. The caller holds mu.
func (st *sessionState) sweepSome(now time.Time) {
	for range min(sweepPerWrite, len(st.sweep)-st.head) {
		id := st.sweep[st.head]
		st.sweep[st.head] = ""
		st.head++
		if r := st.recs[id]; r != nil {
			if r.Live(now) {
				st.sweep = append(st.sweep, id)
			} else {
				st.drop(r)
			}
		}
	}
	if st.head > 32 && st.head*2 >= len(st.sweep) {
		// Move the pending part to the front, so the backing array does
		// not grow forever, and let a much larger array go.
		pending := st.sweep[st.head:]
		if cap(st.sweep) > 4*len(pending)+64 {
			st.sweep = slices.Clone(pending)
		} else {
			n := copy(st.sweep, pending)
			clear(st.sweep[n:])
			st.sweep = st.sweep[:n]
		}
		st.head = 0
	}
}

func (st *sessionState) add(r *session.Record) {
	st.sweep = append(st.sweep, r.ID)
	st.recs[r.ID] = r
	idx := st.users[r.UserID]
	if idx == nil {
		idx = map[session.ID]struct{}{}
		st.users[r.UserID] = idx
	}
	idx[r.ID] = struct{}{}
}

func refresh(r *session.Record, now time.Time, idle time.Duration) {
	r.IdleUntil = minTime(now.Add(idle), r.AbsoluteUntil)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func (v sessions) Create(ctx context.Context, rec session.Record, idle, absolute time.Duration) (session.Record, error) {
	if err := sessiondriver.ValidateRecord(rec, idle, absolute); err != nil {
		return session.Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return session.Record{}, unavailableErr(err)
	}
	st := v.st
	st.mu.Lock()
	defer st.mu.Unlock()
	now := st.now()
	st.sweepSome(now)
	if st.live(rec.ID, now) != nil {
		return session.Record{}, session.ErrConflict
	}
	r := &session.Record{
		ID: rec.ID, UserID: rec.UserID, Data: slices.Clone(rec.Data), Version: 1,
		Created: now, AbsoluteUntil: now.Add(absolute),
	}
	refresh(r, now, idle)
	st.add(r)
	return copyRec(r), nil
}

func (v sessions) Load(ctx context.Context, id session.ID, idle time.Duration) (session.Record, error) {
	if err := id.Validate(); err != nil {
		return session.Record{}, err
	}
	if idle != 0 {
		if err := sessiondriver.ValidateTimeout(idle); err != nil {
			return session.Record{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return session.Record{}, unavailableErr(err)
	}
	st := v.st
	st.mu.Lock()
	defer st.mu.Unlock()
	now := st.now()
	defer st.sweepSome(now)
	r := st.live(id, now)
	if r == nil {
		return session.Record{}, session.ErrNotFound
	}
	if idle > 0 {
		refresh(r, now, idle)
	}
	return copyRec(r), nil
}

// current returns the live record id at version, or the error saying why
// not. The caller holds mu.
func (st *sessionState) current(id session.ID, version uint64, now time.Time) (*session.Record, error) {
	r := st.live(id, now)
	if r == nil {
		return nil, session.ErrNotFound
	}
	if r.Version != version {
		return nil, session.ErrConflict
	}
	return r, nil
}

func validateWrite(id session.ID, version uint64, idle time.Duration) error {
	if err := id.Validate(); err != nil {
		return err
	}
	if err := sessiondriver.ValidateVersion(version); err != nil {
		return err
	}
	return sessiondriver.ValidateTimeout(idle)
}

func (v sessions) Touch(ctx context.Context, id session.ID, version uint64, idle time.Duration) (time.Time, error) {
	if err := validateWrite(id, version, idle); err != nil {
		return time.Time{}, err
	}
	if err := ctx.Err(); err != nil {
		return time.Time{}, unavailableErr(err)
	}
	st := v.st
	st.mu.Lock()
	defer st.mu.Unlock()
	now := st.now()
	defer st.sweepSome(now)
	r, err := st.current(id, version, now)
	if err != nil {
		return time.Time{}, err
	}
	refresh(r, now, idle)
	return r.IdleUntil, nil
}

func (v sessions) Save(ctx context.Context, id session.ID, version uint64, data []byte, idle time.Duration) (session.Record, error) {
	if err := validateWrite(id, version, idle); err != nil {
		return session.Record{}, err
	}
	if err := sessiondriver.ValidateData(data); err != nil {
		return session.Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return session.Record{}, unavailableErr(err)
	}
	st := v.st
	st.mu.Lock()
	defer st.mu.Unlock()
	now := st.now()
	defer st.sweepSome(now)
	r, err := st.current(id, version, now)
	if err != nil {
		return session.Record{}, err
	}
	r.Data = slices.Clone(data)
	r.Version++
	refresh(r, now, idle)
	return copyRec(r), nil
}

func (v sessions) Rotate(ctx context.Context, old, newID session.ID, version uint64, data []byte, idle time.Duration) (session.Record, error) {
	if err := validateWrite(old, version, idle); err != nil {
		return session.Record{}, err
	}
	if err := newID.Validate(); err != nil {
		return session.Record{}, err
	}
	if err := sessiondriver.ValidateData(data); err != nil {
		return session.Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return session.Record{}, unavailableErr(err)
	}
	st := v.st
	st.mu.Lock()
	defer st.mu.Unlock()
	now := st.now()
	defer st.sweepSome(now)
	r, err := st.current(old, version, now)
	if err != nil {
		return session.Record{}, err
	}
	if st.recs[newID] != nil || newID == old {
		return session.Record{}, session.ErrConflict
	}
	n := &session.Record{
		ID: newID, UserID: r.UserID, Data: slices.Clone(data), Version: r.Version + 1,
		Created: r.Created, AbsoluteUntil: r.AbsoluteUntil,
	}
	refresh(n, now, idle)
	st.drop(r)
	st.add(n)
	return copyRec(n), nil
}

func (v sessions) Delete(ctx context.Context, id session.ID) error {
	if err := id.Validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return unavailableErr(err)
	}
	st := v.st
	st.mu.Lock()
	defer st.mu.Unlock()
	r := st.live(id, st.now())
	if r == nil {
		return session.ErrNotFound
	}
	st.drop(r)
	return nil
}

func (v sessions) DeleteUser(ctx context.Context, userID string) (int, error) {
	if err := sessiondriver.ValidateUserID(userID); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, unavailableErr(err)
	}
	st := v.st
	st.mu.Lock()
	defer st.mu.Unlock()
	now := st.now()
	n := 0
	for id := range st.users[userID] {
		if r := st.recs[id]; r != nil {
			if r.Live(now) {
				n++
			}
			delete(st.recs, id)
		}
	}
	delete(st.users, userID)
	return n, nil
}

func (v sessions) List(ctx context.Context, userID string) ([]session.Record, error) {
	if err := sessiondriver.ValidateUserID(userID); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, unavailableErr(err)
	}
	st := v.st
	st.mu.Lock()
	defer st.mu.Unlock()
	now := st.now()
	var out []session.Record
	for id := range st.users[userID] {
		if r := st.live(id, now); r != nil {
			out = append(out, copyRec(r))
		}
	}
	slices.SortFunc(out, func(a, b session.Record) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return compareString(string(a.ID), string(b.ID))
	})
	return out, nil
}

// Users lists the users with live sessions (sessiondriver.UserLister).
func (v sessions) Users(ctx context.Context, prefix, after string, limit int) ([]sessiondriver.UserInfo, error) {
	if err := sessiondriver.ValidateUserList(prefix, after, limit); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, unavailableErr(err)
	}
	st := v.st
	st.mu.Lock()
	defer st.mu.Unlock()
	var names []string
	for u := range st.users {
		if strings.HasPrefix(u, prefix) && u > after {
			names = append(names, u)
		}
	}
	slices.Sort(names)
	now := st.now()
	out := []sessiondriver.UserInfo{}
	for _, u := range names {
		info := sessiondriver.UserInfo{UserID: u}
		for id := range st.users[u] {
			if r := st.live(id, now); r != nil {
				info.Sessions++
				if r.Created.After(info.Newest) {
					info.Newest = r.Created
				}
			}
		}
		if info.Sessions > 0 {
			out = append(out, info)
			if len(out) == limit {
				break
			}
		}
	}
	return out, nil
}

func compareString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// unavailableErr wraps a context error: the call did not reach the store.
func unavailableErr(err error) error {
	return &sessionUnavailable{err}
}

type sessionUnavailable struct{ err error }

func (e *sessionUnavailable) Error() string { return "memstore: " + e.err.Error() }
func (e *sessionUnavailable) Unwrap() []error {
	return []error{session.ErrUnavailable, e.err}
}

// WithSession runs fn while session id is live on the store's clock and,
// when version is not 0, still at version, and keeps it so until fn
// returns: a revoke, rotation, "revoke user" or save of any session of the
// store waits for fn. It is the memory store's counterpart of a SQL
// store's txn.Tx.CheckSession, for state the process keeps itself: fn
// makes the sensitive change (a payment, a role change) and its error is
// returned. A session that ended gets an error wrapping
// session.ErrNotFound and fn does not run; one at another version
// session.ErrConflict. fn must be short and must not call the store's
// session methods (they would wait for fn).
func (s *Store) WithSession(ctx context.Context, id session.ID, version uint64, fn func() error) error {
	if err := id.Validate(); err != nil {
		return err
	}
	if fn == nil {
		return fmt.Errorf("%w: memstore: nil function", session.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return unavailableErr(err)
	}
	st := s.sessionState()
	st.mu.Lock()
	defer st.mu.Unlock()
	r := st.live(id, st.now())
	switch {
	case r == nil:
		return fmt.Errorf("memstore: with session: %w", session.ErrNotFound)
	case version != 0 && r.Version != version:
		return fmt.Errorf("memstore: with session: at version %d, not %d: %w", r.Version, version, session.ErrConflict)
	}
	return fn()
}
