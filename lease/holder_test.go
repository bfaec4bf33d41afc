package lease_test

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
)

func TestLockerHolderOption(t *testing.T) {
	s := newMem(t, nil)
	if _, err := lease.New(s.Leases(), &lease.Options{Holder: "bad\nholder"}); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("bad holder: %v, want ErrInvalid", err)
	}
	lk, err := lease.New(s.Leases(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if h := lk.Holder(); h != lease.DefaultHolder() || !strings.HasSuffix(h, "-"+strconv.Itoa(os.Getpid())) {
		t.Fatalf("default holder %q", h)
	}
	l, err := lk.TryAcquire(t.Context(), "k", 10e9)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := s.Leases().Inspect(t.Context(), "k")
	if info.Holder != lk.Holder() {
		t.Fatalf("stored holder %q, want %q", info.Holder, lk.Holder())
	}
	other, _ := lease.New(s.Leases(), &lease.Options{Holder: "-"})
	_, err = other.TryAcquire(t.Context(), "k", 10e9)
	var held *lease.HeldError
	if !errors.As(err, &held) || held.Holder != lk.Holder() || !strings.Contains(err.Error(), lk.Holder()) {
		t.Fatalf("busy key: %v, want a HeldError naming %q", err, lk.Holder())
	}
	if strings.Contains(err.Error(), l.Token().Reveal()) {
		t.Fatal("the token is in the error")
	}
	l.Release(t.Context())
	l2, err := other.TryAcquire(t.Context(), "k", 10e9)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(t.Context())
	if info, _ := s.Leases().Inspect(t.Context(), "k"); info.Holder != "" || other.Holder() != "" {
		t.Fatalf(`Holder "-" stored %q`, info.Holder)
	}
}

// FuzzValidateHolder: an accepted description is short printable UTF-8;
// cutting the default at any length never yields an invalid one.
func FuzzValidateHolder(f *testing.F) {
	for _, s := range []string{"", "node-1", "ünïcödé ✓", "tab\there", "\x00", "\xff\xfe", strings.Repeat("a", 129)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := leasedriver.ValidateHolder(s)
		ok := len(s) <= lease.MaxHolderLen && utf8.ValidString(s)
		for _, r := range s {
			ok = ok && unicode.IsPrint(r)
		}
		if (err == nil) != ok {
			t.Fatalf("ValidateHolder(%q) = %v, want ok=%v", s, err, ok)
		}
		if err != nil && !errors.Is(err, lease.ErrInvalid) {
			t.Fatalf("error %v does not wrap ErrInvalid", err)
		}
	})
}
