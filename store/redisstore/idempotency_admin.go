package redisstore

import (
	"context"
	_ "embed"
	"github.com/tenurekit/tenure/idempotency/driver"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/store/redisstore/internal/rclient"
)

var (
	//go:embed lua/idempotency_settle.lua
	idemSettleSrc    string
	idemSettleScript = rclient.NewScript(idemSettleSrc)
)

// The idempotency view implements idempotency.Admin.
var _ idempotency.Admin = idemView{}

// scanCount is the COUNT hint of each SCAN step of List.
const scanCount = "1000"

// List returns up to f.Limit live records that match f. It walks the
// store's record keys with SCAN (MATCH <prefix>idem{*, on every node of a
// cluster) and reads each record with the same script as Inspect, until
// it found f.Limit matches, scanned every key, or ctx ended; the records
// it found are sorted by scope and key. Records written during the scan
// may or may not be listed.
func (v idemView) List(ctx context.Context, f idempotency.Filter) ([]idempotency.Record, error) {
	f, err := driver.ValidateFilter(f)
	if err != nil {
		return nil, err
	}
	nodes, err := v.s.c.Nodes(ctx)
	if err != nil {
		return nil, v.s.idemErr(err)
	}
	slices.SortFunc(nodes, func(a, b rclient.Node) int { return strings.Compare(a.Addr, b.Addr) })
	pattern := globEscape(v.s.prefix+"idem{") + "*"
	seen := map[string]bool{}
	var out []idempotency.Record
	for _, n := range nodes {
		cursor := "0"
		for {
			arr, err := n.Client.Do(ctx, rclient.Cmd{Name: "SCAN", Args: []string{cursor, "MATCH", pattern, "COUNT", scanCount}, ReadOnly: true}).ToArray()
			if err != nil {
				return nil, v.s.idemErr(err)
			}
			if len(arr) != 2 {
				return nil, malformed("scan")
			}
			next, e1 := arr[0].ToString()
			keys, e2 := arr[1].ToArray()
			if e1 != nil || e2 != nil {
				return nil, malformed("scan")
			}
			for _, m := range keys {
				key, err := m.ToString()
				if err != nil {
					return nil, malformed("scan")
				}
				if seen[key] {
					continue
				}
				seen[key] = true
				id, ok := v.s.idemID(key)
				if !ok || !strings.HasPrefix(id.Scope, f.ScopePrefix) {
					continue
				}
				rec, err := v.Inspect(ctx, id)
				if err != nil {
					return nil, err
				}
				if f.Match(rec) {
					out = append(out, rec)
					if len(out) == f.Limit {
						return sortRecords(out), nil
					}
				}
			}
			if next == "0" {
				break
			}
			cursor = next
		}
	}
	return sortRecords(out), nil
}

func sortRecords(recs []idempotency.Record) []idempotency.Record {
	slices.SortFunc(recs, func(a, b idempotency.Record) int {
		if c := strings.Compare(a.Scope, b.Scope); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return recs
}

// idemID parses a record key back into its ID; ok is false for a key that
// is not one the store would write for that ID.
func (s *Store) idemID(key string) (idempotency.ID, bool) {
	rest, ok := strings.CutPrefix(key, s.prefix+"idem{")
	if !ok || !strings.HasSuffix(rest, "}") {
		return idempotency.ID{}, false
	}
	rest = rest[:len(rest)-1]
	n, rest, ok := strings.Cut(rest, ":")
	size, err := strconv.Atoi(n)
	if !ok || err != nil || size < 0 || size > len(rest) {
		return idempotency.ID{}, false
	}
	scope, ok1 := unescape(rest[:size])
	k, ok2 := unescape(rest[size:])
	id := idempotency.ID{Scope: scope, Key: k}
	if !ok1 || !ok2 || driver.ValidateID(id) != nil || s.idemKey(id) != key {
		return idempotency.ID{}, false
	}
	return id, true
}

// unescape reverses escape.
func unescape(s string) (string, bool) {
	if !strings.Contains(s, "%") {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+3 > len(s) {
			return "", false
		}
		switch s[i+1 : i+3] {
		case "25":
			b.WriteByte('%')
		case "7B":
			b.WriteByte('{')
		case "7D":
			b.WriteByte('}')
		default:
			return "", false
		}
		i += 2
	}
	return b.String(), true
}

// globEscape escapes the characters SCAN MATCH gives a meaning to.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// settle runs the settle script for s and turns a refusal into the error
// driver.SettleError gives for the record the script saw.
func (v idemView) settle(ctx context.Context, s idempotency.Settle, mode string, retention time.Duration, out idempotency.Outcome) error {
	if err := v.ready(ctx); err != nil {
		return err
	}
	force, failed := "0", "0"
	if s.Force {
		force = "1"
	}
	if out.Failed {
		failed = "1"
	}
	res, p := v.s.write(ctx, idemSettleScript, []string{v.s.idemKey(s.ID)}, []string{strconv.FormatUint(s.Fence, 10), force, mode,
		msArg(retention), failed, driver.CleanMessage(out.Message), rueidis.BinaryString(out.Value)}, false)
	arr, err := res.ToArray()
	if err != nil {
		return v.s.idemErr(err)
	}
	bad := malformed("idempotency settle")
	if len(arr) < 1 {
		return bad
	}
	code, err := arr[0].AsInt64()
	switch {
	case err != nil:
		return bad
	case code == 0 && len(arr) == 1:
		if err := v.s.confirm(ctx, p); err != nil {
			return v.s.idemErr(err)
		}
		return nil
	case code != 1 || len(arr) != 5:
		return bad
	}
	exists, e1 := arr[1].AsInt64()
	completed, e2 := arr[2].AsInt64()
	fs, e3 := arr[3].ToString()
	left, e4 := arr[4].AsInt64()
	fence, e5 := strconv.ParseUint(fs, 10, 64)
	if e1 != nil || e2 != nil || e3 != nil || e4 != nil || e5 != nil {
		return bad
	}
	rec := idempotency.Record{ID: s.ID, Exists: exists == 1, Completed: completed == 1, Fence: fence,
		ClaimTTL: time.Duration(left) * time.Microsecond}
	if err := driver.SettleError(s, rec); err != nil {
		return err
	}
	return bad // the script refused a record that can be settled
}

// Resolve records out for the record s names, guarded by its fence, in
// one script.
func (v idemView) Resolve(ctx context.Context, s idempotency.Settle, out idempotency.Outcome, retention time.Duration) error {
	if err := driver.ValidateSettle(s); err != nil {
		return err
	}
	if err := driver.ValidateRetention(retention); err != nil {
		return err
	}
	return v.settle(ctx, s, "resolve", retention, out)
}

// ForceRelease drops the claim of the record s names, guarded by its
// fence, in one script. The record keeps its fence until it expires.
func (v idemView) ForceRelease(ctx context.Context, s idempotency.Settle) error {
	if err := driver.ValidateSettle(s); err != nil {
		return err
	}
	return v.settle(ctx, s, "release", time.Millisecond, idempotency.Outcome{})
}
