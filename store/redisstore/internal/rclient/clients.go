package rclient

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// Rueidis adapts a rueidis client.
//
// A call that finds no other call of this adapter in flight (a lone
// caller) is sent as a blocking command: rueidis serves it on a pooled
// connection that the calling goroutine writes and reads itself. Calls that
// overlap others go through the client's shared, auto-pipelined connection.
// Once a rueidis pipeline has seen concurrent callers, it hands every call
// to its writer and reader goroutines; for a lone caller those two hand-offs
// cost more client CPU and latency than the round trip they share, and
// pipelining gains nothing when nothing else is waiting to be sent. The
// commands, and so the guarantees, are the same on both paths; only the
// connection differs.
func Rueidis(c rueidis.Client) Client { return &ruClient{c: c} }

type ruClient struct {
	c        rueidis.Client
	inflight atomic.Int64 // calls of this adapter in flight
}

// enter counts a call in and reports whether it is a lone one.
func (c *ruClient) enter() bool { return c.inflight.Add(1) == 1 }

func (c *ruClient) leave() { c.inflight.Add(-1) }

// builder is rueidis' builder of arbitrary commands.
type builder interface {
	Blocking() rueidis.Completed
	ReadOnly() rueidis.Completed
	Build() rueidis.Completed
}

// finish builds an arbitrary command: blocking (a pooled connection, served
// in the caller's goroutine) for a lone call, pipelined otherwise.
func finish[B builder](b B, readOnly, lone bool) rueidis.Completed {
	switch {
	case lone:
		return b.Blocking()
	case readOnly:
		return b.ReadOnly()
	}
	return b.Build()
}

func (c *ruClient) build(cmd Cmd, lone bool) rueidis.Completed {
	tokens := []string{cmd.Name}
	if len(cmd.Pre) > 0 {
		tokens = append(append(make([]string, 0, 1+len(cmd.Pre)), cmd.Name), cmd.Pre...)
	}
	b := c.c.B().Arbitrary(tokens...)
	if len(cmd.Keys) > 0 {
		b = b.Keys(cmd.Keys...)
	}
	if len(cmd.Args) > 0 {
		b = b.Args(cmd.Args...)
	}
	return finish(b, cmd.ReadOnly, lone)
}

func (c *ruClient) Do(ctx context.Context, cmd Cmd) Result {
	lone := c.enter()
	defer c.leave()
	return Result{r: c.c.Do(ctx, c.build(cmd, lone))}
}

func (c *ruClient) DoMulti(ctx context.Context, cmds ...Cmd) []Result {
	lone := c.enter()
	defer c.leave()
	built := make(rueidis.Commands, len(cmds))
	for i, cmd := range cmds {
		built[i] = c.build(cmd, lone)
	}
	res := c.c.DoMulti(ctx, built...)
	out := make([]Result, len(res))
	for i, r := range res {
		out[i] = Result{r: r}
	}
	return out
}

// Eval runs EVALSHA (EVALSHA_RO), and EVAL (EVAL_RO) when the node answers
// NOSCRIPT: script caches are per node and empty after a restart.
func (c *ruClient) Eval(ctx context.Context, s *Script, keys, args []string) Result {
	lone := c.enter()
	defer c.leave()
	name, fallback := "EVALSHA", "EVAL"
	if s.ro {
		name, fallback = "EVALSHA_RO", "EVAL_RO"
	}
	r := c.c.Do(ctx, c.script(name, s.sha, keys, args, s.ro, lone))
	if re, ok := rueidis.IsRedisErr(r.Error()); !ok || !re.IsNoScript() {
		return Result{r: r}
	}
	return Result{r: c.c.Do(ctx, c.script(fallback, s.src, keys, args, s.ro, lone))}
}

// script builds one EVAL-family command.
func (c *ruClient) script(name, body string, keys, args []string, readOnly, lone bool) rueidis.Completed {
	b := c.c.B().Arbitrary(name, body, strconv.Itoa(len(keys)))
	if len(keys) > 0 {
		b = b.Keys(keys...)
	}
	if len(args) > 0 {
		b = b.Args(args...)
	}
	return finish(b, readOnly, lone)
}

