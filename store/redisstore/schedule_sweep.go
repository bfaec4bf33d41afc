package redisstore

import (
	"context"
	_ "embed"
	"strconv"
	"strings"

	"github.com/tenurekit/tenure/retention"
	"github.com/tenurekit/tenure/store/redisstore/internal/rclient"
)

//go:embed lua/schedule_trim.lua
var schedTrimSrc string

var schedTrimScript = rclient.NewScript(schedTrimSrc)

// Sweep deletes schedule slot records final for o.ScheduleRetention
// (default 30 days), each job's latest excepted, with their ledger
// entries: at most o.Limit records per call, Result.More saying to call
// again (retention.Sweeper, so `tenure serve` and `tenure sweep` run it).
// Every other record the store keeps carries a TTL and expires on its own,
// so this is all a Redis store has to sweep. It walks the jobs with SCAN
// on every node (MATCH on the store's prefix), and trims each job in one
// script on the job's hash slot; a record being written meanwhile is
// never touched, as the script re-reads each one.
func (s *Store) Sweep(ctx context.Context, o retention.Options) (retention.Result, error) {
	o, err := o.Resolve()
	if err != nil {
		return retention.Result{}, err
	}
	nodes, err := s.c.Nodes(ctx)
	if err != nil {
		return retention.Result{}, s.fail(err)
	}
	res := retention.Result{Deleted: map[string]int{retention.ScheduleSlots: 0, retention.ScheduleLedger: 0}}
	pattern := globEscape(s.prefix+"{sched:") + "*" + globEscape("}:slots")
	seen := map[string]bool{}
	var jobs []string
	for _, n := range nodes {
		cursor := "0"
		for {
			arr, err := n.Client.Do(ctx, rclient.Cmd{Name: "SCAN", Args: []string{cursor, "MATCH", pattern, "COUNT", scanCount}, ReadOnly: true}).ToArray()
			if err != nil {
				return res, s.fail(err)
			}
			if len(arr) != 2 {
				return res, malformed("scan")
			}
			next, e1 := arr[0].ToString()
			keys, e2 := arr[1].ToArray()
			if e1 != nil || e2 != nil {
				return res, malformed("scan")
			}
			for _, m := range keys {
				k, err := m.ToString()
				if err != nil {
					return res, malformed("scan")
				}
				if !seen[k] {
					seen[k] = true
					jobs = append(jobs, k)
				}
			}
			if next == "0" {
				break
			}
			cursor = next
		}
	}
	keep := strconv.FormatInt(o.ScheduleRetention.Microseconds(), 10)
	for _, slots := range jobs {
		left := o.Limit - res.Deleted[retention.ScheduleSlots]
		if left <= 0 {
			res.More = true
			break
		}
		tag := strings.TrimSuffix(slots, "slots")
		arr, err := schedTrimScript.Exec(ctx, s.c, []string{slots, tag + "ledger"}, []string{tag, keep, strconv.Itoa(left)}).ToArray()
		if err != nil {
			return res, s.fail(err)
		}
		if len(arr) != 3 {
			return res, malformed("schedule trim")
		}
		recs, e1 := arr[0].AsInt64()
		ledger, e2 := arr[1].AsInt64()
		more, e3 := arr[2].AsInt64()
		if e1 != nil || e2 != nil || e3 != nil {
			return res, malformed("schedule trim")
		}
		res.Add(retention.ScheduleSlots, int(recs))
		res.Add(retention.ScheduleLedger, int(ledger))
		res.More = res.More || more == 1
	}
	return res, nil
}
