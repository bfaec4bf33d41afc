package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tenurekit/tenure/internal/serveapi"
)

// decodeBody reads a JSON body into v, refusing unknown fields and
// trailing data. Its errors are invalid and too_large problems.
func decodeBody(r *http.Request, v any) error {
	buf := bodyBufs.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledBody {
			buf.Reset()
			bodyBufs.Put(buf)
		}
	}()
	_, err := buf.ReadFrom(r.Body)
	if err == nil {
		err = serveapi.DecodeStrict(buf.Bytes(), v)
	}
	if err == nil {
		return nil
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return &problemError{serveapi.NewProblem(serveapi.TypeTooLarge, fmt.Sprintf("the body is larger than %d bytes", tooLarge.Limit))}
	}
	if errors.Is(err, io.EOF) {
		err = errors.New("empty body")
	}
	return invalidf("the body is not valid: %v", err)
}

// bodyBufs holds the buffers request bodies are read into; a buffer that
// grew past maxPooledBody is left to the garbage collector.
var bodyBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledBody = 64 << 10

// queryField is a field of a GET operation's input: its parameter name,
// whether it may be left out, and the value it then takes (the tag
// default:"…").
type queryField struct {
	index    int
	name     string
	optional bool
	def      string
	doc      string
	typ      reflect.Type
}

var timeType = reflect.TypeFor[time.Time]()

// queryFields returns the fields of t tagged query:"name" or
// query:"name,omitempty"; it panics on a field of a type queries do not
// carry (string, int and time.Time, RFC 3339).
func queryFields(t reflect.Type) []queryField {
	var fs []queryField
	for i := range t.NumField() {
		f := t.Field(i)
		tag, ok := f.Tag.Lookup("query")
		if !ok {
			panic("server: " + t.Name() + "." + f.Name + " has no query tag")
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Type.Kind() != reflect.String && f.Type.Kind() != reflect.Int && f.Type != timeType {
			panic("server: query parameter " + name + " of type " + f.Type.String())
		}
		fs = append(fs, queryField{index: i, name: name, optional: opts == "omitempty", def: f.Tag.Get("default"), doc: f.Tag.Get("doc"), typ: f.Type})
	}
	return fs
}

// decodeQuery sets the fields of *v from q. An empty or missing parameter
// takes its default; a number or time that does not parse is an invalid
// problem. Other parameters are ignored.
func decodeQuery(q url.Values, fs []queryField, v any) error {
	rv := reflect.ValueOf(v).Elem()
	for _, f := range fs {
		s := q.Get(f.name)
		if s == "" {
			s = f.def
		}
		if s == "" {
			continue
		}
		fv := rv.Field(f.index)
		switch {
		case f.typ == timeType:
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return invalidf("%s %q is not an RFC 3339 time", f.name, s)
			}
			fv.Set(reflect.ValueOf(t))
		case f.typ.Kind() == reflect.Int:
			n, err := strconv.Atoi(s)
			if err != nil {
				return invalidf("%s %q is not a number", f.name, s)
			}
			fv.SetInt(int64(n))
		default:
			fv.SetString(s)
		}
	}
	return nil
}