// Pinned sends cmds on a dedicated connection (rueidis Dedicate: one
// pooled connection, held for this call only, that follows no MOVED or
// ASK reply), as blocking commands, so that the call ends with its
// context rather than after the client's ConnWriteTimeout.
func (c *ruClient) Pinned(ctx context.Context, cmds ...Cmd) []Result {
	if c.c.Mode() == rueidis.ClientModeCluster {
		return unsupported(len(cmds), "a rueidis cluster client")
	}
	dc, release := c.c.Dedicate()
	defer release()
	built := make(rueidis.Commands, len(cmds))
	for i, cmd := range cmds {
		tokens := append(append(make([]string, 0, 1+len(cmd.Pre)), cmd.Name), cmd.Pre...)
		b := dc.B().Arbitrary(tokens...)
		if len(cmd.Keys) > 0 {
			b = b.Keys(cmd.Keys...)
		}
		if len(cmd.Args) > 0 {
			b = b.Args(cmd.Args...)
		}
		// Blocking: rueidis caps a call's deadline at ConnWriteTimeout
		// unless one of its commands blocks, and WAIT may outlast it.
		built[i] = b.Blocking()
	}
	res := dc.DoMulti(ctx, built...)
	out := make([]Result, len(res))
	for i, r := range res {
		out[i] = Result{r: r}
	}
	return out
}

// unsupported answers n commands with ErrUnsupported.
func unsupported(n int, what string) []Result {
	out := make([]Result, n)
	for i := range out {
		out[i] = ErrorResult(fmt.Errorf("%w: %s cannot pin a connection", ErrUnsupported, what))
	}
	return out
}

func (c *ruClient) Nodes(context.Context) ([]Node, error) {
	nodes := c.c.Nodes()
	out := make([]Node, 0, len(nodes))
	for addr, n := range nodes {
		out = append(out, Node{Addr: addr, Client: &ruClient{c: n}})
	}
	return out, nil
}

func (c *ruClient) Cluster() bool { return c.c.Mode() == rueidis.ClientModeCluster }

func (c *ruClient) Subscribe(ctx context.Context, channels []string, sharded bool, fn func(msg string)) (func(), error) {
	sub := c.c.B().Subscribe().Channel(channels...).Build()
	unsub := c.c.B().Unsubscribe().Channel(channels...).Build()
	kind := "subscribe"
	if sharded {
		sub = c.c.B().Ssubscribe().Channel(channels...).Build()
		unsub = c.c.B().Sunsubscribe().Channel(channels...).Build()
		kind = "ssubscribe"
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	confirmed := make(chan struct{})
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
	)
	rctx = rueidis.WithOnSubscriptionHook(rctx, func(s rueidis.PubSubSubscription) {
		if s.Kind != kind || !slices.Contains(channels, s.Channel) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if !seen[s.Channel] {
			seen[s.Channel] = true
			if len(seen) == len(channels) {
				close(confirmed)
			}
		}
	})
	// Receive leaves the channel subscribed when it returns: unsubscribe
	// on the connection it used.
	rctx = rueidis.WithOnReceiveReturnHook(rctx, func(err error, cc rueidis.CommandClient) error {
		uctx, ucancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ucancel()
		cc.Do(uctx, unsub)
		return err
	})
	done := make(chan error, 1)
	go func() { done <- c.c.Receive(rctx, sub, func(m rueidis.PubSubMessage) { fn(m.Message) }) }()
	select {
	case <-confirmed:
		return cancel, nil
	case err := <-done:
		cancel()
		return nil, err
	case <-ctx.Done():
		cancel()
		return nil, ctx.Err()
	}
}

// GoRedis adapts a go-redis v9 client: a *redis.Client (one server, or a
// failover client) or a *redis.ClusterClient. Other implementations of
// redis.UniversalClient (*redis.Ring, which moves keys to another shard
// when one is down) are refused by Nodes, so the store never writes
// through them.
func GoRedis(c redis.UniversalClient) Client {
	_, cluster := c.(*redis.ClusterClient)
	return goClient{c: c, cluster: cluster}
}

type goClient struct {
	c       redis.UniversalClient
	cluster bool
}

func toAny(name string, pre, keys, args []string) []any {
	out := make([]any, 0, 1+len(pre)+len(keys)+len(args))
	out = append(out, name)
	for _, p := range pre {
		out = append(out, p)
	}
	for _, k := range keys {
		out = append(out, k)
	}
	for _, a := range args {
		out = append(out, a)
	}
	return out
}

