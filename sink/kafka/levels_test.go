package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/sink"
	kafkasink "github.com/sluice-streams/sluice/sink/kafka"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

// levelOf reads the level a test value names: "<level>-<name>".
func levelOf(v []byte) (int, error) {
	var l int
	_, err := fmt.Sscanf(string(v), "%d-", &l)
	return l, err
}

// Each message goes to the topic of its level, with its level in a
// header; one of a level without a topic fails as unproducible, settled
// as a failure and written nowhere (never to the high topic).
func TestTopicPerLevelRoutesEachMessageToItsLevelsTopic(t *testing.T) {
	brokers := testenv.Kfake(t, 2, "hi", "mid", "lo")
	cl := client(t, brokers)
	values := [][]byte{[]byte("0-a"), []byte("2-b"), []byte("1-c"), []byte("5-stray"), []byte("0-d"), []byte("2-e")}
	tr := stream.NewTracker(0)
	g := stream.New()
	in := stream.From(g, source.Slice(values, source.Track(tr)))
	// Prioritize knows 8 levels, the sink 3: level 5 reaches the sink.
	leveled := stream.Via(in, flow.Prioritize(8, levelOf))
	stream.To(leveled, kafkasink.NewSink(cl, kafkasink.Records(""), kafkasink.TopicPerLevel[[]byte]("hi", "mid", "lo"),
		kafkasink.LevelHeader[[]byte]("level")))
	failures := sink.Collect[stream.Failure]()
	stream.To(g.Failures(), failures)
	if err := g.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"hi": {"0-a", "0-d"}, "mid": {"1-c"}, "lo": {"2-b", "2-e"}}
	for topic, vs := range want {
		var got []string
		for _, r := range readAll(t, brokers, topic, len(vs)) {
			got = append(got, string(r.Value))
			l, _ := levelOf(r.Value)
			if h := headerOf(r, "level"); h != fmt.Sprint(l) {
				t.Errorf("%s on %s: level header %q, want %d", r.Value, topic, h, l)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, vs) {
			t.Errorf("topic %s holds %v, want %v", topic, got, vs)
		}
	}
	fs := failures.Values()
	if len(fs) != 1 || !errors.Is(fs[0].Err, kafkasink.ErrUnproducible) || !strings.Contains(fs[0].Err.Error(), "level of priority 5") {
		t.Fatalf("failures %v, want level 5's, unproducible", fs)
	}
	if st := tr.Stats(); st.Settled[stream.Completed] != 5 || st.Settled[stream.DeadLettered] != 1 {
		t.Fatalf("settled %v, want 5 completed and 1 dead-lettered", st.Settled)
	}
}

func headerOf(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// Bad arguments name the option: no topics, an empty one, two levels
// sharing a topic, an empty header key.
func TestTopicPerLevelBadArguments(t *testing.T) {
	for _, c := range []struct {
		opt  kafkasink.Option[[]byte]
		want string
	}{
		{kafkasink.TopicPerLevel[[]byte](), "none"},
		{kafkasink.TopicPerLevel[[]byte]("hi", ""), "level 1 has an empty topic"},
		{kafkasink.TopicPerLevel[[]byte]("hi", "lo", "hi"), "levels 0 and 2 share the topic"},
		{kafkasink.LevelHeader[[]byte](""), "header key is empty"},
	} {
		err := kafkasink.NewSink(&kgo.Client{}, kafkasink.Records(""), c.opt).Validate()
		var ce *stream.ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v, want a ConfigError saying %q", err, c.want)
		}
	}
}

// TopicPerLevel writes each message to the topic of its level of
// priority, here derived from the value (paying customers high).
func ExampleTopicPerLevel() {
	c := cluster("orders-high", "orders-low")
	defer c.Close()
	cl := producer(c)
	defer cl.Close()

	g := stream.New()
	orders := stream.From(g, source.Slice([][]byte{[]byte("paying:1"), []byte("free:2"), []byte("paying:3")}))
	leveled := stream.Via(orders, flow.Prioritize(2, func(v []byte) (int, error) {
		if strings.HasPrefix(string(v), "paying:") {
			return 0, nil
		}
		return 1, nil
	}))
	stream.To(leveled, kafkasink.NewSink(cl, kafkasink.Records(""), kafkasink.TopicPerLevel[[]byte]("orders-high", "orders-low")))
	if err := g.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
	for _, topic := range []string{"orders-high", "orders-low"} {
		readBack(c, topic, func(r *kgo.Record) { fmt.Printf("%s: %s\n", topic, r.Value) })
	}
	// Output:
	// orders-high: paying:1
	// orders-high: paying:3
	// orders-low: free:2
}

func TestSinkRefusesNoProducer(t *testing.T) {
	var nilClient *kgo.Client
	for name, p := range map[string]kafkasink.Producer{"nil": nil, "nil client": nilClient} {
		err := kafkasink.NewSink(p, kafkasink.Records("")).Validate()
		var ce *stream.ConfigError
		if !errors.As(err, &ce) {
			t.Fatalf("%s producer: Validate = %v, want a *stream.ConfigError", name, err)
		}
	}
}
