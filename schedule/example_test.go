package schedule_test

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/store/memstore"
)

// A job runs every 20ms; each slot's effect (adding one to a counter the
// store holds) is completed together with the slot, so it happens once per
// slot whatever the number of nodes.
func Example() {
	db, err := memstore.New(nil)
	if err != nil {
		panic(err)
	}
	s, err := schedule.New(db.Schedules(), &schedule.Options{Node: "node-1", PollInterval: 5 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	runs := 0
	err = s.Add(schedule.Job{
		Name:     "settle",
		Schedule: schedule.Every(20 * time.Millisecond),
		Run: func(ctx context.Context, slot *schedule.Slot) error {
			if err := db.CompleteSlot(ctx, slot, memstore.AddSlotValue("settled", 1)); err != nil {
				return err // schedule.ErrCompleted or a stale claim: nothing applied
			}
			if runs++; runs == 3 {
				stop()
			}
			return nil
		},
	})
	if err != nil {
		panic(err)
	}
	s.Run(ctx) // returns after a graceful stop
	n, _ := db.SlotValue(context.Background(), "settle", "settled")
	recs, _ := s.Slots(context.Background(), "settle", time.Unix(0, 0), time.Now().Add(time.Hour), 0)
	done := 0
	for _, r := range recs {
		if r.State == schedule.Done {
			done++
		}
	}
	// A slot that came due while the scheduler stopped may have run too:
	// whatever ran, each done slot settled exactly once.
	fmt.Println("settled once per done slot:", string(n) == strconv.Itoa(done) && done >= 3)
	// Output: settled once per done slot: true
}

// Cron's DST policy: 02:30 does not exist in New York on 2026-03-08, so
// the daily slot fires at the end of the gap; 01:30 happens twice on
// 2026-11-01, and the daily slot fires at the first one only.
func ExampleCron() {
	ny, _ := time.LoadLocation("America/New_York")
	gap, _ := schedule.Cron("30 2 * * *", ny)
	at := gap.Next(time.Date(2026, 3, 7, 12, 0, 0, 0, ny))
	fmt.Println(gap.ID(at))
	repeat, _ := schedule.Cron("30 1 * * *", ny)
	at = repeat.Next(time.Date(2026, 10, 31, 12, 0, 0, 0, ny))
	fmt.Println(repeat.ID(at))
	fmt.Println(repeat.ID(repeat.Next(at)))
	// Output:
	// 2026-03-08T03:00:00-04:00
	// 2026-11-01T01:30:00-04:00
	// 2026-11-02T01:30:00-05:00
}