func goResult(cmd *redis.Cmd) Result {
	v, err := cmd.Result()
	if err == redis.Nil {
		return Result{isG: true}
	}
	return Result{g: v, err: err, isG: true}
}

func (c goClient) Do(ctx context.Context, cmd Cmd) Result {
	return goResult(c.c.Do(ctx, toAny(cmd.Name, cmd.Pre, cmd.Keys, cmd.Args)...))
}

func (c goClient) DoMulti(ctx context.Context, cmds ...Cmd) []Result {
	out := make([]Result, len(cmds))
	if len(cmds) == 1 {
		out[0] = c.Do(ctx, cmds[0])
		return out
	}
	pipe := c.c.Pipeline()
	sent := make([]*redis.Cmd, len(cmds))
	for i, cmd := range cmds {
		sent[i] = pipe.Do(ctx, toAny(cmd.Name, cmd.Pre, cmd.Keys, cmd.Args)...)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	for i, cmd := range sent {
		out[i] = goResult(cmd)
	}
	return out
}

func (c goClient) Eval(ctx context.Context, s *Script, keys, args []string) Result {
	a := make([]any, len(args))
	for i, v := range args {
		a[i] = v
	}
	if s.ro {
		return goResult(s.g.RunRO(ctx, c.c, keys, a...))
	}
	return goResult(s.g.Run(ctx, c.c, keys, a...))
}

// Pinned sends cmds as one pipeline of a *redis.Client, which runs on one
// pooled connection (a failover client's too). go-redis sends a pipeline
// again, whole, on a new connection after a network error when MaxRetries
// allows it, so the commands still share one connection.
func (c goClient) Pinned(ctx context.Context, cmds ...Cmd) []Result {
	cc, ok := c.c.(*redis.Client)
	if !ok {
		return unsupported(len(cmds), fmt.Sprintf("%T", c.c))
	}
	pipe := cc.Pipeline()
	sent := make([]*redis.Cmd, len(cmds))
	for i, cmd := range cmds {
		sent[i] = pipe.Do(ctx, toAny(cmd.Name, cmd.Pre, cmd.Keys, cmd.Args)...)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	out := make([]Result, len(cmds))
	for i, cmd := range sent {
		out[i] = goResult(cmd)
	}
	return out
}

func (c goClient) Nodes(ctx context.Context) ([]Node, error) {
	switch cc := c.c.(type) {
	case *redis.Client:
		return []Node{{Addr: cc.Options().Addr, Client: goClient{c: cc}}}, nil
	case *redis.ClusterClient:
		var (
			mu  sync.Mutex
			out []Node
		)
		err := cc.ForEachShard(ctx, func(_ context.Context, n *redis.Client) error {
			mu.Lock()
			out = append(out, Node{Addr: n.Options().Addr, Client: goClient{c: n}})
			mu.Unlock()
			return nil
		})
		if err != nil {
			return nil, err
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: %T is not supported; use a *redis.Client (one server or failover) or a *redis.ClusterClient", ErrUnsupported, c.c)
}

func (c goClient) Cluster() bool { return c.cluster }

func (c goClient) Subscribe(ctx context.Context, channels []string, sharded bool, fn func(msg string)) (func(), error) {
	var ps *redis.PubSub
	if sharded {
		ps = c.c.SSubscribe(ctx, channels...)
	} else {
		ps = c.c.Subscribe(ctx, channels...)
	}
	// Wait for each channel's confirmation; a message that comes between
	// two of them is passed on.
	for confirmed := 0; confirmed < len(channels); {
		m, err := ps.Receive(ctx)
		if err != nil {
			ps.Close()
			return nil, err
		}
		switch m := m.(type) {
		case *redis.Subscription:
			confirmed++
		case *redis.Message:
			fn(m.Payload)
		}
	}
	msgs := ps.Channel()
	go func() {
		for m := range msgs {
			fn(m.Payload)
		}
	}()
	return func() { ps.Close() }, nil
}

// ErrUnsupported reports a go-redis client type the store does not accept.
var ErrUnsupported = fmt.Errorf("redisstore: unsupported client")
