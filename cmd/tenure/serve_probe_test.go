package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tenurekit/tenure/client"
	"github.com/tenurekit/tenure/fence"
	"github.com/tenurekit/tenure/internal/testenv"
	"github.com/tenurekit/tenure/lease"
)

// The probe's child processes are this test binary started again with
// probeRole set: a tenure serve instance, or a client that increments a
// counter through the API.
const probeRole = "TENURE_PROBE_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(probeRole) {
	case "serve":
		os.Exit(probeServe())
	case "client":
		os.Exit(probeClient())
	}
	testenv.Main(m)
}

// probeServe is one tenure serve instance: the command line itself, with
// the arguments in TENURE_PROBE_ARGS (one per line).
func probeServe() int {
	root := newRoot()
	root.SetArgs(strings.Split(os.Getenv("TENURE_PROBE_ARGS"), "\n"))
	if err := root.Execute(); err != nil {
		return 1
	}
	return 0
}

// probeTTL is the clients' lease time.
const probeTTL = 500 * time.Millisecond

// probeClient increments the counter TENURE_PROBE_NAME under leases on
// TENURE_PROBE_KEY, through the instances in TENURE_PROBE_URLS in turn:
// acquire, read, think, write the value read plus one, release. The write
// is fencedHolderWrite (mode "holder") or fencedWrite (mode "fenced": the
// max-fence guard alone). It reports each step on stdout: "read", then
// "sent" before the write and "ack", "refused" or "unknown" after it.
func probeClient() int {
	urls := strings.Split(os.Getenv("TENURE_PROBE_URLS"), ",")
	key, name, mode := os.Getenv("TENURE_PROBE_KEY"), os.Getenv("TENURE_PROBE_NAME"), os.Getenv("TENURE_PROBE_MODE")
	var cs []*client.Client
	var lks []*lease.Locker
	for _, u := range urls {
		c, err := client.New(u, &client.Options{Token: os.Getenv("TENURE_PROBE_TOKEN")})
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		lk, err := lease.New(c.Leases(), &lease.Options{RetryMin: 5 * time.Millisecond, RetryMax: 50 * time.Millisecond})
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		cs, lks = append(cs, c), append(lks, lk)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(os.Getpid())))
	for i := rng.IntN(len(cs)); ; i++ {
		c, lk := cs[i%len(cs)], lks[i%len(cs)]
		call := func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 2*time.Second)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		l, err := lk.Acquire(ctx, key, probeTTL)
		cancel()
		if err != nil {
			continue // an instance down or paused: the next one
		}
		ctx, cancel = call()
		b, _, err := c.FencedRead(ctx, name)
		cancel()
		if err != nil {
			l.Release(context.Background())
			continue
		}
		n := 0
		if len(b) > 0 {
			if n, err = strconv.Atoi(string(b)); err != nil {
				fmt.Println("error", err)
				return 1
			}
		}
		fmt.Println("read", l.Fence())
		time.Sleep(100*time.Millisecond + time.Duration(rng.Int64N(int64(200*time.Millisecond))))
		v := []byte(strconv.Itoa(n + 1))
		fmt.Println("sent")
		ctx, cancel = call()
		if mode == "holder" {
			err = c.HolderWrite(ctx, l, name, v)
		} else {
			err = c.FencedWrite(ctx, name, l.Fence(), v)
		}
		cancel()
		switch {
		case err == nil:
			fmt.Println("ack")
		case errors.Is(err, lease.ErrNotHeld), errors.Is(err, fence.ErrStale):
			fmt.Println("refused")
		default:
			fmt.Println("unknown")
		}
		ctx, cancel = call()
		l.Release(ctx)
		cancel()
	}
}

// probeProc is one child process of the probe.
type probeProc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *probeProc) signal(s syscall.Signal) { p.cmd.Process.Signal(s) }

// kill ends the process and waits for it.
func (p *probeProc) kill() {
	p.cmd.Process.Signal(syscall.SIGCONT)
	p.cmd.Process.Kill()
	<-p.done
}

// startProbe starts this test binary as role with env, sending each line
// it writes on stdout to lines.
func startProbe(t *testing.T, role string, env []string, lines func(string)) *probeProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), probeRole+"="+role), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &probeProc{cmd: cmd, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if lines != nil {
				lines(sc.Text())
			}
		}
		cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.kill)
	return p
}

