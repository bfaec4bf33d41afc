package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/tenurekit/tenure/idempotency/driver"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tenurekit/tenure/election"
	"github.com/tenurekit/tenure/idempotency"
	"github.com/tenurekit/tenure/internal/secret"
	"github.com/tenurekit/tenure/internal/serveapi"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/schedule"
	scheddriver "github.com/tenurekit/tenure/schedule/driver"
	"github.com/tenurekit/tenure/server"
	"github.com/tenurekit/tenure/session"
)

// chromiumPath finds the headless browser: $TENURE_CHROMIUM, else
// chromium on PATH. Without one the test skips, or fails under
// TENURE_TEST_REQUIRE=1 (testenv.RequireBinary).
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TENURE_CHROMIUM"); p != "" {
		return p
	}
	return testenv.RequireBinary(t, "chromium")
}

// artifacts is where screenshots go: $TENURE_ARTIFACTS/dashboard if set,
// else a temporary directory of the test.
func artifacts(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if a := os.Getenv("TENURE_ARTIFACTS"); a != "" {
		dir = filepath.Join(a, "dashboard")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// browser starts a headless chromium that makes no connection of its own
// (no first run, background networking, component updates, sync or QUIC)
// with a fresh profile, and returns its context.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoSandbox, // chromium refuses to run as root without it
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1100),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelTab := chromedp.NewContext(actx)
	// The first call starts the browser, which lives as long as that
	// call's context: give it none of the test's deadline.
	if err := chromedp.Do(bctx); err != nil {
		cancelTab()
		cancelAlloc()
		t.Fatalf("chromium did not start: %v", err)
	}
	ctx, cancelTime := context.WithTimeout(bctx, 90*time.Second)
	t.Cleanup(func() { cancelTime(); cancelTab(); cancelAlloc() })
	return ctx
}

// apiPost calls the API with the bearer token.
func apiPost(t *testing.T, base, tok, path string, in, out any) {
	t.Helper()
	b, _ := json.Marshal(in)
	req, _ := http.NewRequest("POST", base+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("POST %s: %d", path, resp.StatusCode)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
}

func shot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Error(err)
	}
	t.Logf("screenshot: %s", p)
}

// ttlMillis reads the countdown shown for key (the milliseconds behind
// the text) and the text itself.
func ttlMillis(t *testing.T, ctx context.Context, key string) (int, string) {
	t.Helper()
	sel := fmt.Sprintf(`tr[data-key=%q] [data-testid=lease-ttl]`, key)
	// The attribute and the text in one read of one node: the page
	// re-renders the row as the countdown runs.
	both := read(t, ctx, sel, `e.dataset.ms + "\n" + e.innerText`)
	ms, text, _ := strings.Cut(both, "\n")
	n, err := strconv.Atoi(ms)
	if err != nil {
		t.Fatalf("countdown %q: %v", ms, err)
	}
	return n, strings.TrimSpace(text)
}

