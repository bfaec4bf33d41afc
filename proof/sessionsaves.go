package proof

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/tenurekit/tenure/session"
)

func init() {
	register(&workload{
		name:     "session-saves",
		summary:  "every worker loads the same sessions, thinks, saves them and touches them; of the saves of one loaded version at most one succeeds (no lost update), a touch succeeds only at the current version, and each session is linearizable as a versioned register",
		supports: notOnEtcd("sessions"),
		setup:    sessionSavesSetup,
		worker:   bothModes(sessionSavesLoop),
		check:    sessionSavesCheck,
	})
}

// The control's sessions: a version and the data, saved unconditionally.
const sessionRegisterSchema = `CREATE TABLE IF NOT EXISTS proof_session_register (run TEXT NOT NULL, key TEXT NOT NULL, version INTEGER NOT NULL, data TEXT NOT NULL, PRIMARY KEY (run, key));`

// sessionSavesKey names shared session i of mode.
func sessionSavesKey(mode string, i int) string { return "ss/" + mode + "/" + strconv.Itoa(i) }

func sessionSavesManager(w *workerEnv) (*session.Manager, error) {
	return session.New(w.sessionStore(), &session.Options{IdleTimeout: time.Hour, AbsoluteTimeout: 2 * time.Hour})
}

// sessionSavesSetup creates the sessions every worker shares: for the
// guarded mode through the Manager (their tokens go to the ledger, where
// the workers find them), for the control as rows of a plain table.
func sessionSavesSetup(ctx context.Context, w *workerEnv) error {
	if err := ledgerSetup(ctx, w); err != nil {
		return err
	}
	db := w.ledger.DB()
	if _, err := db.ExecContext(ctx, sessionRegisterSchema); err != nil {
		return err
	}
	m, err := sessionSavesManager(w)
	if err != nil {
		return err
	}
	for i := range counterKeys(w.spec) {
		tok, _, err := m.Create(ctx, "proof-"+strconv.Itoa(i), map[string]string{"d": ""})
		if err != nil {
			return fmt.Errorf("create a session: %w", err)
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO proof_records (run, key, value) VALUES (?, ?, ?)`,
			w.spec.Prefix, sessionSavesKey(Guarded, i), tok.Reveal()); err != nil {
			return err
		}
		if _, err := db.ExecContext(ctx, `INSERT INTO proof_session_register (run, key, version, data) VALUES (?, ?, 1, '')`,
			w.spec.Prefix, sessionSavesKey(Control, i)); err != nil {
			return err
		}
	}
	return nil
}

// versioned is one mode's way to load and save a shared session.
type versioned interface {
	// load returns the session's version and data.
	load(ctx context.Context) (uint64, string, error)
	// save writes data over the version last loaded and returns the new
	// version.
	save(ctx context.Context, data string) (uint64, error)
	// touch refreshes the session's idle deadline if it is still at the
	// version last loaded or saved, without writing.
	touch(ctx context.Context) error
	// loadedVersion is the version last loaded (or, after a save that
	// succeeded, the version it gave).
	loadedVersion() uint64
}

// managerSession is a shared session through tenure's Manager: Save is a
// compare-and-set on the version Load returned.
type managerSession struct {
	m   *session.Manager
	tok session.Token
	s   *session.Session
}

func (o *managerSession) load(ctx context.Context) (uint64, string, error) {
	s, err := o.m.Load(ctx, o.tok)
	if err != nil {
		return 0, "", err
	}
	o.s = s
	d, _ := s.Get("d")
	return s.Version(), d, nil
}

func (o *managerSession) loadedVersion() uint64 { return o.s.Version() }

func (o *managerSession) touch(ctx context.Context) error { return o.m.Touch(ctx, o.s) }

func (o *managerSession) save(ctx context.Context, data string) (uint64, error) {
	o.s.Set("d", data)
	if err := o.m.Save(ctx, o.s); err != nil {
		return 0, err
	}
	return o.s.Version(), nil
}

// plainSession is the control: the version the save loaded plus one, and
// the data, written unconditionally; a touch that always succeeds.
type plainSession struct {
	db       *sql.DB
	run, key string
	from     uint64
}

func (o *plainSession) load(ctx context.Context) (uint64, string, error) {
	var v uint64
	var d string
	err := o.db.QueryRowContext(ctx, `SELECT version, data FROM proof_session_register WHERE run = ? AND key = ?`, o.run, o.key).Scan(&v, &d)
	o.from = v
	return v, d, err
}

func (o *plainSession) loadedVersion() uint64 { return o.from }

func (o *plainSession) save(ctx context.Context, data string) (uint64, error) {
	_, err := o.db.ExecContext(ctx, `UPDATE proof_session_register SET version = ?, data = ? WHERE run = ? AND key = ?`, o.from+1, data, o.run, o.key)
	if err == nil {
		o.from++
	}
	return o.from, err
}

func (o *plainSession) touch(ctx context.Context) error {
	_, err := o.db.ExecContext(ctx, `UPDATE proof_session_register SET data = data WHERE run = ? AND key = ?`, o.run, o.key)
	return err
}

// sessionSavers is the number of savers per session in each worker.
const sessionSavers = 2

func sessionSavesLoop(ctx context.Context, w *workerEnv, mode string) error {
	var m *session.Manager
	if mode == Guarded {
		var err error
		if m, err = sessionSavesManager(w); err != nil {
			return err
		}
	}
	var wg sync.WaitGroup
	n := counterKeys(w.spec)
	errs := make([]error, n)
	for i := range n {
		key := sessionSavesKey(mode, i)
		var tok session.Token
		if mode == Guarded {
			var s string
			if err := w.ledger.DB().QueryRowContext(ctx, `SELECT value FROM proof_records WHERE run = ? AND key = ?`, w.spec.Prefix, key).Scan(&s); err != nil {
				return fmt.Errorf("the token of session %s: %w", key, err)
			}
			var err error
			if tok, err = session.ParseToken(s); err != nil {
				return err
			}
		}
		savers := make([]saver, sessionSavers)
		for j := range savers {
			savers[j].rec = w.rec.sub("/" + string(rune('a'+j)))
			if mode == Guarded {
				savers[j].o = &managerSession{m: m, tok: tok}
			} else {
				savers[j].o = &plainSession{db: w.ledger.DB(), run: w.spec.Prefix, key: key}
			}
		}
		wg.Go(func() { errs[i] = sessionSavesRounds(ctx, w, mode, key, savers) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// saver is one of a worker's savers of a session: its own view of the
// session and its own client name in the history.
type saver struct {
	o   versioned
	rec *Recorder
}

// sessionSavesRounds runs rounds on one session: every saver loads it,
// and once all the loads are done (so that they loaded the same version,
// unless another worker saved in between), each thinks and saves data of
// its own over the version it loaded, all at once. Of the saves of one
// version at most one may succeed. Then every saver touches the session
// at the version it holds: the one whose save succeeded holds the current
// version (unless another worker saved since), the others an overwritten
// one, which a touch must refuse. The other workers do the same on the
// same session, so rounds of different workers interleave too, and a
// pause makes a save or a touch come late.
func sessionSavesRounds(ctx context.Context, w *workerEnv, mode, key string, savers []saver) error {
	loaded := make([]bool, len(savers))
	for n := 1; ctx.Err() == nil; n++ {
		w.gate.wait(ctx)
		octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		var wg sync.WaitGroup
		for j := range savers {
			wg.Go(func() {
				p := savers[j].rec.Invoke(mode, "load", key, "", 0)
				v, d, err := savers[j].o.load(octx)
				if err != nil {
					p.End("", 0, err)
					loaded[j] = false
					return
				}
				p.OK(strconv.FormatUint(v, 10)+"/"+d, 0)
				loaded[j] = true
			})
		}
		wg.Wait()
		w.sleep(ctx, w.spec.Think)
		for j := range savers {
			if !loaded[j] {
				continue
			}
			wg.Go(func() {
				data := fmt.Sprintf("%s/%d", savers[j].rec.proc, n)
				sp := savers[j].rec.Invoke(mode, "save", key, strconv.FormatUint(savers[j].version(), 10)+"/"+data, 0)
				nv, err := savers[j].o.save(octx, data)
				sp.End(strconv.FormatUint(nv, 10), 0, err)
			})
		}
		wg.Wait()
		for j := range savers {
			if !loaded[j] {
				continue
			}
			wg.Go(func() {
				tp := savers[j].rec.Invoke(mode, "touch", key, strconv.FormatUint(savers[j].version(), 10), 0)
				tp.End("", 0, savers[j].o.touch(octx))
			})
		}
		wg.Wait()
		cancel()
	}
	return nil
}

func (s *saver) version() uint64 { return s.o.loadedVersion() }

// splitVersion reads "VERSION/DATA".
func splitVersion(s string) (uint64, string) {
	a, b, _ := strings.Cut(s, "/")
	v, _ := strconv.ParseUint(a, 10, 64)
	return v, b
}

func sessionSavesCheck(_ context.Context, w *workerEnv, ri *runInfo, h *History, mode string) ModeResult {
	var m ModeResult
	m.countOps(h.Select(mode, "save"))
	m.countOps(h.Select(mode, "touch"))
	lin := true
	for i := range counterKeys(w.spec) {
		key := sessionSavesKey(mode, i)
		saves, loads, touches := byKey(h, mode, "save", key), byKey(h, mode, "load", key), byKey(h, mode, "touch", key)
		// Lost updates: two saves of one loaded version that both
		// succeeded.
		byFrom := map[uint64][]string{}
		for _, op := range saves {
			if op.Status == OK {
				from, _ := splitVersion(op.In)
				byFrom[from] = append(byFrom[from], op.Proc)
			}
		}
		froms := make([]uint64, 0, len(byFrom))
		for v := range byFrom {
			froms = append(froms, v)
		}
		sort.Slice(froms, func(a, b int) bool { return froms[a] < froms[b] })
		for _, v := range froms {
			if ps := byFrom[v]; len(ps) > 1 {
				m.StaleAdmitted += len(ps) - 1
				m.violate("session %s: %d saves of version %d succeeded (%s): %d lost updates", key, len(ps), v, strings.Join(ps, ", "), len(ps)-1)
			}
		}
		if n, msg := staleTouches(saves, touches); n > 0 {
			m.StaleAdmitted += n
			m.violate("session %s: %s", key, msg)
		}
		name := ri.name + "-" + mode
		if i > 0 {
			name += "-" + strconv.Itoa(i)
		}
		ok, err := checkVersioned(ri, name, loads, append(saves, touches...))
		if !ok {
			lin = false
			m.violate("session %s: the history is not linearizable as a versioned register (visualization in %s)", key, ri.dir)
		} else if err != nil {
			m.Errors["check:"+err.Error()]++
		}
	}
	m.Linearizable = &lin
	return m
}

// staleTouches counts the touches that succeeded at a version some save
// had already replaced (that save completed before the touch was sent),
// and describes the first.
func staleTouches(saves, touches []Op) (int, string) {
	n, msg := 0, ""
	for _, t := range touches {
		if t.Status != OK {
			continue
		}
		at, _ := strconv.ParseUint(t.In, 10, 64)
		var newer uint64
		for _, s := range saves {
			if s.Status == OK && s.Complete < t.Invoke {
				newer = max(newer, mustUint(s.Out))
			}
		}
		if at < newer {
			if n == 0 {
				msg = fmt.Sprintf("%s's touch at version %d succeeded after version %d was saved", t.Proc, at, newer)
			}
			n++
		}
	}
	if n > 1 {
		msg += fmt.Sprintf(" (%d stale touches in all)", n)
	}
	return n, msg
}

func mustUint(s string) uint64 {
	v, _ := strconv.ParseUint(s, 10, 64)
	return v
}

// verInput is a load of a session, a touch at version From, or a save of
// Data over version From that returned version To (To is unknown when
// Unknown is set).
type verInput struct {
	Touch    bool
	Save     bool
	From, To uint64
	Data     string
	Unknown  bool
	Refused  bool // the save was refused as a conflict
}

// verState is a session as the store must keep it: its version and data.
// VersionAbove marks a version that is only known to be above Version
// (after a save whose outcome, and so its new version, is unknown).
type verState struct {
	Version      uint64
	VersionAbove bool
	Data         string
}

// versionedModel is a register with a compare-and-set on its version: a
// save succeeds only over the current version and gives a greater one; a
// touch succeeds only at the current version and changes nothing; a save
// or touch refused as a conflict was made at an older version; a load
// returns the current version and data.
var versionedModel = porcupine.Model{
	Init: func() any { return verState{Version: 0, VersionAbove: true} },
	Step: func(state, input, output any) (bool, any) {
		st, in := state.(verState), input.(verInput)
		current := func(v uint64) bool { return v == st.Version || (st.VersionAbove && v > st.Version) }
		if in.Touch {
			switch {
			case in.Unknown:
				return true, st
			case in.Refused:
				return st.VersionAbove || in.From != st.Version, st
			case !current(in.From):
				return false, st
			}
			return true, verState{Version: in.From, Data: st.Data}
		}
		if !in.Save {
			out := output.(verOutput)
			if out.Data != st.Data || !current(out.Version) {
				return false, st
			}
			return true, verState{Version: out.Version, Data: out.Data}
		}
		switch {
		case in.Refused:
			if st.VersionAbove {
				return true, st // cannot tell
			}
			return in.From != st.Version, st
		case in.Unknown:
			if current(in.From) {
				return true, verState{Version: in.From, VersionAbove: true, Data: in.Data}
			}
			return true, st
		}
		if !current(in.From) || in.To <= in.From {
			return false, st
		}
		return true, verState{Version: in.To, Data: in.Data}
	},
	DescribeOperation: func(input, output any) string {
		in := input.(verInput)
		if in.Touch {
			switch {
			case in.Refused:
				return fmt.Sprintf("touch at version %d → conflict", in.From)
			case in.Unknown:
				return fmt.Sprintf("touch at version %d ?", in.From)
			}
			return fmt.Sprintf("touch at version %d → ok", in.From)
		}
		if !in.Save {
			out := output.(verOutput)
			return fmt.Sprintf("load → version %d, %q", out.Version, out.Data)
		}
		switch {
		case in.Refused:
			return fmt.Sprintf("save %q over version %d → conflict", in.Data, in.From)
		case in.Unknown:
			return fmt.Sprintf("save %q over version %d ?", in.Data, in.From)
		}
		return fmt.Sprintf("save %q over version %d → version %d", in.Data, in.From, in.To)
	},
	DescribeState: func(state any) string {
		st := state.(verState)
		if st.VersionAbove {
			return fmt.Sprintf("version > %d, %q", st.Version, st.Data)
		}
		return fmt.Sprintf("version %d, %q", st.Version, st.Data)
	},
}

// verOutput is what a load returned.
type verOutput struct {
	Version uint64
	Data    string
}

// checkVersioned checks one session's loads, saves and touches (F
// "touch") against versionedModel. Saves and touches refused as conflicts
// are part of the check; those that failed otherwise took no effect and
// are left out; saves whose outcome is unknown may have applied at any
// later time.
func checkVersioned(ri *runInfo, name string, loads, saves []Op) (bool, error) {
	client := clientIDs()
	var ops []porcupine.Operation
	for _, l := range loads {
		if l.Status != OK {
			continue
		}
		v, d := splitVersion(l.Out)
		ops = append(ops, porcupine.Operation{ClientId: client(l.Proc), Input: verInput{}, Output: verOutput{v, d}, Call: l.Invoke, Return: l.Complete})
	}
	for _, s := range saves {
		from, d := splitVersion(s.In)
		in := verInput{Save: s.F != "touch", Touch: s.F == "touch", From: from, Data: d}
		ret := s.Complete
		switch s.Status {
		case OK:
			in.To, _ = strconv.ParseUint(s.Out, 10, 64)
		case Fail:
			if s.Err != "conflict" {
				continue
			}
			in.Refused = true
		case Unknown:
			in.Unknown, ret = true, math.MaxInt64
		}
		ops = append(ops, porcupine.Operation{ClientId: client(s.Proc), Input: in, Call: s.Invoke, Return: ret})
	}
	return porcupineCheck(ri, name, versionedModel, ops)
}
