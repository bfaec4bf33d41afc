package redisstore

import (
	"context"
	"errors"
	"fmt"
	"github.com/tenurekit/tenure"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/redisstore/internal/rclient"
)

// DefaultConfirmTimeout is how long a write waits for its replicas when
// Replication.Timeout is zero.
const DefaultConfirmTimeout = time.Second

// MaxConfirmTimeout is the longest Replication.Timeout.
const MaxConfirmTimeout = time.Minute

// MaxConfirmReplicas is the largest Replication.Replicas.
const MaxConfirmReplicas = 64

// replRefresh is how often the store asks its primaries how many replicas
// they have, while it writes: a replica that connects is counted from the
// next refresh on, about a second later at most.
const replRefresh = time.Second

// ErrUnconfirmed reports a write that the primary applied but that not
// enough of its replicas confirmed within Replication.Timeout: a failover
// now could promote a replica that does not have it. Errors that wrap it
// also wrap lease.ErrUnavailable (and the primitive's ErrUnavailable): the
// outcome is unknown, as after a lost reply. Where the write granted
// something (a lease, an idempotency claim, a permit, a session), the store
// has already released it on the primary.
var ErrUnconfirmed = errors.New("redisstore: the replicas did not confirm the write")

// ConfirmCommand chooses the command that confirms writes with replicas.
type ConfirmCommand int

const (
	// ConfirmAuto (the default) sends WAITAOF 1 N where the primary has
	// the command (Redis 7.2 and later) and runs with appendonly yes: the
	// write is in the primary's append-only file and in that of N
	// replicas. Elsewhere it sends WAIT N: N replicas received the write.
	// Which applies is detected per primary (COMMAND INFO WAITAOF and INFO
	// persistence), never assumed. With appendfsync everysec WAITAOF waits
	// for the next fsync (up to about a second), and a replica without
	// appendonly never confirms it; choose ConfirmWait, or raise Timeout,
	// for such deployments.
	ConfirmAuto ConfirmCommand = iota
	// ConfirmWait always sends WAIT N: the replicas received the write,
	// which is what a failover needs; it says nothing about disks.
	ConfirmWait
)

// Replication configures how the store confirms writes with the replicas
// of the primary that ran them. The zero value is the default: on.
//
// A write that a guarantee rests on (lease acquire, renew and release;
// FencedSet, FencedSetAtLeast and HolderSet; idempotency begin, renew,
// complete, release and settle; session create, save, touch, rotate,
// revoke and revoke-user; schedule begin, mark, finish, register and
// CompleteSlot and the claims; concurrency permits; and with them the
// fence keys they advance) is sent with WAIT (or WAITAOF) on the same
// connection, in the same round trip, and reported done only when enough
// replicas confirmed it. When too few confirm within Timeout the caller
// gets an error wrapping [ErrUnconfirmed] and the primitive's
// ErrUnavailable: never a success that a promoted replica forgets. A write
// that granted something (a lease, an idempotency claim, a permit, a new
// session) is then released on the primary before the error returns;
// other writes have an unknown outcome, as after a lost reply. Answers
// that report state the caller acts on as done, an idempotent replay and
// a revoke that finds the session already gone, are confirmed the same
// way (one more round trip, only on those answers). On Redis Cluster the
// rule holds per shard: WAIT goes to the primary that ran the write and
// counts its replicas.
//
// A primary with no replica connected is not waited for (there is no copy
// to wait for): writes there behave as without confirmation, and tenure
// doctor says so. A replica that disconnects while a write waits is no
// longer waited for either, but only on the word of the server that ran
// the write: when the server at the primary's address is another one by
// then (a replica promoted in its place reports no replicas, yet never
// received the write) or the confirmation was lost with its connection,
// the write is unconfirmed. Rate limit decisions are not confirmed unless
// RateLimits is set (see there).
type Replication struct {
	// Off turns confirmation off: a write is reported done as soon as the
	// primary applied it. A failover to a replica that had not received it
	// yet then forgets it: a lease gets a second holder, a guard admits an
	// older fence, a revoked session loads again. Default false.
	Off bool
	// Replicas is how many replicas must confirm each write. 0 (the
	// default) means every replica connected to the primary that ran it
	// (those INFO replication lists as online), and none when none is
	// connected. N > 0 means at least N whatever is connected: a primary
	// with fewer fails every write, which is how to make a primary that
	// lost its replicas refuse writes instead of accepting them
	// unconfirmed. 0 to MaxConfirmReplicas.
	Replicas int
	// Timeout bounds how long a write waits for confirmations (the
	// timeout sent with WAIT). Default DefaultConfirmTimeout (1s, as
	// Redisson's slavesSyncTimeout); 1ms to MaxConfirmTimeout. A call
	// also ends when its context does, and a go-redis client's ReadTimeout
	// must be longer than Timeout.
	Timeout time.Duration
	// Command chooses WAIT or WAITAOF. Default ConfirmAuto.
	Command ConfirmCommand
	// RateLimits confirms rate limit decisions (Allow, Decide) too.
	// Default false: a decision is the hottest write the store makes, and
	// losing recent decisions in a failover re-admits at most what they
	// admitted (a rate limit bounds load, it grants nothing exclusive), so
	// by default they are not waited for. Set it where a limit must hold
	// across a failover (attempts at a password, say). Concurrency permits
	// are leases and are always confirmed.
	RateLimits bool
}