// TestBrowserDashboard drives the dashboard in a real headless chromium:
// log in with the token, watch a lease acquired through the API count
// down and fade out when released, revoke a user's sessions with the
// button, and save screenshots.
func TestBrowserDashboard(t *testing.T) {
	cfg := testConfig()
	cfg.Limits = []server.LimitInfo{{Name: "api", Rate: 10, Period: time.Minute, Description: "public API, per user"},
		{Name: "exports", Algorithm: "fixed-window", Rate: 5, Period: time.Hour}}
	e := newDash(t, &server.Options{Config: cfg, UIRefresh: 500 * time.Millisecond, Version: "tenure v1.2.3 (schema 6, scripts 4f6e969e1404)"})
	ctx := browser(t)
	dir := artifacts(t)
	defer func() {
		if t.Failed() {
			shot(t, ctx, dir, "failure.png")
		}
	}()
	bg := context.Background()

	// Some history for the other panels.
	seedSlots(t, e, "nightly")
	if _, err := e.mem.Idempotency().Begin(bg, driver.Begin{ID: idempotency.ID{Scope: "payments", Key: "order-1042"},
		Fingerprint: "f", Token: secret.New("claim-token-0123456789"), ClaimTTL: 10 * time.Minute, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}

	// Log in through the form.
	if err := chromedp.Do(ctx,
		chromedp.Navigate(e.url+"/"),
		chromedp.WaitVisible(css(`[data-testid=login-token]`)),
	); err != nil {
		t.Fatal(err)
	}
	shot(t, ctx, dir, "login.png")
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(css(`[data-testid=login-token]`), adminTok),
		click(`[data-testid=login-submit]`),
		chromedp.WaitVisible(css(`[data-testid=live].on`)),
	); err != nil {
		t.Fatal(err)
	}
	if who := text(t, ctx, `[data-testid=who]`); who != "admin" {
		t.Fatalf("logged in as %q", who)
	}
	if v := text(t, ctx, `[data-testid=version]`); v != "tenure v1.2.3 (schema 6, scripts 4f6e969e1404)" {
		t.Fatalf("footer shows version %q, want the server's", v)
	}
	// The page's scripts cannot read the login, and keep no token.
	cookie, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.cookie`))
	if err != nil {
		t.Fatal(err)
	}
	storage, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify(localStorage) + JSON.stringify(sessionStorage)`))
	if err != nil {
		t.Fatal(err)
	}
	if cookie != "" || strings.Contains(storage, adminTok) {
		t.Fatalf("script-readable login: cookie %q, storage %q", cookie, storage)
	}

	// A lease acquired through the API shows up with its fence, and its
	// countdown falls. It is released at the end of the test: its TTL
	// outlasts a test slowed down by a busy machine.
	const leaseTTL = 10 * time.Minute
	var g serveapi.LeaseGrant
	apiPost(t, e.url, adminTok, "/v1/leases/acquire", serveapi.AcquireLease{Key: "billing/close-month", TTL: serveapi.Duration(leaseTTL)}, &g)
	apiPost(t, e.url, adminTok, "/v1/leases/acquire", serveapi.AcquireLease{Key: "reports/daily", TTL: serveapi.Duration(2 * time.Minute)}, nil)
	row := `tr[data-key="billing/close-month"]`
	if err := chromedp.Do(ctx, chromedp.WaitVisible(css(row))); err != nil {
		t.Fatal(err)
	}
	// The fence is shown in groups of digits; its exact value is in
	// data-fence.
	if fence := read(t, ctx, row+` [data-testid=lease-fence]`, `e.dataset.fence`); fence != strconv.FormatUint(g.Fence, 10) {
		t.Fatalf("fence shown %q, granted %d", fence, g.Fence)
	}
	if groups := read(t, ctx, row+` [data-testid=lease-fence]`, `[...e.querySelectorAll('.fg')].map((g) => g.textContent).join(' ')`); groups != groupDigits(g.Fence) {
		t.Errorf("fence groups %q, want %q", groups, groupDigits(g.Fence))
	}
	first, firstText := ttlMillis(t, ctx, "billing/close-month")
	if first <= 0 || first > int(leaseTTL/time.Millisecond) {
		t.Fatalf("countdown %d ms (%s), want within (0, %v]", first, firstText, leaseTTL)
	}
	// Wait until the countdown moved by a second, then read it again.
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](fmt.Sprintf(
		`Number(document.querySelector('%s [data-testid=lease-ttl]').dataset.ms) <= %d`, row, first-1000),
		chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
		t.Fatal(err)
	}
	second, secondText := ttlMillis(t, ctx, "billing/close-month")
	if second >= first || secondText == firstText {
		t.Fatalf("countdown did not fall: %d ms (%s), then %d ms (%s)", first, firstText, second, secondText)
	}
	t.Logf("countdown %s, then %s", firstText, secondText)

	// An election's leader shows up in the elections panel, with its term's
	// fence, and leaves it when it resigns.
	el, err := election.New(e.mem.Leases(), "settlement", &election.Options{Holder: "worker-7", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	term, err := el.Campaign(bg)
	if err != nil {
		t.Fatal(err)
	}
	erow := `tr[data-testid=election-row][data-name="settlement"]`
	if err := chromedp.Do(ctx, chromedp.WaitVisible(css(erow))); err != nil {
		t.Fatal(err)
	}
	if leader, fence := text(t, ctx, erow+` [data-testid=election-leader]`), read(t, ctx, erow+` [data-testid=election-fence]`, `e.dataset.fence`); leader != "worker-7" || fence != strconv.FormatUint(term.Fence(), 10) {
		t.Fatalf("elections panel: leader %q, fence %q; want worker-7 and %d", leader, fence, term.Fence())
	}
	shot(t, ctx, dir, "elections.png")
	if err := term.Resign(bg); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.querySelector('tr[data-testid=election-row][data-name="settlement"]') === null`,
		chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
		t.Fatal(err)
	}

	// Sessions, with a rate limit and a job's slots watched next to them.
	var alice []serveapi.SessionRecord
	for range 4 {
		var rec serveapi.SessionRecord
		apiPost(t, e.url, adminTok, "/v1/sessions", serveapi.SessionCreate{UserID: "alice", Values: map[string]string{"cart": "3"},
			Idle: serveapi.Duration(30 * time.Minute), Absolute: serveapi.Duration(8 * time.Hour)}, &rec)
		alice = append(alice, rec)
	}
	for range 4 {
		apiPost(t, e.url, adminTok, "/v1/rate/allow", serveapi.RateAllow{Requests: []serveapi.RateRequest{{Key: "user-42",
			Limit: &serveapi.Limit{Name: "api", Rate: 10, Period: serveapi.Duration(time.Minute)}}}}, nil)
	}
	// The limit, the job and the user are chosen from what the server
	// offers (api/discover), not typed.
	if err := chromedp.Do(ctx,
		chromedp.WaitVisible(css(`[data-testid=lim-summary]`)),
		chromedp.WaitNotVisible(css(`#lim-name`)),
	); err != nil {
		t.Fatal(err)
	}
	if sum := text(t, ctx, `[data-testid=lim-summary]`); sum != "gcra · 10 per 1m — public API, per user" {
		t.Errorf("chosen limit shown as %q", sum)
	}
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(css(`#lim-key`), "user-42"),
		click(`#limit-form button[type=submit]`),
		chromedp.WaitVisible(css(`[data-testid=limit-row]`)),
		click(`[data-testid=job-chip][data-job="nightly"]`),
		chromedp.WaitVisible(css(`[data-testid=slot-row]`)),
		// alice's sessions were made after the page read its choices.
		click(`#user-chips [data-testid=discover-refresh]`),
		click(`[data-testid=user-chip][data-user="alice"]`),
		poll(`document.querySelectorAll('[data-testid=session-row]').length === 4`),
		chromedp.WaitVisible(css(`[data-testid=idem-row]`)),
	); err != nil {
		t.Fatal(err)
	}
	if job, user := read(t, ctx, `[data-testid=job-input]`, `e.value`), read(t, ctx, `[data-testid=user-input]`, `e.value`); job != "nightly" || user != "alice" {
		t.Errorf("the chips filled job %q and user %q", job, user)
	}
	if n := text(t, ctx, `[data-testid=user-chip][data-user="alice"] .n`); n != "4" {
		t.Errorf("alice's chip counts %q sessions, want 4", n)
	}
	// The slot retried after a failure lists both attempts.
	if at := text(t, ctx, `[data-testid=attempts]`); !strings.Contains(at, "failed · on node-a") || !strings.Contains(at, "upstream timeout") || !strings.Contains(at, "done · on node-b") {
		t.Errorf("attempts shown: %q", at)
	}
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('[data-testid=slot]').length`)); err != nil || n != 8 {
		t.Errorf("timeline shows %d slots (%v), want 8", n, err)
	}
	if lt := text(t, ctx, `[data-testid=limit-row]`); !strings.Contains(lt, "6 / 10") {
		t.Errorf("limit row %q, want 6 / 10 left", lt)
	}
	shot(t, ctx, dir, "dashboard.png")

	// Session IDs are shown short, as the CLI prints them, the full ID in
	// the title.
	for i, rec := range alice {
		sel := fmt.Sprintf(`tr[data-id=%q] [data-testid=session-short]`, rec.ID)
		if short, full := text(t, ctx, sel), read(t, ctx, sel, `e.title`); short != session.ID(rec.ID).Short() || full != rec.ID {
			t.Errorf("session %d shown as %q (title %q), want %q (%q)", i, short, full, session.ID(rec.ID).Short(), rec.ID)
		}
	}

	checkNarrowLayout(t, ctx, dir)
	resolveWhileRefreshing(t, ctx, e, dir)
	revokePinned(t, ctx, e, dir, alice)

	// Revoke all of alice's sessions: a dialog names the user and the
	// count, then the list empties, and so does the store.
	if err := chromedp.Do(ctx,
		click(`[data-testid=revoke-user]`),
		chromedp.WaitVisible(css(`[data-testid=confirm-dialog]`)),
	); err != nil {
		t.Fatal(err)
	}
	if u, n := text(t, ctx, `[data-testid=confirm-user]`), text(t, ctx, `[data-testid=confirm-count]`); u != "alice" || n != "2" {
		t.Errorf("revoke-all dialog names user %q with %q sessions, want alice and 2", u, n)
	}
	if err := chromedp.Do(ctx,
		click(`[data-testid=confirm-ok]`),
		chromedp.WaitVisible(css(`[data-testid=sessions-empty]`)),
		poll(`document.querySelectorAll('[data-testid=session-row]').length === 0`),
	); err != nil {
		t.Fatal(err)
	}
	if recs, err := e.mem.Sessions().List(bg, "alice"); err != nil || len(recs) != 0 {
		t.Fatalf("alice's sessions in the store after revoke: %d, %v", len(recs), err)
	}

	// A released lease fades out as released.
	apiPost(t, e.url, adminTok, "/v1/leases/release", serveapi.LeaseToken{Key: "billing/close-month", Token: g.Token}, nil)
	if err := chromedp.Do(ctx, chromedp.WaitVisible(css(row+`.gone`))); err != nil {
		t.Fatal(err)
	}
	if state := text(t, ctx, row+` [data-testid=lease-state]`); state != "released" {
		t.Errorf("released lease shows %q", state)
	}
	shot(t, ctx, dir, "after-revoke.png")

	// Logging out returns to the login form.
	if err := chromedp.Do(ctx,
		click(`[data-testid=logout]`),
		chromedp.WaitVisible(css(`[data-testid=login-token]`)),
	); err != nil {
		t.Fatal(err)
	}
}

func css(sel string) chromedp.CSS { return chromedp.CSS(sel) }

// click clicks the first element that matches sel, again when the page
// replaced the node between finding it and clicking it (a re-render).
func click(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		var err error
		for range 5 {
			if _, err = chromedp.Click(css(sel))(ctx, tg); err == nil || !strings.Contains(err.Error(), "No node with given id") {
				return err
			}
		}
		return err
	})
}

// poll waits until the expression is true.
func poll(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond))(ctx, tg)
		return err
	})
}

// text reads the text of the first element that matches sel.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	return strings.TrimSpace(read(t, ctx, sel, `e.innerText`))
}

// read waits for an element that matches sel and evaluates expr on it (as
// e) in the page, in one step: the dashboard replaces its nodes when it
// re-renders, so a node found by one call may be gone by the next.
func read(t *testing.T, ctx context.Context, sel, expr string) string {
	t.Helper()
	q, err := json.Marshal(sel)
	if err != nil {
		t.Fatal(err)
	}
	// The marker keeps an empty text truthy, which Poll waits for.
	js := `(() => { const e = document.querySelector(` + string(q) + `); return e ? "=" + (` + expr + `) : null })()`
	s, err := chromedp.Run(ctx, chromedp.Poll[string](js, chromedp.WithPollingInterval(50*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(s, "=")
}

// seedSlots records a few slots of job: done ones, one that failed and
// was retried, and one that failed for good.
func seedSlots(t *testing.T, e *dashEnv, job string) {
	t.Helper()
	ctx := context.Background()
	st := e.mem.Schedules()
	now := time.Now().Truncate(time.Minute)
	attempt := func(slot time.Time, node string, state schedule.State, msg string, retry time.Duration) {
		id := slot.UTC().Format(time.RFC3339)
		g, err := e.mem.Leases().Acquire(ctx, scheddriver.ClaimKey(job, id), "claim-"+node+id, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Begin(ctx, scheddriver.BeginRequest{Job: job, SlotID: id, SlotTime: slot, Node: node, Fence: g.Fence}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Finish(ctx, scheddriver.FinishRequest{Job: job, SlotID: id, Fence: g.Fence, State: state, Error: msg, RetryAfter: retry}); err != nil {
			t.Fatal(err)
		}
		if err := e.mem.Leases().Release(ctx, scheddriver.ClaimKey(job, id), "claim-"+node+id); err != nil {
			t.Fatal(err)
		}
	}
	for i := 8; i >= 1; i-- {
		slot := now.Add(-time.Duration(i) * 10 * time.Minute)
		switch i {
		case 5:
			attempt(slot, "node-a", schedule.Failed, "upstream timeout", time.Millisecond)
			time.Sleep(5 * time.Millisecond) // the retry is due
			attempt(slot, "node-b", schedule.Done, "", 0)
		case 3:
			attempt(slot, "node-b", schedule.Failed, "disk full", 0)
		default:
			attempt(slot, "node-a", schedule.Done, "", 0)
		}
	}
}

// groupDigits writes n in groups of three digits, separated by spaces.
func groupDigits(n uint64) string {
	s := strconv.FormatUint(n, 10)
	var g []string
	for len(s) > 3 {
		g = append([]string{s[len(s)-3:]}, g...)
		s = s[:len(s)-3]
	}
	return strings.Join(append([]string{s}, g...), " ")
}

// snapshots is how many snapshots the page has rendered.
func snapshots(t *testing.T, ctx context.Context) int {
	t.Helper()
	n, err := strconv.Atoi(read(t, ctx, `body`, `e.dataset.snapshots || "0"`))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// afterSnapshots waits until the page rendered at least two snapshots
// more than n: one that may have been under way, and a whole one after.
func afterSnapshots(n int) chromedp.Action[chromedp.Void] {
	return poll(fmt.Sprintf(`Number(document.body.dataset.snapshots || 0) >= %d`, n+2))
}

// checkNarrowLayout looks at the page on a 360x740 screen (a small
// phone): the header wraps with Log out fully visible, the page does not
// scroll sideways (tables scroll in their cards), and no table cell is
// squeezed to a few letters.
func checkNarrowLayout(t *testing.T, ctx context.Context, dir string) {
	t.Helper()
	type size struct{ W, H int64 }
	was, err := chromedp.Run(ctx, chromedp.Evaluate[size](`({ W: innerWidth, H: innerHeight })`))
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(360, 740)); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(was.W, was.H), poll(fmt.Sprintf(`innerWidth === %d`, was.W))); err != nil {
			t.Error(err)
		}
	}()
	if err := chromedp.Do(ctx, poll(`innerWidth === 360`), afterSnapshots(snapshots(t, ctx)),
		chromedp.Evaluate[chromedp.Void](`scrollTo(0, 0)`), poll(`scrollY === 0`)); err != nil {
		t.Fatal(err)
	}
	shot(t, ctx, dir, "narrow-360.png")
	type box struct{ Left, Right, Top, Bottom, VW, VH float64 }
	b, err := chromedp.Run(ctx, chromedp.Evaluate[box](`(() => {
		const r = document.querySelector('[data-testid=logout]').getBoundingClientRect();
		return { Left: r.left, Right: r.right, Top: r.top, Bottom: r.bottom, VW: document.documentElement.clientWidth, VH: innerHeight };
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	if b.Left < 0 || b.Top < 0 || b.Right > b.VW || b.Bottom > b.VH || b.Right-b.Left < 20 {
		t.Errorf("Log out at %+v, not inside the %vx%v viewport", b, b.VW, b.VH)
	}
	if w, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`document.documentElement.scrollWidth`)); err != nil || w > 360 {
		t.Errorf("the page is %v px wide (%v) on a 360 px screen", w, err)
	}
	// A cell with text is at least about four characters wide.
	narrow, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('td')]
		.filter((td) => td.offsetParent !== null && td.innerText.trim().length >= 4)
		.filter((td) => td.getBoundingClientRect().width < 4 * parseFloat(getComputedStyle(td).fontSize) * 0.55)
		.map((td) => td.innerText.trim().slice(0, 40) + ' (' + Math.round(td.getBoundingClientRect().width) + 'px)')`))
	if err != nil {
		t.Fatal(err)
	}
	if len(narrow) > 0 {
		t.Errorf("table cells squeezed below four characters: %q", narrow)
	}
	// The tables that do not fit scroll in their card.
	overflow, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('table')]
		.filter((tb) => tb.offsetParent !== null && tb.closest('.scroll') === null)
		.map((tb) => tb.className)`))
	if err != nil || len(overflow) > 0 {
		t.Errorf("tables outside a scrolling box: %q (%v)", overflow, err)
	}
}

