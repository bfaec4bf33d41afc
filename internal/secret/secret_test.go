package secret

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

const sample = "s3cr3t-token-text"

type holder struct {
	name string
	tok  Text
}

type Exported struct {
	Name string
	Tok  Text
	in   holder
}

// TestNoFormattingPathReveals prints a Text as a value, a pointer, nested in
// unexported and exported fields, in slices and maps, with every verb, and
// through slog's text and JSON handlers and encoding/json.
func TestNoFormattingPathReveals(t *testing.T) {
	tok := New(sample)
	h := holder{name: "n", tok: tok}
	e := Exported{Name: "n", Tok: tok, in: h}
	values := map[string]any{
		"value":                       tok,
		"pointer":                     &tok,
		"unexported field":            h,
		"pointer to unexported field": &h,
		"exported field":              e,
		"pointer to exported":         &e,
		"slice":                       []Text{tok},
		"slice of structs":            []holder{h},
		"map":                         map[string]holder{"a": h},
		"any in struct":               struct{ v any }{v: h},
	}
	verbs := []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%T", "%d", "%10.3v"}
	for name, v := range values {
		for _, verb := range verbs {
			if out := fmt.Sprintf(verb, v); strings.Contains(out, sample) || strings.Contains(out, fmt.Sprintf("%x", sample)) {
				t.Errorf("%s with %s printed the secret: %s", name, verb, out)
			}
		}
		var buf bytes.Buffer
		slog.New(slog.NewTextHandler(&buf, nil)).Info("m", "v", v)
		slog.New(slog.NewJSONHandler(&buf, nil)).Info("m", "v", v)
		if strings.Contains(buf.String(), sample) {
			t.Errorf("%s through slog printed the secret: %s", name, buf.String())
		}
		if b, err := json.Marshal(v); err == nil && strings.Contains(string(b), sample) {
			t.Errorf("%s through encoding/json wrote the secret: %s", name, b)
		}
	}
	if got := tok.Reveal(); got != sample {
		t.Fatalf("Reveal = %q, want %q", got, sample)
	}
	if !tok.Equal(New(sample)) || tok.Equal(New("other")) {
		t.Fatal("Equal does not compare the text")
	}
	if !(Text{}).IsZero() || !New("").IsZero() || tok.IsZero() {
		t.Fatal("IsZero wrong")
	}
	if (Text{}).Reveal() != "" {
		t.Fatal("zero Text reveals something")
	}
}
