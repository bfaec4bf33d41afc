package serveapi

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// wireTypes are the API's bodies, both ways.
var wireTypes = []any{
	Problem{}, AcquireLease{}, LeaseGrant{}, LeaseToken{}, LeaseInfo{}, LeaseList{}, FencedWrite{},
	FencedHolderWrite{}, FencedValue{}, IdemBegin{}, IdemRequest{}, IdemOutcome{}, IdemBegun{}, IdemClaim{},
	IdemRecord{}, StateKey{}, Limit{}, RateRequest{}, RateAllow{}, RateDecision{}, RateDecisions{}, RateReset{},
	Permit{}, PermitGrant{}, SessionCreate{}, SessionRef{}, SessionValueWrite{}, SessionValue{},
	SessionRecord{}, SessionTouched{}, SessionList{}, UserRef{}, Revoked{},
}

// fill sets every field of v to a value that depends on seed: strings with
// characters JSON escapes, HTML characters and non-ASCII text, negative and
// large numbers, times in other zones, slices of two elements.
func fill(v reflect.Value, seed int) {
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), seed)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 12, 6, 12, 30, seed, 123456789*(seed%2), time.FixedZone("X", 3600*(seed%3)))))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), seed+i)
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes([]byte{0, 1, byte(seed), '<', 0xff})
			return
		}
		s := reflect.MakeSlice(v.Type(), 2, 2)
		fill(s.Index(0), seed+1)
		fill(s.Index(1), seed+2)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for i := range 3 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(k, seed+7*i)
			fill(e, seed+i)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.String:
		v.SetString([]string{"plain", `q"uo\te <b>&amp;` + "\u2028\t", "é ü 日本 \x7f", ""}[seed%4] + strings.Repeat("x", seed%3))
	case reflect.Bool:
		v.SetBool(seed%2 == 1)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if v.Type() == reflect.TypeFor[Duration]() || v.Type() == reflect.TypeFor[time.Duration]() {
			v.SetInt(int64(1500*time.Millisecond) + int64(seed)*int64(time.Microsecond))
			return
		}
		v.SetInt(int64(seed*seed) - 7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(seed) * 1e12)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(seed) / 3)
	case reflect.Interface:
		v.Set(reflect.ValueOf(map[string]any{"a": seed, "b": "<x>"}))
	}
}

// Marshal writes exactly what encoding/json writes, and DecodeStrict reads
// it back to the same value encoding/json reads.
func TestCodecMatchesEncodingJSON(t *testing.T) {
	for _, w := range wireTypes {
		typ := reflect.TypeOf(w)
		for seed := range 6 {
			v := reflect.New(typ)
			if seed > 0 { // seed 0: the zero value
				fill(v.Elem(), seed)
			}
			want, err := json.Marshal(v.Interface())
			if err != nil {
				t.Fatalf("%v: %v", typ, err)
			}
			got, err := Marshal(v.Interface())
			if err != nil {
				t.Fatalf("%v: Marshal: %v", typ, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%v seed %d: Marshal wrote\n%s\nencoding/json writes\n%s", typ, seed, got, want)
			}
			std, fast := reflect.New(typ), reflect.New(typ)
			if err := json.Unmarshal(want, std.Interface()); err != nil {
				t.Fatalf("%v: %v", typ, err)
			}
			if err := DecodeStrict(append(want, " \n"...), fast.Interface()); err != nil {
				t.Fatalf("%v seed %d: DecodeStrict: %v", typ, seed, err)
			}
			if !reflect.DeepEqual(fast.Interface(), std.Interface()) {
				t.Fatalf("%v seed %d: DecodeStrict read %+v, encoding/json %+v", typ, seed, fast.Elem(), std.Elem())
			}
			un := reflect.New(typ)
			if err := Unmarshal(want, un.Interface()); err != nil || !reflect.DeepEqual(un.Interface(), std.Interface()) {
				t.Fatalf("%v seed %d: Unmarshal read %+v (%v), encoding/json %+v", typ, seed, un.Elem(), err, std.Elem())
			}
		}
	}
}

// A body that does not decode gets encoding/json's own message, which
// quotes no part of the body.
func TestDecodeStrictErrors(t *testing.T) {
	for _, in := range []string{
		``, `   `, `{"requests":[{"key":1}]}`, `{"bogus":"secret-token-value"}`, `{"requests":[`,
		`{"requests":[{"limit":{"period":"xx"}}]}`, `{"requests":[{"limit":{"period":5}}]}`,
		`{"requests":[{"limit":{"rate":"secret-token-value"}}]}`, `[1]`, `{"requests":null} x`,
		`{"requests":null}{"requests":null}`, `{"requests":[{"limit":{"rate":1e99}}]}`, `nul`,
	} {
		var fast, std RateAllow
		got := DecodeStrict([]byte(in), &fast)
		dec := json.NewDecoder(strings.NewReader(in))
		dec.DisallowUnknownFields()
		want := dec.Decode(&std)
		if want == nil && dec.More() {
			want = errTrailing
		}
		if want == nil {
			t.Fatalf("%q decodes with encoding/json", in)
		}
		if got == nil || got.Error() != want.Error() {
			t.Errorf("%q: DecodeStrict %v, encoding/json %v", in, got, want)
		}
		if got != nil && strings.Contains(got.Error(), "secret-token-value") {
			t.Errorf("%q: the error quotes the body: %v", in, got)
		}
	}
}