// resolveWhileRefreshing records a result for the in-progress record
// payments/order-1042 through its form while snapshots keep arriving: the
// typed text survives them, an empty result is refused, the dialog shows
// what will be recorded, and the store gets exactly the typed bytes.
func resolveWhileRefreshing(t *testing.T, ctx context.Context, e *dashEnv, dir string) {
	t.Helper()
	bg := context.Background()
	id := idempotency.ID{Scope: "payments", Key: "order-1042"}
	rec := `tr[data-testid=idem-row][data-key="order-1042"]`
	if err := chromedp.Do(ctx,
		click(rec+` [data-testid=idem-resolve-open]`),
		chromedp.WaitVisible(css(`[data-testid=idem-value]`)),
	); err != nil {
		t.Fatal(err)
	}
	// Recording with nothing typed is refused in the page.
	if err := chromedp.Do(ctx,
		click(`[data-testid=idem-resolve]`),
		chromedp.WaitVisible(css(`[data-testid=idem-form-note].error`)),
	); err != nil {
		t.Fatal(err)
	}
	if msg := text(t, ctx, `[data-testid=idem-form-note]`); !strings.Contains(msg, "empty") {
		t.Errorf("empty result refused with %q", msg)
	}
	if open, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('[data-testid=confirm-dialog]').open`)); err != nil || open {
		t.Errorf("an empty result opened the confirmation (%v)", err)
	}
	// Type in two parts, with refreshes during and after.
	const part1, part2 = `{"status":"paid",`, `"receipt":"R-77","note":"café ☕"}`
	if err := chromedp.Do(ctx, chromedp.SendKeys(css(`[data-testid=idem-value]`), part1)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, afterSnapshots(snapshots(t, ctx))); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.SendKeys(css(`[data-testid=idem-value]`), part2)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, afterSnapshots(snapshots(t, ctx))); err != nil {
		t.Fatal(err)
	}
	want := part1 + part2
	if v := read(t, ctx, `[data-testid=idem-value]`, `e.value`); v != want {
		t.Fatalf("after refreshes the result box holds %q, want %q", v, want)
	}
	if f, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.activeElement === document.querySelector('[data-testid=idem-value]')`)); err != nil || !f {
		t.Errorf("the result box lost focus in a refresh (%v)", err)
	}
	shot(t, ctx, dir, "resolve-form.png")
	// The dialog says exactly what will be recorded.
	if err := chromedp.Do(ctx,
		click(`[data-testid=idem-resolve]`),
		chromedp.WaitVisible(css(`[data-testid=confirm-dialog]`)),
	); err != nil {
		t.Fatal(err)
	}
	wantBytes := fmt.Sprintf("%d bytes", len(want))
	if got := text(t, ctx, `[data-testid=confirm-bytes]`); !strings.HasPrefix(got, wantBytes) {
		t.Errorf("dialog says %q, want %s", got, wantBytes)
	}
	if got := text(t, ctx, `[data-testid=confirm-record]`); got != "payments / order-1042" {
		t.Errorf("dialog names record %q", got)
	}
	if got := text(t, ctx, `[data-testid=confirm-state]`); got != "in-progress → completed" {
		t.Errorf("dialog names state %q", got)
	}
	if got := read(t, ctx, `[data-testid=confirm-preview]`, `e.textContent`); got != want {
		t.Errorf("dialog previews %q, want %q", got, want)
	}
	shot(t, ctx, dir, "resolve-confirm.png")
	// A refresh while the dialog is open changes nothing in it.
	if err := chromedp.Do(ctx, afterSnapshots(snapshots(t, ctx))); err != nil {
		t.Fatal(err)
	}
	if r, _ := e.mem.Idempotency().Inspect(bg, id); !r.Exists || r.Completed {
		t.Fatalf("recorded before the dialog was confirmed: %+v", r)
	}
	if err := chromedp.Do(ctx,
		click(`[data-testid=confirm-ok]`),
		poll(`document.querySelector('tr[data-testid=idem-row][data-key="order-1042"]') === null`),
	); err != nil {
		t.Fatal(err)
	}
	r, err := e.mem.Idempotency().Inspect(bg, id)
	if err != nil || !r.Completed || string(r.Outcome.Value) != want {
		t.Fatalf("after resolve the store holds %+v (%v), want the value %q", r, err, want)
	}
}

