package redisstore

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/tenurekit/tenure/lease"
	leasedriver "github.com/tenurekit/tenure/lease/driver"
	"github.com/tenurekit/tenure/store/redisstore/internal/rclient"
)

// listReaders is how many Inspect scripts List keeps in flight at once.
const listReaders = 16

// List returns the keys the store remembers (every key with a fence key:
// held, or free with its last fence until the fence key expires) that
// start with prefix and sort after after, in byte order, at most limit of
// them, each with its current holder's description (lease.Lister).
//
// It walks the fence keys with SCAN (MATCH <prefix>{<prefix>*}:fence,
// COUNT 1000) on every master, keeping only the limit smallest keys after
// after, so its memory is bounded by limit whatever the number of keys;
// then it reads each of them with the same script as Inspect. A SCAN
// visits every key that exists for the whole walk; keys written or
// expiring meanwhile may or may not be listed, and a key whose fence key
// expired before it was read is left out. The walk costs time in
// proportion to the number of keys the store keeps under its prefix, not
// to limit: it is meant for operators, not for a request path.
func (v leases) List(ctx context.Context, prefix, after string, limit int) ([]lease.Info, error) {
	if err := leasedriver.ValidateList(prefix, after, limit); err != nil {
		return nil, err
	}
	s := v.s
	nodes, err := s.c.Nodes(ctx)
	if err != nil {
		return nil, s.fail(err)
	}
	pattern := globEscape(s.prefix+"{"+escape(prefix)) + "*" + globEscape("}:fence")
	page := make([]string, 0, limit)
	for _, n := range nodes {
		if page, err = s.scanLeases(ctx, n.Client, pattern, prefix, after, limit, page); err != nil {
			return nil, err
		}
	}
	return s.readLeases(ctx, page)
}

// scanLeases adds the lease keys that one node holds (nothing for a
// replica: its master is scanned) to page, the sorted limit smallest keys
// after after.
func (s *Store) scanLeases(ctx context.Context, c rclient.Client, pattern, prefix, after string, limit int, page []string) ([]string, error) {
	cursor := "0"
	for first := true; ; first = false {
		scan := rclient.Cmd{Name: "SCAN", Args: []string{cursor, "MATCH", pattern, "COUNT", scanCount}, ReadOnly: true}
		var res rclient.Result
		if first {
			// ROLE in the same round trip as the first SCAN. A server that
			// refuses ROLE (ACL) is scanned: a key seen twice is kept once.
			rs := c.DoMulti(ctx, rclient.Cmd{Name: "ROLE", ReadOnly: true}, scan)
			role, err := rs[0].ToArray()
			if _, refused := rclient.ServerError(err); err != nil && !refused {
				return nil, s.fail(err)
			}
			if err == nil {
				if len(role) == 0 {
					return nil, malformed("role")
				}
				if r, err := role[0].ToString(); err != nil {
					return nil, malformed("role")
				} else if r != "master" {
					return page, nil
				}
			}
			res = rs[1]
		} else {
			res = c.Do(ctx, scan)
		}
		arr, err := res.ToArray()
		if err != nil {
			return nil, s.fail(err)
		}
		if len(arr) != 2 {
			return nil, malformed("scan")
		}
		next, e1 := arr[0].ToString()
		keys, e2 := arr[1].ToArray()
		if e1 != nil || e2 != nil {
			return nil, malformed("scan")
		}
		for _, m := range keys {
			raw, err := m.ToString()
			if err != nil {
				return nil, malformed("scan")
			}
			k, ok := s.leaseKeyOf(raw)
			if !ok || !strings.HasPrefix(k, prefix) || k <= after {
				continue
			}
			page = insertBounded(page, k, limit)
		}
		if next == "0" {
			return page, nil
		}
		cursor = next
	}
}

// insertBounded inserts k into the sorted page unless it is there already,
// keeping at most limit keys (the smallest).
func insertBounded(page []string, k string, limit int) []string {
	if len(page) == limit && k >= page[len(page)-1] {
		return page
	}
	i, found := slices.BinarySearch(page, k)
	if found {
		return page
	}
	if len(page) == limit {
		page = page[:len(page)-1]
	}
	return slices.Insert(page, i, k)
}

// leaseKeyOf returns the lease key whose fence key is raw; ok is false for
// a key the store would not write as a fence key.
func (s *Store) leaseKeyOf(raw string) (string, bool) {
	rest, ok := strings.CutPrefix(raw, s.prefix+"{")
	if !ok {
		return "", false
	}
	rest, ok = strings.CutSuffix(rest, "}:fence")
	if !ok {
		return "", false
	}
	k, ok := unescape(rest)
	if !ok || leasedriver.ValidateKey(k) != nil || escape(k) != rest {
		return "", false
	}
	return k, true
}

// readLeases reads the state of each key, a few at a time, and returns
// those the store still remembers, in the order of keys.
func (s *Store) readLeases(ctx context.Context, keys []string) ([]lease.Info, error) {
	infos := make([]lease.Info, len(keys))
	errs := make([]error, len(keys))
	sem := make(chan struct{}, listReaders)
	var wg sync.WaitGroup
	for i, k := range keys {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			infos[i], errs[i] = s.inspectLease(ctx, k)
		})
	}
	wg.Wait()
	out := make([]lease.Info, 0, len(keys))
	for i, info := range infos {
		if errs[i] != nil {
			return nil, errs[i]
		}
		if info.Held || info.Fence != 0 {
			out = append(out, info)
		}
	}
	return out, nil
}
