package proof

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/tenurekit/tenure/internal/faultproxy"
)

// nemesis injects faults into the workers while a workload runs: it pauses
// workers (preferring the one that last started a guarded or control
// step, so that pauses land inside critical sections) for longer than the
// TTL and resumes them; for workloads that allow it, it also kills
// workers with SIGKILL and starts them again; with a proxy it delays,
// cuts and black-holes the workers' connections to the store for one to
// two TTLs at a time; and it calls the store restart and failover hooks,
// when given, once halfway through.
type nemesis struct {
	o       Options
	wl      *workload
	t       target
	ttl     time.Duration
	rng     *rand.Rand
	members []*member
	retired []*member
	hold    *holders
	faults  map[string]int
	restart func(i, inc int) (*member, error)
	px      *faultproxy.Proxy // nil without proxy faults
	// forget, if set, makes the store lose the records of the run's
	// ended leases and says how many it lost.
	forget func(ctx context.Context) (int, error)

	proxyFault string    // the current proxy fault, one of proxyFaults
	proxyUntil time.Time // the current proxy fault ends; zero when none
	proxyTurn  bool

	resumeAt  map[int]time.Time
	restartAt map[int]time.Time
	mode      int

	// Targeted pauses, in workloads that aim.
	aimTurn  int
	holdTurn bool
	armed    *aimPlan   // waiting for a grant to pause its holder
	aimed    *aimTarget // a holder paused until its lease passes on

	// dt records when each worker slot could not reach the store, for
	// the liveness checks; heldSlot is the slot whose connections the
	// proxy holds (-1: none).
	dt       downtime
	heldSlot int
	// stalls are the spans in which the machine held this loop's ticks
	// back by more than a few ticks.
	stalls []downSpan
}

// forgetResult is the outcome of one forget fault.
type forgetResult struct {
	lost int
	err  error
}

// aimPlan is a targeted pause waiting for its holder: the next worker
// granted a lease in mode is paused before its write, until the lease has
// passed to the next holder (until "grant") or the next holder has
// written (until "write").
type aimPlan struct {
	mode, until string
	expires     time.Time
}

// aimTarget is a holder paused by a targeted pause.
type aimTarget struct {
	i int // the holder
	// stopped is the worker stopped now: the holder, or the next holder
	// while the holder makes its late write.
	stopped         int
	proc, mode, key string
	fence           uint64
	until           string
	// held: the proxy holds the stopped worker's connections instead of
	// the worker being paused.
	held bool
}