// validateReplication checks r against the bounds documented on
// [Replication].
func validateReplication(r Replication) error {
	if r.Replicas < 0 || r.Replicas > MaxConfirmReplicas {
		return fmt.Errorf("%w: redisstore: Options.Replication.Replicas is %d, want 0 (every connected replica) up to %d", tenure.ErrInvalid, r.Replicas, MaxConfirmReplicas)
	}
	if r.Timeout != 0 && (r.Timeout < time.Millisecond || r.Timeout > MaxConfirmTimeout) {
		return fmt.Errorf("%w: redisstore: Options.Replication.Timeout is %v, want 0 (the default %v) or 1ms up to %v", tenure.ErrInvalid, r.Timeout, DefaultConfirmTimeout, MaxConfirmTimeout)
	}
	if r.Command != ConfirmAuto && r.Command != ConfirmWait {
		return fmt.Errorf("%w: redisstore: Options.Replication.Command is %d, want ConfirmAuto or ConfirmWait", tenure.ErrInvalid, r.Command)
	}
	return nil
}

// replConfig is the store's copy of its Replication options.
type replConfig struct {
	off      bool
	replicas int
	timeout  time.Duration
	ms       string // the timeout in ms, as WAIT takes it
	wait     bool   // WAIT even where WAITAOF is available
	rate     bool   // confirm rate limit decisions
}

func newReplConfig(r Replication) replConfig {
	c := replConfig{off: r.Off, replicas: r.Replicas, timeout: r.Timeout, wait: r.Command == ConfirmWait, rate: r.RateLimits}
	if c.timeout == 0 {
		c.timeout = DefaultConfirmTimeout
	}
	c.ms = strconv.FormatInt(ceilMillis(c.timeout), 10)
	return c
}

// replNode is what the store knows about one primary.
type replNode struct {
	addr      string
	client    rclient.Client // bound to this primary
	online    int            // replicas INFO replication lists as online
	connected int            // connected_slaves: online or still syncing
	aof       bool           // appendonly yes
	waitAOF   bool           // the server has WAITAOF
	replica   bool           // the node is itself a replica (role:slave)
	// replID is the node's replication ID (master_replid) when the view
	// was loaded: a replica promoted in its place, or the node restarted
	// without its data, answers with another.
	replID string
}

