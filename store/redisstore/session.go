package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/session"
	sessiondriver "github.com/tenurekit/tenure/session/driver"
	"github.com/tenurekit/tenure/store/redisstore/internal/rclient"
)

// Session scripts. Every key a script touches is in its KEYS and carries
// the hash tag of the session's shard ({s:<shard>}, the same for all of a
// user's sessions and the user's index), so they work on Redis Cluster.
var (
	//go:embed lua/session_create.lua
	sessionCreateSrc string
	//go:embed lua/session_load.lua
	sessionLoadSrc string
	//go:embed lua/session_save.lua
	sessionSaveSrc string
	//go:embed lua/session_rotate.lua
	sessionRotateSrc string
	//go:embed lua/session_delete.lua
	sessionDeleteSrc string
	//go:embed lua/session_revoke_begin.lua
	sessionRevokeBeginSrc string
	//go:embed lua/session_deluser.lua
	sessionDelUserSrc string
	//go:embed lua/session_list.lua
	sessionListSrc string
	//go:embed lua/session_set.lua
	sessionSetSrc string

	sessionCreateScript  = rclient.NewScript(sessionCreateSrc)
	sessionLoadScript    = rclient.NewScript(sessionLoadSrc)
	sessionSaveScript    = rclient.NewScript(sessionSaveSrc)
	sessionRotateScript  = rclient.NewScript(sessionRotateSrc)
	sessionDeleteScript  = rclient.NewScript(sessionDeleteSrc)
	sessionDelUserScript = rclient.NewScript(sessionDelUserSrc)
	sessionRevokeBegin   = rclient.NewScript(sessionRevokeBeginSrc)
	sessionListScript    = rclient.NewScript(sessionListSrc)
	sessionSetScript     = rclient.NewScript(sessionSetSrc)
)

// Sessions returns the store's session.Store view. A session is a hash
// under prefix{s:<shard>}:s:<digest>, a user's index a sorted set under
// prefix{s:<shard>}:u:<user> (scored by absolute deadline); every call is
// one Lua script judged on the server's TIME (Load with its idle refresh
// included), except Rotate, List and DeleteUser (two steps, see there). A
// session key expires (to reclaim space) at most two idle periods after
// the session's last use and never after its absolute deadline; reads judge
// the deadlines themselves and never rely on that.
func (s *Store) Sessions() session.Store { return sessions{s} }

type sessions struct{ s *Store }

// SessionKey returns the key of the session record id.
func (s *Store) SessionKey(id session.ID) string {
	return s.prefix + "{s:" + id.Shard() + "}:s:" + string(id[4:])
}

// SessionIndexKey returns the key of userID's session index.
func (s *Store) SessionIndexKey(userID string) string {
	return s.prefix + "{s:" + sessiondriver.UserShard(userID) + "}:u:" + userID
}

// SessionRevokeKey returns the key of userID's revoke-all marks: a sorted
// set of the revokes in progress, each scored by the instant it takes
// effect.
func (s *Store) SessionRevokeKey(userID string) string {
	return s.prefix + "{s:" + sessiondriver.UserShard(userID) + "}:x:" + userID
}

// SessionValueKey returns the key of userID's value name (see
// [Store.SessionSet]): in the hash tag of userID's sessions, then the
// length of userID, userID and name, so no two pairs share a key.
func (s *Store) SessionValueKey(userID, name string) string {
	return s.prefix + "{s:" + sessiondriver.UserShard(userID) + "}:v:" +
		strconv.Itoa(len(userID)) + ":" + userID + ":" + name
}

func ms(d time.Duration) string { return strconv.FormatInt(ceilMillis(d), 10) }

func fromMillis(v int64) time.Time { return time.UnixMilli(v) }

// sessionFail classifies an error of a request with the session package's
// sentinels.
func (s *Store) sessionFail(op string, err error) error {
	c := s.fail(err)
	switch {
	case errors.Is(c, lease.ErrUnavailable):
		return fmt.Errorf("%w: redisstore: session %s: %w", session.ErrUnavailable, op, c)
	case errors.Is(c, lease.ErrInvalid):
		return fmt.Errorf("%w: redisstore: session %s: %w", session.ErrInvalid, op, c)
	}
	return fmt.Errorf("redisstore: session %s: %w", op, c)
}

func (s *Store) sessionReady(ctx context.Context, op string) error {
	if err := s.ready(ctx); err != nil {
		if errors.Is(err, lease.ErrUnavailable) {
			return fmt.Errorf("%w: redisstore: session %s: %w", session.ErrUnavailable, op, err)
		}
		return err
	}
	return nil
}

