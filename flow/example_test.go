package flow_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	gsflow "github.com/reugn/go-streams/flow"

	"github.com/sluice-streams/sluice/backpressure"
	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/sink"
	"github.com/sluice-streams/sluice/source"
	"github.com/sluice-streams/sluice/stream"
)

func collect[T any](g *stream.Graph, s stream.Stream[T]) *sink.Collector[T] {
	c := sink.Collect[T]()
	stream.To(s, c)
	if err := g.Run(context.Background()); err != nil {
		fmt.Println(err)
	}
	return c
}

func ExampleMap() {
	g := stream.New()
	s := stream.Via(stream.From(g, source.Slice([]string{"a", "bb"})), flow.Map(func(s string) (int, error) { return len(s), nil }))
	fmt.Println(collect(g, s).Values())
	// Output: [1 2]
}

func ExampleFilter() {
	g := stream.New()
	s := stream.Via(stream.From(g, source.Slice([]int{1, 2, 3, 4})), flow.Filter(func(n int) bool { return n%2 == 0 }))
	fmt.Println(collect(g, s).Values())
	// Output: [2 4]
}

func ExampleFlatMap() {
	g := stream.New()
	s := stream.Via(stream.From(g, source.Slice([]string{"a b", "", "c"})), flow.FlatMap(func(s string) ([]string, error) {
		return strings.Fields(s), nil
	}))
	fmt.Println(collect(g, s).Values())
	// Output: [a b c]
}

func ExampleBatch() {
	g := stream.New()
	s := stream.Via(stream.From(g, source.Slice([]int{1, 2, 3, 4, 5})), flow.Batch[int](2, time.Second))
	fmt.Println(collect(g, s).Values())
	// Output: [[1 2] [3 4] [5]]
}

func ExampleThrottle() {
	g := stream.New()
	s := stream.Via(stream.From(g, source.Slice([]int{1, 2, 3})), flow.Throttle[int](1000, 1))
	fmt.Println(collect(g, s).Values())
	// Output: [1 2 3]
}

// A go-streams operator inside a sluice pipeline: its Batch groups values,
// then a sluice Map sums each group.
func ExampleGoStreams() {
	g := stream.New()
	groups := stream.Via(stream.From(g, source.Slice([]int{1, 2, 3, 4, 5, 6})),
		flow.GoStreams[int, []int](gsflow.NewBatch[int](3, time.Minute)))
	sums := stream.Via(groups, flow.Map(func(vs []int) (int, error) {
		t := 0
		for _, v := range vs {
			t += v
		}
		return t, nil
	}))
	fmt.Println(collect(g, sums).Values())
	// Output: [6 15]
}

// Calls run concurrently; with the default (unordered) results leave as
// they finish, so the output is sorted here only for printing.
func ExampleMapAsync() {
	g := stream.New()
	lookup := flow.MapAsync(8, func(ctx context.Context, id int) (string, error) {
		time.Sleep(time.Duration(5-id) * time.Millisecond) // later ids answer sooner
		return fmt.Sprintf("account-%d", id), nil
	}, flow.CallTimeout(time.Second))
	s := stream.Via(stream.From(g, source.Slice([]int{1, 2, 3, 4})), lookup)
	got := collect(g, s).Values()
	slices.Sort(got)
	fmt.Println(got, lookup.Stats().Calls)
	// Output: [account-1 account-2 account-3 account-4] 4
}

// InOrder keeps input order; MapAsyncByKey keeps it per key.
func ExampleInOrder() {
	g := stream.New()
	s := stream.Via(stream.From(g, source.Slice([]int{1, 2, 3, 4})), flow.MapAsync(4,
		func(ctx context.Context, n int) (int, error) {
			time.Sleep(time.Duration(5-n) * time.Millisecond)
			return n * 10, nil
		}, flow.InOrder()))
	fmt.Println(collect(g, s).Values())
	// Output: [10 20 30 40]
}

// Retries with a policy from a file, a budget and a breaker for one
// dependency; exhausted transient failures are marked for parking.
func ExampleRetry() {
	policies, err := flow.LoadRetryPolicies("../docs/retry-policies.json", os.Environ())
	if err != nil {
		fmt.Println(err)
		return
	}
	policy, _ := policies.Get("interactive")
	budget, _ := backpressure.NewRetryBudget(0.1, 10)
	breaker, _ := backpressure.NewBreaker(backpressure.BreakerConfig{Name: "accounts"})
	calls := 0
	checkAccount := func(ctx context.Context, id string) (string, error) {
		if calls++; calls == 1 {
			return "", stream.Transient(errors.New("connection reset"))
		}
		return id + ":ok", nil
	}
	g := stream.New()
	s := stream.Via(stream.From(g, source.Slice([]string{"acct-1"})),
		flow.MapAsync(1, checkAccount, flow.Retry(policy), flow.Budget(budget), flow.Breaker(breaker)))
	fmt.Println(collect(g, s).Messages()[0].Attempt, calls)
	// Output: 2 2
}

