package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/store/memstore"
)

// A retried request runs once; the retry replays the recorded result, and
// reusing the key with other input is refused.
func Example() {
	ctx := context.Background()
	store, err := memstore.New(nil) // or sqlitestore, pgstore, redisstore
	if err != nil {
		fmt.Println(err)
		return
	}
	k, err := idempotency.New(store.Idempotency(), nil)
	if err != nil {
		fmt.Println(err)
		return
	}

	charge := func(amount string) idempotency.Request {
		return idempotency.Request{
			Scope:       "user:42 POST /charges",
			Key:         "6f1c2a9e-charge-1",
			Fingerprint: idempotency.Fingerprint([]byte(amount)),
		}
	}
	runs := 0
	fn := func(ctx context.Context, c *idempotency.Claim) ([]byte, error) {
		runs++ // charge the card here, passing c.Fence() to its guard
		return []byte(`{"charge":"ch_1","amount":1000}`), nil
	}

	first, _ := k.Do(ctx, charge("1000"), fn)
	retry, _ := k.Do(ctx, charge("1000"), fn)
	_, err = k.Do(ctx, charge("9999"), fn)

	fmt.Println(string(first.Value), first.Replayed)
	fmt.Println(string(retry.Value), retry.Replayed)
	fmt.Println(errors.Is(err, idempotency.ErrMismatch), runs)
	// Output:
	// {"charge":"ch_1","amount":1000} false
	// {"charge":"ch_1","amount":1000} true
	// true 1
}

// Errors release the claim (the retry runs again) unless marked final:
// a final error is recorded and replayed.
func ExampleFinal() {
	ctx := context.Background()
	mem, err := memstore.New(nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	k, err := idempotency.New(mem.Idempotency(), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	req := idempotency.Request{Scope: "user:42 POST /charges", Key: "k-2"}

	_, err = k.Do(ctx, req, func(context.Context, *idempotency.Claim) ([]byte, error) {
		return nil, errors.New("gateway timeout") // released: retry runs again
	})
	fmt.Println(err)
	_, err = k.Do(ctx, req, func(context.Context, *idempotency.Claim) ([]byte, error) {
		return []byte(`{"error":"card_declined"}`), idempotency.Final(errors.New("card declined"))
	})
	fmt.Println(err)
	res, err := k.Do(ctx, req, func(context.Context, *idempotency.Claim) ([]byte, error) {
		panic("not run: the final error is replayed")
	})
	var final *idempotency.FinalError
	fmt.Println(string(res.Value), res.Replayed, errors.As(err, &final), err)
	// Output:
	// gateway timeout
	// card declined
	// {"error":"card_declined"} true true card declined
}

// The HTTP middleware implements the IETF Idempotency-Key draft: the first
// response is recorded and replayed byte for byte with Idempotent-Replayed.
func ExampleKeeper_Middleware() {
	mem, err := memstore.New(nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	k, err := idempotency.New(mem.Idempotency(), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	mux := http.NewServeMux()
	mw, err := k.Middleware(&idempotency.HTTPOptions{
		// Part of every record's scope, so users' keys never meet.
		Principal: func(r *http.Request) string { return r.Header.Get("X-User") },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	orders := 0
	mux.Handle("POST /orders", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		orders++
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", fmt.Sprintf("/orders/%d", orders))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"order":%d}`, orders)
	})))

	send := func(key, body string) {
		r := httptest.NewRequest("POST", "/orders", strings.NewReader(body))
		r.Header.Set("X-User", "alice")
		if key != "" {
			r.Header.Set(idempotency.HeaderKey, key)
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		b, _ := io.ReadAll(w.Body)
		fmt.Println(w.Code, w.Header().Get("Location"), w.Header().Get(idempotency.HeaderReplayed), strings.TrimSpace(string(b)))
	}
	send(`"order-7"`, `{"item":"tea"}`)
	send(`"order-7"`, `{"item":"tea"}`)
	send(`"order-7"`, `{"item":"coffee"}`)
	send(``, `{"item":"tea"}`)
	// Output:
	// 201 /orders/1  {"order":1}
	// 201 /orders/1 true {"order":1}
	// 422   {"detail":"idempotency: key reused with different input","status":422,"title":"Unprocessable Entity","type":"about:blank"}
	// 400   {"detail":"idempotency: missing Idempotency-Key header","status":400,"title":"Bad Request","type":"about:blank"}
}
