package ratelimit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tenurekit/tenure/internal/limitmem"
)

// TestPermitTokenNeverPrinted: a permit's id (which can release it) shows
// through no fmt verb, on the pointer, the value, or nested in other
// values, nor through slog or encoding/json.
func TestPermitTokenNeverPrinted(t *testing.T) {
	c, err := NewConcurrency(limitmem.New(limitmem.Options{MaxKeys: 10}), ConcurrencyLimit{Permits: 1, TTL: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.TryAcquire(context.Background(), "job")
	if err != nil {
		t.Fatal(err)
	}
	id := p.g.Token()
	if len(id) < 16 {
		t.Fatalf("permit id %q", id)
	}
	type holder struct {
		P     *Permit
		inner struct{ p *Permit }
	}
	h := holder{P: p}
	h.inner.p = p
	values := map[string]any{
		"pointer":         p,
		"value":           reflect.ValueOf(p).Elem(),
		"nested":          h,
		"nested pointer":  &h,
		"slice":           []*Permit{p},
		"map":             map[string]*Permit{"p": p},
		"unexported id":   reflect.ValueOf(p).Elem().FieldByName("g"),
		"interface slice": []any{p, &h},
	}
	var out []string
	for name, v := range values {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T", "%p"} {
			out = append(out, name+" "+verb+": "+fmt.Sprintf(verb, v))
		}
		var text, js bytes.Buffer
		slog.New(slog.NewTextHandler(&text, nil)).Info("m", "v", v, slog.Any("a", v))
		slog.New(slog.NewJSONHandler(&js, nil)).Info("m", "v", v, slog.Any("a", v))
		out = append(out, name+" slog text: "+text.String(), name+" slog json: "+js.String())
		if rv, ok := v.(reflect.Value); !ok || rv.CanInterface() {
			b, err := json.Marshal(v)
			out = append(out, name+" json: "+string(b)+fmt.Sprint(err))
		}
	}
	for _, o := range out {
		if strings.Contains(o, id) {
			t.Errorf("permit id printed: %s", o)
		}
	}
	if err := p.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.Renew(context.Background()); err == nil || strings.Contains(err.Error(), id) {
		t.Fatalf("Renew after release: %v", err)
	}
}
