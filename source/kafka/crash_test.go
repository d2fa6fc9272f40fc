package kafka_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-streams/sluice/flow"
	"github.com/sluice-streams/sluice/internal/testenv"
	"github.com/sluice-streams/sluice/sink/checkpoint"
	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/stream"
)

const (
	workerEnv     = "SLUICE_CRASH_WORKER"
	crashRecords  = 200_000
	crashParts    = 8
	crashUnsettle = 500  // MaxUnsettledPerPartition of the worker
	crashPoll     = 1000 // MaxPollRecords of the worker
	crashEvery    = 1000 // checkpoint.Every
	crashInterval = 50 * time.Millisecond
)

// crashWorker is the worker process: Kafka source -> MapAsync that appends
// each record's id to the side store -> checkpoint sink. It runs until it
// is killed, or until SIGTERM (then it drains and commits).
func crashWorker() int {
	brokers := strings.Split(os.Getenv("SLUICE_BROKERS"), ",")
	store, err := os.OpenFile(os.Getenv("SLUICE_STORE"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	src, err := kafka.NewSource(ctx, kafka.Config{
		Conn: kafka.Conn{Brokers: brokers}, Group: "crash-" + os.Getenv("SLUICE_TOPIC"), Topics: []string{os.Getenv("SLUICE_TOPIC")}, Logger: quiet,
		MaxUnsettledPerPartition: crashUnsettle, MaxPollRecords: crashPoll,
		Opts: []kgo.Opt{kgo.SessionTimeout(1500 * time.Millisecond), kgo.HeartbeatInterval(300 * time.Millisecond),
			kgo.RebalanceTimeout(3 * time.Second)},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	g := stream.New(stream.WithLogger(quiet))
	s := stream.Via(stream.From(g, src), flow.MapAsync(32,
		func(_ context.Context, v []byte) ([]byte, error) {
			// One write(2) per id: a kill never leaves half a line.
			_, err := store.Write(append(v, '\n'))
			return v, err
		}))
	stream.To(s, checkpoint.New[[]byte](src, checkpoint.Every(crashEvery), checkpoint.Interval(crashInterval)))
	runErr := g.Run(ctx)
	closeErr := src.Close(context.Background())
	if runErr != nil || closeErr != nil {
		fmt.Fprintln(os.Stderr, runErr, closeErr)
		return 1
	}
	return 0
}

// crashTest produces crashRecords ids, then runs workers that it SIGKILLs at
// random moments `kills` times, and a last one that it lets finish. Every
// id must reach the side store (0 lost); duplicates must stay within the
// in-flight cap plus one commit interval per kill.
func crashTest(t *testing.T, brokers []string, topic string) {
	testenv.Produce(t, brokers, topic, crashRecords, func(i int) []byte { return strconv.AppendInt(nil, int64(i), 10) })
	store := t.TempDir() + "/processed.log"
	start := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), workerEnv+"=1", "SLUICE_BROKERS="+strings.Join(brokers, ","), "SLUICE_STORE="+store, "SLUICE_TOPIC="+topic)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	const kills = 5
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	var lines []int // lines in the store at each kill
	for range kills {
		w := start()
		// Let it join and process for a while, then kill it without warning.
		deadline := time.Now().Add(20 * time.Second)
		before := countLines(t, store)
		for countLines(t, store) == before && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(time.Duration(20+rng.IntN(150)) * time.Millisecond)
		_ = w.Process.Signal(syscall.SIGKILL)
		_ = w.Wait()
		lines = append(lines, countLines(t, store))
	}
	last := start()
	deadline := time.Now().Add(90 * time.Second)
	var seen map[int]int
	for {
		seen = readStore(t, store)
		if len(seen) == crashRecords || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = last.Process.Signal(syscall.SIGTERM)
	if err := last.Wait(); err != nil {
		t.Errorf("last worker: %v", err)
	}
	seen = readStore(t, store)
	lost := 0
	for i := range crashRecords {
		if seen[i] == 0 {
			lost++
		}
	}
	total := 0
	for _, n := range seen {
		total += n
	}
	dups := total - len(seen)
	// A kill replays at most what was delivered and not committed: the
	// unsettled cap (plus one poll) of every partition, plus what completed
	// since the last commit (Every, or one Interval at the rate we ran).
	rate := float64(total) / 10 // generous: at least 10 s of processing across the run
	perKill := crashParts*crashUnsettle + crashPoll + crashEvery + int(rate*crashInterval.Seconds())
	t.Logf("%d records, %d kills (store lines at each: %v): lost %d, duplicates %d (bound %d per kill, %d in all)",
		crashRecords, kills, lines, lost, dups, perKill, kills*perKill)
	if lost != 0 {
		t.Fatalf("%d records lost", lost)
	}
	midway := 0
	for _, n := range lines {
		if n < crashRecords {
			midway++
		}
	}
	if midway < 3 {
		t.Fatalf("only %d of %d kills hit a worker mid-stream (lines %v): the test proves too little", midway, kills, lines)
	}
	if dups > kills*perKill {
		t.Fatalf("%d duplicates exceed the bound %d", dups, kills*perKill)
	}
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

func readStore(t *testing.T, path string) map[int]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) {
			return map[int]int{}
		}
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[int]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		id, err := strconv.Atoi(sc.Text())
		if err != nil {
			t.Fatalf("bad line in the side store: %q", sc.Text())
		}
		seen[id]++
	}
	return seen
}

func TestCrashSafetyKfake(t *testing.T) {
	if testing.Short() {
		t.Skip("crashes and restarts consumers for seconds: make test runs it, -short does not")
	}
	brokers := testenv.KfakeWith(t, kfake.SeedTopics(crashParts, "in"), kfake.GroupMinSessionTimeout(500*time.Millisecond))
	crashTest(t, brokers, "in")
}
