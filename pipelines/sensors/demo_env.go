package sensors

import (
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/sluice-streams/sluice/source/ownership/redisstore"
)

// demoEnv is what a demo runs on: an embedded broker and an embedded
// Redis, with the aggregates' store and the ownership store on it.
type demoEnv struct {
	cluster *kfake.Cluster
	mr      *miniredis.Miniredis
	rdb     *redis.Client
	store   *Store
	owners  *redisstore.Store
}

// startDemoEnv starts the embedded broker (with the readings and
// dead-letter topics) and Redis, and opens the stores.
func startDemoEnv(cfg DemoConfig) (*demoEnv, error) {
	e := &demoEnv{}
	if err := e.start(cfg); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// start starts what startDemoEnv says; close undoes what it did, also
// when it failed partway.
func (e *demoEnv) start(cfg DemoConfig) error {
	var err error
	e.cluster, err = kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(cfg.Partitions, DefaultTopic),
		kfake.SeedTopics(4, DefaultDeadLetterTopic))
	if err != nil {
		return fmt.Errorf("starting the embedded broker: %w", err)
	}
	if e.mr, err = miniredis.Run(); err != nil {
		return fmt.Errorf("starting the embedded Redis: %w", err)
	}
	e.rdb = redis.NewClient(&redis.Options{Addr: e.mr.Addr(), PoolSize: 64})
	span := time.Duration(cfg.simMinutes()) * time.Minute
	if e.store, err = NewStore(e.rdb, DefaultNamespace, max(DefaultRetention, span+10*time.Minute)); err != nil {
		return err
	}
	e.owners, err = redisstore.New(redisstore.Config{Client: e.rdb, Namespace: DefaultNamespace, Stream: DefaultTopic,
		Group: DefaultGroup, Expiration: cfg.Expiration})
	return err
}

// close closes what start opened, the last first.
func (e *demoEnv) close() {
	if e.rdb != nil {
		e.rdb.Close()
	}
	if e.mr != nil {
		e.mr.Close()
	}
	if e.cluster != nil {
		e.cluster.Close()
	}
}

// partitionsOf lists the partitions 0 to n-1.
func partitionsOf(n int32) []int32 {
	partitions := make([]int32, n)
	for i := range partitions {
		partitions[i] = int32(i)
	}
	return partitions
}
