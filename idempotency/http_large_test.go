package idempotency_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tenurekit/tenure/idempotency"
)

// countingWriter is a ResponseWriter that counts the body bytes it gets
// and keeps none.
type countingWriter struct {
	h      http.Header
	status int
	n      int64
}

func (c *countingWriter) Header() http.Header         { return c.h }
func (c *countingWriter) WriteHeader(code int)        { c.status = code }
func (c *countingWriter) Write(b []byte) (int, error) { c.n += int64(len(b)); return len(b), nil }

// TestMiddlewareLargeResponse: a response over MaxRecordBytes (16 MiB in
// 64 KiB chunks, with the default 1 MiB limit) goes out in full while the
// recorder never holds more than the limit; only its status is recorded,
// and a retry gets 409 ErrResponseNotRecorded without running the handler.
func TestMiddlewareLargeResponse(t *testing.T) {
	s := newMem(t, nil).Idempotency()
	k := newKeeper(t, s, nil)
	const chunk, chunks = 64 << 10, 256
	runs := 0
	peak := 0
	h := middleware(t, k, nil)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusOK)
		buf := bytes.Repeat([]byte("x"), chunk)
		for range chunks {
			w.Write(buf)
			n, ok := idempotency.Buffered(w)
			if !ok {
				t.Fatal("the handler's writer is not the recorder")
			}
			peak = max(peak, n)
		}
	}))
	send := func(w http.ResponseWriter) {
		r := httptest.NewRequest("POST", "/export", nil)
		r.Header.Set(idempotency.HeaderKey, `"big"`)
		h.ServeHTTP(w, r)
	}
	cw := &countingWriter{h: http.Header{}}
	send(cw)
	if cw.status != http.StatusOK || cw.n != chunk*chunks {
		t.Fatalf("client got %d, %d bytes; want 200 and %d bytes", cw.status, cw.n, chunk*chunks)
	}
	if peak > idempotency.DefaultMaxRecordBytes {
		t.Fatalf("the recorder held %d bytes, over the %d limit", peak, idempotency.DefaultMaxRecordBytes)
	}
	rec, err := s.Inspect(t.Context(), idempotency.ID{Scope: idempotency.Scope(credentialless(t), "POST /export"), Key: "big"})
	if err != nil || !rec.Exists || !rec.Completed || len(rec.Outcome.Value) > 64 {
		t.Fatalf("record %v, %d value bytes, %v; want a completed record of the status only", rec.Exists && rec.Completed, len(rec.Outcome.Value), err)
	}
	w := httptest.NewRecorder()
	send(w)
	if w.Code != http.StatusConflict || w.Header().Get(idempotency.HeaderReplayed) != "true" ||
		!bytes.Contains(w.Body.Bytes(), []byte(idempotency.ErrResponseNotRecorded.Error())) || runs != 1 {
		t.Fatalf("retry: %d %v %q, runs %d; want 409 ErrResponseNotRecorded without a run", w.Code, w.Header(), w.Body.String(), runs)
	}

	// At the limit exactly the response is recorded and replayed; one byte
	// more is not.
	for _, tc := range []struct {
		size int
		want int
	}{{10, http.StatusCreated}, {11, http.StatusConflict}} {
		k := newKeeper(t, newMem(t, nil).Idempotency(), nil)
		h := middleware(t, k, &idempotency.HTTPOptions{MaxRecordBytes: 10})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusCreated)
			w.Write(bytes.Repeat([]byte("y"), tc.size-1))
			w.Write([]byte("z"))
		}))
		for i := range 2 {
			r := httptest.NewRequest("POST", "/x", nil)
			r.Header.Set(idempotency.HeaderKey, `"k"`)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if i == 0 && (w.Code != http.StatusCreated || w.Body.Len() != tc.size) {
				t.Fatalf("%d bytes, first: %d %d", tc.size, w.Code, w.Body.Len())
			}
			if i == 1 && w.Code != tc.want {
				t.Fatalf("%d bytes, retry: %d, want %d", tc.size, w.Code, tc.want)
			}
		}
	}
}

// credentialless returns the default principal of a request without
// credentials, as the middleware computes it.
func credentialless(t *testing.T) string {
	t.Helper()
	return idempotency.DefaultPrincipal(nil, httptest.NewRequest("POST", "/", nil))
}