// record parses {user, data, version, created, idle, absolute} from arr.
func record(id session.ID, arr []rclient.Message) (session.Record, error) {
	if len(arr) < 6 {
		return session.Record{}, malformed("session script")
	}
	user, err1 := arr[0].ToString()
	data, err2 := arr[1].ToString()
	v, err3 := arr[2].AsInt64()
	c, err4 := arr[3].AsInt64()
	i, err5 := arr[4].AsInt64()
	a, err6 := arr[5].AsInt64()
	if err := errors.Join(err1, err2, err3, err4, err5, err6); err != nil {
		return session.Record{}, malformed("session script")
	}
	return session.Record{
		ID: id, UserID: user, Data: []byte(data), Version: uint64(v),
		Created: fromMillis(c), IdleUntil: fromMillis(i), AbsoluteUntil: fromMillis(a),
	}, nil
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

func (v sessions) Create(ctx context.Context, rec session.Record, idle, absolute time.Duration) (session.Record, error) {
	if err := sessiondriver.ValidateRecord(rec, idle, absolute); err != nil {
		return session.Record{}, err
	}
	if rec.ID.Shard() != sessiondriver.UserShard(rec.UserID) {
		return session.Record{}, fmt.Errorf("%w: session ID is not in its user's shard", session.ErrInvalid)
	}
	s := v.s
	if err := s.sessionReady(ctx, "create"); err != nil {
		return session.Record{}, err
	}
	keys := []string{s.SessionKey(rec.ID), s.SessionIndexKey(rec.UserID)}
	res, p := s.write(ctx, sessionCreateScript, keys,
		[]string{rec.UserID, string(rec.Data), ms(idle), ms(absolute), string(rec.ID)}, false)
	arr, err := res.ToArray()
	if err != nil {
		return session.Record{}, s.sessionFail("create", err)
	}
	ok, err := arr[0].AsInt64()
	if err != nil {
		return session.Record{}, malformed("session create")
	}
	if ok == 0 {
		return session.Record{}, session.ErrConflict
	}
	if len(arr) < 4 {
		return session.Record{}, malformed("session create")
	}
	c, err1 := arr[1].AsInt64()
	i, err2 := arr[2].AsInt64()
	a, err3 := arr[3].AsInt64()
	if err := errors.Join(err1, err2, err3); err != nil {
		return session.Record{}, malformed("session create")
	}
	if err := s.confirm(ctx, p); err != nil {
		// Nobody will get this session's token: end it on the primary.
		cctx, cancel := s.afterUnconfirmed(ctx)
		_ = sessionDeleteScript.Exec(cctx, s.c, []string{keys[0]}, nil).Error()
		cancel()
		return session.Record{}, s.sessionFail("create", err)
	}
	return session.Record{
		ID: rec.ID, UserID: rec.UserID, Data: append([]byte{}, rec.Data...), Version: 1,
		Created: fromMillis(c), IdleUntil: fromMillis(i), AbsoluteUntil: fromMillis(a),
	}, nil
}

// Load is one script call: read, judge both deadlines on TIME, refresh the
// idle deadline.
func (v sessions) Load(ctx context.Context, id session.ID, idle time.Duration) (session.Record, error) {
	if err := id.Validate(); err != nil {
		return session.Record{}, err
	}
	arg := "0"
	if idle != 0 {
		if err := sessiondriver.ValidateTimeout(idle); err != nil {
			return session.Record{}, err
		}
		arg = ms(idle)
	}
	s := v.s
	if err := s.sessionReady(ctx, "load"); err != nil {
		return session.Record{}, err
	}
	arr, err := sessionLoadScript.Exec(ctx, s.c, []string{s.SessionKey(id)}, []string{arg}).ToArray()
	if err != nil {
		return session.Record{}, s.sessionFail("load", err)
	}
	if ok, err := arr[0].AsInt64(); err != nil || ok != 1 {
		if err != nil {
			return session.Record{}, malformed("session load")
		}
		return session.Record{}, session.ErrNotFound
	}
	return record(id, arr[1:])
}

func (v sessions) save(ctx context.Context, op string, id session.ID, version uint64, write bool, data []byte, idle time.Duration) (session.Record, error) {
	s := v.s
	if err := s.sessionReady(ctx, op); err != nil {
		return session.Record{}, err
	}
	flag := "0"
	if write {
		flag = "1"
	}
	res, p := s.write(ctx, sessionSaveScript, []string{s.SessionKey(id)},
		[]string{strconv.FormatUint(version, 10), ms(idle), flag, string(data)}, false)
	arr, err := res.ToArray()
	if err != nil {
		return session.Record{}, s.sessionFail(op, err)
	}
	ok, err := arr[0].AsInt64()
	switch {
	case err != nil:
		return session.Record{}, malformed("session " + op)
	case ok == 0:
		return session.Record{}, session.ErrNotFound
	case ok < 0:
		return session.Record{}, session.ErrConflict
	}
	r, err := record(id, arr[1:])
	if err != nil {
		return session.Record{}, err
	}
	if err := s.confirm(ctx, p); err != nil {
		return session.Record{}, s.sessionFail(op, err)
	}
	return r, nil
}

func (v sessions) Touch(ctx context.Context, id session.ID, version uint64, idle time.Duration) (time.Time, error) {
	if err := validateWrite(id, version, idle); err != nil {
		return time.Time{}, err
	}
	r, err := v.save(ctx, "touch", id, version, false, nil, idle)
	if err != nil {
		return time.Time{}, err
	}
	return r.IdleUntil, nil
}

func (v sessions) Save(ctx context.Context, id session.ID, version uint64, data []byte, idle time.Duration) (session.Record, error) {
	if err := validateWrite(id, version, idle); err != nil {
		return session.Record{}, err
	}
	if err := sessiondriver.ValidateData(data); err != nil {
		return session.Record{}, err
	}
	return v.save(ctx, "save", id, version, true, data, idle)
}

// Rotate needs the session's user for the index key; it reads it first
// (a session's user never changes) and the script checks it again.
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
	if newID == old || newID.Shard() != old.Shard() {
		return session.Record{}, fmt.Errorf("%w: the new session ID must differ from the old one and share its shard", session.ErrInvalid)
	}
	s := v.s
	if err := s.sessionReady(ctx, "rotate"); err != nil {
		return session.Record{}, err
	}
	oldKey := s.SessionKey(old)
	user, err := s.c.Do(ctx, rclient.Cmd{Name: "HGET", Keys: []string{oldKey}, Args: []string{"u"}, ReadOnly: true}).ToString()
	if rclient.IsNil(err) {
		return session.Record{}, session.ErrNotFound
	}
	if err != nil {
		return session.Record{}, s.sessionFail("rotate", err)
	}
	keys := []string{oldKey, s.SessionKey(newID), s.SessionIndexKey(user), s.SessionRevokeKey(user)}
	res, p := s.write(ctx, sessionRotateScript, keys, []string{
		strconv.FormatUint(version, 10), ms(idle), string(data), string(old), string(newID), user,
	}, false)
	arr, err := res.ToArray()
	if err != nil {
		return session.Record{}, s.sessionFail("rotate", err)
	}
	ok, err := arr[0].AsInt64()
	switch {
	case err != nil:
		return session.Record{}, malformed("session rotate")
	case ok == 0:
		return session.Record{}, session.ErrNotFound
	case ok < 0:
		return session.Record{}, session.ErrConflict
	case len(arr) < 5:
		return session.Record{}, malformed("session rotate")
	}
	c, err1 := arr[1].AsInt64()
	i, err2 := arr[2].AsInt64()
	a, err3 := arr[3].AsInt64()
	ver, err4 := arr[4].AsInt64()
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return session.Record{}, malformed("session rotate")
	}
	if err := s.confirm(ctx, p); err != nil {
		return session.Record{}, s.sessionFail("rotate", err)
	}
	return session.Record{
		ID: newID, UserID: user, Data: append([]byte{}, data...), Version: uint64(ver),
		Created: fromMillis(c), IdleUntil: fromMillis(i), AbsoluteUntil: fromMillis(a),
	}, nil
}

