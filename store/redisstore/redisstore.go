package redisstore

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/tenurekit/tenure"
	"io/fs"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/tenurekit/tenure/internal/wakehub"
	"github.com/tenurekit/tenure/lease"
	"github.com/tenurekit/tenure/store/redisstore/internal/rclient"
)

// DefaultPrefix is the key prefix used when Options.Prefix is empty.
const DefaultPrefix = "tenure:"

// DefaultFenceRetention is how long a lease's fence key outlives the lease
// when Options.FenceRetention is zero: not at all. Fences stay above every
// earlier fence without it, through the fence floor of the key's hash slot
// (see the package documentation, "Keys").
const DefaultFenceRetention time.Duration = 0

// MaxFenceRetention is the longest Options.FenceRetention (ten years).
const MaxFenceRetention = 3650 * 24 * time.Hour

// Release paths reported by [Store.ReleasePath].
const (
	// ReleaseDelex is DELEX key IFEQ token (Redis 8.4 and later).
	ReleaseDelex = "delex"
	// ReleaseLua is the compare-and-delete script (older servers).
	ReleaseLua = "lua"
)

var (
	// ErrEvictionPolicy reports a server whose maxmemory-policy is not
	// noeviction. Such a server evicts keys like cache entries under memory
	// pressure, and an evicted lock lets a second holder in. The store
	// refuses to write to it unless Options.AllowEviction is set. Nothing
	// was written.
	ErrEvictionPolicy = errors.New("redisstore: the server may evict keys (maxmemory-policy is not noeviction)")
	// ErrOutOfMemory reports a write that the server refused because it
	// reached maxmemory (under noeviction). Nothing was written: no lease
	// was granted and no value was stored. The error wraps the server's
	// reply.
	ErrOutOfMemory = errors.New("redisstore: the server is out of memory, nothing was written")
)

// Options configure a Store. Nil, and the zero value of each field, mean
// the defaults; each field documents its own. [New] and [NewGoRedis]
// refuse a value out of its bounds with an error wrapping
// tenure.ErrInvalid.
type Options struct {
	// Prefix is put in front of every key the store writes. Default
	// "tenure:" (an empty Prefix means the default). The characters '%',
	// '{' and '}' are percent-encoded, so a prefix never changes the hash
	// slot of a key: the keys of one lease always share the hash tag
	// built from the lease key.
	Prefix string
	// AllowEviction lets the store write to a server whose
	// maxmemory-policy is not noeviction. Default false: such a server is
	// refused with ErrEvictionPolicy, because under memory pressure it
	// would evict locks, fences and guarded values as if they were cache
	// entries. Set it only for a server that can never reach maxmemory.
	AllowEviction bool
	// FenceRetention is how long a lease's fence key outlives the lock's
	// TTL (counted from the last grant or renewal; a release does not
	// shorten it), so that Inspect and List still report an ended key's
	// last fence. Default 0: the fence key expires with the lock's TTL,
	// and a key whose records expired reads free with fence 0. It does
	// not bear on the fences granted: a new grant's fence is above every
	// fence granted before in the key's hash slot, kept or not (the slot's
	// fence floor), and not below the server's clock. Every fence key kept
	// costs memory, so keep it short where many distinct keys are locked.
	// It must not be negative nor above MaxFenceRetention (ten years).
	FenceRetention time.Duration
	// Replication configures how writes are confirmed by the replicas of
	// the primary that ran them (WAIT, or WAITAOF). Default: on, waiting
	// for every connected replica for up to 1s; see [Replication].
	Replication Replication
}

// Store keeps leases and fenced values in Redis or Redis Cluster through a
// rueidis client ([New]) or a go-redis v9 client ([NewGoRedis]). Both run
// the same scripts on the same keys, so stores on either client share
// data and give the same guarantees. It is safe for concurrent use.
type Store struct {
	views     // per-primitive state; see views.go
	replState // replica confirmation; see replication.go
	c         rclient.Client
	prefix    string
	evict     bool
	keep      string // fence retention in ms, as sent to the scripts
	cluster   bool
	wakes     wakeHub // the wake channels' subscriptions (Watch)
	// grants names this store's channels for hand-overs: a key's wake
	// channel, ":", and grants (random, one per store).
	grants string
	hot    wakehub.Contended // keys seen contended lately (see Release)

	checked atomic.Bool // the server check passed and still stands
	delex   atomic.Bool // every node has DELEX (valid once checked)
	checkMu chan struct{}

	ttlCache atomic.Pointer[ttlString]
}

