package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/tenurekit/tenure/internal/wakehub"
)

// wakeLinger is how long a channel stays subscribed after its last
// watcher stopped, for the next wait on the same key (a contended key's
// waiters watch it again with each acquire).
const wakeLinger = 2 * time.Second

// wakeHub shares one subscription per wake channel between the store's
// watchers: a server subscription is per connection, so two watchers of
// one key on one connection must not subscribe and unsubscribe it apart.
type wakeHub struct {
	mu   sync.Mutex
	subs map[string]*wakeSub
}

type wakeSub struct {
	ready  chan string // closed once subscribed, or failed (err)
	err    error
	stop   func()
	chans  wakehub.Set
	linger *time.Timer // set while no watcher is left
}

// watch returns a channel that receives when channel, or one of also, is
// published to with a wake-up for waiter (see wakehub.Set), and its stop.
// The store subscribes to them all on one connection, shared by every
// watcher of channel, and watch returns once the server confirmed each.
func (s *Store) watch(ctx context.Context, waiter, channel string, also ...string) (<-chan string, func(), error) {
	h := &s.wakes
	ch := make(chan string, wakehub.Buffer)
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[string]*wakeSub{}
	}
	sub, shared := h.subs[channel]
	if !shared {
		sub = &wakeSub{ready: make(chan string)}
		h.subs[channel] = sub
	}
	if sub.linger != nil {
		sub.linger.Stop()
		sub.linger = nil
	}
	sub.chans.Add(ch, waiter)
	h.mu.Unlock()
	if !shared {
		stop, err := s.c.Subscribe(ctx, append([]string{channel}, also...), s.cluster, func(msg string) { h.fan(channel, msg) })
		h.mu.Lock()
		sub.stop, sub.err = stop, err
		if err != nil && h.subs[channel] == sub {
			delete(h.subs, channel)
		}
		h.mu.Unlock()
		close(sub.ready)
	} else {
		select {
		case <-sub.ready:
		case <-ctx.Done():
			h.unwatch(channel, sub, ch, waiter)
			return nil, nil, ctx.Err()
		}
	}
	if sub.err != nil {
		return nil, nil, sub.err
	}
	return ch, func() { h.unwatch(channel, sub, ch, waiter) }, nil
}

// subscribed reports whether the store is subscribed to channel.
func (h *wakeHub) subscribed(channel string) bool {
	h.mu.Lock()
	sub := h.subs[channel]
	h.mu.Unlock()
	if sub == nil {
		return false
	}
	select {
	case <-sub.ready:
		return sub.err == nil
	default:
		return false
	}
}

// fan passes a wake-up (the waiter it names) to the watchers of channel
// it concerns (wakehub.Set); a watcher's buffer keeps the newest
// (wakehub.Send).
func (h *wakeHub) fan(channel, who string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if sub := h.subs[channel]; sub != nil {
		sub.chans.Send(who)
	}
}

// unwatch stops ch, watching for waiter; the subscription ends
// wakeLinger after its last watcher stopped, unless another one came
// meanwhile.
func (h *wakeHub) unwatch(channel string, sub *wakeSub, ch chan string, waiter string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	sub.chans.Remove(ch, waiter)
	if sub.chans.Len() > 0 || sub.linger != nil || h.subs[channel] != sub {
		return
	}
	sub.linger = time.AfterFunc(wakeLinger, func() {
		h.mu.Lock()
		if sub.chans.Len() > 0 || h.subs[channel] != sub {
			h.mu.Unlock()
			return
		}
		delete(h.subs, channel)
		stop := sub.stop
		h.mu.Unlock()
		if stop != nil {
			stop()
		}
	})
}
