package redisstream_test

import (
	"testing"
	"time"

	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/source/redisstream"
	"github.com/sluice-streams/sluice/stream"
)

// Reads are sized by the room under MaxInFlight: a pipeline that settles
// nothing gets MaxInFlight entries and no more (the rest stay in the
// stream, undelivered), and each settle makes room for one more.
func TestReadsSizedByRoom(t *testing.T) {
	c := client(t, testenv.Redis(t))
	produce(t, c, "backlog", 0, 100)
	src := newSource(t, redisstream.Config{Client: c, Streams: []string{"backlog"}, Group: "g", Consumer: "c", Create: true,
		MaxInFlight: 10, MaxBatch: 4, Block: 20 * time.Millisecond})
	r := run(t, src, false)
	r.await(t, "MaxInFlight entries", count(10))
	time.Sleep(200 * time.Millisecond) // ten reads' worth of blocking: none may come
	if got, p := len(r.received()), len(pendingIDs(t, c, "backlog", "g")); got != 10 || p != 10 {
		t.Fatalf("with nothing settled: %d delivered, %d pending; want 10 and 10", got, p)
	}
	for _, m := range r.received()[:5] {
		m.Settle(stream.Completed)
	}
	r.await(t, "five more entries after five settles", count(15))
	time.Sleep(200 * time.Millisecond)
	if got, p := len(r.received()), len(pendingIDs(t, c, "backlog", "g")); got != 15 || p != 10 {
		t.Fatalf("after five settles: %d delivered, %d pending; want 15 and 10", got, p)
	}
	if st := src.Stats(); st.InFlight != 10 || st.Streams[0].Acked != 5 {
		t.Fatalf("stats %+v, want 10 in flight and 5 acked", st)
	}
}

// A paused source (a lower level of source.Priority while a higher one
// has work) reads nothing and leaves its backlog in Redis; resumed, it
// reads it all.
func TestPauseReading(t *testing.T) {
	c := client(t, testenv.Redis(t))
	produce(t, c, "low", 0, 50)
	src := newSource(t, redisstream.Config{Client: c, Streams: []string{"low"}, Group: "g", Consumer: "c", Create: true,
		Block: 20 * time.Millisecond})
	src.PauseReading()
	r := run(t, src, true)
	time.Sleep(200 * time.Millisecond) // ten reads' worth of blocking: none may come
	if got, p := len(r.received()), len(pendingIDs(t, c, "low", "g")); got != 0 || p != 0 {
		t.Fatalf("while paused: %d delivered, %d pending; want none", got, p)
	}
	src.ResumeReading()
	r.await(t, "the backlog after ResumeReading", count(50))
}