func (n *nemesis) run(ctx context.Context, until time.Time, tick func(time.Duration)) error {
	n.resumeAt = map[int]time.Time{}
	n.restartAt = map[int]time.Time{}
	n.heldSlot = -1
	start := time.Now()
	nextFault := start.Add(n.ttl / 2)
	nextForget := start.Add(n.ttl)
	forgot := make(chan forgetResult, 1)
	forgetting := false
	defer func() {
		if forgetting {
			<-forgot // the store is not used after the run
		}
	}()
	nextTick := start.Add(time.Second)
	restarted, failedOver := false, false
	const tickEvery = 10 * time.Millisecond
	t := time.NewTicker(tickEvery)
	defer t.Stop()
	var lastTick time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-n.hold.aims: // nil, never ready, unless the workload aims
			if err := n.onAim(e); err != nil {
				return err
			}
			continue
		case <-t.C:
		}
		now := time.Now()
		if !lastTick.IsZero() && now.Sub(lastTick) > 3*tickEvery {
			// The machine kept this loop from running: a stall that
			// every process on it may have felt.
			n.stalls = append(n.stalls, downSpan{slot: allSlots, from: lastTick.Add(tickEvery), to: now})
		}
		lastTick = now
		if now.After(until) {
			return nil
		}
		if now.After(nextTick) {
			tick(now.Sub(start))
			nextTick = nextTick.Add(time.Second)
		}
		for i, at := range n.resumeAt {
			if now.After(at) {
				n.members[i].resume()
				n.dt.up(i)
				delete(n.resumeAt, i)
				if n.aimed != nil && n.aimed.stopped == i {
					n.endAim() // the lease did not pass on in time
				}
			}
		}
		if n.armed != nil && now.After(n.armed.expires) {
			n.armed = nil // no grant to aim at came
		}
		for i, at := range n.restartAt {
			if now.After(at) {
				old := n.members[i]
				m, err := n.restart(i, old.incarnation+1)
				if err != nil {
					return fmt.Errorf("restart worker %s: %w", old.name, err)
				}
				n.retired = append(n.retired, old)
				n.members[i] = m
				n.faults["restart"]++
				n.dt.up(i)
				delete(n.restartAt, i)
			}
		}
		if n.o.Faults.Restart != nil && !restarted && now.Sub(start) > until.Sub(start)/2 {
			restarted = true
			n.faults["store-restart"]++
			n.dt.down(allSlots, "store")
			if err := n.o.Faults.Restart(ctx); err != nil {
				return fmt.Errorf("restart the store: %w", err)
			}
			n.dt.up(allSlots)
		}
		if n.o.Faults.Failover != nil && !failedOver && now.Sub(start) > until.Sub(start)/2 {
			failedOver = true
			n.faults["failover"]++
			n.dt.down(allSlots, "store")
			if err := n.o.Faults.Failover(ctx); err != nil {
				return fmt.Errorf("fail the store over: %w", err)
			}
			n.dt.up(allSlots)
		}
		select {
		case r := <-forgot:
			forgetting = false
			if r.err != nil {
				n.faults["forget-failed"]++
			} else {
				n.faults["forget"] += r.lost
			}
		default:
		}
		if n.forget != nil && !forgetting && now.After(nextForget) {
			nextForget = now.Add(n.ttl/2 + time.Duration(n.rng.Int64N(int64(n.ttl))))
			// Beside the loop, so that a store that makes it wait (a
			// SQLite file locked by a paused worker's transaction, say)
			// does not hold back the resumes; one that cannot do it in
			// time forgets the next time.
			forgetting = true
			go func() {
				// A paused worker's transaction can hold a SQLite file
				// for up to three TTLs (a pause's length).
				fctx, cancel := context.WithTimeout(ctx, 4*n.ttl)
				defer cancel()
				lost, err := n.forget(fctx)
				forgot <- forgetResult{lost, err}
			}()
		}
		if !n.proxyUntil.IsZero() && now.After(n.proxyUntil) {
			n.endProxyFault()
		}
		if now.Before(nextFault) {
			continue
		}
		nextFault = now.Add(n.ttl/2 + time.Duration(n.rng.Int64N(int64(n.ttl))))
		// Every other fault in a workload that aims is a targeted one
		// (a pause, or a hold of the holder's connections at the proxy),
		// going through aimOrder: each mode gets each kind of wait in
		// turn.
		aiming := n.armed != nil || n.aimed != nil
		if n.hold.aims != nil && !aiming && len(n.resumeAt)+len(n.restartAt) < len(n.members)-1 {
			n.aimTurn++
			if n.aimTurn%2 == 1 {
				o := aimOrder[(n.aimTurn/2)%len(aimOrder)]
				until := n.wl.aimAt[0]
				if o.last {
					until = n.wl.aimAt[len(n.wl.aimAt)-1]
				}
				n.armed = &aimPlan{mode: o.mode, until: until, expires: now.Add(4 * n.ttl)}
				continue
			}
		}
		workerFaults := !n.o.Faults.NoPause || (n.wl.kills && !n.t.inProcess && !n.o.Faults.NoKill)
		// With worker faults too, every other fault goes to an idle proxy.
		n.proxyTurn = !n.proxyTurn
		// A proxy fault of its own would cut or drop what a hold holds: no
		// proxy fault starts while a hold lasts (and no hold starts during
		// a proxy fault).
		holding := n.aimed != nil && n.aimed.held
		if n.px != nil && n.proxyUntil.IsZero() && !holding && (!workerFaults || n.proxyTurn) {
			n.startProxyFault(proxyFaults[n.rng.IntN(len(proxyFaults))])
			n.proxyUntil = now.Add(n.ttl + time.Duration(n.rng.Int64N(int64(n.ttl))))
			continue
		}
		if !workerFaults {
			continue
		}
		if len(n.resumeAt)+len(n.restartAt) >= len(n.members)-1 {
			continue // keep one worker running
		}
		i := n.pick()
		if i < 0 {
			continue
		}
		m := n.members[i]
		kill := n.wl.kills && !n.t.inProcess && !n.o.Faults.NoKill && (n.o.Faults.NoPause || n.rng.IntN(3) == 0)
		if kill {
			if err := m.kill(); err != nil {
				return fmt.Errorf("kill worker %s: %w", m.name, err)
			}
			n.faults["kill"]++
			n.dt.down(i, "kill")
			n.restartAt[i] = now.Add(n.ttl + time.Duration(n.rng.Int64N(int64(n.ttl))))
			continue
		}
		if err := m.pause(); err != nil {
			return fmt.Errorf("pause worker %s: %w", m.name, err)
		}
		n.faults["pause"]++
		n.dt.down(i, "pause")
		// Longer than the TTL, so the paused worker's lease or claim
		// expires and another worker takes over.
		n.resumeAt[i] = now.Add(2*n.ttl + time.Duration(n.rng.Int64N(int64(n.ttl))))
	}
}

