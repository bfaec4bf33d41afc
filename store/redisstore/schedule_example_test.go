package redisstore_test

import (
	"context"
	"time"

	"github.com/redis/rueidis"

	"github.com/tenurekit/tenure/schedule"
	"github.com/tenurekit/tenure/store/redisstore"
)

// A cache refresh whose effect lives in Redis: the fenced completion writes
// it together with the ledger entry (compiled, not run: it needs a server).
func ExampleStore_CompleteSlot() {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"localhost:6379"}, DisableRetry: true})
	if err != nil {
		panic(err)
	}
	db, err := redisstore.New(c, nil)
	if err != nil {
		panic(err)
	}
	s, err := schedule.New(db.Schedules(), nil)
	if err != nil {
		panic(err)
	}
	err = s.Add(schedule.Job{
		Name:     "refresh-rates",
		Schedule: schedule.Every(5 * time.Minute),
		Run: func(ctx context.Context, slot *schedule.Slot) error {
			rates := []byte(`{"EUR":1}`) // computed by the handler
			return db.CompleteSlot(ctx, slot,
				redisstore.SetSlotValue("rates", rates),
				redisstore.AddSlotValue("refreshes", 1))
		},
	})
	if err != nil {
		panic(err)
	}
	s.Run(context.Background())
}
