// Command compatpeer is one tenure instance in the mixed-version tests:
// it opens a store the way tenure's commands do (a --store value, the
// store's default schema or prefix) and answers one command per line on
// standard input with one line on standard output, so that a test can
// drive this version of tenure and an earlier one (built from a recorded
// commit) side by side on one store and compare what each sees.
//
// Commands and replies (fields separated by one space):
//
//	acquire KEY TTL         ok FENCE TOKEN | held
//	release KEY TOKEN       ok | not-held
//	write NAME FENCE VALUE  ok | stale        (fencedWrite: strict admission)
//	read NAME               ok FENCE VALUE
//	create USER             ok TOKEN          (a session of USER)
//	load TOKEN              ok VERSION | gone (and keeps the session for save)
//	save TOKEN              ok VERSION | gone | conflict (the kept session)
//	revoke-user USER        ok N
//	slot JOB SLOT           done FENCE | final | busy (claim, begin, finish)
//	quit
//
// Any other failure is "err MESSAGE". The program is internal to tenure's
// tests: its commands are what every version since the first it was built
// at understands, so a change to them must keep the old ones.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tenurekit/tenure/cmd/tenure/internal/servestore"
	"github.com/tenurekit/tenure/cmd/tenure/internal/storeopen"
	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/internal/storeurl"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
	schedriver "github.com/tenurekit/tenure/schedule/driver"
	"github.com/tenurekit/tenure/server"
	"github.com/tenurekit/tenure/session"
)

func main() {
	storeFlag := flag.String("store", "", "the store, as tenure's --store")
	flag.Parse()
	if err := run(*storeFlag); err != nil {
		fmt.Fprintln(os.Stderr, "compatpeer:", err)
		os.Exit(1)
	}
}

type peer struct {
	st    *storeopen.Stores
	sv    server.Stores
	sm    *session.Manager
	kept  map[string]*session.Session
	node  string
	slotT time.Time
}

func run(storeArg string) error {
	ctx := context.Background()
	spec, err := storeurl.Parse(storeArg)
	if err != nil {
		return err
	}
	st, err := storeopen.Open(ctx, spec, nil)
	if err != nil {
		return err
	}
	defer st.Close()
	sv, done, err := servestore.Stores(ctx, st)
	if err != nil {
		return err
	}
	defer done()
	sm, err := session.New(st.Sessions, &session.Options{IdleTimeout: time.Hour, AbsoluteTimeout: 2 * time.Hour})
	if err != nil {
		return err
	}
	p := &peer{st: st, sv: sv, sm: sm, kept: map[string]*session.Session{}, node: "peer-" + randHex(4),
		slotT: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	in := bufio.NewScanner(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(out, "ready")
	out.Flush()
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		if f[0] == "quit" {
			return nil
		}
		reply, err := p.do(ctx, f)
		if err != nil {
			reply = "err " + strings.ReplaceAll(err.Error(), "\n", " ")
		}
		fmt.Fprintln(out, reply)
		out.Flush()
	}
	return in.Err()
}

func (p *peer) do(ctx context.Context, f []string) (string, error) {
	arg := func(i int) string {
		if i < len(f) {
			return f[i]
		}
		return ""
	}
	switch f[0] {
	case "acquire":
		ttl, err := time.ParseDuration(arg(2))
		if err != nil {
			return "", err
		}
		tok := randHex(16)
		g, err := p.st.Leases.Acquire(ctx, arg(1), tok, ttl)
		if errors.Is(err, leasedriver.ErrHeld) {
			return "held", nil
		}
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("ok %d %s", g.Fence, tok), nil
	case "release":
		err := p.st.Leases.Release(ctx, arg(1), arg(2))
		if errors.Is(err, leasedriver.ErrNotHeld) {
			return "not-held", nil
		}
		if err != nil {
			return "", err
		}
		return "ok", nil
	case "write":
		fn, err := strconv.ParseUint(arg(2), 10, 64)
		if err != nil {
			return "", err
		}
		err = p.sv.Fenced.FencedWrite(ctx, arg(1), fn, []byte(arg(3)))
		if errors.Is(err, fence.ErrStale) {
			return "stale", nil
		}
		if err != nil {
			return "", err
		}
		return "ok", nil
	case "read":
		v, fn, err := p.sv.Fenced.FencedRead(ctx, arg(1))
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("ok %d %s", fn, v), nil
	case "create":
		tok, _, err := p.sm.Create(ctx, arg(1), map[string]string{"by": p.node})
		if err != nil {
			return "", err
		}
		return "ok " + tok.Reveal(), nil
	case "load":
		tok, err := session.ParseToken(arg(1))
		if err != nil {
			return "", err
		}
		s, err := p.sm.Load(ctx, tok)
		if errors.Is(err, session.ErrNotFound) {
			return "gone", nil
		}
		if err != nil {
			return "", err
		}
		p.kept[arg(1)] = s
		return fmt.Sprintf("ok %d", s.Version()), nil
	case "save":
		s := p.kept[arg(1)]
		if s == nil {
			return "", fmt.Errorf("no session loaded for that token")
		}
		s.Set("saved-by", p.node)
		err := p.sm.Save(ctx, s)
		switch {
		case errors.Is(err, session.ErrNotFound):
			return "gone", nil
		case errors.Is(err, session.ErrConflict):
			return "conflict", nil
		case err != nil:
			return "", err
		}
		return fmt.Sprintf("ok %d", s.Version()), nil
	case "revoke-user":
		n, err := p.sm.RevokeUser(ctx, arg(1))
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("ok %d", n), nil
	case "slot":
		return p.slot(ctx, arg(1), arg(2))
	}
	return "", fmt.Errorf("unknown command %q", f[0])
}

// slot runs one slot the way a scheduler does: claim it, begin, finish
// done, release the claim. A slot's time is a fixed past moment, so every
// slot is due.
func (p *peer) slot(ctx context.Context, job, id string) (string, error) {
	claims := p.st.Schedules.Claims()
	key := schedriver.ClaimKey(job, id)
	tok := randHex(16)
	g, err := claims.Acquire(ctx, key, tok, time.Minute)
	if errors.Is(err, leasedriver.ErrHeld) {
		return "busy", nil
	}
	if err != nil {
		return "", err
	}
	defer claims.Release(context.WithoutCancel(ctx), key, tok)
	_, err = p.st.Schedules.Begin(ctx, schedriver.BeginRequest{Job: job, SlotID: id, SlotTime: p.slotT, Node: p.node, Fence: g.Fence})
	if errors.Is(err, schedriver.ErrFinal) {
		return "final", nil
	}
	if err != nil {
		return "", err
	}
	rec, err := p.st.Schedules.Finish(ctx, schedriver.FinishRequest{Job: job, SlotID: id, Fence: g.Fence, State: schedriver.Done})
	if err != nil {
		return "", err
	}
	if rec.State != schedriver.Done {
		return "", fmt.Errorf("slot %s finished %s", id, rec.State)
	}
	return fmt.Sprintf("done %d", g.Fence), nil
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