func (v sessions) Delete(ctx context.Context, id session.ID) error {
	if err := id.Validate(); err != nil {
		return err
	}
	s := v.s
	if err := s.sessionReady(ctx, "revoke"); err != nil {
		return err
	}
	key := s.SessionKey(id)
	res, p := s.write(ctx, sessionDeleteScript, []string{key}, nil, false)
	n, err := res.AsInt64()
	if err != nil {
		return s.sessionFail("revoke", err)
	}
	if n != 1 {
		// The caller may take this for a revoke that happened (a logout
		// does): the replicas must not miss the revoke that made it so.
		if err := s.confirmState(ctx, key); err != nil {
			return s.sessionFail("revoke", err)
		}
		return session.ErrNotFound
	}
	if err := s.confirm(ctx, p); err != nil {
		return s.sessionFail("revoke", err)
	}
	return nil
}

// indexArgs returns the KEYS and ARGV of a script over the index of
// userID and the sessions ids listed in it (those of another shard, which
// this store never writes there, are left out).
func (s *Store) indexArgs(userID string, ids []string) (keys, args []string) {
	shard := sessiondriver.UserShard(userID)
	keys = append(make([]string, 0, len(ids)+2), s.SessionIndexKey(userID))
	args = append(make([]string, 0, len(ids)+3), userID)
	for _, id := range ids {
		sid := session.ID(id)
		if sid.Validate() != nil || sid.Shard() != shard {
			continue
		}
		keys = append(keys, s.SessionKey(sid))
		args = append(args, id)
	}
	return keys, args
}

