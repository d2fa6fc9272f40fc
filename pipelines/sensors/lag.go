package sensors

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Lag is how many records wait to be read in the partitions a worker
// holds, by partition, as far as it is known.
type Lag struct {
	// Records counts, for each partition held whose lag is known, the
	// records the broker holds that the worker has not yet sent down its
	// pipeline.
	Records map[int32]int64
	// Unknown lists the partitions held whose lag is not known: not
	// started yet (its checkpoint is being read), or the broker did not
	// say where its log ends. Their records are not in Total.
	Unknown []int32
}

// Total returns the records waiting in the partitions whose lag is known.
func (l Lag) Total() int64 {
	var n int64
	for _, r := range l.Records {
		n += r
	}
	return n
}

// String returns the total, ">=" it and the partitions whose lag is
// unknown if there are any, or "unknown" if no partition's lag is known
// (none held, or the broker did not answer): never a 0 that nobody
// counted.
func (l Lag) String() string {
	switch {
	case len(l.Records) == 0:
		return "unknown"
	case len(l.Unknown) == 0:
		return fmt.Sprint(l.Total())
	}
	return fmt.Sprintf(">=%d (unknown for partitions %s)", l.Total(), partitionList(l.Unknown))
}

func partitionList(ps []int32) string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = fmt.Sprint(p)
	}
	return strings.Join(names, ", ")
}

// Lag asks the broker where the logs of the partitions held end and
// returns how many of their records the worker has not sent down its
// pipeline yet (kafka's Unsent). A partition held and not started yet,
// or one the broker gives no end for (within ctx), is Unknown.
func (w *Worker) Lag(ctx context.Context) Lag {
	l := Lag{Records: map[int32]int64{}}
	held := w.Owned()
	if len(held) == 0 {
		return l
	}
	unsent, _ := w.src.Unsent(ctx) // what failed is left out: unknown
	for _, p := range held {
		if n, ok := unsent[p]; ok {
			l.Records[p] = n
		} else {
			l.Unknown = append(l.Unknown, p)
		}
	}
	return l
}

// merge adds o to l: a partition held by two instances (changing hands)
// counts the larger of its two lags.
func (l *Lag) merge(o Lag) {
	if l.Records == nil {
		l.Records = map[int32]int64{}
	}
	for p, n := range o.Records {
		if m, ok := l.Records[p]; !ok || n > m {
			l.Records[p] = n
		}
	}
	for _, p := range o.Unknown {
		if !slices.Contains(l.Unknown, p) {
			l.Unknown = append(l.Unknown, p)
		}
	}
}

// over returns l over the partitions 0 to n-1: those with no known lag
// are unknown (nobody reads them, or their reader does not know).
func (l Lag) over(n int32) Lag {
	out := Lag{Records: maps.Clone(l.Records)}
	if out.Records == nil {
		out.Records = map[int32]int64{}
	}
	for p := range n {
		if _, ok := out.Records[p]; !ok {
			out.Unknown = append(out.Unknown, p)
		}
	}
	return out
}
