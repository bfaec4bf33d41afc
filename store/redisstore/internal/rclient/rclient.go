// Package rclient runs the store's commands and Lua scripts on either of the
// two supported Redis clients, rueidis and go-redis v9, behind one small
// interface. The scripts, keys and reply parsing stay in redisstore; this
// package only sends commands and hands back replies in one shape.
package rclient

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// Cmd is one command: its name, the tokens that come between the name and
// the keys (Pre: a script's digest or body and its key count, for EVALSHA
// and EVAL), its keys (every key the command touches, in order) and its
// remaining arguments. ReadOnly marks commands that only read.
type Cmd struct {
	Name     string
	Pre      []string
	Keys     []string
	Args     []string
	ReadOnly bool
}

// Node is one server a client knows, with a client bound to it.
type Node struct {
	Addr   string
	Client Client
}

// Client is what the store needs from a Redis client.
type Client interface {
	// Do sends one command.
	Do(ctx context.Context, c Cmd) Result
	// DoMulti sends several commands in one round trip where the client
	// can (a pipeline), and returns their results in order.
	DoMulti(ctx context.Context, cmds ...Cmd) []Result
	// Eval runs a script: EVALSHA, then EVAL if the node answers NOSCRIPT
	// (script caches are per node), routed by the first key.
	Eval(ctx context.Context, s *Script, keys, args []string) Result
	// Pinned sends cmds in order over one connection, which no other call
	// uses meanwhile, and returns their results in order. It follows no
	// redirection and retries nothing, so every result comes from that
	// connection: a WAIT among cmds counts the writes sent before it. It
	// is for clients bound to one server (a single node, a failover
	// client, or a node of [Client.Nodes]); a cluster client answers every
	// command with ErrUnsupported.
	Pinned(ctx context.Context, cmds ...Cmd) []Result
	// Nodes returns every node the client knows (a single server, or each
	// master and replica of a cluster), each with a client bound to it.
	Nodes(ctx context.Context) ([]Node, error)
	// Cluster reports whether the client talks to a Redis Cluster.
	Cluster() bool
	// Subscribe subscribes to channels (SSUBSCRIBE when sharded, all in
	// one hash slot, else SUBSCRIBE) on one connection and calls fn with
	// each message, in one goroutine, until stop is called, which
	// unsubscribes. It returns once the server has confirmed every
	// channel's subscription, or with an error.
	Subscribe(ctx context.Context, channels []string, sharded bool, fn func(msg string)) (stop func(), err error)
}

// Script is a Lua script, run with EVALSHA (EVALSHA_RO for a read-only
// one) and EVAL after NOSCRIPT.
type Script struct {
	src string
	sha string // hex SHA-1 of src, as EVALSHA takes it
	g   *redis.Script
	ro  bool
}

// NewScript returns a script that may write.
func NewScript(src string) *Script {
	return &Script{src: src, sha: sha1Hex(src), g: redis.NewScript(src)}
}

// NewScriptReadOnly returns a script that only reads (run with EVAL_RO and
// EVALSHA_RO).
func NewScriptReadOnly(src string) *Script {
	return &Script{src: src, sha: sha1Hex(src), g: redis.NewScript(src), ro: true}
}

func sha1Hex(src string) string {
	sum := sha1.Sum([]byte(src))
	return hex.EncodeToString(sum[:])
}

// Source returns the script's text.
func (s *Script) Source() string { return s.src }

// Cmd returns the script as a command, EVALSHA (EVALSHA_RO) with its
// digest or, with body set, EVAL (EVAL_RO) with its text, for
// [Client.Pinned].
func (s *Script) Cmd(keys, args []string, body bool) Cmd {
	name, pre := "EVALSHA", s.sha
	if body {
		name, pre = "EVAL", s.src
	}
	if s.ro {
		name += "_RO"
	}
	return Cmd{Name: name, Pre: []string{pre, strconv.Itoa(len(keys))}, Keys: keys, Args: args, ReadOnly: s.ro}
}

// IsNoScript reports whether err is the server's NOSCRIPT reply (EVALSHA
// of a script the node does not have).
func IsNoScript(err error) bool {
	msg, ok := ServerError(err)
	return ok && strings.HasPrefix(msg, "NOSCRIPT")
}

// ErrorResult returns a result that carries err, as a command that could
// not be sent.
func ErrorResult(err error) Result { return Result{err: err, isG: true} }

// Exec runs the script on c.
func (s *Script) Exec(ctx context.Context, c Client, keys, args []string) Result {
	return c.Eval(ctx, s, keys, args)
}

// ErrNil is the error of a conversion of a nil reply (a missing key).
var ErrNil = errors.New("redis: nil reply")

// IsNil reports whether err is the error of a nil reply, from either client.
func IsNil(err error) bool {
	return errors.Is(err, ErrNil) || rueidis.IsRedisNil(err) || errors.Is(err, redis.Nil)
}

// ServerError reports whether err is an error reply of the server (not a
// nil reply, not a connection or context error), and returns its message.
func ServerError(err error) (string, bool) {
	if err == nil {
		return "", false
	}
	if re, ok := rueidis.IsRedisErr(err); ok {
		return re.Error(), true
	}
	var ge redis.Error
	if errors.As(err, &ge) && !errors.Is(err, redis.Nil) {
		return ge.Error(), true
	}
	return "", false
}

// Result is the reply to one command, or its error.
type Result struct {
	r   rueidis.RedisResult
	g   any
	err error
	isG bool
}

// Error returns the error of the command (a nil reply is not an error).
func (r Result) Error() error {
	if !r.isG {
		if err := r.r.Error(); err != nil && !rueidis.IsRedisNil(err) {
			return err
		}
		return nil
	}
	return r.err
}