// ttlString caches the decimal form of the last TTL sent, which saves an
// allocation per call when callers use one TTL.
type ttlString struct {
	ms int64
	s  string
}

// New returns a Store on c. o may be nil for the defaults. A nil client or
// a bad option (see [Options]) is an error wrapping tenure.ErrInvalid. The
// client is
// the caller's: it is neither configured nor closed by the store. Create it
// with DisableRetry: the store's writes are idempotent per token, but the
// caller, not the client, should decide when to send one again (the
// lease.Locker does).
//
// New does not contact the server. The server check ([Store.Check]) runs
// before the first write and whenever a connection failed since.
func New(c rueidis.Client, o *Options) (*Store, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: redisstore: nil rueidis.Client", tenure.ErrInvalid)
	}
	if err := validate(o); err != nil {
		return nil, err
	}
	return newStore(rclient.Rueidis(c), o), nil
}

// NewGoRedis returns a Store on a go-redis v9 client: a *redis.Client (one
// server, or the failover client of redis.NewFailoverClient) or a
// *redis.ClusterClient, as redis.NewUniversalClient returns them. o may be
// nil for the defaults. The store runs the same Lua scripts on the same
// keys as a Store made by [New], so the two can share a server and its
// data. The client is the caller's: it is neither configured nor closed by
// the store. A nil client, a *redis.Ring or a bad option (see [Options])
// is an error wrapping tenure.ErrInvalid. A Ring is refused because it
// moves keys to another shard when one is down, which would hand a held
// lease to a second holder.
//
// Recommended client options:
//
//   - MaxRetries: -1. go-redis sends a command again after a network error
//     or a read timeout, even when the server already applied it. The
//     store stays safe with retries on (no write is applied twice in a way
//     that grants, admits or allows more), but a retried write can be
//     reported wrongly; see the package documentation, "Client retries".
//   - ContextTimeoutEnabled: true, so that a call ends when its context
//     does rather than after the client's ReadTimeout.
//
// NewGoRedis does not contact the server. The server check ([Store.Check])
// runs before the first write and whenever a connection failed since.
func NewGoRedis(c redis.UniversalClient, o *Options) (*Store, error) {
	switch cc := c.(type) {
	case nil:
		return nil, fmt.Errorf("%w: redisstore: nil redis.UniversalClient", tenure.ErrInvalid)
	case *redis.Client:
		if cc == nil {
			return nil, fmt.Errorf("%w: redisstore: nil *redis.Client", tenure.ErrInvalid)
		}
	case *redis.ClusterClient:
		if cc == nil {
			return nil, fmt.Errorf("%w: redisstore: nil *redis.ClusterClient", tenure.ErrInvalid)
		}
	case *redis.Ring:
		return nil, fmt.Errorf("%w: redisstore: a *redis.Ring moves keys to another shard when one is down; use a *redis.Client or *redis.ClusterClient", tenure.ErrInvalid)
	}
	if err := validate(o); err != nil {
		return nil, err
	}
	return newStore(rclient.GoRedis(c), o), nil
}

// validate checks o against the bounds documented on [Options].
func validate(o *Options) error {
	if o == nil {
		return nil
	}
	if o.FenceRetention < 0 || o.FenceRetention > MaxFenceRetention {
		return fmt.Errorf("%w: redisstore: Options.FenceRetention is %v, want 0 (none, the default) up to %v", tenure.ErrInvalid, o.FenceRetention, MaxFenceRetention)
	}
	return validateReplication(o.Replication)
}

func newStore(c rclient.Client, o *Options) *Store {
	s := &Store{c: c, prefix: DefaultPrefix, checkMu: make(chan struct{}, 1)}
	keep := DefaultFenceRetention
	var repl Replication
	if o != nil {
		repl = o.Replication
		if o.Prefix != "" {
			s.prefix = escape(o.Prefix)
		}
		s.evict = o.AllowEviction
		if o.FenceRetention > 0 {
			keep = o.FenceRetention
		}
	}
	s.keep = strconv.FormatInt(ceilMillis(keep), 10)
	s.grants = randomHex(8)
	s.cluster = c.Cluster()
	s.repl = newReplConfig(repl)
	return s
}