// replView is the store's picture of its primaries and their replicas,
// refreshed every replRefresh while the store writes, and after every
// server check.
type replView struct {
	at     time.Time
	nodes  []replNode
	slots  []uint8 // cluster: hash slot -> index in nodes (noNode: unknown); nil on one server
	byAddr map[string]int
}

const noNode = 0xFF

// node returns the primary that serves key (nil if the view does not know
// it).
func (v *replView) node(key string) *replNode {
	if v == nil || len(v.nodes) == 0 {
		return nil
	}
	if v.slots == nil {
		return &v.nodes[0]
	}
	i := v.slots[keySlot(key)]
	if i == noNode {
		return nil
	}
	return &v.nodes[i]
}

// keySlot returns the hash slot of key (of its hash tag, when it has one).
func keySlot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return slot(key)
}

// probeCmds ask a node about its replicas, its append-only file and
// WAITAOF. They are not marked read-only: a client that sends reads to
// replicas must send these to the primary.
var probeCmds = []rclient.Cmd{
	{Name: "INFO", Args: []string{"replication"}},
	{Name: "INFO", Args: []string{"persistence"}},
	{Name: "COMMAND", Args: []string{"INFO", "WAITAOF"}},
}

// judgeProbe reads the replies to probeCmds into n.
func judgeProbe(n *replNode, res []rclient.Result) error {
	repl, err := res[0].ToString()
	if err != nil {
		return err
	}
	pers, err := res[1].ToString()
	if err != nil {
		return err
	}
	n.online, n.connected = countReplicas(repl)
	n.replica = infoField(repl, "role") == "slave"
	n.replID = infoField(repl, "master_replid")
	n.aof = infoField(pers, "aof_enabled") == "1"
	n.waitAOF = false
	if arr, err := res[2].ToArray(); err == nil && len(arr) == 1 && !arr[0].IsNil() {
		if cmd, err := arr[0].ToArray(); err == nil && len(cmd) > 0 {
			n.waitAOF = true
		}
	}
	return nil
}

// countReplicas reads INFO replication: the replicas whose state is
// online, and connected_slaves (online or still syncing).
func countReplicas(info string) (online, connected int) {
	connected, _ = strconv.Atoi(infoField(info, "connected_slaves"))
	for line := range strings.Lines(info) {
		if strings.HasPrefix(line, "slave") && strings.Contains(line, "state=online") {
			if _, rest, ok := strings.Cut(line, ":"); ok && strings.Contains(rest, "ip=") {
				online++
			}
		}
	}
	return online, connected
}

