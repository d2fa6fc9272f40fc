package sensors

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sluice-streams/sluice/source/kafka"
	"github.com/sluice-streams/sluice/source/ownership"
	"github.com/sluice-streams/sluice/stream"
)

// demoInstance is one worker of the demo.
type demoInstance struct {
	id       string
	w        *Worker
	cancel   context.CancelFunc
	stopping bool
	final    *Stats // once it stopped
}

func (in *demoInstance) stats() Stats {
	if in.final != nil {
		return *in.final
	}
	return in.w.Stats()
}

type instanceEnd struct {
	in  *demoInstance
	err error
}

// startInstance starts the next worker.
func (d *demo) startInstance(ctx context.Context) error {
	id := fmt.Sprintf("w%d", len(d.instances)+1)
	// An instance stops when the demo tells it (gracefully), not at once
	// with the caller's context.
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w, err := New(wctx, Config{Conn: kafka.Conn{Brokers: d.brokers}, Redis: d.rdb, InstanceID: id, Pipeline: "sensors-" + id,
		Interval: d.cfg.Interval, Expiration: d.cfg.Expiration, IdleClose: d.cfg.IdleClose, Logger: d.cfg.Logger,
		Retention: max(DefaultRetention, time.Duration(d.cfg.simMinutes())*time.Minute+10*time.Minute),
		OnChange: func(c ownership.Change) {
			d.changes.Lock()
			if c.Started {
				d.starts++
			} else {
				d.stops++
			}
			d.changes.Unlock()
		}})
	if err != nil {
		cancel()
		return fmt.Errorf("starting %s: %w", id, err)
	}
	in := &demoInstance{id: id, w: w, cancel: cancel}
	d.instances = append(d.instances, in)
	d.liveMu.Lock()
	d.live = append(d.live, w.Graph())
	d.liveMu.Unlock()
	go func() { d.ended <- instanceEnd{in, w.Run(wctx)} }()
	return nil
}

// heldLimit bounds the wait for the instances to take every partition
// before the load starts.
const heldLimit = 30 * time.Second

// waitHeld waits until the instances hold every partition of the readings
// topic between them, and says how long it took: a load sent before
// would pile up unread, and the first status lines would show the
// instances still claiming rather than the pipeline at work.
func (d *demo) waitHeld(ctx context.Context) error {
	limit := time.After(heldLimit)
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	for {
		held := map[int32]bool{}
		for _, in := range d.instances {
			for _, p := range in.w.Owned() {
				held[p] = true
			}
		}
		if len(held) == int(d.cfg.Partitions) {
			fmt.Fprintf(d.out, "the instances took all %d partitions in %v; sending the load (its clock starts now)\n",
				d.cfg.Partitions, time.Since(d.start).Round(time.Millisecond))
			return nil
		}
		select {
		case <-poll.C:
		case e := <-d.ended:
			if err := d.onEnd(e); err != nil {
				return err
			}
		case <-limit:
			return fmt.Errorf("the instances did not take every partition within %v: %d of %d held", heldLimit, len(held), d.cfg.Partitions)
		case <-ctx.Done():
			return nil
		}
	}
}

// onEnd records an instance's end: one that was told to stop, or one that
// failed, which ends the run.
func (d *demo) onEnd(e instanceEnd) error {
	d.stopped(e.in)
	switch {
	case !e.in.stopping && e.err != nil:
		return fmt.Errorf("instance %s: %w", e.in.id, e.err)
	case !e.in.stopping:
		return fmt.Errorf("instance %s stopped by itself", e.in.id)
	case e.err != nil:
		// Nothing is lost: what it had not settled is read again by the
		// partitions' next owners, from its last checkpoints.
		fmt.Fprintf(d.out, "%5.1fs %s stopped: %v; its unsettled readings are read again by the next owners\n", d.elapsed(), e.in.id, e.err)
	default:
		fmt.Fprintf(d.out, "%5.1fs %s stopped: its final checkpoints written, its partitions free for the others\n", d.elapsed(), e.in.id)
	}
	return nil
}

// stopAll stops the instances still running and waits for them; once.
func (d *demo) stopAll() error {
	var errs []error
	waiting := 0
	for _, in := range d.instances {
		if in.final == nil {
			if !in.stopping {
				in.stopping = true
				in.cancel()
			}
			waiting++
		}
	}
	limit := time.After(30 * time.Second)
	for waiting > 0 {
		select {
		case e := <-d.ended:
			waiting--
			d.stopped(e.in)
			if e.err != nil {
				errs = append(errs, fmt.Errorf("instance %s: %w", e.in.id, e.err))
			}
		case <-limit:
			return errors.Join(append(errs, fmt.Errorf("%d instances did not stop within 30 s", waiting))...)
		}
	}
	return errors.Join(errs...)
}

// stopped records the final counts of an instance that ended, and takes
// its pipeline off /status.
func (d *demo) stopped(in *demoInstance) {
	st := in.w.Stats()
	in.final = &st
	d.liveMu.Lock()
	d.live = slices.DeleteFunc(d.live, func(g *stream.Graph) bool { return g == in.w.Graph() })
	d.liveMu.Unlock()
}

// liveGraphs returns the running instances' pipelines.
func (d *demo) liveGraphs() []*stream.Graph {
	d.liveMu.Lock()
	defer d.liveMu.Unlock()
	return slices.Clone(d.live)
}