// MapAsyncByKey runs one call at a time per key, in input order, and
// different keys at once: here the events of one account never overlap.
func ExampleMapAsyncByKey() {
	type event struct {
		account string
		n       int
	}
	events := []event{{"a", 1}, {"b", 1}, {"a", 2}, {"b", 2}, {"a", 3}}
	g := stream.New()
	byAccount := func(m *stream.Message[event]) string { return m.Value.account }
	s := stream.Via(stream.From(g, source.Slice(events)), flow.MapAsyncByKey(8, byAccount,
		func(ctx context.Context, e event) (event, error) {
			time.Sleep(time.Duration(4-e.n) * time.Millisecond) // later events are faster: order still holds per account
			return e, nil
		}))
	perAccount := map[string][]int{}
	for _, e := range collect(g, s).Values() {
		perAccount[e.account] = append(perAccount[e.account], e.n)
	}
	fmt.Println(perAccount["a"], perAccount["b"])
	// Output: [1 2 3] [1 2]
}

// Delay holds each message until due says: here 30 ms apart by offset. A
// replay pipeline uses sink/kafka.ReplayAt as due, the replay time that
// kafkasink.NewParking wrote in the record's headers.
func ExampleDelay() {
	start := time.Now()
	due := func(e *stream.Envelope) time.Time { return start.Add(time.Duration(e.Offset) * 30 * time.Millisecond) }
	g := stream.New()
	waits := []time.Duration{0, 30 * time.Millisecond, 60 * time.Millisecond}
	held := stream.Via(stream.From(g, source.Slice(waits)), flow.Delay[time.Duration](due))
	passed := stream.Via(held, flow.Map(func(wait time.Duration) (string, error) {
		return fmt.Sprintf("due after %v, passed on after at least that: %v", wait, time.Since(start) >= wait), nil
	}))
	for _, line := range collect(g, passed).Values() {
		fmt.Println(line)
	}
	// Output:
	// due after 0s, passed on after at least that: true
	// due after 30ms, passed on after at least that: true
	// due after 60ms, passed on after at least that: true
}

// A derived priority: paying customers high (0), free ones
// low (1). A message whose level cannot be told fails to the failure
// stream, to be dead-lettered with the reason.
func ExamplePrioritize() {
	g := stream.New(stream.WithLogger(slog.New(slog.DiscardHandler)))
	orders := stream.From(g, source.Slice([]string{"alice:paying", "bob:free"}))
	tiered := stream.Via(orders, flow.Prioritize(2, func(order string) (int, error) {
		if strings.HasSuffix(order, ":paying") {
			return 0, nil
		}
		return 1, nil
	}))
	for _, m := range collect(g, tiered).Messages() {
		fmt.Println(m.Value, "level", m.Priority)
	}
	// Output:
	// alice:paying level 0
	// bob:free level 1
}

// Lanes serve an asynchronous stage by level: with one call at a time,
// the paying customers' orders, queued behind the free ones, are called
// first. The first order arrives alone; its call lets the others in and
// waits until they are queued (the stage's Stats tell by level); a call
// in flight is never cut.
func ExampleLanes() {
	g := stream.New(stream.WithLogger(slog.New(slog.DiscardHandler)))
	in := make(chan string, 5)
	in <- "ann:free"
	tiered := stream.Via(stream.From(g, source.Channel(in)), flow.Prioritize(2, func(order string) (int, error) {
		if strings.HasSuffix(order, ":paying") {
			return 0, nil
		}
		return 1, nil
	}))
	var (
		calls []string
		stage *flow.Async[string, string]
	)
	stage = flow.MapAsync(1, func(_ context.Context, order string) (string, error) {
		if len(calls) == 0 {
			for _, o := range []string{"bob:free", "cy:paying", "dee:free", "eve:paying"} {
				in <- o
			}
			close(in)
			for queued(stage) < 4 {
				time.Sleep(time.Millisecond)
			}
		}
		calls = append(calls, order) // one call at a time: no race
		return order, nil
	}, flow.Lanes(backpressure.StrictPriority(2)), flow.Window(8)) // Window: room for all five
	collect(g, stream.Via(tiered, stage))
	fmt.Println(strings.Join(calls, " "))
	// Output:
	// ann:free cy:paying eve:paying bob:free dee:free
}

// queued is how many messages wait for a call in a stage with lanes.
func queued(a *flow.Async[string, string]) int64 {
	n := int64(0)
	for _, l := range a.Stats().Levels {
		n += l.Waiting
	}
	return n
}