func (r Result) msg() (Message, error) {
	if !r.isG {
		m, err := r.r.ToMessage()
		if err != nil {
			return Message{}, err
		}
		return Message{r: &m}, nil
	}
	if r.err != nil {
		return Message{}, r.err
	}
	return Message{g: r.g, isG: true}, nil
}

// ToArray returns an array reply's elements.
func (r Result) ToArray() ([]Message, error) {
	if !r.isG {
		arr, err := r.r.ToArray()
		if err != nil {
			return nil, err
		}
		out := make([]Message, len(arr))
		for i := range arr {
			out[i].r = &arr[i]
		}
		return out, nil
	}
	m, err := r.msg()
	if err != nil {
		return nil, err
	}
	return m.ToArray()
}

// AsInt64 returns an integer reply (or a string reply parsed as one).
func (r Result) AsInt64() (int64, error) {
	if !r.isG {
		return r.r.AsInt64()
	}
	m, err := r.msg()
	if err != nil {
		return 0, err
	}
	return m.AsInt64()
}

// ToString returns a string reply.
func (r Result) ToString() (string, error) {
	if !r.isG {
		return r.r.ToString()
	}
	m, err := r.msg()
	if err != nil {
		return "", err
	}
	return m.ToString()
}

// AsBytes returns a string reply as bytes.
func (r Result) AsBytes() ([]byte, error) {
	if !r.isG {
		return r.r.AsBytes()
	}
	m, err := r.msg()
	if err != nil {
		return nil, err
	}
	return m.AsBytes()
}

// AsStrSlice returns an array reply of strings.
func (r Result) AsStrSlice() ([]string, error) {
	if !r.isG {
		return r.r.AsStrSlice()
	}
	arr, err := r.ToArray()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(arr))
	for i, m := range arr {
		if out[i], err = m.ToString(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// AsStrMap returns a map reply (RESP3) or a flat field/value array reply
// (RESP2) as a map of strings.
func (r Result) AsStrMap() (map[string]string, error) {
	if !r.isG {
		return r.r.AsStrMap()
	}
	if r.err != nil {
		return nil, r.err
	}
	switch v := r.g.(type) {
	case map[any]any:
		out := make(map[string]string, len(v))
		for k, val := range v {
			ks, err1 := (Message{g: k, isG: true}).ToString()
			vs, err2 := (Message{g: val, isG: true}).ToString()
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("redis: unexpected map entry %T: %T", k, val)
			}
			out[ks] = vs
		}
		return out, nil
	case map[string]string:
		return v, nil
	case []any:
		out := make(map[string]string, len(v)/2)
		for i := 0; i+1 < len(v); i += 2 {
			ks, err1 := (Message{g: v[i], isG: true}).ToString()
			vs, err2 := (Message{g: v[i+1], isG: true}).ToString()
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("redis: unexpected array entry %T: %T", v[i], v[i+1])
			}
			out[ks] = vs
		}
		return out, nil
	case nil:
		return nil, ErrNil
	}
	return nil, fmt.Errorf("redis: unexpected reply %T, want a map", r.g)
}

// Message is one element of a reply.
type Message struct {
	r   *rueidis.RedisMessage
	g   any
	isG bool
}

// IsNil reports a nil reply.
func (m Message) IsNil() bool {
	if !m.isG {
		return m.r == nil || m.r.IsNil()
	}
	return m.g == nil
}

// ToArray returns an array reply's elements.
func (m Message) ToArray() ([]Message, error) {
	if !m.isG {
		arr, err := m.r.ToArray()
		if err != nil {
			return nil, err
		}
		out := make([]Message, len(arr))
		for i := range arr {
			out[i].r = &arr[i]
		}
		return out, nil
	}
	switch v := m.g.(type) {
	case []any:
		out := make([]Message, len(v))
		for i, e := range v {
			out[i] = Message{g: e, isG: true}
		}
		return out, nil
	case nil:
		return nil, ErrNil
	}
	return nil, fmt.Errorf("redis: unexpected reply %T, want an array", m.g)
}

// AsInt64 returns an integer (or a string parsed as one).
func (m Message) AsInt64() (int64, error) {
	if !m.isG {
		return m.r.AsInt64()
	}
	switch v := m.g.(type) {
	case int64:
		return v, nil
	case string:
		return strconv.ParseInt(v, 10, 64)
	case nil:
		return 0, ErrNil
	}
	return 0, fmt.Errorf("redis: unexpected reply %T, want an integer", m.g)
}

// ToString returns a string.
func (m Message) ToString() (string, error) {
	if !m.isG {
		return m.r.ToString()
	}
	switch v := m.g.(type) {
	case string:
		return v, nil
	case nil:
		return "", ErrNil
	}
	return "", fmt.Errorf("redis: unexpected reply %T, want a string", m.g)
}

// AsBytes returns a string as bytes.
func (m Message) AsBytes() ([]byte, error) {
	if !m.isG {
		return m.r.AsBytes()
	}
	s, err := m.ToString()
	if err != nil {
		return nil, err
	}
	return []byte(s), nil
}

// AsFloat64 returns a double (or a string or integer read as one).
func (m Message) AsFloat64() (float64, error) {
	if !m.isG {
		return m.r.AsFloat64()
	}
	switch v := m.g.(type) {
	case float64:
		return v, nil
	case int64:
		return float64(v), nil
	case string:
		return strconv.ParseFloat(v, 64)
	case nil:
		return 0, ErrNil
	}
	return 0, fmt.Errorf("redis: unexpected reply %T, want a number", m.g)
}