// freePort returns a loopback port nothing listens on.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// waitReady waits until the instance at addr answers /readyz.
func waitReady(t *testing.T, addr string) {
	t.Helper()
	for end := time.Now().Add(60 * time.Second); ; {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(end) {
			t.Fatalf("the instance at %s did not become ready: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// probeMode is one mode's clients and what they reported.
type probeMode struct {
	mode, key, name string

	mu        sync.Mutex
	procs     map[int]*probeProc
	inFlight  map[int]bool // a write sent and not answered
	acks      int
	unknown   int
	refused   int
	aimed     int
	paused    int // the client an aimed pause holds (-1: none)
	pauseFrom uint64
	resume    chan struct{}
}

// event handles a line of client id.
func (m *probeMode) event(id int, line string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	word, arg, _ := strings.Cut(line, " ")
	switch word {
	case "read":
		f, _ := strconv.ParseUint(arg, 10, 64)
		if m.paused >= 0 && id != m.paused && f > m.pauseFrom {
			// The lease passed on and the next holder has read: resume the
			// paused holder, whose late write now races the new holder's.
			close(m.resume)
			m.paused = -1
		} else if m.paused < 0 && m.procs[id] != nil && rand.IntN(2) == 0 {
			m.procs[id].signal(syscall.SIGSTOP)
			m.paused, m.pauseFrom, m.resume = id, f, make(chan struct{})
			m.aimed++
			go m.hold(id, m.procs[id], m.resume)
		}
	case "sent":
		m.inFlight[id] = true
	case "ack":
		m.acks++
		delete(m.inFlight, id)
	case "refused":
		m.refused++
		delete(m.inFlight, id)
	case "unknown":
		m.unknown++
		delete(m.inFlight, id)
	}
}

// hold keeps client id paused until resume is closed, at most six TTLs.
func (m *probeMode) hold(id int, p *probeProc, resume chan struct{}) {
	select {
	case <-resume:
	case <-time.After(6 * probeTTL):
		m.mu.Lock()
		if m.paused == id {
			m.paused = -1
		}
		m.mu.Unlock()
	}
	p.signal(syscall.SIGCONT)
}

// killed counts a write client id had in flight as of unknown outcome.
func (m *probeMode) killed(id int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inFlight[id] {
		m.unknown++
		delete(m.inFlight, id)
	}
	delete(m.procs, id)
	if m.paused == id {
		close(m.resume)
		m.paused = -1
	}
}

// TestServeProbeReadModifyWrite is the fault probe of read-modify-write
// through tenure serve: two instances over one store, three clients per
// mode incrementing a counter under a lease. A client is paused right
// after its read until the lease has passed on and the next holder has
// read too; instances are paused and killed; clients are killed. Through
// fencedHolderWrite no acknowledged increment is lost (the counter is at
// least the acknowledged increments and at most those plus the ones of
// unknown outcome); through fencedWrite, the control, increments are lost.
func TestServeProbeReadModifyWrite(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		dsn := testenv.SharedPostgres(t).NewDatabase(t)
		if code := runJSON(t, &statusOut{}, "migrate", "up", "--store", dsn, "--schema", "probe"); code != 0 {
			t.Fatalf("migrate up: exit %d", code)
		}
		serveProbe(t, []string{"--store", dsn, "--schema", "probe"})
	})
	t.Run("redis", func(t *testing.T) {
		serveProbe(t, []string{"--store", "redis://" + testenv.SharedRedis(t).Addr(), "--store-prefix", fmt.Sprintf("probe%d:", time.Now().UnixNano())})
	})
}

func serveProbe(t *testing.T, storeArgs []string) {
	dir := t.TempDir()
	addrs := []string{freePort(t), freePort(t)}
	instances := make([]*probeProc, len(addrs))
	startInstance := func(i int) {
		args := append([]string{"serve", "--addr", addrs[i], "--data-dir", dir}, storeArgs...)
		instances[i] = startProbe(t, "serve", []string{"TENURE_PROBE_ARGS=" + strings.Join(args, "\n")}, nil)
		waitReady(t, addrs[i])
	}
	startInstance(0) // it makes the token both instances read
	startInstance(1)
	raw, err := os.ReadFile(filepath.Join(dir, tokenFile))
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(string(raw))
	var urls []string
	for _, a := range addrs {
		urls = append(urls, "http://"+a)
	}

	modes := map[string]*probeMode{}
	next := 0
	startClient := func(m *probeMode) {
		m.mu.Lock()
		id := next
		next++
		m.mu.Unlock()
		p := startProbe(t, "client", []string{
			"TENURE_PROBE_URLS=" + strings.Join(urls, ","), "TENURE_PROBE_TOKEN=" + tok,
			"TENURE_PROBE_KEY=" + m.key, "TENURE_PROBE_NAME=" + m.name, "TENURE_PROBE_MODE=" + m.mode,
		}, func(line string) { m.event(id, line) })
		m.mu.Lock()
		m.procs[id] = p
		m.mu.Unlock()
	}
	for _, mode := range []string{"holder", "fenced"} {
		m := &probeMode{mode: mode, key: "probe/" + mode + "/lock", name: "probe/" + mode + "/counter",
			procs: map[int]*probeProc{}, inFlight: map[int]bool{}, paused: -1}
		modes[mode] = m
		for range 3 {
			startClient(m)
		}
	}

	// The instances' and clients' faults, until both modes had enough
	// aimed pauses and each kind of fault happened.
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	var instPauses, instKills, clientKills int
	enough := func() bool {
		for _, m := range modes {
			m.mu.Lock()
			a := m.aimed
			m.mu.Unlock()
			if a < 8 {
				return false
			}
		}
		return instPauses >= 2 && instKills >= 2 && clientKills >= 2
	}
	for end := time.Now().Add(3 * time.Minute); !enough(); {
		if time.Now().After(end) {
			t.Fatalf("the faults did not all happen in time: instance pauses %d, kills %d, client kills %d, aimed pauses holder %d, fenced %d",
				instPauses, instKills, clientKills, modes["holder"].aimed, modes["fenced"].aimed)
		}
		time.Sleep(probeTTL + time.Duration(rng.Int64N(int64(2*probeTTL))))
		switch rng.IntN(3) {
		case 0:
			i := rng.IntN(len(instances))
			instances[i].signal(syscall.SIGSTOP)
			time.Sleep(probeTTL + time.Duration(rng.Int64N(int64(probeTTL))))
			instances[i].signal(syscall.SIGCONT)
			instPauses++
		case 1:
			i := rng.IntN(len(instances))
			instances[i].kill()
			startInstance(i)
			instKills++
		case 2:
			m := modes[[]string{"holder", "fenced"}[rng.IntN(2)]]
			m.mu.Lock()
			var ids []int
			for id := range m.procs {
				if id != m.paused {
					ids = append(ids, id)
				}
			}
			var p *probeProc
			id := -1
			if len(ids) > 0 {
				id = ids[rng.IntN(len(ids))]
				p = m.procs[id]
			}
			m.mu.Unlock()
			if p != nil {
				p.kill()
				m.killed(id)
				startClient(m)
				clientKills++
			}
		}
	}
	for _, m := range modes {
		m.mu.Lock()
		ps := m.procs
		m.procs = map[int]*probeProc{}
		m.mu.Unlock()
		for id, p := range ps {
			p.kill()
			m.killed(id)
		}
	}

	c, err := client.New(urls[0], &client.Options{Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	final := func(m *probeMode) int {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		b, _, err := c.FencedRead(ctx, m.name)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(string(b))
		if err != nil {
			t.Fatalf("%s counter %q", m.mode, b)
		}
		return n
	}
	h, f := modes["holder"], modes["fenced"]
	hv, fv := final(h), final(f)
	t.Logf("faults: instance pauses %d, kills %d; client kills %d; aimed client pauses holder %d, fenced %d", instPauses, instKills, clientKills, h.aimed, f.aimed)
	t.Logf("holder-checked write: counter %d, acknowledged %d, unknown %d, refused %d", hv, h.acks, h.unknown, h.refused)
	t.Logf("max-fence write (control): counter %d, acknowledged %d, unknown %d, refused %d", fv, f.acks, f.unknown, f.refused)
	if hv < h.acks {
		t.Errorf("holder-checked write: %d acknowledged increments lost (counter %d, acknowledged %d)", h.acks-hv, hv, h.acks)
	}
	if hv > h.acks+h.unknown {
		t.Errorf("holder-checked write: counter %d above the %d acknowledged and %d unknown increments", hv, h.acks, h.unknown)
	}
	if fv >= f.acks {
		t.Errorf("the control lost no acknowledged increment (counter %d, acknowledged %d): the faults did not bite", fv, f.acks)
	}
}