// DeleteUser takes two scripts. The first marks the instant T it takes
// effect (the server's TIME) in the user's revoke marks and lists the
// user's sessions; the second ends those created at or before T and drops
// the mark. A Create is one script, so it is before the first step (listed,
// ended) or after it (created after T, kept); a Rotate is one script that
// refuses a session the mark covers, so no session created before T
// escapes by moving to a new ID between the steps. A revoke that dies
// between the steps leaves its mark, which only keeps the sessions it
// covers from rotating, until the last of their absolute deadlines.
func (v sessions) DeleteUser(ctx context.Context, userID string) (int, error) {
	if err := sessiondriver.ValidateUserID(userID); err != nil {
		return 0, err
	}
	s := v.s
	if err := s.sessionReady(ctx, "revoke user"); err != nil {
		return 0, err
	}
	index, marks := s.SessionIndexKey(userID), s.SessionRevokeKey(userID)
	nonce := lease.NewToken()
	res, p := s.write(ctx, sessionRevokeBegin, []string{index, marks}, []string{nonce}, false)
	arr, err := res.ToArray()
	if err != nil {
		return 0, s.sessionFail("revoke user", err)
	}
	if err := s.confirm(ctx, p); err != nil {
		return 0, s.sessionFail("revoke user", err)
	}
	if len(arr) < 1 {
		return 0, malformed("session revoke-all")
	}
	at, err := arr[0].AsInt64()
	if err != nil {
		return 0, malformed("session revoke-all")
	}
	ids := make([]string, 0, len(arr)-1)
	for _, m := range arr[1:] {
		id, err := m.ToString()
		if err != nil {
			return 0, malformed("session revoke-all")
		}
		ids = append(ids, id)
	}
	keys, args := s.indexArgs(userID, ids)
	keys = slices.Insert(keys, 1, marks)
	args = slices.Insert(args, 1, nonce, strconv.FormatInt(at, 10))
	res, p = s.write(ctx, sessionDelUserScript, keys, args, false)
	n, err := res.AsInt64()
	if err != nil {
		return 0, s.sessionFail("revoke user", err)
	}
	if err := s.confirm(ctx, p); err != nil {
		return 0, s.sessionFail("revoke user", err)
	}
	return int(n), nil
}

// List reads the user's index, then the listed sessions in one script that
// judges them on TIME and prunes the index of dead ones.
func (v sessions) List(ctx context.Context, userID string) ([]session.Record, error) {
	if err := sessiondriver.ValidateUserID(userID); err != nil {
		return nil, err
	}
	s := v.s
	if err := s.sessionReady(ctx, "list"); err != nil {
		return nil, err
	}
	ids, err := s.c.Do(ctx, rclient.Cmd{Name: "ZRANGE", Keys: []string{s.SessionIndexKey(userID)}, Args: []string{"0", "-1"}, ReadOnly: true}).AsStrSlice()
	if err != nil {
		return nil, s.sessionFail("list", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	keys, args := s.indexArgs(userID, ids)
	arr, err := sessionListScript.Exec(ctx, s.c, keys, args).ToArray()
	if err != nil {
		return nil, s.sessionFail("list", err)
	}
	if len(arr)%6 != 0 {
		return nil, malformed("session list")
	}
	out := make([]session.Record, 0, len(arr)/6)
	for j := 0; j < len(arr); j += 6 {
		id, err := arr[j].ToString()
		if err != nil {
			return nil, malformed("session list")
		}
		// record reads {user, data, ...}: the ID stands in for the user.
		r, err := record(session.ID(id), arr[j:j+6])
		if err != nil {
			return nil, err
		}
		r.UserID = userID
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b session.Record) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(string(a.ID), string(b.ID))
	})
	return out, nil
}

// MaxSessionValueLen is the longest value [Store.SessionSet] writes, in
// bytes (1 MiB).
const MaxSessionValueLen = 1 << 20

// maxSessionValueName is the longest value name in bytes.
const maxSessionValueName = 255