// ceilMillis rounds d up to whole milliseconds.
func ceilMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// ttlArg returns the TTL in whole milliseconds (rounded up, so the store
// never grants less than asked) and its decimal form.
func (s *Store) ttlArg(ttl time.Duration) (int64, string) {
	ms := ceilMillis(ttl)
	if c := s.ttlCache.Load(); c != nil && c.ms == ms {
		return ms, c.s
	}
	str := strconv.FormatInt(ms, 10)
	s.ttlCache.Store(&ttlString{ms: ms, s: str})
	return ms, str
}

// escape percent-encodes '%', '{' and '}' so that a string can sit inside
// a hash tag without ending it early.
func escape(s string) string {
	if !strings.ContainsAny(s, "%{}") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			b.WriteString("%25")
		case '{':
			b.WriteString("%7B")
		case '}':
			b.WriteString("%7D")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// pair returns prefix{name}:a and prefix{name}:b, built in one allocation.
func (s *Store) pair(name, a, b string) (string, string) {
	name = escape(name)
	both := s.prefix + "{" + name + "}:" + a + s.prefix + "{" + name + "}:" + b
	n := len(s.prefix) + len(name) + 3 + len(a)
	return both[:n], both[n:]
}

// leaseKeys returns the lock and fence keys of a lease.
func (s *Store) leaseKeys(key string) (lock, fence string) { return s.pair(key, "lock", "fence") }

// leaseKeys3 returns the lock, fence and holder keys of a lease, built in
// one allocation.
func (s *Store) leaseKeys3(key string) (lock, fence, holder string) {
	key = escape(key)
	base := len(s.prefix) + len(key) + 3 // prefix{key}:
	all := s.prefix + "{" + key + "}:lock" + s.prefix + "{" + key + "}:fence" + s.prefix + "{" + key + "}:holder"
	a, b := base+len("lock"), base+len("lock")+base+len("fence")
	return all[:a], all[a:b], all[b:]
}

// leaseKeySet is every key of a lease, the channel that wakes its waiters
// and the fence floor of its hash slot.
type leaseKeySet struct{ lock, fence, holder, queue, stays, handover, wake, floor string }

// leaseSuffixes are the names of a lease's keys after its hash tag, in the
// order of leaseKeySet.
var leaseSuffixes = [...]string{"lock", "fence", "holder", "queue", "stays", "handover", "wake"}

// allKeys returns every key of a lease (see leaseKeySet), built in one
// allocation: the acquire and release scripts take most of them.
func (s *Store) allKeys(key string) leaseKeySet {
	tag := escape(key)
	var nb [8]byte
	n := strconv.AppendUint(nb[:0], uint64(floorTags()[slot(tag)]), 10)
	base := len(s.prefix) + len(tag) + len("{}:")
	size := len(s.prefix) + len("{") + len(n) + len(floorSuffix)
	for _, suf := range leaseSuffixes {
		size += base + len(suf)
	}
	var b strings.Builder
	b.Grow(size)
	var ends [len(leaseSuffixes)]int
	for i, suf := range leaseSuffixes {
		b.WriteString(s.prefix)
		b.WriteByte('{')
		b.WriteString(tag)
		b.WriteString("}:")
		b.WriteString(suf)
		ends[i] = b.Len()
	}
	b.WriteString(s.prefix)
	b.WriteByte('{')
	b.Write(n)
	b.WriteString(floorSuffix)
	all := b.String()
	return leaseKeySet{
		lock:     all[:ends[0]],
		fence:    all[ends[0]:ends[1]],
		holder:   all[ends[1]:ends[2]],
		queue:    all[ends[2]:ends[3]],
		stays:    all[ends[3]:ends[4]],
		handover: all[ends[4]:ends[5]],
		wake:     all[ends[5]:ends[6]],
		floor:    all[ends[6]:],
	}
}

// queueKeys returns the keys of a lease's queue of waiters (by arrival,
// by the end of their stay, and their hand-overs) and the channel that
// wakes them, all under the lease's hash tag.
func (s *Store) queueKeys(key string) (queue, stays, handover, wake string) {
	base := s.prefix + "{" + escape(key) + "}:"
	return base + "queue", base + "stays", base + "handover", base + "wake"
}

// FenceFloorKey returns the name of the key that holds the fence floor of
// lease key's hash slot: the greatest fence granted in the slot, which
// every later grant there exceeds (see the package documentation). It is
// for operators and experiments that look at the store's keys; nothing
// needs it to use the store.
func (s *Store) FenceFloorKey(key string) string { return s.floorKey(escape(key)) }

// floorKey returns the fence floor of the hash slot of the hash tag {tag}
// (tag as it appears in the key, escaped): <prefix>{<n>}:floor, where n is
// the smallest number whose decimal form hashes to that slot. Every grant
// in the slot raises it to its fence. It never collides with another key
// of the store (a lease's keys end in lock, fence, holder, queue or
// stays, a fenced resource's in value or admitted, and the other
// primitives' keys carry a tag or a marker of their own: {s:, {sched:,
// idem{, rl{, sync{), and List, which reads only keys ending in
// "}:fence", never takes it for a lease.
func (s *Store) floorKey(tag string) string {
	var buf [64]byte
	b := append(buf[:0], s.prefix...)
	b = append(b, '{')
	b = strconv.AppendUint(b, uint64(floorTags()[slot(tag)]), 10)
	b = append(b, floorSuffix...)
	return string(b)
}

// floorSuffix ends every fence floor key.
const floorSuffix = "}:floor"

// floorTags maps each hash slot to the smallest number whose decimal form
// hashes to it (all below 110,000): the tags of the fence floors. Built
// once, on the first grant.
var floorTags = sync.OnceValue(func() *[slots]uint32 {
	var tags [slots]uint32
	var found [slots]bool
	var buf [8]byte
	for n, left := uint32(0), slots; left > 0; n++ {
		sl := slotOf(strconv.AppendUint(buf[:0], uint64(n), 10))
		if !found[sl] {
			found[sl], tags[sl] = true, n
			left--
		}
	}
	return &tags
})

// valueKeys returns the value key and the admitted-fence key of a fenced
// resource.
func (s *Store) valueKeys(resource string) (value, admitted string) {
	return s.pair(resource, "value", "admitted")
}

// Lua scripts, embedded and run with EVALSHA (EVAL after NOSCRIPT).
var (
	//go:embed lua/acquire.lua
	acquireSrc string
	//go:embed lua/renew.lua
	renewSrc string
	//go:embed lua/release.lua
	releaseSrc string
	//go:embed lua/leave.lua
	leaveSrc string
	//go:embed lua/inspect.lua
	inspectSrc string
	//go:embed lua/fencedset.lua
	fencedSetSrc string

	// luaFiles holds every script of every view, so that the server check
	// loads each one on every node, a script added later included.
	//go:embed lua/*.lua
	luaFiles embed.FS
	// scriptSources are the scripts the server check loads on every node.
	scriptSources = allScripts()

	acquireScript   = rclient.NewScript(acquireSrc)
	renewScript     = rclient.NewScript(renewSrc)
	releaseScript   = rclient.NewScript(releaseSrc)
	leaveScript     = rclient.NewScript(leaveSrc)
	inspectScript   = rclient.NewScriptReadOnly(inspectSrc)
	fencedSetScript = rclient.NewScript(fencedSetSrc)
)

// ready runs the server check unless it passed already and no connection
// failed since. After the first call it costs an atomic load.
func (s *Store) ready(ctx context.Context) error {
	if s.checked.Load() {
		return nil
	}
	select {
	case s.checkMu <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", lease.ErrUnavailable, ctx.Err())
	}
	defer func() { <-s.checkMu }()
	if s.checked.Load() {
		return nil
	}
	return s.check(ctx)
}

// Check checks every node the client knows (c.Nodes(): the server, or every
// master and replica of a cluster) and remembers the result:
//
//   - INFO memory: a maxmemory_policy other than noeviction is refused
//     with ErrEvictionPolicy unless Options.AllowEviction (INFO works where
//     CONFIG is disabled);
//   - INFO server: Redis 7.0 or later is required (script flags, and TIME
//     inside scripts with effects replication);
//   - COMMAND INFO DELEX: releases use DELEX key IFEQ token when every node
//     has it, and the compare-and-delete script otherwise;
//   - SCRIPT LOAD of the store's scripts, so that the first call of each
//     after a restart is one EVALSHA, not EVALSHA, NOSCRIPT and EVAL;
//   - unless Options.Replication.Off, INFO replication, INFO persistence
//     and COMMAND INFO WAITAOF of every primary (found with CLUSTER SLOTS
//     on a cluster): how many replicas each write waits for, and with
//     which command (see [Replication]).
//
// The store runs the check by itself before its first write, so calling
// Check is optional; it reports a misconfigured server early, and runs
// again every time it is called. A failed check is not remembered: the next
// write checks again, as does the first write after a connection failure
// (the client may have reconnected to a restarted or different server).
// A server reconfigured at runtime (CONFIG SET maxmemory-policy) is noticed
// by the next explicit Check, not by writes.
func (s *Store) Check(ctx context.Context) error {
	select {
	case s.checkMu <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", lease.ErrUnavailable, ctx.Err())
	}
	defer func() { <-s.checkMu }()
	return s.check(ctx)
}

// nodeCheck is what the check learned about one node.
type nodeCheck struct {
	addr  string
	delex bool
	err   error
}

// check runs the server check; the caller holds checkMu.
func (s *Store) check(ctx context.Context) error {
	s.checked.Store(false)
	nodes, err := s.c.Nodes(ctx)
	if errors.Is(err, rclient.ErrUnsupported) {
		return fmt.Errorf("%w: %w", lease.ErrInvalid, err)
	}
	if err != nil {
		return s.classify(fmt.Errorf("redisstore: list the nodes: %w", err), err)
	}
	if len(nodes) == 0 {
		return fmt.Errorf("%w: redisstore: the client knows no node", lease.ErrUnavailable)
	}
	results := make([]nodeCheck, 0, len(nodes))
	if len(nodes) == 1 {
		results = append(results, s.checkNode(ctx, nodes[0].Addr, nodes[0].Client))
	} else {
		var (
			mu sync.Mutex
			wg sync.WaitGroup
		)
		for _, n := range nodes {
			wg.Go(func() {
				r := s.checkNode(ctx, n.Addr, n.Client)
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	delex := true
	var errs []error
	for _, r := range results {
		if r.err != nil {
			errs = append(errs, r.err)
		}
		delex = delex && r.delex
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if !s.repl.off {
		// Learn how many replicas each primary has: writes wait for them.
		v, err := s.loadView(ctx)
		if err != nil {
			return s.classify(err, errors.Unwrap(err))
		}
		s.replView.Store(v)
	}
	s.delex.Store(delex)
	s.checked.Store(true)
	return nil
}

// checkNode checks one node in one round trip.
func (s *Store) checkNode(ctx context.Context, addr string, n rclient.Client) nodeCheck {
	r := nodeCheck{addr: addr}
	cmds := make([]rclient.Cmd, 0, 3+len(scriptSources))
	cmds = append(cmds,
		rclient.Cmd{Name: "INFO", Args: []string{"server"}},
		rclient.Cmd{Name: "INFO", Args: []string{"memory"}},
		rclient.Cmd{Name: "COMMAND", Args: []string{"INFO", "DELEX"}},
	)
	// Load the scripts in the same round trip, so that EVALSHA finds them
	// on a fresh or restarted server and every call stays one round trip
	// (without it, the first call of each script sends EVALSHA, gets
	// NOSCRIPT and sends EVAL). Failures are harmless: EVAL remains.
	for _, src := range scriptSources {
		cmds = append(cmds, rclient.Cmd{Name: "SCRIPT", Args: []string{"LOAD", src}})
	}
	res := n.DoMulti(ctx, cmds...)
	server, err := res[0].ToString()
	if err == nil {
		var memory string
		if memory, err = res[1].ToString(); err == nil {
			r.err = s.judgeNode(addr, server, memory)
		}
	}
	if err != nil {
		if _, ok := rclient.ServerError(err); ok && s.evict {
			// INFO refused (ACL): nothing to judge that the caller did not
			// already accept.
			err = nil
		} else {
			r.err = s.classify(fmt.Errorf("redisstore: check node %s: %w", addr, err), err)
			return r
		}
	}
	// COMMAND INFO DELEX answers [nil] where the command does not exist.
	if arr, err := res[2].ToArray(); err == nil && len(arr) == 1 && !arr[0].IsNil() {
		if cmd, err := arr[0].ToArray(); err == nil && len(cmd) > 0 {
			r.delex = true
		}
	}
	return r
}

// judgeNode checks a node's INFO server and INFO memory sections.
func (s *Store) judgeNode(addr, server, memory string) error {
	if v := infoField(server, "redis_version"); v != "" {
		major, _, _ := strings.Cut(v, ".")
		if m, err := strconv.Atoi(major); err == nil && m < 7 {
			return fmt.Errorf("redisstore: node %s runs Redis %s; 7.0 or later is required", addr, v)
		}
	}
	if s.evict {
		return nil
	}
	policy := infoField(memory, "maxmemory_policy")
	if policy == "" {
		return fmt.Errorf("%w: node %s does not report maxmemory_policy in INFO memory; set Options.AllowEviction to accept it unchecked", ErrEvictionPolicy, addr)
	}
	if policy != "noeviction" {
		return fmt.Errorf("%w: node %s has maxmemory-policy %s, which evicts leases, fences and guarded values like cache entries; use a server with noeviction or set Options.AllowEviction", ErrEvictionPolicy, addr, policy)
	}
	return nil
}

// infoField returns the value of name in an INFO reply ("" if absent).
func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// fail classifies an error of a request: server replies become plain errors
// (or ErrOutOfMemory, or ErrUnavailable for a server that is not serving),
// everything else (network, context) wraps lease.ErrUnavailable.
func (s *Store) fail(err error) error { return s.classify(err, err) }

// classify classifies cause and returns wrapped, annotated accordingly.
func (s *Store) classify(wrapped, cause error) error {
	if errors.Is(cause, ErrUnconfirmed) || errors.Is(cause, lease.ErrUnavailable) {
		return wrapped // judged already (see confirm and confirming)
	}
	msg, ok := rclient.ServerError(cause)
	if !ok {
		if !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
			// The connection failed: the client may reconnect to a
			// restarted or different server, so check it again.
			s.checked.Store(false)
		}
		return fmt.Errorf("%w: %w", lease.ErrUnavailable, wrapped)
	}
	switch {
	case strings.HasPrefix(msg, "OOM"):
		return fmt.Errorf("%w: %w", ErrOutOfMemory, wrapped)
	case strings.Contains(msg, "redisstore: invalid"):
		return fmt.Errorf("%w: the server refused the arguments: %w", lease.ErrInvalid, wrapped)
	case strings.HasPrefix(msg, "LOADING"), strings.HasPrefix(msg, "CLUSTERDOWN"), strings.HasPrefix(msg, "TRYAGAIN"), strings.HasPrefix(msg, "BUSY"),
		strings.HasPrefix(msg, "MASTERDOWN"), strings.HasPrefix(msg, "READONLY"), strings.HasPrefix(msg, "NOREPLICAS"),
		strings.HasPrefix(msg, "MOVED "), strings.HasPrefix(msg, "ASK "):
		// Not serving right now (loading, failing over, busy script, a
		// slot that moved under a confirmed write, which follows only a
		// few redirections): the request was refused, but callers should
		// treat the store as unavailable and retry. The server may have
		// changed: check again.
		s.checked.Store(false)
		return fmt.Errorf("%w: server not ready: %w", lease.ErrUnavailable, wrapped)
	}
	return fmt.Errorf("redisstore: server error: %w", wrapped)
}

// malformed reports a reply the scripts never produce.
func malformed(what string) error {
	return fmt.Errorf("redisstore: unexpected reply to %s", what)
}

// allScripts returns the source of every embedded script.
func allScripts() []string {
	ents, err := fs.ReadDir(luaFiles, "lua")
	if err != nil {
		panic(err) // embedded at build time: cannot fail
	}
	srcs := make([]string, 0, len(ents))
	for _, e := range ents {
		b, err := fs.ReadFile(luaFiles, "lua/"+e.Name())
		if err != nil {
			panic(err)
		}
		srcs = append(srcs, string(b))
	}
	return srcs
}

// randomHex returns n random bytes in hex ("0" repeated when the system's
// randomness fails, which crypto/rand does not report since Go 1.24).
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
