package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"
	"github.com/sirupsen/logrus"
)

// The serve rate suites have a network peer, gubernator: one gubernator
// daemon (github.com/gubernator-io/gubernator/v2) in process, its own only
// peer, deciding in memory, called through its gRPC API (GetRateLimits,
// one request of one hit, a leaky bucket at the suites' rate) on one
// client connection, as a service would call it. tenure serve's answer
// goes through HTTP to a store; gubernator's through gRPC to its cache.

// gubernatorEnvs holds each Env's daemon (*Env -> *gubernatorPeer).
var gubernatorEnvs sync.Map

type gubernatorPeer struct {
	once   sync.Once
	client guber.V1Client
	err    error
}

// gubernatorDecide returns one decision through gubernator's gRPC API.
func (e *Env) gubernatorDecide() (func(ctx context.Context, key string) error, error) {
	v, _ := gubernatorEnvs.LoadOrStore(e, &gubernatorPeer{})
	g := v.(*gubernatorPeer)
	g.once.Do(func() { g.client, g.err = e.startGubernator() })
	if g.err != nil {
		return nil, g.err
	}
	return func(ctx context.Context, key string) error {
		resp, err := g.client.GetRateLimits(ctx, &guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{{
			Name: "serve", UniqueKey: key, Hits: 1, Limit: benchRate, Duration: 1000,
			Algorithm: guber.Algorithm_LEAKY_BUCKET,
		}}})
		if err != nil {
			return err
		}
		if len(resp.Responses) != 1 || resp.Responses[0].Error != "" {
			return fmt.Errorf("gubernator: %v", resp.Responses)
		}
		if resp.Responses[0].Status != guber.Status_UNDER_LIMIT {
			return fmt.Errorf("gubernator refused a decision far under the limit: %v", resp.Responses[0])
		}
		return nil
	}, nil
}

func (e *Env) startGubernator() (guber.V1Client, error) {
	log := logrus.New()
	log.SetOutput(io.Discard)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := guber.SpawnDaemon(ctx, guber.DaemonConfig{
		Logger:            log.WithField("instance", "bench"),
		InstanceID:        "bench",
		GRPCListenAddress: "127.0.0.1:0",
		HTTPListenAddress: "127.0.0.1:0",
	})
	if err != nil {
		return nil, fmt.Errorf("gubernator: %w", err)
	}
	e.tb.Cleanup(d.Close)
	p := guber.PeerInfo{GRPCAddress: d.GRPCListeners[0].Addr().String(), HTTPAddress: d.HTTPListener.Addr().String()}
	d.PeerInfo = p
	d.SetPeers([]guber.PeerInfo{p})
	c, err := d.Client()
	if err != nil {
		return nil, fmt.Errorf("gubernator client: %w", err)
	}
	return c, nil
}