// validateValueName checks the name of a value of SessionSet: 1 to 255
// bytes of valid UTF-8 without control characters.
func validateValueName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: redisstore: empty value name", session.ErrInvalid)
	case len(name) > maxSessionValueName:
		return fmt.Errorf("%w: redisstore: value name is %d bytes, longer than %d", session.ErrInvalid, len(name), maxSessionValueName)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: redisstore: value name is not valid UTF-8", session.ErrInvalid)
	case strings.ContainsFunc(name, unicode.IsControl):
		return fmt.Errorf("%w: redisstore: value name contains a control character", session.ErrInvalid)
	}
	return nil
}

// SessionSet sets the value name of userID to value only while session id
// (a session of userID) is live on the server's clock (not revoked, not
// rotated away, within its idle and absolute deadlines, not ended by a
// revoke of the user's sessions in progress) and, when version is not 0,
// still at version; session check and write are one script. It is the
// Redis counterpart of a SQL store's txn.Tx.CheckSession, for a sensitive
// change whose effect lives in Redis (a balance, a role): a request
// authorized at its start and delayed past a logout writes nothing. The
// session is read, never refreshed or changed.
//
// A session that ended gets an error wrapping session.ErrNotFound (also for
// a session of another user), one at another version session.ErrConflict;
// nothing is written. An invalid id, user ID or name (1 to 255 bytes of
// UTF-8 without control characters), a value longer than
// MaxSessionValueLen, or an id outside userID's shard is refused with
// session.ErrInvalid before anything is sent. A server that cannot be
// reached, or replicas that do not confirm the write (see "Replication"
// in the package documentation), give session.ErrUnavailable: the write
// may have been applied. The value is kept without expiry under
// [Store.SessionValueKey], in the hash slot of the user's sessions, so the
// script works on Redis Cluster.
func (s *Store) SessionSet(ctx context.Context, id session.ID, version uint64, userID, name string, value []byte) error {
	if err := id.Validate(); err != nil {
		return err
	}
	if err := sessiondriver.ValidateUserID(userID); err != nil {
		return err
	}
	if id.Shard() != sessiondriver.UserShard(userID) {
		return fmt.Errorf("%w: redisstore: session ID is not in its user's shard", session.ErrInvalid)
	}
	if version != 0 {
		if err := sessiondriver.ValidateVersion(version); err != nil {
			return err
		}
	}
	if err := validateValueName(name); err != nil {
		return err
	}
	if len(value) > MaxSessionValueLen {
		return fmt.Errorf("%w: redisstore: value is %d bytes, longer than %d", session.ErrInvalid, len(value), MaxSessionValueLen)
	}
	if err := s.sessionReady(ctx, "set"); err != nil {
		return err
	}
	keys := []string{s.SessionKey(id), s.SessionValueKey(userID, name), s.SessionRevokeKey(userID)}
	res, p := s.write(ctx, sessionSetScript, keys,
		[]string{userID, strconv.FormatUint(version, 10), string(value)}, false)
	arr, err := res.ToArray()
	if err != nil {
		return s.sessionFail("set", err)
	}
	if len(arr) < 1 {
		return malformed("session set")
	}
	ok, err := arr[0].AsInt64()
	switch {
	case err != nil:
		return malformed("session set")
	case ok == 0:
		return fmt.Errorf("redisstore: session set: %w", session.ErrNotFound)
	case ok < 0:
		if len(arr) < 2 {
			return malformed("session set")
		}
		cur, err := arr[1].AsInt64()
		if err != nil {
			return malformed("session set")
		}
		return fmt.Errorf("redisstore: session set: at version %d, not %d: %w", cur, version, session.ErrConflict)
	}
	if err := s.confirm(ctx, p); err != nil {
		return s.sessionFail("set", err)
	}
	return nil
}

// SessionGet returns the value name of userID written by
// [Store.SessionSet] (nil, false if never written), read with one GET.
// It does not look at any session. An unreachable server gives
// session.ErrUnavailable.
func (s *Store) SessionGet(ctx context.Context, userID, name string) ([]byte, bool, error) {
	if err := sessiondriver.ValidateUserID(userID); err != nil {
		return nil, false, err
	}
	if err := validateValueName(name); err != nil {
		return nil, false, err
	}
	v, err := s.c.Do(ctx, rclient.Cmd{Name: "GET", Keys: []string{s.SessionValueKey(userID, name)}, ReadOnly: true}).AsBytes()
	if rclient.IsNil(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, s.sessionFail("get", err)
	}
	if v == nil {
		v = []byte{}
	}
	return v, true, nil
}
