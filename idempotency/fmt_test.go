package idempotency_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/tenurekit/tenure/idempotency/driver"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/tenurekit/tenure/idempotency"
)

func fmtAll(v any) string { return fmt.Sprintf("%v %+v %#v %s %q %x %X %d", v, v, v, v, v, v, v, v) }

// beginRecorder keeps the Begin requests a Keeper sends.
type beginRecorder struct {
	idempotency.Store
	mu     sync.Mutex
	begins []driver.Begin
}

func (r *beginRecorder) Begin(ctx context.Context, b driver.Begin) (driver.Begun, error) {
	r.mu.Lock()
	r.begins = append(r.begins, b)
	r.mu.Unlock()
	return r.Store.Begin(ctx, b)
}

// TestTokensNeverPrinted: no fmt verb on a Begin, a claim or a token (as
// values, pointers, or nested in exported and unexported fields), no slog
// handler and no JSON encoding prints a claim token, and the Store still
// gets the token's text.
func TestTokensNeverPrinted(t *testing.T) {
	rec := &beginRecorder{Store: newMem(t, nil).Idempotency()}
	k := newKeeper(t, rec, nil)
	var (
		claim *idempotency.Claim
		tok   string
	)
	if _, err := k.Do(t.Context(), req, func(_ context.Context, c *idempotency.Claim) ([]byte, error) {
		claim, tok = c, c.Token().Reveal()
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(rec.begins) != 1 || rec.begins[0].Token.Reveal() != tok || len(tok) < 22 {
		t.Fatalf("the store got %d Begin(s); token %d chars, want the claim's of 128 bits", len(rec.begins), len(tok))
	}
	b := rec.begins[0]
	type inner struct {
		b     driver.Begin
		c     *idempotency.Claim
		token idempotency.Token
	}
	type outer struct {
		B      driver.Begin
		PB     *driver.Begin
		C      *idempotency.Claim
		Token  idempotency.Token
		hidden inner
		ptr    *inner
		Any    any
		List   []driver.Begin
		Map    map[string]idempotency.Token
	}
	in := inner{b: b, c: claim, token: b.Token}
	o := outer{B: b, PB: &b, C: claim, Token: b.Token, hidden: in, ptr: &in, Any: b,
		List: []driver.Begin{b}, Map: map[string]idempotency.Token{"t": b.Token}}
	values := map[string]any{
		"Begin": b, "*Begin": &b, "Token": b.Token, "*Token": &b.Token, "Claim": claim,
		"inner": in, "*inner": &in, "outer": o, "*outer": &o, "**outer": &[]*outer{&o},
	}
	var logs bytes.Buffer
	logText := slog.New(slog.NewTextHandler(&logs, nil))
	logJSON := slog.New(slog.NewJSONHandler(&logs, nil))
	for name, v := range values {
		out := fmtAll(v)
		if strings.Contains(out, tok) {
			t.Errorf("%s printed the token: %s", name, out)
		}
		if redacts := !strings.Contains(name, "inner") && name != "**outer"; redacts && !strings.Contains(out, "REDACTED") {
			t.Errorf("%s: no REDACTED in %s", name, out)
		}
		if j, err := json.Marshal(v); err == nil && strings.Contains(string(j), tok) {
			t.Errorf("%s: JSON has the token: %s", name, j)
		}
		logText.Info("x", "v", v)
		logJSON.Info("x", "v", v)
		logText.Info("x", slog.Group("g", "v", v))
	}
	logText.Info("claim", "claim", claim)
	logJSON.Info("claim", "claim", claim)
	if strings.Contains(logs.String(), tok) {
		t.Errorf("a log has the token: %s", logs.String())
	}
	if s := fmt.Sprint(b.Token); s != "REDACTED" {
		t.Errorf("Token prints %q", s)
	}
}