// aimOrder is the order of the aimed faults: a mode, and whether the fault
// waits for the last kind of event of the workload's aimAt ("write")
// rather than the first. The control's first fault waits for the next
// holder's write, after which the control admits the late write whenever
// the fault lands: so even a short run on a loaded machine shows the
// control's failure early. Then the guarded run gets both kinds, and the
// control the other; every mode gets every kind once per round.
var aimOrder = [...]struct {
	mode string
	last bool
}{{Control, true}, {Guarded, false}, {Guarded, true}, {Control, false}}

// onAim acts on the events of a workload that aims. Armed, it stops (pauses,
// or holds the connections of) the next holder granted a lease in the planned
// mode, before that holder writes. It lets the holder go once the lease has
// passed on: once the lease is granted to the next holder (until "grant"),
// or once the next holder's write was acknowledged (until "write"). In the
// "grant" case it stops the next holder in turn, at its grant, until the
// first one's write (or release) has completed, so that the late write
// lands after the new grant and before the new holder's write: the window
// in which only a holder check refuses it.
func (n *nemesis) onAim(e aimEvent) error {
	now := time.Now()
	if t := n.aimed; t != nil {
		if e.mode != t.mode || e.key != t.key {
			return nil
		}
		if t.stopped != t.i { // the next holder waits for the late write
			if memberName(e.proc) == t.proc && e.fence == t.fence && e.kind != "grant" {
				delete(n.resumeAt, t.stopped)
				return n.endAim()
			}
			return nil
		}
		if e.fence <= t.fence || !e.ok || (e.kind == "grant") != (t.until == "grant") {
			return nil
		}
		delete(n.resumeAt, t.i)
		j := slices.IndexFunc(n.members, func(m *member) bool { return m.name == memberName(e.proc) })
		if t.until != "grant" || j < 0 || j == t.i || !n.free(j) {
			return n.endAim()
		}
		// Stop the next holder, then let the first one go.
		if err := n.stop(j, t.held); err != nil {
			return err
		}
		if !t.held {
			if err := n.members[t.i].resume(); err != nil {
				return fmt.Errorf("resume worker %s: %w", n.members[t.i].name, err)
			}
			n.dt.up(t.i)
		}
		t.stopped = j
		n.resumeAt[j] = now.Add(5 * n.ttl)
		return nil
	}
	p := n.armed
	if p == nil || e.kind != "grant" || !e.ok || e.mode != p.mode || len(n.resumeAt)+len(n.restartAt) >= len(n.members)-1 {
		return nil
	}
	proc := memberName(e.proc)
	i := slices.IndexFunc(n.members, func(m *member) bool { return m.name == proc })
	if i < 0 || !n.free(i) {
		return nil // wait for another grant
	}
	// With the proxy, every other aimed fault holds the holder's
	// connections (requests and replies, on the connections it has open)
	// instead of pausing it: the holder runs on, but its requests reach
	// the store, and the store's replies reach it, only once the lease has
	// passed on. Without pauses, every aimed fault is a hold.
	hold := false
	if n.px != nil && n.members[i].cmd != nil && n.proxyUntil.IsZero() {
		n.holdTurn = !n.holdTurn
		hold = n.holdTurn || n.o.Faults.NoPause
	}
	if !hold && n.o.Faults.NoPause {
		return nil
	}
	if err := n.stop(i, hold); err != nil {
		if errors.Is(err, errNoConnections) {
			return nil // wait for a holder whose connections can be held
		}
		return err
	}
	n.armed = nil
	n.aimed = &aimTarget{i: i, stopped: i, proc: proc, mode: e.mode, key: e.key, fence: e.fence, until: p.until, held: hold}
	if hold {
		n.faults["proxy-hold-aimed-"+p.until]++
	} else {
		n.faults["pause-aimed-"+p.until]++
	}
	// If the lease does not pass on (a loaded machine), the fault ends
	// anyway, well after the lease's end.
	end := time.Unix(0, e.validUntil)
	if end.Before(now) {
		end = now
	}
	n.resumeAt[i] = end.Add(5 * n.ttl)
	return nil
}