// revokePinned revokes one of alice's sessions from its row while the
// rows shift under it (another session revoked meanwhile): the dialog
// names the session of the row clicked, and exactly that one ends. A
// cancelled dialog revokes nothing.
func revokePinned(t *testing.T, ctx context.Context, e *dashEnv, dir string, alice []serveapi.SessionRecord) {
	t.Helper()
	bg := context.Background()
	second := `tr[data-testid=session-row]:nth-child(2)`
	// Cancel first.
	target := read(t, ctx, second, `e.dataset.id`)
	if err := chromedp.Do(ctx,
		click(second+` [data-testid=revoke-session]`),
		chromedp.WaitVisible(css(`[data-testid=confirm-dialog]`)),
		click(`[data-testid=confirm-cancel]`),
		poll(`!document.querySelector('[data-testid=confirm-dialog]').open`),
		afterSnapshots(snapshots(t, ctx)),
	); err != nil {
		t.Fatal(err)
	}
	if recs, err := e.mem.Sessions().List(bg, "alice"); err != nil || len(recs) != 4 {
		t.Fatalf("a cancelled revoke: alice has %d sessions (%v), want 4", len(recs), err)
	}
	// Now the second row's session, with the first revoked elsewhere
	// while the dialog is open: the rows move up, the target stays.
	if err := chromedp.Do(ctx,
		click(second+` [data-testid=revoke-session]`),
		chromedp.WaitVisible(css(`[data-testid=confirm-dialog]`)),
	); err != nil {
		t.Fatal(err)
	}
	short := session.ID(target).Short()
	if got := text(t, ctx, `[data-testid=confirm-session]`); got != short {
		t.Fatalf("dialog names session %q, the row clicked holds %q", got, short)
	}
	if got := text(t, ctx, `[data-testid=confirm-user]`); got != "alice" {
		t.Errorf("dialog names user %q", got)
	}
	first := alice[0].ID
	if first == target {
		t.Fatalf("the second row holds the first session")
	}
	apiPost(t, e.url, adminTok, "/v1/sessions/revoke", serveapi.SessionRef{ID: first}, nil)
	if err := chromedp.Do(ctx, poll(`document.querySelectorAll('[data-testid=session-row]').length === 3`)); err != nil {
		t.Fatal(err)
	}
	shot(t, ctx, dir, "revoke-confirm.png")
	if got := text(t, ctx, `[data-testid=confirm-session]`); got != short {
		t.Fatalf("after the rows moved the dialog names %q, want %q", got, short)
	}
	if err := chromedp.Do(ctx,
		click(`[data-testid=confirm-ok]`),
		poll(`document.querySelectorAll('[data-testid=session-row]').length === 2`),
	); err != nil {
		t.Fatal(err)
	}
	recs, err := e.mem.Sessions().List(bg, "alice")
	if err != nil || len(recs) != 2 {
		t.Fatalf("alice has %d sessions (%v), want 2", len(recs), err)
	}
	for _, r := range recs {
		if string(r.ID) == target || string(r.ID) == first {
			t.Fatalf("session %s still there", r.ID.Short())
		}
	}
}
