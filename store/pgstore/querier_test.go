package pgstore

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Durations go to every driver as whole microseconds, rounded up, and
// nothing else is touched.
func TestPgArgs(t *testing.T) {
	in := []any{"k", time.Second, 1500 * time.Nanosecond, int64(7), time.Duration(0)}
	out := pgArgs(in)
	want := []any{"k", int64(1000000), int64(2), int64(7), int64(0)}
	if fmt.Sprint(out) != fmt.Sprint(want) {
		t.Fatalf("pgArgs = %v, want %v", out, want)
	}
	for i := range out {
		if fmt.Sprintf("%T", out[i]) != fmt.Sprintf("%T", want[i]) {
			t.Fatalf("pgArgs[%d] is %T, want %T", i, out[i], want[i])
		}
	}
	if in[1] != time.Second {
		t.Fatal("pgArgs changed its input")
	}
}

func TestPgArrayAndParse(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{pgArray([]string{"a", `b"c`, `d\e`, "", "x,y", "{z}"}), `{"a","b\"c","d\\e","","x,y","{z}"}`},
		{pgArray([]int64{1, -2, math.MaxInt64}), `{1,-2,9223372036854775807}`},
		{pgArray([]int32{3}), `{3}`},
		{pgArray([]string{}), `{}`},
	} {
		if c.got != c.want {
			t.Errorf("pgArray = %s, want %s", c.got, c.want)
		}
	}
	v, err := parseInt64s(`{1,-2,9223372036854775807}`)
	if err != nil || fmt.Sprint(v) != "[1 -2 9223372036854775807]" {
		t.Fatalf("parseInt64s = %v, %v", v, err)
	}
	if v, err := parseInt64s(`{}`); err != nil || len(v) != 0 {
		t.Fatalf("parseInt64s({}) = %v, %v", v, err)
	}
	for _, bad := range []string{"", "{", "1,2", "{1,,2}", "{NULL}", "{1,x}"} {
		if _, err := parseInt64s(bad); err == nil {
			t.Errorf("parseInt64s(%q) accepted", bad)
		}
	}
}

// stateErr is another driver's error carrying a SQLSTATE (lib/pq's *pq.Error
// has the same SQLState method).
type stateErr string

func (e stateErr) Error() string    { return "pq: " + string(e) }
func (e stateErr) SQLState() string { return string(e) }

// The server's SQLSTATE is read from every driver's error type, so lib/pq's
// errors are classified like pgx's.
func TestSQLStateAcrossDrivers(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		err         error
		state       string
		unavailable bool
	}{
		{&pgconn.PgError{Code: "57P01"}, "57P01", true},
		{stateErr("57P01"), "57P01", true},
		{fmt.Errorf("wrapped: %w", stateErr("08006")), "08006", true},
		{stateErr("57014"), "57014", true},
		{stateErr("23505"), "23505", false},
		{stateErr("TS002"), "TS002", false},
		{driver.ErrBadConn, "", true},
		{errors.New("other"), "", false},
	} {
		if got := sqlState(c.err); got != c.state {
			t.Errorf("sqlState(%v) = %q, want %q", c.err, got, c.state)
		}
		if got := unavailable(ctx, c.err); got != c.unavailable {
			t.Errorf("unavailable(%v) = %v, want %v", c.err, got, c.unavailable)
		}
	}
	s := &Store{schema: "tenure"}
	if err := s.wrap(ctx, "op", stateErr("42P01")); !strings.Contains(err.Error(), "run Migrate") {
		t.Errorf("undefined table through another driver: %v, want the Migrate hint", err)
	}
}

// decodeArray decodes the array literals pgArray writes (every element
// quoted), as PostgreSQL's array input does.
func decodeArray(s string) ([]string, error) {
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return nil, errors.New("no braces")
	}
	body := s[1 : len(s)-1]
	out := []string{}
	for i := 0; i < len(body); {
		if body[i] != '"' {
			return nil, fmt.Errorf("unquoted element at %d", i)
		}
		var b strings.Builder
		i++
		for ; i < len(body) && body[i] != '"'; i++ {
			if body[i] == '\\' {
				i++
				if i == len(body) {
					return nil, errors.New("dangling backslash")
				}
			}
			b.WriteByte(body[i])
		}
		if i == len(body) {
			return nil, errors.New("unterminated element")
		}
		out = append(out, b.String())
		i++
		if i < len(body) {
			if body[i] != ',' {
				return nil, errors.New("missing comma")
			}
			i++
			if i == len(body) {
				return nil, errors.New("trailing comma")
			}
		}
	}
	return out, nil
}

// FuzzPgArray: every list of strings survives pgArray as PostgreSQL reads
// the literal back, and lists of integers round-trip through parseInt64s.
func FuzzPgArray(f *testing.F) {
	f.Add("a", `b"c`, int64(1), int64(-2))
	f.Add(`\`, "", int64(math.MaxInt64), int64(math.MinInt64))
	f.Add("x,y", "{}", int64(0), int64(7))
	f.Fuzz(func(t *testing.T, a, b string, x, y int64) {
		in := []string{a, b}
		got, err := decodeArray(pgArray(in))
		if err != nil {
			t.Fatalf("pgArray(%q) = %s: %v", in, pgArray(in), err)
		}
		if len(got) != 2 || got[0] != a || got[1] != b {
			t.Fatalf("pgArray(%q) read back as %q", in, got)
		}
		ints, err := parseInt64s(pgArray([]int64{x, y}))
		if err != nil || len(ints) != 2 || ints[0] != x || ints[1] != y {
			t.Fatalf("ints %d, %d read back as %v, %v", x, y, ints, err)
		}
	})
}