// proxyFaults are the proxy's faults, named as the report counts them:
// its replies delayed by Faults.ProxyDelay, its connections cut (reset,
// new ones refused), or its replies black-holed (requests still reach the
// server and take effect, replies are dropped, so clients see timeouts of
// operations that may have applied).
var proxyFaults = []string{"proxy-delay", "proxy-cut", "proxy-blackhole"}

// startProxyFault starts a proxy fault, one of proxyFaults, and counts it.
func (n *nemesis) startProxyFault(kind string) {
	switch kind {
	case "proxy-delay":
		n.px.Delay(n.o.Faults.ProxyDelay)
	case "proxy-cut":
		n.px.Cut()
	case "proxy-blackhole":
		n.px.DropReplies()
	}
	n.proxyFault = kind
	n.faults[kind]++
	n.dt.down(allSlots, "proxy")
}

// endProxyFault ends the current proxy fault. Ending a cut or a black
// hole closes every connection, so that clients reconnect with clean
// streams; a delay leaves the streams clean, and its connections stay.
func (n *nemesis) endProxyFault() {
	if n.proxyFault == "proxy-delay" {
		n.px.Delay(0)
	} else {
		n.px.Heal()
	}
	n.proxyFault, n.proxyUntil = "", time.Time{}
	n.dt.up(allSlots)
}

// errNoConnections: a worker has no connection open to the proxy.
var errNoConnections = errors.New("proof: the worker has no connection to the proxy")

// memberName is the worker a client of the history belongs to ("w1/a" is
// one of w1's).
func memberName(proc string) string {
	name, _, _ := strings.Cut(proc, "/")
	return name
}

// stop pauses worker i, or with hold has the proxy hold the connections
// it has open (replacing any other hold).
func (n *nemesis) stop(i int, hold bool) error {
	m := n.members[i]
	if !hold {
		if err := m.pause(); err != nil {
			return fmt.Errorf("pause worker %s: %w", m.name, err)
		}
		n.dt.down(i, "pause")
		return nil
	}
	ports, err := clientPorts(n.px.Addr(), m.cmd.Process.Pid)
	if err != nil {
		return err
	}
	if len(ports) == 0 {
		return errNoConnections
	}
	n.px.HoldPorts(ports)
	if n.heldSlot >= 0 {
		n.dt.up(n.heldSlot) // the proxy holds one worker's connections at a time
	}
	n.heldSlot = i
	n.dt.down(i, "hold")
	return nil
}

// endAim ends the aimed fault: the worker it stopped resumes, or its
// connections go on.
func (n *nemesis) endAim() error {
	t := n.aimed
	n.aimed = nil
	if t.held {
		n.px.Release()
		if n.heldSlot >= 0 {
			n.dt.up(n.heldSlot)
			n.heldSlot = -1
		}
		return nil
	}
	m := n.members[t.stopped]
	if err := m.resume(); err != nil {
		return fmt.Errorf("resume worker %s: %w", m.name, err)
	}
	n.dt.up(t.stopped)
	return nil
}

// free reports whether worker i is neither paused nor killed.
func (n *nemesis) free(i int) bool {
	_, p := n.resumeAt[i]
	_, d := n.restartAt[i]
	return !p && !d
}

// pick chooses a running worker: usually the last one to enter a critical
// step of one mode (alternating), else one at random.
func (n *nemesis) pick() int {
	free := n.free
	if n.rng.IntN(4) != 0 {
		mode := []string{Guarded, Control}[n.mode%2]
		n.mode++
		proc := memberName(n.hold.holder(mode))
		for i, m := range n.members {
			if m.name == proc && free(i) {
				return i
			}
		}
	}
	var cand []int
	for i := range n.members {
		if free(i) {
			cand = append(cand, i)
		}
	}
	if len(cand) == 0 {
		return -1
	}
	return cand[n.rng.IntN(len(cand))]
}

// healAll resumes every paused worker and starts the killed ones again.
func (n *nemesis) healAll() {
	if n.aimed != nil {
		n.endAim()
	}
	if n.px != nil && !n.proxyUntil.IsZero() {
		n.endProxyFault()
	}
	for i := range n.resumeAt {
		n.members[i].resume()
		n.dt.up(i)
	}
	n.resumeAt = nil
	for i := range n.restartAt {
		old := n.members[i]
		if m, err := n.restart(i, old.incarnation+1); err == nil {
			n.retired = append(n.retired, old)
			n.members[i] = m
			n.faults["restart"]++
			n.dt.up(i)
		}
	}
	n.restartAt = nil
}
