package rclient

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// Rueidis adapts a rueidis client.
func Rueidis(c rueidis.Client) Client { return ruClient{c} }

type ruClient struct{ c rueidis.Client }

func (c ruClient) build(cmd Cmd) rueidis.Completed {
	b := c.c.B().Arbitrary(cmd.Name)
	if len(cmd.Keys) > 0 {
		b = b.Keys(cmd.Keys...)
	}
	if len(cmd.Args) > 0 {
		b = b.Args(cmd.Args...)
	}
	if cmd.ReadOnly {
		return b.ReadOnly()
	}
	return b.Build()
}

func (c ruClient) Do(ctx context.Context, cmd Cmd) Result {
	return Result{r: c.c.Do(ctx, c.build(cmd))}
}

func (c ruClient) DoMulti(ctx context.Context, cmds ...Cmd) []Result {
	built := make(rueidis.Commands, len(cmds))
	for i, cmd := range cmds {
		built[i] = c.build(cmd)
	}
	res := c.c.DoMulti(ctx, built...)
	out := make([]Result, len(res))
	for i, r := range res {
		out[i] = Result{r: r}
	}
	return out
}

func (c ruClient) Eval(ctx context.Context, s *Script, keys, args []string) Result {
	return Result{r: s.r.Exec(ctx, c.c, keys, args)}
}

func (c ruClient) Nodes(context.Context) ([]Node, error) {
	nodes := c.c.Nodes()
	out := make([]Node, 0, len(nodes))
	for addr, n := range nodes {
		out = append(out, Node{Addr: addr, Client: ruClient{n}})
	}
	return out, nil
}

func (c ruClient) Cluster() bool { return c.c.Mode() == rueidis.ClientModeCluster }

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

func toAny(name string, keys, args []string) []any {
	out := make([]any, 0, 1+len(keys)+len(args))
	out = append(out, name)
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
	return goResult(c.c.Do(ctx, toAny(cmd.Name, cmd.Keys, cmd.Args)...))
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
		sent[i] = pipe.Do(ctx, toAny(cmd.Name, cmd.Keys, cmd.Args)...)
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

// ErrUnsupported reports a go-redis client type the store does not accept.
var ErrUnsupported = fmt.Errorf("redisstore: unsupported client")
