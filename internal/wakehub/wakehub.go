// Package wakehub fans a store's lease wake-ups out to the waiters that
// watch a key (lease/driver.Waker). A store receives wake-ups its own way
// (in process, Redis pub/sub, PostgreSQL LISTEN) and hands them to a Hub;
// each watcher has a channel with a small buffer (Buffer) that keeps the
// newest wake-ups, so a slow watcher never blocks the others or the store.
package wakehub

import (
	"sync"
	"time"

	"github.com/tenurekit/tenure/lease/driver"
)

// Hub is the watchers of a store's keys. The zero value is ready to use;
// it is safe for concurrent use.
type Hub struct {
	mu sync.Mutex
	w  map[string]*Set
	n  int // watchers, over all keys
}

// Watch returns a channel that receives key's wake-ups for the waiter me
// (a lease/driver.WaiterID, or "" for a watcher that takes every wake-up;
// see Set), and the function that stops it. The channel is never closed.
func (h *Hub) Watch(key, me string) (<-chan string, func()) {
	ch := make(chan string, Buffer)
	h.mu.Lock()
	if h.w == nil {
		h.w = map[string]*Set{}
	}
	w := h.w[key]
	if w == nil {
		w = &Set{}
		h.w[key] = w
	}
	w.Add(ch, me)
	h.n++
	h.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if w := h.w[key]; w != nil {
				w.Remove(ch, me)
				if w.Len() == 0 {
					delete(h.w, key)
				}
			}
			h.n--
		})
	}
}

// Wake passes a wake-up naming who (a lease/driver.WaiterID, or a
// lease/driver.GrantWake for one; "" for any waiter) to key's watchers, as
// Set.Send does.
func (h *Hub) Wake(key, who string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w := h.w[key]; w != nil {
		w.Send(who)
	}
}

// WakeAll passes a wake-up naming who to every watcher of every key (after
// a lost connection, when wake-ups may have been missed).
func (h *Hub) WakeAll(who string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range h.w {
		w.Send(who)
	}
}

// Watchers reports how many watchers the hub has, over all keys.
func (h *Hub) Watchers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// Set is the watchers of one key, each a channel and the waiter it
// watches for. A wake-up that names a waiter goes to that waiter's
// watchers and to those watching for "" (which take every wake-up); one
// that names none goes to all. So a release that wakes the first of many
// waiters in a process wakes one goroutine, not every waiter of the key.
// The zero value is empty; its owner's lock guards it.
type Set struct {
	all map[chan string]struct{}            // every watcher
	any map[chan string]struct{}            // watching for ""
	by  map[string]map[chan string]struct{} // by the waiter watched for
}

// Add adds ch, watching for the waiter me ("" for every wake-up).
func (s *Set) Add(ch chan string, me string) {
	if s.all == nil {
		s.all = map[chan string]struct{}{}
	}
	s.all[ch] = struct{}{}
	if me == "" {
		if s.any == nil {
			s.any = map[chan string]struct{}{}
		}
		s.any[ch] = struct{}{}
		return
	}
	if s.by == nil {
		s.by = map[string]map[chan string]struct{}{}
	}
	if s.by[me] == nil {
		s.by[me] = map[chan string]struct{}{}
	}
	s.by[me][ch] = struct{}{}
}

// Remove removes ch, added for me.
func (s *Set) Remove(ch chan string, me string) {
	delete(s.all, ch)
	if me == "" {
		delete(s.any, ch)
		return
	}
	if w := s.by[me]; w != nil {
		delete(w, ch)
		if len(w) == 0 {
			delete(s.by, me)
		}
	}
}

// Len reports how many watchers s has.
func (s *Set) Len() int { return len(s.all) }

// Send passes a wake-up naming who to the watchers it concerns (see Set),
// without blocking (see the package Send).
func (s *Set) Send(who string) {
	me, _, _ := driver.ParseWake(who)
	if me == "" {
		for ch := range s.all {
			Send(ch, who)
		}
		return
	}
	for ch := range s.by[me] {
		Send(ch, who)
	}
	for ch := range s.any {
		Send(ch, who)
	}
}

// Buffer is the size of a watcher's channel. A wake-up that hands a
// waiter the key (lease/driver.GrantWake) may be followed at once by one
// for another waiter (the next one leaving, say), before the watcher ran:
// a buffer of more than one keeps the grant there.
const Buffer = 4

// Send puts who into ch without blocking: a full buffer drops its oldest
// wake-up for who.
func Send(ch chan string, who string) {
	select {
	case ch <- who:
		return
	default:
	}
	select {
	case <-ch:
	default:
	}
	select {
	case ch <- who:
	default:
	}
}

// ContendedFor is how long a key counts as contended after a store last
// marked it (Contended.Mark: pgstore when it saw the key refused or
// released with waiters, redisstore when one of its waiters was refused).
const ContendedFor = 10 * time.Second

// Contended remembers the keys a store saw contended lately, for a release
// that hands such a key on in its own write (one round trip to the
// hand-off) where other keys take a cheaper path. It keeps at most 4096
// keys. The zero value is ready to use; it is safe for concurrent use.
type Contended struct {
	mu    sync.Mutex
	until map[string]time.Time
}

// Mark counts key as contended from now on, for ContendedFor.
func (c *Contended) Mark(key string) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.until == nil {
		c.until = map[string]time.Time{}
	}
	if len(c.until) >= 4096 {
		for k, t := range c.until {
			if now.After(t) {
				delete(c.until, k)
			}
		}
	}
	if len(c.until) < 4096 {
		c.until[key] = now.Add(ContendedFor)
	}
}

// Is reports whether key counts as contended.
func (c *Contended) Is(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.until[key]
	return ok && time.Now().Before(t)
}