// loadView asks the primaries how many replicas they have: the server (one
// round trip), or every primary of a cluster (CLUSTER SLOTS, then one
// round trip per primary, concurrently).
func (s *Store) loadView(ctx context.Context) (*replView, error) {
	v := &replView{at: time.Now()}
	if !s.cluster {
		n := replNode{client: s.c}
		if err := judgeProbe(&n, s.c.DoMulti(ctx, probeCmds...)); err != nil {
			return nil, fmt.Errorf("redisstore: ask the server about its replicas: %w", err)
		}
		v.nodes = []replNode{n}
		return v, nil
	}
	arr, err := s.c.Do(ctx, rclient.Cmd{Name: "CLUSTER", Args: []string{"SLOTS"}, ReadOnly: true}).ToArray()
	if err != nil {
		return nil, fmt.Errorf("redisstore: CLUSTER SLOTS: %w", err)
	}
	nodes, err := s.c.Nodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("redisstore: list the nodes: %w", err)
	}
	clients := make(map[string]rclient.Client, len(nodes))
	for _, n := range nodes {
		clients[n.Addr] = n.Client
	}
	v.slots = make([]uint8, 16384)
	for i := range v.slots {
		v.slots[i] = noNode
	}
	v.byAddr = map[string]int{}
	for _, e := range arr {
		r, err := e.ToArray()
		if err != nil || len(r) < 3 {
			continue
		}
		lo, err1 := r[0].AsInt64()
		hi, err2 := r[1].AsInt64()
		m, err3 := r[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(m) < 2 || lo < 0 || hi > 16383 || lo > hi {
			continue
		}
		host, err1 := m[0].ToString()
		port, err2 := m[1].AsInt64()
		if err1 != nil || err2 != nil || host == "" || host == "?" {
			continue
		}
		addr := host + ":" + strconv.FormatInt(port, 10)
		i, ok := v.byAddr[addr]
		if !ok {
			c, known := clients[addr]
			if !known || len(v.nodes) >= noNode {
				continue
			}
			i = len(v.nodes)
			v.byAddr[addr] = i
			v.nodes = append(v.nodes, replNode{addr: addr, client: c})
		}
		for sl := lo; sl <= hi; sl++ {
			v.slots[sl] = uint8(i)
		}
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for i := range v.nodes {
		wg.Go(func() {
			n := &v.nodes[i]
			if err := judgeProbe(n, n.client.DoMulti(ctx, probeCmds...)); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("redisstore: ask %s about its replicas: %w", n.addr, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return v, nil
}

// currentView returns the store's picture of its replicas, starting a
// refresh in the background when it is older than replRefresh.
func (s *Store) currentView() *replView {
	v := s.replView.Load()
	if v != nil && time.Since(v.at) > replRefresh && s.refreshing.CompareAndSwap(false, true) {
		go func() {
			defer s.refreshing.Store(false)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			nv, err := s.loadView(ctx)
			if err != nil {
				// Keep the old picture; try again a period later.
				cp := *v
				cp.at = time.Now()
				nv = &cp
			}
			s.replView.CompareAndSwap(v, nv)
		}()
	}
	return v
}

// staleView makes the next write refresh the view.
func (s *Store) staleView() {
	if v := s.replView.Load(); v != nil {
		cp := *v
		cp.at = time.Time{}
		s.replView.CompareAndSwap(v, &cp)
	}
}

// pending is a write whose confirmation came back with it: the reply to
// the WAIT (or WAITAOF) that followed it on its connection.
type pending struct {
	node  *replNode
	need  int  // replicas asked for
	aof   bool // WAITAOF 1 need was sent
	reply rclient.Result
	key   string // the write's first key, which routes it
}

// confirming reports how many replicas a write on key must wait for, and
// on which primary. On a cluster whose slot the view does not know yet it
// asks the cluster first; if the slot is still unknown the write is not
// sent and the error wraps lease.ErrUnavailable.
func (s *Store) confirming(ctx context.Context, key string, decision bool) (*replNode, int, error) {
	if s.repl.off || (decision && !s.repl.rate) {
		return nil, 0, nil
	}
	v := s.currentView()
	n := v.node(key)
	if n == nil {
		nv, err := s.loadView(ctx)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: %w", lease.ErrUnavailable, err)
		}
		s.replView.Store(nv)
		if n = nv.node(key); n == nil {
			return nil, 0, fmt.Errorf("%w: redisstore: no primary serves the hash slot of the key yet", lease.ErrUnavailable)
		}
	}
	if s.repl.replicas > 0 {
		return n, s.repl.replicas, nil
	}
	return n, n.online, nil
}

// waitCmd is the confirming command for need replicas of n.
func (s *Store) waitCmd(n *replNode, need int) (rclient.Cmd, bool) {
	if n.waitAOF && n.aof && !s.repl.wait {
		return rclient.Cmd{Name: "WAITAOF", Args: []string{"1", strconv.Itoa(need), s.repl.ms}}, true
	}
	return rclient.Cmd{Name: "WAIT", Args: []string{strconv.Itoa(need), s.repl.ms}}, false
}

// maxRedirects bounds the MOVED and ASK replies a confirmed write follows.
const maxRedirects = 3

// write runs script as a write a guarantee rests on. When the primary that
// serves keys[0] has replicas to wait for, the script and WAIT (or WAITAOF)
// go over one connection in one round trip, and the returned pending
// carries the confirmation, for [Store.confirm] to judge once the reply
// shows that the script wrote. Otherwise (confirmation off, no replica
// connected, or a rate limit decision) it is one EVALSHA as before, and
// pending is nil. decision marks a rate limit decision.
func (s *Store) write(ctx context.Context, script *rclient.Script, keys, args []string, decision bool) (rclient.Result, *pending) {
	n, need, err := s.confirming(ctx, keys[0], decision)
	if err != nil {
		return rclient.ErrorResult(err), nil
	}
	return s.writeAt(ctx, n, need, script, keys, args)
}

// writeAt is write once confirming has answered n and need: for a write
// whose arguments depend on whether it is confirmed (a release that hands
// a key over only when it is not), decided once.
func (s *Store) writeAt(ctx context.Context, n *replNode, need int, script *rclient.Script, keys, args []string) (rclient.Result, *pending) {
	if need == 0 {
		return script.Exec(ctx, s.c, keys, args), nil
	}
	return s.pinned(ctx, n, need, keys[0], func(body bool) rclient.Cmd { return script.Cmd(keys, args, body) })
}

// writeCmd is write for a command that is not a script.
func (s *Store) writeCmd(ctx context.Context, cmd rclient.Cmd) (rclient.Result, *pending) {
	n, need, err := s.confirming(ctx, cmd.Keys[0], false)
	if err != nil {
		return rclient.ErrorResult(err), nil
	}
	if need == 0 {
		return s.c.Do(ctx, cmd), nil
	}
	return s.pinned(ctx, n, need, cmd.Keys[0], func(bool) rclient.Cmd { return cmd })
}

// pinned sends the command cmd builds and the confirming command over one
// connection to the primary n (the server itself outside a cluster),
// sending the script's text after NOSCRIPT and following MOVED and ASK
// (a redirected command did not run).
func (s *Store) pinned(ctx context.Context, n *replNode, need int, key string, cmd func(body bool) rclient.Cmd) (rclient.Result, *pending) {
	client := s.c
	if s.cluster {
		client = n.client
	}
	asking := false
	for redirect := 0; ; redirect++ {
		wait, aof := s.waitCmd(n, need)
		cmds := []rclient.Cmd{cmd(false), wait}
		if asking {
			cmds = append([]rclient.Cmd{{Name: "ASKING"}}, cmds...)
		}
		res := client.Pinned(ctx, cmds...)
		if rclient.IsNoScript(res[len(res)-2].Error()) {
			cmds[len(cmds)-2] = cmd(true)
			res = client.Pinned(ctx, cmds...)
		}
		res = res[len(res)-2:]
		p := &pending{node: n, need: need, aof: aof, reply: res[1], key: key}
		addr, ask, moved := redirected(res[0].Error())
		if !moved || !s.cluster || redirect >= maxRedirects {
			return res[0], p
		}
		s.staleView()
		c, nn := s.nodeAt(ctx, addr)
		if c == nil {
			return res[0], p
		}
		if nn == nil {
			// Not in the view: wait for as many as before; a short count
			// is judged against what the node reports (see confirm).
			nn = &replNode{addr: addr, client: c, online: need}
		}
		client, asking, n = c, ask, nn
		if s.repl.replicas == 0 {
			need = nn.online // WAIT 0 answers at once
		}
	}
}

// redirected parses a MOVED or ASK reply.
func redirected(err error) (addr string, ask, ok bool) {
	msg, isErr := rclient.ServerError(err)
	if !isErr {
		return "", false, false
	}
	f := strings.Fields(msg)
	if len(f) != 3 || (f[0] != "MOVED" && f[0] != "ASK") {
		return "", false, false
	}
	return f[2], f[0] == "ASK", true
}

// nodeAt returns a client bound to the node at addr, and what the view
// knows about it (nil if nothing).
func (s *Store) nodeAt(ctx context.Context, addr string) (rclient.Client, *replNode) {
	if v := s.replView.Load(); v != nil {
		if i, ok := v.byAddr[addr]; ok {
			return v.nodes[i].client, &v.nodes[i]
		}
	}
	nodes, err := s.c.Nodes(ctx)
	if err != nil {
		return nil, nil
	}
	for _, nd := range nodes {
		if nd.Addr == addr {
			return nd.Client, nil
		}
	}
	return nil, nil
}

// confirm judges the confirmation of a write that wrote: nil when enough
// replicas confirmed it, an error wrapping ErrUnconfirmed and
// lease.ErrUnavailable otherwise. A short count is checked against what
// the primary reports now, so that a replica that disconnected is no longer
// waited for (and a primary left without replicas behaves as one that
// never had any), while a connected replica that did not confirm fails the
// write. Only a confirmation that came back is judged so: a lost one (the
// connection broke while WAIT waited) fails the write whatever the primary
// reports afterwards, and so does a short count when the server that
// answers the question is not the one that ran the write (a replica
// promoted in its place has no replicas of its own, yet it never received
// the write).
func (s *Store) confirm(ctx context.Context, p *pending) error {
	if p == nil {
		return nil
	}
	acked, local, err := parseWait(p.reply, p.aof)
	if err == nil && acked >= p.need && (!p.aof || local >= 1) {
		return nil
	}
	s.staleView()
	if s.testHookShortConfirm != nil {
		s.testHookShortConfirm()
	}
	required, aofNow, perr := s.required(ctx, p)
	if err == nil && perr == nil && (required == 0 || acked >= required && (!p.aof || local >= 1 || !aofNow)) {
		return nil // no replica connected now, or enough of those still connected confirmed it
	}
	where := "the server"
	if p.node.addr != "" {
		where = p.node.addr
	}
	switch {
	case err != nil:
		return fmt.Errorf("%w: %w: waiting for the replicas of %s: %w", lease.ErrUnavailable, ErrUnconfirmed, where, err)
	case errors.Is(perr, errOtherServer):
		return fmt.Errorf("%w: %w: %d replicas of %s confirmed the write, and %w", lease.ErrUnavailable, ErrUnconfirmed, max(acked, 0), where, perr)
	case perr != nil:
		return fmt.Errorf("%w: %w: %d replicas of %s confirmed the write, and asking how many are connected failed: %w", lease.ErrUnavailable, ErrUnconfirmed, max(acked, 0), where, perr)
	case p.aof && local < 1:
		return fmt.Errorf("%w: %w: the primary %s did not sync the write to its append-only file within %v", lease.ErrUnavailable, ErrUnconfirmed, where, s.repl.timeout)
	}
	return fmt.Errorf("%w: %w: %d of %d replicas of %s confirmed the write within %v", lease.ErrUnavailable, ErrUnconfirmed, max(acked, 0), required, where, s.repl.timeout)
}

// errOtherServer reports that the server asked about a write's replicas is
// not the one that ran it.
var errOtherServer = errors.New("the server now at its address is another one (a promoted replica, or a restart): the write may be lost")

// required asks the primary that ran p's write how many replicas it has
// now, and returns how many must confirm. The answer counts only when it
// comes from that same server: its replication ID must be the one the
// store's view recorded for it.
func (s *Store) required(ctx context.Context, p *pending) (required int, aof bool, err error) {
	client := s.c
	if s.cluster {
		client = p.node.client
	}
	var n replNode
	if err := judgeProbe(&n, client.DoMulti(ctx, probeCmds...)); err != nil {
		return 0, false, err
	}
	// (A node reached by a cluster redirect that the view did not know
	// has no recorded ID; a cluster's nodes keep their own addresses.)
	if n.replica || p.node.replID != "" && n.replID != p.node.replID {
		return 0, false, errOtherServer
	}
	if s.repl.replicas > 0 {
		return s.repl.replicas, n.aof, nil
	}
	return n.online, n.aof, nil
}

// parseWait reads the reply to WAIT (an integer) or WAITAOF (local,
// replicas).
func parseWait(r rclient.Result, aof bool) (acked, local int, err error) {
	if !aof {
		n, err := r.AsInt64()
		return int(n), 0, err
	}
	arr, err := r.ToArray()
	if err != nil {
		return 0, 0, err
	}
	if len(arr) != 2 {
		return 0, 0, malformed("WAITAOF")
	}
	l, err1 := arr[0].AsInt64()
	n, err2 := arr[1].AsInt64()
	if err1 != nil || err2 != nil {
		return 0, 0, malformed("WAITAOF")
	}
	return int(n), int(l), nil
}

// confirmState confirms state that an answer reports but that this call
// did not write (an idempotent replay, a session already revoked): a write
// on its own connection of a short-lived marker under key's hash tag,
// followed by WAIT, covers every write the primary made before, the one
// that made that state included. It costs a round trip, on those answers
// only, and nothing where no replica is waited for.
func (s *Store) confirmState(ctx context.Context, key string) error {
	sk := s.syncKey(key)
	_, p := s.writeCmd(ctx, rclient.Cmd{Name: "SET", Keys: []string{sk}, Args: []string{"1", "PX", "100"}})
	return s.confirm(ctx, p)
}

// syncKey is the marker key confirmState writes for key: in key's hash
// tag, outside every key family of the store.
func (s *Store) syncKey(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return s.prefix + "sync" + key[i:i+j+2]
		}
	}
	return s.prefix + "sync"
}

// afterUnconfirmed is the context for the clean-up after an unconfirmed
// grant: the caller's context may be done, and the clean-up must still
// run, for a bounded time.
func (s *Store) afterUnconfirmed(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.repl.timeout+time.Second)
}

// ReplicaStatus is what the store knows about one primary and its
// replicas, as [Store.Replicas] reports it.
type ReplicaStatus struct {
	// Addr is the primary's address on a cluster ("" on one server: the
	// client's own).
	Addr string
	// Online is the number of replicas the primary lists as online;
	// Connected also counts those still syncing.
	Online, Connected int
	// AOF reports appendonly yes; WaitAOF that the server has WAITAOF.
	AOF, WaitAOF bool
	// Replica reports a node that is itself a replica (the client points
	// at a replica, not a primary).
	Replica bool
	// Command is the command that confirms writes on this primary,
	// "WAIT" or "WAITAOF", or "" when writes there are not confirmed
	// (confirmation off, or no replica to wait for).
	Command string
	// Required is how many replicas each write waits for (0 with Command
	// "").
	Required int
}

// Replicas asks every primary how many replicas it has, and reports how the
// store confirms writes there with its options. It runs the server check
// first if needed.
func (s *Store) Replicas(ctx context.Context) ([]ReplicaStatus, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	v, err := s.loadView(ctx)
	if err != nil {
		return nil, s.fail(err)
	}
	s.replView.Store(v)
	out := make([]ReplicaStatus, 0, len(v.nodes))
	for i := range v.nodes {
		n := &v.nodes[i]
		st := ReplicaStatus{Addr: n.addr, Online: n.online, Connected: n.connected, AOF: n.aof, WaitAOF: n.waitAOF, Replica: n.replica}
		need := n.online
		if s.repl.replicas > 0 {
			need = s.repl.replicas
		}
		if !s.repl.off && need > 0 {
			st.Required = need
			st.Command = "WAIT"
			if _, aof := s.waitCmd(n, need); aof {
				st.Command = "WAITAOF"
			}
		}
		out = append(out, st)
	}
	return out, nil
}

// replState is the part of Store that confirmation uses.
type replState struct {
	repl       replConfig
	replView   atomic.Pointer[replView]
	refreshing atomic.Bool
	// testHookShortConfirm, set by tests only, runs when a write's
	// confirmation came back short or was lost, before the store asks
	// the primary about its replicas.
	testHookShortConfirm func()
}
